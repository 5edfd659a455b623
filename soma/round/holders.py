"""Who is doing something, written down so that others can tell whether they are still alive.

A claim is a name bound to a record of its holder. When the holder dies holding it, nobody
else will try, which is what a claim is, said from the other side. So the record carries
enough to prove a holder gone without guessing: its host and pid with the pid's start time (a
pid is reused; a pid with the same start time is the same process), and its Slurm job and
step (a job that Slurm says has ended holds nothing; nor does a step that has ended in a job
still running, e.g. an srun task on another node of the allocation, whose pid cannot be
checked from here).

    holder record   {"host", "pid", "pid_start", "thread", "slurm_job", "slurm_step", "when",
                     "cpu_s", "slurm_array"?, "site"?, "torch"?, "cpu"?, ...}
                                    (`me`; "site" only in a run across sites, so a record
                                     without it, as every earlier one, is read the same;
                                     "torch" and "cpu", the torch version and the CPU
                                     capability its kernels were picked for, where torch is
                                     loaded: an average's `averaged_by` says what computed
                                     it; "slurm_array", `123_7`, in an array's task, whose
                                     job and steps Slurm names so and not by `slurm_job`;
                                     "cpu_s", the CPU seconds, user and system, this
                                     process had used when it wrote the record: what a
                                     round cost without Slurm, soma.round.report; the rest
                                     as its writer adds: "role", "what")

Others name a holder by it (`describe`: its site first, when it has one), and a process that
leaves a round with its average says whether it computed it or took another's (`averaged`).
"""

from __future__ import annotations

import datetime
import os
import resource
import shutil
import socket
import subprocess
import sys
import threading
from typing import Any

# sacct/squeue states in which a job may still be running its processes.
_SLURM_ALIVE = {
    "PENDING",
    "RUNNING",
    "REQUEUED",
    "RESIZING",
    "SUSPENDED",
    "COMPLETING",
    "CONFIGURING",
    "STAGE_OUT",
    "SIGNALING",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "STOPPED",
}


def _process_start(pid: int) -> int | None:
    """The pid's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            text = stat.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):  # a zombie has already died
        return None
    return int(fields[19])


_STARTED: dict[int, int | None] = {}  # this process's start, by pid (a fork has its own)


def _my_start() -> int | None:
    """This process's start: read once (reading /proc/PID/stat of a process with many
    threads takes milliseconds, and every record a process writes names it)."""
    pid = os.getpid()
    if pid not in _STARTED:
        _STARTED[pid] = _process_start(pid)
    return _STARTED[pid]


def me(*, site: str | None = None, **extra: Any) -> dict[str, Any]:
    """A record of this process: host, pid and its start, Slurm job and step, when, and the
    CPU time it has used; and
    its site (config `site`) when the run has sites, so that others name it by its site (a
    record without one, as every record before sites were named, is read the same)."""
    record: dict[str, Any] = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "pid_start": _my_start(),
        "thread": threading.get_ident(),
        "slurm_job": os.environ.get("SLURM_JOB_ID"),
        "slurm_step": os.environ.get("SLURM_STEP_ID"),
        "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu_s": cpu_seconds(),
        **_array(),
        **({} if site is None else {"site": site}),
        **_computing(),
    }
    record.update(extra)
    return record


def cpu_seconds() -> float:
    """The CPU time this process has used so far, user and system, all its threads (to the
    millisecond): a record carries it so that a round's cost is known without Slurm (each
    process's growth between its records, summed: soma.round.report)."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    return round(used.ru_utime + used.ru_stime, 3)


