"""Waits that read the queue (soma.slurm.queue): squeue's text in, where each missing client's
job is out, asked at most once a minute and never required; without a cluster (tests/slurm/
test_slurm_queue.py holds a client's job on the test cluster)."""

from __future__ import annotations

import subprocess

import pytest

from soma.round import waiting
from soma.slurm.limits import SlurmRefused
from soma.slurm.queue import Queue, Queued, client_of, not_started, parse, placed, said

# What `squeue --me -h -r -o FORMAT` prints: an array `soma-ctl` (task 0 running, 1 and 2
# held, 3 pending for priority with an expected start), a job of the same name for client 5 by
# its comment, another run's array, and the folded line squeue prints without -r.
SQUEUE = """\
366_0|soma-ctl|0|RUNNING|None|2026-12-06T11:20:01|(null)
366_1|soma-ctl|1|PENDING|JobHeldUser|N/A|(null)
366_2|soma-ctl|2|PENDING|JobHeldUser|N/A|(null)
366_3|soma-ctl|3|PENDING|Priority|2026-12-06T13:00:00|(null)
370|soma-ctl|N/A|PENDING|Resources|N/A|client=5
371_1|soma-other|1|PENDING|Priority|N/A|(null)
366_[4-5]|soma-ctl|4-5|PENDING|JobHeldUser|N/A|(null)
not a line of squeue's
"""


@pytest.fixture(autouse=True)
def _not_in_a_step(monkeypatch):
    """Whatever step the suite itself runs in: these tests set the job they are in."""
    monkeypatch.delenv("SLURM_STEP_NUM_TASKS", raising=False)


def test_squeue_lines_are_read_as_slurm_writes_them():
    jobs = parse(SQUEUE)
    assert [j.job for j in jobs] == ["366_0", "366_1", "366_2", "366_3", "370", "371_1"]
    assert jobs[0] == Queued("366_0", "soma-ctl", 0, "RUNNING", "", "2026-12-06T11:20:01", "")
    assert jobs[1].reason == "JobHeldUser" and jobs[1].start is None
    assert jobs[4].task is None and jobs[4].comment == "client=5"
    assert [client_of(j) for j in jobs] == [0, 1, 2, 3, 5, 1]


def test_a_job_is_said_with_its_state_reason_and_start():
    held, later, running, other = parse(SQUEUE)[1], parse(SQUEUE)[3], parse(SQUEUE)[0], None
    assert said(held) == "Slurm job 366_1 PENDING (JobHeldUser), expected start unknown"
    assert said(later) == "Slurm job 366_3 PENDING (Priority), expected start 2026-12-06T13:00:00"
    assert said(running) == "Slurm job 366_0 RUNNING since 2026-12-06T11:20:01"
    other = Queued("9", "soma-ctl", None, "COMPLETING", "", None, "")
    assert said(other) == "Slurm job 9 COMPLETING"


def test_only_the_missing_clients_jobs_of_this_name_are_placed():
    jobs = parse(SQUEUE)
    assert placed([1, 5], jobs, "soma-ctl") == (
        "client 1: Slurm job 366_1 PENDING (JobHeldUser), expected start unknown; "
        "client 5: Slurm job 370 PENDING (Resources), expected start unknown"
    )
    assert placed([7], jobs, "soma-ctl") == ""  # no job runs client 7
    assert placed([1], jobs, "soma-elsewhere") == ""  # another name: another run's


