"""Client-level differential privacy: soma.privacy's arithmetic and accountant, and the
dp_fedavg strategy, central and distributed.

Clipping and the noise's scale are worked out by hand (a 3-4-0 update is 5 long); the noise
itself is checked against its own seeded draw, bit for bit, and its standard deviation on a
large sample; the accountant against figures printed by dp_accounting directly.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
from torch import nn

import soma
from soma import privacy
from soma.strategies import Arrival, StrategyError, Update, load_strategy, train_locally
from soma.timing import LEASE

torch.set_num_threads(1)

DELTA = 1e-5


def t(*values: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def net(*values: float, count: int = 0) -> dict:
    """A one-node network: a float vector and a count that DP must leave alone."""
    return {"fc": {"weight": t(*values), "steps": torch.tensor(count)}}


def dp(**options) -> object:
    return load_strategy("dp_fedavg", options)


def reproducible(**options) -> object:
    """dp_fedavg whose noise is keyed by seed 3: the bits can be checked, and it is not private."""
    return load_strategy("dp_fedavg", {"seed": 3, "noise": "reproducible_not_private", **options})


NOT_PRIVATE = privacy.reproducible_noise_not_private


def updates(*rows: tuple[float, ...], counts: tuple[int, ...] = ()) -> list[Update]:
    counts = counts or tuple(range(7, 7 + len(rows)))
    return [
        Update(k, 100.0 * (k + 1), net(*row, count=c))
        for k, (row, c) in enumerate(zip(rows, counts, strict=True))
    ]


class Untouchable:
    """Updates that must not be read: the refusal comes before any arithmetic."""

    def __iter__(self):
        raise AssertionError("the updates were read before the refusal")


# --- clipping --------------------------------------------------------------------------------


def test_a_3_4_0_update_clipped_to_1_is_0_6_0_8_0() -> None:
    clipped, norm = privacy.clip({"fc": {"w": t(3, 4, 0)}}, 1.0)
    assert norm == 5.0
    assert torch.allclose(clipped["fc"]["w"], t(0.6, 0.8, 0), atol=1e-7)


def test_the_norm_is_one_vector_across_nodes_and_keys_and_counts_are_left_out() -> None:
    update = {"a": {"w": t(3)}, "b": {"w": t(4), "steps": torch.tensor([1000])}}
    clipped, norm = privacy.clip(update, 1.0)
    assert norm == 5.0
    assert torch.allclose(clipped["a"]["w"], t(0.6)) and torch.allclose(clipped["b"]["w"], t(0.8))
    assert torch.equal(clipped["b"]["steps"], torch.tensor([1000]))


def test_an_update_within_the_bound_is_unchanged() -> None:
    clipped, norm = privacy.clip({"fc": {"w": t(0.3, 0.4)}}, 1.0)
    assert norm == pytest.approx(0.5)
    assert torch.equal(clipped["fc"]["w"], t(0.3, 0.4))


def test_a_complex_tensor_is_refused_by_name() -> None:
    with pytest.raises(privacy.PrivacyError, match="node 'fc' key 'z'"):
        privacy.clip({"fc": {"z": torch.ones(2, dtype=torch.complex64)}}, 1.0)


# --- the noise -------------------------------------------------------------------------------


def test_the_noise_scale_by_hand() -> None:
    assert privacy.noise_std(bound=2.0, multiplier=1.5, clients_sampled=10) == pytest.approx(0.3)
    assert privacy.share_std(bound=2.0, multiplier=1.5, clients_sampled=4) == pytest.approx(1.5)


def test_a_seeded_draw_has_the_standard_deviation_asked_for() -> None:
    like = {"big": {"w": torch.zeros(200_000)}, "n": {"steps": torch.tensor(3)}}
    noise = privacy.gaussian(like, 0.3, privacy.private_noise())
    assert list(noise) == ["big"]  # counts get no noise
    draw = noise["big"]["w"].double()
    assert draw.std().item() == pytest.approx(0.3, rel=0.01)
    assert abs(draw.mean().item()) < 0.003


def test_the_same_seed_and_round_draw_the_same_bits_another_round_other_bits() -> None:
    like = {"fc": {"w": torch.zeros(1000), "b": torch.zeros(3, dtype=torch.float64)}}

    def draw(seed, *parts):
        source = privacy.private_noise() if seed is None else NOT_PRIVATE(seed, *parts)
        return privacy.gaussian(like, 1.0, source)

    once, again = draw(5, "central", 3), draw(5, "central", 3)
    assert torch.equal(once["fc"]["w"], again["fc"]["w"])
    assert torch.equal(once["fc"]["b"], again["fc"]["b"])
    assert once["fc"]["b"].dtype == torch.float64
    assert not torch.equal(once["fc"]["w"], draw(5, "central", 4)["fc"]["w"])
    assert not torch.equal(once["fc"]["w"], draw(6, "central", 3)["fc"]["w"])
    assert not torch.equal(draw(None, 3)["fc"]["w"], draw(None, 3)["fc"]["w"])  # the OS's


def test_half_precision_is_noised_in_float32() -> None:
    noise = privacy.gaussian(
        {"fc": {"w": torch.zeros(4, dtype=torch.float16)}}, 1.0, privacy.private_noise()
    )
    assert noise["fc"]["w"].dtype == torch.float32


# --- the accountant --------------------------------------------------------------------------


def test_the_accountant_gives_dp_accountings_figures_for_a_known_configuration() -> None:
    """z = 1.1, q = 0.01, 1000 rounds, delta = 1e-5: printed by dp_accounting 0.6.0's
    RdpAccountant and PLDAccountant composing PoissonSampledDpEvent(0.01, GaussianDpEvent(1.1))
    1000 times (1.7118 and 1.5154)."""
    assert privacy.epsilon(1.1, 0.01, 1000, DELTA) == pytest.approx(1.7117701662429012, rel=1e-9)
    pld = privacy.epsilon(1.1, 0.01, 1000, DELTA, accountant="pld")
    assert pld == pytest.approx(1.5153702481094293, rel=1e-6)


def test_the_accountant_is_dp_accountings_rdp_computed_here_directly() -> None:
    import dp_accounting
    from dp_accounting import rdp

    event = dp_accounting.PoissonSampledDpEvent(0.2, dp_accounting.GaussianDpEvent(3.0))
    ledger = rdp.RdpAccountant()
    ledger.compose(dp_accounting.SelfComposedDpEvent(event, 40))
    assert privacy.epsilon(3.0, 0.2, 40, DELTA) == ledger.get_epsilon(DELTA)


def test_the_epsilon_grows_with_rounds_and_participation_and_a_history_composes() -> None:
    assert privacy.epsilon(1.0, 1.0, 0, DELTA) == 0.0
    assert privacy.epsilon(0.0, 1.0, 1, DELTA) == math.inf
    assert privacy.epsilon(4.0, 1.0, 10, DELTA) < privacy.epsilon(4.0, 1.0, 20, DELTA)
    assert privacy.epsilon(4.0, 0.5, 10, DELTA) < privacy.epsilon(4.0, 1.0, 10, DELTA)
    split = privacy.epsilon_of([(4.0, 1.0, 7), (4.0, 1.0, 13)], DELTA)
    assert split == pytest.approx(privacy.epsilon(4.0, 1.0, 20, DELTA), rel=1e-12)
    mixed = privacy.epsilon_of([(4.0, 1.0, 10), (2.0, 1.0, 10)], DELTA)
    assert privacy.epsilon(4.0, 1.0, 20, DELTA) < mixed < privacy.epsilon(2.0, 1.0, 20, DELTA)


@pytest.mark.parametrize("target", [1.0, 4.0, 8.0])
def test_the_noise_for_an_epsilon_reaches_it_and_no_less_noise_would(target: float) -> None:
    z = privacy.noise_for_epsilon(target, DELTA, 1.0, 50)
    assert privacy.epsilon(z, 1.0, 50, DELTA) <= target
    assert privacy.epsilon(z * 0.999, 1.0, 50, DELTA) > target


# --- adaptive clipping -----------------------------------------------------------------------


def test_adaptive_clipping_by_hand() -> None:
    # z_D = (z^-2 - (2 sigma_b)^-2)^(-1/2): z = 1, sigma_b = 1 gives (1 - 1/4)^(-1/2)
    assert privacy.update_multiplier(1.0, 1.0) == pytest.approx(1 / math.sqrt(0.75))
    assert privacy.update_multiplier(0.0, 0.0) == 0.0
    with pytest.raises(privacy.PrivacyError, match="more than half the noise multiplier"):
        privacy.update_multiplier(2.0, 1.0)
    # 80% within a clip of 1, aiming at the median, lr 0.2: 1 * exp(-0.2 * 0.3)
    assert privacy.next_clip(1.0, 0.8, 0.5, 0.2) == pytest.approx(math.exp(-0.06))
    assert privacy.next_clip(1.0, 0.2, 0.5, 0.2) == pytest.approx(math.exp(0.06))


# --- what a state says was spent -------------------------------------------------------------


def test_spent_reads_a_dp_state_and_nothing_else() -> None:
    state = dp().aggregate(net(0, 0, 0), updates((1, 0, 0)), None, clients=1)[1]
    assert privacy.spent(state) == {
        "epsilon": privacy.epsilon(1.0, 1.0, 1, DELTA),
        "delta": DELTA,
        "round": 1,
        "against": privacy.WEIGHTS_READER,  # central: the updates are in the store in clear
        "epsilons": {
            privacy.STORE_READER: math.inf,
            privacy.WEIGHTS_READER: privacy.epsilon(1.0, 1.0, 1, DELTA),
        },
    }
    budgeted = dp(budget=100.0).aggregate(net(0, 0, 0), updates((1, 0, 0)), None, clients=1)[1]
    assert privacy.spent(budgeted)["budget"] == 100.0
    assert privacy.spent(None) is None
    assert privacy.spent({"m": {"fc": {"w": torch.zeros(1)}}}) is None


# --- the strategy, central -------------------------------------------------------------------


def test_central_without_noise_by_hand() -> None:
    """Clip 0.5: (3, 4, 0) is 5 long and becomes (0.3, 0.4, 0); (0, 0.25, 0) is within. Their
    mean over the two clients, unweighted whatever their sizes; the start's count, not a
    client's (no noise covers it)."""
    strategy = dp(clip=0.5, noise_multiplier=0.0)
    weights, _ = strategy.aggregate(net(1, 1, 1), updates((4, 5, 1), (1, 1.25, 1)), None, clients=2)
    assert torch.allclose(weights["fc"]["weight"], t(1.15, 1.325, 1), atol=1e-6)
    assert torch.equal(weights["fc"]["steps"], torch.tensor(0))


