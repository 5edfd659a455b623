"""A record is read no further than a record's cap, whoever reads it: a blob planted under a
record's digest (a 1 GB substitute for a charter or a signed record) costs each reader at most
the cap, and is refused naming the blob. On a folder the size is known before a byte is
read; on a bucket the read stops at the cap (tests/store/test_loaders.py)."""

from __future__ import annotations

import pytest
from signed_runs import signing_of

from soma.round import layout
from soma.round import signing as signatures
from soma.store import Store, record_json
from soma.store.errors import BadBlob

CAP = 1000


@pytest.fixture
def store(tmp_path, monkeypatch) -> Store:
    """A store whose whole-blob `get` fails the test: a record read goes through the cap."""
    monkeypatch.setattr(record_json, "MAX_RECORD", CAP)
    opened = Store(tmp_path / "store")

    def unbounded(digest: str) -> bytes:
        raise AssertionError(f"blob {digest} read whole, past a record's cap")

    monkeypatch.setattr(opened, "get", unbounded)
    return opened


def planted(store: Store, name: str) -> str:
    """A blob of 10 caps bound at `name`, where a record belongs."""
    digest = store.put(b"{" + b" " * (10 * CAP) + b"}")
    store.bind(name, digest)
    return digest


def test_a_planted_charter_is_refused_reading_no_more_than_the_cap(store: Store) -> None:
    digest = planted(store, layout.charter("r"))
    with pytest.raises(BadBlob, match=rf"{digest}.* more than the {CAP}"):
        signatures.charter_roster(store, "r")


def test_a_planted_signed_record_is_refused_reading_no_more_than_the_cap(
    store: Store, keys
) -> None:
    name = "r/round/0/x/client/0"
    digest = planted(store, name)
    with pytest.raises(BadBlob, match=rf"{digest}.* more than the {CAP}"):
        signatures.check(
            store, signing_of(keys), digest, name=name, writer=0, what="client 0's record"
        )
