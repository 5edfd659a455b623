"""The roll of a meeting: who came (an export or a drop-out), what each brought, and whether
enough came for the round to be averaged (its quorum).

Kept apart so that the waiting, the checks before the claim and the average's record all
count the clients the one same way. `_complete` and `_enough` are looked up here at call
time (`roll._enough(...)`), so that one patch reaches every caller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from soma.round import layout, records
from soma.round.meeting import Input, Meeting
from soma.round.signed import check_signed
from soma.store import Store


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


def arrivals(store: Store, meeting: Meeting, here: list[int]) -> tuple[list[Input], dict[int, str]]:
    """What each present member brought: its part in the average, or why it dropped out."""
    inputs, dropped = [], {}
    for k in here:
        name = meeting.client(k)
        digest = store.resolve(name)
        check_signed(store, meeting, digest, name=name, writer=k, what=f"client {k}'s record")
        record = records.read_client(store, digest, client=k, name=name)
        if isinstance(record, records.DropRecord):
            dropped[k] = record.dropped
        elif isinstance(record, records.ClientRecord):
            inputs.append(Input(k, record.weights, record.size, record.extra, digest))
        else:
            raise records.RecordError(
                f"{meeting.what}: client {k}'s record {name!r} is a secure round's, in a round "
                "in the clear"
            )
    return inputs, dropped


def _complete(here: list[int], clients: int) -> bool:
    """Everyone is accounted for when every member has a record (an export or a drop-out)."""
    return len(here) == clients


def _enough(came: Sequence[Input], needed: int) -> bool:
    """A round is averaged only when at least the quorum came; nobody goes on below it."""
    return len(came) >= needed


def _left_out_text(left_out: Mapping[int, str]) -> str:
    return "; ".join(f"client {k} {why}" for k, why in sorted(left_out.items()))
