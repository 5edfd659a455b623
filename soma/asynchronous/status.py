"""An asynchronous run as `soma status` shows it: each version, the updates it consumed (whose,
from which version, their staleness and weight) and refused, who made it; then the updates
still pending and a claim not yet published. Read-only, and from the records alone: what each
version's record says, never its weights (no tensor is read, and no torch imported: tests/
cli/test_status_torch_free.py). With the run's roster (`--roster`) every signature is checked
too (soma.asynchronous.signed), and one that does not hold is said on its version's line.
Recomputing each version from its updates, bit for bit, is `soma audit`'s (its replay,
soma.asynchronous.replay, with torch)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from soma.asynchronous import signed
from soma.errors import SomaError
from soma.round import holders, layout, once
from soma.round.once import Place
from soma.round.signing import Signing
from soma.store import Store
from soma.store.errors import StoreError, StoreUnavailable


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
    `averagers` the run declared): the reader's own, its signatures checked against it. A
    version's `problems`: its record cannot be read, a version below it is missing, or
    (with a roster) a signature that does not hold; every other version is still shown."""
    signing = None if roster is None else signed.reader_signing(store, run, roster, averagers)[0]
    published = sorted(
        v
        for name in store.bound(layout.versions(run))
        if (v := layout.version_of(name, run)) is not None
    )
    rows: list[dict[str, Any]] = []
    taken: set[str] = set()
    for v in range(published[-1] + 1 if published else 0):
        row: dict[str, Any] = {"version": v, "record": "", "weights": None, "consumed": []}
        row.update(refused=[], made_by=None, problems=[])
        rows.append(row)
        digest = store.resolve(layout.published(layout.version(run, v)))
        if digest is None:
            row["problems"].append(f"version {v} is missing below the latest")
            continue
        try:
            value = once.read_record(store, digest)
        except StoreUnavailable:
            raise
        except (SomaError, StoreError, OSError) as error:
            row.update(
                record=digest, problems=[f"its record {digest[:12]} cannot be read: {error}"]
            )
            continue
        consumed, refused = _entries(value, "consumed"), _entries(value, "refused")
        taken.update(str(e.get("update")) for e in consumed + refused)
        row.update(record=digest, weights=value.get("weights"), made_by=value.get("averaged_by"))
        row["consumed"] = [
            {k: e.get(k) for k in ("client", "from", "staleness", "weight")} for e in consumed
        ]
        row["refused"] = [
            {k: e.get(k) for k in ("client", "from", "staleness", "why")} for e in refused
        ]
        row["problems"] = _signatures(store, signing, run, v, digest, value)
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


def _entries(record: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    """A version record's consumed or refused entries (maps only: the rest is no entry)."""
    found = record.get(key)
    return [e for e in found if isinstance(e, dict)] if isinstance(found, list) else []


def _signatures(
    store: Store, signing: Signing | None, run: str, v: int, digest: str, record: dict[str, Any]
) -> list[str]:
    """What does not hold of version v's signatures against the roster `signing` (none
    without one): its record signed by an averager (version 0's naming that roster), each
    update it consumed the record its client signed, each it refused as forged indeed not
    its client's (soma.asynchronous.signed, on JSON records: no tensor is read)."""
    if signing is None:
        return []
    said = []
    if v == 0 and record.get("roster") != signing.digest:
        said.append(
            f"version 0 says roster {str(record.get('roster'))[:12]}, and the roster checked "
            f"against is {signing.digest[:12]}"
        )
    checks = [lambda: signed.check_signer(store, signing, run, v, digest)]
    checks += [
        lambda entry=entry: signed.check_consumed(store, signing, run, v, entry)
        for entry in _entries(record, "consumed")
    ]
    for check in checks:
        try:
            check()
        except StoreUnavailable:  # the store's, not the record's: the command stops on it
            raise
        except SomaError as error:
            said.append(_one_line(error))
    for entry in _entries(record, "refused"):
        k, update, kept = entry.get("client"), str(entry.get("update")), entry.get("record")
        if not entry.get(signed.FORGED):
            continue
        if not isinstance(k, int) or not isinstance(kept, str):
            said.append(f"version {v} refused {update!r} as forged, naming no client or record")
        elif signed.forged(store, signing, kept, name=update, client=k) is None:
            said.append(
                f"version {v} refused client {k}'s update {update!r} as forged, and it is "
                f"signed by client {k}: the version left it out"
            )
    return said


def _one_line(error: BaseException) -> str:
    """An error's words on one line (a problem is said on its version's line)."""
    return "; ".join(line.strip() for line in str(error).splitlines() if line.strip())


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
        parts = []
        if row["weights"] is not None:  # its record was read
            parts.append(f"weights {str(row['weights'])[: 16 if wide else 12]}")
        if row["version"] > 0 and row["weights"] is not None:
            parts.append(f"consumed {_consumed(row['consumed'], wide)}")
        parts += [f"refused client {e['client']}: {e['why']}" for e in row["refused"]]
        parts += [f"DOES NOT HOLD: {p}" for p in row["problems"]]
        out.append(f"version {row['version']:>4}: " + "; ".join(parts))
    return out


def _consumed(consumed: list[dict[str, Any]], wide: bool) -> str:
    if wide:
        return ", ".join(
            f"client {e['client']} from {e['from']} (staleness {e['staleness']}, "
            f"weight {_g(e['weight'])})"
            for e in consumed
        )
    staleness = ", ".join(str(e["staleness"]) for e in consumed)
    if len(consumed) > 5:
        most = max(
            (e["staleness"] for e in consumed if isinstance(e["staleness"], int)), default="?"
        )
        return f"{len(consumed)} updates (staleness at most {most})"
    clients = ", ".join(str(e["client"]) for e in consumed)
    return f"clients {clients} (staleness {staleness})"


def _g(value: Any) -> str:
    """A number a record says, to 3 figures; anything else as it is (a record is not trusted)."""
    return f"{value:.3g}" if isinstance(value, (int, float)) else str(value)
