"""soma on a real Slurm cluster, faults: a client job cancelled with scancel, an averager
killed holding its claim, a holder whose job step ended.

Needs the one-node cluster of tests/slurm (`bash tests/slurm/start.sh`); every test is marked
`slurm` and skips, with the reason, when it is not running (tests/slurm/harness.py: how each
test runs things and cleans up after them).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from helpers import fake_commands
from slurm.cluster import ACCOUNT, PARTITION, slurm_env
from slurm.harness import (
    AVERAGE_0,
    CLIENTS_0,
    FEW_JOBS,
    FIXTURES,
    HOLD_CLAIM,
    RESULTS,
    RUN,
    Job,
    Slurm,
    averagings,
    ended,
    place_of_round,
    slurm_output,
    snakemake,
    submitted,
    wait_for,
    write_config,
)

from soma.round import holders, read_record
from soma.store import Store

pytestmark = pytest.mark.slurm

# --- 4a. a client job cancelled with scancel ---------------------------------------------------


def cancel_client_1_while_it_sleeps(workdir: Path, run, slurm: Slurm) -> Job:
    """scancel round 0's client 1 train job once it is running and sleeping in train()."""
    log = workdir / f"logs/{RUN}/round/0/client/1.log"

    def sleeping_client_1() -> Job | None:
        assert run.poll() is None, slurm.finish(run, 0).tail()
        if not (log.is_file() and "sleeping" in log.read_text()):
            return None
        # The plugin comments each job with its rule and wildcard values (round, then client).
        jobs = [j for j in slurm.jobs() if j.comment == "rule_train_wildcards_0_1"]
        return next((j for j in jobs if j.state == "RUNNING"), None)

    job = wait_for("client 1's train job sleeping in train()", sleeping_client_1, FEW_JOBS / 2)
    slurm_output("scancel", job.id)
    return job


def test_a_client_job_cancelled_with_scancel_fails_the_run_naming_that_client(
    cluster, tmp_path, slurm
) -> None:
    slow = {"slow_client": 1, "seconds": 600, "inner": "soma.tasks.control", "examples": 64}
    write_config(tmp_path, task="slow_task", task_options={"slow_task": slow}, metric="loss")
    env = slurm_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FIXTURES), env.get("PYTHONPATH")]))
    command = snakemake(tmp_path, AVERAGE_0, "--retries", "0", slurm=slurm)  # not the profile's
    run = slurm.start(command, cwd=tmp_path, env=env)
    job = cancel_client_1_while_it_sleeps(tmp_path, run, slurm)
    failed = slurm.finish(run, timeout=FEW_JOBS / 2)

    assert failed.returncode != 0, failed.tail()
    out = failed.output
    assert "Error in rule train" in out, failed.tail()
    error = out[out.index("Error in rule train") :]
    assert f"SLURM-job '{job.id}' failed, SLURM status is: 'CANCELLED'" in error, failed.tail()
    assert f"output: {CLIENTS_0[1]}" in error, failed.tail()
    assert f"log: logs/{RUN}/round/0/client/1.log" in error, failed.tail()
    assert f"rule_train/0_1/{job.id}.log" in error, failed.tail()  # the wildcards, by value
    # and the job Snakemake announced as that failed one was train with round=0, client=1
    snakemake_job = re.search(r"jobid: (\d+)", error).group(1)
    then = r"\n(?:    .*\n)*?    "  # on: any lines of the same job's block, then this field
    announced = re.search(rf"rule train:{then}jobid: {snakemake_job}{then}wildcards: (.*)", out)
    assert announced and announced.group(1) == "round=0, client=1", failed.tail()
    assert ended(job.id) == "CANCELLED"
    assert not (tmp_path / CLIENTS_0[1]).exists() and not (tmp_path / AVERAGE_0).exists()


