"""soma.strategies.REPORTS_PRIVACY names exactly the built-ins that report the privacy a run
spent: `soma status` asks no other built-in (soma.round.report.privacy_spent), so a built-in
that gained a `privacy_spent` hook without being named there would have its epsilon hidden."""

from __future__ import annotations

import importlib

from soma.strategies import BUILTIN, REPORTS_PRIVACY, Strategy


def _overrides_privacy_spent(name: str) -> bool:
    """Whether the built-in's module defines a strategy class with its own privacy_spent
    (read from the classes, not by making one: some need options to be made)."""
    module = importlib.import_module(BUILTIN[name])
    default = Strategy.privacy_spent
    return any(
        isinstance(value, type)
        and value.__module__ == module.__name__
        and callable(getattr(value, "privacy_spent", None))
        and value.privacy_spent is not default
        for value in vars(module).values()
    )


def test_the_privacy_reporters_are_the_builtins_with_their_own_privacy_spent() -> None:
    assert {name for name in BUILTIN if _overrides_privacy_spent(name)} == set(REPORTS_PRIVACY)
