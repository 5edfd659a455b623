"""Broken variants of the soma-slurm executor's quoting (registered into tests/mutants.py's
MUTANTS); tests/slurm/submit_worker.py applies them in the Snakemake that submits."""

from __future__ import annotations

from mutants import _replace, mutant

_QUOTING = ["tests/slurm/test_executor_quoting.py"]


@mutant("soma_slurm_wrap_unquoted", caught_by=_QUOTING)
def _soma_slurm_wrap_unquoted() -> None:
    """The command handed to the Slurm plugin's `--wrap="..."` as it is: the submission
    shell runs a `$(...)` of a config value."""
    import snakemake_executor_plugin_soma_slurm.executor as executor

    _replace(executor, "for_wrap", lambda command: command)


@mutant("soma_slurm_config_as_snakemake_writes_it", caught_by=_QUOTING)
def _soma_slurm_config_as_snakemake_writes_it() -> None:
    """The job's `--config` values left as Snakemake writes them (Python's repr): a value
    with a single quote is double-quoted, and the job's shell runs its `$(...)`."""
    import snakemake_executor_plugin_soma_slurm.executor as executor

    _replace(executor, "quoted_config", lambda command, config_args: command)
