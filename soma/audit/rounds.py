"""One meeting of one round, checked from the store alone: its identity, its sample, its
average's signature and recomputation, every contribution it names (bound, signed by its
client, every blob hashed), every client it left out (a drop-out signed by that client; one
it says never came against the record of it the round holds) and its quorum (no averaging
goes on with fewer inputs).

Kept apart from what spans rounds (soma.audit.across: the chain, the privacy ledger) and from
the output: each check adds findings to the meeting's RoundAudit and never raises for what it
finds, so one broken record never hides the rest of the round. Only a store that stops
answering (StoreUnavailable) stops the audit: that says nothing about the run.
"""

from __future__ import annotations

import datetime
from typing import Any

from soma.arithmetic import recomputed_under
from soma.audit.blobs import value_blobs
from soma.audit.findings import RoundAudit
from soma.config.participation import sampled
from soma.errors import SomaError
from soma.round import records
from soma.round import signing as signatures
from soma.round.client import STORE_FAULT
from soma.round.meeting import Meeting
from soma.round.verify import (
    RECOMPUTE,
    AverageRefused,
    NotRecomputable,
    meeting_from_about,
    verify_average,
)
from soma.store import Store
from soma.store.errors import StoreUnavailable

# Left-out reasons that are not a drop-out: nothing of the client's need be in the store.
_NOT_DROPPED = ("never came", "came after the round was averaged")

# How much earlier than an input the average took a left-out client's record must say it was
# written for the two to be ordered: a record's time is read off its writer's clock before
# the record is written (a put and a claim, each retried up to the store's patience, 120 s),
# and two hosts' clocks differ a little. Within it, nothing orders the two.
ORDER_MARGIN = datetime.timedelta(minutes=5)


def _said(error: BaseException) -> str:
    """An error's words on one line (a finding is one line of the report)."""
    if isinstance(error, StoreUnavailable):
        raise error  # the store did not answer: nothing is said about the run
    return "; ".join(line.strip() for line in str(error).splitlines() if line.strip())


def audit_meeting(
    store: Store, run: str, round: int, key: str, signing: signatures.Signing | None
) -> tuple[RoundAudit, Meeting | None]:
    """Every check of one meeting (see the module); the meeting rebuilt from its `about`,
    or None when it cannot be (then nothing else of it is checked)."""
    audited = RoundAudit(round, key)
    try:
        meeting = meeting_from_about(store, run, round, key, signing)
    except SomaError as error:
        audited.add("meeting", False, f"meeting {key[:12]}: {_said(error)}")
        return audited, None
    audited.start, audited.state_before, audited.strategy = (
        meeting.start,
        meeting.state,
        meeting.strategy,
    )
    _participation(meeting, audited)
    digest = store.resolve(meeting.average)
    if digest is None:
        audited.add("average", None, f"meeting {key[:12]} has no average (not averaged)")
        return audited, meeting
    audited.average = digest
    record = _average_record(store, meeting, digest, audited)
    if record is None:
        return audited, meeting
    audited.weights, audited.state = record.weights, record.state
    _contributions(store, meeting, record, audited)
    _left_out(store, meeting, record, audited)
    _recomputed(store, meeting, digest, audited)
    return audited, meeting


def _signed_by(
    store: Store, meeting: Meeting, digest: str, *, name: str, writer: int | None, what: str
) -> int | None:
    """Who signed the record `digest` at `name`: refused (SigningError) unless `writer` did
    (None: a roster member); None when the run has no roster (nothing to check)."""
    if meeting.signing is None:
        return None
    return signatures.check(store, meeting.signing, digest, name=name, writer=writer, what=what)


def _participation(meeting: Meeting, audited: RoundAudit) -> None:
    """Who was expected, drawn again from the run's public seed and the round: the
    meeting's `expected` must be that draw (a count of the clients, whatever fraction made
    it), so no writer of the store chose who was sampled."""
    if meeting.expected is None:
        audited.add("participation", True, f"every client of {meeting.clients} was expected")
        return
    seed = meeting.config.get("seed")
    if seed is None:
        audited.add("participation", None, "the meeting records no seed to draw its sample from")
        return
    expected = list(meeting.expected)
    drawn = sampled(seed, meeting.round, meeting.clients, len(expected))
    if drawn == expected:
        audited.add("participation", True, f"clients {expected} drawn from seed {seed}")
    else:
        audited.add(
            "participation",
            False,
            f"the meeting expected clients {expected}, and seed {seed} draws {drawn}",
        )


