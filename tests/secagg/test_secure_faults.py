"""A secure sum is never unmasked around a client whose store failed, at any deadline (issue
52, as soma.round.client.Faults for a plain round): a fault note written while a barrier waits
stops it at once; one that was there as it began (maybe an earlier attempt's) stands for the
grace, and past the deadline the barrier waits for it rather than going on without the
client; a note nobody can vouch for stops and holds nothing."""

from __future__ import annotations

import pytest

from soma.config.spec import RunSpec
from soma.round.once import POLL
from soma.secagg import roster
from soma.secagg.roster import PeerStoreFault, barrier_digest, note_fault
from soma.secagg.session import Session
from soma.store import Store
from soma.timing import DeadlineTooShort, Timing

PREFIX = "run/round/0/secagg"


@pytest.fixture
def store(tmp_path) -> Store:
    """Clients 0-2 of 4 through phase `keys` (threshold 3), client 3 not."""
    opened = Store(tmp_path / "s")
    session = Session(PREFIX, (0, 1, 2, 3), 3)
    for k in range(3):
        opened.bind(session.name("keys", k), opened.put(f"client {k}".encode()))
    return opened


def session() -> Session:
    return Session(PREFIX, (0, 1, 2, 3), 3)


def test_a_note_written_while_the_barrier_waits_stops_it_at_once(store: Store) -> None:
    polls = []

    def note_then_sleep(seconds: float) -> None:  # the client's store fails as the peer waits
        if not polls:
            note_fault(store, session(), 3, "the store failed (StoreUnavailable: 503)")
        polls.append(seconds)

    with pytest.raises(PeerStoreFault, match="the store failed client 3's part"):
        barrier_digest(store, session(), "keys", deadline=3600, backoff=POLL, sleep=note_then_sleep)
    assert len(polls) == 1, "stopped at the first look after the note, not after a grace"
    assert store.resolve(session().name("roster", "keys")) is None


def test_past_the_deadline_a_standing_note_is_waited_for_not_averaged_around(
    store: Store, monkeypatch
) -> None:
    monkeypatch.setattr(roster, "FAULT_GRACE", 0.2)  # the grace an earlier attempt's note gets
    note_fault(store, session(), 3, "the store failed (OSError: [Errno 5])")
    with pytest.raises(PeerStoreFault, match="client 3"):
        barrier_digest(store, session(), "keys", deadline=0, backoff=POLL)
    assert store.resolve(session().name("roster", "keys")) is None


def test_a_note_nobody_vouches_for_holds_nothing_up(store: Store) -> None:
    store.bind(session().name("fault", 3), store.put(b"not a record"))
    digest = barrier_digest(store, session(), "keys", deadline=0, backoff=POLL)
    assert digest == store.resolve(session().name("roster", "keys"))


def test_a_secure_run_whose_deadline_would_give_up_on_a_retrying_store_is_refused() -> None:
    """Hosting some of the clients, with a threshold below them: the barrier may go on
    without one past its deadline, which must outlast the store's patience and the grace."""
    spec = RunSpec(run="r", task="soma.tasks.control", clients=4, rounds=1, secure=3,
                   mine=(0,), given="args", timing=Timing(deadline=60))  # fmt: skip
    with pytest.raises(DeadlineTooShort, match="--deadline 60s is shorter than"):
        spec.check()
    RunSpec(run="r", task="soma.tasks.control", clients=4, rounds=1, secure=3, mine=(0,),
            given="args", timing=Timing(deadline=3600)).check()  # fmt: skip
