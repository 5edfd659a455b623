"""Broken variants of "a fault is never averaged around, at any deadline" (issue 52, item 1:
soma.round.client.Faults, soma.round.average, soma.timing.check_fault_deadline); registered
into tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant

_TESTS = "tests/run/test_fault_deadline.py"


@mutant(
    "fault_note_waits_its_grace",
    caught_by=[_TESTS, "-k", "note_written_while or standing_note or lands_late"],
)
def _fault_note_waits_its_grace() -> None:
    """As before issue 52: a peer stops on a fault note only once it has stood the grace,
    however new, and past the deadline publishes its quorum without waiting for it: a note
    that lands late is averaged around, exit 0 with another model."""
    import time

    import soma.round.client as client

    def check(self, missing):
        store, meeting = self.store, self.meeting
        noted = set(store.bound(client.layout.faults(meeting.prefix)))
        now = time.monotonic()
        for k in missing:
            name = client.layout.fault(meeting.prefix, k, meeting.clients)
            digest = store.resolve(name) if name in noted else None
            if digest is None or now - self.seen.setdefault((k, digest), now) < self.grace:
                continue
            why = client._fault_of(store, meeting, k, name, digest)
            if why is not None:
                raise client.StoreFailedPeer(f"{meeting.what} stops: client {k}'s part ({why})")

    _replace(client.Faults, "check", check)


@mutant("short_deadline_taken", caught_by=[_TESTS, "-k", "refused"])
def _short_deadline_taken() -> None:
    """A quorum's deadline shorter than the store's patience plus the grace is taken: the
    quorum averages around a client whose store is still retrying."""
    import soma.timing

    def check_fault_deadline(deadline, *, option="--deadline", patience=None, grace=20.0):
        return None

    _replace(soma.timing, "check_fault_deadline", check_fault_deadline)


@mutant("store_fault_left_out_as_never_came", caught_by=[_TESTS, "-k", "says_store_fault"])
def _store_fault_left_out_as_never_came() -> None:
    """An average that went on without a client whose fault note is there says it "never
    came" (what `soma status` said in the issue): its store failed it, it came."""
    import soma.round.average

    _replace(soma.round.average, "noted_faults", lambda store, meeting, clients: {})
