"""The strategy base class: every hook a round asks of a strategy, declared with its default.

A strategy subclasses `Strategy` and overrides what it needs: `aggregate` always, the rest
only to change a default. The round, the tree, secure aggregation, repair and `soma status`
ask through `hook` and `has_own` (below), never by probing for a name, so the list here is
the whole seam.

Duck typing: an object that does not subclass `Strategy` still works, as long as it has
`aggregate`. `hook(strategy, name)` gives its own attribute when it has one and the base's
default when it does not, so a plain class with `aggregate` alone is a FedAvg-like strategy
that needs no start, weighs clients by size, checks nothing, has no client side, cannot
step from the mean (refused under a tree or secure aggregation) and accounts for no privacy.
"""

from __future__ import annotations

import abc
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from soma.errors import SomaError
from soma.tasks.protocol import Objective, Parameters, State

if TYPE_CHECKING:  # annotations only: soma.nodes imports torch, which reading a run needs not
    from soma.nodes import Export

__all__ = ["Objective", "Parameters", "State"]  # the strategies' names for the tasks' protocol


class StrategyError(SomaError, ValueError):
    """A strategy cannot be found, refused its options, or refuses a round."""


@dataclass(frozen=True)
class Update:
    """One client's part in a round: who, how much data, what it learnt, what it sent beside."""

    client: int
    size: float | None  # None: every client of the round weighs the same
    weights: Export
    extra: Export | None = None


@dataclass(frozen=True)
class Arrival:
    """What `check` sees of a client before any tensor is read."""

    client: int
    size: float | None
    extra: bool  # whether it sent an extra beside its weights


class Strategy(abc.ABC):
    """How a round's updates become the next weights. Override `aggregate`; every other
    hook has the default written here, which is what a strategy without it gets."""

    #: The strategy steps from the weights the round started from (the FedOpt family,
    #: SCAFFOLD, DP-FedAvg): a round that does not say where it started is refused before
    #: anything is claimed.
    needs_previous: ClassVar[bool] = False

    #: Every client weighs the same in the mean, whatever its size (DP's sensitivity
    #: bound): a tree or a secure sum then weighs each client 1.
    uniform: ClassVar[bool] = False

    #: Whether `aggregate` is a function of its arguments alone, so that anyone can
    #: recompute an average bit for bit from its record (soma.round.verify). False for a
    #: strategy that draws private randomness (central DP-FedAvg's noise).
    recomputable: ClassVar[bool] = True

    #: A capability, None when absent: `from_mean(previous, mean, state, *, clients) ->
    #: (weights, state)`, the server step from the clients' weighted mean alone (FedAvg,
    #: FedProx, the FedOpt family, distributed DP), so that `aggregate` is `from_mean` of
    #: `fedavg(updates)`. A tree of partial means (soma.round.tree) and secure aggregation hand
    #: the strategy only the mean: a strategy without it is refused under either.
    from_mean: ClassVar[Callable[..., tuple[Export, State | None]] | None] = None

    @abc.abstractmethod
    def aggregate(
        self,
        previous: Export | None,
        updates: Iterable[Update],
        state: State | None,
        *,
        clients: int,
    ) -> tuple[Export, State | None]:
        """The next global weights and the strategy's state, from the weights the round
        started from, the clients' updates (one at a time) and the state of the round
        before (None in the first round). `clients` is how many clients the run has."""

    def check(self, arrivals: Sequence[Arrival], *, clients: int) -> None:
        """Refuse a round by who came (how many, their sizes, whether they sent an extra),
        raising StrategyError naming the culprit. Called before anything is claimed, so
        every client is told the real reason. Default: every round is fine."""
        return None

    def check_state(self, state: State | None, *, clients: int) -> None:
        """Refuse to step from `state` (DP-FedAvg: one more round past the budget), raising
        StrategyError. Called beside `check`; the state is read from the store only for a
        strategy that overrides this. Default: any state is fine."""
        return None

    def local(self, *, start: Export, state: State | None, mine: State | None) -> Objective | None:
        """The client side of one round: an Objective handed to the task's
        `train(..., objective=...)` (FedProx's proximal term, SCAFFOLD's control variates),
        or None. `start` is the round's starting weights, `state` the server's state, `mine`
        this client's own state from the last round it took part in. Default: None, and the
        task's train() is called without `objective`."""
        return None

    def for_round(self, *, round: int, seed: int | None) -> Strategy:
        """The strategy as it aggregates round `round` (0-based, as the workflow counts) of a
        run seeded `seed` (the run's seed; None when the round declares none, a bare
        `soma.round` call). Called by whoever aggregates (the round, secure aggregation,
        repair, the in-process simulation) just before `aggregate` or `from_mean`, never
        for `check`. For a strategy whose arithmetic depends on the round or draws at
        random (bucketing's shuffle, FedAdam's bias correction): it returns a copy bound to
        them, so that a rerun or repaired round draws the same bits. Default: itself."""
        return self

    def for_secure_aggregation(self) -> Strategy:
        """The strategy as it steps from a secure sum (soma.secagg.round): the store then holds
        no client's input, only their sum, which is what a privacy account against its
        readers rests on (distributed DP-FedAvg). Called by whoever steps from a secure sum
        (the secure round, repair), beside `for_round`. Default: itself."""
        return self

    def privacy_spent(self, state: State | None) -> Mapping[str, Any] | None:
        """The privacy spent up to the round that produced `state`, as `{"epsilon", "delta",
        "round"}` (and `"budget"` if the run has one), shown by `soma status` and in the
        workflow's summary; None for a strategy that keeps no account. The state is read
        from the store only for a strategy that overrides this. Default: None."""
        return None


class _Defaults(Strategy):
    """The base's defaults as an instance, for objects that do not subclass Strategy."""

    def aggregate(self, previous, updates, state, *, clients):  # pragma: no cover
        raise NotImplementedError


_DEFAULTS = _Defaults()


def hook(strategy: object, name: str) -> Any:
    """The strategy's hook `name` (bound), or the base's default when a strategy that does
    not subclass Strategy lacks it. `name` must be one the base declares."""
    default = getattr(_DEFAULTS, name)  # AttributeError for a hook nobody declared
    return getattr(strategy, name, default)


def has_own(strategy: object, name: str) -> bool:
    """Whether the strategy overrides hook `name` (for `from_mean`: whether it has one)."""
    found, default = hook(strategy, name), getattr(_DEFAULTS, name)
    if found is None:
        return False
    return getattr(found, "__func__", found) is not getattr(default, "__func__", default)


def privacy_of(
    name: str, strategy: object, read_state: Callable[[], State | None]
) -> dict[str, Any] | None:
    """The privacy spent as strategy `name` reports it (`Strategy.privacy_spent`), checked (a
    number for epsilon and delta), or None; `read_state` (the state of the round it asks
    about) is called only for a strategy that overrides privacy_spent. For `soma status`
    and the workflow's summary."""
    if not has_own(strategy, "privacy_spent"):
        return None
    found = hook(strategy, "privacy_spent")(read_state())
    if found is None:
        return None
    ok = isinstance(found, Mapping) and all(
        isinstance(found.get(k), numbers.Real) and not isinstance(found.get(k), bool)
        for k in ("epsilon", "delta")
    )
    if not ok:
        raise StrategyError(
            f"strategy {name!r}: privacy_spent() returned {found!r}, not None or a map with "
            "a number for epsilon and for delta"
        )
    return dict(found)
