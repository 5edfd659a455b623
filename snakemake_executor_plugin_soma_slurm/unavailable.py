"""soma-slurm where snakemake-executor-plugin-slurm is not installed: Snakemake imports every
executor plugin it finds at its start, so this one must import, and refuses only when used."""

from __future__ import annotations

from snakemake_interface_common.exceptions import WorkflowError
from snakemake_interface_executor_plugins.executors.base import AbstractExecutor
from snakemake_interface_executor_plugins.settings import CommonSettings

common_settings = CommonSettings(
    non_local_exec=True, implies_no_shared_fs=False, job_deploy_sources=False
)


class Executor(AbstractExecutor):
    def __new__(cls, *args: object, **kwargs: object) -> Executor:
        raise WorkflowError(
            "--executor soma-slurm needs snakemake-executor-plugin-slurm 2.8: "
            "pip install 'soma[workflow]'"
        )