def _average_record(
    store: Store, meeting: Meeting, digest: str, audited: RoundAudit
) -> records.AverageRecord | None:
    """The meeting's average record, once signed by a roster member who may average and
    read; None (said why) otherwise."""
    what = "the average record"
    if meeting.signing is None:
        audited.add("signature", None, "the run has no roster: its average is unsigned")
    else:
        try:
            owner = signatures.check_average(
                store, meeting.signing, digest, name=meeting.average, what=what
            )
        except SomaError as error:
            audited.add("signature", False, _said(error))
            return None
        audited.signer = owner
        audited.add("signature", True, f"{what} is signed by client {owner}")
    try:
        record = records.read_average(store, digest)
    except SomaError as error:
        audited.add("average", False, f"{what} {digest[:12]}: {_said(error)}")
        return None
    said = (record.run, record.round, record.meeting, record.start, record.state_before)
    meant = (meeting.run, meeting.round, meeting.key, meeting.start, meeting.state)
    if said != meant:
        audited.add(
            "average",
            False,
            f"{what} {digest[:12]} is not this meeting's (it says run {record.run!r}, round "
            f"{record.round}, meeting {str(record.meeting)[:12]}, start {str(record.start)[:12]})",
        )
        return None
    return record


def _contributions(
    store: Store, meeting: Meeting, record: records.AverageRecord, audited: RoundAudit
) -> None:
    """Each input the average names: its client's record still bound where it was, signed by
    that client, saying the weights the average took, and every blob of them sound."""
    for entry in record.inputs:
        k = entry.get("client") if isinstance(entry, dict) else None
        if not isinstance(k, int):
            audited.add("blobs", False, f"the average names an input {entry!r} of no client")
            continue
        audited.took_part.append(k)
        audited.inputs.append(
            {"client": k, "record": entry.get("record"), "weights": entry.get("weights")}
        )
        try:
            _contribution(store, meeting, entry, k, audited)
        except SomaError as error:
            audited.add("blobs", False, f"client {k}'s contribution: {_said(error)}", k)


def _contribution(
    store: Store, meeting: Meeting, entry: dict[str, Any], k: int, audited: RoundAudit
) -> None:
    name = meeting.client(k)
    bound, named = store.resolve(name), entry.get("record")
    if bound is None:
        audited.add(
            "blobs",
            False,
            f"client {k}'s record {name!r} is gone (its name is unbound), and the average "
            f"took its input {str(named)[:12]}",
            k,
        )
        return
    if named is not None and bound != named:
        audited.add(
            "blobs",
            False,
            f"client {k}'s record {name!r} is {bound[:12]}, not the {named[:12]} the average took",
            k,
        )
        return
    _signed_by(store, meeting, bound, name=name, writer=k, what="its record")
    found = records.read_client(store, bound, client=k, name=name)
    if isinstance(found, records.SecureRecord):
        audited.add("blobs", None, f"client {k} took part in a secure sum: no weights of its", k)
        return
    if not isinstance(found, records.ClientRecord):
        audited.add("blobs", False, f"client {k}'s record {name!r} is a drop-out, not its input", k)
        return
    took = (entry.get("weights"), entry.get("size"), entry.get("extra"))
    if (found.weights, found.size, found.extra) != took:
        audited.add(
            "blobs",
            False,
            f"client {k}'s record {bound[:12]} says weights {found.weights[:12]}, and the "
            f"average took {str(took[0])[:12]}",
            k,
        )
        return
    hashed = value_blobs(store, found.weights)
    if found.extra is not None:
        hashed += value_blobs(store, found.extra)
    signed = "signed by it, " if meeting.signing is not None else ""
    audited.add("blobs", True, f"client {k}'s record {signed}{len(hashed)} blobs hashed", k)


