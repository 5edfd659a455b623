"""Broken variants of the holder check (soma.round.holders: is a claim's holder provably
gone?); registered into tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant

# --- slurm (soma/round/holders.py: is the holder of a claim provably gone?) -----------------------
# Taking over an averaging is safe only when its holder is provably gone.
# tests/slurm/test_slurm_faults.py checks it against real Slurm jobs; these catchers are fast
# and in-process, because Snakemake's jobs never apply a mutant.


@mutant(
    "holders_never_gone",
    caught_by=[
        "tests/round/test_round.py::test_a_holder_that_is_provably_gone_is_taken_over_and_the_average_published_once"
    ],
)
def _holders_never_gone() -> None:
    """Nobody is ever proven gone: a dead averager wedges its round forever."""
    import soma.round.holders

    _replace(soma.round.holders, "gone", lambda holder: False)


@mutant(
    "holders_always_gone",
    caught_by=[
        "tests/round/test_round.py::test_and_says_a_different_thing_when_complete_and_the_average_never_came"
    ],
)
def _holders_always_gone() -> None:
    """Everybody is gone: a live averager is taken over, and a round may average twice."""
    import soma.round.holders

    _replace(soma.round.holders, "gone", lambda holder: True)
