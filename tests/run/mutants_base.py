"""Broken variants of a task's frozen base (soma.run.base; registered into tests/mutants.py's
MUTANTS)."""

from __future__ import annotations

from mutants import _replace, mutant

_BOUND = [
    "tests/run/test_base.py",
    "tests/tasks/test_adapters.py",
    "-k",
    "joins_the_identity or names_its_base or bound_into_the_identity",
]


@mutant("base_not_bound_into_the_identity", caught_by=_BOUND)
def _base_not_bound_into_the_identity() -> None:
    """The base is put in the store but the run's identity never names it: clients on other
    bases would meet, and a model file would miss it."""
    import soma.run.base

    original = soma.run.base.keep

    def keep(spec, store, task):
        original(spec, store, task)
        return spec

    _replace(soma.run.base, "keep", keep)


@mutant("base_change_unchecked", caught_by=["tests/run/test_base.py", "-k", "refused_naming"])
def _base_change_unchecked() -> None:
    """A workflow job whose base file changed since the start trains on it unchallenged."""
    import soma.run.base

    _replace(soma.run.base, "check", lambda task, seed, run, recorded: None)
