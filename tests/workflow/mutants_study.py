"""Broken variants of studies (soma.config.study, soma.workflow.study), registered into
tests/mutants.py's MUTANTS."""

from __future__ import annotations

import statistics

from mutants import _replace, mutant


@mutant("study_start_per_point", caught_by=["tests/workflow/test_study.py", "-k", "start_alike"])
def _study_start_per_point() -> None:
    """Every point of a study starts on its own: a start job per point, not per start."""
    import soma.config.study

    _replace(soma.config.study, "start_groups", lambda study: [[p] for p in study.points])


@mutant(
    "study_std_of_the_population", caught_by=["tests/workflow/test_study.py", "-k", "mean_and_std"]
)
def _study_std_of_the_population() -> None:
    """The spread over seeds divides by n, not n - 1."""
    import soma.workflow.study

    _replace(
        soma.workflow.study,
        "spread",
        lambda values: (statistics.fmean(values), statistics.pstdev(values)),
    )
