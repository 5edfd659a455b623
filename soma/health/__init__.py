"""A store's health over months of shared use: verify it, repair it, collect its garbage.

    verify(store, run=None, progress=None) -> VerifyReport   what is wrong, with paths
    repair(store, run=None, dry_run=False) -> RepairReport   what can be recomputed, is
    gc(store, keep_runs=None, dry_run=False, min_age=GRACE, force=False) -> GcReport

Pure functions over a `Store`; `soma verify|repair|gc` (soma.cli) print their reports.

What reaches what, and which references a reader needs, is soma.health.reach; what fixes a
damaged blob, soma.health.advice.

verify hashes every blob (or, with `run`, every blob the run's names reach) against its
name, streamed on up to 4 threads at disk speed with `progress(done, total)` in bytes;
checks that every name holds a digest of a blob present and every reference a reader
follows is present; and says, for each problem, the path and what fixes it. A blob found
corrupt is marked (see soma.store, "Health"), so that a put of its bytes replaces it.

repair remakes what the store can remake (soma.health.rebuild), each thing kept only when it
hashes to the digest that was lost: an average's `weights` and `state` (and the tensor
blobs under them), recomputed from the inputs its record names with the record's
strategy, options, start and state, exactly as the round did (`recompute_average`); and a
lost record of a meeting (its identity, an average's record, the averager's holder
record), reassembled from the others. The only names it binds are name files that hold no
digest (or the digest of no blob), bound again to the digest the records that point at them
prove they held (soma.health.rebuild.name_value); the only names it removes record who held
a tree node already published, their record lost (nobody reads it). A client's export cannot be
remade from the store: the report names the Snakemake target or the `soma client` command
whose rerun trains it again (training is seeded, so the rerun writes the same bytes, and a
put replaces a marked or missing blob). What cannot be remade or rerun (a name file that
holds no digest, a client's own record) is said with the file to restore from a backup. A
corrupt blob nothing needs (no name reaches it, or only a record's note does) is removed.

gc removes blobs no name reaches, temporaries left by killed writers, and (`keep_runs`)
every name of the runs not kept. Decisions, and the guarantee they give:

- Grace: a blob is removed only if unreachable *and* untouched for `min_age` seconds
  (default `GRACE`, 1 h). A writer puts blobs and then binds a name; between the two they
  are unreachable. A put of a blob already there refreshes its mtime (soma.store,
  `REFRESH_AFTER`), so a blob a process put (or re-put) stays for at least `min_age` minus
  `REFRESH_AFTER` after the put, reachable or not. soma holds no digest unbound for long:
  a run's start weights are claimed under `<run>/starts/<weights>` (soma.round.layout) the
  moment they are made, in every mode, and a waiting averager re-puts its holder record at
  every holder check (a tree's builder at every level); what is left unbound is a put and
  its bind, seconds apart. So the grace was shortened from 24 h to 1 h, which is margin for
  a writer stalled between the two. `gc` (the library, and so `soma gc`) refuses a
  `min_age` below `MIN_AGE`, twice `REFRESH_AFTER` (2 min), within which a put does not
  refresh a blob: no caller can ask it to remove a blob just put, or a live writer's
  temporary.
- Symbolic links: the store makes none and follows none (soma.store); `verify` reports each
  one anywhere under the store (kind `symlink`, its path), and `gc` refuses to run, before
  removing anything, while one is there: it could delete through it (`tmp/` a link), or
  miss the names behind it (`names/<run>` a link) and collect a live run's blobs.
- The race: gc decides from a stat, a writer's put may land between that stat and the
  deletion, and the put (one stat and a utime) then believes a blob that is about to go.
  So gc never unlinks a blob in place: it renames it to `attic/<digest>`, stats it there,
  and puts it back if it was touched after the listing; only then unlinks it. A put that
  touched it before the rename made it fresh (it goes back); one after the rename finds
  no file and links it back from `attic/` itself, or writes it anew if it is gone. Every
  read that misses a blob also looks in `attic/`, so the instant a blob spends there is
  invisible to the store's readers. (A caller testing `blob_path(d).exists()` directly,
  outside the store, could see that instant; `Store.has` cannot.)
- What gc cannot know, it keeps: when a name file holds no digest, or a record reached
  from a name is corrupt, what they reach is unknown, so gc removes no blob at all (only
  temporaries) and says which; `soma repair` first. (A reachable record larger than
  `soma.health.reach.RECORD_LIMIT` whose first bytes were damaged would pass for raw bytes.)
- Temporaries (`tmp/<host>.<pid>.<tid>.<random>.<what>`): removed when untouched for
  `min_age`, or when their writer is provably gone (this host, its pid not running) and
  untouched for `DEAD_WRITER_AGE` (a live writer touches its temporary at every write).
  A temporary from another host is only ever aged out.
- `keep_runs`: the names of every run not listed are removed first (a run is a name's
  part before `/round/<r>/`, or before `/start` or `/evaluation/`); names of no run are
  always kept, and a listed run the store does not hold is refused (a typo would drop
  everything). A run to drop that has an open round (a meeting with no average published,
  or no meeting yet beside its start) is refused unless `force`, naming it: it may still
  be going (`soma client` and `soma simulate` announce each round as it begins, the
  workflow's train jobs mark it started, so a round in training is open). Dropping a run
  that is still being written (`force`) loses what it binds before the drop; what it
  binds afterwards stays.
- Folders are never removed (a writer may be about to link into one).
- Readers: on a local filesystem an unlinked blob stays readable through open files and
  maps. Over NFS a file deleted on the server while another machine maps it lazily
  (`recall(lazy=True)`) raises SIGBUS at the next evicted page: gc deletes only
  unreachable blobs, but a run still being read should not be dropped by `keep_runs`, and
  a reader that resolved a name which is then rebound, and reads it only after a gc, may
  find its blobs gone if they were last put more than `min_age` ago.
- Another user's blob cannot be refreshed by a put (utime needs its owner): in a store
  shared by several users, such a blob ages from its owner's last write.
- A bucket (soma.store.s3) gives the same guarantees with its own refresh-vs-delete
  protocol (a put's refresh writes a marker, then copies the blob onto itself; gc deletes
  through an attic and looks for the marker after the delete: see soma.store.s3), and
  every age is judged by the SERVER's clock: the cutoff is the server's time (the Date of
  its answer, taken before the names are read) minus `min_age`, against each object's
  LastModified, so sites whose clocks differ agree, and no local clock matters. Its
  temporaries are multipart uploads: those not written since the cutoff (their last part,
  else their start) are aborted (`uploads_aborted`); a killed gc's attic copies are put
  back (`restored`).
  `keep_runs`, `force`, `dry_run` and the floor are the folder's.
"""

