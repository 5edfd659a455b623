"""What a submission's `srun` step asks for: its CPUs, GPUs and nodes.

Vendored from snakemake-executor-plugin-slurm-jobstep 0.6.1 (MIT; `get_cpu_setting`,
`get_gpu_setting`, `get_node_setting`), because they are private helpers of a 0.x package:
soma's step asks for what the Slurm plugin's submission asked, and a helper that moved or
changed there must not change (or break) soma's steps. One change: a `gres` of GPUs counts
as GPUs too, so that the step (and each train job in it, soma.device) gets them.
"""

from __future__ import annotations

import re
from typing import Any

from snakemake_interface_common.exceptions import WorkflowError

__all__ = ["cpu_setting", "gpu_count", "gpu_setting", "node_setting"]


def _int(value: Any, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise WorkflowError(f"soma-slurm: {name} must be an integer, but is {value!r}")
    return value


def cpu_setting(job: Any, gpu: bool) -> str:
    """srun's CPUs for the step: cpus_per_task, else cpus_per_gpu on a GPU job, else the
    job's threads (as sbatch was asked); empty where the profile said a negative number."""
    resources = job.resources
    if resources.get("cpus_per_task"):
        cpus = _int(resources.cpus_per_task, "cpus_per_task")
        return "" if cpus < 0 else f"--cpus-per-task={max(1, cpus)}"
    if gpu and resources.get("cpus_per_gpu"):
        cpus = _int(resources.cpus_per_gpu, "cpus_per_gpu")
        return "" if cpus <= 0 else f"--cpus-per-gpu={cpus}"
    return f"--cpus-per-task={job.threads}"


def gpu_count(job: Any) -> int:
    """The GPUs the submission asks: `gpus`/`gpu`/`nvidia_gpu`, or the count of a `gres` of
    GPUs (`gpu:2`, `gpu:a100:2`; `gpu` alone is one); 0 without."""
    resources = job.resources
    for key in ("gpus", "gpu", "nvidia_gpu"):
        value = resources.get(key)
        if value is not None:
            return max(0, _int(value, key))
    gres = str(resources.get("gres") or "")
    found = re.fullmatch(r"(?:gres[:/])?gpu(?::([^:,]+))?(?::(\d+))?", gres.strip())
    if found is None:
        return 0
    kind, count = found.groups()
    if count is not None:
        return int(count)
    return int(kind) if kind is not None and kind.isdigit() else 1


def gpu_setting(job: Any) -> str:
    """srun's GPUs for the step: every GPU the submission holds, `--gpus=N` (empty: none)."""
    count = gpu_count(job)
    return f"--gpus={count}" if count > 0 else ""


def node_setting(job: Any) -> str:
    """One node unless the profile says how many (`nodes`)."""
    for key in ("nodes", "node", "slurm_nodes"):
        value = job.resources.get(key)
        if value is not None:
            if _int(value, key) <= 0:
                raise WorkflowError(f"soma-slurm: {key} must be > 0, but is {value}")
            return f"--nodes={value}"
    return "--nodes=1"
