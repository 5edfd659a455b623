"""`--executor soma-slurm` (snakemake_executor_plugin_soma_slurm): what a submission runs,
checked without a cluster (tests/slurm/test_slurm.py runs it on one)."""

from __future__ import annotations

import pytest
from snakemake_interface_common.exceptions import WorkflowError

import snakemake_executor_plugin_soma_slurm as plugin

PYTHON = "/usr/bin/python3"
JOB = f"{PYTHON} -m snakemake --snakefile Snakefile --target-jobs 'train:round=0' --cores 16"


def submission(precommand: str = "") -> str:
    """Snakemake's command for a job as the executor builds it (its arguments abridged)."""
    arguments = plugin.Executor.additional_general_args(None)
    return f"{precommand}{JOB} --nolock {arguments} --mode remote"


def test_a_submission_runs_its_jobs_with_the_local_executor_in_one_srun_step():
    ran = plugin.step_command(submission(), PYTHON, "srun -n1 --cpus-per-task=4", 4)
    assert ran.startswith(f"srun -n1 --cpus-per-task=4 {PYTHON} -m snakemake ")
    assert "--executor local" in ran and "slurm-jobstep" not in ran and "--jobs 1" not in ran
    # the last --cores wins: the submission's CPUs, not the profile's
    assert ran.endswith(" --cores 4"), ran


def test_a_precommand_runs_before_the_step_in_the_batch_shell():
    ran = plugin.step_command(submission("module load x && "), PYTHON, "srun -n1", 2)
    assert ran.startswith(f"module load x && srun -n1 {PYTHON} -m snakemake ")


def test_a_command_without_snakemake_is_refused_naming_it():
    with pytest.raises(WorkflowError, match="soma-slurm: no `python -m snakemake`"):
        plugin.step_command("sh -c true", "python", "srun -n1", 2)


def test_snakemake_finds_the_executor_by_its_name():
    from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry

    found = ExecutorPluginRegistry().get_plugin("soma-slurm")
    assert found.executor is plugin.Executor
    assert found.settings_cls is plugin.ExecutorSettings  # the Slurm plugin's settings


@pytest.mark.parametrize("command, code", [("true", 0), ("false", 1)])
def test_a_submission_leaves_its_marker_whether_it_ends_well_or_not(tmp_path, command, code):
    """The main process looks for the marker between its status checks: a submission makes it
    last, in either case, and keeps its failure."""
    import subprocess

    marker = tmp_path / "ended" / "0"
    marker.parent.mkdir()
    script = plugin.ended_marker(command, marker)
    assert "$" not in script and '"' not in script  # it goes inside --wrap="..."
    assert subprocess.run(["sh", "-c", script]).returncode == code
    assert marker.is_file()


def waiting(tmp_path, wait: bool = True):
    """The executor as its status thread sees it between two checks: one submission active,
    the plugin's next check 10 minutes away."""
    from types import SimpleNamespace

    from snakemake_executor_plugin_soma_slurm.executor import TICK

    executor = object.__new__(plugin.Executor)
    job = SimpleNamespace(name="round0")
    executor._ended, executor._marker, executor._hurried = tmp_path, {id(job): "0"}, TICK
    executor.active_jobs, executor.wait = [SimpleNamespace(job=job)], wait
    executor.next_seconds_between_status_checks = 600
    return executor


def test_the_wait_for_a_status_check_ends_at_a_marker_and_at_shutdown(tmp_path):
    """A submission's marker has Slurm asked at once, again sooner while it says the job
    runs; Snakemake's shutdown, which waits for the wait, ends it too."""
    import asyncio

    from snakemake_executor_plugin_soma_slurm.executor import HURRIED_MAX, TICK

    executor = waiting(tmp_path)
    with pytest.raises(TimeoutError):  # nothing ended: the plugin's interval holds
        asyncio.run(asyncio.wait_for(executor.sleep(), 3 * TICK))
    (tmp_path / "0").touch()
    for hurried in (2 * TICK, 4 * TICK, HURRIED_MAX, HURRIED_MAX):
        asyncio.run(asyncio.wait_for(executor.sleep(), 5))
        assert executor._hurried == hurried
    (tmp_path / "0").unlink()
    asyncio.run(asyncio.wait_for(waiting(tmp_path, wait=False).sleep(), 5))


