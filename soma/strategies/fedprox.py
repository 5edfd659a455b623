"""FedProx (Li et al. 2020): FedAvg, with each client kept near where the round started.

The server side is FedAvg's weighted mean, unchanged. The client side adds the proximal term
mu/2 ||w - w_start||^2 to the local objective, whose gradient mu (w - w_start) is added to
each parameter's gradient before every step: heterogeneous clients then drift less from the
global model in the epochs they train alone. Only parameters are pulled back, never buffers
(BatchNorm's running statistics are not trained by gradient), and a parameter with no
gradient in a step (frozen, or not in that step's graph) is left as it is. With `mu=0` the
training is FedAvg's, bit for bit. Nothing is sent beside the weights and nothing is kept.

Option: `mu` (default 0.01), a finite number >= 0.
Option `norm_bound` (default null, off): clip each update to that multiple of the round's
median update norm before the mean (soma.strategies._norm_bound); the strategy then needs the
round's start and cannot step from the mean alone (no tree, no secure aggregation).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable

import torch

from soma.arithmetic import averageable
from soma.nodes import Export
from soma.strategies import Parameters, State, Strategy, StrategyError, Update
from soma.strategies._norm_bound import bound_of, bounded
from soma.strategies.fedavg import weighted_mean


def start_of(start: Export, node_id: str, key: str, strategy: str) -> torch.Tensor:
    """The round's start for a live parameter, refused by name when the keys do not pair up."""
    try:
        return start[node_id][key]
    except KeyError:
        raise StrategyError(
            f"{strategy}: parameter {node_id!r} {key!r} is not in the round's start weights "
            "(parameters must be keyed like an export: see soma.training.keyed_parameters)"
        ) from None


def trainable(parameter: torch.Tensor) -> bool:
    """Whether a step will move it: a float parameter with a gradient this step."""
    return parameter.grad is not None and averageable(parameter.dtype)


class Proximal:
    """The proximal term of one client's round."""

    def __init__(self, start: Export, mu: float) -> None:
        self.start, self.mu = start, mu

    @torch.no_grad()
    def adjust(self, parameters: Parameters, lr: float) -> None:
        if not self.mu:
            return
        for node_id, keys in parameters.items():
            for key, parameter in keys.items():
                if trainable(parameter):
                    origin = start_of(self.start, node_id, key, "FedProx")
                    parameter.grad.add_(parameter - origin, alpha=self.mu)

    def finish(self, trained: Export) -> tuple[Export | None, State | None]:
        return None, None


class FedProx(Strategy):
    def __init__(self, mu: float) -> None:
        self.mu = mu

    def aggregate(
        self, previous: Export, updates: Iterable[Update], state: State | None, *, clients: int
    ) -> tuple[Export, State | None]:
        return weighted_mean(updates), None

    def from_mean(
        self, previous: Export, mean: Export, state: State | None, *, clients: int
    ) -> tuple[Export, State | None]:
        return mean, None

    def local(self, *, start: Export, state: State | None, mine: State | None) -> Proximal:
        return Proximal(start, self.mu)


def make(mu: float = 0.01, *, norm_bound: float | None = None) -> Strategy:
    """FedProx (Li et al. 2020): FedAvg, each client's training pulled towards the round's start.

    Needs a task whose `train()` takes `objective=`.

    Options (the config's `strategy_options.fedprox`; `--strategy-option KEY=VALUE`
    on `soma client` and `soma simulate`), each checked here and refused naming it:

    - `mu` (0.01): the proximal term's weight, `mu/2 ‖w − w_start‖²`, ≥ 0 (0 is FedAvg).
    - `norm_bound` (null): clip each update to this many times the round's median update norm
      before the mean; needs every update, so no tree and no secure aggregation.
    """
    ok = not isinstance(mu, bool) and isinstance(mu, numbers.Real) and math.isfinite(mu)
    if not ok or mu < 0:
        raise StrategyError(f"fedprox option mu must be a finite number >= 0, not {mu!r}")
    return bounded(FedProx(float(mu)), bound_of("fedprox", norm_bound))
