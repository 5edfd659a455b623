"""Broken variants of reading a record within its cap (soma.store.values.get_record) and of
`soma status` believing a meeting's about record (soma.round.report);
registered into tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant


@mutant("records_read_unbounded", caught_by=["tests/round/test_bounded_reads.py"])
def _records_read_unbounded() -> None:
    """A record read whole, whatever its size: a planted 1 GB blob costs each reader 1 GB."""
    from soma.store.values import Values

    _replace(Values, "get_record", lambda self, digest: self.get(digest))


@mutant("status_believes_any_about", caught_by=["tests/round/test_status_about.py"])
def _status_believes_any_about() -> None:
    """`soma status` takes a meeting's about record at its word: a forged one says who was
    expected (and how many: 10^7 clients listed)."""
    import soma.round.report as report

    _replace(report, "_about_refusal", lambda store, signing, record, key, name, digest: None)
    report.LISTED = 10**9
