"""A run audited from its store alone: every meeting of every round (soma.audit.rounds),
then the chain and the privacy ledger across them (soma.audit.across).

Read-only: it resolves names, lists them and reads blobs, and never binds, claims, puts or
forgets anything, so anyone who can read the store (a third party, a journal's reviewer) can
run it, and running it changes nothing a run or another reader sees.
"""

from __future__ import annotations

from pathlib import Path

from soma.audit import roster as rosters
from soma.audit.across import check_chain, check_ledger
from soma.audit.findings import AuditReport, Finding
from soma.audit.rounds import audit_meeting
from soma.round import layout
from soma.round import signing as signatures
from soma.round.meeting import Meeting
from soma.round.report import check_run
from soma.store import Store


def audit(store: Store, run: str, roster: str | Path | None = None) -> AuditReport:
    """Every round of `run` checked (see soma.audit): the report, whose `failure()` names
    the first broken round. `roster` is the auditor's roster file; without one, the roster
    is read back from the store (and labelled not anchored), or the run is unsigned. An
    asynchronous run's versions are replayed instead (soma.audit.asynchronous)."""
    from soma.asynchronous.replay import is_asynchronous
    from soma.audit.asynchronous import audit_versions

    if is_asynchronous(store, run):
        return audit_versions(store, run)
    found = check_run(store, run)
    said = rosters.roster_digests(store, run, found)
    if roster is not None:
        signing: signatures.Signing | None = signatures.Signing.of(
            signatures.read_roster(roster), None
        )
        label = f"{rosters.GIVEN}: {roster}"
    elif said:
        signing, label = rosters.from_store(store, run, found, said), rosters.FROM_STORE
    else:
        signing, label = None, rosters.UNSIGNED
    report = AuditReport(str(store.directory), run, label)
    report.findings += _run_findings(store, run, signing, said, roster is not None)
    meetings: dict[int, Meeting] = {}
    for r, key in found:
        audited, meeting = audit_meeting(store, run, r, key, signing if said else None)
        if meeting is not None:
            meetings[len(report.rounds)] = meeting
        report.rounds.append(audited)
    check_chain(report.rounds)
    check_ledger(store, report.rounds, meetings)
    return report


def _run_findings(
    store: Store,
    run: str,
    signing: signatures.Signing | None,
    said: set[str],
    given: bool,
) -> list[Finding]:
    """What concerns the run as a whole: names where a round belongs (never skipped), and
    whether the roster given is the one the run's meetings name."""
    out = [
        Finding("roster", False, f"{name!r} stands where a round's or a meeting's folder belongs")
        for name in layout.strays(store.bound(layout.rounds(run)), run)
    ]
    if signing is None:
        out.append(Finding("roster", None, rosters.UNSIGNED))
    elif given and said and signing.digest not in said:
        out.append(
            Finding(
                "roster",
                False,
                f"the roster given (digest {signing.digest[:12]}) is not the one the run's "
                f"meetings name ({', '.join(sorted(d[:12] for d in said))})",
            )
        )
    elif given and not said:
        out.append(Finding("roster", None, "a roster was given, and the run is unsigned"))
    else:
        out.append(Finding("roster", True, f"roster {signing.digest[:12]}, the run's meetings'"))
    if signing is not None and said:
        charter = store.resolve(layout.charter(run))
        out.append(
            Finding("charter", False, "none in this store: no signed record can be of its run")
            if charter is None
            else Finding("charter", True, f"{charter} (two stores that began apart never share it)")
        )
    return out
