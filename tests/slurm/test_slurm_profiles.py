"""soma on a real Slurm cluster, the shipped profiles: what they name, refusals before anything
runs, what a round asks for, and the time limit.

Needs the one-node cluster of tests/slurm (`bash tests/slurm/start.sh`); every test is marked
`slurm` and skips, with the reason, when it is not running (tests/slurm/harness.py: how each
test runs things and cleans up after them).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from slurm.cluster import ACCOUNT, PARTITION, slurm_env
from slurm.harness import (
    AVERAGE_0,
    FEW_JOBS,
    FIXTURES,
    PROFILE,
    RESULTS,
    ROOT,
    ROUNDS_PROFILE,
    RUN,
    completed,
    ended,
    slurm_output,
    snakemake,
    submitted,
    write_config,
)

pytestmark = pytest.mark.slurm

# --- the profiles -----------------------------------------------------------------------------


def test_the_profiles_name_the_workflows_rules_and_the_test_cluster(tmp_path) -> None:
    """Per-rule settings for a rule that no longer exists are silently ignored by Snakemake."""
    rules: set[str] = set()
    # a client a job (train), a batch of clients a job (train_batch), a round a job (round)
    for clients, per_job in ((2, 1), (3, 2), (2, 2)):
        write_config(tmp_path, clients=clients, clients_per_job=per_job)
        listed = subprocess.run(
            snakemake(tmp_path, "--list-rules"), cwd=tmp_path, capture_output=True, text=True
        )
        assert listed.returncode == 0, listed.stderr
        rules |= {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}
    assert {"start", "train", "average", "evaluate", "alone", "centralized", "summary"} <= rules
    assert {"train_batch", "round"} <= rules
    user = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    test = yaml.safe_load((PROFILE / "config.yaml").read_text())
    rounds = yaml.safe_load((ROUNDS_PROFILE / "config.yaml").read_text())
    # a round side by side; a job per submission, its end seen within a second
    assert user["executor"] == rounds["executor"] == test["executor"] == "soma-slurm"
    for profile in (user, test, rounds):
        assert profile["retries"] == 1
        assert set(profile.get("set-resources", {})) <= rules
        assert set(profile.get("set-threads", {})) <= rules
        # an executor's settings are spelled with its name: another's are silently ignored
        settings = {k for k in profile if k.startswith(("slurm-", "soma-slurm-"))}
        assert {k for k in settings if not k.startswith(profile["executor"] + "-")} == set()
        assert "serial" not in profile.get("default-resources", {})  # rounds run side by side
    assert {"train", "average"} <= set(user["set-resources"])
    # every rule that trains gets the profile's sizes and threads (GPU too, where given),
    # however clients_per_job groups the clients (issue 53)
    training = {"train", "train_batch", "round", "alone", "centralized"}
    assert training <= set(user["set-resources"])
    # threads are the run's (its config's `threads`, part of what it is), never a profile's
    assert "set-threads" not in user
    assert len({user["set-resources"][r]["mem_mb"] for r in training - {"centralized"}}) == 1
    assert "slurm_partition" not in user["default-resources"], "the user's to fill in"
    assert test["default-resources"]["slurm_partition"] == PARTITION
    assert test["default-resources"]["slurm_account"] == ACCOUNT
    assert test["soma-slurm-init-seconds-before-status-checks"] == 1
    assert rounds["soma-slurm-init-seconds-before-status-checks"] == 1


@pytest.mark.parametrize("profile", ["slurm", "slurm-test", "slurm-test-rounds"])
def test_every_shipped_profile_takes_a_secure_run(tmp_path, profile) -> None:
    """A dry run builds the DAG and its groups: a round's group that held train but not the
    secure phases before it (keys, share) was refused there ("depends on rule(s) keys,share
    from outside the group"), before any job ran."""
    write_config(tmp_path, clients=3, secure_aggregation={"threshold": 2})
    command = snakemake(tmp_path, "-n", "--profile", str(ROOT / "profiles" / profile))
    dry = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, (dry.stdout + dry.stderr)[-4000:]
    assert re.search(r"^keys\s+6$", dry.stdout, re.M), dry.stdout[-4000:]


# --- 5. asking for what runs; refusals before anything runs; the time limit -------------------


def profile_like(base: Path, folder: Path, **changes: Any) -> Path:
    """A copy of profile `base` in `folder`, with top-level keys changed (a None drops one)
    and `default-resources`/`set-resources` entries merged in."""
    profile = yaml.safe_load((base / "config.yaml").read_text())
    for key, value in changes.items():
        key = key.replace("_", "-")
        if value is None:
            profile.pop(key, None)
        elif key in ("default-resources", "set-resources") and key in profile:
            for name, given in value.items():
                merged = profile[key].get(name)
                profile[key][name] = {**merged, **given} if isinstance(merged, dict) else given
        else:
            profile[key] = value
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return folder


def with_fixtures() -> dict[str, str]:
    env = slurm_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FIXTURES), env.get("PYTHONPATH")]))
    return env