def _left_out(
    store: Store, meeting: Meeting, record: records.AverageRecord, audited: RoundAudit
) -> None:
    """Who the average went on without, and why: every member is either an input or left
    out, and a drop-out's reason is its own record's, signed by that client (anyone who can
    write the store could otherwise drop a client out)."""
    left: dict[int, str] = {}
    for entry in record.left_out:
        if isinstance(entry, dict) and isinstance(entry.get("client"), int):
            left[entry["client"]] = str(entry.get("why"))
            audited.left_out.append({"client": entry["client"], "why": str(entry.get("why"))})
    members, came = set(meeting.members), set(audited.took_part)
    if came & set(left) or came | set(left) != members or len(came) != len(audited.took_part):
        audited.add(
            "left-out",
            False,
            f"the average took clients {sorted(came)} and left out {sorted(left)}, and the "
            f"round's members are {sorted(members)}",
        )
    for k, why in sorted(left.items()):
        if records.is_refused(why):
            audited.add("left-out", None, f"client {k}'s input was refused ({why})", k)
        elif why in _NOT_DROPPED or why.startswith(STORE_FAULT) or records.is_not_started(why):
            # (a fault: it came, its store failed it; a Slurm job not started: said by the
            # averager alone, so held to the client's record as `never came` is)
            try:
                _absent(store, meeting, k, why, audited)
            except SomaError as error:
                audited.add("left-out", False, f"client {k}'s record: {_said(error)}", k)
        else:
            try:
                _dropped(store, meeting, k, why, audited)
            except SomaError as error:
                audited.add("left-out", False, f"client {k}'s drop-out: {_said(error)}", k)
    _quorum(meeting, audited)


def _quorum(meeting: Meeting, audited: RoundAudit) -> None:
    """No averaging goes on with fewer inputs than the round's quorum (every member where
    the run set none: soma.round.quorum), so an average of fewer was made by leaving clients
    out. A secure sum goes on down to its threshold instead (soma.secagg), checked there."""
    came = sorted(set(audited.took_part))
    if meeting.secure is not None or len(came) >= meeting.needed:
        return
    needs = (
        f"all its {meeting.needed} members (the run set no quorum)"
        if meeting.quorum is None
        else f"a quorum of {meeting.needed}"
    )
    audited.add(
        "left-out",
        False,
        f"the average took {len(came)} input{'' if len(came) == 1 else 's'} (clients {came}), "
        f"and the round needs {needs}: no averaging goes on below it",
    )


def _absent(store: Store, meeting: Meeting, k: int, why: str, audited: RoundAudit) -> None:
    """A member the average says never came (or came after it was averaged), against the
    record of it the round holds. None, or a drop-out: nothing contradicts it. An input's
    record, signed by it: it came, after the average (a late client under a quorum: its
    record is bound after the average, and the average honestly says it never came) or
    before (the averager left it out). Broken where the round needed every member, or where
    its record says it was written well before an input the average took (`_came_before`);
    otherwise said, unchecked: the store keeps no trustworthy order of the two."""
    name = meeting.client(k)
    bound = store.resolve(name)
    found = None
    if bound is not None:
        _signed_by(store, meeting, bound, name=name, writer=k, what="its record")
        found = records.read_client(store, bound, client=k, name=name)
    if bound is None or not isinstance(found, records.ClientRecord):
        audited.add("left-out", True, f"client {k} {why}", k)
        return
    signed = "signed " if meeting.signing is not None else ""
    said = f"the average says client {k} {why}, but client {k}'s {signed}record {bound[:12]} is"
    if meeting.secure is None and not meeting.may_go_on_without_some:
        audited.add(
            "left-out",
            False,
            f"{said} bound in the round, and the round needed all its {meeting.needed} members "
            f"(no quorum): it was never averaged without client {k}",
            k,
        )
        return
    before = _came_before(store, meeting, found, audited)
    if before is not None:
        audited.add("left-out", False, f"{said} {before}: it was there before the average", k)
        return
    at = _written_at(found.by)
    written = "" if at is None else f" (written at {at.isoformat()})"
    audited.add(
        "left-out",
        None,
        f"{said} bound in the round{written}: it came after the average, or the averager left "
        "it out; the store keeps no trustworthy order of the two (a record's time is its "
        "writer's clock), so this could not be checked",
        k,
    )


