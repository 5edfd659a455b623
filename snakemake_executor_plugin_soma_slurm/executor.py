"""soma-slurm's executor: the Slurm plugin's, a submission running its jobs with Snakemake's
local executor in one srun step, and saying when it ended (see the package's docstring)."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from snakemake_executor_plugin_slurm import Executor as SlurmExecutor
from snakemake_executor_plugin_slurm import ExecutorSettings, common_settings
from snakemake_interface_common.exceptions import WorkflowError

from snakemake_executor_plugin_soma_slurm import failures
from snakemake_executor_plugin_soma_slurm.steps import (
    cpu_setting,
    gpu_count,
    gpu_setting,
    node_setting,
)

__all__ = ["Executor", "ExecutorSettings", "common_settings", "ended_marker", "step_command"]

# Snakemake's name for its executor that runs jobs as processes on this machine.
LOCAL = "--executor local"
# Seconds between two looks at the folder of ended submissions (a listdir: cheap), and the
# first wait after a marker is seen before Slurm is asked; it doubles while Slurm still says
# the job runs (its batch shell exiting, the node reporting), up to a second.
TICK = 0.25
HURRIED_MAX = 1.0
# soma.device.SLOTS_ENV (not imported: the executor runs where soma's torch need not load):
# set on a step that runs several jobs side by side on its GPUs, each then takes its own.
SLOTS_ENV = "SOMA_GPU_SLOTS"
# Options of the Slurm plugin's jobstep executor, which soma's steps do not run: given, they
# would be dropped without a word (the step runs Snakemake's local executor).
JOBSTEP = "--slurm-jobstep-"


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
    found = re.search(r"--cpus-per-task=(\d+)", cpu_setting(job, gpu_count(job) > 0))
    return int(found.group(1)) if found else max(1, int(job.threads))


def srun_of(job) -> str:
    """The srun that runs a submission's step: its CPUs, GPUs and node as sbatch was asked.
    A group's step that holds several GPUs (a GPU per train job side by side) is marked
    (SLOTS_ENV) so that each job in it takes a GPU of its own (soma.device.gpu_slot): the
    local executor inside hands none out, and every job would otherwise train on the first."""
    gpus = gpu_count(job)
    shared = f"--export=ALL,{SLOTS_ENV}=1" if gpus > 1 and job.is_group() else ""
    parts = ("srun -n1 --cpu-bind=q", shared, cpu_setting(job, gpus > 0), gpu_setting(job))
    return " ".join(part for part in (*parts, node_setting(job)) if part)


def refuse_jobstep_options(argv: list[str]) -> None:
    """Refuse, naming it, an option of the jobstep executor on Snakemake's command line:
    soma's steps run the local executor, so it would be dropped without a word."""
    given = [arg.split("=", 1)[0] for arg in argv if arg.startswith(JOBSTEP)]
    if given:
        raise WorkflowError(
            f"soma-slurm: {given[0]} is an option of the slurm-jobstep executor, which soma's "
            "submissions do not run (each runs Snakemake's local executor in one srun step): "
            "drop it (for sbatch's line length, --soma-slurm-pass-command-as-script)"
        )


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
        refuse_jobstep_options(sys.argv)
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
        srun = srun_of(job)
        python = self.get_python_executable()
        name = str(next(self._names))
        self._marker[id(job)] = name
        job_exec = super().format_job_exec(job)
        job_exec = quoted_config(job_exec, self.workflow.config_settings.config_args)
        command = ended_marker(step_command(job_exec, python, srun, _cpus(job)), self._ended / name)
        if self.workflow.executor_settings.pass_command_as_script:
            return command
        return for_wrap(command)  # the plugin runs `sbatch ... --wrap="<it>"` in a shell

    def report_job_error(self, job_info, msg=None, **kwargs) -> None:
        """The plugin's report, and on the main log one line with Slurm's state and soma's own
        reason from the job's log (Snakemake says only "Error in group round0" and "message:
        None" per rule of a group's submission)."""
        logs = [str(log) for log in kwargs.get("aux_logs") or []]
        line = failures.said_by_soma(
            job_info.external_jobid, msg, logs, Path(self.workflow.workdir_init)
        )
        if line:
            self.logger.error(line)
        super().report_job_error(job_info, msg=msg, **kwargs)

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
