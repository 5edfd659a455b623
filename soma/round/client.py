"""A client's side of a round: the meeting announced, what the client brought written as its
record (claimed, so that a second contribution with other weights is refused), or why it
drops out.

Kept apart from the quorum module (who came), which only reads what these write.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from soma.errors import SomaError
from soma.nodes import Export
from soma.round import holders, layout, records
from soma.round import signing as signatures
from soma.round.checks import Refused, _check_finite, _check_size
from soma.round.conflicts import signer, signing_as
from soma.round.meeting import Meeting
from soma.round.once import RoundError
from soma.store import Store
from soma.timing import FAULT_GRACE

LOG = logging.getLogger("soma.client")


def announce(store: Store, meeting: Meeting, *, by: int | None = None) -> None:
    """The meeting's identity, written once, so that `status` can say what it is, and gc
    that the round is open (a process announces it as the round begins: soma.run.drive).

    With a roster it is signed, by client `by` (None: the first roster member whose key this
    process holds), so that another meeting of the round believes it is a rival
    (soma.round.conflicts); a process that holds no roster key writes it unsigned."""
    if store.resolve(meeting.about) is None:
        about = {"run": meeting.run, "round": meeting.round, **meeting.identity()}
        by = signer(meeting) if by is None else by
        digest = signatures.put(store, signing_as(meeting, by), about, name=meeting.about, by=by)
        store.claim(meeting.about, digest)


@dataclass(frozen=True)
class Contribution:
    record: str  # the digest of the client's record
    weights: str  # the digest of its weights
    extra: str | None = None
    own: str | None = None  # the client's own state (kept for the next round it trains)


def contribute(
    store: Store,
    meeting: Meeting,
    export: Export,
    *,
    mine: int,
    size: float | None = None,
    extra: Export | None = None,
    own: object = None,
    release: bool = False,
    metrics: Mapping[str, Any] | None = None,
) -> Contribution:
    """Write what client `mine` learnt, its size, and what its strategy sends beside, to the round.

    `own` is the client's own strategy state (SCAFFOLD's c_i): kept under this client and
    round, and named by its record, for the next round this client trains.

    `metrics`: what its training said, kept in the record it signs (soma.round.records).

    `release`: the export is a distributed-DP release (noise drawn by this attempt): it is
    claimed once for the client and round before any of it is written (`_release`); an
    attempt that finds the client's release there contributes that one, never its own.
    """
    meeting.check_client(mine)
    signatures.holds(meeting.signing, mine)
    _check_size(size, mine)
    _check_finite(export, mine)
    if extra is not None:
        _check_finite(extra, mine)
    if release:
        return _release(
            store, meeting, export, mine=mine, size=size, extra=extra, own=own, metrics=metrics
        )
    _refuse_other_weights(store, meeting, mine, export, size, extra, own)
    weights = store.put_value(export)
    extra_digest = None if extra is None else store.put_value(extra)
    own_digest = None if own is None else store.put_value(own)
    announce(store, meeting, by=mine)
    record = records.ClientRecord(
        mine, weights, size, extra_digest, own_digest, holders.me(), metrics
    )
    kept = _claim_record(store, meeting, record)
    return Contribution(kept, weights, extra_digest, own_digest)


class Contradicts(RoundError):
    """A client contributes to a round it already brought other weights to: the first stands."""


def _earlier_record(store: Store, meeting: Meeting, mine: int) -> records.ClientRecord | None:
    """The export client `mine` already brought to the round, if any (a drop-out, or a
    record that cannot be read, is replaced: see `_claim_record`)."""

    name = meeting.client(mine)
    try:
        there = store.resolve(name)
        earlier = (
            None if there is None else records.read_client(store, there, client=mine, name=name)
        )
    except (SomaError, OSError):
        return None
    return earlier if isinstance(earlier, records.ClientRecord) else None


def _refuse_other_weights(
    store: Store,
    meeting: Meeting,
    mine: int,
    export: Export,
    size: float | None,
    extra: Export | None,
    own: object,
) -> None:
    """A rerun that brings other weights than the client's record is refused before any of
    them is written: under distributed DP a rerun draws fresh noise, and a second noisy
    release of one clipped update in the store would be a release the accountant never
    counted. Its digests are computed in memory (soma.store.values.value_digest)."""
    earlier = _earlier_record(store, meeting, mine)
    if earlier is None:
        return
    from soma.store.values import value_digest

    brought = (
        value_digest(export),
        size,
        None if extra is None else value_digest(extra),
        None if own is None else value_digest(own),
    )
    _contradicts(meeting, mine, earlier, brought)


def _contradicts(
    meeting: Meeting,
    mine: int,
    earlier: records.ClientRecord,
    brought: tuple[str, float | None, str | None, str | None],
) -> None:
    """Contradicts unless `brought` (weights, size, extra, own state) is what the client's
    record `earlier` says it brought."""
    if (earlier.weights, earlier.size, earlier.extra, earlier.own) == brought:
        return
    raise Contradicts(
        f"client {mine} already contributed to {meeting.what} (record "
        f"{meeting.client(mine)!r}: weights {earlier.weights}, size {earlier.size!r}); a second "
        f"contribution with weights {brought[0]}, size {brought[1]!r} is refused and the first "
        "stands: a rerun of a client must bring the same weights (the same seed), or name "
        "another run"
    )


def _claim_record(store: Store, meeting: Meeting, record: records.ClientRecord) -> str:
    """Client records are claimed, not bound: a second contribution with other weights
    (size, extra, own state) is refused naming the client and round, the same ones again
    (a rerun) find the record there; a drop-out or a record that cannot be read is replaced
    (the client came back, or `soma verify` advised this rerun)."""
    name = meeting.client(record.client)
    digest = signatures.put(store, meeting.signing, record.value(), name=name, by=record.client)
    return _hold_record(store, meeting, record, digest)


def _hold_record(store: Store, meeting: Meeting, record: records.ClientRecord, digest: str) -> str:
    """The client's record name claimed with `digest` (the signed `record`), as `_claim_record`
    says; the digest that stands."""
    name = meeting.client(record.client)
    if store.claim(name, digest, at_commit=True):  # only this client claims its record
        return digest

    try:
        there = store.resolve(name)
        earlier = (
            None
            if there is None
            else records.read_client(store, there, client=record.client, name=name)
        )
    except (SomaError, OSError):
        earlier = None
    if not isinstance(earlier, records.ClientRecord):
        store.bind(name, digest)
        return digest
    _contradicts(
        meeting, record.client, earlier, (record.weights, record.size, record.extra, record.own)
    )
    assert there is not None
    return there


# --- a distributed-DP release: once per client and round ------------------------------------


def release_name(meeting: Meeting, k: int) -> str:
    """Where client k's distributed-DP release of the meeting is claimed (soma.round.layout)."""
    return layout.release(meeting.prefix, k, meeting.clients)


