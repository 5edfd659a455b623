"""A run audited from its store alone: every meeting of every round (soma.audit.rounds),
then the chain and the privacy ledger across them (soma.audit.across).

Read-only: it resolves names, lists them and reads blobs, and never binds, claims, puts or
forgets anything, so anyone who can read the store (a third party, a journal's reviewer) can
run it, and running it changes nothing a run or another reader sees.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from soma.audit import roster as rosters
from soma.audit.across import check_chain, check_ledger, check_start, check_total
from soma.audit.findings import AuditReport, Finding
from soma.audit.rounds import audit_meeting
from soma.round import layout
from soma.round import signing as signatures
from soma.round.meeting import Meeting
from soma.round.report import check_run
from soma.store import Store


def audit(
    store: Store,
    run: str,
    roster: str | Path | None = None,
    averagers: Iterable[int] | None = None,
    rounds: int | None = None,
    charter: str | None = None,
) -> AuditReport:
    """Every round of `run` checked (see soma.audit): the report, whose `failure()` names
    the first broken round. `roster` is the auditor's roster file; without one, the roster
    is read back from the store (and labelled not anchored), or the run is unsigned.
    `averagers` are those the run declared (its roster's digest covers them; refused when
    not the charter's, signing.for_reader). `rounds` is how many rounds the reader says the
    run was configured for (--rounds; the run signs it nowhere: soma.audit.across.check_total);
    None: how many the store holds is said, unchecked. `charter` is the digest the reader
    pinned the run's charter to (--charter; None: the store's is taken on first use, said as a
    check not made). An asynchronous run's versions are replayed instead
    (soma.audit.asynchronous)."""
    from soma.asynchronous.status import is_asynchronous
    from soma.audit.asynchronous import audit_versions

    if is_asynchronous(store, run):
        report = audit_versions(store, run, roster, averagers)
        if rounds is not None:
            said = f"--rounds {rounds} is not checked: an asynchronous run has versions, not rounds"
            report.findings.append(Finding("rounds", None, said))
        if report.roster_digest is not None or charter is not None:  # a signed run's charter
            report.findings += _charter_findings(run, report.charter, charter)
        return report
    found = check_run(store, run)
    said = rosters.roster_digests(store, run, found)
    if roster is not None:
        signing: signatures.Signing | None = signatures.for_reader(store, run, roster, averagers)
        label = f"{rosters.GIVEN}: {roster}"
    elif said:
        signing = rosters.from_store(store, run, found, said, averagers)
        label = rosters.FROM_STORE
    else:
        signing, label = None, rosters.UNSIGNED
    report = AuditReport(str(store.directory), run, label)
    report.roster_digest = None if signing is None else signing.digest
    report.charter = store.resolve(layout.charter(run))
    report.findings += _run_findings(store, run, signing, said, roster is not None, charter)
    meetings: dict[int, Meeting] = {}
    for r, key in found:
        audited, meeting = audit_meeting(store, run, r, key, signing if said else None)
        if meeting is not None:
            meetings[len(report.rounds)] = meeting
        report.rounds.append(audited)
    check_chain(report.rounds)
    report.findings += check_start(report.rounds)
    report.findings.append(check_total(report.rounds, rounds))
    check_ledger(store, report.rounds, meetings)
    return report


def _run_findings(
    store: Store,
    run: str,
    signing: signatures.Signing | None,
    said: set[str],
    given: bool,
    charter: str | None = None,
) -> list[Finding]:
    """What concerns the run as a whole: names where a round belongs (never skipped),
    whether the roster given is the one the run's meetings name, and the run's charter
    (against the one pinned, `charter`)."""
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
                f"meetings name ({', '.join(sorted(d[:12] for d in said))})"
                + ("" if signing.averagers else " (did the run declare averagers? --averagers)"),
            )
        )
    elif given and not said:
        out.append(Finding("roster", None, "a roster was given, and the run is unsigned"))
    else:
        out.append(Finding("roster", True, f"roster {signing.digest[:12]}, the run's meetings'"))
    if (signing is not None and said) or charter is not None:
        out += _charter_findings(run, store.resolve(layout.charter(run)), charter)
    return out


def _charter_findings(run: str, found: str | None, pinned: str | None) -> list[Finding]:
    """The run's charter in the store (`found`; None: none) against the one the reader
    pinned (`pinned`, --charter: another, or none, fails, naming both); not pinned, it was
    taken on first use, which is said as a check not made (a charter copied from another
    store's run, with its records, before the run began, is what a pin refuses)."""
    try:
        signatures.check_pin(run, found, pinned)
    except signatures.SigningError as error:
        return [Finding("charter", False, str(error))]
    if found is None:
        return [Finding("charter", False, "none in this store: no signed record can be of its run")]
    if pinned is not None:
        return [Finding("charter", True, f"{found}, the one pinned (--charter)")]
    return [
        Finding("charter", True, f"{found} (two stores that began apart never share it)"),
        Finding(
            "charter",
            None,
            f"charter {found[:12]}: taken on first use; pin it (--charter) to refuse a planted one",
        ),
    ]