def test_the_queue_is_asked_at_most_once_a_minute_and_only_by_a_slurm_job(monkeypatch):
    asked = []

    def ask() -> str:
        asked.append(1)
        return SQUEUE

    queue = Queue(ask)
    monkeypatch.delenv("SLURM_JOB_NAME", raising=False)
    assert queue.where([1]) == "" and asked == []  # not a Slurm job: nothing asked
    monkeypatch.setenv("SLURM_JOB_NAME", "soma-ctl")
    assert queue.where([]) == "" and asked == []  # nobody missing: nothing asked
    assert queue.where([2]).startswith("client 2: Slurm job 366_2 PENDING (JobHeldUser)")
    assert queue.where([3]).startswith("client 3: Slurm job 366_3 PENDING (Priority)")
    assert len(asked) == 1  # the second line reused what the queue said a moment ago
    queue.asked_at -= 61  # a minute later, it is asked again
    queue.where([2])
    assert len(asked) == 2
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "4")  # one of srun's 4 tasks: not asked
    queue.asked_at -= 61
    assert queue.where([2]) == "" and len(asked) == 2


@pytest.mark.parametrize(
    "failure",
    [SlurmRefused("no `squeue` here"), OSError("permission denied"), subprocess.SubprocessError()],
)
def test_a_queue_that_cannot_be_asked_leaves_the_line_as_before(monkeypatch, failure):
    def ask() -> str:
        raise failure

    monkeypatch.setenv("SLURM_JOB_NAME", "soma-ctl")
    monkeypatch.setattr(waiting, "QUEUE", Queue(ask))
    assert waiting.clients([1, 2]) == "clients 1, 2"


def test_the_waiting_line_names_where_the_missing_clients_jobs_are(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_NAME", "soma-ctl")
    monkeypatch.setattr(waiting, "QUEUE", Queue(lambda: SQUEUE))
    assert waiting.clients([1, 7]) == (
        "clients 1, 7 [client 1: Slurm job 366_1 PENDING (JobHeldUser), expected start unknown]"
    )
    sites = {"A": [0, 1], "B": [2, 3]}
    assert waiting.clients([1, 2], sites) == (
        "client 1 at site A, client 2 at site B [client 1: Slurm job 366_1 PENDING "
        "(JobHeldUser), expected start unknown; client 2: Slurm job 366_2 PENDING "
        "(JobHeldUser), expected start unknown]"
    )


def test_not_started_is_pending_or_ended_never_running_nor_absent():
    """A client whose jobs are all PENDING or ended has not started; one with a job that
    runs has, and one the queue names no job of is not judged (absence proves nothing)."""
    jobs = parse(SQUEUE) + parse(
        "366_6|soma-ctl|6|CANCELLED|None|2026-12-06T11:20:01|(null)\n"
        "380_6|soma-ctl|6|RUNNING|None|2026-12-06T11:40:01|(null)\n"
        "366_8|soma-ctl|8|FAILED|NonZeroExitCode|2026-12-06T11:20:01|(null)\n"
    )
    assert not_started([0, 1, 3, 5, 6, 7, 8], jobs, "soma-ctl") == {
        1: "Slurm job 366_1 PENDING (JobHeldUser)",
        3: "Slurm job 366_3 PENDING (Priority)",
        5: "Slurm job 370 PENDING (Resources)",
        8: "Slurm job 366_8 FAILED (NonZeroExitCode)",
    }  # 0 runs, 6 was resubmitted and runs, 7 has no job in the queue
    assert not_started([1], jobs, "soma-other") == {1: "Slurm job 371_1 PENDING (Priority)"}


def test_not_started_is_asked_only_where_the_line_would_be(monkeypatch):
    asked = []
    queue = Queue(lambda: asked.append(1) or SQUEUE)
    monkeypatch.delenv("SLURM_JOB_NAME", raising=False)
    assert queue.not_started([1]) == {} and not asked  # not a Slurm job
    monkeypatch.setenv("SLURM_JOB_NAME", "soma-ctl")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "4")
    assert queue.not_started([1]) == {} and not asked  # one of a step's tasks
    monkeypatch.delenv("SLURM_STEP_NUM_TASKS")
    assert queue.not_started([0, 1]) == {1: "Slurm job 366_1 PENDING (JobHeldUser)"}
    assert queue.where([1]).startswith("client 1: Slurm job 366_1 PENDING") and len(asked) == 1
