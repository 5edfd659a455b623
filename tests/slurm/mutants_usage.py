"""Broken variants of issue 53's Slurm guarantees: asked against used (soma.slurm.usage), a
failed submission's reason (soma-slurm), gres refused with round submissions, a round's GPU
step marked for a GPU per job."""

from __future__ import annotations

from mutants import _replace, mutant


@mutant("slurm_usage_rss_from_the_job_line", caught_by=["tests/slurm/test_usage.py"])
def _slurm_usage_rss_from_the_job_line() -> None:
    """MaxRSS read from the job's own line (which sacct leaves empty), not from its steps."""
    import soma.slurm.usage as usage

    parse = usage.parse_sacct

    def parse_sacct(text):
        found = parse(text)
        for used in found.values():
            used.rss_mb = 0.0
        return found

    _replace(usage, "parse_sacct", parse_sacct)


@mutant(
    "slurm_failure_without_somas_reason",
    caught_by=["tests/slurm/test_executor.py", "-k", "failed_submission"],
)
def _slurm_failure_without_somas_reason() -> None:
    """The failed submission said as the plugin says it: the state, not soma's reason."""
    import snakemake_executor_plugin_soma_slurm.failures as failures

    def said_by_soma(jobid, message, slurm_logs, workdir=None):
        return f"soma-slurm: Slurm job {jobid} ended {failures.state_of(message)}"

    _replace(failures, "said_by_soma", said_by_soma)


@mutant(
    "slurm_gres_with_groups_let_through",
    caught_by=["tests/slurm/test_gpus.py", "-k", "gres_with_round"],
)
def _slurm_gres_with_groups_let_through() -> None:
    """A rule's gres with `groups:` not refused at the start: Snakemake fails to form the
    round's submission, in its own words, or asks one GPU for all its clients."""
    import soma.slurm.submissions as submissions

    def gres_with_groups(workflow):
        return None

    _replace(submissions, "gres_with_groups", gres_with_groups)


@mutant("slurm_gpu_step_unmarked", caught_by=["tests/slurm/test_gpus.py", "-k", "marked"])
def _slurm_gpu_step_unmarked() -> None:
    """A round's step with GPUs not marked: every job in it trains on the step's first GPU."""
    import snakemake_executor_plugin_soma_slurm.executor as executor

    srun = executor.srun_of

    def srun_of(job):
        return srun(job).replace(f" --export=ALL,{executor.SLOTS_ENV}=1", "")

    _replace(executor, "srun_of", srun_of)
