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
    caught_by=["tests/slurm/test_time_limit.py", "-k", "drops_out_saying_so"],
)
def _time_limit_signal_unheard() -> None:
    """A client's training that does not listen for Slurm's signal: it trains on into the
    limit (here: its task sleeps its 20 s out) and no reason is recorded."""
    import soma.run.step

    _replace(soma.run.step, "raised_at_time_limit", lambda: nullcontext())
