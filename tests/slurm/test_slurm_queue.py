"""The scheduler as a partner, on the test cluster: clients as the tasks of an array
(workflow/sbatch/soma-async-array.sbatch), some held in the queue (`scontrol hold/release`).

- A synchronous round waiting for a held client's job says where that job is: PENDING and
  its reason (soma.slurm.queue, through soma.round.waiting).
- Asynchronous clients as array tasks, two of them held and released at different times and
  one stopped by Slurm's signal before its time limit and submitted again: the run makes its
  versions, and `soma audit` replays it bit for bit.

Needs the one-node cluster of tests/slurm (`bash tests/slurm/start.sh`); skipped when it is
not running. Every wait is for an event (a line in a job's output, a version in the store, a
job's state), bounded by the suite's one hang bound (helpers.HANG).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import HANG
from slurm.cluster import ACCOUNT, PARTITION, slurm_env
from slurm.harness import ALIVE, ROOT, Slurm, sacct_states, slurm_output, wait_for

from soma.asynchronous.replay import replay
from soma.round import layout, once, status
from soma.round.once import Place
from soma.store import Store

pytestmark = pytest.mark.slurm

ARRAY_SBATCH = ROOT / "workflow" / "sbatch" / "soma-async-array.sbatch"


def _env(store: Path, run: str, **more: str) -> dict[str, str]:
    env = slurm_env()
    env.update(STORE=str(store), RUN=run, OPTIONS="examples=64 epochs=1", SOMA_THREADS="1")
    env.update(SOMA=f"{sys.executable} -m soma.cli", DEADLINE=str(int(HANG)), **more)
    return env


def _submit(slurm: Slurm, workdir: Path, env: dict, *flags: str) -> str:
    """An array of the shipped script, every task sharing the test's job name (-s: the
    debug partition's 2 cores shared by up to 4 tasks); its array job id."""
    sbatch = ["sbatch", "--parsable", "-p", PARTITION, "-A", ACCOUNT, "-J", slurm.prefix, "-s"]
    sbatch += ["-t", "20", "--mem-per-cpu=1000", "-o", str(workdir / "job-%A_%a.out")]
    done = slurm.run([*sbatch, *flags, str(ARRAY_SBATCH)], cwd=workdir, timeout=120, env=env)
    job = re.search(r"^(\d+)", done.output, re.M)
    assert done.returncode == 0 and job, done.tail()
    return job.group(1)


def _output(workdir: Path, array: str, task: int) -> str:
    path = workdir / f"job-{array}_{task}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def _ended(array: str, tasks: int) -> dict[str, str]:
    """Wait until accounting says each of the array's tasks ended; their states."""

    def states() -> dict[str, str] | None:
        found = sacct_states([array])
        done = {job: s for job, s in found.items() if s and s not in ALIVE and "_" in job}
        return done if len(done) == tasks else None

    return wait_for(f"the {tasks} tasks of array {array} to end", states, timeout=HANG, every=2)


def test_a_round_waiting_for_a_held_clients_job_says_it_is_pending_and_why(
    cluster, tmp_path, slurm
):
    """Synchronous rounds (BUFFER=0), client k as task k: task 0 runs while task 1 is held;
    task 0's waiting line names task 1's job, PENDING (JobHeldUser). Released, the round
    ends for both."""
    env = _env(tmp_path / "store", "held", ROUNDS="1", BUFFER="0")
    array = _submit(slurm, tmp_path, env, "--array=0-1", "--hold")
    slurm_output("scontrol", "release", f"{array}_0")
    held = f"client 1: Slurm job {array}_1 PENDING (JobHeldUser), expected start unknown"
    wait_for(
        "task 0 to say where client 1's held job is",
        lambda: held in _output(tmp_path, array, 0),
        timeout=HANG,
        every=1,
    )
    line = next(x for x in _output(tmp_path, array, 0).splitlines() if held in x)
    assert "round 0 of run 'held': waited" in line and "for client 1 [" in line, line
    slurm_output("scontrol", "release", f"{array}_1")
    states = _ended(array, 2)
    assert set(states.values()) == {"COMPLETED"}, [_output(tmp_path, array, k) for k in (0, 1)]
    assert status_done(tmp_path / "store", "held") == [0]


