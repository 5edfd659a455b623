"""Broken variants of the RO-Crate a failed audit writes (soma.audit.crate, issue 52: "a failed
audit's PROV and RO-Crate say failed and name the failed checks"); registered into
tests/mutants.py's MUTANTS. The PROV-JSON side's mutant is tests/audit/mutants_audit.py's
audit_prov_verdict_left_out."""

from __future__ import annotations

from mutants import _replace, mutant

_FAILED = (
    "tests/audit/test_provenance.py::"
    "test_a_failed_audit_writes_provenance_and_a_crate_saying_failed"
)


@mutant("crate_run_completed_whatever_the_verdict", caught_by=[_FAILED])
def _crate_run_completed_whatever_the_verdict() -> None:
    """The run's CreateAction is CompletedActionStatus, with no error, even when a check
    failed: a failed run's crate reads like a clean one's."""
    import soma.audit.crate as mod

    original = mod.metadata

    def metadata(report, started=None, ended=None):
        value = original(report, started, ended)
        for entity in value["@graph"]:
            if entity.get("@id") == "#run":
                entity["actionStatus"] = {"@id": mod.COMPLETED}
                entity.pop("error", None)
        return value

    _replace(mod, "metadata", metadata)


@mutant("crate_verdict_left_out", caught_by=[_FAILED])
def _crate_verdict_left_out() -> None:
    """The crate holds no verdict and names no failed check (nor any not made)."""
    import soma.audit.crate as mod

    _replace(mod, "_verdict", lambda report: ([], []))