def test_central_divides_by_the_clients_expected_not_by_those_who_came() -> None:
    strategy = dp(clip=0.5, noise_multiplier=0.0, clients_per_round=4)
    weights, _ = strategy.aggregate(net(0, 0, 0), updates((3, 4, 0), (0, 0.25, 0)), None, clients=8)
    assert torch.allclose(weights["fc"]["weight"], t(0.075, 0.1625, 0), atol=1e-6)


def test_central_noise_by_hand_is_the_seeded_draw_at_z_c_over_m() -> None:
    """z = 1.5, C = 0.5, m = 2: the mean's noise has standard deviation 1.5 x 0.5 / 2."""
    strategy = reproducible(clip=0.5, noise_multiplier=1.5)
    previous = net(0, 0, 0)
    weights, _ = strategy.aggregate(previous, updates((3, 4, 0), (0, 0.25, 0)), None, clients=2)
    noise = privacy.gaussian(previous, 0.375, NOT_PRIVATE(3, "central", 1))
    expected = t(0.15, 0.325, 0) + noise["fc"]["weight"]
    assert torch.allclose(weights["fc"]["weight"], expected, atol=1e-6)


def test_central_noise_has_standard_deviation_z_c_over_m_on_a_large_model() -> None:
    strategy = dp(clip=0.5, noise_multiplier=2.0)
    start = {"big": {"w": torch.zeros(100_000)}}
    same = [Update(k, 1.0, start) for k in range(3)]
    weights, _ = strategy.aggregate(start, same, None, clients=3)
    assert weights["big"]["w"].double().std().item() == pytest.approx(2.0 * 0.5 / 3, rel=0.02)


