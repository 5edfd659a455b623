"""Broken variants of the round barrier and of meetings of one round that differ
(soma.round); registered into tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant

# --- the round barrier (soma/round/quorum.py, soma/round/average.py) ----------------------------

# each mutant's first test that catches it (the rest of the file adds seconds, not catches)
_ROUND = "tests/round/test_round.py"


@mutant(
    "gather_binds_for_claim",
    caught_by=[_ROUND, "-k", "and_says_a_different_thing_when_complete_and_the_average_never_came"],
)
def _gather_binds_for_claim() -> None:
    import soma.round.once

    def bind_instead(store, place, who, *, check_holder):
        store.bind(place.claimed, who)
        return True

    _replace(soma.round.once, "_claim", bind_instead)


@mutant(
    "gather_never_waits",
    caught_by=[
        "tests/run/test_participation.py::"
        "test_past_the_deadline_the_round_is_averaged_over_whoever_came_if_they_are_a_quorum"
    ],
)
def _gather_never_waits() -> None:
    """A round goes on as soon as anyone is there: with a quorum below the sample, the rest
    are not waited for until the deadline (without one, `_enough` still holds the round)."""
    import soma.round.quorum

    _replace(soma.round.quorum, "_complete", lambda here, clients: bool(here))


@mutant(
    "gather_never_publishes",
    caught_by=[_ROUND, "-k", "the_only_client_of_a_round_averages_it_itself_and_publishes_it"],
)
def _gather_never_publishes() -> None:
    import soma.round.once

    _replace(soma.round.once, "publish", lambda store, name, digest: None)


@mutant(
    "gather_does_not_weigh",
    caught_by=[_ROUND, "-k", "the_size_travels_in_the_record_and_the_average_weighs_by_it"],
)
def _gather_does_not_weigh() -> None:
    import dataclasses

    from soma.round.meeting import Input
    from soma.round.verified_values import VerifiedValues

    real, real_kept = Input.update, VerifiedValues.update

    def update(self, store):
        return dataclasses.replace(real(self, store), size=None)

    def kept_update(self, store, given):  # what the averaging folds: the checks' values
        return dataclasses.replace(real_kept(self, store, given), size=None)

    _replace(Input, "update", update)
    _replace(VerifiedValues, "update", kept_update)


# --- meetings of one round that differ (soma/round/conflicts.py) ----------------------------------


@mutant(
    "elsewhere_never_looks",
    caught_by=["tests/round/test_round.py", "-k", "another_start"],
)
def _elsewhere_never_looks() -> None:
    """A client that joined another meeting of the round is never noticed: both sides wait
    out the deadline and blame each other for never coming."""
    import soma.round.conflicts

    _replace(soma.round.conflicts._Elsewhere, "check", lambda self, waiting: None)


@mutant(
    "elsewhere_counts_averaged_meetings",
    caught_by=["tests/round/test_round.py", "-k", "rival"],
)
def _elsewhere_counts_averaged_meetings() -> None:
    """A meeting of the round already averaged (an earlier run under that name) is taken for
    a rival: a new run is stopped by the old one's records."""
    import soma.round.conflicts

    _replace(soma.round.conflicts._Elsewhere, "_rival", lambda self, key: key != self.meeting.key)


@mutant(
    "elsewhere_leaves_no_note",
    caught_by=["tests/round/test_round.py", "-k", "note"],
)
def _elsewhere_leaves_no_note() -> None:
    """Whoever finds a rival stops without telling it: a rival still training its other
    clients finds only a gone process's records, and waits out its deadline."""
    import soma.round.conflicts

    _replace(soma.round.conflicts._Elsewhere, "_tell", lambda self, key, client: None)
