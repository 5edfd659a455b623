"""`soma status` of every kind of run imports no torch (issue 50 item 5): an asynchronous run's
versions are read from their records (never replayed: recomputing them is `soma audit`'s), its
signatures checked against a roster on JSON records alone; a DP run's privacy spent is read
from its strategy's state, a JSON account, with the built-in strategy loaded as a name read
from the store always is, its tensor modules imported only when a tensor is met. A run of
rounds without DP is tests/cli/test_torch_free.py's.

Each is checked in a fresh interpreter (test_torch_free's PROBE: this one has imported torch
long ago), which applies SOMA_MUTANT as this process does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_torch_free import PROBE, python

pytestmark = pytest.mark.slow  # each test starts an interpreter

pytest.importorskip("cryptography")  # a signed run's keys
pytest.importorskip("dp_accounting")  # DP-FedAvg's account


def status(store: Path, *argv: str) -> dict:
    """`soma status --store STORE ARGV` in a fresh interpreter: what it said, whether torch
    came, and which soma modules were importing when it did."""
    return json.loads(python("-c", PROBE, "status", "--store", str(store), *argv).splitlines()[-1])


@pytest.fixture(scope="module")
def asynchronous(keys: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding a signed asynchronous run `a` (3 clients, buffer 2, 3 versions, client
    0 its one averager)."""
    from soma.cli import main

    store = tmp_path_factory.mktemp("asynchronous") / "s"
    argv = ["simulate", "--store", str(store), "--run", "a", "--clients", "3", "--rounds", "3"]
    argv += ["--buffer", "2", "--option", "examples=32", "--roster", str(keys / "roster.json")]
    argv += ["--keys", str(keys / "{client}.key"), "--averagers", "0"]
    assert main(argv) == 0
    return store


@pytest.mark.parametrize("roster", [False, True], ids=["as the store says", "with its roster"])
def test_the_status_of_an_asynchronous_run_imports_no_torch(asynchronous, keys, roster) -> None:
    argv = ["--run", "a"]
    if roster:
        argv += ["--roster", str(keys / "roster.json"), "--averagers", "0"]
    ran = status(asynchronous, *argv)
    lines = ran["said"].splitlines()
    assert [line[:12] for line in lines[:4]] == [f"version    {v}" for v in range(4)], lines
    assert "consumed clients" in lines[3] and lines[4] == "pending: none", lines
    assert "DOES NOT HOLD" not in ran["said"], ran["said"]
    assert ran["torch"] is False, f"soma status imported torch, by {' -> '.join(ran['by'])}"


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding a distributed DP-FedAvg run `dp` (3 clients, 2 rounds): each round's
    average names the strategy's state, a JSON account of the privacy spent, and each client
    claimed its release (`<meeting>/release/<k>`)."""
    import soma

    store = tmp_path_factory.mktemp("private") / "s"
    options = {"mode": "distributed", "clients_per_round": 3}
    soma.simulate(
        "soma.tasks.control", clients=3, rounds=2, store=store, run="dp",
        strategy="dp_fedavg", strategy_options=options,
    )  # fmt: skip
    return store


@pytest.mark.parametrize("wide", [False, True], ids=["short", "wide"])
def test_the_status_of_a_dp_run_imports_no_torch(private, wide) -> None:
    """Its privacy spent is shown (read from the state, through the strategy's own
    privacy_spent), and its releases known: no problem, no junk."""
    ran = status(private, "--run", "dp", *(["--wide"] if wide else []))
    lines = ran["said"].splitlines()
    assert len(lines) == 2 and all("privacy spent: epsilon " in line for line in lines), lines
    assert all("3/3 written" in line for line in lines), lines
    assert all(("(3 released)" in line) is wide for line in lines), lines
    assert ran["torch"] is False, f"soma status imported torch, by {' -> '.join(ran['by'])}"


@pytest.fixture(scope="module")
def stateful(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding a FedAdam run `adam` (2 clients, 2 rounds): each average names the
    strategy's state, a model's worth of moments, which status never needs."""
    import soma

    store = tmp_path_factory.mktemp("stateful") / "s"
    soma.simulate(
        "soma.tasks.control", clients=2, rounds=2, store=store, run="adam", strategy="fedadam"
    )
    return store


def test_the_status_of_a_stateful_run_imports_no_torch(stateful) -> None:
    """A built-in that reports no privacy (soma.strategies.REPORTS_PRIVACY) is not loaded to
    ask: loading FedAdam imports torch."""
    ran = status(stateful, "--run", "adam")
    lines = ran["said"].splitlines()
    assert len(lines) == 2 and all("2/2 written" in line for line in lines), lines
    assert "privacy" not in ran["said"], lines
    assert ran["torch"] is False, f"soma status imported torch, by {' -> '.join(ran['by'])}"
