"""An audit report as lines a person reads: the roster and how far it is trusted, then per
round who took part, who was left out and why, and every check with its outcome.

Output only: everything here is read from the report (soma.audit.findings).
"""

from __future__ import annotations

from soma.audit.findings import AuditReport, Finding, RoundAudit

_MARK = {True: "ok  ", False: "FAIL", None: "--  "}


def _finding(finding: Finding) -> str:
    return f"    {_MARK[finding.ok]} {finding.check}: {finding.detail}"


def _round(audited: RoundAudit) -> list[str]:
    head = f"round {audited.round} (meeting {audited.meeting[:12]})"
    if audited.average is not None:
        head += f": average {audited.average[:12]}, weights {str(audited.weights)[:12]}"
        if audited.signer is not None:
            head += f", signed by client {audited.signer}"
    lines = [head]
    if audited.average is not None:
        lines.append(f"  took part: {audited.took_part or 'nobody'}")
        for left in audited.left_out:
            lines.append(f"  left out: client {left['client']}: {left['why']}")
    if audited.epsilon is not None:
        lines.append(f"  epsilon so far: {audited.epsilon:.4g}")
    return lines + [_finding(f) for f in audited.findings]


def lines(report: AuditReport) -> list[str]:
    """The whole report, the verdict last."""
    out = [f"audit of run {report.run!r} in {report.store}", f"roster: {report.roster}"]
    out += [_finding(f) for f in report.findings]
    for audited in report.rounds:
        out += _round(audited)
    failure = report.failure()
    if failure is None:
        model = "no average yet" if report.model is None else f"the model is {report.model}"
        unchecked = sum(f.ok is None for r in report.rounds for f in r.findings)
        out.append(
            f"every check held ({unchecked} could not be made, marked --): {model}"
            if unchecked
            else f"every check held: {model}"
        )
    else:
        out.append(str(failure))
    return out