def test_a_quorum_round_goes_on_at_the_deadline_without_a_held_clients_job_saying_why(
    cluster, tmp_path, slurm
):
    """(--drop-unstarted) 3 clients, a quorum of 2: tasks 0 and 1 run, task 2 is held. At
    the deadline the round is averaged over clients 0 and 1, and its record says client 2's
    job was PENDING (JobHeldUser); the held task is cancelled after."""
    env = _env(tmp_path / "store", "quorum", ROUNDS="1", BUFFER="0", CLIENTS="3")
    # a deadline past the store's patience and a fault note's grace (soma refuses shorter)
    env.update(DEADLINE="30", SOMA_STORE_PATIENCE="5", EXTRA="--quorum 2 --drop-unstarted")
    array = _submit(slurm, tmp_path, env, "--array=0-2", "--hold")
    try:
        for task in (0, 1):
            slurm_output("scontrol", "release", f"{array}_{task}")
        states = _ended(array, 2)
        outputs = [_output(tmp_path, array, k) for k in (0, 1)]
        assert set(states.values()) == {"COMPLETED"}, outputs
    finally:
        subprocess.run(["scancel", f"{array}_2"], env=slurm_env(), timeout=60)
    (row,) = status(Store(tmp_path / "store"), "quorum")
    assert row["written"] == [0, 1] and row["average"], row
    why = f"never came: Slurm job {array}_2 PENDING (JobHeldUser) at the deadline"
    assert row["left_out"] == [{"client": 2, "why": why}], row["left_out"]


def status_done(store: Path, run: str) -> list[int]:
    """The rounds of a synchronous run that have their average."""
    return [m["round"] for m in status(Store(store), run) if m.get("average")]


def _latest(store: Path, run: str) -> int:
    """The run's latest version in the store (-1 before version 0)."""
    s, v = Store(store), -1
    while s.resolve(Place(layout.version(run, v + 1)).published) is not None:
        v += 1
    return v


def test_asynchronous_clients_as_array_tasks_held_stopped_and_resubmitted_replay_bit_for_bit(
    cluster, tmp_path, slurm
):
    """4 clients (BUFFER=2, 6 versions) as an array submitted held. Task 0 runs alone; once
    its first update is in, Slurm's signal before the time limit (SIGURG to its step, as
    --signal=URG@ sends it) stops it, saying so, and it is submitted again. Task 1 is
    released, then task 2 once the run has 2 versions and task 3 once it has 4: the run
    ends at 6 versions, and `soma audit` recomputes every one bit for bit."""
    store, run = tmp_path / "store", "array"
    env = _env(store, run, ROUNDS="6", BUFFER="2", CLIENTS="4")
    array = _submit(slurm, tmp_path, env, "--array=0-3", "--hold")
    slurm_output("scontrol", "release", f"{array}_0")
    first = layout.update(run, 0, 0)
    wait_for("client 0's first update", lambda: Store(store).resolve(first), timeout=HANG, every=1)
    # scancel may exit non-zero when the step ends while it signals: the job's end tells
    subprocess.run(["scancel", "--signal=URG", f"{array}_0"], env=slurm_env(), timeout=60)
    stopped = wait_for(
        "task 0 to end on the signal",
        lambda: (s := sacct_states([f"{array}_0"]).get(f"{array}_0")) and s not in ALIVE and s,
        timeout=HANG,
        every=1,
    )
    said = _output(tmp_path, array, 0)
    assert stopped == "FAILED", said
    assert "time limit: Slurm signalled the job before its time limit" in said, said
    assert "submit the same task again (--array=0)" in said, said
    assert _latest(store, run) == 0, "one update of 2: no version yet"

    again = _submit(slurm, tmp_path, env, "--array=0")  # the stopped task, submitted again
    slurm_output("scontrol", "release", f"{array}_1")
    for task, versions in ((2, 2), (3, 4)):  # held tasks released at different times
        wait_for(f"{versions} versions", lambda v=versions: _latest(store, run) >= v, HANG, every=1)
        slurm_output("scontrol", "release", f"{array}_{task}")
    states = {**_ended(array, 4), **_ended(again, 1)}
    outputs = [_output(tmp_path, array, k) for k in range(4)] + [_output(tmp_path, again, 0)]
    assert states == {
        f"{array}_0": "FAILED", f"{array}_1": "COMPLETED", f"{array}_2": "COMPLETED",
        f"{array}_3": "COMPLETED", f"{again}_0": "COMPLETED",
    }, outputs  # fmt: skip
    for printed in outputs[1:]:  # every task that ran to the end saw the run's 6 versions
        assert '"versions": 6' in printed, printed[-3000:]

    replayed = replay(Store(store), run)
    assert len(replayed) == 7 and [r.problems for r in replayed] == [[] for _ in replayed]
    for r in replayed[1:]:  # each version computed exactly once, whoever raced for it
        assert once.computations(Store(store), Place(layout.version(run, r.version))) == 1
    consumed = [e["update"] for r in replayed for e in r.value["consumed"] + r.value["refused"]]
    assert len(consumed) == len(set(consumed))
    audit = [sys.executable, "-m", "soma.cli", "audit", "--store", str(store), "--run", run]
    audited = slurm.run(audit, cwd=tmp_path, timeout=HANG)
    assert audited.returncode == 0, audited.tail()
    assert "the weights recomputed bit for bit" in audited.output, audited.tail()
