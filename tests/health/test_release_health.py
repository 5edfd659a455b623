"""verify, repair and gc know a distributed-DP release (`<meeting>/release/<k>`, claimed by
soma.round.client before its weights are put, then bound as the client's record too).

A release's noise comes from the operating system: a rerun of its client draws other noise,
so verify never advises "rerun: it writes the same bytes" for its lost weights; it says what
works (a release that never landed is forgotten by the rerun, which releases afresh; one that
landed is restored from a backup). A garbled release name is bound again from the client's
record and the other way round (they hold one digest), gc says so when such a name blocks it,
and gc reaches what a release names before the client's record is bound.
"""

from __future__ import annotations

import os
import time

import pytest
import torch

from soma import health
from soma.round import Meeting, contribute
from soma.round.client import release_name
from soma.store import Store
from soma.strategies import load_strategy

torch.set_num_threads(1)
DP = {"clip": 0.5, "noise_multiplier": 1.0, "mode": "distributed", "clients_per_round": 2}
HOUR = 3600.0


def noisy_release(seed: int) -> dict:
    strategy = load_strategy("dp_fedavg", DP)
    start = {"fc": {"weight": torch.zeros(64)}}
    trained = {"fc": {"weight": torch.full((64,), 0.01)}}
    return strategy.local(start=start, state=None, mine=None).release(trained, start, seed=seed)


@pytest.fixture
def released(tmp_path) -> tuple[Store, Meeting, str, str]:
    """A store holding client 0's release of round 0: (store, meeting, the release's record
    digest, its weights' digest)."""
    store = Store(tmp_path)
    meeting = Meeting("dp", 0, 2, strategy="dp_fedavg", options=DP)
    made = contribute(store, meeting, noisy_release(1), mine=0, size=10, release=True)
    assert store.resolve(release_name(meeting, 0)) == store.resolve(meeting.client(0))
    assert store.resolve(meeting.client(0)) is not None
    return store, meeting, store.resolve(meeting.client(0)), made.weights


def garble(store: Store, name: str) -> None:
    (store.directory / "names" / name).write_text("garbage\n")


def test_a_lost_release_is_restored_from_a_backup_never_rerun_for_the_same_bytes(released):
    store, meeting, _, weights = released
    os.unlink(store.blob_path(weights))
    report = health.verify(store)
    (problem,) = report.problems
    assert problem.kind == "missing" and problem.digest == weights, report.lines()
    assert "client 0's distributed-DP release of round 0 of run 'dp'" in problem.fix, problem.fix
    assert "cannot be drawn again" in problem.fix and "backup" in problem.fix, problem.fix
    assert "same bytes" not in problem.fix, problem.fix


def test_a_release_that_never_landed_is_released_afresh_by_the_clients_rerun(released):
    """Its writer was killed between its claim and its weights: only `release/0` names the
    record, and the rerun forgets it (soma.round.client.released)."""
    store, meeting, _, weights = released
    store.forget(meeting.client(0))
    os.unlink(store.blob_path(weights))
    (problem,) = health.verify(store).problems
    assert "never landed" in problem.fix and "releases afresh" in problem.fix, problem.fix
    assert "same bytes" not in problem.fix, problem.fix


def test_reproducible_noise_is_rerun_for_the_same_bytes(tmp_path) -> None:
    store = Store(tmp_path)
    options = {**DP, "noise": "reproducible_not_private"}
    meeting = Meeting("dp", 0, 2, strategy="dp_fedavg", options=options)
    made = contribute(store, meeting, noisy_release(1), mine=0, size=10, release=True)
    os.unlink(store.blob_path(made.weights))
    (problem,) = health.verify(store).problems
    assert "same bytes" in problem.fix and "distributed-DP" not in problem.fix, problem.fix


@pytest.mark.parametrize("lost", ["release", "client"])
def test_a_garbled_release_or_client_name_is_bound_again_from_the_other(released, lost):
    store, meeting, record, _ = released
    name = release_name(meeting, 0) if lost == "release" else meeting.client(0)
    garble(store, name)
    (problem,) = health.verify(store).problems
    assert problem.kind == "bad-name" and f"binds it again to {record}" in problem.fix, problem
    report = health.repair(store)
    assert report.clean, report.lines()
    assert store.resolve(name) == record
    assert health.verify(store).clean


def test_gc_blocked_by_a_garbled_release_name_says_repair_binds_it_again(released) -> None:
    store, meeting, record, _ = released
    garble(store, release_name(meeting, 0))
    report = health.gc(store, min_age=health.MIN_AGE)
    (blocked,) = report.blocked
    assert "release/0" in blocked and f"`soma repair --store {store.directory}`" in blocked
    assert f"binds it again to {record}" in blocked, blocked


def test_gc_keeps_what_a_release_names_before_the_clients_record_is_bound(released) -> None:
    """Between its claim and the client's record, only `release/<k>` reaches the release:
    gc, with every blob old, removes none of it."""
    store, meeting, record, weights = released
    store.forget(meeting.client(0))
    old = time.time() - 2 * HOUR
    for digest in (record, weights):
        os.utime(store.blob_path(digest), (old, old))
    report = health.gc(store, min_age=HOUR)
    assert report.blobs_removed == 0 and not report.blocked, report.lines()
    assert store.has(record) and store.has(weights)
