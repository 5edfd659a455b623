"""With GPUs on Slurm (issue 53; docs/how-to/gpus.md): what every submission of the default
config asks of Slurm under the shipped profile with a GPU per training job, read from the
sbatch options the Slurm plugin will give each (soma.slurm.submissions), without a cluster:
the run stops at its start, before any submission (tests/slurm/plan_worker.py), with fake
Slurm commands on PATH. And what a round's step runs, where its jobs share its GPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import fake_commands

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("plan_worker.py")
TRAINING = ("train", "train_batch", "round", "alone", "centralized")
SLURM_COMMANDS = ("sbatch", "srun", "sacct", "squeue", "sinfo", "scontrol", "sacctmgr", "sshare")


def profile_with(folder: Path, gpu: dict[str, Any], groups: bool = True) -> Path:
    """profiles/slurm with its partition and account filled in, `gpu` under every rule that
    trains (as its comments say), and its `groups:` (a round per submission) or not."""
    profile = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    profile["default-resources"].update(slurm_partition="gpu", slurm_account="lab")
    for rule in TRAINING:
        profile["set-resources"][rule].update(gpu)
    if not groups:
        profile.pop("groups")
        profile.pop("group-components")
    folder.mkdir()
    (folder / "config.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return folder


def planned(tmp_path: Path, profile: Path) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """The default config's run under `profile`, stopped at its start: its output, and every
    submission it would make ({what, options})."""
    # none is asked to submit: the run stops before
    path = fake_commands(tmp_path / "bin", dict.fromkeys(SLURM_COMMANDS, "exit 0"))
    plan = tmp_path / "plan.json"
    env = dict(os.environ, PATH=path, SOMA_PLAN=str(plan))
    command = [sys.executable, str(WORKER), "-s", str(ROOT / "Snakefile"), "--profile",
               str(profile), "--configfile", str(ROOT / "config" / "config.yaml"),
               "--config", "run=gpus"]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    return done, (json.loads(plan.read_text()) if plan.is_file() else [])


def trains(what: str) -> bool:
    return any(f" {rule}" in what or f"{rule}'s" in what for rule in TRAINING)


@pytest.mark.workflow
@pytest.mark.parametrize(
    "gpu, asked, groups",
    [({"gpu": 1}, "--gpus=", True), ({"gres": "gpu:1"}, "--gres=gpu:1", False)],
    ids=["gpu-rounds", "gres-jobs"],
)
def test_every_training_submission_of_the_default_config_asks_a_gpu(tmp_path, gpu, asked, groups):
    """The default config (clients_per_job 5: rule train_batch, 2 a round; the baselines) with
    the shipped profile: every submission that trains asks GPUs, a round's one per train job
    it runs side by side (gpu), or each job its own (gres, a job per submission)."""
    done, plan = planned(tmp_path, profile_with(tmp_path / "profile", gpu, groups))
    assert done.returncode == 0, done.stderr[-3000:]
    training = [row for row in plan if trains(row["what"])]
    assert len(training) == (10 + 10 + 1 if groups else 20 + 10 + 1), [r["what"] for r in plan]
    for row in training:
        given = [option for option in row["options"] if option.startswith(asked)]
        assert given, row
        if groups:  # two train_batch side by side (cores 16, threads 4), a GPU each
            width = 2 if "train_batch" in row["what"] else 1
            assert given == [f"--gpus={width}"], row
    others = [row for row in plan if not trains(row["what"])]
    assert all(not o.startswith(("--gpus", "--gres")) for r in others for o in r["options"])


@pytest.mark.workflow
def test_gres_with_round_submissions_is_refused_at_the_start_with_the_fix(tmp_path):
    """gres is text: Snakemake cannot add a round's GPUs up ("Resource gres is a string but
    not all jobs in group require the same value", in the middle of the run's start). Refused
    before anything is submitted, one `soma:` line saying what works."""
    done, plan = planned(tmp_path, profile_with(tmp_path / "profile", {"gres": "gpu:1"}))
    assert done.returncode == 1 and not plan, done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if line.startswith("soma: ")]
    assert len(said) == 1, done.stderr[-3000:]
    assert "asks gres='gpu:1'" in said[0] and "ask `gpu: 1` instead" in said[0], said
    assert "delete `groups:`" in said[0], said


def job_like(gpu: int, group: bool) -> Any:
    from types import SimpleNamespace

    resources = {"gpu": gpu} if gpu else {}
    return SimpleNamespace(
        resources=SimpleNamespace(get=resources.get), threads=8, is_group=lambda: group
    )


def test_a_rounds_step_with_gpus_is_marked_for_a_gpu_per_job():
    """A round's step holding 2 GPUs is marked so each job takes its own; a job's own
    submission (Slurm gave it its GPU) and a step without GPUs are not."""
    from snakemake_executor_plugin_soma_slurm.executor import SLOTS_ENV, srun_of
    from soma.device import SLOTS_ENV as READ

    assert SLOTS_ENV == READ  # the executor does not import soma: the two names must agree
    marked = srun_of(job_like(2, group=True))
    assert f"--export=ALL,{SLOTS_ENV}=1" in marked and "--gpus=2" in marked, marked
    assert "--export" not in srun_of(job_like(1, group=False))
    assert "--export" not in srun_of(job_like(0, group=True))


HOLDER = """
import sys
from soma.device import resolve_device
resolve_device("auto")
import os
print(os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
sys.stdin.read()  # held until the test has seen every job's GPU
"""


def test_jobs_side_by_side_in_a_marked_step_each_see_a_different_gpu(tmp_path):
    """Three jobs of a marked step (a fake environment: Slurm's CUDA_VISIBLE_DEVICES of the
    step's 3 GPUs), alive at once: each one's CUDA_VISIBLE_DEVICES names one GPU, a
    different one, whatever torch finds there (this machine may have none)."""
    step = {"SLURM_JOB_ID": f"test{os.getpid()}", "SLURM_STEP_ID": "0", "TMPDIR": str(tmp_path)}
    env = dict(os.environ, SOMA_GPU_SLOTS="1", CUDA_VISIBLE_DEVICES="1,2,3", **step)
    jobs = [
        subprocess.Popen(
            [sys.executable, "-c", HOLDER],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(3)
    ]
    try:
        seen = [job.stdout.readline().strip() for job in jobs]  # type: ignore[union-attr]
    finally:
        for job in jobs:
            job.communicate("")
    assert sorted(seen) == ["1", "2", "3"], seen
