"""Server-side optimizers over FedAvg's mean: the arithmetic FedAvgM, FedAdam, FedYogi and
FedAdagrad share. Pure: tensors in, tensors out, nothing read or written elsewhere.

Each round, the size-weighted mean of the clients' weights is taken as FedAvg takes it
(streaming: one model in memory whatever the number of clients), and its distance from the
weights the round started from, `delta = mean - previous`, is treated as a pseudo-gradient
(Reddi et al. 2021, "Adaptive Federated Optimization", Algorithm 2). The server then steps
with an optimizer of its own, whose moments are the strategy's state:

    momentum (FedAvgM, Hsu et al. 2019):  m = momentum * m + delta
                                          x = previous + server_lr * m
    adaptive (FedAdam, FedYogi, FedAdagrad):
                                          m = beta1 * m + (1 - beta1) * delta
                                          v = adam / yogi / adagrad rule (below)
                                          x = previous + server_lr * m / (sqrt(v) + tau)

    adam:     v = beta2 * v + (1 - beta2) * delta^2
    yogi:     v = v - (1 - beta2) * delta^2 * sign(v - delta^2)
    adagrad:  v = v + delta^2

By default, as in the paper, m starts at 0 and v at tau^2 (its v_{-1} >= tau^2), and there
is no bias correction. Two options reproduce Flower's (flwr 1.x, `flwr.server.strategy` and
`flwr.serverapp`) variants exactly:

- `v0: zero` (FedAdam, FedYogi, FedAdagrad): v starts at 0, as Flower's does (`v0: tau2`,
  the default, is the paper's). With v0 = 0 the first step of every coordinate is about
  server_lr whatever the size of its delta (Adam: m / sqrt(v) = (1 - beta1) / sqrt(1 -
  beta2) * sign(delta)); from tau^2 a coordinate whose delta is far below tau barely moves.
- `bias_correction: true` (FedAdam): the step's rate is Flower's eta_norm,

      server_lr * sqrt(1 - beta2^(t + 1)) / (1 - beta1^(t + 1)),

  t being Flower's 1-based server round, so t = r + 1 for soma's 0-based round r (the
  strategy learns r through `Strategy.for_round`). Flower's exponent t + 1 is one more than
  Adam's own correction would use (Kingma and Ba correct step t by 1 - beta^t); it is kept
  so that the two runs match. Flower's FedAdam is `v0: zero, bias_correction: true`.
 Only floats are stepped: integer and bool tensors (BatchNorm's
`num_batches_tracked`) are counts, and take the mean's value (the first update's) untouched.
Half precision is stepped in float32, and so kept in the state, then cast back.

The state is a plain value the store keeps as it is, `{"m": {node: {key: tensor}}, "v": ...}`
(only the nodes that have floats), so a resumed round continues from it bit for bit.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar

import torch

from soma.arithmetic import add_scaled, first_difference, lerp, signature, working_dtype
from soma.nodes import Export
from soma.strategies import State, Strategy, StrategyError, Update, floats
from soma.strategies.fedavg import weighted_mean

Tensors = Mapping[str, Mapping[str, torch.Tensor]]

# --- options -----------------------------------------------------------------------------


def _number(strategy: str, option: str, value: object, wanted: str) -> float:
    """`value` as a float, or a refusal naming the option; bool is not a number here."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise StrategyError(f"{strategy} option {option} must be a number {wanted}, not {value!r}")
    return float(value)


def positive(strategy: str, option: str, value: object) -> float:
    """A finite number > 0 (a learning rate, tau): zero would never move, or divide by 0."""
    wanted = "> 0"
    number = _number(strategy, option, value, wanted)
    if not (math.isfinite(number) and number > 0):
        raise StrategyError(f"{strategy} option {option} must be a number {wanted}, not {value!r}")
    return number


