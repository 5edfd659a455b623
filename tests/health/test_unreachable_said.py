"""`soma verify` says what unreachable blobs are beside their count (a clean store has some,
and a bare count reads like damage), and every size it prints is a size."""

from __future__ import annotations

from soma import health
from soma.store import Store


def test_verify_says_what_unreachable_blobs_are(tmp_path) -> None:
    store = Store(tmp_path)
    store.keep("run/lease", {"holder": 1})
    store.keep("run/lease", {"holder": 2})  # a lease renewed: the first record is unreachable
    said = health.verify(store).summary()
    assert said.endswith(
        "clean; 1 unreachable blob(s) (31 B: blobs no name reaches, what a name held before it "
        "was bound again (a lease renewed, a job rerun) or what a killed job put before naming "
        "it; harmless, and `soma gc` removes those untouched for 1 h), 0 temporaries (0 B)"
    ), said


def test_a_store_with_none_says_only_the_count_and_no_size_is_none(tmp_path) -> None:
    store = Store(tmp_path)
    store.keep("run/x", {"a": 1})
    said = health.verify(store).summary()
    assert said.endswith("clean; 0 unreachable blob(s) (0 B), 0 temporaries (0 B)"), said
    assert "None" not in said
    gc = health.gc(store, dry_run=True).lines()[-1]
    assert "None" not in gc and "(0 B)" in gc, gc