def test_a_reproducible_rerun_round_draws_the_same_bits_and_the_next_round_others() -> None:
    strategy = reproducible(clip=0.5, noise_multiplier=1.0)
    start = {"big": {"w": torch.zeros(1000)}}
    same = [Update(0, 1.0, start)]
    first, state = strategy.aggregate(start, same, None, clients=1)
    again, _ = strategy.aggregate(start, same, None, clients=1)
    assert torch.equal(first["big"]["w"], again["big"]["w"])
    second, _ = strategy.aggregate(start, same, state, clients=1)
    assert not torch.equal(first["big"]["w"], second["big"]["w"])


def test_the_state_counts_rounds_and_epsilon_and_continues_through_the_store(tmp_path) -> None:
    strategy = dp(clip=0.5, noise_multiplier=1.5, clients_per_round=2)
    store = soma.Store(tmp_path)
    weights, state = net(0, 0, 0), None
    for r in (1, 2, 3):
        weights, state = strategy.aggregate(weights, updates((3, 4, 0)), state, clients=4)
        state = store.recall_digest(store.put_value(state))
        epsilon = privacy.epsilon_public(r / 1.5**2, DELTA)  # client 0, every round
        exposure = {"everyone": 0.0, "clients": {"0": r / 1.5**2}}
        assert state == {
            "round": r,
            "epsilon": epsilon,
            "delta": DELTA,
            "budget": None,
            "clip": 0.5,
            "history": [[1.5, 0.5, r]],
            "exposure": exposure,
            "against": privacy.WEIGHTS_READER,
            "epsilons": {privacy.STORE_READER: math.inf, privacy.WEIGHTS_READER: epsilon},
            "published": exposure,
        }


