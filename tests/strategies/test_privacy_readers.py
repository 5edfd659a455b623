"""The epsilon against each reader, in every mode (issue 32, "Honest epsilon in every mode").

Distributed DP-FedAvg without secure aggregation leaves each client's own release in the
store, with noise z C / sqrt(m): against whoever reads the store each round is a Gaussian
mechanism of multiplier z / sqrt(m). With secure aggregation only the sum is there: z.
Central mode leaves every update in the clear in the store: only a reader of the published
weights is held off. The state keeps both figures, each named by whom it holds against, and
the budget stops on the store reader's wherever the mode holds one off at all.
"""

from __future__ import annotations

import math

import pytest
import torch

import soma
from soma import privacy
from soma.strategies import StrategyError, Update, load_strategy, under_secure_aggregation

torch.set_num_threads(1)

DELTA = 1e-5
START = {"fc": {"w": torch.zeros(3)}}


def distributed(**options) -> object:
    given = {"mode": "distributed", "clients_per_round": 10, "noise_multiplier": 1.0}
    return load_strategy("dp_fedavg", {**given, **options})


def plain_rounds(strategy: object, rounds: int, state: object = None) -> dict:
    """`rounds` rounds of all ten clients, each release in the store (no secure sum)."""
    for _ in range(rounds):
        came = [Update(k, 1.0, START) for k in range(10)]
        _, state = strategy.aggregate(START, came, state, clients=10)
    return state


def secure_rounds(strategy: object, rounds: int, state: object = None) -> dict:
    """`rounds` rounds stepped from a secure sum, as soma.secagg.round steps them."""
    for _ in range(rounds):
        _, state = under_secure_aggregation(strategy).from_mean(START, START, state, clients=10)
    return state


@pytest.mark.fast
def test_distributed_without_secure_aggregation_is_each_release_against_a_store_reader() -> None:
    """The issue's run: z 1, 10 clients a round, 2 rounds, delta 1e-5. soma reported 7.08;
    against a store reader each release is a Gaussian of multiplier 1 / sqrt(10), twice:
    30.1 (RDP), 28.4 (PLD)."""
    import dp_accounting as dpa
    from dp_accounting import rdp

    state = plain_rounds(distributed(), 2)
    assert state["epsilon"] == pytest.approx(30.1, abs=0.05)
    ledger = rdp.RdpAccountant()
    ledger.compose(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(1 / math.sqrt(10)), 2))
    assert state["epsilon"] == pytest.approx(ledger.get_epsilon(DELTA), rel=1e-9)
    worst = max(state["exposure"]["clients"].values())
    assert privacy.epsilon_public(worst, DELTA, accountant="pld") == pytest.approx(28.4, abs=0.05)
    assert state["against"] == privacy.STORE_READER
    assert state["epsilons"][privacy.STORE_READER] == state["epsilon"]
    assert state["epsilons"][privacy.WEIGHTS_READER] == pytest.approx(7.08, abs=0.01)
    found = privacy.spent(state)
    assert found["against"] == privacy.STORE_READER and found["epsilon"] == state["epsilon"]
    assert found["epsilons"] == state["epsilons"]


@pytest.mark.fast
def test_a_secure_aggregation_distributed_run_reports_the_sums_figure() -> None:
    state = secure_rounds(distributed(), 2)
    assert state["against"] == privacy.STORE_READER
    assert state["epsilon"] == pytest.approx(privacy.epsilon_public(2.0, DELTA))
    assert state["epsilon"] == pytest.approx(7.08, abs=0.01)
    assert state["epsilons"] == {
        privacy.STORE_READER: state["epsilon"],
        privacy.WEIGHTS_READER: state["epsilon"],
    }


@pytest.mark.fast
def test_a_tree_of_clear_releases_is_charged_per_release_to_every_client() -> None:
    """A tree (soma.round.tree) steps from the mean too, but the releases are in the store."""
    _, state = distributed().from_mean(START, START, None, clients=10)
    assert state["exposure"] == {"everyone": 10.0, "clients": {}}
    assert state["published"] == {"everyone": 1.0, "clients": {}}