def start_of_v(strategy: str, value: object) -> str:
    """The option `v0`: "tau2" (the paper's v_{-1} = tau^2) or "zero" (Flower's)."""
    if value not in ("tau2", "zero"):
        raise StrategyError(
            f"{strategy} option v0 must be tau2 (the paper's start) or zero (Flower's), "
            f"not {value!r}"
        )
    return str(value)


def flag(strategy: str, option: str, value: object) -> bool:
    """A true or false option, nothing else (no 0, no "yes")."""
    if not isinstance(value, bool):
        raise StrategyError(f"{strategy} option {option} must be true or false, not {value!r}")
    return value


def fraction(strategy: str, option: str, value: object) -> float:
    """A decay in [0, 1): at 1 the moment would never forget its start."""
    wanted = "in [0, 1)"
    number = _number(strategy, option, value, wanted)
    if not 0 <= number < 1:
        raise StrategyError(f"{strategy} option {option} must be a number {wanted}, not {value!r}")
    return number


# --- the arithmetic, one tensor at a time ----------------------------------------------------


def heavy_ball(m: torch.Tensor, delta: torch.Tensor, momentum: float) -> torch.Tensor:
    """FedAvgM's momentum buffer: momentum * m + delta (a multiply, then an add: never fused,
    so the same bits on every machine, soma.arithmetic)."""
    return delta + m * momentum


def first_moment(m: torch.Tensor, delta: torch.Tensor, beta1: float) -> torch.Tensor:
    """The adaptive methods' m: an exponential average of the pseudo-gradients."""
    return m * beta1 + delta * (1 - beta1)


def adam_second_moment(v: torch.Tensor, delta: torch.Tensor, beta2: float) -> torch.Tensor:
    """Adam's v: an exponential average of delta^2."""
    return v * beta2 + delta.square() * (1 - beta2)


def yogi_second_moment(v: torch.Tensor, delta: torch.Tensor, beta2: float) -> torch.Tensor:
    """Yogi's v: moves towards delta^2 by (1 - beta2) * delta^2, whatever its distance from it
    (Adam's moves by (1 - beta2) * (v - delta^2)), so v that was large shrinks slowly."""
    square = delta.square()
    return v - square * torch.sign(v - square) * (1 - beta2)


