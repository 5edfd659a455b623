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

import inspect
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


def _replace(module: object, name: str, broken: Callable) -> None:
    """Patch `module.name` with `broken`, which must take the same parameters: a mutant that
    drifted from what it replaces would be caught by a TypeError, not by the tests."""
    original = getattr(module, name)
    wanted = list(inspect.signature(original).parameters)
    given = list(inspect.signature(broken).parameters)
    if wanted != given:
        raise TypeError(f"mutant for {name} takes {given}, the real one {wanted}")
    setattr(module, name, broken)


def apply_from_environment() -> str | None:
    name = os.environ.get("SOMA_MUTANT")
    if not name:
        return None
    if name not in MUTANTS:
        raise KeyError(f"unknown mutant {name!r}; known: {sorted(MUTANTS)}")
    MUTANTS[name]()
    return name


def _register_every_package() -> None:
    """Import every `mutants_*.py` under tests/ (each package's beside the tests that catch
    them); each registers its mutants with `@mutant` on import."""
    import importlib.util
    import sys
    from pathlib import Path

    seen: dict[str, Path] = {}
    for path in sorted(Path(__file__).parent.glob("**/mutants_*.py")):
        if path.stem in seen:  # one module name each: a second would hide the first's mutants
            raise RuntimeError(f"two mutants files named {path.stem}: {seen[path.stem]}, {path}")
        seen[path.stem] = path
        if path.stem in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)


_register_every_package()