def test_with_a_quorum_a_cancelled_client_job_is_retried_drops_out_and_the_round_goes_on(
    cluster, tmp_path, slurm
) -> None:
    """scancel, as a preemption would: Snakemake retries the job (--retries 1); the retry
    finds its first attempt ended without a trace (sacct says CANCELLED) and drops out saying
    so; the round is averaged over the others, and its record says who was left out."""
    slow = {"slow_client": 1, "seconds": 600, "inner": "soma.tasks.control", "examples": 32}
    write_config(
        tmp_path,
        task="slow_task",
        task_options={"slow_task": slow},
        metric="loss",
        clients=3,
        quorum=2,
    )
    env = slurm_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FIXTURES), env.get("PYTHONPATH")]))
    command = snakemake(tmp_path, AVERAGE_0, "--retries", "1", slurm=slurm)
    run = slurm.start(command, cwd=tmp_path, env=env)
    job = cancel_client_1_while_it_sleeps(tmp_path, run, slurm)
    done = slurm.finish(run, timeout=FEW_JOBS)
    assert done.returncode == 0, done.tail()
    assert ended(job.id) == "CANCELLED"
    dropped = json.loads((tmp_path / RESULTS / "round/0/client/1.json").read_text())
    assert dropped["dropped"].startswith("died: its previous job")
    assert f"Slurm job {job.id}" in dropped["dropped"]
    average = json.loads((tmp_path / AVERAGE_0).read_text())
    assert [i["client"] for i in average["inputs"]] == [0, 2]
    assert average["left_out"] == [{"client": 1, "why": dropped["dropped"]}]


# --- 4b. an averager killed holding the claim --------------------------------------------------


def test_an_averager_killed_holding_the_claim_is_taken_over_once_slurm_says_it_ended(
    cluster, tmp_path, slurm
) -> None:
    write_config(tmp_path)
    clients = slurm.run(snakemake(tmp_path, *CLIENTS_0), cwd=tmp_path, timeout=FEW_JOBS)
    assert clients.returncode == 0, clients.tail()
    store = Store(tmp_path / "store")
    place = place_of_round(tmp_path, 0)

    # A real Slurm job claims the round's averaging, then sleeps.
    hold = f"exec {sys.executable} {HOLD_CLAIM} {store.directory} {place.claimed}"
    sbatch = ["sbatch", "--parsable", "-p", PARTITION, "-A", ACCOUNT, "-J", f"{slurm.prefix}-hold"]
    sbatch += ["-t", "10", "--mem=500", "-o", str(tmp_path / "hold-%j.out"), "--wrap", hold]
    submit = slurm.run(sbatch, cwd=tmp_path, timeout=60)
    assert submit.returncode == 0, submit.tail()
    holder_job = submit.output.strip().split(";")[0]
    claim = wait_for(
        "the Slurm job's claim on the averaging",
        lambda: store.resolve(place.claimed),
        timeout=120,
    )
    holder = read_record(store, claim)
    assert holder["slurm_job"] == holder_job and holder["role"] == "averaging"
    assert not holders.gone(holder), "a running Slurm job is alive"

    # While it is alive, an average job waits for it, and past its deadline names it.
    alive = slurm.run(
        snakemake(tmp_path, AVERAGE_0, "--config", "average_deadline=3"),
        cwd=tmp_path,
        timeout=FEW_JOBS,
    )
    assert alive.returncode != 0, alive.tail()
    log = (tmp_path / f"logs/{RUN}/round/0/average.log").read_text()
    assert "AveragerDied" in log and "never published" in log, log
    assert f"Slurm job {holder_job}" in log, log
    assert store.bound(place.takeovers) == [] and store.resolve(place.published) is None

    # Dead: scancel it; once Slurm says it ended, the average job under Slurm takes over.
    slurm_output("scancel", holder_job)
    assert ended(holder_job) == "CANCELLED"
    assert holders.gone(holder)
    taken = slurm.run(snakemake(tmp_path, AVERAGE_0, slurm=slurm), cwd=tmp_path, timeout=FEW_JOBS)
    assert taken.returncode == 0, taken.tail()
    (averager,) = submitted(taken.output)
    assert store.bound(place.takeovers) == [f"{place.takeovers}1"]
    published = store.resolve(place.published)
    assert published is not None
    assert len(averagings(store, f"{place.prefix}/")) == 1
    record = read_record(store, published)
    assert record["averaged_by"]["slurm_job"] == averager != holder_job
    receipt = (tmp_path / AVERAGE_0).read_bytes()
    assert json.loads(receipt)["weights"] == record["weights"]

    # And it never changes: a forced rerun of the average finds it published.
    again = slurm.run(
        snakemake(tmp_path, AVERAGE_0, "--forcerun", AVERAGE_0, slurm=slurm),
        cwd=tmp_path,
        timeout=FEW_JOBS,
    )
    assert again.returncode == 0, again.tail()
    assert len(submitted(again.output)) == 1, again.tail()
    assert (tmp_path / AVERAGE_0).read_bytes() == receipt
    assert store.resolve(place.published) == published
    assert len(averagings(store, f"{place.prefix}/")) == 1
    assert store.bound(place.takeovers) == [f"{place.takeovers}1"]


