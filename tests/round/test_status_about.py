"""`soma status` believes a meeting's about record only when it is the identity its meeting is
keyed by and, with a roster, a member signed it; and it never lists more clients than it can
show (an about record saying 10^7 clients cost 0.9 GB and 89 MB of output)."""

from __future__ import annotations

import tracemalloc

import pytest
import torch
from signed_runs import RUN, signed_run, signing_of

from soma.round import Meeting, announce, contribute, layout, status
from soma.round.report import LISTED
from soma.store import Store


def weights() -> dict:
    return {"fc": {"weight": torch.zeros(2, 2)}}


def meeting(clients: int) -> Meeting:
    return Meeting(run="r", round=0, clients=clients, start=None, state=None, strategy="fedavg")


def open_round(store: Store, clients: int = 3) -> Meeting:
    """Round 0 of run r, announced, client 0 written."""
    m = meeting(clients)
    announce(store, m)
    contribute(store, m, weights(), mine=0)
    return m


def test_an_about_record_that_is_not_its_meeting_s_identity_is_ignored(tmp_path) -> None:
    store = Store(tmp_path / "s")
    m = open_round(store)
    forged = store.put_value({"run": "r", "round": 0, "clients": 9})
    store.bind(m.about, forged)
    (row,) = status(store, "r")
    assert row["expected"] is None and row["missing"] == []
    assert any("not the identity its meeting" in p for p in row["problems"])
    assert [i["record"] for i in row["ignored"]] == [forged]


def test_a_meeting_of_ten_million_clients_is_flagged_not_listed(tmp_path) -> None:
    store = Store(tmp_path / "s")
    open_round(store, clients=10**7)
    tracemalloc.start()
    try:
        (row,) = status(store, "r")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert row["clients"] == 10**7 and row["expected"] is None and row["missing"] == []
    assert any(f"more than soma status lists ({LISTED})" in p for p in row["problems"])
    assert peak < 100 << 20


def test_with_a_roster_an_unsigned_about_record_is_ignored(tmp_path, keys) -> None:
    store = signed_run(tmp_path / "s", keys)
    run = RUN
    name = next(n for n in store.bound(layout.rounds(run)) if n.endswith("/about"))
    about = store.recall(name)
    unsigned = store.put_value({k: v for k, v in about.items() if k != "signed"})
    store.bind(name, unsigned)
    rows = status(store, run, signing=signing_of(keys))
    row = next(r for r in rows if any(i["record"] == unsigned for i in r["ignored"]))
    assert row["expected"] is None
    assert any("its about record is ignored" in p for p in row["problems"])


@pytest.mark.parametrize("clients", [3])
def test_a_genuine_about_record_says_who_was_expected(tmp_path, clients: int) -> None:
    store = Store(tmp_path / "s")
    open_round(store, clients)
    (row,) = status(store, "r")
    assert row["expected"] == [0, 1, 2] and row["missing"] == [1, 2] and row["ignored"] == []
