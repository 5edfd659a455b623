"""Broken variants of checking an average before use (registered into tests/mutants.py)."""

from __future__ import annotations

from mutants import _replace, mutant

_T = "tests/round/test_verify.py::"


@mutant(
    "average_taken_on_faith",
    caught_by=[
        _T + "test_a_garbage_average_signed_by_a_roster_member_is_refused_by_the_next_clients"
    ],
)
def _average_taken_on_faith() -> None:
    """An average is believed once any roster member signed it: never recomputed."""
    import soma.round.verify as mod

    def recompute(store, meeting, record):
        return mod.Recomputed(record.weights, record.state, {})

    _replace(mod, "recompute", recompute)


@mutant(
    "any_member_may_average",
    caught_by=[_T + "test_an_average_signed_by_a_member_who_may_not_average_is_refused"],
)
def _any_member_may_average() -> None:
    """The run's averagers are never consulted: any roster member's average passes."""
    import soma.round.signing as mod

    def may_average(self, client):
        return client in self.members

    _replace(mod.Signing, "may_average", may_average)


@mutant(
    "average_record_checked_by_what_it_says",
    caught_by=[
        _T + "test_every_field_of_the_rounds_identity_is_compared",
        _T + "test_an_average_that_says_it_is_a_tree_or_a_secure_sum_in_a_flat_round_is_refused",
        "tests/audit/test_audit_claims.py",
    ],
)
def _average_record_checked_by_what_it_says() -> None:
    """The record is not compared with the round's identity: what it says it is stands."""
    import soma.round.verify as mod

    _replace(mod, "check_identity", lambda meeting, record: None)


@mutant("tree_average_not_recomputed", caught_by=[_T + "test_a_garbage_tree_average_is_refused"])
def _tree_average_not_recomputed() -> None:
    """A tree's average is said not recomputable (as before its nodes were recomputed)."""
    import soma.round.verify as mod

    real = mod.not_recomputable

    def not_recomputable(meeting, strategy):
        return "a tree of partial means" if meeting.tree is not None else real(meeting, strategy)

    _replace(mod, "not_recomputable", not_recomputable)
