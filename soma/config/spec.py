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
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from soma.config.configs import ConfigRefused
from soma.config.options import must_be, pairs, typed
from soma.config.settings import ARGUMENTS, CONFIG_KEYS, OPTIONS
from soma.config.stores import open_store
from soma.errors import SomaError
from soma.files import DURABILITIES, DURABLE
from soma.timing import DEADLINE, LEASE, Timing
from soma.transfer import FULL, PRECISIONS

if TYPE_CHECKING:
    from soma.config.asynchronous import Buffered
    from soma.round import Meeting
    from soma.round.signing import Signing
    from soma.store import Store


def tracking_folder(run: str) -> str:
    """Where the workflow's jobs write a run's TensorBoard events (config `tracking: true`),
    so that `tensorboard --logdir results/` shows every run."""
    return f"results/{run}/tensorboard"


class BadArgument(SomaError, ValueError):
    """A command-line argument refused before the command does anything; names the option."""


# A pinned charter (config `charter`, --charter): the digest its first start logged (check_pin).
CHARTER_DIGEST = re.compile(r"[0-9a-f]{64}")


def _frozen(options: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(options or {}))


@dataclass(frozen=True)
class RunSpec:
    """What a run is: its task and strategy with their options, its clients and rounds, who
    takes part in a round and how many must come (`participation`, `quorum`), how a round is
    averaged (`tree`: a fan-in; `secure`: secure aggregation's threshold; `secrets`: the
    workflow's template of each client's secrets folder, soma.config.secrets), its seed, and how
    its clients are hosted (`per_job` clients a job or task; `mine`: this process's clients,
    None for the workflow, whose jobs each name theirs), and how its store makes writes
    durable (`durability`: "durable", or "scratch": no fsync, for a simulation on a scratch
    folder, where a crash means rerunning the round). `given` says where it came from
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
    # past the deadline, clients whose Slurm jobs have not started count as dropped
    # (soma.round.average `_unstarted`): in the meetings' config when set
    drop_unstarted: bool = False
    secure: int | None = None
    secrets: str | None = None  # secure aggregation's secrets folder (soma.config.secrets)
    tree: int | None = None
    per_job: int = 1
    mine: tuple[int, ...] | None = None
    threads: int = 1
    durability: str = DURABLE
    personal: tuple[str, ...] = ()
    roster: str | None = None  # the roster file: its records signed (soma.round.signing)
    keys: str | None = None  # where this process finds a client's private key ({client})
    averagers: tuple[int, ...] | None = None  # who may sign an average; None: any member
    # the digest of the run's charter, pinned (soma.round.signing.check_pin); None: the
    # store's, taken on first use
    charter: str | None = None
    # how an average another process published is checked before use (soma.round.verify);
    # None: recompute when the run has a roster or spans sites, else the signature only
    verify_averages: str | None = None
    given: str = "config"
    # the other names under the config's `task_options` (each must name a task: see check)
    other_tasks: tuple[str, ...] = field(default=(), compare=False, repr=False)
    # who evaluates a round's average on their own data (soma.run.evaluation): None, the round's
    # sample; and where per-round metrics go as TensorBoard events (soma.tracking): None, nowhere
    evaluate_participation: int | float | None = None
    tracking: str | None = None
    # across institutions (config `sites`: site -> its clients, `0-4`; `site`: which one this
    # snakemake is): None, one site hosting every client
    site: str | None = None
    sites: Mapping[str, Any] | None = None
    # how long its processes wait and poll (soma.timing): not what the run is, so not compared
    timing: Timing = field(default_factory=Timing, compare=False)
    # the digest of the task's frozen base in the store (soma.run.base), once it is kept
    # there (soma.run.base.keep: a driver; the workflow's start job, its receipts after)
    base: str | None = None
    # a buffered asynchronous run's settings as given (soma.config.asynchronous); None: rounds
    asynchronous: Mapping[str, Any] | None = None
    # the precision its weights are kept at in the store (soma.transfer): float32 as made
    transfer: str = FULL

    def __post_init__(self) -> None:
        object.__setattr__(self, "task_options", _frozen(self.task_options))
        object.__setattr__(self, "strategy_options", _frozen(self.strategy_options))
        if self.mine is not None:
            object.__setattr__(self, "mine", tuple(self.mine))
        if self.averagers is not None:
            object.__setattr__(self, "averagers", tuple(self.averagers))
        if isinstance(self.personal, (list, tuple)):
            object.__setattr__(self, "personal", tuple(self.personal))
        if self.sites is not None:
            object.__setattr__(self, "sites", _frozen({str(k): v for k, v in self.sites.items()}))

    # --- made from a config or from arguments ---------------------------------------------

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> RunSpec:
        """The workflow's config (after `soma.config.configs.typed`, which read what was typed on
        `--config`); an option that is text (a file's `lr: 1e-1`, which YAML 1.1 keeps as text) is
        read by `soma.config.options`, as `soma client --option` reads it."""
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
            secrets=(config.get("secure_aggregation") or {}).get("secrets"),
            tree=(config.get("tree") or {}).get("fan_in"),
            per_job=config.get("clients_per_job", 1) or 1,
            threads=config.get("threads", 1) or 1,
            durability=config.get("durability") or DURABLE,
            personal=config.get("personal") or (),
            other_tasks=tuple(sorted(set(config.get("task_options") or {}) - {task})),
            evaluate_participation=config.get("evaluate_participation"),
            tracking=tracking_folder(str(config["run"])) if config.get("tracking") else None,
            roster=config.get("roster"),
            keys=config.get("keys"),
            averagers=config.get("averagers"),
            charter=config.get("charter"),
            verify_averages=config.get("verify_averages"),
            site=None if config.get("site") is None else str(config["site"]),
            sites=config.get("sites"),
            transfer=config.get("transfer") or FULL,
            timing=Timing.from_config(config),
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RunSpec:
        """`soma client`'s (or `soma simulate`'s) arguments; `--option KEY=VALUE` read by
        `soma.config.options`, as the workflow reads its options."""
        from soma.config.asynchronous import from_options

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
            drop_unstarted=getattr(args, "drop_unstarted", False),
            secure=args.secure_aggregation,
            tree=args.tree,
            per_job=getattr(args, "per_task", 1),
            mine=None if mine is None else tuple(mine),
            threads=args.threads,
            durability=getattr(args, "durability", DURABLE),
            personal=tuple(getattr(args, "personal", None) or ()),
            roster=getattr(args, "roster", None),
            keys=getattr(args, "keys", None),
            averagers=getattr(args, "averagers", None),
            charter=getattr(args, "charter", None),
            verify_averages=getattr(args, "verify_averages", None),
            given="args",
            evaluate_participation=getattr(args, "evaluate_participation", None),
            tracking=getattr(args, "tracking", None),
            asynchronous=from_options(
                getattr(args, "buffer", None),
                getattr(args, "staleness", "polynomial"),
                getattr(args, "staleness_limit", None),
                getattr(args, "server_lr", 1.0),
            ),
            transfer=getattr(args, "transfer", FULL),
            timing=Timing(
                deadline=getattr(args, "deadline", DEADLINE), lease=getattr(args, "lease", LEASE)
            ),
        )

    # --- what the run is, the same in every mode ------------------------------------------

    def identity(self) -> dict[str, Any]:
        """The part of the run's identity that is not the strategy's (soma.config.identity)."""
        from soma.config.identity import identity

        found = identity(self.task, dict(self.task_options), self.seed, self.base)
        if self.personal:  # only when set: the meetings of every other run keep their keys
            found["personal"] = sorted(self.personal)
        if self.transfer != FULL:  # the same: a float32 run's meetings are as they were
            found["transfer"] = self.transfer
        if self.threads != 1:  # the same: the count decides a CPU's sums (soma.training)
            found["threads"] = self.threads
        if self.drop_unstarted:  # the same: who a round leaves out, and why (soma.round.average)
            found["drop_unstarted"] = True
        return found

    def meeting(self, round: int, start: str | None, state: str | None) -> Meeting:
        """Where round `round`'s clients meet, from the weights (and the strategy state) it
        starts from: who is sampled and the quorum follow from the seed and the round."""
        from soma.config.participation import policy
        from soma.round import Meeting

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
            verify=self.verifies,
        )

    @property
    def verifies(self) -> str:
        """How an average another process published is checked before use: as configured,
        else recomputed when the run has a roster or spans sites (soma.round.verify)."""
        if self.verify_averages is not None:
            return self.verify_averages
        return "recompute" if self.roster is not None or self.sites else "signature"

    def store(self, path: str | Path) -> Store:
        """The store at `path` opened with this run's durability; scratch on a store that
        says it is shared is refused (before anything is made), naming the setting."""
        return open_store(path, self.durability, self.named("durability"), self.refused)

    @staticmethod
    def config_store(config: Mapping[str, Any]) -> Store:
        """The store of a workflow job's `config` (its `store`), with its `durability`."""
        durability = config.get("durability") or DURABLE
        return open_store(config["store"], durability, "config key `durability`", ConfigRefused)

    def evaluating(self, round: int) -> list[int]:
        """Who evaluates round `round`'s average on their own data (soma.run.evaluation): nobody
        under secure aggregation, where a client's metrics and evaluation size would be in
        clear beside a sum that hides them (issue 19: nothing per client in clear)."""
        from soma.config.participation import evaluating

        if self.secure is not None:
            return []
        return evaluating(
            self.seed, round, self.clients, self.participation, self.evaluate_participation
        )

    def site_clients(self) -> dict[str, list[int]]:
        """Each site's clients (config `sites`), checked to cover every client exactly once;
        refused naming the key and the site or the client."""
        from soma.config.options import clients_of

        found: dict[str, list[int]] = {}
        whose: dict[int, str] = {}
        for name, text in (self.sites or {}).items():
            try:
                found[name] = clients_of(text)
            except ValueError as error:
                raise self.refused(f"{self.named('sites')}: site {name!r}: {error}") from None
            for k in found[name]:
                if k >= self.clients:
                    raise self.refused(
                        f"{self.named('sites')}: site {name!r} names client {k}, not one of "
                        f"the run's clients 0..{self.clients - 1}"
                    )
                if k in whose:
                    raise self.refused(
                        f"{self.named('sites')}: client {k} is in both site {whose[k]!r} and "
                        f"site {name!r}; each client is hosted by exactly one site"
                    )
                whose[k] = name
        missing = [k for k in range(self.clients) if k not in whose]
        if missing:
            raise self.refused(
                f"{self.named('sites')}: clients {', '.join(map(str, missing))} of the run's "
                f"{self.clients} are in no site; every client is hosted by exactly one site"
            )
        return found

    @property
    def hosted(self) -> list[int] | None:
        """The clients this site hosts (config `site`); None: every client, one site."""
        return None if self.site is None else self.site_clients()[self.site]

    @functools.cached_property
    def signing(self) -> Signing | None:
        """The run's roster and where its keys are (None: records unsigned), read once."""
        from soma.round.signing import Signing, SigningError, read_roster

        if self.roster is None:
            return None
        try:
            return Signing.of(read_roster(self.roster), self.keys, self.averagers, self.charter)
        except SigningError as error:
            raise self.refused(f"{self.named('roster')}: {error}") from None

    def check_charter_at(self, where: str | Path) -> None:
        """`check_charter` of the store at `where`, not made here (a pinned run refused there)."""
        if self.signing is None:
            return
        if "://" in str(where) or Path(where).exists():
            self.check_charter(self.store(where))
        elif self.charter is not None:
            self._check_pin(None)

    def check_charter(self, store: Store) -> None:
        """With a roster, refuse a run whose store holds its charter under another roster
        file (or other averagers), naming the file (soma.round.signing), or another charter
        than the one it is pinned to (or none), naming both, before anything is written."""
        from soma.round import layout
        from soma.round.signing import SigningError, check_charter

        if self.signing is None:
            return
        self._check_pin(store.resolve(layout.charter(self.run)))
        try:
            check_charter(store, self.signing, self.run)
        except SigningError as error:
            raise self.refused(f"{self.named('roster')} {self.roster!r}: {error}") from None

    def _check_pin(self, found: str | None) -> None:
        """The store's charter (`found`; None: none) against the one pinned, naming the key."""
        from soma.round.signing import SigningError, check_pin

        try:
            check_pin(self.run, found, self.charter)
        except SigningError as error:
            raise self.refused(f"{self.named('charter')}: {error}") from None

    # --- the checks --------------------------------------------------------------------------

    def named(self, *fields: str) -> str:
        """`config keys `a`/`b`` or `--a/--b`: what a refusal of these fields names."""
        if self.given == "args":
            return "/".join(OPTIONS.get(f, f) for f in fields)
        if self.given == "library":  # soma.simulate's keyword arguments
            keys = "/".join(f"`{ARGUMENTS.get(f, f)}`" for f in fields)
            return f"simulate() argument{'s' if len(fields) > 1 else ''} {keys}"
        keys = "/".join(f"`{CONFIG_KEYS.get(f, f)}`" for f in fields)
        return f"config key{'s' if len(fields) > 1 else ''} {keys}"

    def buffered(self) -> Buffered | None:
        """The run's asynchronous settings, checked with what they go with; None: rounds."""
        from soma.config.asynchronous import AsynchronousRefused, buffered, refusal

        if self.asynchronous is None:
            return None
        try:
            settings = buffered(self.asynchronous)
        except AsynchronousRefused as error:
            raise self.refused(f"{self.named('asynchronous')}: {error}") from None
        why = refusal(
            settings,
            clients=self.clients,
            strategy=self.strategy,
            secure=self.secure,
            tree=self.tree,
            personal=self.personal,
            participation=self.participation,
            roster=self.roster,
        )
        if why is not None:
            raise self.refused(f"{self.named('asynchronous')}: {why}")
        return settings

    def refused(self, message: str) -> SomaError:
        """The refusal of this spec's source: a ConfigRefused or a BadArgument."""
        return (ConfigRefused if self.given == "config" else BadArgument)(message)

    def _at_least(self, name: str, least: int) -> None:
        value = getattr(self, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise self.refused(must_be(self.named(name), f"an integer >= {least}", value))

    def _check_timing(self) -> None:
        """A deadline is seconds >= 0 (inf or None: for ever); a lease finite seconds >= 1."""
        deadline, lease = self.timing.deadline, self.timing.lease
        number = (int, float)
        if deadline is not None and (
            not isinstance(deadline, number) or isinstance(deadline, bool) or not deadline >= 0
        ):
            raise self.refused(
                must_be(self.named("deadline"), "a number of seconds >= 0 (inf: forever)", deadline)
            )
        if not isinstance(lease, number) or isinstance(lease, bool) or not 1 <= lease < math.inf:
            raise self.refused(must_be(self.named("lease"), "a number of seconds >= 1", lease))

    def check(self) -> RunSpec:
        """Every check that needs no torch and imports no task (see the module): the spec."""
        from soma.config.participation import ParticipationError, quorum_size, sample_size

        for name, least in (("rounds", 1), ("clients", 1), ("seed", 0), ("threads", 1)):
            self._at_least(name, least)
        self._check_timing()
        self.buffered()  # an asynchronous run's settings, and what it cannot be combined with
        for k in self.mine or ():
            if not 0 <= k < self.clients:
                raise self.refused(
                    f"{self.named('mine')}: client {k} is not one of the run's clients "
                    f"0..{self.clients - 1}"
                )
        if self.tree is not None:
            self._at_least("tree", 2)
        if self.verify_averages not in (None, "recompute", "signature"):
            raise self.refused(
                must_be(
                    self.named("verify_averages"), "recompute or signature", self.verify_averages
                )
            )
        if self.transfer not in PRECISIONS:
            raise self.refused(
                must_be(self.named("transfer"), f"one of {', '.join(PRECISIONS)}", self.transfer)
            )
        if self.transfer != FULL and self.secure is not None:
            raise self.refused(
                f"{self.named('transfer', 'secure')}: a secure round masks float32 weights in "
                "fixed point; its weights travel at float32 (transfer: float32)"
            )
        if self.transfer != FULL and self.asynchronous is not None:
            raise self.refused(
                f"{self.named('transfer', 'asynchronous')}: an asynchronous run's versions are "
                "kept at float32 (not yet at another precision)"
            )
        if self.durability not in DURABILITIES:
            raise self.refused(
                must_be(
                    self.named("durability"), f"one of {', '.join(DURABILITIES)}", self.durability
                )
            )
        try:
            sampled = sample_size(self.participation, self.clients)
            quorum = quorum_size(self.quorum, sampled)
        except ParticipationError as error:
            raise self.refused(
                f"{self.named('clients', 'participation', 'quorum')}: {error}"
            ) from None
        try:
            self.evaluating(0)
        except ParticipationError as error:
            raise self.refused(f"{self.named('evaluate_participation')}: {error}") from None
        if self.secure is not None:
            if not 2 <= self.secure <= sampled:
                raise self.refused(
                    must_be(
                        f"{self.named('secure')}: threshold",
                        f"between 2 and the {sampled} clients of a round",
                        self.secure,
                    )
                )
            self._check_threshold(sampled)
            if self.secrets is not None:
                from soma.config.secrets import template_refusal

                refusal = template_refusal(self.secrets)
                if refusal is not None:
                    raise self.refused(f"{self.named('secrets')}: {refusal}")
            if self.tree is not None or self.per_job != 1 and self.given == "config":
                raise self.refused(
                    f"{self.named('secure', 'per_job', 'tree')}: a secure round is a job per "
                    "client and phase, summed flat (clients_per_job 1, tree null)"
                    if self.given == "config"
                    else f"{self.named('secure', 'tree')}: a secure round is summed flat"
                )
        self._check_sites()
        self._check_personal_names()
        self._check_option_names()
        self._check_other_tasks()
        self._check_findable()
        self._check_roster()
        self._check_fault_deadline(sampled, quorum)
        return self

    def _check_fault_deadline(self, sampled: int, quorum: int) -> None:
        """A round that may go on without somebody past its deadline (a quorum, or a secure
        sum's threshold, below the clients sampled) and whose clients other processes host
        must not give up on a client whose store is still retrying (soma.timing)."""
        elsewhere = self.mine is not None and len(set(self.mine)) < self.clients
        threshold = sampled if self.secure is None else self.secure
        if elsewhere and min(quorum, threshold) < sampled:
            from soma.timing import check_fault_deadline  # looked up now: its mutant

            check_fault_deadline(self.timing.deadline, option=self.named("deadline"))

    def _check_findable(self) -> None:
        """The task and the strategy name modules that can be found here (soma.config.lookup,
        without importing them): a typo is refused by a dry run, naming the near built-in."""
        from soma.config.lookup import missing, modules_of, near, not_a_strategy

        if missing(self.task):
            raise self.refused(
                f"{self.named('task')}: no module {self.task!r} can be imported here (a task is "
                "an import path: soma.tasks.digits, or a module of your own in the working "
                "directory or on PYTHONPATH)"
                + near(self.task, [f"soma.tasks.{n}" for n in modules_of("tasks")])
            )
        if self.strategy not in modules_of("strategies") and missing(self.strategy):
            raise self.refused(f"{self.named('strategy')}: {not_a_strategy(self.strategy)}")

    def _check_sites(self) -> None:
        """`sites` cover every client once; `site` is one of them; no secure aggregation
        across sites in the workflow (its phases are a DAG's barriers: `soma client` runs it)."""
        if self.sites is None:
            if self.site is not None:
                raise self.refused(
                    f"{self.named('site', 'sites')}: site {self.site!r} given without `sites` "
                    "(which clients each site hosts)"
                )
            return
        found = self.site_clients()
        if self.site is not None and self.site not in found:
            raise self.refused(
                f"{self.named('site')}: {self.site!r} is not one of the sites "
                f"{', '.join(map(repr, found))} (config key `sites`)"
            )
        if self.secure is not None:
            raise self.refused(
                f"{self.named('secure', 'sites')}: the workflow's secure rounds are barriers of "
                "one DAG; across sites, run secure aggregation with `soma client` processes "
                "(README.md, Across institutions)"
            )

    def _check_roster(self) -> None:
        """The roster names every client of the run; and this process (or site) holds the
        private key of each client it hosts, the roster's (soma.round.signing)."""
        if self.charter is not None and (
            not isinstance(self.charter, str) or not CHARTER_DIGEST.fullmatch(self.charter)
        ):
            raise self.refused(
                must_be(self.named("charter"), "a charter's digest (64 hex digits)", self.charter)
            )
        if self.roster is None:
            for given in ("keys", "averagers", "charter"):
                if getattr(self, given) is not None:
                    raise self.refused(f"{self.named(given)} given without a roster: nothing signs")
            return
        # imported only for a roster: soma.round imports torch, 2 s of every Snakemake start
        from soma.round.signing import SigningError

        for k in self.averagers or ():
            if not 0 <= k < self.clients:
                raise self.refused(
                    f"{self.named('averagers')}: client {k} is not one of the run's clients "
                    f"0..{self.clients - 1}"
                )
        signing = self.signing
        assert signing is not None
        missing = [k for k in range(self.clients) if k not in signing.members]
        if missing:
            raise self.refused(
                f"{self.named('roster')}: clients {', '.join(map(str, missing))} of the run's "
                f"{self.clients} are not on the roster {self.roster!r}"
            )
        for k in self.mine or self.hosted or ():  # a process's clients, or a site's
            try:
                signing.private(k)
            except SigningError as error:
                raise self.refused(f"{self.named('keys')}: {error}") from None

    def _check_threshold(self, sampled: int) -> None:
        """Secure aggregation's threshold against whom it must hold (soma.secagg): more than
        half a round's clients, and more clients than any one process hosts, unless it hosts
        them all (then nobody outside it has anything to hide from it)."""
        assert self.secure is not None
        if 2 * self.secure <= sampled:
            raise self.refused(
                f"{self.named('secure')}: threshold {self.secure} is at or below half the "
                f"{sampled} clients of a round: two groups of {self.secure} that do not overlap "
                f"could unmask a client; it must be at least {sampled // 2 + 1}"
            )
        hosted = len(self.mine or ())
        if hosted >= self.secure and hosted < self.clients:
            raise self.refused(
                f"{self.named('mine', 'secure')}: this process would host {hosted} clients, at "
                f"least the threshold {self.secure}: it would hold enough shares to unmask "
                f"every other client; host fewer than {self.secure} (or all {self.clients})"
            )

    def _check_other_tasks(self) -> None:
        """Options under a name that is no task (a typo of the task's, say) are refused, not
        ignored; another task's options may stay in a config (read, not run)."""
        from soma.tasks import source_of

        for name in self.other_tasks:
            if source_of(name) is None:
                raise self.refused(
                    f"{self.named('task_options')}: options under {name!r}, which names no task "
                    f"module, would be ignored (the run's task is {self.task!r}): put them "
                    f"under {self.task!r}, or make {name!r} importable"
                )

    def _check_personal_names(self) -> None:
        """`personal`: distinct node names, never under secure aggregation (soma.run.personal)."""
        personal = self.personal
        if not isinstance(personal, tuple) or not all(isinstance(n, str) and n for n in personal):
            raise self.refused(must_be(self.named("personal"), "a list of node names", personal))
        twice = sorted({n for n in personal if personal.count(n) > 1})
        if twice:
            raise self.refused(f"{self.named('personal')}: node {twice[0]!r} is named twice")
        if personal and self.secure is not None:
            raise self.refused(
                f"{self.named('personal', 'secure')}: a secure round keeps no client's state "
                "from one round to the next, so personal nodes cannot be kept under it"
            )

    def _check_option_names(self) -> None:
        """An option the task does not take, or of a type it does not take, when its module
        declares them (read, not run: soma.config.task_options)."""
        from soma.config.task_options import type_refusal
        from soma.tasks import check_option_names, declared_options

        if self.given == "config":  # names the config key (soma.tasks)
            check_option_names(self.task, self.task_options)
        else:
            declared = declared_options(self.task)
            unknown = sorted(set(self.task_options) - set(declared)) if declared is not None else []
            if unknown:
                raise self.refused(
                    f"{self.named('task_options')} {', '.join(map(repr, unknown))}: not an "
                    f"option of task {self.task!r}, which takes {', '.join(declared)}"
                )
        said = type_refusal(self.task, self.task_options)  # and their types, where declared
        if said is not None:
            raise self.refused(f"{self.named('task_options')}: {said}")
