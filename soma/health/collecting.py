"""gc: remove blobs no name reaches and temporaries killed writers left, safely beside live
writers (the grace, the attic, the floor: see soma.health for the whole story).

Why a module of its own: gc is the only part of soma.health that deletes; its guarantees
(`GRACE`, `MIN_AGE`, the attic protocol of `_collect`) are kept here, in one place.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from soma.health import reach
from soma.health.common import HealthError, _size
from soma.health.reach import list_blobs, resolve_names, walk
from soma.health.rebuild import name_value
from soma.round import holders, layout
from soma.round.layout import run_of
from soma.store import REFRESH_AFTER, Store
from soma.store.keeping import Temporary

GRACE = 3600.0
# The least `min_age` gc takes: a put refreshes a blob only once it is REFRESH_AFTER old, so
# below twice that gc could remove a blob a live writer has just put and is about to bind.
MIN_AGE = 2 * REFRESH_AFTER
DEAD_WRITER_AGE = 60.0


@dataclass
class GcReport:
    store: str
    dry_run: bool
    min_age: float
    names_removed: list[str] = field(default_factory=list)
    blobs_removed: int = 0
    blob_bytes: int = 0
    kept_young: int = 0
    kept_young_bytes: int = 0
    restored: int = 0  # blobs a killed gc had left in attic/, put back
    raced: int = 0  # listed as old, but put again before their removal: put back
    temporaries_removed: int = 0
    temporary_bytes: int = 0
    temporaries_kept: int = 0
    uploads_aborted: int = 0  # a bucket's multipart uploads abandoned before the cutoff
    blocked: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def lines(self) -> list[str]:
        would = "would remove" if self.dry_run else "removed"
        out = [f"blocked: {why}" for why in self.blocked]
        if self.names_removed:
            out.append(f"{would} {len(self.names_removed)} name(s) of the runs not kept")
        out.append(
            f"gc of {self.store}{' (dry run)' if self.dry_run else ''}: {would} "
            f"{self.blobs_removed} unreachable blob(s) ({_size(self.blob_bytes)}) and "
            f"{self.temporaries_removed} temporar{'y' if self.temporaries_removed == 1 else 'ies'} "
            f"({_size(self.temporary_bytes)}); kept {self.kept_young} unreachable blob(s) "
            f"younger than {self.min_age:g} s ({_size(self.kept_young_bytes)}) and "
            f"{self.temporaries_kept} temporar{'y' if self.temporaries_kept == 1 else 'ies'} "
            f"that may be written; {self.seconds:.1f} s"
        )
        if self.uploads_aborted:
            out.append(
                f"{'would abort' if self.dry_run else 'aborted'} {self.uploads_aborted} "
                "multipart upload(s) untouched since before the grace (killed writers')"
            )
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "dry_run": self.dry_run,
            "min_age": self.min_age,
            "names_removed": self.names_removed,
            "blobs_removed": self.blobs_removed,
            "blob_bytes": self.blob_bytes,
            "kept_young": self.kept_young,
            "kept_young_bytes": self.kept_young_bytes,
            "restored": self.restored,
            "raced": self.raced,
            "temporaries_removed": self.temporaries_removed,
            "temporary_bytes": self.temporary_bytes,
            "temporaries_kept": self.temporaries_kept,
            "uploads_aborted": self.uploads_aborted,
            "blocked": self.blocked,
            "seconds": round(self.seconds, 3),
        }


def _untouched(mtime: float, cutoff: float) -> bool:
    """Whether a file last touched at `mtime` is older than the grace (touched before `cutoff`)."""
    return mtime < cutoff


def _writer_gone(store: Store, temporary: str) -> bool:
    """Whether the writer of a temporary (`<host>.<pid>.<tid>.<random>.<what>`) is provably
    gone: it is this host's, and its pid is not running (a reused pid counts as alive)."""
    parts = temporary.split(".")
    if len(parts) < 5 or parts[0] != store.host or not parts[1].isdigit():
        return False
    return holders._process_start(int(parts[1])) is None


def _collect(store: Store, digest: str, cutoff: float) -> int | None:
    """Remove blob `digest` unless it was touched after `cutoff`, by the store's own safe
    protocol (a folder's attic, a bucket's: soma.store.keeping); the bytes freed, or None
    when it stays (or was gone already)."""
    return store.collect_blob(digest, cutoff)


def _open_rounds(names: list[str], run: str) -> list[int]:
    """The rounds of `run` with a meeting whose average is not published yet (among
    `names`); round 0 for a run with no meeting yet (its start is made, round 0 trains)."""
    there = set(names)
    found = layout.meetings(names, run)
    if not found:
        return [0]
    return sorted({r for r, k in found if layout.average(layout.meeting(run, r, k)) not in there})


