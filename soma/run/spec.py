"""One validated description of a federated run, whichever way it is driven.

`RunSpec.from_config(config)` (the workflow) and `RunSpec.from_args(args)` (`soma client`,
`soma simulate`) give the same spec for the same run; its `meeting(round, start, state)` and
`identity()` are then the same in every mode, so the same run meets under the same names
and trains the same bits. Its checks, refusing before anything is claimed, written or
computed, each naming the config key or the command-line option to change:

- `check()`: pure (no torch, no task imported; the Snakefile calls it at parse time): the
  numbers, the sampling and quorum, secure aggregation's threshold and what it excludes, the
  tree's fan-in, the task's option names (read from its module's `OPTIONS`);
- `checked()`: the deeper check (the `start` job and `soma client` before they write
  anything): the task imports and takes its options and can serve the clients, the strategy
  takes its options, fits the task, and steps from the mean under a tree or secure
  aggregation. It returns the task and the strategy it made.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from soma.errors import SomaError
from soma.run.configs import ConfigRefused
from soma.run.options import pairs, typed

if TYPE_CHECKING:
    from soma.round import Meeting
    from soma.round.signing import Signing
    from soma.strategies import Strategy
    from soma.tasks import Task


class BadArgument(SomaError, ValueError):
    """A command-line argument refused before the command does anything; names the option."""


# How each field is named in a refusal: its config key, or its command-line option.
CONFIG_KEYS = {
    "rounds": "rounds",
    "clients": "clients",
    "seed": "seed",
    "task": "task",
    "task_options": "task_options",
    "strategy": "strategy",
    "strategy_options": "strategy_options",
    "participation": "participation",
    "quorum": "quorum",
    "secure": "secure_aggregation",
    "tree": "tree",
    "per_job": "clients_per_job",
    "threads": "threads",
    "roster": "roster",
    "keys": "keys",
}
OPTIONS = {
    "rounds": "--rounds",
    "clients": "--clients",
    "seed": "--seed",
    "task": "--task",
    "task_options": "--option",
    "strategy": "--strategy",
    "strategy_options": "--strategy-option",
    "participation": "--participation",
    "quorum": "--quorum",
    "secure": "--secure-aggregation",
    "tree": "--tree",
    "per_job": "--per-task",
    "mine": "--mine",
    "threads": "--threads",
    "roster": "--roster",
    "keys": "--keys",
}


# soma.simulate's keyword argument of a field, where its name is not the field's.
ARGUMENTS = {"secure": "secure_aggregation", "mine": "clients"}


def _frozen(options: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(options or {}))


@dataclass(frozen=True)
class RunSpec:
    """What a run is: its task and strategy with their options, its clients and rounds, who
    takes part in a round and how many must come (`participation`, `quorum`), how a round is
    averaged (`tree`: a fan-in; `secure`: secure aggregation's threshold), its seed, and how
    its clients are hosted (`per_job` clients a job or task; `mine`: this process's clients,
    None for the workflow, whose jobs each name theirs). `given` says where it came from
    ("config", "args" or "library": soma.simulate): a refusal names the config key, the
    option or the keyword argument accordingly."""

    run: str
    task: str
    clients: int
    rounds: int
    task_options: Mapping[str, Any] = field(default_factory=dict)
    strategy: str = "fedavg"
    strategy_options: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    participation: int | float | None = None
    quorum: int | float | None = None
    secure: int | None = None
    tree: int | None = None
    per_job: int = 1
    mine: tuple[int, ...] | None = None
    threads: int = 1
    roster: str | None = None  # the roster file: its records signed (soma.round.signing)
    keys: str | None = None  # where this process finds a client's private key ({client})
    given: str = "config"

    def __post_init__(self) -> None:
        object.__setattr__(self, "task_options", _frozen(self.task_options))
        object.__setattr__(self, "strategy_options", _frozen(self.strategy_options))
        if self.mine is not None:
            object.__setattr__(self, "mine", tuple(self.mine))

    # --- made from a config or from arguments ---------------------------------------------

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> RunSpec:
        """The workflow's config (after `soma.run.configs.typed`); options read as text are read
        by `soma.run.options` (Snakemake hands nested `--config` values over as text)."""
        task = str(config["task"])
        strategy = str(config.get("strategy") or "fedavg")
        return cls(
            run=str(config["run"]),
            task=task,
            clients=config["clients"],
            rounds=config["rounds"],
            task_options=typed((config.get("task_options") or {}).get(task)),
            strategy=strategy,
            strategy_options=typed((config.get("strategy_options") or {}).get(strategy)),
            seed=config["seed"],
            participation=config.get("participation"),
            quorum=config.get("quorum"),
            secure=(config.get("secure_aggregation") or {}).get("threshold"),
            tree=(config.get("tree") or {}).get("fan_in"),
            per_job=config.get("clients_per_job", 1) or 1,
            threads=config.get("threads", 1) or 1,
            roster=config.get("roster"),
            keys=config.get("keys"),
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RunSpec:
        """`soma client`'s (or `soma simulate`'s) arguments; `--option KEY=VALUE` read by
        `soma.run.options`, as the workflow reads its options."""
        mine = getattr(args, "mine", None)
        return cls(
            run=args.run,
            task=args.task,
            clients=args.clients,
            rounds=args.rounds,
            task_options=pairs(args.option, "--option"),
            strategy=args.strategy,
            strategy_options=pairs(args.strategy_option, "--strategy-option"),
            seed=args.seed,
            participation=args.participation,
            quorum=args.quorum,
            secure=args.secure_aggregation,
            tree=args.tree,
            per_job=getattr(args, "per_task", 1),
            mine=None if mine is None else tuple(mine),
            threads=args.threads,
            roster=getattr(args, "roster", None),
            keys=getattr(args, "keys", None),
            given="args",
        )

    # --- what the run is, the same in every mode ------------------------------------------

    def identity(self) -> dict[str, Any]:
        """The part of the run's identity that is not the strategy's (soma.run.identity)."""
        from soma.run.identity import identity

        return identity(self.task, dict(self.task_options), self.seed)

    def meeting(self, round: int, start: str | None, state: str | None) -> Meeting:
        """Where round `round`'s clients meet, from the weights (and the strategy state) it
        starts from: who is sampled and the quorum follow from the seed and the round."""
        from soma.round import Meeting
        from soma.run.participation import policy

        expected, quorum = policy(self.seed, round, self.clients, self.participation, self.quorum)
        return Meeting(
            run=self.run,
            round=round,
            clients=self.clients,
            start=start,
            state=state,
            strategy=self.strategy,
            options=dict(self.strategy_options),
            config=self.identity(),
            expected=expected,
            quorum=quorum,
            tree=self.tree,
            secure=self.secure,
            signing=self.signing,
        )

    @functools.cached_property
    def signing(self) -> Signing | None:
        """The run's roster and where its keys are (None: records unsigned), read once."""
        from soma.round.signing import Signing, SigningError, read_roster

        if self.roster is None:
            return None
        try:
            return Signing.of(read_roster(self.roster), self.keys)
        except SigningError as error:
            raise self.refused(f"{self.named('roster')}: {error}") from None

    # --- the checks --------------------------------------------------------------------------

    def named(self, *fields: str) -> str:
        """`config keys `a`/`b`` or `--a/--b`: what a refusal of these fields names."""
        if self.given == "args":
            return "/".join(OPTIONS[f] for f in fields)
        if self.given == "library":  # soma.simulate's keyword arguments
            keys = "/".join(f"`{ARGUMENTS.get(f, f)}`" for f in fields)
            return f"simulate() argument{'s' if len(fields) > 1 else ''} {keys}"
        keys = "/".join(f"`{CONFIG_KEYS[f]}`" for f in fields)
        return f"config key{'s' if len(fields) > 1 else ''} {keys}"

    def refused(self, message: str) -> SomaError:
        """The refusal of this spec's source: a ConfigRefused or a BadArgument."""
        return (ConfigRefused if self.given == "config" else BadArgument)(message)

    def _at_least(self, name: str, least: int) -> None:
        value = getattr(self, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise self.refused(f"{self.named(name)} must be an integer >= {least}, not {value}")

    def check(self) -> RunSpec:
        """Every check that needs no torch and imports no task (see the module): the spec."""
        from soma.run.participation import ParticipationError, quorum_size, sample_size

        for name, least in (("rounds", 1), ("clients", 1), ("seed", 0), ("threads", 1)):
            self._at_least(name, least)
        for k in self.mine or ():
            if not 0 <= k < self.clients:
                raise self.refused(
                    f"{self.named('mine')}: client {k} is not one of the run's clients "
                    f"0..{self.clients - 1}"
                )
        if self.tree is not None:
            self._at_least("tree", 2)
        try:
            sampled = sample_size(self.participation, self.clients)
            quorum_size(self.quorum, sampled)
        except ParticipationError as error:
            raise self.refused(
                f"{self.named('clients', 'participation', 'quorum')}: {error}"
            ) from None
        if self.secure is not None:
            if not 2 <= self.secure <= sampled:
                raise self.refused(
                    f"{self.named('secure')}: threshold {self.secure} must be between 2 and "
                    f"the {sampled} clients of a round"
                )
            if self.tree is not None or self.per_job != 1 and self.given == "config":
                raise self.refused(
                    f"{self.named('secure', 'per_job', 'tree')}: a secure round is a job per "
                    "client and phase, summed flat (clients_per_job 1, tree null)"
                    if self.given == "config"
                    else f"{self.named('secure', 'tree')}: a secure round is summed flat"
                )
        self._check_option_names()
        self._check_roster()
        return self

    def _check_roster(self) -> None:
        """The roster names every client of the run; and this process holds the private key
        of each client it hosts, the roster's (soma.round.signing)."""
        from soma.round.signing import SigningError

        if self.roster is None:
            if self.keys is not None:
                raise self.refused(f"{self.named('keys')} given without a roster: nothing signs")
            return
        signing = self.signing
        assert signing is not None
        missing = [k for k in range(self.clients) if k not in signing.members]
        if missing:
            raise self.refused(
                f"{self.named('roster')}: clients {', '.join(map(str, missing))} of the run's "
                f"{self.clients} are not on the roster {self.roster!r}"
            )
        for k in self.mine or ():
            try:
                signing.private(k)
            except SigningError as error:
                raise self.refused(f"{self.named('keys')}: {error}") from None

    def _check_option_names(self) -> None:
        """An option the task does not take, when its module declares them (read, not run)."""
        from soma.tasks import check_option_names, declared_options

        if self.given == "config":  # names the config key (soma.tasks)
            check_option_names(self.task, self.task_options)
            return
        declared = declared_options(self.task)
        unknown = sorted(set(self.task_options) - set(declared)) if declared is not None else []
        if unknown:
            raise self.refused(
                f"{self.named('task_options')} {', '.join(map(repr, unknown))}: not an option "
                f"of task {self.task!r}, which takes {', '.join(declared)}"
            )

    def checked(self) -> tuple[Task, Strategy]:
        """`check()`, then the task and the strategy made and checked together (see the
        module): what the `start` job and `soma client` do before they write anything."""
        from soma.round import RoundError, tree_refusal
        from soma.secagg.round import check_strategy
        from soma.strategies import (
            StrategyError,
            check_task_takes_objective,
            load_strategy,
            takes_mean,
        )
        from soma.tasks import TaskError, TaskNotFound, load_task

        self.check()
        try:
            task = load_task(self.task, dict(self.task_options))
        except TaskNotFound as error:
            raise self.refused(f"{self.named('task')}: {error}") from error
        except TaskError as error:  # OptionsRefused, or whatever else the task refused
            raise self.refused(
                f"{self.named('task_options')} (under {self.task!r}): {error}"
            ) from error
        try:
            strategy = load_strategy(self.strategy, dict(self.strategy_options))
        except StrategyError as error:
            raise self.refused(
                f"{self.named('strategy', 'strategy_options')} (under {self.strategy!r}): {error}"
            ) from error
        try:
            check_task_takes_objective(self.strategy, strategy, task)
        except StrategyError as error:
            raise self.refused(f"{self.named('strategy', 'task')}: {error}") from error
        if self.tree is not None and not takes_mean(strategy):
            raise self.refused(f"{self.named('strategy', 'tree')}: {tree_refusal(self.strategy)}")
        if self.secure is not None:
            try:
                check_strategy(self.strategy, strategy)
            except RoundError as error:
                raise self.refused(f"{self.named('strategy', 'secure')}: {error}") from None
        self._check_clients(task)
        return task, strategy

    def _check_clients(self, task: Task) -> None:
        """The task's own check that its options can serve this many clients, if it has one."""
        from soma.tasks import TaskError

        check = getattr(task, "check", None)
        if not callable(check):
            return
        try:
            check(self.clients)
        except (TaskError, ValueError) as error:
            raise self.refused(
                f"{self.named('clients', 'task_options')} (under {self.task!r}): {error}"
            ) from error
