"""soma-slurm where snakemake-executor-plugin-slurm is not installed, or not as soma uses it:
Snakemake imports every executor plugin it finds at its start, so this one must import, and
refuses only when used, naming the real cause (a module absent, or a name it no longer has)."""

from __future__ import annotations

from importlib import metadata

from snakemake_interface_common.exceptions import WorkflowError
from snakemake_interface_executor_plugins.executors.base import AbstractExecutor
from snakemake_interface_executor_plugins.settings import CommonSettings

common_settings = CommonSettings(
    non_local_exec=True, implies_no_shared_fs=False, job_deploy_sources=False
)
# Set by the package when its import of the Slurm plugin failed: what the refusal says.
REASON = (
    "--executor soma-slurm needs snakemake-executor-plugin-slurm 2.8: pip install 'soma[workflow]'"
)


def _installed(module: str) -> str | None:
    try:
        return metadata.version(module.replace("_", "-"))
    except metadata.PackageNotFoundError:
        return None


def why(error: ImportError) -> str:
    """The refusal for `error`: the plugin absent (install it), or present without a name soma
    imports from it (the module, the name and the version installed: pin the one soma needs)."""
    module = error.name or "snakemake_executor_plugin_slurm"
    version = _installed(module)
    if isinstance(error, ModuleNotFoundError) or version is None:
        return (
            f"--executor soma-slurm needs {module.replace('_', '-')} (2.8), which is not "
            "installed: pip install 'soma[workflow]'"
        )
    return (
        f"--executor soma-slurm cannot import from {module} {version}: {error} "
        "(soma is built on 2.8: pip install 'snakemake-executor-plugin-slurm>=2.8,<2.9')"
    )


class Executor(AbstractExecutor):
    def __new__(cls, *args: object, **kwargs: object) -> Executor:
        raise WorkflowError(REASON)
