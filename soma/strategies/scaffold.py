"""SCAFFOLD (Karimireddy et al. 2020): control variates that cancel each client's drift. Streams.

Each client corrects every step by (c - c_i), the server's estimate of the global gradient
direction minus its own, so that clients whose data pull elsewhere still step roughly where
the federation as a whole would. After training it updates its own variate by option II of
the paper, c_i+ = c_i - c + (start - trained) / (K eta_l), computed from the steps rather
than from where they ended:

    c_i+ = (sum over steps of lr_k * g_k) / (sum over steps of lr_k)

g_k being the step's gradient before the correction. With plain SGD the two are the same
(start - trained is the sum of lr_k (g_k + c - c_i)), and K eta_l is generalised to the sum
of the rates of the steps actually taken, so a schedule is counted as it was. They part with
momentum, Adam or weight decay: then start - trained is no longer the sum of lr_k times the
gradients (momentum 0.9 makes it about ten times that), c_i comes out too large, and the
variates oscillate with a growing amplitude (on the digits task with its default momentum,
accuracy falls round after round). Summed from the steps, c_i stays a gradient whatever the
optimizer does with it, which is what the correction needs. The cost is one more tensor per
parameter while training. `finish` therefore does not read the trained weights.

The client sends delta c_i = c_i+ - c_i beside its weights (`Update.extra`) and keeps c_i+
as its own (`mine`). The server moves x by `server_lr` towards the mean of the clients'
weights (with `server_lr=1`, the default, x is that mean itself, bit for bit). Option
`server_mean`: `weighted` (the default) weighs each client by its data size, as FedAvg
and Flower's strategies do; `uniform` is the paper's plain mean x + server_lr/|S| sum of
(y_i - x), every client the same whatever its size. The two agree when sizes are equal.
and c by |S|/N times the unweighted mean of the delta c_i, that is (sum of delta c_i) / N,
N being `clients` (all the run's clients, not only the round's).

What c covers: every float key of the export, so that it is kept and sent like an export.
The correction applies to parameters only; buffers (BatchNorm's running statistics) are not
trained by gradient, so their delta c_i is zero and their c stays zero. A parameter with no
gradient in a step (frozen, or not in that step's graph) is neither corrected nor counted in
that step. Counts (integer tensors) are left as FedAvg leaves them.

State: `{"c": export-shaped map}`, zeros the first round; a client's own: `{"c": c_i}`, zeros
the first time it trains. Options: `server_lr` (default 1.0), a finite number > 0;
`server_mean` (weighted or uniform, above).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace

import torch

from soma.arithmetic import averageable
from soma.nodes import Export
from soma.strategies import (
    Arrival,
    Parameters,
    State,
    Strategy,
    StrategyError,
    Update,
    floats,
)
from soma.strategies.fedavg import weighted_mean
from soma.strategies.fedprox import start_of, trainable

Key = tuple[str, str]


def zeros_of(export: Mapping[str, Mapping[str, torch.Tensor]]) -> Export:
    """A control variate of nothing learnt yet: zeros for every float key of `export`."""
    zeros: Export = {}
    for node_id, key in floats(export):
        zeros.setdefault(node_id, {})[key] = torch.zeros_like(export[node_id][key])
    return zeros


def control(value: object, like: Export, what: str) -> Export:
    """`value["c"]`, checked against the float keys of `like`, or zeros when value is None."""
    if value is None:
        return zeros_of(like)
    c = value.get("c") if isinstance(value, Mapping) else None
    if not isinstance(c, Mapping):
        raise StrategyError(f"SCAFFOLD: {what} is not a map with a control variate 'c'")
    return {
        node_id: {key: _entry(c, like, node_id, key, what) for key in keys}
        for node_id, keys in zeros_of(like).items()
    }


def _entry(c: Mapping, like: Export, node_id: str, key: str, what: str) -> torch.Tensor:
    tensor = c.get(node_id, {}).get(key) if isinstance(c.get(node_id), Mapping) else None
    if not isinstance(tensor, torch.Tensor):
        raise StrategyError(f"SCAFFOLD: {what} has no control variate for {node_id!r} {key!r}")
    if tensor.shape != like[node_id][key].shape:
        raise StrategyError(
            f"SCAFFOLD: {what}'s control variate for {node_id!r} {key!r} has shape "
            f"{tuple(tensor.shape)}, the weights {tuple(like[node_id][key].shape)}"
        )
    return tensor


class Correction:
    """One client's round: corrected steps, counted, then its new variate."""

    def __init__(self, start: Export, c: Export, c_i: Export) -> None:
        self.start, self.c_i = start, c_i
        self.correction = {n: {k: c[n][k] - c_i[n][k] for k in keys} for n, keys in c.items()}
        self.gradients: dict[Key, torch.Tensor] = {}  # sum of lr * raw gradient, by parameter
        self.steps = 0
        self.rates = 0.0

    @torch.no_grad()
    def adjust(self, parameters: Parameters, lr: float) -> None:
        for node_id, keys in parameters.items():
            for key, parameter in keys.items():
                total = self.gradients.get((node_id, key))
                if total is None:
                    total = self.gradients[node_id, key] = self._pair(node_id, key)
                if trainable(parameter):
                    total.add_(parameter.grad, alpha=float(lr))
                    parameter.grad.add_(self.correction[node_id][key])
        self.steps += 1
        self.rates += float(lr)

    def _pair(self, node_id: str, key: str) -> torch.Tensor:
        """A zero sum for a parameter met for the first time, refused if the start has no such
        float key (the parameters are not keyed like the export)."""
        origin = start_of(self.start, node_id, key, "SCAFFOLD")
        if key not in self.correction.get(node_id, {}):
            raise StrategyError(f"SCAFFOLD: parameter {node_id!r} {key!r} is not a float key")
        return torch.zeros_like(origin)

    def finish(self, trained: Export) -> tuple[Export | None, State | None]:
        if self.steps == 0 or not self.rates > 0:
            raise StrategyError(
                f"SCAFFOLD: the client took {self.steps} corrected steps with learning rates "
                f"adding up to {self.rates}: its control variate cannot be updated (did its "
                "task's train() pass objective= on, and does its data have any examples?)"
            )
        new: Export = {}
        delta: Export = {}
        for node_id, keys in self.c_i.items():
            new[node_id], delta[node_id] = {}, {}
            for key, c_i in keys.items():
                total = self.gradients.get((node_id, key))
                new[node_id][key] = c_i.clone() if total is None else total / self.rates
                delta[node_id][key] = new[node_id][key] - c_i
        return delta, {"c": new}