def test_another_strategys_state_is_refused() -> None:
    with pytest.raises(StrategyError, match="dp_fedavg state holds .* another strategy's"):
        dp().aggregate(net(0, 0, 0), updates((1, 0, 0)), {"m": {}}, clients=1)


def test_updates_of_another_network_are_refused_naming_the_client() -> None:
    other = [Update(4, 1.0, {"fc": {"weight": t(1, 2), "steps": torch.tensor(0)}})]
    with pytest.raises(StrategyError, match="node 'fc' key 'weight': .* in client 4"):
        dp().aggregate(net(0, 0, 0), other, None, clients=5)


def test_more_clients_than_expected_are_refused_naming_the_option() -> None:
    strategy = dp(clients_per_round=1)
    arrivals = [Arrival(0, 1.0, False), Arrival(1, 1.0, False)]
    with pytest.raises(StrategyError, match="2 clients came, more than clients_per_round=1"):
        strategy.check(arrivals, clients=4)
    with pytest.raises(StrategyError, match="clients_per_round=5 is more than the run's 4"):
        dp(clients_per_round=5).check(arrivals, clients=4)


# --- the budget ------------------------------------------------------------------------------


def test_a_round_past_the_budget_is_refused_before_anything_is_computed() -> None:
    """z = 1.1 with everyone every round: the budget allows two rounds, not three."""
    two = privacy.epsilon(1.1, 1.0, 2, DELTA)
    three = privacy.epsilon(1.1, 1.0, 3, DELTA)
    strategy = dp(noise_multiplier=1.1, budget=(two + three) / 2)
    weights, state = net(0, 0, 0), None
    for _ in range(2):
        strategy.check_state(state, clients=1)
        weights, state = strategy.aggregate(weights, updates((1, 0, 0)), state, clients=1)
    assert state["epsilon"] == pytest.approx(two)
    message = (
        rf"budget={(two + three) / 2:g}: one more round would spend epsilon {three:.4g} "
        rf"at delta 1e-05 \(2 rounds so far spent {two:.4g}\)"
    )
    with pytest.raises(StrategyError, match=message):
        strategy.check_state(state, clients=1)
    with pytest.raises(StrategyError, match=message):
        strategy.aggregate(weights, Untouchable(), state, clients=1)


