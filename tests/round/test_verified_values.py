"""One read of each input per averaging (soma.round.verified_values): the values the checks read and
verified are the ones folded, each handed back only for the digest it was verified against."""

from __future__ import annotations

import torch

from soma import fedavg
from soma.round import Backoff, Input, Meeting, average_round, contribute, read_record
from soma.round.average import weights_of_average
from soma.round.verified_values import VerifiedValues
from soma.store import Store
from soma.timing import LEASE

QUICK = Backoff(first=0.002, cap=0.02)


def weights(seed: int, rows: int = 4) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"fc": {"w": torch.randn(rows, 3, generator=g), "b": torch.randn(rows, generator=g)}}


def same_bits(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[n].keys() == b[n].keys() and all(torch.equal(a[n][k], b[n][k]) for k in a[n]) for n in a
    )


def test_the_averaging_reads_each_inputs_weights_once_and_averages_the_same_bits(
    tmp_path, monkeypatch
) -> None:
    store = Store(tmp_path / "store")
    m = Meeting("r", 0, 4, start=store.put_value(weights(99)))
    for k in range(4):
        contribute(store, m, weights(k), mine=k, size=10 + k)
    read: list[str] = []
    real = store.recall_digest

    def counted(digest, *, lazy=False):
        read.append(digest)
        return real(digest, lazy=lazy)

    monkeypatch.setattr(store, "recall_digest", counted)
    digest = average_round(store, m, deadline=5, backoff=QUICK, lease=LEASE)
    monkeypatch.undo()
    inputs = [i["weights"] for i in read_record(store, digest)["inputs"]]
    assert [read.count(d) for d in inputs] == [1, 1, 1, 1]
    expected = fedavg([weights(k) for k in range(4)], [10 + k for k in range(4)])
    assert same_bits(weights_of_average(store, digest), expected)


def test_a_kept_value_is_handed_back_only_for_the_digest_it_was_verified_against(
    tmp_path,
) -> None:
    store = Store(tmp_path / "store")
    a, b = store.put_value(weights(1)), store.put_value(weights(2))
    kept = VerifiedValues()
    kept.keep(a, store.recall_digest(a))
    assert same_bits(kept.update(store, Input(0, b, 1.0)).weights, weights(2))
    assert same_bits(kept.update(store, Input(0, a, 1.0)).weights, weights(1))


def test_a_checked_input_left_out_is_never_folded_in_place_of_another(tmp_path) -> None:
    """Client 0's weights are read, verified and kept, then refused (not most clients'
    network): the average is clients 1 and 2's, bit for bit."""
    store = Store(tmp_path / "store")
    m = Meeting("r", 0, 3, quorum=2)
    contribute(store, m, weights(0, rows=5), mine=0, size=10)
    for k in (1, 2):
        contribute(store, m, weights(k), mine=k, size=10 + k)
    digest = average_round(store, m, deadline=5, backoff=QUICK, lease=LEASE)
    assert [i["client"] for i in read_record(store, digest)["inputs"]] == [1, 2]
    expected = fedavg([weights(1), weights(2)], [11, 12])
    assert same_bits(weights_of_average(store, digest), expected)


def test_past_its_budget_nothing_is_kept_and_inputs_are_read_again(tmp_path) -> None:
    store = Store(tmp_path / "store")
    a = store.put_value(weights(1))
    kept = VerifiedValues(budget=10)
    value = store.recall_digest(a)
    kept.keep(a, value)
    assert kept.recall(store, a) is not value
