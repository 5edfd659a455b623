"""Broken variants of a secure barrier's fault notes (soma.secagg.roster); registered into
tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant

_FAULTS = "tests/secagg/test_secure_faults.py::"


# the two tests it breaks: past the deadline first (it fails at once), then the note written
# while the barrier waits (its polls run the grace out on the clock, some 20 s, before it fails)
@mutant(
    "secure_sum_around_a_store_fault",
    caught_by=[
        _FAULTS + "test_past_the_deadline_a_standing_note_is_waited_for_not_averaged_around",
        _FAULTS + "test_a_note_written_while_the_barrier_waits_stops_it_at_once",
    ],
)
def _secure_sum_around_a_store_fault() -> None:
    """The barrier before issue 52: every note waits out the grace from when it is noticed,
    and past the deadline the roster goes on without a client whose note still stands."""
    import time

    import soma.secagg.roster as roster

    def after_its_grace(store, session, awaited, noticed, vouched, before):
        now = time.monotonic()
        found = roster.clients_in(store, session.name("fault") + "/", awaited)
        for k, digest in sorted(found.items()):
            if now - noticed.setdefault((k, digest), now) < roster.FAULT_GRACE:
                continue
            raise roster.PeerStoreFault(f"the store failed client {k}'s part")
        return []

    _replace(roster, "_stop_on_fault", after_its_grace)
