"""Broken variants of soma.slurm (a partition's limits, the time limit's signal); registered
into tests/mutants.py's MUTANTS."""

from __future__ import annotations

from contextlib import nullcontext

from mutants import _replace, mutant


@mutant("slurm_cpus_per_node_unchecked", caught_by=["tests/slurm/test_limits.py", "-k", "cpus"])
def _slurm_cpus_per_node_unchecked() -> None:
    """A partition read as having as many CPUs per node as any request asks."""
    import dataclasses

    import soma.slurm.limits

    real = soma.slurm.limits.refusal

    def refusal(request, partition, accounts):
        return real(request, dataclasses.replace(partition, cpus=request.cpus), accounts)

    _replace(soma.slurm.limits, "refusal", refusal)


@mutant(
    "time_limit_signal_unheard",
    # the client with nothing left to train first (-x stops there), then the 20 s sleep
    caught_by=["tests/slurm/test_time_limit.py", "-k", "drops_out"],
)
def _time_limit_signal_unheard() -> None:
    """A client's training that does not listen for Slurm's signal: it trains on into the
    limit (in the second catcher: its task sleeps its 20 s out) and no reason is recorded."""
    import soma.run.step

    _replace(soma.run.step, "raised_at_time_limit", lambda reason="": nullcontext())


@mutant(
    "soma_slurm_runs_jobs_one_at_a_time",
    caught_by=["tests/slurm/test_executor.py", "-k", "local_executor"],
)
def _soma_slurm_runs_jobs_one_at_a_time() -> None:
    """`--executor soma-slurm` running a submission as the Slurm plugin's own executor does:
    each job its own step of a nested Snakemake, one after another, while the submission asks
    for the CPUs and time of its jobs side by side."""
    import snakemake_executor_plugin_soma_slurm

    _replace(
        snakemake_executor_plugin_soma_slurm.Executor,
        "additional_general_args",
        lambda self: "--executor slurm-jobstep --jobs 1",
    )
