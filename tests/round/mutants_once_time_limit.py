"""Broken variants of a claimed work's time limit (soma.round.once); registered into
tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant


@mutant(
    "averaging_deaf_to_time_limit",
    # both tests: the one in this process first (-x stops there), then the signalled process
    caught_by=["tests/round/test_once_time_limit.py", "-k", "lets_go"],
)
def _averaging_deaf_to_time_limit() -> None:
    """An averaging that does not listen for Slurm's signal: it computes on into the limit,
    holding its claim (and everyone waiting on it) until it is killed there."""
    import soma.round.once

    _replace(soma.round.once, "_computed", lambda work, inputs, me: work.compute(inputs, me))