def test_without_the_slurm_plugin_snakemake_starts_and_soma_slurm_refuses_naming_it():
    """Snakemake imports every executor plugin it finds at its start: soma's must import
    where snakemake-executor-plugin-slurm is not installed (soma without its workflow extra),
    and refuse only when used."""
    import subprocess
    import sys

    hidden = """
import pkgutil, sys
for name in ("snakemake_executor_plugin_slurm", "snakemake_executor_plugin_slurm_jobstep"):
    sys.modules[name] = None
found = pkgutil.iter_modules
pkgutil.iter_modules = lambda *a, **k: (
    m for m in found(*a, **k) if not m.name.startswith("snakemake_executor_plugin_slurm")
)
from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry
plugin = ExecutorPluginRegistry().get_plugin("soma-slurm")
plugin.executor(None, None)
"""
    done = subprocess.run([sys.executable, "-c", hidden], capture_output=True, text=True)
    assert done.returncode == 1
    assert "WorkflowError: --executor soma-slurm needs snakemake-executor-plugin-slurm" in (
        done.stderr
    ), done.stderr[-2000:]


# --- honest at its edges (issue 53) -----------------------------------------------------------


def test_an_import_that_fails_is_named_as_it_failed():
    """A name the Slurm plugin no longer has is said as that (the module, the name, the
    version installed), not as the plugin missing; a plugin absent is said as absent."""
    from snakemake_executor_plugin_soma_slurm.unavailable import why

    moved = ImportError(
        "cannot import name 'Executor' from 'snakemake_executor_plugin_slurm'",
        name="snakemake_executor_plugin_slurm",
    )
    said = why(moved)
    assert "cannot import from snakemake_executor_plugin_slurm 2." in said, said
    assert "cannot import name 'Executor'" in said and "is not installed" not in said, said
    absent = ModuleNotFoundError("No module named 'x'", name="snakemake_executor_plugin_slurm_x")
    assert "needs snakemake-executor-plugin-slurm-x (2.8), which is not installed" in why(absent)


def test_a_jobstep_option_soma_would_drop_is_refused_naming_it():
    from snakemake_executor_plugin_soma_slurm.executor import refuse_jobstep_options

    refuse_jobstep_options(["snakemake", "--soma-slurm-pass-command-as-script"])
    with pytest.raises(WorkflowError, match="soma-slurm: --slurm-jobstep-pass-command-as-script"):
        refuse_jobstep_options(["snakemake", "--slurm-jobstep-pass-command-as-script", "-n"])


@pytest.mark.parametrize(
    "resources, gpus",
    [({}, 0), ({"gpu": 2}, 2), ({"gres": "gpu:1"}, 1), ({"gres": "gpu:a100:3"}, 3),
     ({"gres": "gpu"}, 1), ({"gres": "tmpfs:10G"}, 0)],
)  # fmt: skip
def test_a_steps_gpus_are_the_submissions_whether_counted_or_generic(resources, gpus):
    from types import SimpleNamespace

    from snakemake_executor_plugin_soma_slurm.steps import gpu_count, gpu_setting

    job = SimpleNamespace(resources=SimpleNamespace(get=resources.get), threads=1)
    assert gpu_count(job) == gpus
    assert gpu_setting(job) == (f"--gpus={gpus}" if gpus else "")


def test_a_failed_submission_is_said_with_slurms_state_and_somas_reason(tmp_path):
    """The main log's line for a group's failed submission: Slurm's state and soma's own
    reason, read from the rule's log the inner Snakemake named in the Slurm log; a time limit
    with no reason of soma's is said as what to raise."""
    from snakemake_executor_plugin_soma_slurm.failures import said_by_soma

    rule_log = tmp_path / "logs/run/round/0/client/1.log"
    rule_log.parent.mkdir(parents=True)
    rule_log.write_text("x INFO soma: training\nx ERROR soma: failed after 3.10 s: boom: fix it\n")
    slurm_log = tmp_path / "9.log"
    slurm_log.write_text("Error in rule train:\n    log: logs/run/round/0/client/1.log (check)\n")
    message = "SLURM-job '9' failed, SLURM status is: 'FAILED'. Reason: x."
    said = said_by_soma("9", message, [str(slurm_log)], tmp_path)
    assert said == f"soma-slurm: Slurm job 9 ended FAILED: boom: fix it ({slurm_log})", said
    timeout = "SLURM-job '9' failed, SLURM status is: 'TIMEOUT'."
    said = said_by_soma("9", timeout, [str(tmp_path / "gone.log")], tmp_path)
    assert said is not None and "ended TIMEOUT: time limit: raise `runtime`" in said, said
