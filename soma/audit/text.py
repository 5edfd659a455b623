"""An audit report as lines a person reads: the roster and how far it is trusted, then per
round who took part, who was left out and why, and every check with its outcome; last, the
checks that could not be made and why, and the verdict.

Output only: everything here is read from the report (soma.audit.findings).
"""

from __future__ import annotations

from soma.audit.findings import AuditReport, Finding, RoundAudit, spans

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


def _unchecked(report: AuditReport) -> list[str]:
    """The checks that could not be made, each said once with the rounds it was said of
    (the run's first), so the verdict's count is read with its reasons."""
    said: dict[tuple[str, str], list[int | None]] = {}
    for r, finding in report.unchecked():
        said.setdefault((finding.check, finding.detail), []).append(r)
    if not said:
        return []
    count = sum(map(len, said.values()))
    out = [f"could not be made ({count} check{'' if count == 1 else 's'}, marked --):"]
    for (check, detail), where in said.items():
        rounds = [r for r in where if r is not None]
        of = ["the run"] if None in where else []
        of += [f"round{'' if len(rounds) == 1 else 's'} {spans(rounds)}"] if rounds else []
        out.append(f"    --   {check} ({', '.join(of)}): {detail}")
    return out


def lines(report: AuditReport) -> list[str]:
    """The whole report, the verdict last."""
    out = [f"audit of run {report.run!r} in {report.store}", f"roster: {report.roster}"]
    out += [_finding(f) for f in report.findings]
    for audited in report.rounds:
        out += _round(audited)
    out += _unchecked(report)
    failure = report.failure()
    if failure is None:
        model = "no average yet" if report.model is None else f"the model is {report.model}"
        unchecked = len(report.unchecked())
        out.append(
            f"every check held ({unchecked} could not be made, listed above): {model}"
            if unchecked
            else f"every check held: {model}"
        )
    else:
        out.append(str(failure))
    return out
