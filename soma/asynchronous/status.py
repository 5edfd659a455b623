"""An asynchronous run as `soma status` shows it: each version, the updates it consumed (whose,
from which version, their staleness and weight) and refused, who made it; then the updates
still pending and a claim not yet published. Read-only. With the run's roster (`--roster`)
every signature is checked too (soma.asynchronous.signed), and one that does not hold is
said on its version's line."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from soma.asynchronous.replay import replay
from soma.asynchronous.signed import reader_signing
from soma.round import holders, layout, once
from soma.round.once import Place
from soma.store import Store


def table(
    store: Store,
    run: str,
    roster: str | os.PathLike[str] | None = None,
    averagers: Iterable[int] | None = None,
) -> list[dict[str, Any]]:
    """One row a version, then one for what is pending (`version` None); `roster` (with the
    `averagers` the run declared): the reader's own, its signatures checked against it."""
    rows = []
    taken: set[str] = set()
    signing = None if roster is None else reader_signing(store, run, roster, averagers)[0]
    for r in replay(store, run, signing):
        value = r.value
        for e in value.get("consumed", []) + value.get("refused", []):
            taken.add(e["update"])
        rows.append(
            {
                "version": r.version,
                "record": r.record,
                "weights": value.get("weights"),
                "consumed": [
                    {k: e.get(k) for k in ("client", "from", "staleness", "weight")}
                    for e in value.get("consumed", [])
                ],
                "refused": [
                    {k: e.get(k) for k in ("client", "from", "staleness", "why")}
                    for e in value.get("refused", [])
                ],
                "made_by": value.get("averaged_by"),
                "problems": r.problems,
            }
        )
    pending = [
        {"client": parsed[1], "from": parsed[0]}
        for name in store.bound(layout.updates(run))
        if name not in taken and (parsed := layout.update_of(name, run)) is not None
    ]
    claim = once.current_holder(store, Place(layout.version(run, len(rows))))
    rows.append(
        {
            "version": None,
            "pending": sorted(pending, key=lambda p: (p["from"], p["client"])),
            "claimed": None if claim is None else holders.describe(claim[1]),
        }
    )
    return rows


def lines(rows: list[dict[str, Any]]) -> list[str]:
    """The rows as lines a person reads."""
    out = []
    for row in rows:
        if row["version"] is None:
            pending = ", ".join(f"client {p['client']} from {p['from']}" for p in row["pending"])
            out.append(f"pending: {pending or 'none'}")
            if row["claimed"]:
                out.append(f"next version claimed by {row['claimed']}")
            continue
        consumed = ", ".join(
            f"client {e['client']} from {e['from']} (staleness {e['staleness']}, "
            f"weight {e['weight']:.3g})"
            for e in row["consumed"]
        )
        said = f"version {row['version']:>4}: weights {str(row['weights'])[:16]}"
        if row["version"] > 0:
            said += f"; consumed {consumed}"
        said += "".join(f"; refused client {e['client']}: {e['why']}" for e in row["refused"])
        said += "".join(f"; REPLAY FAILS: {p}" for p in row["problems"])
        out.append(said)
    return out
