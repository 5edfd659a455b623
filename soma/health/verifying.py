"""verify: every blob hashed against its name, every name and reference checked, each
problem said with its path and what fixes it (see soma.health for the whole story).

Why a module of its own: verify is read-only, and repair (soma.health.repairing) builds on
its report; gc (soma.health.collecting) shares only the graph (soma.health.reach).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from soma.health import reach
from soma.health.advice import Advisor
from soma.health.collecting import GRACE
from soma.health.common import _names_of, _size
from soma.health.reach import Graph, list_blobs, resolve_names, walk
from soma.store import Store, hash_stream, mark_corrupt
from soma.store.errors import BadBlob, SymlinkInStore, UnknownDigest
from soma.store.hashing import cpus


def _hash_blob(store: Store, digest: str, on_chunk: Callable[[int], None]) -> str | None:
    """The sha256 of blob `digest` as it is now (None: gone), marking it when it is wrong."""
    try:
        _, f = store.open_blob(digest)
    except (UnknownDigest, SymlinkInStore, BadBlob):  # not a blob: reported by `symlinks`
        return None
    with f:
        actual = hash_stream(f, on_chunk)
        if actual != digest:
            mark_corrupt(f.fileno())
    return actual


def _hash_all(
    store: Store,
    digests: list[str],
    total: int,
    progress: Callable[[int, int], None] | None,
) -> dict[str, str | None]:
    """Hash the blobs side by side (sha256 is a core per blob), reporting bytes done."""
    lock = threading.Lock()
    done = [0]

    def on_chunk(count: int) -> None:
        if progress is None:
            return
        with lock:
            done[0] += count
            progress(done[0], total)

    with ThreadPoolExecutor(max(1, min(4, cpus()))) as pool:
        actuals = pool.map(lambda d: _hash_blob(store, d, on_chunk), digests)
        return dict(zip(digests, actuals, strict=True))


@dataclass
class Problem:
    """One thing wrong, with its path and what fixes it."""

    kind: str  # corrupt | missing | bad-name | stray | symlink
    path: str
    detail: str
    digest: str | None = None
    via: list[str] = field(default_factory=list)
    fix: str = ""
    rebuild: str | None = None  # the average record whose recomputation rebuilds it
    needed: bool = True  # a reader needs it (False: nothing reaches it but a note)

    def line(self) -> str:
        via = f" (reached from {'; '.join(self.via[:3])}{' ...' if len(self.via) > 3 else ''})"
        return f"{self.kind}: {self.path}: {self.detail}{via if self.via else ''}; fix: {self.fix}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": self.path,
            "detail": self.detail,
            "digest": self.digest,
            "via": self.via,
            "fix": self.fix,
            "rebuild": self.rebuild,
            "needed": self.needed,
        }


# What an unreachable blob is, said beside their count: a clean store has some, and a count
# alone reads like damage.
UNREACHABLE = (
    ": blobs no name reaches, what a name held before it was bound again (a lease renewed, a "
    "job rerun) or what a killed job put before naming it; harmless, and `soma gc` removes "
    f"those untouched for {GRACE / 3600:g} h"
)


@dataclass
class VerifyReport:
    store: str
    run: str | None
    names: int = 0
    blobs: int = 0  # hashed
    bytes: int = 0  # hashed
    problems: list[Problem] = field(default_factory=list)
    unreachable: int = 0
    unreachable_bytes: int = 0
    temporaries: int = 0
    temporary_bytes: int = 0
    attic: int = 0
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return not self.problems

    def damaged(self, kind: str | None = None) -> set[str]:
        """The digests (or, for names, the paths) reported, of one kind or all."""
        return {p.digest or p.path for p in self.problems if kind is None or p.kind == kind}

    def summary(self) -> str:
        scope = f"run {self.run!r} of " if self.run else ""
        state = "clean" if self.clean else f"{len(self.problems)} problem(s)"
        extra = ""
        if self.run is None:
            extra = (
                f"; {self.unreachable} unreachable blob(s) ({_size(self.unreachable_bytes)}"
                f"{UNREACHABLE if self.unreachable else ''}), "
                f"{self.temporaries} temporar{'y' if self.temporaries == 1 else 'ies'} "
                f"({_size(self.temporary_bytes)})"
            )
        return (
            f"verified {scope}{self.store}: {self.names} names, {self.blobs} blobs "
            f"({_size(self.bytes)}) in {self.seconds:.1f} s: {state}{extra}"
        )

    def lines(self) -> list[str]:
        return [p.line() for p in self.problems] + [self.summary()]

    def as_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "run": self.run,
            "clean": self.clean,
            "names": self.names,
            "blobs": self.blobs,
            "bytes": self.bytes,
            "problems": [p.as_dict() for p in self.problems],
            "unreachable": self.unreachable,
            "unreachable_bytes": self.unreachable_bytes,
            "temporaries": self.temporaries,
            "temporary_bytes": self.temporary_bytes,
            "attic": self.attic,
            "seconds": round(self.seconds, 3),
        }


def verify(
    store: Store,
    run: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> VerifyReport:
    """Every blob hashed against its name (with `run`: every blob the run's names reach),
    every name resolving to a blob present, every reference a reader follows present."""
    tic = time.monotonic()
    report = VerifyReport(str(store.directory), run)
    links = reach.symlinks(store)
    for path in links:
        report.problems.append(
            Problem(
                "symlink",
                path,
                f"a symbolic link{_target(path)}: the store makes none, follows none, and gc "
                "refuses to run while one is there",
                fix="remove the link (`rm` it: what it points at is not touched); if it stands "
                "for a folder of the store, move that folder here in its place",
            )
        )
    try:
        listed = _names_of(store, run)
    except SymlinkInStore:  # the names are behind a link: it is reported, never followed
        if not links:
            raise
        listed = []
    names, bad = resolve_names(store, listed)
    graph = walk(store, names)
    graph.bad_names = bad
    report.names = len(names) + len(bad)
    advisor = Advisor(store, graph)
    for name, why in bad:
        report.problems.append(
            Problem(
                "bad-name",
                f"{store.directory}/names/{name}",
                f"it holds no digest: {why.rsplit(': ', 1)[-1]} (something other than the "
                "store wrote it)",
                fix=advisor.bad_name(name),
            )
        )
    sizes: dict[str, int] = {d: look.size for d, look in graph.looks.items() if look.present}
    if run is None:
        listing, strays = list_blobs(store)
        for d, f in listing.items():
            sizes.setdefault(d, f.size)
        for path in strays:
            report.problems.append(
                Problem(
                    "stray",
                    path,
                    "a file in blobs/ that is not a blob (not named by a digest in its folder)",
                    fix="the store never writes such a file: move it out of blobs/",
                )
            )
        reached = graph.reached()
        unreachable = [d for d in listing if d not in reached]
        report.unreachable = len(unreachable)
        report.unreachable_bytes = sum(listing[d].size for d in unreachable)
        temporaries = store.temporaries()  # a bucket has none, and no attic
        report.temporaries = len(temporaries)
        report.temporary_bytes = sum(t.size for t in temporaries)
        report.attic = store.attic_count()
        candidates = list(listing) + [d for d in reached if d not in listing]
    else:
        candidates = sorted(graph.reached())
    hashed = {d: look.actual for d, look in graph.looks.items() if look.actual is not None}
    todo = [d for d in candidates if d not in hashed]
    total = sum(sizes.get(d, 0) for d in todo)
    hashed.update(_hash_all(store, todo, total, progress))
    for d in candidates:
        actual = hashed.get(d)
        if actual is None:  # gone since it was listed (a gc): not damage
            continue
        report.blobs += 1
        report.bytes += sizes.get(d, 0)
        if actual != d:
            rebuild, fix = (
                advisor.advise(d) if d in graph.needed else (None, _unneeded(store, graph, d))
            )
            report.problems.append(
                Problem(
                    "corrupt",
                    str(store.blob_path(d)),
                    f"its bytes hash to {actual}",
                    d,
                    [r.text() for r in graph.parents.get(d, [])],
                    fix,
                    rebuild,
                    needed=d in graph.needed,
                )
            )
    for d in sorted(graph.missing):
        rebuild, fix = advisor.advise(d)
        report.problems.append(
            Problem(
                "missing",
                str(store.blob_path(d)),
                f"no blob {d}",
                d,
                [r.text() for r in graph.parents.get(d, []) if r.required],
                fix,
                rebuild,
            )
        )
    report.seconds = time.monotonic() - tic
    return report


def _target(path: str) -> str:
    try:
        return f" to {os.readlink(path)}"
    except OSError:
        return ""


def _unneeded(store: Store, graph: Graph, digest: str) -> str:
    why = "only a note in a record names it" if digest in graph.parents else "no name reaches it"
    return f"nothing needs it ({why}): `soma repair --store {store.directory}` removes it"