def released(store: Store, meeting: Meeting, mine: int) -> Contribution | None:
    """Client `mine`'s distributed-DP release of the round, when one is in the store: its
    contribution (its record held under the client's name, once its weights are there).
    A restarted client goes on from it instead of training again (soma.run.step), so fresh
    noise is never drawn for a round it already released. None when there is none, or when
    the one there never landed: its weights are not in the store and its writer is provably
    gone (killed between its claim and its weights), which is then forgotten (none of its
    noise reached the store) and the client releases afresh."""
    name = release_name(meeting, mine)
    there = store.resolve(name)
    if there is None:
        return None
    earlier = records.read_client(store, there, client=mine, name=meeting.client(mine))
    if not isinstance(earlier, records.ClientRecord):
        raise Contradicts(
            f"client {mine}'s release in {meeting.what} ({name!r}) is no client record: "
            "run `soma verify` on the store"
        )
    made = Contribution(there, earlier.weights, earlier.extra, earlier.own)
    if not all(store.has(d) for d in (earlier.weights, earlier.extra, earlier.own) if d):
        if holders.gone(earlier.by if isinstance(earlier.by, dict) else {}):
            LOG.warning(
                "client %d: its release in %s never landed (its writer is gone): released afresh",
                mine,
                meeting.what,
            )
            store.forget(name)
            return None
        return made  # its writer, a racing attempt, is putting its weights and its record
    announce(store, meeting, by=mine)
    kept = _hold_record(store, meeting, earlier, there)
    return Contribution(kept, earlier.weights, earlier.extra, earlier.own)