def test_the_round_refuses_a_round_past_the_budget_before_anything_is_claimed(tmp_path) -> None:
    store = soma.Store(tmp_path)
    start = net(0, 0, 0)
    options = {"noise_multiplier": 1.0, "budget": 0.1}
    with pytest.raises(StrategyError, match=r"budget=0.1: one more round .*\(0 rounds so far"):
        soma.gather(
            store,
            net(1, 0, 0),
            run="dp",
            round=0,
            clients=1,
            mine=0,
            deadline=5,
            strategy="dp_fedavg",
            options=options,
            start=store.put_value(start),
        )
    assert not [n for n in store.bound() if n.endswith("/claimed")]


# --- adaptive clipping in the strategy -------------------------------------------------------


def test_central_adaptive_clip_by_hand() -> None:
    """Clip 0.5: of (3, 4), (0.1, 0), (0, 0.1), (0.1, 0.1), three are within: 3/4 against
    the median, lr 0.2, no count noise: 0.5 exp(-0.2 (0.75 - 0.5))."""
    strategy = dp(clip=0.5, noise_multiplier=0.0, adaptive={"count_noise": 0.0})
    rows = [(3, 4), (0.1, 0), (0, 0.1), (0.1, 0.1)]
    weights, state = strategy.aggregate(net(0, 0), updates(*rows), None, clients=4)
    assert state["clip"] == pytest.approx(0.5 * math.exp(-0.05))
    # the next round: one of the four came, clipped; the three who did not count as 1/2
    # each (indicators minus 1/2 over the fixed m, plus 1/2): (0 - 1/2) / 4 + 1/2 = 0.375
    _, again = strategy.aggregate(weights, updates((3, 4)), state, clients=4)
    assert again["clip"] == pytest.approx(state["clip"] * math.exp(-0.2 * (0.375 - 0.5)))


def test_adaptive_raises_the_updates_noise_to_keep_the_rounds_multiplier() -> None:
    """z = 1, count noise 1: the update's noise is z_D C / m, z_D = (1 - 1/4)^(-1/2)."""
    strategy = dp(clip=0.5, noise_multiplier=1.0, adaptive={"count_noise": 1.0})
    start = {"big": {"w": torch.zeros(100_000)}}
    weights, state = strategy.aggregate(start, [Update(0, 1.0, start)], None, clients=2)
    expected = 0.5 / math.sqrt(0.75) / 2
    assert weights["big"]["w"].double().std().item() == pytest.approx(expected, rel=0.02)
    assert state["epsilon"] == privacy.epsilon(1.0, 1.0, 1, DELTA)  # accounted with z


def test_a_count_noise_too_small_for_the_multiplier_is_refused_naming_it() -> None:
    with pytest.raises(StrategyError, match=r"adaptive.count_noise=0.5 \(clients per round / 20\)"):
        dp(noise_multiplier=2.0, adaptive=True).check([Arrival(0, 1.0, False)], clients=10)


