"""An asynchronous run as `soma status` shows it: each version, the updates it consumed (whose,
from which version, their staleness and weight) and refused, who made it; then the updates
still pending and a claim not yet published. Read-only. With the run's roster (`--roster`)
every signature is checked too (soma.asynchronous.signed), and one that does not hold is
said on its version's line.

Whether a run is asynchronous is read here without torch (`soma status` of a run of rounds
imports none, tests/cli/test_torch_free.py); showing its versions replays them, with torch."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from soma.asynchronous.signed import reader_signing
from soma.errors import SomaError
from soma.round import holders, layout, once
from soma.round.once import Place
from soma.store import Store
from soma.store.errors import StoreError


def is_asynchronous(store: Store, run: str) -> bool:
    """Whether `run` is an asynchronous run in `store` (it has a version)."""
    return bool(store.bound(layout.versions(run)))


def runs(store: Store) -> list[str]:
    """The asynchronous runs in the store: those with a published version."""
    found = set()
    for name in store.bound():
        head, mark, rest = name.partition("/async/version/")
        if mark and rest.endswith("/published") and layout.version_of(name, head) is not None:
            found.add(head)
    return sorted(found)


def summary(store: Store, run: str) -> dict[str, Any]:
    """An asynchronous run in one row, for `soma status` without --run: how many versions are
    published, the latest one's weights digest and when it was made (`when`, UTC), as the
    store says (not replayed: that is `--run R`'s); a record that cannot be read is the row's
    `problem`."""
    published = sorted(
        v
        for name in store.bound(layout.versions(run))
        if (v := layout.version_of(name, run)) is not None
    )
    row: dict[str, Any] = {"run": run, "kind": "versions", "versions": len(published)}
    row.update(last=published[-1] if published else None, weights=None, when=None, problem=None)
    if published:
        try:
            digest = store.resolve(layout.published(layout.version(run, published[-1])))
            record = once.read_record(store, digest)
            by = record.get("averaged_by")
            row["weights"] = record.get("weights")
            row["when"] = by.get("when") if isinstance(by, dict) else None
        except (SomaError, StoreError, OSError) as error:
            row["problem"] = f"cannot read version {published[-1]}'s record: {error}"
    return row


def table(
    store: Store,
    run: str,
    roster: str | os.PathLike[str] | None = None,
    averagers: Iterable[int] | None = None,
) -> list[dict[str, Any]]:
    """One row a version, then one for what is pending (`version` None); `roster` (with the
    `averagers` the run declared): the reader's own, its signatures checked against it."""
    from soma.asynchronous.replay import replay  # noqa: PLC0415 (recomputes: torch)

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


def lines(rows: list[dict[str, Any]], *, wide: bool = False) -> list[str]:
    """The rows as lines a person reads: short ones (the updates a version consumed named with
    their staleness, up to five), or with `wide` each update's version and weight too."""
    out = []
    for row in rows:
        if row["version"] is None:
            pending = ", ".join(f"client {p['client']} from {p['from']}" for p in row["pending"])
            out.append(f"pending: {pending or 'none'}")
            if row["claimed"]:
                out.append(f"next version claimed by {row['claimed']}")
            continue
        said = f"version {row['version']:>4}: weights {str(row['weights'])[: 16 if wide else 12]}"
        if row["version"] > 0:
            said += f"; consumed {_consumed(row['consumed'], wide)}"
        said += "".join(f"; refused client {e['client']}: {e['why']}" for e in row["refused"])
        said += "".join(f"; REPLAY FAILS: {p}" for p in row["problems"])
        out.append(said)
    return out


def _consumed(consumed: list[dict[str, Any]], wide: bool) -> str:
    if wide:
        return ", ".join(
            f"client {e['client']} from {e['from']} (staleness {e['staleness']}, "
            f"weight {e['weight']:.3g})"
            for e in consumed
        )
    staleness = ", ".join(str(e["staleness"]) for e in consumed)
    if len(consumed) > 5:
        most = max(e["staleness"] for e in consumed)
        return f"{len(consumed)} updates (staleness at most {most})"
    clients = ", ".join(str(e["client"]) for e in consumed)
    return f"clients {clients} (staleness {staleness})"
