"""An asynchronous run audited from its store alone: every version replayed from its record
(soma.asynchronous.replay), bit for bit, with the promises its record makes (the chain, the
buffer, each update consumed once and trained from the version as published) and, for a
signed run, every signature (soma.asynchronous.signed): each version's by one of the run's
averagers, each consumed update's by its client. A version is a report's round: the run's
report, its text, JSON and failure are those of rounds; a broken finding names the version
and, where it concerns an update, its client (the finding's `client` too), and a damaged
blob is said per version and client with what can fix it."""

from __future__ import annotations

import os
from collections.abc import Iterable

from soma.asynchronous import signed
from soma.asynchronous.replay import Replayed, replay
from soma.audit.findings import AuditReport, Finding, RoundAudit
from soma.errors import SomaError
from soma.round import layout
from soma.round.signing import Signing
from soma.store import Store
from soma.store.errors import StoreUnavailable

UNSIGNED = signed.UNSIGNED


def audit_versions(
    store: Store,
    run: str,
    roster: str | os.PathLike[str] | None = None,
    averagers: Iterable[int] | None = None,
) -> AuditReport:
    """Every version of asynchronous run `run` checked (see the module), against the roster
    file `roster` (the auditor's own, with the `averagers` the run declared), else the roster
    the run's signatures rebuild (labelled not anchored), else unsigned."""
    findings: list[Finding] = []
    try:
        signing, label = signed.reader_signing(store, run, roster, averagers)
    except StoreUnavailable:
        raise
    except SomaError as error:
        signing, label = None, "a signed run whose roster could not be read back"
        findings.append(Finding("roster", False, str(error)))
    report = AuditReport(str(store.directory), run, label)
    report.findings += findings
    if signing is None and not findings:
        report.findings.append(Finding("roster", None, UNSIGNED))
    elif signing is not None:
        report.roster_digest = signing.digest
        report.findings.append(Finding("roster", True, f"roster {signing.digest[:12]} ({label})"))
    report.charter = store.resolve(layout.charter(run))
    for r in replay(store, run, signing):
        report.rounds.append(_audited(r, signing))
    return report


def _audited(r: Replayed, signing: Signing | None) -> RoundAudit:
    """One replayed version as a report's round: who it took, who it refused, what broke."""
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
    for issue in r.problems:
        client, check = getattr(issue, "client", None), getattr(issue, "check", "replay")
        audited.add(check, False, f"version {r.version}: {issue}", client)
    if r.problems:
        return audited
    if signing is not None:
        audited.signer = r.signer
        took = f", and the updates of clients {audited.took_part} by each" if consumed else ""
        audited.add("signature", True, f"signed by client {r.signer}, an averager{took}")
    staleness = [e.get("staleness") for e in consumed]
    audited.add(
        "replay",
        True,
        "the run's starting weights"
        if r.version == 0
        else f"{len(consumed)} updates consumed once (staleness {staleness}), "
        "the weights recomputed bit for bit",
    )
    return audited
