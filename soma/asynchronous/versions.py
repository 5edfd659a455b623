"""An asynchronous run's versions in the store, with nobody in charge.

    <run>/async/version/<v>/published     version v's record (claimed: published once)
    <run>/async/version/<v>/claimed, ...  who makes it (soma.round.once: claim, takeover)
    <run>/async/update/<from>/<k>         client k's update trained from version <from>

A client takes the latest version, trains, and contributes an update naming the version it
started from (its trained weights; its change is those less that version's). Whoever then
finds at least `buffer` updates that no version consumed makes the next version through
`soma.round.once`: exactly one process wins version v + 1's claim (a dead holder is taken
over, by pid or Slurm job on a folder, by lease on a bucket), consumes the `buffer` oldest
pending updates, steps (soma.asynchronous.arithmetic) and publishes v + 1's record, which
names each update, its staleness and weight. Versions are made one after the other, so
"pending" (contributed, named by no version record) is what every process computes alike
from the records, and no update is consumed twice. An update older than the staleness
limit is refused: named once in the version's `refused`, never consumed, and a client about
to contribute one is told so (`TooStale`) and starts again from the latest version.

A run asked for `rounds` versions makes exactly those: version v + 1 is claimed only when
v + 1 <= rounds, a bound on the version claimed itself (its place is its number), not on a
count read before, so whoever races, and whatever updates are left pending once the last is
made (a slower process's, trained from a version before it), no version past it is made.

    version record  {"run", "version", "from", "weights", "settings", "consumed", "refused",
                     "averaged_by"}; `from` is version v's record digest (None for version 0);
                     version 0's has "roster" too when the run is signed (its digest)
    consumed entry  {"update", "record", "client", "from", "weights", "staleness", "weight",
                     "size"}
    refused entry   {"update", "record", "client", "from", "staleness", "why"}, and
                     "forged": true when its signature did not hold (soma.asynchronous.signed)
    update record   {"client", "from", "base", "weights", "size", "by"}; `base` is the
                     record digest of version `from`, as the client read it

With a roster every record is signed (soma.asynchronous.signed): an update by its client, a
version by an averager; a version is checked before it is used, and a process that holds no
averager's key makes no version (it waits for one that does).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from soma.asynchronous import arithmetic, signed
from soma.config.asynchronous import Buffered
from soma.errors import SomaError
from soma.nodes import Export
from soma.round import holders, layout, once
from soma.round.once import POLL, Backoff, Place, RoundError, read_record
from soma.round.signing import Signing
from soma.store import Store
from soma.store.values import value_digest


class VersionError(RoundError):
    """An asynchronous run's versions cannot go on as asked (another run's start, a gap)."""


class TooStale(SomaError, ValueError):
    """An update would start too many versions back to be consumed: the client starts again
    from the latest version instead of contributing it."""


@dataclass(frozen=True)
class BufferedUpdate:
    """One contributed update as the versions see it (its record's fields, and its name)."""

    name: str
    record: str
    client: int
    start: int  # the version it was trained from
    base: str  # that version's record digest, as the client read it
    weights: str
    size: float
    forged: str | None = None  # why its signature does not hold: refused, never consumed


def _update_of(name: str, digest: str, value: dict[str, Any], start: int, k: int) -> BufferedUpdate:
    if value.get("client") != k or value.get("from") != start:
        raise VersionError(f"update {name!r} (record {digest}) is not client {k}'s from {start}")
    return BufferedUpdate(
        name, digest, k, start, value["base"], value["weights"], float(value["size"])
    )


class Versions:
    """One asynchronous run's versions in one store; records are read once (they never change)."""

    def __init__(
        self,
        store: Store,
        run: str,
        settings: Buffered,
        rounds: int | None = None,
        signing: Signing | None = None,
        among: tuple[int, ...] | None = None,
    ) -> None:
        """`rounds`: the run's last version, none past it made here (None: read only, as the
        replay does; it is recorded nowhere in the store). `signing`: the run's roster, its
        records signed and checked (None: unsigned, or read unchecked, as the replay does,
        which checks them itself); `among`: this process's clients, whose keys sign first."""
        self.store, self.run, self.settings, self.rounds = store, run, settings, rounds
        self.signing, self.among = signing, among
        self._records: dict[int, tuple[str, dict[str, Any]]] = {}
        self._updates: dict[str, BufferedUpdate] = {}
        self._weights: dict[int, Export] = {}

    def place(self, v: int) -> Place:
        return Place(layout.version(self.run, v))

    # --- reading -----------------------------------------------------------------------

    def record(self, v: int) -> tuple[str, dict[str, Any]] | None:
        """Version v's record digest and record, or None while it is not published."""
        if v not in self._records:
            digest = self.store.resolve(self.place(v).published)
            if digest is None:
                return None
            signed.check_version(self.store, self.signing, self.run, v, digest)  # before use
            self._records[v] = (digest, read_record(self.store, digest))
        return self._records[v]

    def latest(self) -> int:
        """The latest published version (-1: the run has not begun). Versions are published one
        after the other, so it looks past the latest it knows, one name at a time."""
        v = max(self._records, default=-1)
        while self.record(v + 1) is not None:
            v += 1
        return v

    def weights(self, v: int) -> Export:
        """Version v's weights (kept: a stale update's change is carried from them)."""
        if v not in self._weights:
            found = self.record(v)
            if found is None:
                raise VersionError(f"version {v} of run {self.run!r} is not published")
            self._weights[v] = self.store.recall_digest(found[1]["weights"])
        return self._weights[v]

    def updates(self) -> list[BufferedUpdate]:
        """Every update contributed so far, ordered by (start, client)."""
        for name in self.store.bound(layout.updates(self.run)):
            parsed = layout.update_of(name, self.run)
            if parsed is None or name in self._updates:
                continue
            digest = self.store.resolve(name)
            if digest is None:
                continue
            start, k = parsed
            why = signed.forged(self.store, self.signing, digest, name=name, client=k)
            if why is not None:
                self._updates[name] = BufferedUpdate(
                    name, digest, k, start, "", "", 0.0, forged=why
                )
                continue
            value = read_record(self.store, digest)
            self._updates[name] = _update_of(name, digest, value, start, k)
        return sorted(self._updates.values(), key=lambda u: (u.start, u.client))

    def consumed(self, through: int) -> set[str]:
        """The updates versions 1..`through` consumed or refused: never pending again."""
        taken: set[str] = set()
        for v in range(1, through + 1):
            found = self.record(v)
            if found is None:
                raise VersionError(f"version {v} of run {self.run!r} is missing below {through}")
            taken.update(e["update"] for e in found[1]["consumed"] + found[1]["refused"])
        return taken

    def pending(self, v: int) -> tuple[list[BufferedUpdate], list[BufferedUpdate]]:
        """After version v: the updates version v + 1 may consume, and those too stale to."""
        taken, limit = self.consumed(v), self.settings.limit
        fresh, stale = [], []
        for u in self.updates():
            if u.name in taken or u.start > v:
                continue
            too_old = limit is not None and v - u.start > limit
            (stale if too_old or u.forged is not None else fresh).append(u)
        return fresh, stale

    # --- writing -----------------------------------------------------------------------

    def begin(
        self,
        weights: str,
        *,
        deadline: float | None,
        backoff: Backoff = POLL,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Publish version 0 (the run's starting weights) unless it is: the same from every
        process of the run (its seed), and refused if another run of this name began elsewhere.
        A process that holds no averager's key cannot sign it: it waits for it, `deadline`
        seconds at most (None: for ever)."""
        roster = None if self.signing is None else self.signing.digest
        record = {
            "run": self.run,
            "version": 0,
            "from": None,
            "weights": weights,
            "settings": self.settings.value(),
            "consumed": [],
            "refused": [],
            "averaged_by": None,
            **({} if roster is None else {"roster": roster}),
        }
        name = self.place(0).published
        if signed.may_make(self.signing, self.among):
            signer = signed.version_signer(self.signing, self.among)
            digest = signed.put_version(self.store, self.signing, record, name=name, by=signer)
            once.publish(self.store, name, digest)
        found, started, delays = self.record(0), time.monotonic(), backoff.delays()
        while found is None:
            if deadline is not None and time.monotonic() - started > deadline:
                raise VersionError(
                    f"asynchronous run {self.run!r} has no version 0 after {deadline:g}s, and "
                    f"this process holds no key of the averagers "
                    f"{list((self.signing and self.signing.averagers) or ())} to sign it: is a "
                    "process hosting one of them running?"
                )
            sleep(next(delays))
            found = self.record(0)
        there = found[1]
        ours = (weights, self.settings.value(), roster)
        if (there.get("weights"), there.get("settings"), there.get("roster")) != ours:
            raise VersionError(
                f"asynchronous run {self.run!r} in {self.store} began with weights "
                f"{there.get('weights')}, settings {there.get('settings')} and roster "
                f"{there.get('roster')}, not {weights}, {self.settings.value()} and {roster}: "
                "another run of this name (another seed, task, settings or roster); name this "
                "one otherwise"
            )

    def contribute(self, client: int, start: int, trained: Export, size: float) -> str:
        """Client `client`'s update trained from version `start`: its name. Refused
        (`TooStale`) before anything is written when it could no longer be consumed. The name
        is claimed last, so a client killed before leaves no update, only unnamed blobs."""
        limit, latest = self.settings.limit, self.latest()
        if limit is not None and latest - start > limit:
            raise TooStale(
                f"client {client}'s update from version {start} of run {self.run!r} is "
                f"{latest - start} versions old (the latest is {latest}), beyond the staleness "
                f"limit {limit}: it is not contributed; the client starts again from {latest}"
            )
        base = self.record(start)
        assert base is not None
        name = layout.update(self.run, start, client)
        if self.store.resolve(name) is not None:  # a rerun: the same bits, or refused unwritten
            self._same(name, client, start, value_digest(trained))
            return name
        value = {
            "client": client,
            "from": start,
            "base": base[0],
            "weights": self.store.put_value(trained),
            "size": size,
            "by": holders.me(role="update"),
        }
        digest = signed.put_update(self.store, self.signing, value, name=name)
        if not self.store.claim(name, digest):  # raced by itself
            self._same(name, client, start, value["weights"])
        return name

    def _same(self, name: str, client: int, start: int, weights: str) -> None:
        """Refuse other weights than those client `client` already contributed from `start`
        (and, with a roster, a record there that client `client` did not sign)."""
        digest = self.store.resolve(name) or ""
        why = signed.forged(self.store, self.signing, digest, name=name, client=client)
        if why is not None:
            raise VersionError(
                f"client {client}'s update from version {start} of run {self.run!r} is taken "
                f"by a record it did not sign ({why}): nothing of it is consumed; remove "
                f"{name!r} from the store to contribute it"
            )
        there = read_record(self.store, digest)
        if there.get("weights") != weights:
            raise VersionError(
                f"client {client} already contributed other weights from version {start} of "
                f"run {self.run!r} ({name!r}): a client contributes once per version"
            )

    def advance(
        self,
        *,
        deadline: float | None,
        backoff: Backoff = POLL,
        sleep: Callable[[float], None] = time.sleep,
        lease: float,
    ) -> int:
        """Make every version the pending updates allow up to the run's `rounds` (exactly once
        each, whoever else tries); the latest version after."""
        while True:
            v = self.latest()
            if self.rounds is not None and v >= self.rounds:
                return v  # the run's last version is made: what is still pending stays so
            fresh, _ = self.pending(v)
            if len(fresh) < self.settings.buffer or not signed.may_make(self.signing, self.among):
                return v  # (with a roster, an averager's process makes it)
            work = _Next(self, v)  # exactly once, whoever else tries (soma.round.once)
            made = once.once(
                self.store, work, deadline=deadline, backoff=backoff, sleep=sleep, lease=lease,
                signing=self.signing,
            )  # fmt: skip
            if self.record(v + 1) is None:  # checked as any other's (signed.check_version)
                raise VersionError(f"version {v + 1} of run {self.run!r} ({made}) is unbound")


@dataclass(frozen=True)
class Chosen:
    """What version v + 1 is made of: the updates it consumes and those it refuses."""

    consumed: tuple[BufferedUpdate, ...]
    refused: tuple[BufferedUpdate, ...]


def choose(versions: Versions, v: int) -> Chosen | None:
    """The `buffer` oldest pending updates (by start, then client) and every too-stale one;
    None while fewer than `buffer` are pending."""
    fresh, stale = versions.pending(v)
    if len(fresh) < versions.settings.buffer:
        return None
    return Chosen(tuple(fresh[: versions.settings.buffer]), tuple(stale))


def entries(settings: Buffered, v: int, chosen: Chosen) -> tuple[list[dict], list[dict]]:
    """The record's consumed entries (in the step's order: by client, then start) and refused."""
    consumed = [
        {
            "update": u.name,
            "record": u.record,
            "client": u.client,
            "from": u.start,
            "weights": u.weights,
            "staleness": v - u.start,
            "weight": arithmetic.staleness_weight(settings.kind, settings.a, v - u.start),
            "size": u.size,
        }
        for u in sorted(chosen.consumed, key=lambda u: (u.client, u.start))
    ]
    refused = [
        {
            "update": u.name,
            "record": u.record,
            "client": u.client,
            "from": u.start,
            "staleness": v - u.start,
            "why": f"{v - u.start} versions old, beyond the staleness limit {settings.limit}",
        }
        if u.forged is None
        else {
            "update": u.name,
            "record": u.record,
            "client": u.client,
            "from": u.start,
            "staleness": v - u.start,
            "why": f"its signature does not hold: {u.forged}",
            signed.FORGED: True,
        }
        for u in chosen.refused
    ]
    return consumed, refused


def step_of(
    current: Export, consumed: list[dict], v: int, read: Callable[[str], Export],
    start_of: Callable[[int], Export], server_lr: float,
) -> Export:  # fmt: skip
    """Version v + 1's weights from version v's and the consumed entries (the one step that
    making a version and replaying it both run)."""
    points = [
        arithmetic.Consumed(
            trained=read(e["weights"]),
            start=None if e["from"] == v else start_of(e["from"]),
            size=float(e["size"]),
            weight=float(e["weight"]),
        )
        for e in consumed
    ]
    return arithmetic.server_step(current, points, server_lr)


class _Next:
    """Version v + 1 as `soma.round.once` asks about it: one place whatever the inputs, so
    exactly one process makes it; whoever wins consumes what it found pending."""

    def __init__(self, versions: Versions, v: int) -> None:
        if versions.rounds is not None and v + 1 > versions.rounds:  # refused before any claim
            raise VersionError(
                f"version {v + 1} of asynchronous run {versions.run!r} is past the run's "
                f"{versions.rounds} versions: it is not made"
            )
        self.versions, self.v = versions, v
        self.what = f"version {v + 1} of asynchronous run {versions.run!r}"
        self._place = versions.place(v + 1)

    def done(self) -> str | None:
        return self.versions.store.resolve(self._place.published)

    def ready(self, past: bool) -> Chosen | None:
        return choose(self.versions, self.v)

    def check(self, inputs: Chosen) -> None:
        """A roster's averager's key to sign the version with, or refused before the claim."""
        signed.version_signer(self.versions.signing, self.versions.among)

    def place(self, inputs: Chosen) -> Place:
        return self._place

    def compute(self, inputs: Chosen, me: dict[str, Any]) -> str:
        versions, v, settings = self.versions, self.v, self.versions.settings
        consumed, refused = entries(settings, v, inputs)
        store = versions.store
        weights = step_of(
            versions.weights(v),
            consumed,
            v,
            store.recall_digest,
            versions.weights,
            settings.server_lr,
        )
        found = versions.record(v)
        assert found is not None
        record = {
            "run": versions.run,
            "version": v + 1,
            "from": found[0],
            "weights": store.put_value(weights),
            "settings": settings.value(),
            "consumed": consumed,
            "refused": refused,
            "averaged_by": me,
        }
        signer = signed.version_signer(versions.signing, versions.among)
        return signed.put_version(store, versions.signing, record, name=self._place.published,
                                  by=signer)  # fmt: skip

    def settle(self, published: str) -> str:
        return published

    def missing(self) -> tuple[list[int], str]:
        return [], f" (fewer than {self.versions.settings.buffer} pending updates)"
