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

And a submission says when it ended: its last act is an empty file named for it in a folder
of the run (`.snakemake/soma_slurm/<run>/`), which the main process lists four times a
second between the plugin's status checks. Once one is there Slurm is asked again within a
quarter of a second (then after a half, one, one... while it still says the job runs),
instead of at the plugin's next check (1 s after a submission, then 10, 20, 30 s... later
while nothing ended: a round of 20 s was seen ended after 33 s). Where the file is not seen
(a job killed, a file system that shows it late), the plugin's checks go on as before. The
wait also ends at Snakemake's shutdown, which waits for it (up to the plugin's interval).

Everything else is the Slurm plugin's: submission, status polling, cancelling, its settings
(under this plugin's prefix: `--soma-slurm-status-command`, ...). Snakemake finds executor
plugins by their module name (`snakemake_executor_plugin_<name>`), so this module is a
top-level package of the soma distribution.
"""

from __future__ import annotations

SLURM_PLUGINS = ("snakemake_executor_plugin_slurm", "snakemake_executor_plugin_slurm_jobstep")

try:
    from snakemake_executor_plugin_soma_slurm.executor import (
        Executor,
        ExecutorSettings,
        common_settings,
        ended_marker,
        step_command,
    )
except ImportError as missing:  # Snakemake without the Slurm plugin: every other executor
    if missing.name not in SLURM_PLUGINS:  # must still work, so this one refuses when used
        raise
    from snakemake_executor_plugin_soma_slurm import unavailable

    unavailable.REASON = unavailable.why(missing)
    from snakemake_executor_plugin_soma_slurm.unavailable import (  # type: ignore[assignment]
        Executor,
        common_settings,
    )

__all__ = ["Executor", "ExecutorSettings", "common_settings", "ended_marker", "step_command"]