def _release(
    store: Store,
    meeting: Meeting,
    export: Export,
    *,
    mine: int,
    size: float | None,
    extra: Export | None,
    own: object,
    metrics: Mapping[str, Any] | None = None,
) -> Contribution:
    """Client `mine`'s distributed-DP release: its record (the digests of its weights,
    computed in memory) is claimed under `release_name` before any of them is written, and
    only the winner of that claim writes its weights and its record. An attempt that finds
    the release there, before its claim or by losing it, contributes that one: a second
    noisy release of one clipped update never reaches the store."""
    from soma.store.values import value_digest

    for _ in range(2):  # again once when the release there never landed (`released`)
        earlier = released(store, meeting, mine)
        if earlier is not None:
            return earlier
        record = records.ClientRecord(
            mine,
            value_digest(export),
            size,
            None if extra is None else value_digest(extra),
            None if own is None else value_digest(own),
            holders.me(),
            metrics,
        )
        value = record.value()
        digest = signatures.put(store, meeting.signing, value, name=meeting.client(mine), by=mine)
        if _claim_release(store, release_name(meeting, mine), digest):
            break
    else:
        raise Contradicts(f"client {mine}'s release in {meeting.what} could not be claimed")
    weights = store.put_value(export)
    extra_digest = None if extra is None else store.put_value(extra)
    own_digest = None if own is None else store.put_value(own)
    assert (weights, extra_digest, own_digest) == (record.weights, record.extra, record.own)
    announce(store, meeting, by=mine)
    return Contribution(
        _hold_record(store, meeting, record, digest), weights, extra_digest, own_digest
    )


def _claim_release(store: Store, name: str, digest: str) -> bool:
    """The release's claim: atomic in the store (create-if-absent), at once (not at the end
    of a group), so that of two attempts exactly one releases."""
    return store.claim(name, digest)


def drop(store: Store, meeting: Meeting, *, mine: int, why: str) -> str:
    """Say that client `mine` will not bring anything to the round, and why (failed, refused,
    its job died): the others need not wait for it, and the average's record names it."""
    meeting.check_client(mine)
    signatures.holds(meeting.signing, mine)
    announce(store, meeting, by=mine)
    record = records.DropRecord(mine, str(why), holders.me())
    return signatures.keep(
        store, meeting.signing, record.value(), name=meeting.client(mine), by=mine
    )


def dropout_reason(error: BaseException) -> str:
    """Why a client dropped out, in a word and the error: refused (its export would poison
    the average) or failed (its task raised)."""
    kind = "refused" if isinstance(error, Refused) else "failed"
    return f"{kind}: {type(error).__name__}: {error}"


class StoreFailedPeer(RoundError):
    """A peer's part in the round failed on the store's fault (its note says so): the round
    is not averaged around a broken store, so every waiting process stops, naming it."""


def note_fault(store: Store, meeting: Meeting, client: int, why: str) -> None:
    """Leave a note that the store failed client `client`'s part, if the store still takes
    one: its peers then stop (`Faults`, after its grace) instead of averaging without it at the
    deadline. Best effort: where the store takes nothing more, the peers wait for the client
    as for one that never came."""
    note = {"client": client, "fault": str(why), "by": holders.me()}
    name = layout.fault(meeting.prefix, client, meeting.clients)
    try:
        signatures.keep(store, meeting.signing, note, name=name, by=client)
    except Exception as error:  # the store is what failed: the note cannot be written
        LOG.warning("client %d: no fault note in %s either: %s", client, meeting.what, error)


