"""Issue 56, item 1: a quorum round told to go on without the clients whose Slurm jobs have
not started (`drop_unstarted`, in its meeting's config) counts, past the deadline, a missing
client whose job is PENDING or has ended as dropped, and its record says where the job was;
a client whose job runs is left out as it always was ("never came"), and without Slurm, or
with the policy off, nothing changes. `soma audit` holds the reason to the client's record as
it holds `never came`: a forged one does not let an averager leave out a client that came.

The queue is squeue's text, faked where soma asks it (soma.slurm.query.queue); real stores."""

from __future__ import annotations

import datetime

import pytest
import torch

from soma.audit.rounds import audit_meeting
from soma.cli.show import _status_line
from soma.round import (
    Backoff,
    Meeting,
    RoundIncomplete,
    average_round,
    contribute,
    read_record,
    status,
)
from soma.round.records import is_not_started
from soma.store import Store, codecs
from soma.timing import LEASE

torch.set_num_threads(1)
QUICK = Backoff(first=0.002, cap=0.02)
POLICY = {"drop_unstarted": True}

# `squeue --me -h -r -t all -o FORMAT`: the run's array `soma-ctl`, client 0's and 1's tasks
# running, client 2's held, client 3's running (slow: it has not written yet), client 4's
# cancelled, and another run's task for client 2.
SQUEUE = """\
366_0|soma-ctl|0|RUNNING|None|2026-12-06T11:20:01|(null)
366_1|soma-ctl|1|RUNNING|None|2026-12-06T11:20:01|(null)
366_2|soma-ctl|2|PENDING|JobHeldUser|N/A|(null)
366_3|soma-ctl|3|RUNNING|None|2026-12-06T11:20:01|(null)
366_4|soma-ctl|4|CANCELLED|None|2026-12-06T11:20:01|(null)
371_2|soma-other|2|RUNNING|None|2026-12-06T11:20:01|(null)
"""
HELD = "never came: Slurm job 366_2 PENDING (JobHeldUser) at the deadline"
CANCELLED = "never came: Slurm job 366_4 CANCELLED at the deadline"


def weights(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"fc": {"w": torch.randn(4, 3, generator=g), "b": torch.randn(4, generator=g)}}


@pytest.fixture
def asked(monkeypatch) -> list[int]:
    """This process is a task of the array `soma-ctl` (not one of several tasks of a step),
    and the queue says SQUEUE; how often it was asked."""
    calls: list[int] = []

    def queue() -> str:
        calls.append(1)
        return SQUEUE

    monkeypatch.setenv("SLURM_JOB_NAME", "soma-ctl")
    monkeypatch.delenv("SLURM_STEP_NUM_TASKS", raising=False)
    monkeypatch.setattr("soma.slurm.query.queue", queue)
    return calls


def meeting(store: Store, clients: int = 5, quorum: int | None = 2, **config) -> Meeting:
    start = store.put_value(weights(99))
    return Meeting("r", 0, clients, start=start, quorum=quorum, config=config)


def averaged(store: Store, m: Meeting, came=(0, 1)) -> dict:
    for k in came:
        contribute(store, m, weights(k), mine=k, size=10)
    digest = average_round(store, m, deadline=0, backoff=QUICK, lease=LEASE)
    return read_record(store, digest)


def left_out(record: dict) -> dict[int, str]:
    return {x["client"]: x["why"] for x in record["left_out"]}


def test_at_the_deadline_a_held_or_cancelled_clients_job_is_said_and_a_running_one_is_not(
    tmp_path, asked
) -> None:
    store = Store(tmp_path)
    record = averaged(store, meeting(store, **POLICY))
    assert [i["client"] for i in record["inputs"]] == [0, 1]
    assert left_out(record) == {2: HELD, 3: "never came", 4: CANCELLED}
    assert asked  # the queue was asked at the deadline
    (row,) = status(store, "r")  # and `soma status` says why
    line = _status_line(row, set())
    assert f"; left out client 2: {HELD}; left out client 3: never came;" in line


def test_with_the_policy_off_the_queue_is_not_asked_and_the_record_is_as_before(
    tmp_path, asked
) -> None:
    store = Store(tmp_path)
    record = averaged(store, meeting(store))
    assert left_out(record) == {2: "never came", 3: "never came", 4: "never came"}
    assert not asked


def test_without_slurm_the_policy_changes_nothing(tmp_path, asked, monkeypatch) -> None:
    monkeypatch.delenv("SLURM_JOB_NAME")  # not a Slurm job: no queue of its own to read
    store = Store(tmp_path)
    record = averaged(store, meeting(store, **POLICY))
    assert left_out(record) == {2: "never came", 3: "never came", 4: "never came"}
    assert not asked


