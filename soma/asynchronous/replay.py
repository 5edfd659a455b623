"""An asynchronous run replayed from its records alone, bit for bit, whatever order its
updates arrived in: every version's weights recomputed from the weights it stepped from and
the updates its record names (the one step, soma.asynchronous.versions.step_of), and every
promise its record makes checked: it follows the version before, consumes exactly `buffer`
updates no earlier version consumed, each the update its name holds, trained from the
version its record says (that version's record, as the client read it), with the staleness
and weight the settings give. Read-only: `soma audit` runs it (soma.audit.asynchronous).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from soma.arithmetic import recomputed_under
from soma.asynchronous import arithmetic
from soma.asynchronous.versions import Versions, step_of
from soma.config.asynchronous import AsynchronousRefused, buffered
from soma.round import layout
from soma.round.once import read_record
from soma.store import Store
from soma.store.values import value_digest


@dataclass
class Replayed:
    """One version replayed: its record, and what did not hold (empty: it holds, bit for bit)."""

    version: int
    record: str
    value: dict[str, Any]
    problems: list[str] = field(default_factory=list)


def is_asynchronous(store: Store, run: str) -> bool:
    """Whether `run` is an asynchronous run in `store` (it has a version)."""
    return bool(store.bound(layout.versions(run)))


def replay(store: Store, run: str) -> list[Replayed]:
    """Every published version of `run`, checked and recomputed (see the module)."""
    first = store.resolve(layout.published(layout.version(run, 0)))
    if first is None:
        return []
    start = read_record(store, first)
    try:
        settings = buffered(start.get("settings"), "version 0's settings")
    except AsynchronousRefused as error:
        return [Replayed(0, first, start, [str(error)])]
    versions = Versions(store, run, settings)
    out = [Replayed(0, first, start)]
    seen: dict[str, int] = {}
    for v in range(1, versions.latest() + 1):
        found = versions.record(v)
        if found is None:
            out.append(Replayed(v, "", {}, [f"version {v} is missing below the latest"]))
            break
        done = Replayed(v, *found)
        done.problems = _problems(versions, v, found[1], out[-1].record, seen)
        out.append(done)
    return out


def _problems(
    versions: Versions, v: int, record: dict[str, Any], before: str, seen: dict[str, int]
) -> list[str]:
    settings, store = versions.settings, versions.store
    problems = []
    if record.get("from") != before:
        problems.append(f"it says it follows record {record.get('from')}, not version {v - 1}'s")
    if record.get("settings") != settings.value():
        problems.append(f"its settings {record.get('settings')} are not the run's")
    consumed, refused = record.get("consumed") or [], record.get("refused") or []
    if len(consumed) != settings.buffer:
        problems.append(f"it consumes {len(consumed)} updates, not the buffer's {settings.buffer}")
    for entry in consumed + refused:
        name = entry.get("update")
        if name in seen:
            problems.append(f"update {name!r} was already consumed by version {seen[name]}")
        seen[name] = v
        problems += _entry_problems(versions, v, entry, refused=entry in refused)
    if problems:
        return problems
    recomputed = step_of(
        versions.weights(v - 1),
        consumed,
        v - 1,
        store.recall_digest,
        versions.weights,
        settings.server_lr,
    )
    digest = value_digest(recomputed)
    if digest != record.get("weights"):
        problems.append(
            f"its weights {record.get('weights')} recompute to {digest} ({recomputed_under()})"
        )
    return problems


def _entry_problems(
    versions: Versions, v: int, entry: dict[str, Any], *, refused: bool
) -> list[str]:
    settings, store, name = versions.settings, versions.store, entry.get("update")
    parsed = layout.update_of(str(name), versions.run)
    if parsed is None:
        return [f"{name!r} is not an update of run {versions.run!r}"]
    if store.resolve(name) != entry.get("record"):
        return [
            f"update {name!r} holds {store.resolve(name)}, not the record {entry.get('record')}"
        ]
    update = read_record(store, entry["record"])
    start, client = parsed
    staleness = v - 1 - start
    problems = []
    base = versions.record(start)
    if base is None or update.get("base") != base[0]:
        problems.append(
            f"update {name!r} was trained from record {update.get('base')}, not version "
            f"{start}'s as published ({None if base is None else base[0]})"
        )
    said = {k: entry.get(k) for k in ("client", "from", "staleness")}
    if said != {"client": client, "from": start, "staleness": staleness}:
        problems.append(
            f"update {name!r}: its entry says {said}, its name client {client} from {start}"
        )
    if refused:
        if settings.limit is None or staleness <= settings.limit:
            problems.append(
                f"update {name!r} is refused at staleness {staleness}, within the limit"
            )
        return problems
    if settings.limit is not None and staleness > settings.limit:
        problems.append(f"update {name!r} is consumed at staleness {staleness}, past the limit")
    if entry.get("weights") != update.get("weights") or entry.get("size") != update.get("size"):
        problems.append(f"update {name!r}: its entry's weights or size are not its record's")
    if entry.get("weight") != arithmetic.staleness_weight(settings.kind, settings.a, staleness):
        problems.append(f"update {name!r}: weight {entry.get('weight')} at staleness {staleness}")
    return problems
