"""Broken variants of a run's charter (registered into tests/mutants.py's MUTANTS)."""

from __future__ import annotations

from mutants import _replace, mutant

_T = "tests/round/test_charter.py::"


@mutant(
    "signatures_bind_no_run",
    caught_by=[_T + "test_signed_records_copied_into_another_store_do_not_verify"],
)
def _signatures_bind_no_run() -> None:
    """Every signature binds the run's name only, as before the charter: a record copied
    from another store's run verifies."""
    import soma.round.signing as mod

    def run_value(store, signing, name, *, by):
        return name.split("/", 1)[0]

    _replace(mod, "run_value", run_value)
