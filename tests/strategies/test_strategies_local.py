"""The client-side strategies (FedProx, SCAFFOLD) and what TrainingRun does for them.

Every number below is worked out by hand: binary fractions, so float32 gets them exactly.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import soma
from soma.strategies import (
    Arrival,
    StrategyError,
    Update,
    check_arrivals,
    load_strategy,
    objective_of,
)
from soma.tasks import digits
from soma.training import TrainingError, TrainingRun, keyed_parameters

torch.set_num_threads(1)


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def column(*values: float) -> nn.Linear:
    """Linear(1, n) without bias whose weight is the column `values`: its output is w * x."""
    node = nn.Linear(1, len(values), bias=False)
    with torch.no_grad():
        node.weight.copy_(t(*values).reshape(-1, 1))
    return node


def half_square(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """0.5 ||pred - target||^2: its gradient in pred is pred - target."""
    return 0.5 * ((pred - target) ** 2).sum()


class ParametersOnly:
    """A node that knows its parameters but not their names."""

    def __init__(self) -> None:
        self.weight = nn.Parameter(torch.ones(3, 3))
        self.bias = nn.Parameter(torch.zeros(3))

    def parameters(self):
        return iter([self.weight, self.bias])

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.T + self.bias

    def train(self, mode: bool = True) -> None: ...


class Recorder:
    """An objective that changes nothing and remembers what it was handed."""

    def __init__(self) -> None:
        self.rates: list[float] = []
        self.parameters: list[object] = []

    def adjust(self, parameters, lr: float) -> None:
        self.rates.append(lr)
        self.parameters.append(parameters)

    def finish(self, trained):
        return None, None


# --- TrainingRun: the optimizer and the objective's parameters ------------------------------


def test_a_parameters_map_is_keyed_like_an_export_parameters_only_nodes_by_position() -> None:
    torch.manual_seed(0)
    nodes = {
        "linear": nn.Linear(2, 3),
        "norm": nn.BatchNorm1d(3),
        "act": nn.ReLU(),
        "plain": ParametersOnly(),
    }
    recorder = Recorder()
    run = TrainingRun(nodes, loss=half_square, objective=recorder, batch_size=4)
    run.fit((torch.randn(4, 2), torch.randn(4, 3)))
    exported = soma.export(nodes)
    handed = recorder.parameters[0]
    assert handed is run.parameters  # built once, not per step
    assert set(handed) == {"linear", "norm", "plain"}
    assert set(handed["linear"]) == {"weight", "bias"}
    assert set(handed["norm"]) == {"weight", "bias"}  # buffers are not parameters
    assert set(handed["plain"]) == {"0", "1"}
    for node_id, keys in handed.items():
        assert set(keys) <= set(exported[node_id])
    assert handed["linear"]["weight"] is nodes["linear"].weight
    assert handed["plain"]["0"] is nodes["plain"].weight
    assert handed["plain"]["1"] is nodes["plain"].bias
    assert keyed_parameters(nodes).keys() == handed.keys()


def test_an_optimizer_factory_trains_and_its_rate_is_what_the_objective_gets() -> None:
    torch.manual_seed(0)
    inputs = torch.randn(64, 3)
    targets = inputs @ t(1.0, -2.0, 0.5).reshape(3, 1)
    nodes = {"out": nn.Linear(3, 1)}
    recorder = Recorder()
    run = TrainingRun(
        nodes,
        loss=nn.functional.mse_loss,
        optimizer=lambda ps: torch.optim.Adam(ps, lr=0.01),
        objective=recorder,
        epochs=5,
        batch_size=8,
    )
    assert isinstance(run.optimizer, torch.optim.Adam)
    before = float(run.evaluate((inputs, targets)))
    run.fit((inputs, targets))
    assert float(run.evaluate((inputs, targets))) < before
    assert recorder.rates == [0.01] * 40  # 5 epochs of 8 batches


def test_soma_sgd_hands_the_objective_its_own_rate() -> None:
    recorder = Recorder()
    run = TrainingRun({"w": column(1.0)}, loss=half_square, lr=0.25, objective=recorder)
    run.fit((t(1.0).reshape(1, 1), t(0.0).reshape(1, 1)))
    assert recorder.rates == [0.25]


def test_an_optimizer_beside_lr_momentum_or_weight_decay_is_refused_by_name() -> None:
    adam = lambda ps: torch.optim.Adam(ps, lr=0.01)  # noqa: E731
    for given in ({"lr": 0.1}, {"momentum": 0.9}, {"weight_decay": 0.0}):
        with pytest.raises(TrainingError, match=next(iter(given))):
            TrainingRun({"w": column(1.0)}, loss=half_square, optimizer=adam, **given)


def test_an_optimizer_without_a_rate_is_refused_with_an_objective() -> None:
    class NoRate:
        def zero_grad(self) -> None: ...

        def step(self) -> None: ...

    with pytest.raises(TrainingError, match="NoRate"):
        TrainingRun(
            {"w": column(1.0)},
            loss=half_square,
            optimizer=lambda ps: NoRate(),
            objective=Recorder(),
        )
    TrainingRun({"w": column(1.0)}, loss=half_square, optimizer=lambda ps: NoRate())  # no need


# --- FedProx ---------------------------------------------------------------------------------


def test_fedprox_one_step_pulls_towards_the_start_by_hand() -> None:
    """w = [1, 2], w0 = [0.5, 1], loss = w . x with x = [3, 4]: g = [3, 4].
    mu = 0.5, lr = 0.25: w - lr (g + mu (w - w0)) = [1, 2] - 0.25 [3.25, 4.5] = [0.1875, 0.875].
    """
    node = nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        node.weight.copy_(t(1.0, 2.0).reshape(1, 2))
    start = {"out": {"weight": t(0.5, 1.0).reshape(1, 2)}}
    objective = objective_of(
        load_strategy("fedprox", {"mu": 0.5}), start=start, state=None, mine=None
    )
    run = TrainingRun(
        {"out": node}, loss=lambda pred, target: pred.sum(), lr=0.25, objective=objective
    )
    run.fit((t(3.0, 4.0).reshape(1, 2), t(0.0).reshape(1, 1)))
    assert torch.equal(node.weight, t(0.1875, 0.875).reshape(1, 2))
    assert objective.finish(soma.export({"out": node})) == (None, None)


def digits_round(objective, seed: int = 7):
    task = digits.make(model="softmax", labels_per_client=3)
    nodes = task.nodes(0)
    task.train(nodes, task.shard(1, 4), seed=seed, objective=objective)
    return soma.export(nodes)


def test_fedprox_with_mu_zero_trains_exactly_as_fedavg() -> None:
    start = soma.export(digits.make(model="softmax", labels_per_client=3).nodes(0))
    strategy = load_strategy("fedprox", {"mu": 0})
    objective = objective_of(strategy, start=start, state=None, mine=None)
    plain, proximal = digits_round(None), digits_round(objective)
    assert all(torch.equal(plain["out"][k], proximal["out"][k]) for k in plain["out"])
    # and mu > 0 does change it (so the equality above is not vacuous)
    pulled = digits_round(
        objective_of(load_strategy("fedprox", {"mu": 1.0}), start=start, state=None, mine=None)
    )
    assert not torch.equal(plain["out"]["weight"], pulled["out"]["weight"])


def test_fedprox_server_side_is_fedavg() -> None:
    updates = [
        Update(0, 1, {"n": {"w": t(2.0, 0.0)}}),
        Update(1, 3, {"n": {"w": t(6.0, 4.0)}}),
    ]
    weights, state = load_strategy("fedprox").aggregate(
        {"n": {"w": t(1.0, 1.0)}}, iter(updates), None, clients=4
    )
    assert torch.equal(weights["n"]["w"], t(5.0, 3.0)) and state is None


# --- SCAFFOLD: the client ----------------------------------------------------------------------


def scaffold_client(c: list[float], c_i: list[float]):
    """Two steps of lr 0.5 from w = [1, 2] on 0.5 ||w||^2 (gradient w), corrected by c - c_i."""
    node = column(1.0, 2.0)
    start = soma.export({"out": node})
    state = {"c": {"out": {"weight": t(*c).reshape(2, 1)}}}
    mine = {"c": {"out": {"weight": t(*c_i).reshape(2, 1)}}}
    objective = objective_of(load_strategy("scaffold"), start=start, state=state, mine=mine)
    run = TrainingRun({"out": node}, loss=half_square, lr=0.5, batch_size=1, objective=objective)
    run.fit((torch.ones(2, 1), torch.zeros(2, 2)))  # two identical examples: two steps
    return node, objective


def test_scaffold_client_two_corrected_steps_and_its_new_variate_by_hand() -> None:
    """c = [1, 0], c_i = [0.5, 0.5]: correction c - c_i = [0.5, -0.5]; lr 0.5.
    step 1: g = [1, 2] + [0.5, -0.5] = [1.5, 1.5];   w = [1, 2] - 0.75 = [0.25, 1.25]
    step 2: g = [0.25, 1.25] + corr = [0.75, 0.75];  w = [0.25, 1.25] - 0.375 = [-0.125, 0.875]
    sum of rates 1: c_i+ = c_i - c + (start - w) = [-0.5, 0.5] + [1.125, 1.125] = [0.625, 1.625]
    (option II; the same as the rate-weighted mean of the raw gradients, 0.5 [1, 2] +
    0.5 [0.25, 1.25]), and delta c_i = c_i+ - c_i = [0.125, 1.125].
    """
    node, objective = scaffold_client(c=[1.0, 0.0], c_i=[0.5, 0.5])
    assert torch.equal(node.weight, t(-0.125, 0.875).reshape(2, 1))
    extra, mine = objective.finish(soma.export({"out": node}))
    assert torch.equal(mine["c"]["out"]["weight"], t(0.625, 1.625).reshape(2, 1))
    assert torch.equal(extra["out"]["weight"], t(0.125, 1.125).reshape(2, 1))


def test_scaffold_client_under_momentum_keeps_its_variate_a_gradient() -> None:
    """c = c_i = 0, lr 0.5, momentum 0.5 on 0.5 ||w||^2 from w = [1, 2]:
    step 1: g = [1, 2], buffer [1, 2], w = [0.5, 1]; step 2: g = [0.5, 1], buffer
    0.5 [1, 2] + [0.5, 1] = [1, 2], w = [0, 0]. c_i+ = (0.5 [1, 2] + 0.5 [0.5, 1]) / 1 =
    [0.75, 1.5], the mean gradient; (start - trained) / 1 would be [1, 2], inflated by momentum.
    """
    node = column(1.0, 2.0)
    objective = objective_of(
        load_strategy("scaffold"), start=soma.export({"out": node}), state=None, mine=None
    )
    run = TrainingRun(
        {"out": node}, loss=half_square, lr=0.5, momentum=0.5, batch_size=1, objective=objective
    )
    run.fit((torch.ones(2, 1), torch.zeros(2, 2)))
    assert torch.equal(node.weight, t(0.0, 0.0).reshape(2, 1))
    extra, mine = objective.finish(soma.export({"out": node}))
    assert torch.equal(mine["c"]["out"]["weight"], t(0.75, 1.5).reshape(2, 1))


def test_scaffold_client_with_no_state_starts_from_zero_variates() -> None:
    """c = c_i = 0: plain steps w = [1, 2] -> [0.5, 1] -> [0.25, 0.5]; c_i+ = [0.75, 1.5]."""
    node = column(1.0, 2.0)
    objective = objective_of(
        load_strategy("scaffold"), start=soma.export({"out": node}), state=None, mine=None
    )
    run = TrainingRun({"out": node}, loss=half_square, lr=0.5, batch_size=1, objective=objective)
    run.fit((torch.ones(2, 1), torch.zeros(2, 2)))
    assert torch.equal(node.weight, t(0.25, 0.5).reshape(2, 1))
    extra, mine = objective.finish(soma.export({"out": node}))
    assert torch.equal(mine["c"]["out"]["weight"], t(0.75, 1.5).reshape(2, 1))
    assert torch.equal(extra["out"]["weight"], t(0.75, 1.5).reshape(2, 1))


def test_scaffold_covers_buffers_with_a_zero_delta_and_leaves_counts_out() -> None:
    torch.manual_seed(0)
    nodes = {"linear": nn.Linear(2, 3), "norm": nn.BatchNorm1d(3)}
    start = soma.export(nodes)
    objective = objective_of(load_strategy("scaffold"), start=start, state=None, mine=None)
    TrainingRun(nodes, loss=half_square, objective=objective, batch_size=4).fit(
        (torch.randn(8, 2), torch.randn(8, 3))
    )
    extra, mine = objective.finish(soma.export(nodes))
    assert set(extra["norm"]) == {"weight", "bias", "running_mean", "running_var"}
    assert torch.equal(extra["norm"]["running_mean"], torch.zeros(3))
    assert not torch.equal(extra["norm"]["weight"], torch.zeros(3))
    assert set(mine["c"]["norm"]) == set(extra["norm"])


def test_scaffold_client_that_took_no_step_is_refused() -> None:
    node = column(1.0, 2.0)
    objective = objective_of(
        load_strategy("scaffold"), start=soma.export({"out": node}), state=None, mine=None
    )
    with pytest.raises(StrategyError, match="0 corrected steps"):
        objective.finish(soma.export({"out": node}))


# --- SCAFFOLD: the server ----------------------------------------------------------------------

PREVIOUS = {"n": {"w": t(1.0, 1.0), "count": torch.tensor(5)}}


def two_updates() -> list[Update]:
    return [
        Update(
            0, 1, {"n": {"w": t(2.0, 0.0), "count": torch.tensor(7)}}, {"n": {"w": t(1.0, 2.0)}}
        ),
        Update(
            1, 3, {"n": {"w": t(6.0, 4.0), "count": torch.tensor(9)}}, {"n": {"w": t(3.0, -2.0)}}
        ),
    ]


def test_scaffold_server_two_of_four_clients_by_hand() -> None:
    """Sizes 1 and 3: mean = (1 [2, 0] + 3 [6, 4]) / 4 = [5, 3]; server_lr 0.5: x =
    [1, 1] + 0.5 ([5, 3] - [1, 1]) = [3, 2]. |S|/N = 2/4, mean of delta c_i = [2, 0]:
    c = [0.5, 0.5] + 0.5 [2, 0] = [1.5, 0.5]. The count is the first update's, as FedAvg's."""
    state = {"c": {"n": {"w": t(0.5, 0.5)}}}
    weights, new = load_strategy("scaffold", {"server_lr": 0.5}).aggregate(
        PREVIOUS, iter(two_updates()), state, clients=4
    )
    assert torch.equal(weights["n"]["w"], t(3.0, 2.0))
    assert torch.equal(weights["n"]["count"], torch.tensor(7))
    assert set(new["c"]["n"]) == {"w"}
    assert torch.equal(new["c"]["n"]["w"], t(1.5, 0.5))


def test_scaffold_server_with_server_lr_one_is_fedavg_bit_for_bit_and_starts_c_at_zero() -> None:
    weights, new = load_strategy("scaffold").aggregate(
        PREVIOUS, iter(two_updates()), None, clients=4
    )
    fedavg, _ = load_strategy("fedavg").aggregate(PREVIOUS, iter(two_updates()), None, clients=4)
    assert torch.equal(weights["n"]["w"], fedavg["n"]["w"])
    assert torch.equal(weights["n"]["w"], t(5.0, 3.0))
    assert torch.equal(new["c"]["n"]["w"], t(1.0, 0.0))  # 0 + 0.5 [2, 0]


def test_scaffold_refuses_a_client_that_sent_no_extra_naming_it() -> None:
    strategy = load_strategy("scaffold")
    arrivals = [Arrival(0, 1, True), Arrival(2, 3, False), Arrival(3, 1, True)]
    with pytest.raises(StrategyError, match=r"clients \[2\] sent none"):
        check_arrivals(strategy, arrivals, clients=4)
    check_arrivals(strategy, [Arrival(0, 1, True)], clients=4)
    silent = [two_updates()[0], Update(2, 3, {"n": {"w": t(6.0, 4.0), "count": torch.tensor(9)}})]
    with pytest.raises(StrategyError, match="client 2 sent none"):
        strategy.aggregate(PREVIOUS, iter(silent), None, clients=4)


def test_scaffold_refuses_an_extra_without_a_key_naming_client_and_key() -> None:
    updates = [Update(3, 1, {"n": {"w": t(2.0, 0.0), "count": torch.tensor(7)}}, {"n": {}})]
    with pytest.raises(StrategyError, match=r"client 3's extra .*'n' 'w'"):
        load_strategy("scaffold").aggregate(PREVIOUS, iter(updates), None, clients=4)


def one_round(strategy, start, state, mine):
    """One client's round on the quadratic of the client tests, then the server's."""
    node = column(1.0, 2.0)
    soma.load({"out": node}, start)
    objective = objective_of(strategy, start=start, state=state, mine=mine)
    run = TrainingRun({"out": node}, loss=half_square, lr=0.5, batch_size=1, objective=objective)
    run.fit((torch.ones(2, 1), torch.zeros(2, 2)))
    extra, kept = objective.finish(soma.export({"out": node}))
    update = Update(0, 2, soma.export({"out": node}), extra)
    weights, new_state = strategy.aggregate(start, iter([update]), state, clients=2)
    return weights, new_state, kept


def flat(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    return [x for k in sorted(value) for x in flat(value[k])]


@pytest.mark.parametrize("lazy", [False, True])
def test_scaffold_state_and_mine_round_trip_through_the_store(tmp_path, lazy: bool) -> None:
    strategy = load_strategy("scaffold", {"server_lr": 0.5})
    start = soma.export({"out": column(1.0, 2.0)})
    weights, state, mine = one_round(strategy, start, None, None)
    store = soma.Store(tmp_path)
    kept_state = store.recall_digest(store.put_value(state), lazy=lazy)
    kept_mine = store.recall_digest(store.put_value(mine), lazy=lazy)
    direct = one_round(strategy, weights, state, mine)
    recalled = one_round(strategy, weights, kept_state, kept_mine)
    assert all(torch.equal(a, b) for a, b in zip(flat(direct[0]), flat(recalled[0]), strict=True))
    for a, b in zip(direct[1:], recalled[1:], strict=True):
        assert all(torch.equal(x, y) for x, y in zip(flat(a), flat(b), strict=True))
    assert not torch.equal(direct[1]["c"]["out"]["weight"], state["c"]["out"]["weight"])


# --- options ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "options", "named"),
    [
        ("fedprox", {"mu": -1}, "mu"),
        ("fedprox", {"mu": float("nan")}, "mu"),
        ("fedprox", {"mu": True}, "mu"),
        ("fedprox", {"nu": 0.1}, "nu"),
        ("scaffold", {"server_lr": 0}, "server_lr"),
        ("scaffold", {"server_lr": float("inf")}, "server_lr"),
        ("scaffold", {"lr": 1.0}, "lr"),
    ],
)
def test_options_are_refused_by_name(name: str, options: dict, named: str) -> None:
    with pytest.raises(StrategyError, match=named):
        load_strategy(name, options)


# --- end to end on digits, in one process ---------------------------------------------------


def federate(name: str, options: dict, *, clients: int = 4, rounds: int = 3) -> float:
    task = digits.make(model="softmax", labels_per_client=3)
    strategy = load_strategy(name, options)
    shards = [task.shard(k, clients) for k in range(clients)]
    nodes = task.nodes(0)
    weights, state, mine = soma.export(nodes), None, {}
    for r in range(1, rounds + 1):
        updates = []
        for k, data in enumerate(shards):
            soma.load(nodes, weights)
            objective = objective_of(strategy, start=weights, state=state, mine=mine.get(k))
            task.train(nodes, data, seed=r * 1000 + k, objective=objective)
            trained = soma.export(nodes)
            extra, mine[k] = objective.finish(trained)
            updates.append(Update(k, task.size(data), trained, extra))
        arrivals = [Arrival(u.client, u.size, u.extra is not None) for u in updates]
        check_arrivals(strategy, arrivals, clients=clients)
        weights, state = strategy.aggregate(weights, iter(updates), state, clients=clients)
    soma.load(nodes, weights)
    return task.evaluate(nodes)["accuracy"]


@pytest.mark.parametrize(
    ("name", "options"),
    [("fedprox", {"mu": 0.1}), ("scaffold", {}), ("scaffold", {"server_lr": 0.5})],
)
def test_a_small_federation_on_digits_learns(name: str, options: dict) -> None:
    assert federate(name, options) > 0.8  # SCAFFOLD with option II on momentum: 0.62
