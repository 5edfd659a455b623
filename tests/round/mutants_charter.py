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


_P = "tests/round/test_charter_pin.py::"


@mutant(
    "charter_pin_not_compared",
    caught_by=[
        _P + "test_a_planted_charter_is_refused_by_the_pinned_run_and_taken_without_a_pin",
        _P + "test_an_audit_pinned_to_another_charter_fails_naming_both",
        _P + "test_a_pinned_start_where_the_store_holds_no_charter_claims_none",
        _P + "test_a_pinned_signing_refuses_a_record_under_another_charter",
    ],
)
def _charter_pin_not_compared() -> None:
    """The charter pinned (--charter, config `charter`) is never compared with the store's:
    a run pinned to its own charter takes a planted one, and claims one in a fresh store."""
    import soma.round.signing as mod

    def check_pin(run, found, pinned):
        return None

    _replace(mod, "check_pin", check_pin)
