"""DP-FedAvg's records and options (soma.strategies.dp_fedavg): what its state holds and
what a round starts from, each read back checked and refused by name when it is not ours;
its options, read and checked. Pure arithmetic on plain values, no tensors: the strategy's
module keeps the clipping, the noise and the steps.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from soma import privacy
from soma.strategies import StrategyError

NAME = "dp_fedavg"
PRIVATE, NOT_PRIVATE = "private", "reproducible_not_private"


@dataclass(frozen=True)
class Adaptive:
    """Andrew et al.'s adaptive clipping: the quantile the clip follows, its learning rate,
    and the noise on the count of unclipped updates (None: clients per round / 20)."""

    quantile: float = 0.5
    lr: float = 0.2
    count_noise: float | None = None

    def count_std(self, expected: int) -> float:
        return expected / 20 if self.count_noise is None else self.count_noise


@dataclass(frozen=True)
class Options:
    clip: float
    noise_multiplier: float
    mode: str
    clients_per_round: int | None
    adaptive: Adaptive | None
    seed: int | None
    delta: float
    budget: float | None
    noise: str = PRIVATE


@dataclass(frozen=True)
class Before:
    """Where a round starts from, read from the state: rounds done, the clip to use, the
    history so far, and what this round adds to it; each client's exposure against the
    reader the budget stops on (`exposure`) and against a reader of the published weights
    only (`published`)."""

    round: int
    clip: float
    history: list[list[float]]
    expected: int
    rate: float
    exposure: Exposure
    published: Exposure

    def history_after(self, multiplier: float) -> list[list[float]]:
        """The history with this round appended (merged into the last stretch when alike)."""
        history = [list(s) for s in self.history]
        if history and history[-1][0] == multiplier and history[-1][1] == self.rate:
            history[-1][2] += 1
        else:
            history.append([multiplier, self.rate, 1])
        return history


@dataclass(frozen=True)
class Exposure:
    """What the rounds so far cost each client (soma.privacy.exposure: the sum of z^-2 over
    the rounds it took part in): `everyone` for rounds charged to every client (a round
    stepped from the mean does not say who came), `clients` for the others, by client."""

    everyone: float
    clients: dict[str, float]

    def worst(self) -> float:
        """The worst-placed client's exposure: the one the reported epsilon is of."""
        return self.everyone + max(self.clients.values(), default=0.0)

    def after(self, cost: float, took_part: Iterable[int] | None) -> Exposure:
        """The exposure with one more round of `cost` charged to `took_part` (None: all)."""
        if took_part is None:
            return Exposure(self.everyone + cost, dict(self.clients))
        clients = dict(self.clients)
        for k in took_part:
            clients[str(k)] = clients.get(str(k), 0.0) + cost
        return Exposure(self.everyone, clients)

    def scaled(self, factor: float) -> Exposure:
        """Every client's exposure times `factor` (the rounds' multipliers over sqrt(factor))."""
        return Exposure(self.everyone * factor, {k: v * factor for k, v in self.clients.items()})

    def value(self) -> dict[str, Any]:
        return {"everyone": self.everyone, "clients": dict(sorted(self.clients.items()))}


NO_EXPOSURE = Exposure(0.0, {})


@dataclass(frozen=True)
class DPState:
    """What a state keeps: rounds done, the clip to use, the history, each client's exposure
    against whom `against` names (None: a state kept before it was named, whose exposure
    was charged at the sum's noise), and against a reader of the published weights."""

    round: int
    clip: float
    history: list[list[float]]
    exposure: Exposure
    against: str | None
    published: Exposure


# --- the state ---------------------------------------------------------------------------------


