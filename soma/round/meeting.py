"""Where one round's clients meet (`Meeting`, keyed by everything that makes it this run) and
one client's part in an average (`Input`): the values every other module of the round takes.

Kept apart so that what a meeting is can be read, and imported, without the averaging.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from soma.round import layout
from soma.round import signing as signatures
from soma.round.once import RoundError
from soma.round.tree import check_fan_in
from soma.store import Store, codecs
from soma.strategies import Strategy, Update, load_strategy


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Meeting:
    """Where one round's clients meet: the run, the round, and everything that makes it this run.

    `start` is the digest of the weights the round began from (`Store.put_value(export)`;
    the previous round's average weights), `state` the digest of the strategy's state carried
    from the round before; `config` is whatever else the caller declares the run to be (its
    task, the task's options, the seed). Two runs under one name that differ in any of them
    meet apart. A bare call with none of them meets by run, round, clients and strategy only.

    `expected` is who takes part in the round (None: every client; see soma.config.participation),
    and `quorum` how many of them must come for it to be averaged without the rest (None:
    all of them). A client that fails or whose export is refused drops out, saying why.
    """

    run: str
    round: int
    clients: int
    start: str | None = None
    state: str | None = None
    strategy: str = "fedavg"
    options: Mapping[str, Any] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)
    expected: tuple[int, ...] | None = None
    quorum: int | None = None
    tree: int | None = None  # the fan-in of hierarchical averaging (soma.round.tree); None: flat
    secure: int | None = None  # secure aggregation's threshold (soma.secagg.round); None: off
    signing: signatures.Signing | None = None  # the run's roster, its records signed; None: off
    # how an average published by another process is checked before use (soma.round.verify:
    # "recompute" or "signature"); None: recompute when the run has a roster. Not in the
    # identity: how much is checked changes no result.
    verify: str | None = None
    # whether the strategy's name came from the local config or the caller (True), or from a
    # record read from the store (False: only a built-in loads, nothing is imported)
    trusted: bool = True

    def __post_init__(self) -> None:
        run = self.run
        if not isinstance(run, str) or not run or "/round/" in f"/{run}/":
            raise RoundError(f"run name {run!r} must be non-empty text without a 'round' segment")
        if not _is_int(self.round) or self.round < 0:
            raise RoundError(f"round {self.round!r} must be an integer >= 0")
        if not _is_int(self.clients) or self.clients < 1:
            raise RoundError(f"clients {self.clients!r} must be an integer >= 1")
        if not isinstance(self.strategy, str) or not self.strategy:
            raise RoundError(f"strategy {self.strategy!r} must be a name or an import path")
        if self.expected is not None:
            expected = tuple(self.expected)
            if not expected or list(expected) != sorted(set(expected)):
                raise RoundError(f"expected clients {expected!r} must be sorted and distinct")
            for k in expected:
                if not _is_int(k) or not 0 <= k < self.clients:
                    raise RoundError(f"expected client {k!r} is not one of 0..{self.clients - 1}")
            object.__setattr__(self, "expected", expected)
        if self.quorum is not None and (
            not _is_int(self.quorum) or not 1 <= self.quorum <= len(self.members)
        ):
            raise RoundError(
                f"quorum {self.quorum!r} must be a count between 1 and {len(self.members)}"
            )
        if self.tree is not None:
            check_fan_in(self.tree)
        if self.verify not in (None, "recompute", "signature"):
            raise RoundError(f"verify {self.verify!r} must be 'recompute' or 'signature'")
        if self.secure is not None and (
            not _is_int(self.secure) or not 2 <= self.secure <= len(self.members)
        ):
            raise RoundError(
                f"secure aggregation's threshold {self.secure!r} must be a count between 2 "
                f"and the round's {len(self.members)} clients"
            )

    @property
    def verifies(self) -> str:
        """How an average published by another process is checked (soma.round.verify)."""
        if self.verify is not None:
            return self.verify
        return "signature" if self.signing is None else "recompute"

    @property
    def members(self) -> list[int]:
        """Who takes part in this round."""
        return list(range(self.clients)) if self.expected is None else list(self.expected)

    @functools.cached_property
    def _taking_part(self) -> frozenset[int] | None:
        """The members to look a client up in (None: every client takes part): `members` is
        a new list at each call, and a client is looked up ~2 times a contribution."""
        return None if self.expected is None else frozenset(self.expected)

    @property
    def needed(self) -> int:
        """How many of the members must come for the round to be averaged without the rest."""
        return len(self.members) if self.quorum is None else self.quorum

    @property
    def may_go_on_without_some(self) -> bool:
        return self.needed < len(self.members)

    def identity(self) -> dict[str, Any]:
        """What the meeting is keyed by (everything but the run's name and the round)."""
        return {
            "clients": self.clients,
            "start": self.start,
            "state": self.state,
            "strategy": self.strategy,
            "options": dict(self.options),
            "config": dict(self.config),
            "expected": None if self.expected is None else list(self.expected),
            "quorum": self.quorum,
            # only when set, so that every flat run keeps the key it always had
            **({} if self.tree is None else {"tree": self.tree}),
            **({} if self.secure is None else {"secure": self.secure}),
            **({} if self.signing is None else {"roster": self.signing.digest}),
        }

    @functools.cached_property
    def key(self) -> str:
        """The digest of `identity()`; computed once (a meeting's fields do not change, and
        every name of the round is spelled from it: ~12 times a contribution)."""
        return hashlib.sha256(codecs.canonical_json(self.identity())).hexdigest()

    @functools.cached_property
    def prefix(self) -> str:
        return layout.meeting(self.run, self.round, self.key)

    @property
    def about(self) -> str:
        return layout.about(self.prefix)

    @property
    def average(self) -> str:
        return layout.average(self.prefix)

    def client(self, k: int) -> str:
        """Client k's record. A run of more than FAN_OUT clients files them by thousands
        (`client/<k // 1000>/<k>`), so that no folder holds more than a thousand names."""
        return layout.client(self.prefix, k, self.clients)

    def started(self, k: int) -> str:
        """A workflow train job's marker for client k: beside its record, fanned out alike."""
        return layout.started(self.prefix, k, self.clients)

    def averaging(self, key: str) -> str:
        """The place of the averaging of the inputs whose digest is `key` (soma.round.once)."""
        return layout.averaging(self.prefix, key)

    @property
    def what(self) -> str:
        return f"round {self.round} of run {self.run!r}"

    def check_client(self, mine: object) -> int:
        if not _is_int(mine) or not 0 <= mine < self.clients:
            raise RoundError(
                f"client {mine!r} is not one of the round's clients 0..{self.clients - 1}"
            )
        if self._taking_part is not None and mine not in self._taking_part:
            raise RoundError(
                f"client {mine} does not take part in {self.what} (it takes {self.members})"
            )
        return mine

    def strategy_object(self) -> Strategy:
        return load_strategy(self.strategy, self.options, trusted=self.trusted)


@dataclass(frozen=True)
class Input:
    """One client's part in an average: its index, weights, size, and what it sent beside."""

    client: int
    weights: str
    size: float | None
    extra: str | None = None  # a strategy's client-side extra (SCAFFOLD's delta c_i)
    record: str | None = None  # the client's record, when it came through the store

    def update(self, store: Store) -> Update:
        """The client's update as a strategy takes it, its export lazily mapped from the
        store (the averaging and its recomputation read it alike)."""
        return Update(
            client=self.client,
            size=self.size,
            weights=store.recall_digest(self.weights, lazy=True),
            extra=None if self.extra is None else store.recall_digest(self.extra, lazy=True),
        )
