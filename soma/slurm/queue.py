"""Where a missing client's Slurm job is: read from the queue, so that a waiting line says
`client 7: Slurm job 123_7 PENDING (JobHeldUser), expected start unknown` instead of only
that client 7 has not written.

How a waiter finds client k's job: the clients of one run are submitted as jobs of one name,
the waiter's own (`$SLURM_JOB_NAME`), and client k is either task k of an array of that name
(workflow/sbatch/soma-async-array.sbatch, or any `sbatch --array ... soma client --mine
$SLURM_ARRAY_TASK_ID`) or a job of that name whose comment is `client=k` (`sbatch
--comment=client=7`, for one job per client). A client that has not started has written
nothing, so nothing in the store can name its job; its submission can, and Slurm keeps that.
A waiter that is not a Slurm job finds none and says what it said before; nor does one of
several tasks of one step (the srun mode: its fellow clients run in its own job, nobody
queues), which does not ask.

The queue is asked at most once a minute per process (`squeue --me`, soma.slurm.query, with
a short timeout); a failure, no squeue, or no permission leaves the line as it was. Parsing
is apart from asking (`parse`, `said`, `placed`: squeue's text in, words out).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from soma.errors import SomaError

__all__ = [
    "ENDED",
    "EVERY",
    "FORMAT",
    "Queued",
    "Queue",
    "client_of",
    "not_started",
    "parse",
    "placed",
    "said",
]

# squeue -o: job id (123_7 for an array task), name, array task id, state, reason, start
# (the expected one for a pending job, N/A when Slurm has none), comment.
FORMAT = "%i|%j|%K|%T|%r|%S|%k"
EVERY = 60.0  # seconds: the queue is asked at most this often by one process
_NONE = {"", "N/A", "(null)", "None", "Unknown"}  # how squeue says "nothing here"
# The states of a job that has ended (squeue lists them for a few minutes after, as `-t all`
# asks): its client will not come from it.
ENDED = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)


@dataclass(frozen=True)
class Queued:
    """One job in the queue, as squeue says it."""

    job: str  # "123_7" (an array's task) or "123"
    name: str
    task: int | None  # the array task id, None outside an array
    state: str  # PENDING, RUNNING, ...
    reason: str  # Priority, Resources, JobHeldUser, ...; "" when Slurm gives none
    start: str | None  # expected start (pending) or start (running); None when unknown
    comment: str


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def parse(text: str) -> list[Queued]:
    """squeue's lines in FORMAT (`squeue -h -r -o FORMAT`); a line of another shape, or an
    array's pending tasks still folded into one (`123_[1-3]`, without -r), is skipped."""
    found = []
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 7 or "[" in fields[0]:
            continue
        job, name, task, state, reason, start, comment = (f.strip() for f in fields)
        found.append(
            Queued(
                job=job,
                name=name,
                task=_int(task),
                state=state,
                reason="" if reason in _NONE else reason,
                start=None if start in _NONE else start,
                comment="" if comment in _NONE else comment,
            )
        )
    return found


def client_of(queued: Queued) -> int | None:
    """The client a job runs: its comment's `client=k`, else its array task id."""
    for word in queued.comment.replace(",", " ").split():
        key, _, value = word.partition("=")
        if key == "client" and value.isdigit():
            return int(value)
    return queued.task


def said(queued: Queued) -> str:
    """`Slurm job 123_7 PENDING (JobHeldUser), expected start unknown`; a running job
    `Slurm job 123_7 RUNNING since 2026-12-06T11:20:01`."""
    text = f"Slurm job {queued.job} {queued.state}"
    if queued.reason:
        text += f" ({queued.reason})"
    if queued.state == "PENDING":
        text += f", expected start {queued.start or 'unknown'}"
    elif queued.state == "RUNNING" and queued.start:
        text += f" since {queued.start}"
    return text