def _fold_extra(total: Export, update: Update) -> None:
    """total += the update's delta c_i, refused by client when it is missing or misshapen."""
    if update.extra is None:
        raise StrategyError(
            f"SCAFFOLD needs each client's control variate delta; client {update.client} "
            "sent none: did its task's train() pass objective= on?"
        )
    what = f"client {update.client}'s extra"
    for node_id, keys in total.items():
        for key, acc in keys.items():
            acc.add_(_entry(update.extra, total, node_id, key, what).to(acc.dtype))


def server_step(previous: Export, mean: Export, server_lr: float) -> Export:
    """x + server_lr (mean - x) for floats; counts as in the mean (FedAvg's); the mean itself
    when server_lr is 1, so that SCAFFOLD's weights are FedAvg's bit for bit."""
    if server_lr == 1.0:
        return mean
    return {
        node_id: {
            key: (
                previous[node_id][key] + server_lr * (m - previous[node_id][key])
                if averageable(m.dtype)
                else m
            )
            for key, m in keys.items()
        }
        for node_id, keys in mean.items()
    }


def next_c(c: Export, total: Export, clients: int) -> Export:
    """c + |S|/N * mean of the |S| delta c_i, which is c + (their sum) / N."""
    return {
        node_id: {key: c[node_id][key] + total[node_id][key] / clients for key in keys}
        for node_id, keys in c.items()
    }


class Scaffold(Strategy):
    needs_previous = True  # c starts as zeros shaped like the round's start

    def __init__(self, server_lr: float, server_mean: str = "weighted") -> None:
        self.server_lr, self.server_mean = server_lr, server_mean

    def check(self, arrivals: Sequence[Arrival], *, clients: int) -> None:
        silent = [a.client for a in arrivals if not a.extra]
        if silent:
            raise StrategyError(
                f"SCAFFOLD needs each client's control variate delta; clients {silent} sent "
                "none: did their task's train() pass objective= on?"
            )

    def aggregate(
        self, previous: Export, updates: Iterable[Update], state: State | None, *, clients: int
    ) -> tuple[Export, State | None]:
        if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
            raise StrategyError(f"SCAFFOLD: clients must be a whole number >= 1, not {clients!r}")
        c = control(state, previous, "the server state")
        total = zeros_of(previous)
        count = 0

        def folded() -> Iterator[Update]:
            nonlocal count
            for update in updates:
                _fold_extra(total, update)
                count += 1
                yield update if self.server_mean == "weighted" else replace(update, size=None)

        mean = weighted_mean(folded())
        if count > clients:
            raise StrategyError(f"SCAFFOLD: {count} updates in a round of {clients} clients")
        return server_step(previous, mean, self.server_lr), {"c": next_c(c, total, clients)}

    def local(self, *, start: Export, state: State | None, mine: State | None) -> Correction:
        c = control(state, start, "the server state")
        c_i = control(mine, start, "this client's own state")
        return Correction(start, c, c_i)


def make(server_lr: float = 1.0, *, server_mean: str = "weighted") -> Scaffold:
    """SCAFFOLD (Karimireddy et al. 2020): control variates that correct each client's drift.

    Needs a task whose `train()` takes `objective=`.

    Options (the config's `strategy_options.scaffold`; `--strategy-option KEY=VALUE`
    on `soma client` and `soma simulate`), each checked here and refused naming it:

    - `server_lr` (1.0): the server's step, > 0.
    - `server_mean` (`weighted`): the mean of the updates, `weighted` by data size or
      `uniform` (the paper's plain mean).
    """
    ok = not isinstance(server_lr, bool) and isinstance(server_lr, numbers.Real)
    if not ok or not math.isfinite(server_lr) or server_lr <= 0:
        raise StrategyError(
            f"scaffold option server_lr must be a finite number > 0, not {server_lr!r}"
        )
    if server_mean not in ("weighted", "uniform"):
        raise StrategyError(
            f"scaffold option server_mean must be weighted (by data size) or uniform (the "
            f"paper's plain mean), not {server_mean!r}"
        )
    return Scaffold(float(server_lr), str(server_mean))