def _fix(store: Store, graph: reach.Graph, name: str) -> str:
    """How a name gc cannot read gets its digest back, when its records say what it held
    (a client's record and its distributed-DP release name each other's, an average its
    inputs': soma.health.rebuild.name_value): then `soma repair` lets gc run."""
    held = name_value(store, graph, name)
    if held is None:
        return "; `soma verify` says what fixes it"
    return f"; `soma repair --store {store.directory}` binds it again to {held}, then run gc"


def _refuse_links(store: Store) -> None:
    """HealthError naming the symbolic links under the store: gc never removes through one,
    nor decides what is reachable with names it cannot see."""
    links = reach.symlinks(store)
    if links:
        more = f" (and {len(links) - 1} more: `soma verify` lists them)" if len(links) > 1 else ""
        raise HealthError(
            f"gc: {links[0]} is a symbolic link{more}; the store makes none, and gc refuses to "
            "run while one is there (it could delete through it, or miss names behind it): "
            "remove it, then run gc again; nothing was removed"
        )


def gc(
    store: Store,
    keep_runs: Iterable[str] | None = None,
    dry_run: bool = False,
    min_age: float = GRACE,
    force: bool = False,
) -> GcReport:
    """Remove unreachable blobs untouched for `min_age` seconds (at least `MIN_AGE`),
    abandoned temporaries, and, with `keep_runs`, the names of every other run first (a run
    with an open round only with `force`). Refused, before anything is removed, on a store
    holding a symbolic link. Safe beside live writers: see the module docs for the grace,
    the race, and what it guarantees."""
    if not min_age >= MIN_AGE:
        raise HealthError(
            f"gc: min_age {min_age:g}s is below {MIN_AGE:g}s: a live writer refreshes a blob it "
            f"puts only when it is older than {REFRESH_AFTER:g}s, so gc could remove a blob "
            "under it (or a temporary it is writing); nothing was removed"
        )
    _refuse_links(store)
    tic = time.monotonic()
    now = store.clock()  # a bucket's: the server's
    cutoff = now - min_age
    report = GcReport(str(store.directory), dry_run, min_age)
    everything = store.bound()
    if keep_runs is not None:
        keep = list(keep_runs)
        held = {r for r in map(run_of, everything) if r is not None}
        unknown = [r for r in keep if r not in held]
        if unknown:
            holds = ", ".join(map(repr, sorted(held))) or "none"
            raise HealthError(
                f"gc --keep-runs: no run {', '.join(map(repr, unknown))} in the store at "
                f"{store.directory} (its runs: {holds}); nothing was removed"
            )
        dropped = {n for n in everything if run_of(n) not in (None, *keep)}
        going = {
            run: rounds
            for run in sorted({run_of(n) for n in dropped})
            if run is not None and (rounds := _open_rounds(everything, run))
        }
        if going and not force:
            said = "; ".join(
                f"run {run!r} (round{'s' if len(r) > 1 else ''} {', '.join(map(str, r))})"
                for run, r in going.items()
            )
            raise HealthError(
                f"gc --keep-runs would drop {said} with an open round: no average published "
                "yet, so it may still be going, and dropping its names loses what it writes; "
                "nothing was removed. Keep it, or drop it anyway with --force"
            )
        for name in sorted(dropped):
            if dry_run or store.forget(name):
                report.names_removed.append(name)
        everything = [n for n in everything if n not in dropped]
    names, bad = resolve_names(store, everything)
    graph = walk(store, names)
    for name, why in bad:
        report.blocked.append(
            f"name {name!r}: {why}; what it reached is unknown{_fix(store, graph, name)}"
        )
    for d in graph.corrupt_records():
        via = "; ".join(r.text() for r in graph.parents.get(d, [])[:2])
        report.blocked.append(
            f"blob {store.blob_path(d)} (reached from {via}) is corrupt, so what it refers to "
            f"is unknown; run `soma repair --store {store.directory}` first"
        )
    if not report.blocked:
        reached = graph.reached()
        report.restored += store.settle_attic(reached, cutoff, dry_run)  # a killed gc's
        listing, _ = list_blobs(store)
        for d, f in sorted(listing.items()):
            if d in reached:
                continue
            if not _untouched(f.mtime, cutoff):
                report.kept_young += 1
                report.kept_young_bytes += f.size
                continue
            freed = f.size if dry_run else _collect(store, d, cutoff)
            if freed is not None:
                report.blobs_removed += 1
                report.blob_bytes += freed
            elif store.blob_present(d):  # put again since listed
                report.raced += 1
    # temporaries (a bucket's: multipart uploads) a killed writer left
    young = now - min(min_age, DEAD_WRITER_AGE)

    def abandoned(temporary: Temporary) -> bool:
        return _untouched(temporary.mtime, cutoff) or (
            _untouched(temporary.mtime, young) and _writer_gone(store, temporary.name)
        )

    swept = store.sweep_temporaries(cutoff, abandoned, dry_run)
    report.temporaries_removed += swept.removed
    report.temporary_bytes += swept.removed_bytes
    report.temporaries_kept += swept.kept
    report.uploads_aborted += swept.uploads_aborted
    report.seconds = time.monotonic() - tic
    return report