def test_a_queue_that_cannot_be_asked_changes_nothing(tmp_path, asked, monkeypatch) -> None:
    def broken() -> str:
        raise OSError("squeue: not found")

    monkeypatch.setattr("soma.slurm.query.queue", broken)
    store = Store(tmp_path)
    record = averaged(store, meeting(store, **POLICY))
    assert set(left_out(record).values()) == {"never came"}


def test_below_the_quorum_the_round_stops_at_once_saying_where_each_job_is(tmp_path, asked) -> None:
    """Clients 2 and 4 will not come (held, cancelled), client 3 may: with every member
    but 3 accounted for, 2 of 4 is below the quorum of 3, and the refusal says why."""
    store = Store(tmp_path)
    m = meeting(store, clients=5, quorum=4, **POLICY)
    with pytest.raises(RoundIncomplete) as incomplete:
        averaged(store, m)
    said = str(incomplete.value)
    assert "client 2 never came: Slurm job 366_2 PENDING (JobHeldUser) at the deadline" in said
    assert "Slurm job 366_4 CANCELLED" in said
    assert "366_3" not in said  # a running job is no reason


def test_a_client_that_came_is_never_said_unstarted_whatever_the_queue_says(
    tmp_path, asked
) -> None:
    """Client 2's task is held in the queue (a resubmission, say), but client 2 came: it is
    averaged, and the queue is not asked for it."""
    store = Store(tmp_path)
    record = averaged(store, meeting(store, **POLICY), came=(0, 1, 2))
    assert [i["client"] for i in record["inputs"]] == [0, 1, 2]
    assert 2 not in left_out(record)


# --- soma audit ---------------------------------------------------------------------------------


def _left_out_findings(store: Store, m: Meeting) -> dict[int, tuple[bool | None, str]]:
    audited, _ = audit_meeting(store, m.run, m.round, m.key, None)
    return {f.client: (f.ok, f.detail) for f in audited.findings if f.check == "left-out"}


def test_audit_accepts_the_reason_as_it_accepts_never_came(tmp_path, asked) -> None:
    store = Store(tmp_path)
    m = meeting(store, **POLICY)
    averaged(store, m)
    found = _left_out_findings(store, m)
    assert found[2] == (True, f"client 2 {HELD}")
    assert found[4] == (True, f"client 4 {CANCELLED}")


@pytest.mark.parametrize("why", ["never came", HELD])
def test_a_forged_reason_does_not_leave_out_a_client_that_came(tmp_path, asked, why) -> None:
    """Client 2's record was bound an hour before the others': an average that says its job
    was held at the deadline is broken, as one that says it never came."""
    store = Store(tmp_path)
    m = meeting(store, clients=3, **POLICY)
    hour_ago = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
    early = {"client": 2, "size": 10, "weights": store.put_value(weights(2)), "extra": None,
             "own": None, "by": {"when": hour_ago.isoformat(timespec="seconds")}}  # fmt: skip
    store.bind(m.client(2), store.put(codecs.record_bytes(early, None)))
    honest = averaged(store, m)  # client 2 is there: it is averaged
    assert [i["client"] for i in honest["inputs"]] == [0, 1, 2]
    forged = dict(store.recall(m.average))
    forged["inputs"] = [i for i in forged["inputs"] if i["client"] != 2]
    forged["left_out"] = [{"client": 2, "why": why}]
    assert is_not_started(why) or why == "never came"
    store.bind(m.average, store.put_value(forged))
    ok, detail = _left_out_findings(store, m)[2]
    assert ok is False and detail.startswith(f"the average says client 2 {why}, but client 2's")
    assert detail.endswith("it was there before the average")


def test_the_runs_setting_reaches_its_meetings_and_only_when_set() -> None:
    """`--drop-unstarted` (soma.config.settings): in the meetings' config, which the
    averaging reads; a run without it keeps the meetings it always had."""
    from soma.config.spec import RunSpec
    from soma.round.average import DROP_UNSTARTED

    spec = RunSpec(run="r", task="soma.tasks.control", clients=4, rounds=1, quorum=2)
    on = RunSpec(run="r", task="soma.tasks.control", clients=4, rounds=1, quorum=2,
                 drop_unstarted=True)  # fmt: skip
    assert on.meeting(0, None, None).config[DROP_UNSTARTED] is True
    assert DROP_UNSTARTED not in spec.meeting(0, None, None).config
