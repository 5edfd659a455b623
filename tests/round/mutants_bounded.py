"""Broken variants of reading a record within its cap (soma.store.values.get_record);
registered into tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant


@mutant("records_read_unbounded", caught_by=["tests/round/test_bounded_reads.py"])
def _records_read_unbounded() -> None:
    """A record read whole, whatever its size: a planted 1 GB blob costs each reader 1 GB."""
    from soma.store.values import Values

    _replace(Values, "get_record", lambda self, digest: self.get(digest))
