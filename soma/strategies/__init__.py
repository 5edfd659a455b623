"""Strategies: the same round, different arithmetic. Chosen by name or by import path.

A strategy is a module with `make(**options) -> Strategy`, found like a task: the workflow's
`strategy:` (and `soma client --strategy`) is a built-in name (`fedavg`, `fedadam`, ...) or
an import path (`mypkg.mystrategy`), and `strategy_options:` are handed to `make`, which
refuses an option it does not know by raising `StrategyError` (or `TypeError`) naming it.

A Strategy answers, on the server side (whoever claims the round's averaging):

- `aggregate(previous, updates, state, *, clients) -> (weights, state)`: the next global
  weights from the weights the round started from (`previous`), the clients' `updates` (an
  iterable of `Update`, one client at a time, each export lazily mapped from the store) and
  the strategy's own `state` from the round before (None in the first round, or for a
  strategy that keeps none). `clients` is how many clients the run has in all (SCAFFOLD's N).
  The state returned is kept in the store as a value (tensor maps and JSON, never pickle)
  and named by the round's average record, so a resumed or rerun round continues from
  exactly the same state, bit for bit. A streaming strategy folds the updates one at a
  time and holds one model whatever their number; one that cannot stream (median, Krum)
  says so in its docstring and works key by key across clients.

Every hook below is declared, with its default and a docstring, by the base class
`soma.strategies.Strategy` (soma/strategies/_base.py): subclass it and override what you
need. An object that does not subclass it works too (the round asks through
`soma.strategies.hook`, which falls back on the base's defaults). Optionally:

- `needs_previous = True`: the strategy steps from the weights the round started from (the
  FedOpt family, SCAFFOLD), so a round that does not say where it started is refused before
  anything is claimed.

- `from_mean(previous, mean, state, *, clients) -> (weights, state)`: for a strategy whose
  server side needs only the clients' size-weighted mean (FedAvg, FedProx, the FedOpt
  family), the same step from the mean alone, so that `aggregate` is `from_mean` of
  `fedavg(updates)`. Hierarchical averaging (soma.round.tree) computes the mean as a tree of
  partial means and hands it here; a strategy without it (median, Krum, SCAFFOLD) is
  refused under a tree.
- `uniform = True`: every client weighs the same in the mean, whatever its size (DP's
  sensitivity bound); a tree or a secure sum then weighs each client 1.
- `check(arrivals, *, clients)`: the strategy's own preconditions on who came (how many,
  their sizes, whether they sent an extra), raised as `StrategyError` naming the culprit.
  The round calls it before anything is claimed, so every client is told the real reason.
- `check_state(state, *, clients)`: the strategy's own preconditions on the state it would
  step from (DP-FedAvg: whether one more round would take the privacy spent past its
  budget), raised as `StrategyError`. The round calls it beside `check`, before anything is
  claimed, reading the state from the store only for a strategy that has this method.
- `for_round(*, round, seed) -> Strategy`: the strategy bound to the round it aggregates
  (0-based) and the run's seed (None when the round declares none), for arithmetic that
  depends on them (bucketing's shuffle, FedAdam's bias correction). Whoever aggregates calls
  it (through `at_round`) just before `aggregate` or `from_mean`; the default is the
  strategy itself. The round number and seed come from the meeting (its round, and the
  seed of its `config`), so a rerun round is bound to the same ones.
- `for_secure_aggregation() -> Strategy`: the strategy as it steps from a secure sum (the
  store then holds no client's input, only their sum), called through
  `under_secure_aggregation` by the secure round and repair; the default is itself.
- `privacy_spent(state) -> {"epsilon", "delta", "round"} | None`: the privacy spent up to
  the round that made `state` (DP-FedAvg reads its account), shown by `soma status` and in
  the workflow's summary for any strategy that has it, a user's own included.
- `local(*, start, state, mine) -> Objective | None`: the client side. `start` is the global
  weights the round started from, `state` the strategy's server state (SCAFFOLD's c), `mine`
  this client's own state from the last round it took part in (SCAFFOLD's c_i), or None.
  The Objective is handed to the task's `train(..., objective=objective)`; the task hands
  it to `TrainingRun(objective=...)`, or applies it in its own loop.

An Objective (FedProx's proximal term, SCAFFOLD's control variates) is what a strategy adds
to a client's local objective:

- `adjust(parameters, lr)`: after each backward, before the optimizer's step; `parameters`
  is `{node_id: {key: Parameter}}` keyed like an export, `lr` the step's learning rate. It
  adds the extra term's gradient to each `.grad`.
- `release(trained, start, *, seed) -> Export` (optional): after training, the weights this
  client sends instead of the ones it trained (DP-FedAvg's distributed mode: the update
  clipped, plus this client's share of the noise). `trained` is the export after training,
  `start` the one before, `seed` the seed this client's training was given (one per client
  and round, for a strategy that draws at random). `train_locally` loads what it returns
  into the nodes, so whatever exports them afterwards contributes it. Without it, the
  trained weights are sent as they are.
- `finish(trained) -> (extra, mine)`: after training (and after `release`, whose export it
  is then given). `extra` is sent beside the weights (an export-shaped map, e.g. SCAFFOLD's
  delta c_i) and reaches `aggregate` as `Update.extra`; `mine` is kept in the store under
  this client and round, and comes back as `mine` the next time this client trains. Either
  may be None.

Integer and bool tensors (BatchNorm's `num_batches_tracked`) are counts: every built-in
strategy leaves them as FedAvg does (the first update's value stands).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from soma.strategies._base import (
    Arrival,
    Objective,
    Parameters,
    State,
    Strategy,
    StrategyError,
    Update,
    has_own,
    hook,
    privacy_of,
)

if TYPE_CHECKING:  # torch for the annotations only: soma status names strategies without it
    import torch

    from soma.nodes import Export

__all__ = [
    "BUILTIN",
    "REPORTS_PRIVACY",
    "Arrival",
    "Objective",
    "Parameters",
    "State",
    "Strategy",
    "StrategyError",
    "UntrustedStrategy",
    "Update",
    "at_round",
    "under_secure_aggregation",
    "check_arrivals",
    "check_strategy_state",
    "check_task_takes_objective",
    "floats",
    "has_own",
    "has_client_side",
    "hook",
    "is_builtin",
    "load_strategy",
    "mean_strategies",
    "module_of",
    "needs_previous",
    "objective_of",
    "privacy_of",
    "takes_mean",
    "train_locally",
    "uniform",
]


def _builtins() -> dict[str, str]:
    """Every public module of this package is the built-in strategy of its name (a module
    whose name starts with `_` is a helper), so that a new built-in is its module (and its
    block in the workflow's schema: tests/test_seams.py holds the two together)."""

    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
    return {name: f"{__name__}.{name}" for name in names}


# Built-in strategies by name: each is a module of its own under soma.strategies.
BUILTIN = _builtins()
# The built-ins that report the privacy a run spent (`Strategy.privacy_spent`): `soma status`
# loads no other built-in to ask (loading a stateful one imports torch), and
# tests/strategies/test_privacy_reporters.py holds this to the strategies' own hooks.
REPORTS_PRIVACY = frozenset({"dp_fedavg"})


def module_of(name: str) -> str:
    """The import path of strategy `name` (a built-in name, or already an import path)."""
    return BUILTIN.get(name, name)


class UntrustedStrategy(StrategyError):
    """A strategy named by the store (not by the local config) that is not built in: refused,
    never imported, naming it."""


def is_builtin(name: str) -> bool:
    """Whether `name` is a built-in strategy (by its name or its module's import path)."""
    return name in BUILTIN or name in BUILTIN.values()


def load_strategy(
    name: str, options: Mapping[str, Any] | None = None, *, trusted: bool = True
) -> Strategy:
    """The strategy `name` (built-in name or import path) made with `options`; refused clearly.

    `trusted` says where the name comes from: the local config or the caller's own code
    (True) may name any importable module; a name read from the store (False: a record's
    `strategy`, which anyone who can write the store can write) loads a built-in only, since
    importing a module runs its code. A name that is not built in is then refused, never
    imported (UntrustedStrategy)."""
    if not trusted and not is_builtin(name):
        raise UntrustedStrategy(
            f"strategy {name!r} is named by a record in the store and is not built in: a "
            "name read from the store is never imported (run its code only from your own "
            "config, `strategy:` or --strategy)"
        )
    path = module_of(name)
    try:
        module = importlib.import_module(path)
    except ImportError as error:
        known = ", ".join(sorted(BUILTIN))
        raise StrategyError(
            f"strategy {name!r} is neither a built-in ({known}) nor importable: {error}"
        ) from error
    make = getattr(module, "make", None)
    if not callable(make):
        raise StrategyError(f"strategy module {path!r} has no make(**options) function")
    given = dict(options or {})
    try:
        strategy = make(**given)
    except TypeError as error:
        raise StrategyError(f"strategy {name!r} refused its options {given}: {error}") from error
    if not callable(getattr(strategy, "aggregate", None)):  # duck typing: see base
        raise StrategyError(f"strategy {name!r} has no aggregate() (see soma.strategies)")
    return strategy


def at_round(strategy: Strategy, *, round: int, seed: int | None) -> Strategy:
    """The strategy bound to the round it aggregates and the run's seed (`Strategy.for_round`);
    a strategy without its own for_round is itself (not the base's default object)."""
    if not has_own(strategy, "for_round"):
        return strategy
    return hook(strategy, "for_round")(round=round, seed=seed)


def under_secure_aggregation(strategy: Strategy) -> Strategy:
    """The strategy as it steps from a secure sum (`Strategy.for_secure_aggregation`); a
    strategy without its own is itself."""
    if not has_own(strategy, "for_secure_aggregation"):
        return strategy
    return hook(strategy, "for_secure_aggregation")()


def check_arrivals(strategy: Strategy, arrivals: Sequence[Arrival], *, clients: int) -> None:
    """The strategy's own preconditions on who came (`Strategy.check`)."""
    hook(strategy, "check")(arrivals, clients=clients)


def check_strategy_state(
    strategy: Strategy, read_state: Callable[[], State | None], *, clients: int
) -> None:
    """The strategy's own preconditions on its state (`Strategy.check_state`); `read_state`
    is called only for a strategy that has its own (a state can be a model's worth of
    tensors, FedAdam's)."""
    if has_own(strategy, "check_state"):
        hook(strategy, "check_state")(read_state(), clients=clients)


def objective_of(
    strategy: Strategy, *, start: Export, state: State | None, mine: State | None
) -> Objective | None:
    """The strategy's client side for one round of training, or None when it has none."""
    return hook(strategy, "local")(start=start, state=state, mine=mine)


def train_locally(
    strategy: Strategy,
    task: Any,
    nodes: Mapping[str, Any],
    data: Any,
    *,
    seed: int,
    state: State | None,
    mine: State | None,
    context: Any = None,
) -> tuple[Any, Export | None, State | None]:
    """One client's local training in a round, with the strategy's client side if it has
    one: (the task's metrics, the extra sent beside the weights, the client's own state).
    `context` (soma.tasks.Context) is handed to a task's train() that takes it.

    When the objective has `release`, what it returns is loaded into `nodes` before
    `finish`: the caller's `export(nodes)` is then what the client sends."""
    from soma.nodes import export, load
    from soma.tasks.protocol import takes_keyword

    told = {"context": context} if context is not None else {}
    if not takes_keyword(task.train, "context"):
        told = {}
    start = export(nodes)
    objective = objective_of(strategy, start=start, state=state, mine=mine)
    if objective is None:
        return task.train(nodes, data, seed=seed, **told), None, mine
    metrics = task.train(nodes, data, seed=seed, objective=objective, **told)
    trained = export(nodes)
    release = getattr(objective, "release", None)  # an Objective's one optional method
    if callable(release):
        trained = release(trained, start, seed=seed)
        load(nodes, trained)
    extra, own = objective.finish(trained)
    return metrics, extra, own


def takes_mean(strategy: Strategy) -> bool:
    """Whether the strategy can step from the clients' weighted mean alone (`from_mean`)."""
    return has_own(strategy, "from_mean")


def needs_previous(strategy: Strategy) -> bool:
    """Whether the strategy steps from the weights the round started from."""
    return bool(hook(strategy, "needs_previous"))


def uniform(strategy: Strategy) -> bool:
    """Whether every client weighs the same in the strategy's mean, whatever its size."""
    return bool(hook(strategy, "uniform"))


def has_client_side(strategy: Strategy) -> bool:
    """Whether the strategy changes the clients' local training (`local`)."""
    return has_own(strategy, "local")


def mean_strategies() -> list[str]:
    """The built-ins that step from the mean (`from_mean`) with their default options: what a
    tree or secure aggregation can run. Derived, so a new built-in is listed by having it."""
    found = []
    for name in BUILTIN:
        try:
            strategy = load_strategy(name)
        except StrategyError:
            continue  # needs options (or an extra) to be made at all
        if takes_mean(strategy):
            found.append(name)
    return found


def check_task_takes_objective(strategy_name: str, strategy: Strategy, task: Any) -> None:
    """A strategy with a client side needs a task whose train() takes `objective=`."""
    if not has_client_side(strategy):
        return
    try:
        parameters = inspect.signature(task.train).parameters
    except (TypeError, ValueError):
        return
    takes = "objective" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )
    if not takes:
        raise StrategyError(
            f"strategy {strategy_name!r} changes the clients' local training, and the task's "
            f"train() takes no objective= argument (see soma.strategies): "
            "pass it on to TrainingRun(objective=...)"
        )


def floats(export: Mapping[str, Mapping[str, torch.Tensor]]) -> Iterable[tuple[str, str]]:
    """The (node, key) pairs of an export that arithmetic may touch: floats, not counts."""
    from soma.arithmetic import averageable  # torch: only where tensors are

    for node_id, keys in export.items():
        for key, tensor in keys.items():
            if averageable(tensor.dtype):
                yield node_id, key
