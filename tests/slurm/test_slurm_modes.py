"""soma on a real Slurm cluster without a submission per job: the srun mode, and a whole run
in one allocation through the shipped sbatch scripts.

Needs the one-node cluster of tests/slurm (`bash tests/slurm/start.sh`); every test is marked
`slurm` and skips, with the reason, when it is not running (tests/slurm/harness.py: how each
test runs things and cleans up after them).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from slurm.cluster import ACCOUNT, PARTITION, slurm_env
from slurm.harness import (
    ALLOCATION_SBATCH,
    FEW_JOBS,
    SNAKEFILE,
    SRUN_SBATCH,
    WHOLE_WORKFLOW,
    Slurm,
    averagings,
    ended,
    receipts,
    slurm_output,
    snakemake,
    write_config,
)

from soma.round import status
from soma.store import Store

pytestmark = pytest.mark.slurm

# --- 3. the srun mode -------------------------------------------------------------------------


def test_srun_mode_four_tasks_in_one_sbatch_average_each_round_once(cluster, tmp_path, slurm):
    store = tmp_path / "store"
    env = slurm_env()
    env.update(STORE=str(store), RUN="ctl", ROUNDS="2", OPTIONS="examples=64", DEADLINE="240")
    env["SOMA_THREADS"] = "1"
    if shutil.which("soma") is None:
        env["SOMA"] = f"{sys.executable} -m soma.cli"
    out = tmp_path / "srun-%j.out"
    sbatch = ["sbatch", "--wait", "--parsable", "--overcommit", "-p", PARTITION, "-A", ACCOUNT]
    sbatch += ["-J", slurm.prefix, "-t", "10", "--mem-per-cpu=2000", "-o", str(out)]
    sbatch.append(str(SRUN_SBATCH))
    batch = slurm.run(sbatch, cwd=tmp_path, timeout=FEW_JOBS, env=env)
    job = re.search(r"^(\d+)", batch.output, re.M)
    assert job, batch.tail()
    job = job.group(1)
    printed = (tmp_path / f"srun-{job}.out").read_text()
    assert batch.returncode == 0, batch.tail() + printed

    lines = [json.loads(line) for line in printed.splitlines() if line.startswith("{")]
    per_round = [line for line in lines if "round" in line]
    assert sorted((x["client"], x["round"]) for x in per_round) == [
        (k, r) for k in range(4) for r in range(2)
    ], printed
    final = Store(store)
    meetings = status(final, "ctl")
    assert [m["round"] for m in meetings] == [0, 1], "one meeting a round"
    for r in range(2):
        digests = {x["average"] for x in per_round if x["round"] == r}
        assert digests == {meetings[r]["average"]}, printed
    assert len({json.dumps(x["evaluation"]) for x in lines if "done" in x}) == 1
    averaged = averagings(final, "ctl/round/")
    assert len(averaged) == 2, averaged
    assert {n.split("/")[2] for n in averaged} == {"0", "1"}, "one averaging per round"

    shown = slurm.run(
        [sys.executable, "-m", "soma.cli", "status", "--store", store, "--run", "ctl"]
        + ["--clients", "4", "--json"],
        cwd=tmp_path,
        timeout=60,
    )
    assert shown.returncode == 0, shown.tail()
    rows = json.loads(shown.output)
    assert [row["round"] for row in rows] == [0, 1]
    for row in rows:
        assert row["written"] == [0, 1, 2, 3] and row["missing"] == []
        assert row["average"] == meetings[row["round"]]["average"] is not None
        assert row["averagings"] == 1

    # One batch job whose srun step ran four tasks.
    steps = slurm_output("sacct", "-n", "-P", "-j", job, "-o", "JobID,NTasks,State")
    assert f"{job}.0|4|COMPLETED" in steps.split(), steps


# --- 3b. a whole run in one allocation: the shipped sbatch scripts ------------------------


def sbatch_wait(slurm: Slurm, workdir: Path, script: Path, env: dict, *flags: str) -> str:
    """Submit `script` with sbatch --wait from `workdir`; what the job printed (fails the test,
    showing it, unless the job completed)."""
    sbatch = ["sbatch", "--wait", "--parsable", "-p", PARTITION, "-A", ACCOUNT, "-J", slurm.prefix]
    sbatch += ["-t", "10", "-o", str(workdir / "job-%j.out"), *flags, str(script)]
    batch = slurm.run(sbatch, cwd=workdir, timeout=WHOLE_WORKFLOW, env=env)
    job = re.search(r"^(\d+)", batch.output, re.M)
    assert job, batch.tail()
    printed = (workdir / f"job-{job.group(1)}.out").read_text(errors="replace")
    assert batch.returncode == 0, batch.tail() + printed[-4000:]
    assert ended(job.group(1)) == "COMPLETED", printed[-4000:]
    return printed


def test_the_allocation_script_runs_the_workflow_inside_one_job_as_a_local_run_does(
    cluster, tmp_path, slurm
) -> None:
    """workflow/sbatch/snakemake-allocation.sbatch (2 rounds x 4 clients): snakemake --cores
    <the job's CPUs> inside one Slurm job gives every receipt of a local run, byte for byte."""
    inside, local = tmp_path / "allocation", tmp_path / "local"
    for workdir in (inside, local):
        workdir.mkdir()
        write_config(workdir, clients=4)
    beside = slurm.start(snakemake(local), cwd=local)
    env = slurm_env()
    env.update(CONFIG=str(inside / "config.yaml"), SNAKEFILE=str(SNAKEFILE))
    env["SNAKEMAKE"] = f"{sys.executable} -m snakemake"
    printed = sbatch_wait(slurm, inside, ALLOCATION_SBATCH, env, "-c", "2", "--mem-per-cpu=1500")
    locally = slurm.finish(beside, timeout=WHOLE_WORKFLOW)
    assert locally.returncode == 0, locally.tail()
    assert "with 2 cores" in printed, printed[-4000:]
    assert receipts(inside) == receipts(local)
    assert len([p for p in receipts(local) if "/client/" in p]) == 8