# --- the strategy, distributed ---------------------------------------------------------------


def share(strategy, start, state=None):
    return strategy.local(start=start, state=state, mine=None)


def test_a_distributed_client_releases_its_clipped_update_plus_its_share_of_noise() -> None:
    """z = 1.5, C = 0.5, m = 4: the client adds noise of standard deviation 1.5 x 0.5 / 2."""
    strategy = reproducible(clip=0.5, noise_multiplier=1.5, mode="distributed", clients_per_round=4)
    start = net(1, 1, 1, count=2)
    objective = share(strategy, start)
    released = objective.release(net(4, 5, 1, count=9), start, seed=11)
    noise = privacy.gaussian(start, 0.375, NOT_PRIVATE(3, "distributed", 1, 11))
    expected = t(1.3, 1.4, 1) + noise["fc"]["weight"]
    assert torch.allclose(released["fc"]["weight"], expected, atol=1e-6)
    assert torch.equal(released["fc"]["steps"], torch.tensor(2))  # the start's, not its own
    assert objective.finish(released) == (None, None)


def test_distributed_shares_have_standard_deviation_z_c_over_sqrt_m() -> None:
    strategy = dp(clip=0.5, noise_multiplier=2.0, mode="distributed", clients_per_round=4)
    start = {"big": {"w": torch.zeros(100_000)}}
    released = share(strategy, start).release(start, start, seed=1)
    assert released["big"]["w"].double().std().item() == pytest.approx(2.0 * 0.5 / 2, rel=0.02)


def test_distributed_clients_draw_their_own_noise_and_a_reproducible_rerun_the_same() -> None:
    strategy = reproducible(clip=0.5, noise_multiplier=1.0, mode="distributed", clients_per_round=2)
    start = {"big": {"w": torch.zeros(1000)}}
    a = share(strategy, start).release(start, start, seed=1)["big"]["w"]
    b = share(strategy, start).release(start, start, seed=2)["big"]["w"]
    assert torch.equal(a, share(strategy, start).release(start, start, seed=1)["big"]["w"])
    assert not torch.equal(a, b)


def test_the_distributed_averager_only_averages_over_the_m_expected() -> None:
    strategy = dp(clip=0.5, noise_multiplier=1.0, mode="distributed", clients_per_round=2)
    weights, state = strategy.aggregate(
        net(0, 0, 0), updates((3, 4, 0), (1, 0, 0)), None, clients=4
    )
    assert torch.allclose(weights["fc"]["weight"], t(2, 2, 0))  # not clipped: not its to do
    # the sample is public; each release is in the store, at z / sqrt(m)
    assert state["epsilon"] == pytest.approx(privacy.epsilon_public(2.0, DELTA))
    assert state["epsilons"]["weights_reader"] == privacy.epsilon_public(1.0, DELTA)


def test_a_distributed_round_with_fewer_than_m_clients_is_refused() -> None:
    strategy = dp(mode="distributed", clients_per_round=3)
    with pytest.raises(StrategyError, match="2 of the clients_per_round=3 clients came"):
        strategy.check([Arrival(0, 1.0, False), Arrival(1, 1.0, False)], clients=3)
    with pytest.raises(StrategyError, match="2 of the clients_per_round=3 clients came"):
        strategy.aggregate(net(0, 0, 0), updates((1, 0, 0), (1, 0, 0)), None, clients=3)


def test_a_distributed_client_cannot_finish_without_releasing() -> None:
    strategy = dp(mode="distributed", clients_per_round=1)
    with pytest.raises(StrategyError, match="finish\\(\\) before release\\(\\)"):
        share(strategy, net(0, 0, 0)).finish(net(1, 0, 0))


