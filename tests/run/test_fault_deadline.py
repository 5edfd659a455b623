"""A fault is never averaged around, at any deadline (issue 52, item 1).

A client whose store fails retries for the store's patience, then writes a fault note; its
peers stop on the note (soma.round.client.Faults): at once when it was written while they
waited, after the grace (soma.timing.FAULT_GRACE) when it was there before them, and past
their deadline they wait for that rather than average around it. A quorum's deadline shorter
than the patience plus the grace is refused at start (soma.timing.check_fault_deadline).

The issue's timings (deadline 30 s against a 45 s window; deadline 120 s, patience 105 s,
window 140 s) are scaled down: what matters is the relation of the deadline to the patience
plus the grace, and that the note lands after the grace would have let the peers publish.
Either the run ends with the fault-free model or every process exits non-zero, loudly;
never exit 0 with another model.
"""

from __future__ import annotations

import os

import pytest
import torch
from figures import FIGURES, printed
from helpers import FAULT_RUN, fault_clients

from soma.round import Meeting, contribute, layout, records
from soma.round.client import Faults, StoreFailedPeer, note_fault
from soma.store import Store
from soma.timing import FAULT_GRACE, LEASE, DeadlineTooShort, check_fault_deadline

CLIENTS = 4
ROWS = {  # the reliability figures' rows (tests/figures.py) these tests count
    ("short", "folder"): "deadline < patience+grace",
    ("short", "bucket"): "deadline < patience+grace S3",
    ("late", "folder"): "fault note lands late",
    ("late", "bucket"): "fault note lands late, S3",
}


@pytest.fixture(scope="module", autouse=True)
def figures(request):
    yield
    printed(request, list(ROWS.values()))


def counted(row: tuple[str, str], done, said: str) -> None:
    """One trial of `row`: detected when every process failed saying `said`; different when
    one finished (nothing was averaged with client 3, so any exit 0 is another model)."""
    figures = FIGURES[ROWS[row]]
    figures["trials"] += 1
    figures["faults"] += 1
    figures["detected"] += all(code != 0 and said in err for code, err in done)
    figures["different"] += any(code == 0 for code, _ in done)


def weights(value: float) -> dict:
    return {"fc": {"weight": torch.full((8,), value)}}


# --- in process ------------------------------------------------------------------------------


def test_a_deadline_shorter_than_patience_plus_grace_is_refused_naming_both_and_the_option():
    with pytest.raises(DeadlineTooShort) as refused:
        check_fault_deadline(30.0, option="--deadline", patience=45.0)
    said = str(refused.value)
    assert "\n" not in said
    assert "--deadline 30s" in said and "patience 45s" in said, said
    assert f"grace {FAULT_GRACE:g}s" in said and "SOMA_STORE_PATIENCE" in said, said
    assert f"at least {45 + FAULT_GRACE:g}" in said, said
    with pytest.raises(DeadlineTooShort, match="deadline 120s .* patience 105s"):
        check_fault_deadline(120.0, option="deadline", patience=105.0)
    check_fault_deadline(105.0 + FAULT_GRACE, patience=105.0)  # exactly enough: taken
    check_fault_deadline(None, patience=105.0)  # for ever: taken


def test_the_refusal_reads_the_stores_patience_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("SOMA_STORE_PATIENCE", "3")
    check_fault_deadline(3 + FAULT_GRACE)
    with pytest.raises(DeadlineTooShort, match="patience 3s"):
        check_fault_deadline(2 + FAULT_GRACE)


def test_a_note_written_while_a_peer_waits_stops_it_at_once_and_an_older_one_stands(
    tmp_path,
) -> None:
    store = Store(tmp_path)
    meeting = Meeting("f", 0, 3, quorum=2)
    waiting = Faults(store, meeting, grace=3600.0)
    assert waiting.check([2]) == []
    note_fault(store, meeting, 2, "the store failed (StoreUnavailable: 503 SlowDown)")
    with pytest.raises(StoreFailedPeer, match="client 2's part .*503 SlowDown"):
        waiting.check([2])  # no grace: it was written while this process waited
    later = Faults(store, meeting, grace=3600.0)
    assert later.check([2]) == [2]  # there before it looked: it stands, for the grace
    assert later.check([2]) == [2]


