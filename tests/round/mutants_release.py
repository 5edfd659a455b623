"""Broken variants of a distributed-DP release (soma.round.client, soma.run.step); registered
into tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant


@mutant(
    "release_checked_then_bound",
    caught_by=["tests/round/test_release.py", "-k", "racing"],
)
def _release_checked_then_bound() -> None:
    """The old check-then-act: the release is looked for ("already released?"), then written
    whatever another attempt did meanwhile, so two racing attempts both release."""
    import soma.round.client

    def bound(store, name, digest):
        store.bind(name, digest)
        return True

    _replace(soma.round.client, "_claim_release", bound)


@mutant(
    "restart_trains_a_released_round_again",
    caught_by=["tests/round/test_release.py", "-k", "without_training"],
)
def _restart_trains_a_released_round_again() -> None:
    """No resume: a restarted client trains a round it already released, draws fresh noise."""
    import soma.run.step

    _replace(soma.run.step, "released", lambda store, meeting, mine: None)


@mutant(
    "release_neither_claimed_nor_resumed",
    # the client's step in this process first (-x stops there), then the killed `soma client`
    caught_by=[
        "tests/round/test_release.py",
        "-k",
        "without_training or goes_on_from_its_releases",
    ],
)
def _release_neither_claimed_nor_resumed() -> None:
    """The code before: a distributed-DP export contributed as any other, and a restart trains
    every round again, draws fresh noise, and is refused as a contradiction."""
    import soma.run.step

    _replace(soma.run.step, "releases", lambda strategy: False)
