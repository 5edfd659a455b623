"""A client's side of a round: the meeting announced, what the client brought written as its
record (claimed, so that a second contribution with other weights is refused), or why it
drops out.

Kept apart from the roll (who came), which only reads what these write.
"""

from __future__ import annotations

from dataclasses import dataclass

from soma.nodes import Export
from soma.round import holders, records
from soma.round import signing as signatures
from soma.round.checks import Refused, _check_finite, _check_size
from soma.round.meeting import Meeting
from soma.round.once import RoundError
from soma.store import Store


def announce(store: Store, meeting: Meeting) -> None:
    """The meeting's identity, written once, so that `status` can say what it is, and gc
    that the round is open (a process announces it as the round begins: soma.run.drive)."""
    if store.resolve(meeting.about) is None:
        about = {"run": meeting.run, "round": meeting.round, **meeting.identity()}
        store.claim(meeting.about, store.put_value(about))


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
) -> Contribution:
    """Write what client `mine` learnt, its size, and what its strategy sends beside, to the round.

    `own` is the client's own strategy state (SCAFFOLD's c_i): kept under this client and
    round, and named by its record, for the next round this client trains.
    """
    meeting.check_client(mine)
    signatures.holds(meeting.signing, mine)
    _check_size(size, mine)
    _check_finite(export, mine)
    if extra is not None:
        _check_finite(extra, mine)
    weights = store.put_value(export)
    extra_digest = None if extra is None else store.put_value(extra)
    own_digest = None if own is None else store.put_value(own)
    announce(store, meeting)
    record = records.ClientRecord(mine, weights, size, extra_digest, own_digest, holders.me())
    kept = _claim_record(store, meeting, record)
    return Contribution(kept, weights, extra_digest, own_digest)


class Contradicts(RoundError):
    """A client contributes to a round it already brought other weights to: the first stands."""


def _claim_record(store: Store, meeting: Meeting, record: records.ClientRecord) -> str:
    """Client records are claimed, not bound: a second contribution with other weights
    (size, extra, own state) is refused naming the client and round, the same ones again
    (a rerun) find the record there; a drop-out or a record that cannot be read is replaced
    (the client came back, or `soma verify` advised this rerun)."""
    name = meeting.client(record.client)
    digest = signatures.put(store, meeting.signing, record.value(), name=name, by=record.client)
    if store.claim(name, digest, at_commit=True):  # only this client claims its record
        return digest
    from soma.errors import SomaError

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
    mine = (record.weights, record.size, record.extra, record.own)
    if (earlier.weights, earlier.size, earlier.extra, earlier.own) != mine:
        raise Contradicts(
            f"client {record.client} already contributed to {meeting.what} (record {name!r}: "
            f"weights {earlier.weights}, size {earlier.size!r}); a second contribution with "
            f"weights {record.weights}, size {record.size!r} is refused and the first stands: "
            "a rerun of a client must bring the same weights (the same seed), or name another run"
        )
    assert there is not None
    return there


def drop(store: Store, meeting: Meeting, *, mine: int, why: str) -> str:
    """Say that client `mine` will not bring anything to the round, and why (failed, refused,
    its job died): the others need not wait for it, and the average's record names it."""
    meeting.check_client(mine)
    signatures.holds(meeting.signing, mine)
    announce(store, meeting)
    record = records.DropRecord(mine, str(why), holders.me())
    return signatures.keep(
        store, meeting.signing, record.value(), name=meeting.client(mine), by=mine
    )


def dropout_reason(error: BaseException) -> str:
    """Why a client dropped out, in a word and the error: refused (its export would poison
    the average) or failed (its task raised)."""
    kind = "refused" if isinstance(error, Refused) else "failed"
    return f"{kind}: {type(error).__name__}: {error}"
