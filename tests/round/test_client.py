"""A client's side of a round (soma.round.client): what a rerun may and may not write."""

from __future__ import annotations

import pytest
import torch

from soma.round import Contradicts, Meeting, contribute
from soma.store import Store
from soma.strategies import load_strategy
from soma.timing import LEASE

torch.set_num_threads(1)


def blobs(store: Store) -> set[str]:
    """Every blob file in the store, by its path under blobs/."""
    top = store.directory / "blobs"
    return {str(p.relative_to(top)) for p in top.rglob("*") if p.is_file()}


def noisy_release(seed: int) -> dict:
    """What a distributed DP-FedAvg client releases: its clipped update plus its own share of
    the noise, drawn afresh by each attempt (seed = the attempt's draw)."""
    strategy = load_strategy(
        "dp_fedavg",
        {"clip": 0.5, "noise_multiplier": 1.0, "mode": "distributed", "clients_per_round": 2},
    )
    start = {"fc": {"weight": torch.zeros(64)}}
    trained = {"fc": {"weight": torch.full((64,), 0.01)}}
    return strategy.local(start=start, state=None, mine=None).release(trained, start, seed=seed)


def test_a_rerun_that_draws_fresh_noise_is_refused_before_its_release_is_written(
    tmp_path,
) -> None:
    store = Store(tmp_path)
    meeting = Meeting("dp", 0, 2, strategy="fedavg")
    first, rerun = noisy_release(1), noisy_release(2)
    assert not torch.equal(first["fc"]["weight"], rerun["fc"]["weight"])
    contribute(store, meeting, first, mine=0, size=10)
    before = blobs(store)
    with pytest.raises(Contradicts, match="client 0 already contributed to round 0 of run 'dp'"):
        contribute(store, meeting, rerun, mine=0, size=10)
    assert blobs(store) == before, "the rerun's noisy release reached the store"


def test_a_rerun_with_the_same_weights_stands_and_rewrites_only_the_same_bytes(tmp_path) -> None:
    store = Store(tmp_path)
    meeting = Meeting("dp", 0, 2)
    release = noisy_release(1)
    made = contribute(store, meeting, release, mine=0, size=10)
    before = blobs(store)
    again = contribute(store, meeting, release, mine=0, size=10)
    assert again.weights == made.weights and again.record == made.record
    assert len(blobs(store) - before) <= 1, "a rerun of the same weights wrote more than a record"


def test_a_peers_fault_note_stops_the_round_once_it_has_stood_for_its_grace(
    tmp_path, monkeypatch
) -> None:
    """Clients 0 and 1 make the quorum of 2 of 3; client 2's note says the store failed it:
    the waiting stops naming it (after the grace), nothing is averaged around it."""
    import time

    import soma.round.client
    from soma.round import Backoff, average_round
    from soma.round.client import StoreFailedPeer, note_fault

    monkeypatch.setattr(soma.round.client, "FAULT_GRACE", 0.5)
    store = Store(tmp_path)
    meeting = Meeting("f", 0, 3, quorum=2)
    for k in (0, 1):
        contribute(store, meeting, noisy_release(k), mine=k, size=10)
    note_fault(store, meeting, 2, "the store failed (OSError: [Errno 28] No space left)")
    started = time.monotonic()
    with pytest.raises(StoreFailedPeer, match=r"round 0 of run 'f' stops: .*client 2.*No space"):
        average_round(
            store, meeting, deadline=5, backoff=Backoff(first=0.01, cap=0.05), lease=LEASE
        )
    assert 0.5 <= time.monotonic() - started < 10
    assert store.resolve(meeting.average) is None


def test_a_rerun_forgets_its_own_fault_note_and_a_forged_one_stops_nobody(tmp_path) -> None:
    from soma.round import layout
    from soma.round.client import Faults, forget_fault, note_fault

    store = Store(tmp_path)
    meeting = Meeting("f", 0, 3, quorum=2)
    note_fault(store, meeting, 2, "the store failed")
    forget_fault(store, meeting, 2)
    assert store.resolve(layout.fault(meeting.prefix, 2, 3)) is None
    store.keep(layout.fault(meeting.prefix, 1, 3), ["not", "a", "note"])
    Faults(store, meeting, grace=0).check([1])  # unreadable: nobody's word, nothing stops
