"""An asynchronous run audited from its store alone: every version replayed from its record
(soma.asynchronous.replay), bit for bit, with the promises its record makes (the chain, the
buffer, each update consumed once and trained from the version as published). A version
is a report's round: the run's report, its text, JSON and failure are those of rounds."""

from __future__ import annotations

from soma.asynchronous.replay import replay
from soma.audit.findings import AuditReport, RoundAudit
from soma.store import Store

UNSIGNED = "none: an asynchronous run's records are not signed"


def audit_versions(store: Store, run: str) -> AuditReport:
    """Every version of asynchronous run `run` checked (see the module)."""
    report = AuditReport(str(store.directory), run, UNSIGNED)
    for r in replay(store, run):
        consumed, refused = r.value.get("consumed") or [], r.value.get("refused") or []
        audited = RoundAudit(
            round=r.version,
            meeting="version",
            took_part=sorted({e.get("client") for e in consumed}),
            left_out=[{"client": e.get("client"), "why": e.get("why")} for e in refused],
            inputs=[
                {k: e.get(k) for k in ("client", "record", "weights", "from", "staleness")}
                for e in consumed
            ],
            average=r.record,
            weights=r.value.get("weights"),
            strategy="fedbuff",
        )
        for problem in r.problems:
            audited.add("replay", False, f"version {r.version}: {problem}")
        if not r.problems:
            staleness = [e.get("staleness") for e in consumed]
            audited.add(
                "replay",
                True,
                "the run's starting weights"
                if r.version == 0
                else f"{len(consumed)} updates consumed once (staleness {staleness}), "
                "the weights recomputed bit for bit",
            )
        report.rounds.append(audited)
    return report