# A run of 4 threads (config `threads`): its clients each ask 4 CPUs (--cpus-per-task).
THREADS = 4


def test_the_shipped_profile_with_partition_and_account_is_refused_naming_the_cpu_limit(
    cluster, tmp_path, slurm
) -> None:
    """profiles/slurm with only its two lines filled in, a run of 4 threads: on the test node (2
    CPUs) round 0's submission (its 2 train jobs side by side at 4 threads each: 8 CPUs) cannot
    run, and the run is refused before any submission, one `soma:` line naming the CPU limit
    (plugin 2.8.0 said only "message: None" for a group's refusal); on a node with 8 CPUs or
    more it runs."""
    shipped = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    filled = {"slurm_partition": PARTITION, "slurm_account": ACCOUNT}
    profile = profile_like(ROOT / "profiles" / "slurm", tmp_path / "profile",
                           default_resources=filled)  # fmt: skip
    write_config(tmp_path, rounds=1, clients_per_job=1, threads=THREADS)
    command = snakemake(tmp_path, AVERAGE_0, slurm=slurm, profile=profile)
    run = slurm.run(command, cwd=tmp_path, timeout=FEW_JOBS)
    if run.returncode == 0:  # a node that fits the run's threads
        return
    assert not submitted(run.output) and not slurm.jobs(), run.tail()
    (said,) = [line for line in run.output.splitlines() if line.startswith("soma: ")]
    cpus = min(shipped["cores"], 2 * THREADS)  # 2 clients at once
    assert f"asks {cpus} CPUs (--cpus-per-task)" in said, run.tail()
    assert f"partition {PARTITION} has at most" in said and "run's `threads`" in said, said
    assert "group round0's submission (average, start, 2 train)" in said, said


def test_a_submission_slurm_refuses_is_refused_before_any_with_slurms_message(
    cluster, tmp_path, slurm
) -> None:
    """A request only Slurm can judge (a node feature no node has): `sbatch --test-only`'s
    refusal, in Slurm's words, is the run's error, before anything is submitted."""
    profile = profile_like(ROUNDS_PROFILE, tmp_path / "profile",
                           set_resources={"train": {"constraint": "nosuch"}})  # fmt: skip
    write_config(tmp_path, rounds=1, clients_per_job=1)
    run = slurm.run(snakemake(tmp_path, slurm=slurm, profile=profile), cwd=tmp_path,
                    timeout=FEW_JOBS)  # fmt: skip
    assert run.returncode != 0 and not submitted(run.output), run.tail()
    (said,) = [line for line in run.output.splitlines() if line.startswith("soma: ")]
    assert said.startswith("soma: Slurm refuses group round0's submission"), said
    assert "Invalid feature specification" in said and "-C nosuch" in said, said


def time_limit_of(job: str) -> int:
    """A finished job's time limit in minutes, from accounting."""
    out = slurm_output("sacct", "-X", "-n", "-P", "-j", job, "-o", "TimelimitRaw").split()
    return int(out[0])


def sleep_of(workdir: Path, client: int) -> tuple[float, float]:
    """When round 0's client slept in train() (tests/fixtures/slow_task.py logs both ends)."""
    log = (workdir / f"logs/{RUN}/round/0/client/{client}.log").read_text()
    began = re.search(rf"client {client}: sleeping .* from ([0-9.]+)", log)
    woke = re.search(rf"client {client}: woke at ([0-9.]+)", log)
    assert began and woke, log
    return float(began[1]), float(woke[1])


def steps_of(job: str) -> list[str]:
    """The job steps Slurm's accounting lists for a job (batch and extern left out)."""
    out = slurm_output("sacct", "-n", "-P", "-j", job, "-o", "JobID").split()
    steps = [line.split(".", 1)[1] for line in out if "." in line]
    return [step for step in steps if step not in ("batch", "extern")]


