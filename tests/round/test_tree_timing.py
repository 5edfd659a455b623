"""A tree round waits as its run says (soma.timing): every node of the tree (soma.round.tree)
is waited for with the averaging's own deadline, polling and lease, and claimed with its
roster, so that a node held by a live process that never publishes ends the round at the
deadline, naming the node and its holder, as the flat round's averaging does."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch

from soma import timing
from soma.round import (
    AveragerDied,
    Backoff,
    Meeting,
    arrivals,
    average_round,
    contribute,
    holders,
    inputs_key,
    once,
    present,
    tree,
)
from soma.round.once import Place
from soma.store import Store

torch.set_num_threads(1)
QUICK = Backoff(first=0.005, cap=0.05)
DEADLINE = 1.0
LEASE = 7.0  # not soma.timing's LEASE: a node given the default would be told apart


def weights(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"fc": {"weight": torch.randn(4, 3, generator=g)}}


class Sleeps:
    """A sleep that sleeps, and fails the test once a second more of it was asked for than
    the deadline: a wait that ignores its deadline fails by then instead of hanging for an
    hour. Counted in seconds asked, not by the clock: a wait that gives up `deadline`
    seconds after it began has asked for at most that plus one poll (QUICK's, 0.05 s at
    most), however loaded the machine (a loaded machine only makes it ask for less)."""

    def __init__(self, deadline: float) -> None:
        self.bound, self.asked = deadline + 1, 0.0

    def __call__(self, seconds: float) -> None:
        self.asked += seconds
        if self.asked > self.bound:
            raise AssertionError(f"still waiting after {self.asked:.1f}s of polls: no deadline")
        time.sleep(seconds)


def a_tree_round(store: Store, signing=None) -> tuple[Meeting, str]:  # noqa: ANN001
    """A round of three clients who all came, averaged through a tree of fan-in 2 (node 1/0
    over clients 0 and 1, node 1/1 over client 2, the root 2/0), and its averaging's place."""
    meeting = Meeting("r", 0, 3, tree=2, signing=signing)
    for k in range(3):
        contribute(store, meeting, weights(k), mine=k, size=k + 1)
    inputs, _ = arrivals(store, meeting, present(store, meeting))
    return meeting, meeting.averaging(inputs_key(meeting.key, inputs))


def held_by_a_live_process(store: Store, place: Place) -> dict:
    """Node `place` claimed by a process that may be alive (another host, no Slurm job:
    nothing can prove it gone) and never publishes; its holder record."""
    holder = holders.me(role="averaging")
    holder["host"] = "gpu-node-07"
    assert store.claim(place.claimed, store.put_value(holder))
    return holder


def test_a_tree_node_held_by_a_live_process_ends_the_round_at_its_deadline_naming_it(
    tmp_path,
) -> None:
    store = Store(tmp_path)
    meeting, averaging = a_tree_round(store)
    node = tree.node_place(averaging, 1, 1)
    holder = held_by_a_live_process(store, node)
    sleeps = Sleeps(DEADLINE)
    with pytest.raises(AveragerDied) as died:
        average_round(
            store, meeting, deadline=DEADLINE, backoff=QUICK, sleep=sleeps, lease=timing.LEASE
        )
    message = str(died.value)
    assert f"tree node 1/1 of {averaging} is complete" in message, message
    assert f"no partial mean after {DEADLINE:g}s" in message, message
    assert "the node was claimed by" in message and "never published" in message, message
    assert "gpu-node-07" in message and str(holder["pid"]) in message, message
    assert died.value.holder == holder
    assert store.resolve(node.published) is None and store.resolve(meeting.average) is None


