"""`soma status` knows a distributed-DP release (`<meeting>/release/<k>`, claimed once per
client and round: soma.round.client): each round's row says who released, a release whose
client's record is not yet written is said (its noise is drawn, its weights on their way),
a client record that is not the release its client claimed is a problem (a second noisy
release of one update, which the privacy account never counts), and a name there that is no
client's release is said, never taken for one."""

from __future__ import annotations

from pathlib import Path

import pytest

import soma
from soma.cli.show import _status_line
from soma.round import layout, records, status
from soma.store import Store

pytest.importorskip("dp_accounting")

RUN = "dp"


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """A distributed DP-FedAvg run of one round, 3 clients, each having claimed its release."""
    options = {"mode": "distributed", "clients_per_round": 3}
    soma.simulate(
        "soma.tasks.control", clients=3, rounds=1, store=tmp_path / "s", run=RUN,
        strategy="dp_fedavg", strategy_options=options,
    )  # fmt: skip
    return Store(tmp_path / "s")


def meeting(store: Store) -> str:
    ((r, key),) = layout.meetings(store.bound(layout.rounds(RUN)), RUN)
    return layout.meeting(RUN, r, key)


def test_each_rounds_releases_are_shown_and_are_no_problem(store) -> None:
    (row,) = status(store, RUN)
    assert row["released"] == [0, 1, 2] and row["written"] == [0, 1, 2]
    assert not row["problems"] and row["privacy"] is not None
    assert "released" not in _status_line(row, set())  # nothing to act on: the short line
    assert "3/3 written (3 released);" in _status_line(row, set(), wide=True)
    fedavg = soma.simulate("soma.tasks.control", clients=2, rounds=1, store=store.directory)
    assert fedavg and [row["released"] for row in status(store, "simulation")] == [[]]


def test_a_release_not_yet_written_is_said(store) -> None:
    store.forget(layout.client(meeting(store), 2, 3))  # its writer between claim and record
    (row,) = status(store, RUN)
    assert row["released"] == [0, 1, 2] and row["missing"] == [2] and not row["problems"]
    assert "2/3 written, 1 released, not yet written, missing [2]" in _status_line(row, set())


def test_a_client_record_that_is_not_its_claimed_release_is_a_problem(store) -> None:
    prefix = meeting(store)
    name = layout.client(prefix, 1, 3)
    other = store.recall(layout.client(prefix, 0, 3))["weights"]  # another update's weights
    record = records.ClientRecord(1, other, 1.0, by={"host": "elsewhere"})
    store.bind(name, store.put_value(record.value()))
    (row,) = status(store, RUN)
    (problem,) = row["problems"]
    assert problem.startswith("client 1's record ") and "is not the release it claimed" in problem
    assert "a second noisy release of its update is in the store" in problem


def test_a_name_among_the_releases_that_is_no_clients_release_is_said(store) -> None:
    prefix = meeting(store)
    digest = store.resolve(layout.release(prefix, 0, 3))
    store.bind(f"{prefix}/release/zero", digest)
    (row,) = status(store, RUN)
    assert row["released"] == [0, 1, 2]
    assert row["problems"] == [f"{prefix + '/release/zero'!r} is no client's release name"]