def read_state(state: object) -> DPState:
    """What the state keeps, refused by name when it is not ours. A state written before each
    client's exposure was kept (its epsilon assumed a secret sample) is charged as if
    everyone took part every round; one written before the two readers were kept apart has
    the published weights' exposure only (`against` None: the strategy charges the rest)."""
    base = {"round", "epsilon", "delta", "budget", "clip", "history"}
    older, before = base, base | {"exposure"}
    wanted = before | {"against", "epsilons", "published"}
    if not isinstance(state, Mapping) or set(state) not in (wanted, before, older):
        keys = sorted(state) if isinstance(state, Mapping) else type(state).__name__
        raise StrategyError(
            f"{NAME} state holds {keys}, not {sorted(wanted)}: is it another strategy's?"
        )
    done, clip, history = state["round"], state["clip"], state["history"]
    if isinstance(done, bool) or not isinstance(done, int) or done < 0:
        raise StrategyError(f"{NAME} state round is {done!r}, not a count of rounds")
    if not _real(clip) or not (math.isfinite(clip) and clip > 0):
        raise StrategyError(f"{NAME} state clip is {clip!r}, not a number > 0")
    ok = isinstance(history, (list, tuple)) and all(
        isinstance(s, (list, tuple))
        and len(s) == 3
        and _real(s[0])
        and _real(s[1])
        and isinstance(s[2], int)
        for s in history
    )
    if not ok or sum(s[2] for s in history) != done:
        raise StrategyError(
            f"{NAME} state history {history!r} is not {done} rounds of "
            "(noise multiplier, sampling rate, rounds)"
        )
    history = [[float(s[0]), float(s[1]), int(s[2])] for s in history]
    if "exposure" not in state:
        everyone = math.fsum(privacy.exposure(z, rounds) for z, _, rounds in history)
        charged = Exposure(everyone, {})
        return DPState(done, float(clip), history, charged, None, charged)
    exposure = read_exposure(state["exposure"])
    if "against" not in state:
        return DPState(done, float(clip), history, exposure, None, exposure)
    against = state["against"]
    if against not in (privacy.STORE_READER, privacy.WEIGHTS_READER):
        raise StrategyError(
            f"{NAME} state against is {against!r}, not {privacy.STORE_READER!r} or "
            f"{privacy.WEIGHTS_READER!r}"
        )
    published = read_exposure(state["published"])
    return DPState(done, float(clip), history, exposure, against, published)


def read_exposure(value: object) -> Exposure:
    """The state's `exposure`, refused by name when it is not {everyone, clients}."""
    ok = (
        isinstance(value, Mapping)
        and set(value) == {"everyone", "clients"}
        and _real(value["everyone"])
        and value["everyone"] >= 0
        and isinstance(value["clients"], Mapping)
        and all(isinstance(k, str) and _real(v) and v >= 0 for k, v in value["clients"].items())
    )
    if not ok:
        raise StrategyError(
            f"{NAME} state exposure {value!r} is not {{everyone, clients}} of sums of z^-2"
        )
    clients = {str(k): float(v) for k, v in value["clients"].items()}
    return Exposure(float(value["everyone"]), clients)


def _real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# --- the options -------------------------------------------------------------------------------


def _number(option: str, value: object, wanted: str, ok) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise StrategyError(f"{NAME} option {option} must be a number {wanted}, not {value!r}")
    number = float(value)
    if not (math.isfinite(number) and ok(number)):
        raise StrategyError(f"{NAME} option {option} must be a number {wanted}, not {value!r}")
    return number


def _adaptive(value: object) -> Adaptive | None:
    if value is None or value is False:
        return None
    if value is True:
        return Adaptive()
    if not isinstance(value, Mapping):
        raise StrategyError(
            f"{NAME} option adaptive must be null, true or a map of quantile, lr and "
            f"count_noise, not {value!r}"
        )
    unknown = sorted(set(value) - {"quantile", "lr", "count_noise"})
    if unknown:
        raise StrategyError(
            f"{NAME} option adaptive has no {', '.join(map(str, unknown))} "
            "(it takes quantile, lr and count_noise)"
        )
    quantile = _number(
        "adaptive.quantile", value.get("quantile", 0.5), "in (0, 1)", lambda q: 0 < q < 1
    )
    lr = _number("adaptive.lr", value.get("lr", 0.2), "> 0", lambda x: x > 0)
    count_noise = value.get("count_noise")
    if count_noise is not None:
        count_noise = _number("adaptive.count_noise", count_noise, ">= 0", lambda x: x >= 0)
    return Adaptive(quantile, lr, count_noise)
