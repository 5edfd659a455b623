"""`soma slurm usage` after a run on the test cluster (tests/slurm: `bash tests/slurm/start.sh`):
per rule, what its submissions asked and what they used, from the run's own Slurm logs and
sacct. Marked `slurm`: skipped, with the reason, when the cluster is not running."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from slurm.cluster import slurm_env
from slurm.harness import (
    AVERAGE_0,
    FEW_JOBS,
    ROUNDS_PROFILE,
    completed,
    snakemake,
    submitted,
    write_config,
)

pytestmark = pytest.mark.slurm


def test_after_a_run_the_report_lists_asked_against_used_per_rule(cluster, tmp_path, slurm):
    """Round 0 of 2 clients as one submission (profiles/slurm-test-rounds: a round per
    submission, its logs kept): the report has the round's group, what it asked (the
    profile's 2000 MB for each of 2 train jobs side by side, 2 CPUs) and what it used
    (MaxRSS, or that Slurm sampled none; its elapsed time), and suggests profile values."""
    write_config(tmp_path, rounds=1, clients_per_job=1)
    command = snakemake(tmp_path, AVERAGE_0, slurm=slurm, profile=ROUNDS_PROFILE)
    run = slurm.run(command, cwd=tmp_path, timeout=FEW_JOBS)
    assert run.returncode == 0, run.tail()
    jobs = submitted(run.output)
    completed(jobs)  # accounting has them, steps included
    report = subprocess.run(
        [sys.executable, "-m", "soma.cli", "slurm", "usage"],
        cwd=tmp_path, env=slurm_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    (line,) = report.stdout.splitlines()
    assert line.startswith(
        "group round (average, start, train): 1 submission (COMPLETED); asked 4000 MB, "
    ), line
    assert ", 2 CPUs; used at most " in line, line
    used = re.search(r"used at most (\d+) MB \(MaxRSS\)", line)
    if used:  # Slurm samples memory every 30 s here: a quicker job has no MaxRSS, said so
        assert int(used.group(1)) > 0, line
        assert re.search(r"suggest mem_mb: \d+, runtime: \d+$", line), line
    else:
        assert "used at most memory not sampled" in line, line
        assert re.search(r"suggest runtime: \d+$", line), line


def test_a_rounds_submission_past_its_time_limit_is_said_on_the_main_log(
    cluster, tmp_path, slurm
) -> None:
    """A round's submission (profiles/slurm-test-rounds) asking 1 min whose client sleeps
    300 s, no signal before the limit: Slurm ends it TIMEOUT, and the main log says so in one
    line with what to raise, where Snakemake says only "Error in group round0"."""
    from test_slurm_profiles import profile_like, with_fixtures

    quick = {"runtime": 0}
    profile = profile_like(ROUNDS_PROFILE, tmp_path / "profile",
                           set_resources={"train": {"runtime": 1}, "start": quick,
                                          "average": quick})  # fmt: skip
    slow = {"slow_client": 1, "seconds": 300, "inner": "soma.tasks.control", "examples": 32}
    write_config(tmp_path, rounds=1, task="slow_task", task_options={"slow_task": slow},
                 metric="loss", clients_per_job=1)  # fmt: skip
    command = snakemake(tmp_path, AVERAGE_0, "--retries", "0", slurm=slurm, profile=profile)
    run = slurm.run(command, cwd=tmp_path, env=with_fixtures(), timeout=FEW_JOBS)
    assert run.returncode != 0, run.tail()
    (job,) = submitted(run.output)
    said = [line for line in run.output.splitlines() if line.startswith("soma-slurm: ")]
    assert len(said) == 1, run.tail()
    assert said[0].startswith(f"soma-slurm: Slurm job {job} ended TIMEOUT: time limit: "), said
    assert "raise `runtime`" in said[0], said
