"""repair: verify, remake what the store can remake (soma.health.rebuild), verify again, and
remove corrupt blobs nothing needs (see soma.health for the whole story).

Why a module of its own: repair is the only part of soma.health that writes values (through
a store that verifies what it finds, `verify_existing=True`); it reads verify's reports
(soma.health.verifying) and removes through gc's collect (soma.health.collecting).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from soma.errors import SomaError
from soma.health.advice import Advisor, average_text
from soma.health.common import _names_of
from soma.health.reach import Graph, resolve_names, walk
from soma.health.rebuild import (
    finished_node_holder,
    name_value,
    rebuild_record,
    recompute_average,
)
from soma.health.verifying import Problem, VerifyReport, verify
from soma.store import Store
from soma.store.errors import StoreError


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
        fixer.sync()  # names reach what it remade: durable now (soma.files)
        current = verify(store, run)
    if _rebind_names(store, run, current, report, finished=True)[0]:
        current = verify(store, run)
    for p in current.problems:
        if p.kind == "corrupt" and not p.needed and p.digest is not None:
            freed = store.remove_corrupt(p.digest)  # a folder's: only while still marked
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
