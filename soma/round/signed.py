"""A meeting's records checked against its roster (soma.round.signing): who must have signed
a client's record or the average, and whose key signs the average this process writes.

Kept apart so that whoever reads a record (the quorum module, the averaging, secure aggregation)
checks its signature the one same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from soma.round import records
from soma.round import signing as signatures
from soma.round.meeting import Input, Meeting
from soma.store import Store


def check_signed(
    store: Store, meeting: Meeting, digest: str, *, name: str, writer: int | None, what: str
) -> None:
    """Refuse the record `digest` at `name` unless its `writer` (None: anyone on the roster)
    signed it, when the run has a roster (soma.round.signing)."""
    where = f"{meeting.what}: {what}"
    signatures.check(store, meeting.signing, digest, name=name, writer=writer, what=where)


def averager(meeting: Meeting) -> int | None:
    """Whose key signs the meeting's average (a roster member whose key this process holds;
    refused when none), or None when the run has no roster."""
    return None if meeting.signing is None else meeting.signing.any_member(meeting.members)


def check_signed_inputs(store: Store, meeting: Meeting, inputs: Sequence[Input]) -> None:
    """With a roster, each input is what its client's signed record says (the workflow's
    inputs come from its receipts, not from the store): refused by name otherwise."""
    if meeting.signing is None:
        return
    for i in inputs:
        name = meeting.client(i.client)
        digest = store.resolve(name)
        if digest is None:
            raise signatures.SigningError(
                f"{meeting.what}: client {i.client} has no signed record at {name!r} for the "
                f"weights {i.weights} it is said to have brought"
            )
        check_signed(store, meeting, digest, name=name, writer=i.client, what="its record")
        record = records.read_client(store, digest, client=i.client, name=name)
        said = getattr(record, "weights", None), getattr(record, "size", None)
        if said + (getattr(record, "extra", None),) != (i.weights, i.size, i.extra):
            raise signatures.SigningError(
                f"{meeting.what}: client {i.client}'s signed record {digest[:12]} is not the "
                f"input it is said to have brought (weights {i.weights[:12]})"
            )


def check_average(store: Store, meeting: Meeting, digest: str) -> int | None:
    """Who signed the meeting's average `digest` (a roster member allowed to average;
    refused otherwise), or None when the run has no roster."""
    what = f"{meeting.what}: the average record"
    return signatures.check_average(store, meeting.signing, digest, name=meeting.average, what=what)
