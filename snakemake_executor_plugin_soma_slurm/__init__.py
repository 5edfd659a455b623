"""Snakemake's `--executor soma-slurm`: the Slurm plugin's submissions, each run inside by
Snakemake's local executor (profiles/slurm).

snakemake-executor-plugin-slurm (2.8) runs every submission as `snakemake --executor
slurm-jobstep --jobs 1`: a round's submission (a Snakemake group: its clients' train jobs,
its average, its evaluation) ran its jobs one after another, each an `srun` step starting a
Snakemake of its own, 12-15 s a job, while it asked Slurm for the CPUs of jobs side by side.
This executor is that plugin with one change, what a submission runs: a single `srun` step
of `snakemake --executor local --cores <the submission's CPUs>`, which runs the group's jobs
in dependency order, side by side as far as the CPUs go, as `snakemake --cores N` does in
one allocation (workflow/sbatch/snakemake-allocation.sbatch). Snakemake already sizes a
group that way (its widest layer's CPUs and memory, the runtimes of its layers added), so the
request is what runs. The one step keeps the time limit's signal: Slurm's `--signal` reaches
the processes of job steps, not the batch shell's (soma.slurm.time_limit).

Everything else is the Slurm plugin's: submission, status polling, cancelling, its settings
(under this plugin's prefix: `--soma-slurm-status-command`, ...). Snakemake finds executor
plugins by their module name (`snakemake_executor_plugin_<name>`), so this module is a
top-level package of the soma distribution.
"""

from __future__ import annotations

import re

from snakemake_executor_plugin_slurm import Executor as SlurmExecutor
from snakemake_executor_plugin_slurm import ExecutorSettings, common_settings
from snakemake_executor_plugin_slurm_jobstep import (
    get_cpu_setting,
    get_gpu_setting,
    get_node_setting,
)
from snakemake_interface_common.exceptions import WorkflowError

__all__ = ["Executor", "ExecutorSettings", "common_settings", "step_command"]

# Snakemake's name for its executor that runs jobs as processes on this machine.
LOCAL = "--executor local"


def step_command(job_exec: str, python: str, srun: str, cpus: int) -> str:
    """What a submission runs: `job_exec` (Snakemake's command for the job, with LOCAL among
    its arguments) with its `python -m snakemake` under `srun` and, last (the last --cores
    wins), the submission's CPUs as the cores its local executor may use. Whatever precedes
    Snakemake in `job_exec` (a --precommand) runs before the step, in the batch shell."""
    start = f"{python} -m snakemake "
    if start not in job_exec:
        raise WorkflowError(
            f"soma-slurm: no `{start.strip()}` in the job's command to run under srun: "
            f"{job_exec[:200]}"
        )
    return job_exec.replace(start, f"{srun} {start}", 1) + f" --cores {cpus}"


def _cpus(job) -> int:
    """The CPUs the submission asks Slurm for (--cpus-per-task as the Slurm plugin sets it),
    or the job's threads when it asks per GPU or leaves CPUs to the partition."""
    found = re.search(r"--cpus-per-task=(\d+)", get_cpu_setting(job, _gpu(job)))
    return int(found.group(1)) if found else max(1, int(job.threads))


def _gpu(job) -> bool:
    return bool(job.resources.get("gpu") or "gpu" in str(job.resources.get("gres", "")))


class Executor(SlurmExecutor):
    """The Slurm plugin's executor; a submission runs its jobs with the local executor."""

    def __post_init__(self, test_mode: bool = False) -> None:
        super().__post_init__(test_mode)
        if self.array_jobs:  # arrays run their tasks through slurm-jobstep's own options
            raise WorkflowError(
                "soma-slurm does not submit job arrays (--soma-slurm-array-jobs): "
                "use `--executor slurm` for arrays"
            )

    def additional_general_args(self) -> str:
        return LOCAL

    def format_job_exec(self, job) -> str:
        gpu = _gpu(job)
        parts = ("srun -n1 --cpu-bind=q", get_cpu_setting(job, gpu), get_gpu_setting(job))
        srun = " ".join(part for part in (*parts, get_node_setting(job)) if part)
        python = self.get_python_executable()
        return step_command(super().format_job_exec(job), python, srun, _cpus(job))
