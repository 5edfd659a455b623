"""Broken variants of what a waiting process says (soma.round.waiting) and of who computed
an average (soma.round.holders.averaged); registered into tests/mutants.py's MUTANTS.

The catchers are fast and in-process; tests/round/test_waiting.py's two `soma client`
processes and tests/workflow/test_sites.py's two sites catch them too, more slowly."""

from __future__ import annotations

from mutants import _replace, mutant

_WAITING = "tests/round/test_waiting.py"


# the site test waits out its 60 s deadline when nothing is said: the holder test fails at once
_HELD = _WAITING + "::test_a_process_waiting_for_an_average_another_holds_names_its_site_and_host"


@mutant("a_wait_is_silent", caught_by=[_HELD])
def _a_wait_is_silent() -> None:
    """A waiting process says nothing, however long it waits."""
    from soma.round import waiting

    _replace(waiting.Waiting, "tick", lambda self, whom, *args: None)


@mutant("a_wait_names_nobody", caught_by=[_WAITING, "-k", "names and not soma_client"])
def _a_wait_names_nobody() -> None:
    """A waiting process says it waits, but not for whom."""
    import time

    from soma.round import waiting

    def tick(self, whom, *args):
        now = time.monotonic()
        if now >= self.due:
            self.due = now + self.interval
            waiting.LOG.info("%s: waited %d s so far", self.what, now - self.started)

    _replace(waiting.Waiting, "tick", tick)


@mutant("holder_names_no_site", caught_by=[_WAITING, "-k", "names and not soma_client"])
def _holder_names_no_site() -> None:
    """A holder's record leaves out its site: the others name it by host and pid alone."""
    from soma.round import holders

    me = holders.me

    def without_site(*, site=None, **extra):
        return me(**extra)

    _replace(holders, "me", without_site)


@mutant("everyone_computed_the_average", caught_by=[_WAITING, "-k", "who_computed"])
def _everyone_computed_the_average() -> None:
    """Every process says it computed the average here, whoever did."""
    from soma.round import holders

    _replace(holders, "is_me", lambda holder: isinstance(holder, dict))
