"""The tiers' mutant (tests/tiers.py): the guard that keeps the fast tier in-process."""

import tiers
from mutants import _replace, mutant


@mutant("tier_guard_installs_nothing", caught_by=["tests/test_tiers.py"])
def _tier_guard_installs_nothing() -> None:
    """The guard's installer does nothing: a fast test may start processes unseen."""

    def install(test: str, phase: str) -> None:
        return None

    _replace(tiers, "install", install)