def test_a_holder_whose_step_ended_in_a_running_allocation_is_gone(cluster, tmp_path, slurm):
    """An srun step of an allocation claims the averaging and is cancelled (scancel JOB.STEP)
    while the allocation runs on: a holder on another node of it, whose pid nobody here can
    check, is gone once Slurm says its step ended, so its claim can be taken over."""
    store = Store(tmp_path / "store")
    name = "run/round/0/m/inputs/x/averaging/claimed"
    hold = f"srun -n 1 {sys.executable} {HOLD_CLAIM} {store.directory} {name} & sleep 300; wait"
    sbatch = ["sbatch", "--parsable", "-p", PARTITION, "-A", ACCOUNT, "-J", f"{slurm.prefix}-hold"]
    sbatch += ["-t", "10", "--mem=500", "-o", str(tmp_path / "hold-%j.out"), "--wrap", hold]
    submit = slurm.run(sbatch, cwd=tmp_path, timeout=60)
    assert submit.returncode == 0, submit.tail()
    job = submit.output.strip().split(";")[0]
    claim = wait_for("the step's claim", lambda: store.resolve(name), timeout=120)
    holder = read_record(store, claim)
    assert (holder["slurm_job"], holder["slurm_step"]) == (job, "0"), holder
    assert f"Slurm job {job} step 0" in holders.describe(holder)
    elsewhere = {**holder, "host": "another-node-of-the-allocation"}
    assert not holders.gone(elsewhere), "its step runs"

    slurm_output("scancel", f"{job}.0")
    wait_for(
        f"step {job}.0 to end",
        lambda: holders.slurm_step_state(job, "0") not in (None, "RUNNING"),
        timeout=60,
    )
    assert holders.slurm_job_state(job) == "RUNNING", "the allocation runs on"
    assert holders.gone(elsewhere)


@pytest.mark.parametrize(
    ("sacct", "squeue_steps", "gone"),
    [
        ("7.3|RUNNING", "", False),
        ("7.3|CANCELLED by 0", "", True),
        ("7.3|COMPLETED", "", True),
        ("", "7.batch 7.3", False),  # accounting has no word: squeue lists the running steps
        ("", "7.batch", True),
        ("", "", False),  # nobody can tell: alive
    ],
)
def test_a_holders_step_is_asked_of_sacct_then_squeue(
    tmp_path, monkeypatch, sacct, squeue_steps, gone
) -> None:
    """Fake sacct and squeue (job 7 RUNNING): what gone() concludes about step 3 of it."""
    steps = "".join(f"echo {step}; " for step in squeue_steps.split())
    fakes = {
        "sacct": f"echo '{sacct}'" if sacct else "true",
        "squeue": f'case "$*" in *-s*) {steps}true;; *) echo RUNNING;; esac',
    }
    monkeypatch.setenv("PATH", fake_commands(tmp_path, fakes))
    holder = {"host": "another-node", "pid": 1, "slurm_job": "7", "slurm_step": "3"}
    assert holders.gone(holder) is gone
    assert holders.gone({**holder, "slurm_step": None}) is False
