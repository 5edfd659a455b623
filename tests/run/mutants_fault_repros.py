"""Broken variants of the deadline rule at issue 52's two repros (soma.timing
check_fault_deadline, at the shapes tests/run/test_fault_repros.py runs); registered into
tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant

_TESTS = "tests/run/test_fault_repros.py"
# the rule itself, in this process, at the shape (deadline 120 s, patience 105 s)
_RULE = (
    "tests/run/test_fault_deadline.py::"
    "test_a_deadline_shorter_than_patience_plus_grace_is_refused_naming_both_and_the_option"
)


# the rule first (-x stops there; its name passes -k too), then the repro's processes
@mutant("deadline_checked_against_the_patience_alone", caught_by=[_RULE, _TESTS, "-k", "refused"])
def _deadline_checked_against_the_patience_alone() -> None:
    """The grace forgotten: a deadline above the store's patience is taken (the issue's
    deadline 120 s against patience 105 s), and a peer publishes before a note written at
    the patience has stood its grace: exit 0 with another model."""
    import soma.timing

    original = soma.timing.check_fault_deadline

    def check_fault_deadline(deadline, *, option="--deadline", patience=None, grace=20.0):
        return original(deadline, option=option, patience=patience, grace=0.0)

    _replace(soma.timing, "check_fault_deadline", check_fault_deadline)


@mutant("deadline_refused_at_patience_plus_grace", caught_by=[_TESTS, "-k", "ride"])
def _deadline_refused_at_patience_plus_grace() -> None:
    """The least safe deadline refused too (`>` for `>=`): a run at exactly the patience plus
    the grace, which rides a fault inside the patience through, cannot start."""
    import soma.timing

    original = soma.timing.check_fault_deadline

    def check_fault_deadline(deadline, *, option="--deadline", patience=None, grace=20.0):
        original(deadline, option=option, patience=patience, grace=grace + 1e-6)

    _replace(soma.timing, "check_fault_deadline", check_fault_deadline)