@pytest.mark.fast
def test_the_budget_stops_on_the_store_readers_figure() -> None:
    """Budget 10: one round is 4.73 at the sum's z and 19.05 against a store reader without
    a secure sum: refused there before anything is claimed, allowed under secure aggregation."""
    assert privacy.epsilon_public(1.0, DELTA) < 10 < privacy.epsilon_public(10.0, DELTA)
    strategy = distributed(budget=10.0)
    with pytest.raises(StrategyError, match=r"budget=10: one more round would spend epsilon 19.05"):
        strategy.check_state(None, clients=10)
    with pytest.raises(StrategyError, match=r"budget=10: one more round"):
        plain_rounds(strategy, 1)
    assert secure_rounds(strategy, 1)["epsilon"] < 10


@pytest.mark.fast
def test_central_mode_holds_off_only_a_reader_of_the_published_weights() -> None:
    central = load_strategy("dp_fedavg", {"noise_multiplier": 1.0})
    _, state = central.aggregate(START, [Update(0, 1.0, START)], None, clients=1)
    assert state["against"] == privacy.WEIGHTS_READER
    assert state["epsilons"] == {
        privacy.STORE_READER: math.inf,  # every update is in the store in the clear
        privacy.WEIGHTS_READER: privacy.epsilon_public(1.0, DELTA),
    }
    text = privacy.spent_text(privacy.spent(state))
    assert text.startswith("epsilon 4.729 at delta 1e-05, against whoever reads only the publ")
    assert "; epsilon inf against whoever reads the store" in text


@pytest.mark.fast
def test_a_state_kept_before_the_readers_were_apart_is_read_and_charged_on_the_safe_side() -> None:
    """A state of the last shape (each client's exposure at the sum's z, no `against`): its
    figure holds against a reader of the published weights; continued in distributed mode,
    each of its rounds is charged m times over against the store reader."""
    state = plain_rounds(distributed(), 1)
    kept = ("round", "epsilon", "delta", "budget", "clip", "history")
    before = {k: state[k] for k in kept}
    before["exposure"] = state["published"]
    before["epsilon"] = privacy.epsilon_public(1.0, DELTA)
    assert privacy.spent(before)["against"] == privacy.WEIGHTS_READER
    again = plain_rounds(distributed(), 1, before)
    assert again["epsilon"] == pytest.approx(plain_rounds(distributed(), 2)["epsilon"])
    assert again["published"]["clients"]["0"] == pytest.approx(2.0)


@pytest.mark.fast
def test_a_state_of_the_other_mode_is_refused_naming_both() -> None:
    central = load_strategy("dp_fedavg", {"noise_multiplier": 1.0})
    _, state = central.aggregate(START, [Update(0, 1.0, START)], None, clients=10)
    with pytest.raises(StrategyError, match="accounts against weights_reader, mode distributed"):
        plain_rounds(distributed(), 1, state)
    with pytest.raises(StrategyError, match="state against is 'nobody'"):
        plain_rounds(distributed(), 1, {**plain_rounds(distributed(), 1), "against": "nobody"})


@pytest.mark.slow
def test_a_secure_run_is_told_so_and_its_repair_rebuilds_the_same_state(tmp_path) -> None:
    """In a real secure run (soma.simulate) the round tells the strategy the store holds the
    sum only; a plain run of the same config reports the per-release figure; repair
    recomputes the secure state bit for bit."""
    from soma import health
    from soma.round import status

    options = {"mode": "distributed", "clients_per_round": 3, "noise_multiplier": 1.0}
    run = {"clients": 3, "rounds": 1, "strategy": "dp_fedavg", "strategy_options": options}
    soma.simulate("soma.tasks.control", **run, secure_aggregation=2, store=tmp_path / "s")
    soma.simulate("soma.tasks.control", **run, store=tmp_path / "p")
    secure = status(soma.Store(tmp_path / "s"), "simulation")[0]["privacy"]
    plain = status(soma.Store(tmp_path / "p"), "simulation")[0]["privacy"]
    assert secure["epsilon"] == pytest.approx(privacy.epsilon_public(1.0, DELTA))
    assert plain["epsilon"] == pytest.approx(privacy.epsilon_public(3.0, DELTA))
    assert secure["against"] == plain["against"] == privacy.STORE_READER

    store = soma.Store(tmp_path / "s")
    record = store.recall_digest(status(store, "simulation")[0]["average"])
    victim = store.blob_path(record["state"])
    original = victim.read_bytes()
    victim.chmod(0o644)
    victim.unlink()
    report = health.repair(store)
    assert report.clean, report.lines()
    assert victim.read_bytes() == original