def _array() -> dict[str, str]:
    """`{"slurm_array": "123_7"}` in task 7 of array 123 (whose own job id, `slurm_job`, is
    another number: squeue and sacct name its steps `123_7.0`); {} elsewhere."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return {"slurm_array": f"{array}_{task}"} if array and task else {}


_COMPUTING: dict[str, str] = {}


def _computing() -> dict[str, str]:
    """The torch version and CPU capability this process computes under, once torch is
    loaded (nothing before: a command that never imports torch computes nothing). The server's
    arithmetic gives the same bits under any (soma.arithmetic); said so that a reader who
    doubts a recomputation can see where each side ran."""
    if not _COMPUTING:
        torch = sys.modules.get("torch")
        if torch is None:
            return {}
        capability = str(torch.backends.cpu.get_cpu_capability())
        _COMPUTING.update(torch=str(torch.__version__), cpu=capability)
    return _COMPUTING


def _where(holder: dict[str, Any]) -> list[str]:
    """Where a holder runs: its host and pid, its Slurm job and step, since when."""
    parts = [f"host {holder.get('host')}", f"pid {holder.get('pid')}"]
    if holder.get("slurm_job"):
        step, array = holder.get("slurm_step"), holder.get("slurm_array")
        job = f"Slurm job {holder['slurm_job']}" + (f" (array task {array})" if array else "")
        parts.append(job + (f" step {step}" if step else ""))
    parts.append(f"since {holder.get('when')}")
    return parts


def describe(holder: dict[str, Any]) -> str:
    """`site A (host h, pid 12, Slurm job 7, since ...)`; without a site, what is in the
    parentheses."""
    where = ", ".join(_where(holder))
    site = holder.get("site")
    return where if site is None else f"site {site} ({where})"


def is_me(holder: object) -> bool:
    """Whether the record is this process's (host, pid and the pid's start)."""
    return (
        isinstance(holder, dict)
        and holder.get("host") == socket.gethostname()
        and holder.get("pid") == os.getpid()
        and holder.get("pid_start") == _my_start()
    )


def averaged(by: object) -> str:
    """Who computed an average, said by the process that leaves with it: `computed the
    average here (site A, host h, ...)` when its record (`averaged_by`) is this process's,
    else `took the average computed by site A (host h, ...)`."""
    if not isinstance(by, dict):
        return "took an average whose record names nobody as its averager"
    if is_me(by):
        site = [] if by.get("site") is None else [f"site {by['site']}"]
        return f"computed the average here ({', '.join(site + _where(by))})"
    return f"took the average computed by {describe(by)}"


def slurm_job_state(job_id: str) -> str | None:
    """The job's state as Slurm reports it, or None when Slurm cannot be asked."""
    if shutil.which("squeue"):
        out = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=30
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.split()[0].strip()
    if shutil.which("sacct"):
        out = subprocess.run(
            ["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.split()[0].split()[0].strip()
    return None


def slurm_step_state(job_id: str, step: str, array: str | None = None) -> str | None:
    """The state of the job's step `step` (a number, `batch`...): sacct's (by the job's own
    id, JobIDRaw: an array's task is named `123_7` there), else, for a numbered step,
    squeue's list of the job's running steps (a step not in it has ended, as the job is
    running); None when neither can tell. `array`: the job as an array's task (`123_7`),
    the name squeue gives its steps; a list that names none of the job's steps by either
    name tells nothing (an older record of an array's task has no `array`)."""
    if shutil.which("sacct"):
        out = subprocess.run(
            ["sacct", "-n", "-P", "-j", f"{job_id}.{step}", "-o", "JobIDRaw,State"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        for line in out.stdout.splitlines() if out.returncode == 0 else []:
            name, _, state = line.partition("|")
            if name == f"{job_id}.{step}" and state.split():
                return state.split()[0]
    if step.isdigit() and shutil.which("squeue"):
        out = subprocess.run(
            ["squeue", "-h", "-s", "-j", job_id, "-o", "%i"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        names = [job_id] + ([array] if array else [])
        running = [s for s in out.stdout.split() if s.rpartition(".")[0] in names]
        if out.returncode == 0 and running:  # the job's steps that run now
            return "RUNNING" if any(f"{n}.{step}" in running for n in names) else "ENDED"
    return None


def gone(holder: dict[str, Any]) -> bool:
    """True only when the holder is provably gone; when in doubt, it is alive."""
    job = holder.get("slurm_job")
    if job:
        state = slurm_job_state(str(job))
        if state is not None and state.rstrip("+") not in _SLURM_ALIVE:
            return True
        step = holder.get("slurm_step")
        if state is not None and step not in (None, ""):
            # The job runs on, but the holder's step (its srun task, on any node) may not.
            array = holder.get("slurm_array")
            ended = slurm_step_state(str(job), str(step), None if array is None else str(array))
            if ended is not None and ended.rstrip("+") not in _SLURM_ALIVE:
                return True
    if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
        start = _process_start(holder["pid"])
        if start is None:
            return True
        recorded = holder.get("pid_start")
        return recorded is not None and start != recorded
    return False