from __future__ import annotations

import ast
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from soma.errors import SomaError
from soma.health.advice import Advisor, average_text
from soma.health.reach import (
    Graph,
    files,
    is_digest,
    list_blobs,
    resolve_names,
    symlinks,
    walk,
)
from soma.health.rebuild import (
    finished_node_holder,
    name_value,
    rebuild_record,
    recompute_average,
)
from soma.round import holders, layout
from soma.round.layout import run_of
from soma.store import REFRESH_AFTER, Store, hash_stream, mark_corrupt
from soma.store.backend import BackendStore
from soma.store.errors import BadBlob, StoreError, SymlinkInStore, UnknownDigest
from soma.store.pipeline import _cpus

__all__ = [
    "GRACE",
    "MIN_AGE",
    "GcReport",
    "HealthError",
    "Problem",
    "RepairReport",
    "VerifyReport",
    "gc",
    "recompute_average",
    "repair",
    "verify",
]

GRACE = 3600.0
# The least `min_age` gc takes: a put refreshes a blob only once it is REFRESH_AFTER old, so
# below twice that gc could remove a blob a live writer has just put and is about to bind.
MIN_AGE = 2 * REFRESH_AFTER
DEAD_WRITER_AGE = 60.0


class HealthError(SomaError):
    """Something verify, repair or gc was asked that it refuses; the message names it."""


def _names_of(store: Store, run: str | None) -> list[str]:
    if run is None:
        return store.bound()
    names = [n for n in store.bound(layout.run_names(run)) if run_of(n) == run]
    if not names:
        held = sorted({r for r in map(run_of, store.bound()) if r is not None})
        holds = f"the runs it holds: {', '.join(map(repr, held))}" if held else "it holds no runs"
        raise HealthError(f"no run {run!r} in the store at {store.directory} ({holds})")
    return names