def test_a_tree_nodes_wait_with_the_runs_deadline_lease_polling_and_roster(
    tmp_path, monkeypatch
) -> None:
    """What tree.reduce hands each node's `once`, recorded: the run's, not defaults."""
    pytest.importorskip("cryptography")
    from soma.round.signing import Signing, make_keys

    roster = {k: make_keys(tmp_path / "keys", k)[1] for k in range(3)}
    signing = Signing.of(roster, str(tmp_path / "keys" / "{client}.key"))
    store = Store(tmp_path / "store")
    meeting, averaging = a_tree_round(store, signing)
    held_by_a_live_process(store, tree.node_place(averaging, 1, 1))
    real, asked = once.once, []

    def recording(store, work, **given):  # noqa: ANN001, ANN202
        if isinstance(work, tree._NodeWork):
            asked.append((work.what, given))
        return real(store, work, **given)

    monkeypatch.setattr(once, "once", recording)
    sleeps = Sleeps(DEADLINE)
    with pytest.raises(AveragerDied, match="tree node 1/1"):
        average_round(
            store, meeting, deadline=DEADLINE, backoff=QUICK, sleep=sleeps, lease=LEASE,
            site="north",
        )  # fmt: skip
    assert [what for what, _ in asked] == [f"tree node 1/1 of {averaging}"]
    (given,) = [given for _, given in asked]
    assert given["deadline"] == DEADLINE and given["lease"] == LEASE, given
    assert given["backoff"] is QUICK and given["sleep"] is sleeps, given
    assert given["signing"] is signing and given["site"] == "north", given


def every_node_claimed_with_the_runs_lease_and_roster(store: Store, keys: Path) -> None:
    """A tree of 5 leaves, fan-in 2, reduced on `store` (one with compare-and-swap): each
    node's lease is the run's seconds, and its lease and holder records are the roster's."""
    from soma.round import signing as signatures
    from soma.round.signing import Signing, make_keys

    roster = {k: make_keys(keys, k)[1] for k in range(2)}
    signing = Signing.of(roster, str(keys / "{client}.key"))
    leaves = [tree.Leaf(store.put_value(weights(k)), float(k + 1)) for k in range(5)]
    root = tree.reduce(
        store, "t", leaves, 2, deadline=30, lease=LEASE, backoff=QUICK, signing=signing
    )
    every = list(tree.walk(store, "t", 5, 2))
    assert len(every) == 3 + 2 + 1
    for level, index, place in every:
        where = f"node {level}/{index}"
        lease = store.resolve(place.lease)
        assert lease is not None, f"{where} was claimed without a lease"
        signatures.check(store, signing, lease, name=place.lease, writer=None, what=where)
        terms = store.recall_digest(lease)
        assert terms["seconds"] == LEASE, f"{where}: {json.dumps(terms)}"
        assert terms["published"] == store.resolve(place.published), where
        claimed = store.resolve(place.claimed)
        signatures.check(store, signing, claimed, name=place.prefix, writer=None, what=where)
    assert store.resolve(every[-1][2].published) is not None and root.weight == 15


def test_on_a_bucket_in_memory_every_tree_node_is_claimed_with_the_runs_lease_and_roster(
    tmp_path,
) -> None:
    """On a store with compare-and-swap a node nobody else had taken is claimed with a
    lease of the run's seconds, its holder and lease records signed with the run's roster:
    never a bare claim, which a waiter there would take for nobody's and take over. Here on a
    bucket's names in memory (tests/memory_bucket.py), in this process; below on the S3
    server."""
    pytest.importorskip("cryptography")
    from memory_bucket import MemoryBucket

    from soma.store.backend import BackendStore

    every_node_claimed_with_the_runs_lease_and_roster(BackendStore(MemoryBucket()), tmp_path)


def test_on_a_bucket_every_tree_node_is_claimed_with_the_runs_lease_and_roster(
    bucket, tmp_path
) -> None:
    """The test above on the S3 server."""
    pytest.importorskip("boto3", reason="boto3 (soma[s3]) is not installed")
    pytest.importorskip("cryptography")
    from s3_bucket import BUCKET

    store = Store(f"s3://{BUCKET}/tree-timing-{os.getpid()}-{time.monotonic_ns()}")
    every_node_claimed_with_the_runs_lease_and_roster(store, tmp_path)