def test_distributed_adaptive_clipping_sums_the_clients_indicators() -> None:
    """Clip 0.5, no count noise: client 0's (3, 4) is clipped, client 1's (0.1, 0) is not:
    half within, against a quantile of 0.25, lr 0.2: 0.5 exp(-0.2 (0.5 - 0.25))."""
    strategy = dp(
        clip=0.5,
        noise_multiplier=0.0,
        mode="distributed",
        clients_per_round=2,
        adaptive={"quantile": 0.25, "count_noise": 0.0},
    )
    start = net(0, 0)
    sent = []
    for k, row in enumerate([(3, 4), (0.1, 0)]):
        objective = share(strategy, start)
        released = objective.release(net(*row), start, seed=k)
        extra, _ = objective.finish(released)
        sent.append(Update(k, 1.0, released, extra))
    strategy.check([Arrival(u.client, 1.0, True) for u in sent], clients=2)
    weights, state = strategy.aggregate(start, sent, None, clients=2)
    assert torch.allclose(weights["fc"]["weight"], t(0.2, 0.2))
    assert state["clip"] == pytest.approx(0.5 * math.exp(-0.05))
    with pytest.raises(StrategyError, match="client 1 sent no clipped indicator"):
        strategy.check([Arrival(0, 1.0, True), Arrival(1, 1.0, False)], clients=2)
    clip = share(strategy, start, state).clip  # the clients clip to the state's bound
    assert clip == state["clip"]


class Setter:
    """A task whose training sets the weight to what the data says."""

    def train(self, nodes, data, *, seed, objective=None):
        with torch.no_grad():
            nodes["fc"].weight.copy_(data)
        return {}


def test_train_locally_sends_what_the_objective_releases() -> None:
    strategy = reproducible(clip=0.5, noise_multiplier=1.5, mode="distributed", clients_per_round=4)
    nodes = {"fc": nn.Linear(3, 1, bias=False)}
    with torch.no_grad():
        nodes["fc"].weight.copy_(t(1, 1, 1).reshape(1, 3))
    start = soma.export(nodes)
    _, extra, own = train_locally(
        strategy, Setter(), nodes, t(4, 5, 1).reshape(1, 3), seed=11, state=None, mine=None
    )
    noise = privacy.gaussian(start, 0.375, NOT_PRIVATE(3, "distributed", 1, 11))
    expected = t(1.3, 1.4, 1).reshape(1, 3) + noise["fc"]["weight"]
    assert torch.allclose(soma.export(nodes)["fc"]["weight"], expected, atol=1e-6)
    assert (extra, own) == (None, None)


def test_the_digits_federation_runs_in_both_modes_and_accounts_the_same() -> None:
    options = {"clip": 1.0, "noise_multiplier": 0.5, "clients_per_round": 10}
    for mode in ("central", "distributed"):
        result = soma.simulate(
            "soma.tasks.digits",
            clients=10,
            rounds=2,
            task_options={"epochs": 1},
            strategy="dp_fedavg",
            strategy_options={**options, "mode": mode},
        )
        assert 0 <= result.evaluation["accuracy"] <= 1, mode


# --- options ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"clip": 0}, "clip"),
        ({"clip": -1.0}, "clip"),
        ({"clip": float("nan")}, "clip"),
        ({"clip": True}, "clip"),
        ({"noise_multiplier": -0.1}, "noise_multiplier"),
        ({"mode": "local"}, "mode"),
        ({"clients_per_round": 0}, "clients_per_round"),
        ({"mode": "distributed"}, "clients_per_round is needed in distributed mode"),
        ({"adaptive": {"bogus": 1}}, "adaptive has no bogus"),
        ({"adaptive": {"quantile": 1.0}}, "adaptive.quantile"),
        ({"adaptive": {"lr": 0}}, "adaptive.lr"),
        ({"adaptive": "yes"}, "adaptive"),
        ({"seed": -1}, "seed"),
        ({"delta": 0}, "delta"),
        ({"delta": 1}, "delta"),
        ({"budget": 0}, "budget"),
    ],
)
def test_a_bad_option_is_refused_naming_it(options: dict, named: str) -> None:
    with pytest.raises(StrategyError, match=f"dp_fedavg option {named}"):
        load_strategy("dp_fedavg", options)