def forget_fault(store: Store, meeting: Meeting, client: int) -> None:
    """Client `client` tries the round again (a rerun once the store works): its old fault
    note would stop its peers, so it goes first."""
    store.forget(layout.fault(meeting.prefix, client, meeting.clients))  # False: none there


class Faults:
    """The fault notes of a meeting's missing clients, as one waiting process sees them.

    A note written while this process waits is its client's current attempt: it stops the
    process at once. A note that was there at its first look may be an earlier attempt's,
    which a rerun of the client forgets as it starts: it stops the process once it has stood
    for `grace` seconds, and until then it stands, so that past the deadline the round waits
    (`check`'s answer) rather than being averaged around a client whose store failed. (A
    note refreshed while the client's store retries was the other way: it needs the failing
    store to take the note while it fails, and the store layer to know about rounds.)"""

    def __init__(self, store: Store, meeting: Meeting, grace: float | None = None) -> None:
        self.store, self.meeting = store, meeting
        self.grace = FAULT_GRACE if grace is None else grace
        self.seen: dict[tuple[int, str], float] = {}
        self.before: set[tuple[int, str]] | None = None  # the notes there at the first look
        self.vouched: dict[tuple[int, str], str | None] = {}  # what each one says, or None

    def check(self, missing: list[int]) -> list[int]:
        """StoreFailedPeer naming the first of the `missing` clients whose note, signed by
        that client where the run is signed, stops this process (see the class); else the
        clients whose notes stand without stopping it yet, which the round must wait for."""
        store, meeting = self.store, self.meeting
        noted = set(store.bound(layout.faults(meeting.prefix)))  # one listing a poll
        now, first = time.monotonic(), self.before is None
        before = self.before = set() if self.before is None else self.before
        standing = []
        for k in missing:
            name = layout.fault(meeting.prefix, k, meeting.clients)
            digest = store.resolve(name) if name in noted else None
            if digest is None:
                continue
            if first:
                before.add((k, digest))
            if (k, digest) not in self.vouched:
                self.vouched[k, digest] = _fault_of(store, meeting, k, name, digest)
            why = self.vouched[k, digest]
            if why is None:  # nobody's word: it stops nothing and holds nothing up
                continue
            since = self.seen.setdefault((k, digest), now)
            if (k, digest) in before and now - since < self.grace:
                standing.append(k)
                continue
            raise StoreFailedPeer(
                f"{meeting.what} stops: the store failed client {k}'s part ({why}); the "
                "round is not averaged around a broken store: once the store works, run "
                "again"
            )
        return standing


# How an average's `left_out` begins for a client it went on without whose fault note was
# there (soma.round.average): it came, and its store failed it; it never dropped out.
STORE_FAULT = "store fault: "


def noted_faults(store: Store, meeting: Meeting, clients: list[int]) -> dict[int, str]:
    """What the fault notes of `clients` say, for those with a note someone can vouch for:
    why an average that went on without them left them out (soma.round.average)."""
    noted = set(store.bound(layout.faults(meeting.prefix)))
    said = {}
    for k in clients:
        name = layout.fault(meeting.prefix, k, meeting.clients)
        digest = store.resolve(name) if name in noted else None
        why = None if digest is None else _fault_of(store, meeting, k, name, digest)
        if why is not None:
            said[k] = why
    return said


def _fault_of(store: Store, meeting: Meeting, k: int, name: str, digest: str) -> str | None:
    """What client k's fault note says, or None when nobody can vouch for it (forged,
    unreadable: nobody's word, so it stops nothing)."""
    from soma.round.signed import check_signed

    try:
        check_signed(store, meeting, digest, name=name, writer=k, what=f"{k}'s fault note")
        return str(store.recall_digest(digest)["fault"])
    except Exception as error:
        LOG.warning("%s: client %d's fault note is ignored: %s", meeting.what, k, error)
        return None
