"""Broken variants of the core guarantees, for proving the suite catches them.

A mutant is a name and a function that monkeypatches one piece of soma with a
broken version. `SOMA_MUTANT=<name>` in the environment applies it: conftest.py
does so for the test process, and every helper script a test starts as a real
subprocess calls `apply_from_environment()` too, so a racing child is as broken
as its parent. tests/test_mutations.py runs the relevant tests under each mutant
and asserts they fail.

Each module that owns a guarantee registers its mutants with `@mutant("name")`
below; patch the module attribute that soma itself looks up at call time.
"""

from __future__ import annotations

import os
from collections.abc import Callable

MUTANTS: dict[str, Callable[[], None]] = {}
# The pytest node ids (or files, or "file -k expr") that must fail under each mutant.
CATCHERS: dict[str, list[str]] = {}


def mutant(
    name: str, *, caught_by: list[str]
) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """Register `apply` as mutant `name`; `caught_by` are the tests that must fail under it."""

    def register(apply: Callable[[], None]) -> Callable[[], None]:
        MUTANTS[name] = apply
        CATCHERS[name] = caught_by
        return apply

    return register


def apply_from_environment() -> str | None:
    name = os.environ.get("SOMA_MUTANT")
    if not name:
        return None
    if name not in MUTANTS:
        raise KeyError(f"unknown mutant {name!r}; known: {sorted(MUTANTS)}")
    MUTANTS[name]()
    return name


# --- fedavg (soma/fedavg.py) -------------------------------------------------


@mutant(
    "fedavg_returns_the_first",
    caught_by=["tests/test_federated.py"],
)
def _fedavg_returns_the_first() -> None:
    import soma.aggregate

    soma.aggregate._fold = lambda mean, export, weight: None


@mutant("fedavg_ignores_sizes", caught_by=["tests/test_federated.py"])
def _fedavg_ignores_sizes() -> None:
    import soma.aggregate

    real = soma.aggregate._size_of
    soma.aggregate._size_of = lambda size, index: real(size, index) and 1.0


@mutant("fedavg_averages_the_integers", caught_by=["tests/test_federated.py"])
def _fedavg_averages_the_integers() -> None:
    import soma.aggregate

    soma.aggregate._averageable = lambda dtype: True