@pytest.mark.slow
def test_soma_imports_without_the_accountant_and_dp_fedavg_says_what_to_install() -> None:
    script = """
import sys
sys.modules["dp_accounting"] = None  # as if it were not installed
import soma, soma.privacy, soma.round, soma.strategies.dp_fedavg
from soma.strategies import StrategyError, load_strategy
try:
    load_strategy("dp_fedavg")
except StrategyError as error:
    assert "soma[privacy]" in str(error), error
else:
    raise AssertionError("dp_fedavg was made without its accountant")
try:
    soma.privacy.epsilon(1.0, 1.0, 1, 1e-5)
except soma.privacy.PrivacyError as error:
    assert "soma[privacy]" in str(error), error
else:
    raise AssertionError("an epsilon without its accountant")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_soma_status_shows_the_privacy_spent_per_round(tmp_path) -> None:
    import json

    from soma.privacy import epsilon
    from soma.round import Meeting, average_round, contribute, status

    store = soma.Store(tmp_path)
    start = store.put_value(net(0, 0, 0))
    options = {"noise_multiplier": 1.0}
    state = None
    for r in range(2):
        meeting = Meeting(
            "dp", r, 1, start=start, state=state, strategy="dp_fedavg", options=options
        )
        contribute(store, meeting, net(1, 0, 0), mine=0, size=1)
        record = store.recall_digest(average_round(store, meeting, deadline=5, lease=LEASE))
        start, state = record["weights"], record["state"]
    rows = status(store, "dp")
    spent = [row["privacy"] for row in rows]
    assert [s["round"] for s in spent] == [1, 2] and spent[0]["delta"] == 1e-5
    assert spent[0]["epsilon"] < spent[1]["epsilon"]
    assert spent[1]["epsilon"] == pytest.approx(epsilon(1.0, 1.0, 2, 1e-5))
    command = [sys.executable, "-m", "soma.cli", "status", "--store", str(tmp_path), "--run", "dp"]
    shown = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    shown_spent = f"privacy spent: epsilon {spent[1]['epsilon']:.4g} at delta 1e-05"
    assert f"{shown_spent}, against whoever reads only the published weights" in shown.stdout
    assert "; epsilon inf against whoever reads the store or the config" in shown.stdout
    as_json = subprocess.run([*command, "--json"], capture_output=True, text=True, check=True)
    assert json.loads(as_json.stdout)[1]["privacy"] == spent[1]


@pytest.mark.workflow
def test_the_workflows_summary_has_the_epsilon_spent_per_round(tmp_path) -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(root / "Snakefile"),
        "-d",
        str(tmp_path),
    ]
    command += ["--cores", "2", "results/dp/summary.tsv"]  # the table read below, not the model
    command += ["--configfile", str(root / "tests/fixtures/tiny.yaml")]
    command += [str(root / "tests/fixtures/no-baselines.yaml"), "--config", "strategy=dp_fedavg"]
    command += ["strategy_options={dp_fedavg: {noise_multiplier: 2.0}}", "run=dp"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = (tmp_path / "results/dp/summary.tsv").read_text().splitlines()
    header = lines[0].split("\t")
    column = header.index("epsilon")
    assert header[column + 1] == "epsilon_against"
    rows = [line.split("\t") for line in lines[2:]]  # after the start row
    expected = [privacy.epsilon_public(r / 2.0**2, 1e-5) for r in (1, 2)]
    assert [float(row[column]) for row in rows] == pytest.approx(expected, rel=1e-3)
    assert {row[column + 1] for row in rows} == {privacy.WEIGHTS_READER}  # central mode
    store_reader = header.index("epsilon_store_reader")
    assert {row[store_reader] for row in rows} == {"inf"}