def placed(missing: Sequence[int], jobs: Sequence[Queued], name: str) -> str:
    """`client 7: Slurm job 123_7 PENDING (...); client 9: ...`: the jobs named `name` that
    run the missing clients, by client; "" when none does."""
    by_client = _by_client(missing, jobs, name)
    return "; ".join(
        f"client {k}: {', '.join(said(q) for q in by_client[k])}" for k in sorted(by_client)
    )


def _by_client(
    missing: Sequence[int], jobs: Sequence[Queued], name: str
) -> dict[int, list[Queued]]:
    """The jobs named `name` that run each of the missing clients (a client without one is
    not a key)."""
    wanted = set(missing)
    by_client: dict[int, list[Queued]] = {}
    for queued in jobs:
        k = client_of(queued)
        if queued.name == name and k in wanted:
            by_client.setdefault(k, []).append(queued)
    return by_client


def not_started(missing: Sequence[int], jobs: Sequence[Queued], name: str) -> dict[int, str]:
    """The missing clients none of whose jobs named `name` has started and runs: each of
    them PENDING or ended (cancelled, failed, ...), by client, said without the expected
    start (`Slurm job 123_7 PENDING (Priority)`). A client with a job that runs (or
    suspends, completes, is configured: any other state) is not among them, nor one the
    queue names no job of: absence from the queue proves nothing (it may run outside Slurm,
    or its job ended longer ago than squeue remembers)."""
    found = {}
    for k, queued in sorted(_by_client(missing, jobs, name).items()):
        if all(q.state == "PENDING" or q.state in ENDED for q in queued):
            found[k] = ", ".join(
                f"Slurm job {q.job} {q.state}" + (f" ({q.reason})" if q.reason else "")
                for q in queued
            )
    return found


def _one_of_many_tasks() -> bool:
    """Whether this process is one of several tasks of one step (the srun mode): its
    fellow clients are tasks of its own running job, never in the queue, and a thousand
    tasks asking squeue each minute would only load Slurm's controller."""
    tasks = os.environ.get("SLURM_STEP_NUM_TASKS", "")
    return tasks.isdigit() and int(tasks) > 1


class Queue:
    """The queue as one process sees it: asked through `ask` (squeue's text, raising on any
    failure) at most every EVERY seconds; what it said last is reused in between."""

    def __init__(self, ask: Callable[[], str], every: float = EVERY) -> None:
        self.ask, self.every = ask, every
        self.asked_at: float | None = None
        self.jobs: list[Queued] = []

    def where(self, missing: Sequence[int], name: str | None = None) -> str:
        """Where the missing clients' jobs are (see `placed`), for jobs named `name`
        (default: this process's own job's); "" when this process is not a Slurm job, the
        queue names none of them, or it cannot be asked (whatever went wrong)."""
        name = self._name(missing, name)
        return "" if name is None else placed(missing, self._jobs(), name)

    def not_started(self, missing: Sequence[int], name: str | None = None) -> dict[int, str]:
        """The missing clients whose jobs have not started or have ended (see
        `not_started`), named as in `where`; {} wherever `where` says nothing."""
        name = self._name(missing, name)
        return {} if name is None else not_started(missing, self._jobs(), name)

    def _name(self, missing: Sequence[int], name: str | None) -> str | None:
        """The jobs' name to look for, or None when this process does not ask (see `where`)."""
        name = os.environ.get("SLURM_JOB_NAME") if name is None else name
        return None if not name or not missing or _one_of_many_tasks() else name

    def _jobs(self) -> list[Queued]:
        """The queue, asked when what it said last is EVERY seconds old (or never asked)."""
        now = time.monotonic()
        if self.asked_at is None or now - self.asked_at >= self.every:
            self.asked_at = now
            try:
                self.jobs = parse(self.ask())
            except (SomaError, OSError, subprocess.SubprocessError):  # never required
                self.jobs = []  # the line as before
        return self.jobs