def test_a_rounds_submission_runs_its_train_jobs_side_by_side_as_it_asked(
    cluster, tmp_path, slurm
) -> None:
    """profiles/slurm-test-rounds (executor soma-slurm): a round's submission runs its jobs
    with Snakemake's local executor, in one job step. Two train jobs of 2 min each, each
    sleeping 30 s, the other jobs 0 min, on the node's 2 CPUs: the submission asks 2 CPUs
    and 2 min (the trains side by side: one layer), and the two sleeps overlap in time, as
    the clients' logs show (the Slurm plugin's own executor ran them as two job steps in
    series and asked the sum of their runtimes). Overlap, not the job's elapsed time, is the
    proof: on a loaded machine the job's start-up alone may take tens of seconds."""
    quick = {"runtime": 0}
    profile = profile_like(
        ROUNDS_PROFILE,
        tmp_path / "profile",
        set_resources={"train": {"runtime": 2}, "start": quick, "average": quick},
    )
    slow = {"slow_client": -1, "seconds": 30, "inner": "soma.tasks.control", "examples": 32}
    write_config(tmp_path, rounds=1, task="slow_task", task_options={"slow_task": slow},
                 metric="loss", clients_per_job=1)  # fmt: skip
    command = snakemake(tmp_path, AVERAGE_0, slurm=slurm, profile=profile)
    run = slurm.run(command, cwd=tmp_path, env=with_fixtures(), timeout=FEW_JOBS)
    assert run.returncode == 0, run.tail()
    (job,) = submitted(run.output)
    completed({job: ""})
    limit = time_limit_of(job)
    assert limit == 2, limit  # 0 (start) + 2 (both trains, one layer) + 0 (average)
    (first, second) = (sleep_of(tmp_path, client) for client in (0, 1))
    assert first[0] < second[1] and second[0] < first[1], (first, second)  # side by side
    assert steps_of(job) == ["0"], steps_of(job)  # one step: no Snakemake step per job
    asked = slurm_output("sacct", "-X", "-n", "-P", "-j", job, "-o", "ReqCPUS").split()
    assert asked == ["2"], asked
    average = json.loads((tmp_path / AVERAGE_0).read_text())
    assert [i["client"] for i in average["inputs"]] == [0, 1]


def test_a_client_signalled_before_its_time_limit_withdraws_and_the_quorum_goes_on(
    cluster, tmp_path, slurm
) -> None:
    """`--signal=URG@30` on a round's submission (profiles/slurm-test-rounds, soma-slurm: its
    one job step, run by the local executor) whose train jobs ask 2 min and its other jobs 0:
    Slurm signals it 30 to 90 s in (it may signal up to 60 s early), while it trains; client
    1, sleeping 300 s in train, drops out saying "time limit, raise `runtime`", the
    submission ends before its limit, not killed by it, and the round is averaged over client
    0 (quorum 1) at once, not at the deadline. (A job per submission, profiles/slurm-test, runs
    under the same executor: its step is signalled the same way.)"""
    quick = {"runtime": 0}
    profile = profile_like(
        ROUNDS_PROFILE,
        tmp_path / "profile",
        default_resources={"slurm_extra": "'--signal=URG@30'"},
        set_resources={"train": {"runtime": 2}, "start": quick, "average": quick},
    )
    slow = {"slow_client": 1, "seconds": 300, "inner": "soma.tasks.control", "examples": 32}
    write_config(tmp_path, rounds=1, task="slow_task", task_options={"slow_task": slow},
                 metric="loss", quorum=1, clients_per_job=1)  # fmt: skip
    command = snakemake(tmp_path, AVERAGE_0, slurm=slurm, profile=profile)
    run = slurm.run(command, cwd=tmp_path, env=with_fixtures(), timeout=FEW_JOBS)
    assert run.returncode == 0, run.tail()
    dropped = json.loads((tmp_path / RESULTS / "round/0/client/1.json").read_text())
    assert "time limit, raise `runtime`" in dropped["dropped"], dropped
    average = json.loads((tmp_path / AVERAGE_0).read_text())
    assert [i["client"] for i in average["inputs"]] == [0]
    assert average["left_out"] == [{"client": 1, "why": dropped["dropped"]}]
    (job,) = submitted(run.output)
    assert ended(job) == "COMPLETED"  # ended at the signal: a job killed at its limit is TIMEOUT
