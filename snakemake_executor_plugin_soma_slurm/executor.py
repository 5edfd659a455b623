"""soma-slurm's executor: the Slurm plugin's, a submission running its jobs with Snakemake's
local executor in one srun step, and saying when it ended (see the package's docstring)."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path

from snakemake_executor_plugin_slurm import Executor as SlurmExecutor
from snakemake_executor_plugin_slurm import ExecutorSettings, common_settings
from snakemake_executor_plugin_slurm_jobstep import (
    get_cpu_setting,
    get_gpu_setting,
    get_node_setting,
)
from snakemake_interface_common.exceptions import WorkflowError

__all__ = ["Executor", "ExecutorSettings", "common_settings", "ended_marker", "step_command"]

# Snakemake's name for its executor that runs jobs as processes on this machine.
LOCAL = "--executor local"
# Seconds between two looks at the folder of ended submissions (a listdir: cheap), and the
# first wait after a marker is seen before Slurm is asked; it doubles while Slurm still says
# the job runs (its batch shell exiting, the node reporting), up to a second.
TICK = 0.25
HURRIED_MAX = 1.0


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


def quoted_config(command: str, config_args: object) -> str:
    """`command` with Snakemake's `--config` arguments (`config_args`, as the job's command
    carries them) quoted for a shell with `shlex.quote`: Snakemake writes each as Python's
    `repr`, which a shell reads back only while the value holds no single quote (`"it's
    $(x)"` runs `x`) and no backslash (doubled). Refused, naming it, where the command does
    not carry them as Snakemake writes them: a value never reaches a shell unquoted."""
    from snakemake_interface_executor_plugins.utils import format_cli_arg, format_cli_value

    if not config_args:
        return command
    if isinstance(config_args, Mapping):
        values = [f"{key}={format_cli_value(value)}" for key, value in config_args.items()]
    else:
        values = [str(value) for value in config_args]  # type: ignore[union-attr]
    written = f" {format_cli_arg('--config', config_args)} "
    if command.count(written) != 1:
        raise WorkflowError(
            "soma-slurm: the job's command does not carry the --config values as Snakemake "
            f"writes them, so they cannot be quoted for its shell: {command[:200]}"
        )
    return command.replace(written, f" --config {' '.join(map(shlex.quote, values))} ")


def for_wrap(command: str) -> str:
    """`command` as the Slurm plugin must be handed it for its `--wrap="..."` to reach sbatch
    as `command` itself: each character a double-quoted shell word still reads (a backslash,
    `$`, a backquote) escaped with a backslash (the plugin escapes the double quotes itself),
    so the submission shell runs nothing of it. Not for `--pass-command-as-script`, whose
    script reaches sbatch through stdin, unread by a shell."""
    return re.sub(r"([\\$`])", r"\\\1", command)


def ended_marker(command: str, marker: Path) -> str:
    """`command`, then `marker` made whether it succeeded or failed (its failure kept: exit 1).
    No `$` or double quote of its own (the marker's path is quoted for the shell)."""
    made = f"touch {shlex.quote(str(marker))}"
    return f"{command} && {made} || {{ {made}; exit 1; }}"


def _cpus(job) -> int:
    """The CPUs the submission asks Slurm for (--cpus-per-task as the Slurm plugin sets it),
    or the job's threads when it asks per GPU or leaves CPUs to the partition."""
    found = re.search(r"--cpus-per-task=(\d+)", get_cpu_setting(job, _gpu(job)))
    return int(found.group(1)) if found else max(1, int(job.threads))


def _gpu(job) -> bool:
    return bool(job.resources.get("gpu") or "gpu" in str(job.resources.get("gres", "")))


class Executor(SlurmExecutor):
    """The Slurm plugin's executor; a submission runs its jobs with the local executor."""

    def __init__(self, workflow, logger) -> None:
        # before the plugin's __init__, which starts the thread that calls `sleep`
        self._ended: Path | None = None  # the folder of ended submissions, once there
        self._names = itertools.count()
        self._marker: dict[int, str] = {}  # id(job) -> its marker's name, for its last submission
        self._hurried = TICK  # the wait after a marker is seen, until Slurm says it ended
        super().__init__(workflow, logger)

    def __post_init__(self, test_mode: bool = False) -> None:
        super().__post_init__(test_mode)
        ended = Path(self.workflow.workdir_init, ".snakemake", "soma_slurm", self.run_uuid)
        ended.mkdir(parents=True, exist_ok=True)
        self._ended = ended
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
        name = str(next(self._names))
        self._marker[id(job)] = name
        job_exec = super().format_job_exec(job)
        job_exec = quoted_config(job_exec, self.workflow.config_settings.config_args)
        command = ended_marker(step_command(job_exec, python, srun, _cpus(job)), self._ended / name)
        if self.workflow.executor_settings.pass_command_as_script:
            return command
        return for_wrap(command)  # the plugin runs `sbatch ... --wrap="<it>"` in a shell

    async def sleep(self) -> None:
        """The plugin's wait before its next status check, cut short by a submission's
        marker (Slurm is then asked within TICK, again after 2, 4... TICKs while it says
        the job runs) and by Snakemake's shutdown, which waits for this to return."""
        waited = 0.0
        while waited < self.next_seconds_between_status_checks and self.wait:
            if self._one_ended():
                await asyncio.sleep(self._hurried)  # Slurm needs a moment to call it ended
                self._hurried = min(2 * self._hurried, HURRIED_MAX)
                return
            self._hurried = TICK
            await asyncio.sleep(TICK)
            waited += TICK

    def _one_ended(self) -> bool:
        if self._ended is None:
            return False
        try:
            there = set(os.listdir(self._ended))
        except OSError:
            return False
        return any(self._marker.get(id(info.job)) in there for info in list(self.active_jobs))

    def shutdown(self) -> None:
        super().shutdown()
        if self._ended is not None:
            shutil.rmtree(self._ended, ignore_errors=True)