def test_past_the_deadline_a_standing_note_holds_the_quorum_until_it_stops_the_round(
    tmp_path, monkeypatch
) -> None:
    """The issue's second repro in process: the quorum is there and the deadline has
    passed, and client 2's note has not stood its grace yet. Before, the round was averaged
    around client 2 at once; now it waits for the note, which then stops it."""
    import soma.round.client
    from soma.round import Backoff, average_round

    monkeypatch.setattr(soma.round.client, "FAULT_GRACE", 0.3)
    store = Store(tmp_path)
    meeting = Meeting("f", 0, 3, quorum=2)
    for k in (0, 1):
        contribute(store, meeting, weights(k), mine=k, size=10)
    note_fault(store, meeting, 2, "the store failed (OSError: [Errno 5] Input/output error)")
    with pytest.raises(StoreFailedPeer, match="client 2's part .*Input/output error"):
        average_round(
            store, meeting, deadline=0.0, backoff=Backoff(first=0.01, cap=0.05), lease=LEASE
        )
    assert store.resolve(meeting.average) is None, "the quorum was averaged around the fault"


def test_an_average_that_left_a_noted_client_out_says_store_fault_not_never_came(
    tmp_path,
) -> None:
    """The workflow's averaging job averages the inputs its client jobs reported: a client
    whose note is in the store is left out as a store fault (`soma status` says so)."""
    from soma.round import average_inputs, present, quorum

    store = Store(tmp_path)
    meeting = Meeting("f", 0, 4, quorum=3)
    for k in (0, 1, 2):
        contribute(store, meeting, weights(k), mine=k, size=10)
    note_fault(store, meeting, 3, "the store failed (StoreUnavailable: 503 SlowDown)")
    came = quorum.roll_call(store, meeting, present(store, meeting))[0]
    digest = average_inputs(store, meeting, came, deadline=5, lease=LEASE)
    left = {e["client"]: e["why"] for e in records.read_average(store, digest).left_out}
    assert list(left) == [3], left
    assert left[3].startswith("store fault: ") and "503 SlowDown" in left[3], left
    assert store.resolve(layout.fault(meeting.prefix, 3, CLIENTS)) is not None


# --- `soma client` processes, the fault planted in client 3 ----------------------------------


def clients(store, *, deadline: float, patience: float, plant: str | None = None, env=None):
    """`soma client` for each of 4 digits clients (quorum 3, FedAdam, 1 round), all at once,
    with SOMA_STORE_PATIENCE=`patience` in each, `plant` (tests/fault_worker.py) in client 3's
    process and `env(k)` beside each one's environment; each one's return code and stderr."""
    args = ["client", "--store", str(store), "--run", "f", "--rounds", "1", *FAULT_RUN]
    args += ["--deadline", f"{deadline:g}"]

    def environment(k: int) -> dict[str, str]:
        return {"SOMA_STORE_PATIENCE": f"{patience:g}", **(env(k) if env else {})}

    done = fault_clients(args, plant=plant, faulty=3, env=environment)
    return [(code, err) for code, _, err in done]


def last_line(err: str) -> str:
    return err.strip().splitlines()[-1] if err.strip() else ""


def assert_every_process_refused(done, deadline: float, patience: float) -> None:
    for k, (code, err) in enumerate(done):
        said = last_line(err)
        assert code != 0, f"client {k} exited 0: the short deadline was not refused"
        assert said.startswith("soma: "), err[-2000:]
        assert "shorter than the store's patience" in said, said
        assert f"{deadline:g}s" in said and f"patience {patience:g}s" in said, said
        assert "--deadline" in said, said


