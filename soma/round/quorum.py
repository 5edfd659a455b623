"""Who came to a meeting (its roll call: an export or a drop-out), what each brought, and
whether enough came for the round to be averaged (its quorum).

Kept apart so that the waiting, the checks before the claim and the average's record all
count the clients the one same way. `_complete` and `_enough` are looked up here at call
time (`quorum._enough(...)`), so that one patch reaches every caller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from soma.errors import SomaError
from soma.round import layout, records
from soma.round.meeting import Input, Meeting
from soma.round.signed import check_signed
from soma.store import Store
from soma.store.errors import StoreUnavailable


def present(store: Store, meeting: Meeting) -> list[int]:
    """The members whose records (an export or a drop-out) are in the meeting, sorted."""
    prefix = layout.clients(meeting.prefix)
    members = set(meeting.members)
    found = []
    for name in store.bound(prefix):
        k = layout.client_of(name[len(meeting.prefix) + 1 :])
        if k is not None and k in members and name == meeting.client(k):
            found.append(k)
    return sorted(found)


def roll_call(
    store: Store, meeting: Meeting, here: list[int]
) -> tuple[list[Input], dict[int, str], dict[int, SomaError]]:
    """What each present member brought: its part in the average, or why it dropped out,
    or why its record cannot be taken (unreadable, malformed, not signed by it: a refusal
    of that client alone, which the caller may leave out under a quorum)."""
    inputs, dropped, unreadable = [], {}, {}
    names = [meeting.client(k) for k in here]
    try:
        digests = store.resolve_many(names)  # the round's folder opened once, not once a name
    except SomaError as error:
        if isinstance(error, StoreUnavailable):
            raise
        digests = [_UNREAD] * len(names)  # one is refused: each read alone, naming its client
    with store.reading():  # each record's fan-out folder opened once for all of them
        for k, digest in zip(here, digests, strict=True):
            try:
                found = _arrival(store, meeting, k, digest)
            except SomaError as error:
                if isinstance(error, StoreUnavailable):
                    raise  # the store did not answer: nothing said about the client
                unreadable[k] = error
                continue
            if isinstance(found, Input):
                inputs.append(found)
            elif found is not None:
                dropped[k] = found
    return inputs, dropped, unreadable


_UNREAD = ""  # a name not read yet (no digest is empty)


def _arrival(
    store: Store, meeting: Meeting, k: int, digest: str | None = _UNREAD
) -> Input | str | None:
    """Client k's part (an Input), its drop-out's reason, or None if its record is gone.
    `digest`: what its name was found bound to (None: nothing), if it was read already."""
    name = meeting.client(k)
    if digest == _UNREAD:
        digest = store.resolve(name)
    if digest is None:
        return None
    check_signed(store, meeting, digest, name=name, writer=k, what=f"client {k}'s record")
    record = records.read_client(store, digest, client=k, name=name)
    if isinstance(record, records.DropRecord):
        return record.dropped
    if isinstance(record, records.ClientRecord):
        return Input(k, record.weights, record.size, record.extra, digest)
    raise records.RecordError(
        f"{meeting.what}: client {k}'s record {name!r} is a secure round's, in a round in the clear"
    )


def arrivals(store: Store, meeting: Meeting, here: list[int]) -> tuple[list[Input], dict[int, str]]:
    """What each present member brought: its part in the average, or why it dropped out; a
    record that cannot be taken is refused (the lowest-numbered client's)."""
    inputs, dropped, unreadable = roll_call(store, meeting, here)
    if unreadable:
        raise unreadable[min(unreadable)]
    return inputs, dropped


def _complete(here: list[int], clients: int) -> bool:
    """Everyone is accounted for when every member has a record (an export or a drop-out)."""
    return len(here) == clients


def _enough(came: Sequence[Input], needed: int) -> bool:
    """A round is averaged only when at least the quorum came; nobody goes on below it."""
    return len(came) >= needed


def _left_out_text(left_out: Mapping[int, str]) -> str:
    return "; ".join(f"client {k} {why}" for k, why in sorted(left_out.items()))