def test_the_srun_script_hosts_four_clients_on_two_tasks_and_ends_with_simulates_weights(
    cluster, tmp_path, slurm
) -> None:
    """CLIENTS=4 over --ntasks=2 (2 rounds): each task hosts 2 clients (PER_TASK, worked out
    by the script), and the final weights are `soma simulate`'s for the same run."""
    store = tmp_path / "store"
    env = slurm_env()
    env.update(STORE=str(store), RUN="ctl", ROUNDS="2", OPTIONS="examples=64", DEADLINE="240")
    env.update(CLIENTS="4", SOMA_THREADS="1", SOMA=f"{sys.executable} -m soma.cli")
    printed = sbatch_wait(
        slurm, tmp_path, SRUN_SBATCH, env, "--ntasks=2", "--overcommit", "--mem-per-cpu=1500"
    )
    assert "4 clients (2 a task, 2 tasks)" in printed, printed[-4000:]
    lines = [json.loads(line) for line in printed.splitlines() if line.startswith("{")]
    rounds = [line for line in lines if "round" in line]
    assert sorted((tuple(x["clients"]), x["round"]) for x in rounds) == [
        ((0, 1), 0), ((0, 1), 1), ((2, 3), 0), ((2, 3), 1)
    ], printed  # fmt: skip
    final = {x["weights"] for x in rounds if x["round"] == 1}
    assert len(final) == 1, printed

    simulate = [sys.executable, "-m", "soma.cli", "simulate", "--run", "ctl", "--rounds", "2"]
    simulate += ["--clients", "4", "--task", "soma.tasks.control", "--option", "examples=64"]
    simulate += ["--seed", "0"]
    alone = slurm.run(simulate, cwd=tmp_path, timeout=FEW_JOBS)
    assert alone.returncode == 0, alone.tail()
    simulated = [json.loads(x) for x in alone.output.splitlines() if x.startswith("{")]
    assert {x["weights"] for x in simulated if x.get("round") == 1} == final, alone.tail()
