"""What every store backend owes (README: "The store"), run against each of them.

Bytes by their sha256 and never another's, names that point at blobs, a claim that exactly one
of many racing processes wins (and the one told it won is the one written down), values with
tensors that come back alive, and damage done behind the store's back refused by any reader
that has not verified the blob yet. The backends are tests/contract/conftest.py's `KINDS`.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
import torch
from helpers import HANG, ROOT, TESTS

from soma.store import Store
from soma.store.errors import BadDigest, CorruptBlob, UnknownDigest

# --- one type ----------------------------------------------------------------------------


def test_every_kind_of_store_is_a_store_and_reopens_as_one(store: Store) -> None:
    """`Store(place)` gives a `Store` whatever the place (one type, one API: issue 50), and
    opening where it is again gives the same kind."""
    again = Store(store.directory)
    assert isinstance(store, Store) and isinstance(again, Store)
    assert type(again) is type(store) and repr(again) == repr(store)
    digest = store.keep("one/type", {"kind": type(store).__name__})
    assert again.resolve("one/type") == digest and again.recall("one/type")["kind"]


# --- bytes -------------------------------------------------------------------------------


def test_put_then_get_gives_the_bytes_back_by_their_sha256(store: Store) -> None:
    for data in [b"", b"hello", os.urandom(3000)]:
        digest = store.put(data)
        assert digest == hashlib.sha256(data).hexdigest()
        assert store.has(digest) and store.get(digest) == data
        assert Store(store.directory).get(digest) == data  # another reader
    assert store.put(b"hello") == store.put(bytearray(b"hello")) == store.put(memoryview(b"hello"))


def test_an_unknown_digest_is_refused_by_name_and_a_malformed_one_as_such(store: Store) -> None:
    missing = hashlib.sha256(b"never put").hexdigest()
    assert not store.has(missing)
    with pytest.raises(UnknownDigest, match=missing):
        store.get(missing)
    with pytest.raises(BadDigest):
        store.get("abc")


def test_a_flipped_byte_is_refused_naming_the_blob(kind, store: Store) -> None:
    data = os.urandom(3000)
    digest = store.put(data)
    flipped = bytearray(kind.read_raw(store, digest))
    flipped[1234] ^= 1
    kind.write_raw(store, digest, bytes(flipped))
    with pytest.raises(CorruptBlob, match=digest):
        Store(store.directory).get(digest)  # a reader that never verified it


# --- names -------------------------------------------------------------------------------


def test_names_point_at_blobs_are_listed_by_prefix_and_bind_replaces(store: Store) -> None:
    a, b = store.put(b"a"), store.put(b"b")
    assert store.resolve("run/round/0/client/0") is None
    store.bind("run/round/0/client/0", a)
    store.bind("run/round/0/client/1", a)
    store.bind("run/round/10/client/0", b)
    store.bind("run/round/0/client/0", b)
    assert store.resolve("run/round/0/client/0") == b
    assert store.bound("run/round/0/") == ["run/round/0/client/0", "run/round/0/client/1"]
    assert Store(store.directory).bound("run/round/") == [
        "run/round/0/client/0",
        "run/round/0/client/1",
        "run/round/10/client/0",
    ]


def test_resolve_many_says_what_resolve_says_of_each_name_in_order(store: Store) -> None:
    a, b = store.put(b"a"), store.put(b"b")
    store.bind("run/round/0/client/0", a)
    store.bind("run/round/0/client/2", b)
    store.bind("run/round/1/average", b)
    names = [
        "run/round/0/client/2",
        "run/round/1/average",
        "run/round/0/client/1",  # not bound, in a folder that is there
        "run/round/9/client/0",  # nor its folder
        "run/round/0/client/0",
        "run/round/0",  # a folder of names, not a name
    ]
    assert store.resolve_many(names) == [store.resolve(n) for n in names]
    assert store.resolve_many(names) == [b, b, None, None, a, None]
    store.bind("run/round/0/client/0", b)  # rebound: read again, never remembered
    assert store.resolve_many(["run/round/0/client/0"]) == [b]
    assert store.resolve_many([]) == []


def test_bind_and_claim_refuse_a_digest_not_in_the_store(store: Store) -> None:
    missing = hashlib.sha256(b"never put").hexdigest()
    with pytest.raises(UnknownDigest):
        store.bind("a", missing)
    with pytest.raises(UnknownDigest):
        store.claim("b", missing)
    assert store.resolve("a") is None and store.resolve("b") is None


def test_a_claim_takes_a_name_nobody_has_and_never_one_somebody_has(store: Store) -> None:
    a, b = store.put(b"a"), store.put(b"b")
    assert store.claim("run/round/0/averaging", a)
    assert not store.claim("run/round/0/averaging", b)
    assert store.resolve("run/round/0/averaging") == a
    store.bind("run/round/1/client/0", a)
    assert not store.claim("run/round/1/client/0", b)  # what bind made, claim refuses
    assert store.resolve("run/round/1/client/0") == a


@pytest.mark.slow
def test_eight_processes_racing_for_one_name_exactly_one_wins_and_is_written_down(
    store: Store,
) -> None:
    name = "run/round/0/averaging"
    go_read, go_write = os.pipe()
    racers = subprocess.Popen(
        [sys.executable, str(TESTS / "store_worker.py"), "race", str(store.directory), name]
        + [str(go_read), "8"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        pass_fds=(go_read,),
    )
    os.close(go_read)
    try:
        for _ in range(8):
            ready = racers.stdout.readline()
            assert ready == "ready\n", ready + racers.communicate(timeout=HANG)[1]
    finally:
        os.close(go_write)  # the start: every racer's read returns at once
    out, err = racers.communicate(timeout=HANG)
    assert racers.returncode == 0, err
    reports = [json.loads(line) for line in out.splitlines()]
    winners = [r for r in reports if r["won"]]
    assert len(reports) == 8 and len({r["digest"] for r in reports}) == 8
    assert len(winners) == 1, f"{len(winners)} of the 8 racers were told they had it"
    assert store.resolve(name) == winners[0]["digest"], "the winner is not the one written down"


# --- values ------------------------------------------------------------------------------


def test_a_value_with_tensors_comes_back_alive_and_the_same_value_is_one_digest(
    store: Store,
) -> None:
    w = torch.arange(12.0).reshape(3, 4)
    value = {"export": {"net": {"w": w, "n": torch.tensor(7)}}, "size": 3, "note": "x"}
    digest = store.keep("run/round/0/average", value)
    back = Store(store.directory).recall("run/round/0/average")
    assert torch.equal(back["export"]["net"]["w"], w) and back["export"]["net"]["n"] == 7
    assert back["export"]["net"]["n"].dtype == torch.int64
    assert (back["size"], back["note"]) == (3, "x")
    assert store.put_value(value) == digest


def test_a_flipped_tensor_byte_is_refused_on_recall(kind, store: Store) -> None:
    store.keep("v", {"export": {"net": {"w": torch.randn(64, 64)}}, "size": 1})
    largest = max(kind.digests(store), key=lambda d: len(kind.read_raw(store, d)))
    body = bytearray(kind.read_raw(store, largest))
    body[-7] ^= 0x40
    kind.write_raw(store, largest, bytes(body))
    with pytest.raises(CorruptBlob, match=largest):
        Store(store.directory).recall("v")


# --- large blobs -------------------------------------------------------------------------

LARGE = 40 << 20  # a bucket reads this in ranges side by side (soma.store.s3.reads)


def test_a_large_blob_comes_back_whole_and_a_byte_flipped_in_any_part_is_refused(
    kind, store: Store
) -> None:
    """Wherever the damage is (the first answer, a range in the middle, the last byte of the
    last range), a reader that has not verified the blob refuses it: the pieces a bucket
    reads side by side are hashed in order, all of them."""
    data = os.urandom(LARGE)
    digest = store.put(data)
    assert Store(store.directory).get(digest) == data
    for where in (5, LARGE // 2 + 7, LARGE - 1):
        flipped = bytearray(data)
        flipped[where] ^= 1
        kind.write_raw(store, digest, bytes(flipped))
        with pytest.raises(CorruptBlob, match=digest):
            Store(store.directory).get(digest)


def test_a_large_tensor_blob_with_a_byte_flipped_in_its_last_part_is_refused_on_recall(
    kind, store: Store
) -> None:
    w = torch.randn(LARGE // 4)
    store.keep("v", {"export": {"net": {"w": w}}, "size": 1})
    assert torch.equal(Store(store.directory).recall("v")["export"]["net"]["w"], w)
    largest = max(kind.digests(store), key=lambda d: len(kind.read_raw(store, d)))
    body = bytearray(kind.read_raw(store, largest))
    body[-3] ^= 0x40
    kind.write_raw(store, largest, bytes(body))
    with pytest.raises(CorruptBlob, match=largest):
        Store(store.directory).recall("v")
