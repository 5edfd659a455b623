"""Meetings of one run and round that differ: the settings that tell them apart (`labels`,
for `soma status`), and the refusal a waiting client gets when one it waits for joined
another meeting instead (`MeetingsDiffer`, found by `_Elsewhere`).

Kept apart so that the averaging only asks `_Elsewhere.check` while it waits.

With a roster (soma.round.signing) a rival meeting and a note are believed only when signed
by a roster member: the rival's `about` (signed by whoever announced it, soma.round.client)
and the note (by whoever left it). Whoever can write the store but holds no roster key can
then stop no waiting client with a MeetingsDiffer of its choosing: what it writes is logged
and ignored.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from soma.differences import differences, shown
from soma.errors import SomaError
from soma.round import holders, layout
from soma.round import signing as signatures
from soma.round.meeting import Meeting
from soma.round.once import RoundError, read_record
from soma.store import Store, codecs
from soma.store.errors import StoreError

LOG = logging.getLogger("soma.round.conflicts")


class MeetingsDiffer(RoundError):
    """Clients of one run and round meet apart: the settings they were given differ."""


def settings(about: Mapping[str, Any]) -> dict[str, Any]:
    """A meeting's identity (its `about` record) by the names a user sets (the config's keys,
    where there is one), so that two meetings are told apart key by key."""
    config = dict(about.get("config") or {})
    return {
        "task": config.pop("task", None),
        "task_options": config.pop("options", None) or {},
        "seed": config.pop("seed", None),
        **config,
        "clients": about.get("clients"),
        "strategy": about.get("strategy"),
        "strategy_options": about.get("options") or {},
        "expected": about.get("expected"),
        "quorum": about.get("quorum"),
        "tree": about.get("tree"),
        "secure_aggregation": about.get("secure"),
    }


# How a meeting's starting point is said when it is all that differs.
STARTING_POINT = {"start": "start weights", "state": "strategy state"}


def meeting_differences(
    theirs: Mapping[str, Any], mine: Mapping[str, Any]
) -> list[tuple[str, Any, Any]]:
    """The settings two meetings' `about` records differ in (see `soma.differences`);
    only when they differ in none, their starting points (the start weights, the strategy's
    state), which the settings of the rounds before decide."""
    found = differences(settings(theirs), settings(mine))
    if found:
        return found
    return [
        (said, theirs.get(key), mine.get(key))
        for key, said in STARTING_POINT.items()
        if theirs.get(key) != mine.get(key)
    ]


def said_apart(found: Sequence[tuple[str, Any, Any]]) -> tuple[str, str]:
    """`found` (from `meeting_differences`) said from each side: ("strategy fedadam",
    "strategy fedavg"); a digest is shortened to 12 characters."""

    def value(v: Any) -> str:
        text = shown(v)
        return text[:12] if isinstance(v, str) and len(v) == 64 else text

    return (
        ", ".join(f"{key} {value(a)}" for key, a, _ in found),
        ", ".join(f"{key} {value(b)}" for key, _, b in found),
    )


def labels(store: Store, run: str, found: Iterable[tuple[int, str]]) -> dict[tuple[int, str], str]:
    """Per (round, meeting key) of `found`, what tells the meeting apart from the other
    meetings of its round: the settings it differs in, with its own values ("strategy
    fedadam"); "" for a round's only meeting, or a meeting whose `about` cannot be read."""

    by_round: dict[int, list[str]] = {}
    for r, key in found:
        by_round.setdefault(r, []).append(key)
    told: dict[tuple[int, str], str] = {}
    for r, keys in by_round.items():
        abouts: dict[str, Mapping[str, Any] | None] = {}
        for key in keys if len(keys) > 1 else ():
            try:
                digest = store.resolve(layout.about(layout.meeting(run, r, key)))
                abouts[key] = None if digest is None else read_record(store, digest)
            except (SomaError, StoreError, OSError):
                abouts[key] = None
        for key in keys:
            mine, apart = abouts.get(key), {}
            for other, theirs in abouts.items():
                if other != key and mine is not None and theirs is not None:
                    for name, _, value in meeting_differences(theirs, mine):
                        apart.setdefault(name, value)
            told[(r, key)] = said_apart([(k, None, v) for k, v in sorted(apart.items())])[1]
    return told


# How often a waiting client looks for its clients in other meetings of its round (seconds).
ELSEWHERE_EVERY = 1.0


# When this process began: a note from another meeting (see _Elsewhere) older than that was
# left for somebody else, by a run long gone.
_SINCE = time.time()


def signer(meeting: Meeting) -> int | None:
    """Who signs what this process writes for a meeting but no client of its own (its `about`,
    a note): the first roster member whose key it holds; None without a roster, or when it
    holds no key (written unsigned then: nobody believes it, and it stops nobody)."""
    if meeting.signing is None:
        return None
    try:
        return meeting.signing.any_member(meeting.members)
    except signatures.SigningError:
        return None


def signing_as(meeting: Meeting, by: int | None) -> signatures.Signing | None:
    """The signing to write with as `by`: the meeting's, unless nobody can sign (then none)."""
    return None if by is None else meeting.signing


class _Elsewhere:
    """Whether a client this meeting waits for joined another meeting of the same run and
    round instead, which nobody would ever average with this one.

    A record (or started marker) there counts when its writer may be alive, or when it was
    written while this meeting waited: a record left by a crashed run whose process is
    provably gone does not stop a new one. A meeting already averaged is past, not a rival.
    Whoever finds a rival leaves it a note (`<rival>/apart/<its own key>`) before it stops:
    the rival may still be training its other clients, and by its first look the finder's
    records are a gone process's; a note written since the rival's process began counts.
    """

    def __init__(self, store: Store, meeting: Meeting) -> None:
        self.store, self.meeting = store, meeting
        self.folder = layout.round_prefix(meeting.run, meeting.round)
        self.seen: set[str] | None = None  # the records there at the first look
        self.next = 0.0
        self._believed: dict[tuple[str, str], bool] = {}  # (name, digest): signed on the roster

    def check(self, waiting: Sequence[int]) -> None:
        now = time.monotonic()
        if now < self.next or not waiting:
            return
        self.next = now + ELSEWHERE_EVERY
        waiting_for = set(waiting)
        first, seen = self.seen is None, set()
        alive: dict[str, bool] = {}
        noted = self._noted()
        for key in self.store.entries(self.folder):
            prefix = layout.meeting(self.meeting.run, self.meeting.round, key)
            if not self._rival(key):
                continue
            names = self.store.bound(layout.clients(prefix))
            names += self.store.bound(layout.started_markers(prefix))
            for name in names:
                rest = name[len(prefix) + 1 :]
                k = layout.client_of(rest)
                k = layout.started_of(rest) if k is None else k
                if k is None or k not in waiting_for:
                    continue
                seen.add(name)
                if key in noted:
                    raise self._apart(key, k)
                if not first:
                    if name not in (self.seen or ()):
                        raise self._apart(key, k)
                    continue
                holder = self._writer(name)
                if holder is None:
                    continue
                said = codecs.canonical_json(holder).decode()
                if said not in alive:
                    alive[said] = not holders.gone(holder)
                if alive[said]:
                    raise self._apart(key, k)
        if first:
            self.seen = seen

    def _noted(self) -> set[str]:
        """The meetings that left this one a note since this process began."""
        found = set()
        for name in self.store.bound(layout.notes(self.meeting.prefix)):
            if not self._signed(name, "an apart note"):
                continue
            note = self._record(name)
            at = None if note is None else note.get("at")
            if isinstance(at, int | float) and at >= _SINCE:
                found.add(name.rsplit("/", 1)[1])
        return found

    def _tell(self, key: str, client: int) -> None:
        """Leave meeting `key` a note that this one found its client there (best effort)."""

        note = {"client": client, "at": time.time(), "by": holders.me()}
        try:
            other = layout.meeting(self.meeting.run, self.meeting.round, key)
            name = layout.note(other, self.meeting.key)
            by = signer(self.meeting)
            signatures.keep(self.store, signing_as(self.meeting, by), note, name=name, by=by)
        except (SomaError, StoreError, OSError):
            pass

    def _signed(self, name: str, what: str) -> bool:
        """Whether the record at `name` is signed by a roster member (always, without a
        roster); one that is not is logged once and counts for nothing."""

        signing = self.meeting.signing
        if signing is None:
            return True
        try:
            digest = self.store.resolve(name)
        except (SomaError, StoreError, OSError):
            return False
        if digest is None:
            return False
        if (name, digest) not in self._believed:
            try:
                signatures.check(self.store, signing, digest, name=name, writer=None, what=what)
                self._believed[(name, digest)] = True
            except (SomaError, StoreError, OSError) as error:
                LOG.warning("%s: ignored (it stops nobody)", error)
                self._believed[(name, digest)] = False
        return self._believed[(name, digest)]

    def _record(self, name: str) -> dict[str, Any] | None:
        """The record `name` names; None when it cannot be read (it is not this meeting's to
        judge: `soma verify` says so)."""

        try:
            digest = self.store.resolve(name)
            record = None if digest is None else read_record(self.store, digest)
        except (SomaError, StoreError, OSError):
            return None
        return record if isinstance(record, dict) else None

    def _writer(self, name: str) -> dict[str, Any] | None:
        """Who wrote the record (or started marker) `name`, if it can be read."""
        record = self._record(name)
        holder = None if record is None else record.get("by", record)
        return holder if isinstance(holder, dict) else None

    def _rival(self, key: str) -> bool:
        """Another meeting of the round, not yet averaged; with a roster, one whose `about` a
        roster member signed (anyone can write a folder and records in it)."""
        other = layout.meeting(self.meeting.run, self.meeting.round, key)
        if key == self.meeting.key or self.store.resolve(layout.average(other)) is not None:
            return False
        return self._signed(layout.about(other), f"the about record of meeting {key[:12]}")

    def _apart(self, key: str, client: int) -> MeetingsDiffer:
        """The refusal naming `client` and what differs; meeting `key` is told first."""
        self._tell(key, client)
        other = layout.meeting(self.meeting.run, self.meeting.round, key)
        digest = self.store.resolve(layout.about(other))
        theirs = None if digest is None else read_record(self.store, digest)
        mine = {"run": self.meeting.run, "round": self.meeting.round, **self.meeting.identity()}
        found = [] if theirs is None else meeting_differences(theirs, mine)
        if not found:
            joined = f"joined another meeting of it ({key[:12]}), whose settings are not recorded"
        elif found[0][0] in STARTING_POINT.values():
            there, here = said_apart(found)
            joined = f"joined with the same settings but another start, {there}; you have {here}"
        else:
            there, here = said_apart(found)
            joined = f"joined with {there}; you have {here}"
        return MeetingsDiffer(
            f"{self.meeting.what}: client {client} {joined}. The two never meet: give every "
            "client of a run the same settings, or name another run"
        )
