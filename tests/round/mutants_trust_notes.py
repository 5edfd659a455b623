"""Broken variants of what a waiter believes with a roster (soma.round.lease's leases,
soma.round.conflicts's notes and rival meetings; registered into tests/mutants.py's MUTANTS):
each keeps signed runs working, so that only a forger can catch it."""

from __future__ import annotations

from mutants import _replace, mutant

_LEASE = "tests/round/test_lease_s3.py::"
_LIVE = (
    _LEASE
    + "test_a_lease_nobody_on_the_roster_signed_neither_takes_a_live_holder_over_nor_stops_it"
)
_KILLED = (
    _LEASE + "test_a_signed_holder_killed_under_forged_leases_is_taken_over_once_its_lease_runs_out"
)
# the lease's rules in one process (-x stops there), then the processes on the bucket
_WATCH = "tests/round/test_lease_watch.py::"
_FORGED = (
    _WATCH + "test_leases_nobody_on_the_roster_signed_give_a_dead_holder_three_leases_not_forever"
)
_OLD = _WATCH + "test_a_dead_holders_own_old_leases_bound_again_are_no_renewal"
_SWAPPED_BACK = _WATCH + "test_a_lease_overwritten_by_nobody_on_the_roster_is_swapped_back_and_kept"
_APART = "tests/round/test_conflicts_signed.py::"
_RIVAL = _APART + "test_a_forged_rival_meeting_stops_no_signed_round"
_NOTE = _APART + "test_a_forged_apart_note_stops_no_signed_round"
_TOLD = _APART + "test_a_signed_client_in_another_meeting_is_still_told_and_its_note_heeded"


@mutant("lease_forged_holds_nothing", caught_by=[_FORGED, _LIVE])
def _lease_forged_holds_nothing() -> None:
    """A lease nobody on the roster signed counts as no holder: taken over at once."""
    import soma.round.lease as lease

    real = lease.Watch.gone

    def gone(self, place: str, name: str, digest: str) -> bool:
        found = lease.read(self.store, self.signing, place)
        if found is not None and found[1] is None:
            return True
        return real(self, place, name, digest)

    _replace(lease.Watch, "gone", gone)


@mutant("lease_forged_restarts_the_clock", caught_by=[_FORGED, _KILLED])
def _lease_forged_restarts_the_clock() -> None:
    """Any new lease there, believed or not, restarts a waiter's clock: a dead holder is
    never taken over while a forger keeps writing."""
    import soma.round.lease as lease

    real = lease.Watch.gone

    def gone(self, place: str, name: str, digest: str) -> bool:
        found = self.store.resolve_tagged(lease.layout.lease(place))
        tag = None if found is None else found[1]
        if tag != getattr(self, "_mutant_tag", None):
            self._mutant_tag = tag
            self.lease, self.since = None, self.clock()
        return real(self, place, name, digest)

    _replace(lease.Watch, "gone", gone)


@mutant("lease_old_record_is_a_renewal", caught_by=[_OLD, _KILLED])
def _lease_old_record_is_a_renewal() -> None:
    """A believed lease other than the last seen counts as a renewal: a genuine old lease
    bound again keeps a dead holder alive."""
    import soma.round.lease as lease

    def _further(terms, than) -> bool:  # noqa: ANN001
        return terms != than

    _replace(lease, "_further", _further)


@mutant("lease_holder_gives_up_on_a_forged_lease", caught_by=[_SWAPPED_BACK, _LIVE])
def _lease_holder_gives_up_on_a_forged_lease() -> None:
    """A holder whose swap is refused takes the lease for lost, whoever overwrote it: it
    stops renewing, and is taken over while it computes."""
    import soma.round.lease as lease

    def _swap(self, terms):  # noqa: ANN001, ANN202
        name = lease.layout.lease(self.place)
        by = lease.signer(self.signing)
        digest = lease.signatures.put(self.store, self.signing, terms.value(), name=name, by=by)
        return self.store.swap(name, self.tag, digest)

    _replace(lease.Lease, "_swap", _swap)


@mutant("apart_rival_about_unchecked", caught_by=[_RIVAL])
def _apart_rival_about_unchecked() -> None:
    """Any meeting of the round is a rival, whoever wrote its about."""
    import soma.round.conflicts as conflicts

    def _rival(self, key: str) -> bool:
        other = conflicts.layout.meeting(self.meeting.run, self.meeting.round, key)
        average = conflicts.layout.average(other)
        return key != self.meeting.key and self.store.resolve(average) is None

    _replace(conflicts._Elsewhere, "_rival", _rival)


@mutant("apart_note_unchecked", caught_by=[_NOTE])
def _apart_note_unchecked() -> None:
    """A note is believed whoever wrote it."""
    import soma.round.conflicts as conflicts

    def _signed(self, name: str, what: str) -> bool:
        return what == "an apart note" or real(self, name, what)

    real = conflicts._Elsewhere._signed
    _replace(conflicts._Elsewhere, "_signed", _signed)


@mutant("apart_note_left_unsigned", caught_by=[_TOLD])
def _apart_note_left_unsigned() -> None:
    """The finder leaves its note unsigned: a rival whose finder is gone never learns."""
    import soma.round.conflicts as conflicts

    real = conflicts.signing_as

    def signing_as(meeting, by):  # noqa: ANN001, ANN202
        return None if by is not None else real(meeting, by)

    _replace(conflicts, "signing_as", signing_as)


@mutant("announce_unsigned", caught_by=[_TOLD])
def _announce_unsigned() -> None:
    """A meeting's about is written unsigned: no other meeting believes it is a rival."""
    import soma.round.client as client

    def announce(store, meeting, *, by=None) -> None:  # noqa: ANN001
        if store.resolve(meeting.about) is None:
            about = {"run": meeting.run, "round": meeting.round, **meeting.identity()}
            store.claim(meeting.about, store.put_value(about))

    _replace(client, "announce", announce)