def _came_before(
    store: Store, meeting: Meeting, found: records.ClientRecord, audited: RoundAudit
) -> str | None:
    """How client `found.client`'s record says it was written more than ORDER_MARGIN before
    an input the average took (each time signed by its own client where the run is signed,
    so an averager chooses neither): the record was there before the average read its
    inputs. None: not so, or a time is missing."""
    at = _written_at(found.by)
    if at is None:
        return None
    latest: tuple[datetime.datetime, int] | None = None
    for entry in audited.inputs:
        j, digest = entry.get("client"), entry.get("record")
        if not isinstance(j, int) or not isinstance(digest, str):
            continue
        try:
            taken = records.read_client(store, digest, client=j, name=meeting.client(j))
        except SomaError:
            continue  # said by the contribution's own check
        when = _written_at(taken.by)
        if when is not None and (latest is None or when > latest[0]):
            latest = (when, j)
    if latest is None or latest[0] - at <= ORDER_MARGIN:
        return None
    minutes = (latest[0] - at).total_seconds() / 60
    return (
        f"bound in the round, written at {at.isoformat()}, {minutes:.0f} minutes before client "
        f"{latest[1]}'s input the average took ({latest[0].isoformat()}; each by its client's "
        f"clock{', signed' if meeting.signing is not None else ''})"
    )


def _written_at(by: object) -> datetime.datetime | None:
    """When a record says it was written (its `by`, soma.round.holders.me()), in UTC; None
    where it says no time."""
    when = by.get("when") if isinstance(by, dict) else None
    if not isinstance(when, str):
        return None
    try:
        at = datetime.datetime.fromisoformat(when)
    except ValueError:
        return None
    return at.replace(tzinfo=datetime.timezone.utc) if at.tzinfo is None else at


def _dropped(store: Store, meeting: Meeting, k: int, why: str, audited: RoundAudit) -> None:
    name = meeting.client(k)
    bound = store.resolve(name)
    if bound is None:
        audited.add(
            "left-out",
            False,
            f"client {k} was left out as dropped out ({why}), and no record of it is at {name!r}",
            k,
        )
        return
    _signed_by(store, meeting, bound, name=name, writer=k, what="its record")
    found = records.read_client(store, bound, client=k, name=name)
    if not isinstance(found, records.DropRecord) or found.dropped != why:
        audited.add(
            "left-out",
            False,
            f"client {k} was left out as dropped out ({why}), and its record {bound[:12]} "
            "says otherwise",
            k,
        )
        return
    signed = ", signed by it" if meeting.signing is not None else ""
    audited.add("left-out", True, f"client {k} dropped out{signed}: {why}", k)


def _recomputed(store: Store, meeting: Meeting, digest: str, audited: RoundAudit) -> None:
    """The average computed again from the inputs it names: the same weights and state."""
    try:
        why = verify_average(store, meeting, digest, mode=RECOMPUTE)
    except AverageRefused as error:
        audited.add("average", False, _said(error))
    except NotRecomputable as error:
        audited.add("average", None, f"not recomputed: {_said(error)}")
    except SomaError as error:
        audited.add("average", False, f"its average cannot be recomputed: {_said(error)}")
    else:
        if why is not None:
            audited.add(
                "average", None, f"its record and signed inputs checked, not recomputed: {why}"
            )
        else:
            audited.add(
                "average",
                True,
                "recomputed from its inputs: the same weights and state"
                + _computed_under(store, digest),
            )


def _computed_under(store: Store, digest: str) -> str:
    """Where the average was computed and where it was recomputed (torch version and CPU
    capability: the same bits under any, soma.arithmetic), as its averager's record says."""
    try:
        by = records.read_average(store, digest).averaged_by
    except SomaError:
        return ""
    made = by if isinstance(by, dict) and by.get("cpu") else None
    there = "" if made is None else f"computed under torch {made.get('torch')}, {made['cpu']}; "
    return f" ({there}{recomputed_under()})"
