"""Who took part in each round, read from the rounds' average records (or the workflow's
average receipts, which carry the same `inputs` and `left_out`), the same in every mode.

`took_part(record)` is a round's count of clients that trained, of those that dropped out,
and why, by kind (`failed`, `refused`, `died`, `never came`, ...: a drop-out's reason up
to its first colon). `never_trained(records)` names each client that was sampled and left
out of every round it was sampled for, with its last reason: a run that goes on without a
client that cannot train at all (a quorum below the sample) ends with a warning naming it,
not in silence (the workflow's summary job, `soma client`, `soma simulate`). Pure Python.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Attendance:
    """One round: how many clients trained, how many dropped out, and why (kind: count)."""

    trained: int
    dropped: int
    why: dict[str, int]

    def reasons(self) -> str:
        """`failed 2, never came 1`: the drop-outs by kind, for a table cell ("" for none)."""
        return ", ".join(f"{kind} {count}" for kind, count in sorted(self.why.items()))


def kind_of(why: str) -> str:
    """What kind of drop-out a reason is: its text up to the first colon."""
    return str(why).split(":", 1)[0].strip() or "unknown"


def took_part(record: Mapping[str, Any]) -> Attendance:
    """Who took part in the round `record` averaged."""
    left = list(record.get("left_out") or [])
    why: dict[str, int] = {}
    for entry in left:
        kind = kind_of(entry.get("why", ""))
        why[kind] = why.get(kind, 0) + 1
    return Attendance(len(record.get("inputs") or []), len(left), why)


def never_trained(
    records: Iterable[Mapping[str, Any]], among: Iterable[int] | None = None
) -> dict[int, str]:
    """Each client (of `among`, None: all) left out of every round it was sampled for, with
    the reason it was last left out."""
    trained: set[int] = set()
    last: dict[int, str] = {}
    for record in records:
        trained.update(int(i["client"]) for i in record.get("inputs") or [])
        for entry in record.get("left_out") or []:
            last[int(entry["client"])] = str(entry.get("why", ""))
    wanted = None if among is None else set(among)
    return {
        k: why
        for k, why in sorted(last.items())
        if k not in trained and (wanted is None or k in wanted)
    }


def warning(client: int, why: str) -> str:
    """The line a run ends with for a client that never trained."""
    return (
        f"client {client} took part in none of the rounds it was sampled for; "
        f"last: {why} (its traceback is in its log)"
    )