def assert_every_process_stopped_on_client_3s_fault(done, store: Store) -> None:
    for k, (code, err) in enumerate(done):
        said = last_line(err)
        assert code != 0, f"client {k} exited 0 with a round averaged around client 3's fault"
        assert said.startswith("soma: "), err[-2000:]
        if k == 3:
            assert "client 3 cannot take part in round 0" in said, said
        else:
            assert "stops: the store failed client 3's part" in said, said
    names = store.bound("f/round/0/")
    assert not [n for n in names if n.endswith("/average")], "round 0 was averaged without 3"
    assert [n for n in names if n.endswith("/fault/3")], names


def test_on_a_folder_a_deadline_shorter_than_patience_plus_grace_is_refused_by_every_process(
    tmp_path,
) -> None:
    """The issue's first repro scaled: client 3's claim fails for ~16 s (8 EIOs, retried),
    inside a patience of 30 s, and the quorum's deadline is 10 s: it would be averaged around
    client 3 with exit 0. Every process refuses the deadline at start, writing nothing."""
    store = tmp_path / "store"
    done = clients(store, deadline=10, patience=30, plant="EIO:/client/3:8")
    counted(("short", "folder"), done, "shorter than the store's patience")
    assert_every_process_refused(done, 10, 30)
    assert not (store.exists() and Store(store).bound("f/")), "something was written"


def test_on_a_folder_a_note_that_lands_late_stops_every_peer_before_the_deadline(tmp_path):
    """The issue's second repro scaled: the deadline is the patience (3 s) plus the grace;
    client 3's claim fails past its patience, and its note lands 6 s late (a slow file
    server). Before, the peers published at the deadline, the note not having stood its
    grace: exit 0 with another model. Now every process fails naming client 3's fault."""
    store = tmp_path / "store"
    deadline = 3 + FAULT_GRACE
    done = clients(store, deadline=deadline, patience=3, plant="EIO:/client/3:0,SLOW:/fault/3:6")
    counted(("late", "folder"), done, "client 3")
    assert_every_process_stopped_on_client_3s_fault(done, Store(store))


@pytest.mark.s3
def test_on_a_bucket_a_deadline_shorter_than_patience_plus_grace_is_refused_by_every_process(
    bucket,
) -> None:
    """The first repro on SeaweedFS: 503s to client 3's record for ~16 s inside a patience of
    30 s, deadline 10 s: refused at start by every process, nothing written."""
    from s3_bucket import BUCKET
    from s3_faults import FaultProxy

    store = f"s3://{BUCKET}/deadline-{os.getpid()}-refused"
    with FaultProxy(os.environ["AWS_ENDPOINT_URL"]) as proxy:
        proxy.slow_down(8, "PUT", path="/client/3")
        done = clients(
            store, deadline=10, patience=30,
            env=lambda k: {"AWS_ENDPOINT_URL": proxy.url} if k == 3 else {},
        )  # fmt: skip
    counted(("short", "bucket"), done, "shorter than the store's patience")
    assert_every_process_refused(done, 10, 30)
    assert not Store(store).bound("f/"), "something was written"


@pytest.mark.s3
def test_on_a_bucket_a_note_that_lands_late_stops_every_peer_before_the_deadline(bucket):
    """The second repro on SeaweedFS: 503 to every PUT of client 3's record past its patience
    (8 s), then six to its fault note (~6 s of backoff), the deadline being the patience plus
    the grace: every process fails naming client 3's fault, nothing is averaged around it."""
    from s3_bucket import BUCKET
    from s3_faults import FaultProxy

    store = f"s3://{BUCKET}/deadline-{os.getpid()}-late"
    with FaultProxy(os.environ["AWS_ENDPOINT_URL"]) as proxy:
        proxy.slow_down(None, "PUT", path="/client/3")
        proxy.slow_down(6, "PUT", path="/fault/3")
        done = clients(
            store, deadline=8 + FAULT_GRACE, patience=8,
            env=lambda k: {"AWS_ENDPOINT_URL": proxy.url} if k == 3 else {},
        )  # fmt: skip
        slowed = proxy.count("PUT", "/fault/3", "slow_down")
    counted(("late", "bucket"), done, "client 3")
    assert_every_process_stopped_on_client_3s_fault(done, Store(store))
    assert slowed == 6, [entry for entry in proxy.log if "/fault/" in entry[1]]