def _hash_blob(store: Store, digest: str, on_chunk: Callable[[int], None]) -> str | None:
    """The sha256 of blob `digest` as it is now (None: gone), marking it when it is wrong."""
    try:
        _, f = store._open_blob(digest)
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

    with ThreadPoolExecutor(max(1, min(4, _cpus()))) as pool:
        actuals = pool.map(lambda d: _hash_blob(store, d, on_chunk), digests)
        return dict(zip(digests, actuals, strict=True))


# --- verify -----------------------------------------------------------------------------


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
                f"; {self.unreachable} unreachable blob(s) ({_size(self.unreachable_bytes)}), "
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


def _size(count: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def verify(
    store: Store,
    run: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> VerifyReport:
    """Every blob hashed against its name (with `run`: every blob the run's names reach),
    every name resolving to a blob present, every reference a reader follows present."""
    tic = time.monotonic()
    report = VerifyReport(str(store.directory), run)
    links = symlinks(store)
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
        local = not isinstance(store, BackendStore)  # a bucket has no tmp/ and no attic/
        temporaries = files(store.directory / "tmp") if local else []
        report.temporaries = len(temporaries)
        report.temporary_bytes = sum(_entry_size(e) for e in temporaries)
        report.attic = len(files(store._attic)) if local else 0
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


def _entry_size(entry: os.DirEntry) -> int:
    try:
        return entry.stat(follow_symlinks=False).st_size
    except FileNotFoundError:
        return 0


# --- repair -----------------------------------------------------------------------------


@dataclass
class RepairReport:
    before: VerifyReport
    after: VerifyReport
    dry_run: bool = False
    rebuilt: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def left(self) -> list[Problem]:
        """What is still wrong and matters (a reader needs it)."""
        return [p for p in self.after.problems if p.needed]

    @property
    def clean(self) -> bool:
        return not self.left and not self.failed

    def lines(self) -> list[str]:
        would = "would " if self.dry_run else ""
        out = [f"{would}rebuild: {line}" for line in self.rebuilt]
        out += [f"{would}remove: {line}" for line in self.removed]
        out += [f"cannot rebuild: {line}" for line in self.failed]
        out += [f"left: {p.line()}" for p in self.left]
        state = "nothing left to repair" if self.clean else f"{len(self.left)} problem(s) left"
        out.append(
            f"repair of {self.before.store}{' (dry run)' if self.dry_run else ''}: "
            f"{len(self.before.problems)} problem(s) found, {len(self.rebuilt)} average(s) "
            f"{would}rebuilt, {len(self.removed)} unreachable blob(s) {would}removed; {state}"
        )
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "clean": self.clean,
            "rebuilt": self.rebuilt,
            "removed": self.removed,
            "failed": self.failed,
            "left": [p.as_dict() for p in self.left],
            "before": self.before.as_dict(),
            "after": self.after.as_dict(),
        }


def repair(
    store: Store,
    run: str | None = None,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> RepairReport:
    """Verify, then remake what the store can remake (soma.health.rebuild: an average's weights
    and state from its inputs, in round order since a round starts from the one before;
    a lost record from what other records say, kept only when it hashes right), verify
    again, and remove corrupt blobs nothing needs; what is left is said with the job whose
    rerun fixes it. Binds only a garbled name whose value the records prove."""
    before = verify(store, run, progress)
    report = RepairReport(before, before, dry_run)
    if dry_run:
        report.rebuilt = sorted({p.fix.split(" rebuilds it from the inputs of ")[-1]
                                 for p in before.problems if p.rebuild})  # fmt: skip
        report.removed = [p.path for p in before.problems if p.kind == "corrupt" and not p.needed]
        return report
    fixer = Store(store.directory, verify_existing=True)
    current = before
    for _ in range(3):  # a record remade may show damage it hid (what only it reached)
        bound, graph = _rebind_names(store, run, current, report)
        if bound:
            current, graph = verify(store, run), None
        pending = {p.digest for p in current.problems if p.digest is not None and p.needed}
        if not pending or not _repair_pass(store, fixer, run, pending, report, graph):
            break
        fixer.sync()  # names reach what it remade: durable now (soma.store.files)
        current = verify(store, run)
    if _rebind_names(store, run, current, report, finished=True)[0]:
        current = verify(store, run)
    for p in current.problems:
        if p.kind == "corrupt" and not p.needed and p.digest is not None:
            if isinstance(store, BackendStore):  # no corrupt mark on a bucket: as it is now
                freed = store.backend.delete_blob(p.digest)
            else:  # only while still marked corrupt (a put of its bytes since replaced it)
                freed = _collect(store, p.digest, cutoff=1e-9)
            if freed is not None:
                report.removed.append(p.path)
    report.after = verify(store, run) if current is not before or report.removed else before
    return report


def _rebind_names(
    store: Store,
    run: str | None,
    current: VerifyReport,
    report: RepairReport,
    *,
    finished: bool = False,
) -> tuple[bool, Graph | None]:
    """Bind a name file that holds no digest (or the digest of no blob) again to the digest
    it provably held (soma.health.rebuild.name_value); `finished` (once nothing else can be
    remade): remove a name whose lost record only said who held a published tree node.
    The only names repair writes; whether it wrote any, and the store's graph when it
    walked it and wrote nothing (for the repair pass that follows)."""
    wanted = [
        p.path[len(f"{store.directory}/names/") :]  # as verify spelled it
        for p in current.problems
        if p.kind == "bad-name"
    ]
    kinds = ("missing", "corrupt") if finished else ("missing",)
    for p in current.problems:
        if p.kind in kinds and p.needed:  # the names that reach it (Ref.text: name '...')
            wanted += [ast.literal_eval(v[5:]) for v in p.via if v.startswith("name ")]
    if not wanted:
        return False, None
    names, _ = resolve_names(store, _names_of(store, run))
    graph = walk(store, names)
    bound = False
    for name in wanted:
        digest = name_value(store, graph, name)
        if digest is not None:
            store.bind(name, digest)
            report.rebuilt.append(
                f"the name {name!r}: bound again to {digest}, which the records that point "
                "at it say it held"
            )
            bound = True
        elif finished and finished_node_holder(graph, name):
            store.forget(name)
            report.removed.append(
                f"the name {name!r}: it recorded who held a tree node that is published, "
                "and that record is lost; nothing reads it"
            )
            bound = True
    return bound, None if bound else graph


def _repair_pass(
    store: Store,
    fixer: Store,
    run: str | None,
    pending: set[str],
    report: RepairReport,
    graph: Graph | None = None,
) -> bool:
    """Remake what can be remade of `pending` (damaged digests), walking the store again
    after each step that made something (a record remade makes more readable); whether
    anything was."""
    names, _ = resolve_names(store, _names_of(store, run))
    anything = False
    report.failed = []
    while pending:
        graph = graph or walk(store, names)
        made = set()
        for digest in sorted(pending):
            what = rebuild_record(fixer, graph, digest)
            if what is not None:
                report.rebuilt.append(what)
                made.add(digest)
        advisor = Advisor(store, graph)
        averages: dict[str, set[str]] = {}
        for digest in pending - made:
            rebuild, _ = advisor.advise(digest)
            if rebuild is not None:
                averages.setdefault(rebuild, set()).add(digest)
        report.failed = []
        for digest in sorted(averages, key=lambda d: _round_order(graph.records[d])):
            if _rebuild_average(fixer, digest, graph.records[digest], report):
                made |= averages[digest]
        if not made:
            break
        pending -= made
        anything = True
        graph = None  # what was made is walked again
    return anything


def _round_order(record: dict[str, Any]) -> tuple[str, int]:
    return str(record.get("run")), int(record.get("round") or 0)


def _rebuild_average(
    fixer: Store, digest: str, record: dict[str, Any], report: RepairReport
) -> bool:
    """Recompute an average's weights and state; kept only when they are the record's."""
    what = f"{average_text(record)} (record {digest})"
    try:
        weights, state = recompute_average(fixer, record)
    except (SomaError, StoreError, OSError, KeyError, TypeError, ValueError) as error:
        report.failed.append(
            f"{what}: its inputs cannot be read ({type(error).__name__}: {error}); fix "
            "them as said below, then run `soma repair` again"
        )
        return False
    if (weights, state) != (record["weights"], record.get("state")):
        report.failed.append(
            f"{what}: recomputed weights {weights} and state {state}, not the record's "
            f"{record['weights']} and {record.get('state')}: nothing was replaced (is the "
            "strategy's code the same as when the round was averaged?)"
        )
        return False
    report.rebuilt.append(f"{what}: weights {weights}, state {state}")
    return True


# --- gc ---------------------------------------------------------------------------------


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
    if len(parts) < 5 or parts[0] != store._host or not parts[1].isdigit():
        return False
    return holders._process_start(int(parts[1])) is None


def _collect(store: Store, digest: str, cutoff: float) -> int | None:
    """Remove blob `digest` unless it was touched after `cutoff`: moved to `attic/`, stat-ed
    there (a put between gc's listing and the move refreshed it: it goes back), and only
    then unlinked; a put after the move links it back from `attic/` itself. The bytes
    freed, or None when it stays (or was gone already). A bucket's blob: its backend's
    own protocol (soma.store.s3)."""
    if isinstance(store, BackendStore):
        return store.backend.collect_blob(digest, cutoff)
    final, attic = store.blob_path(digest), store._attic / digest
    for attempt in (0, 1):
        try:
            os.rename(final, attic)
            break
        except FileNotFoundError:
            if attempt or not final.exists():
                return None
            store._attic.mkdir(exist_ok=True)  # the first gc that needs it
    return _settle_attic(store, digest, cutoff, keep=False)


def _settle_attic(store: Store, digest: str, cutoff: float, *, keep: bool) -> int | None:
    """Decide a blob in `attic/`: back to its place if it must stay (`keep`, or touched
    after `cutoff`), else unlinked; the bytes freed, or None when it went back."""
    attic = store._attic / digest
    try:
        st = os.lstat(attic)
    except FileNotFoundError:
        return None
    if keep or not _untouched(st.st_mtime, cutoff):
        store._rescue(digest)
        _unlink(attic)
        return None
    _unlink(attic)
    return st.st_size


def _unlink(path: str | os.PathLike[str]) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _open_rounds(names: list[str], run: str) -> list[int]:
    """The rounds of `run` with a meeting whose average is not published yet (among
    `names`); round 0 for a run with no meeting yet (its start is made, round 0 trains)."""
    there = set(names)
    found = layout.meetings(names, run)
    if not found:
        return [0]
    return sorted({r for r, k in found if layout.average(layout.meeting(run, r, k)) not in there})


def _refuse_links(store: Store) -> None:
    """HealthError naming the symbolic links under the store: gc never removes through one,
    nor decides what is reachable with names it cannot see."""
    links = symlinks(store)
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
    bucket = store.backend if isinstance(store, BackendStore) else None
    _refuse_links(store)
    tic = time.monotonic()
    now = time.time() if bucket is None else bucket.now()  # a bucket: the server's clock
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
        report.blocked.append(f"name {name!r}: {why}; what it reached is unknown")
    for d in graph.corrupt_records():
        via = "; ".join(r.text() for r in graph.parents.get(d, [])[:2])
        report.blocked.append(
            f"blob {store.blob_path(d)} (reached from {via}) is corrupt, so what it refers to "
            f"is unknown; run `soma repair --store {store.directory}` first"
        )
    if not report.blocked:
        reached = graph.reached()
        if bucket is not None and not dry_run:
            report.restored += bucket.settle_attic()
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
            elif store.has(d) if bucket else store.blob_path(d).exists():  # put since listed
                report.raced += 1
        for entry in files(store._attic) if bucket is None else []:  # a bucket's: settled
            if not is_digest(entry.name) or dry_run:
                continue
            if _settle_attic(store, entry.name, cutoff, keep=entry.name in reached) is None:
                report.restored += 1
    if bucket is not None:  # its temporaries: multipart uploads
        if not dry_run:
            bucket.forget_markers(cutoff)
        report.uploads_aborted, report.temporaries_kept = bucket.abandoned_uploads(cutoff, dry_run)
        report.seconds = time.monotonic() - tic
        return report
    for entry in files(store.directory / "tmp"):
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        abandoned = _untouched(st.st_mtime, cutoff) or (
            _untouched(st.st_mtime, now - min(min_age, DEAD_WRITER_AGE))
            and _writer_gone(store, entry.name)
        )
        if not abandoned:
            report.temporaries_kept += 1
            continue
        if not dry_run:
            _unlink(entry.path)
        report.temporaries_removed += 1
        report.temporary_bytes += st.st_size
    report.seconds = time.monotonic() - tic
    return report