def adagrad_second_moment(v: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """Adagrad's v: the sum of every delta^2 so far (and the starting tau^2)."""
    return v + delta.square()


def momentum_step(
    previous: torch.Tensor,
    mean: torch.Tensor,
    m: torch.Tensor,
    *,
    server_lr: float,
    momentum: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """FedAvgM's step: x = previous + server_lr * (momentum * m + delta).

    Written as lerp(previous, mean, server_lr) + server_lr * momentum * m, which is the same
    sum, because previous + (mean - previous) is not always mean in floating point, and
    lerp at weight 1 is: with momentum 0 and server_lr 1, this is FedAvg bit for bit. Each
    step a single correctly rounded operation (soma.arithmetic.lerp, add_scaled): the same
    bits on every machine.
    """
    delta = mean - previous
    x = lerp(previous, mean, server_lr)
    if momentum:
        add_scaled(x, m, server_lr * momentum)
    return x, {"m": heavy_ball(m, delta, momentum)}


def adaptive_step(
    previous: torch.Tensor,
    mean: torch.Tensor,
    m: torch.Tensor,
    v: torch.Tensor,
    *,
    rule: str,
    server_lr: float,
    beta1: float,
    beta2: float,
    tau: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """FedAdam's, FedYogi's or FedAdagrad's step (`rule`): x = previous + lr m / (sqrt(v) + tau)."""
    delta = mean - previous
    m = first_moment(m, delta, beta1)
    if rule == "adam":
        v = adam_second_moment(v, delta, beta2)
    elif rule == "yogi":
        v = yogi_second_moment(v, delta, beta2)
    elif rule == "adagrad":
        v = adagrad_second_moment(v, delta)
    else:
        raise ValueError(f"no second-moment rule {rule!r}")
    x = previous + m / (v.sqrt() + tau) * server_lr
    return x, {"m": m, "v": v}


# --- the state ---------------------------------------------------------------------------


Signature = dict[tuple[str, str], tuple[tuple[int, ...], torch.dtype]]


def stepped(previous: Tensors) -> Signature:
    """The (node, key) pairs the optimizer steps, with the shape and dtype of their moments."""
    return {
        (node, key): (tuple(previous[node][key].shape), working_dtype(previous[node][key].dtype))
        for node, key in floats(previous)
    }


def fresh_state(previous: Tensors, moments: Iterable[str], tau: float, v0: str = "tau2") -> State:
    """The first round's moments: m = 0, v = tau^2 (the paper's) or 0 (`v0="zero"`, Flower's),
    shaped like `previous`'s floats."""
    state: State = {}
    for name in moments:
        start = 0.0 if name == "m" or v0 == "zero" else tau**2
        state[name] = {}
        for (node, key), (_, dtype) in stepped(previous).items():
            like = previous[node][key]
            state[name].setdefault(node, {})[key] = torch.full(like.shape, start, dtype=dtype)
    return state


def _flat(strategy: str, name: str, moment: object) -> dict[tuple[str, str], torch.Tensor]:
    if not isinstance(moment, Mapping):
        raise StrategyError(
            f"{strategy} state {name} is a {type(moment).__name__}, not a map of nodes"
        )
    flat = {}
    for node, keys in moment.items():
        if not isinstance(keys, Mapping):
            raise StrategyError(
                f"{strategy} state {name} node {node!r} is a {type(keys).__name__}, "
                "not a map of tensors"
            )
        for key, tensor in keys.items():
            if not isinstance(tensor, torch.Tensor):
                raise StrategyError(
                    f"{strategy} state {name} node {node!r} key {key!r} is a "
                    f"{type(tensor).__name__}, not a tensor"
                )
            flat[node, key] = tensor
    return flat


def check_state(strategy: str, moments: tuple[str, ...], state: object, previous: Tensors) -> None:
    """Refuse a state that is not this strategy's for this network (a stale one, another
    strategy's), naming the node and key, before any arithmetic broadcasts it silently."""
    if not isinstance(state, Mapping):
        raise StrategyError(f"{strategy} state is a {type(state).__name__}, not a map of moments")
    if sorted(state) != sorted(moments):
        raise StrategyError(
            f"{strategy} state holds {sorted(state)}, not {sorted(moments)}: "
            "is it another strategy's?"
        )
    wanted = stepped(previous)
    for name in moments:
        flat = _flat(strategy, name, state[name])
        for node, key in flat:
            if (node, key) not in wanted:
                raise StrategyError(
                    f"{strategy} state {name} has node {node!r} key {key!r}, which the weights "
                    "have no float for: is it a state from another network?"
                )
        for (node, key), (shape, dtype) in wanted.items():
            tensor = flat.get((node, key))
            if tensor is None:
                raise StrategyError(
                    f"{strategy} state {name} has no node {node!r} key {key!r}: "
                    "is it a state from another network?"
                )
            if tuple(tensor.shape) != shape or tensor.dtype != dtype:
                raise StrategyError(
                    f"{strategy} state {name} node {node!r} key {key!r} is "
                    f"{tuple(tensor.shape)} {tensor.dtype}, the weights need {shape} {dtype}: "
                    "is it a state from another network?"
                )


def check_like(strategy: str, previous: Tensors, mean: Tensors, who: str = "the updates") -> None:
    """`mean` (the updates, or `who`) must be the network the round started from, key for key
    (soma.arithmetic: half precision is stepped, and its moments kept, in float32)."""
    start = "the weights the round started from"
    problem = first_difference(signature(previous), signature(mean), start, who)
    if problem:
        raise StrategyError(f"{strategy}: {problem}")


# --- the strategy ------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerOptimizer(Strategy):
    """A strategy that steps FedAvg's mean with a server optimizer. `rule` is "momentum"
    (FedAvgM) or the second-moment rule ("adam", "yogi", "adagrad")."""

    # The round refuses, before anything is claimed, to run us without a start to step from.
    needs_previous: ClassVar[bool] = True

    name: str
    rule: str
    server_lr: float
    momentum: float = 0.0
    beta1: float = 0.0
    beta2: float = 0.0
    tau: float = 0.0
    v0: str = "tau2"  # where v starts: "tau2" (the paper's) or "zero" (Flower's)
    bias_correction: bool = False  # Flower's FedAdam eta_norm
    round: int | None = None  # the 0-based round being aggregated, bound by for_round

    def for_round(self, *, round: int, seed: int | None) -> ServerOptimizer:
        """Bound to the round only when the step depends on it (bias correction)."""
        return dataclasses.replace(self, round=round) if self.bias_correction else self

    def rate(self) -> float:
        """The step's rate: server_lr, or Flower's bias-corrected eta_norm (see above)."""
        if not self.bias_correction:
            return self.server_lr
        if self.round is None:
            raise StrategyError(
                f"{self.name} with bias_correction steps by the round, and was not told it: "
                "bind it with soma.strategies.at_round(strategy, round=, seed=) first"
            )
        t = self.round + 1  # Flower's server_round counts from 1
        correction = math.sqrt(1 - self.beta2 ** (t + 1)) / (1 - self.beta1 ** (t + 1))
        return self.server_lr * correction

    @property
    def moments(self) -> tuple[str, ...]:
        return ("m",) if self.rule == "momentum" else ("m", "v")

    def aggregate(
        self,
        previous: Export | None,
        updates: Iterable[Update],
        state: State | None,
        *,
        clients: int,
    ) -> tuple[Export, State]:
        if previous is None:
            raise StrategyError(
                f"{self.name} steps from the weights the round started from, and there are none"
            )
        return self.from_mean(previous, weighted_mean(updates), state, clients=clients)

    def from_mean(
        self, previous: Export | None, mean: Export, state: State | None, *, clients: int
    ) -> tuple[Export, State]:
        """The server optimizer's step from the clients' weighted mean (see soma.round.tree)."""
        if previous is None:
            raise StrategyError(
                f"{self.name} steps from the weights the round started from, and there are none"
            )
        check_like(self.name, previous, mean)
        if state is None:
            state = fresh_state(previous, self.moments, self.tau, self.v0)
        else:
            check_state(self.name, self.moments, state, previous)
        weights: Export = {node: dict(keys) for node, keys in mean.items()}  # counts: the mean's
        moved: State = {name: {} for name in self.moments}
        with torch.no_grad():
            for node, key in floats(previous):
                dtype = previous[node][key].dtype
                if dtype.is_complex and self.rule != "momentum":
                    raise StrategyError(
                        f"{self.name}: node {node!r} key {key!r} is {dtype}, and sqrt(v) "
                        "needs real numbers"
                    )
                work = working_dtype(dtype)
                x, after = self._step(
                    previous[node][key].to(work),
                    mean[node][key].to(work),
                    {name: state[name][node][key] for name in self.moments},
                )
                weights[node][key] = x.to(dtype)
                for name, tensor in after.items():
                    moved[name].setdefault(node, {})[key] = tensor
        return weights, moved

    def _step(
        self, previous: torch.Tensor, mean: torch.Tensor, moments: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if self.rule == "momentum":
            return momentum_step(
                previous, mean, moments["m"], server_lr=self.server_lr, momentum=self.momentum
            )
        return adaptive_step(
            previous,
            mean,
            moments["m"],
            moments["v"],
            rule=self.rule,
            server_lr=self.rate(),
            beta1=self.beta1,
            beta2=self.beta2,
            tau=self.tau,
        )
