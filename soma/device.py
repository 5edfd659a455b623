"""Where training runs: `cpu`, `cuda`, `cuda:N` or `auto`, read once and refused by name.

A device is said as text because it is a task option: it crosses JSON, the workflow's config
and the command line, and is refused when the task is made, before any round starts, rather
than by torch in the middle of the first one. `auto` is `cuda` when torch sees a GPU and
`cpu` otherwise, so that one configuration runs on a laptop and on a GPU node alike. Under
Slurm a job sees only the GPUs it was given (CUDA_VISIBLE_DEVICES), numbered from 0, so
`cuda` (the first visible GPU, `cuda:0`) is the job's own.

A round's Slurm submission under soma's executor (profiles/slurm, `soma-slurm`) is one `srun`
step that holds a GPU per client side by side and runs the round's jobs with Snakemake's local
executor, which hands no job a GPU of its own: every job sees them all. There the executor
marks the step (SLOTS_ENV), and `auto` or `cuda` takes a GPU slot: the first of the step's
GPUs no other process of the step holds, held by an exclusive lock on a file of the node
(released by the kernel when the process ends, however it ends), and narrows the process's
CUDA_VISIBLE_DEVICES to it. A lock, not a counter, so that no job crashed mid-round leaves a
GPU taken; the node's own folder, not the shared file system, whose locks are not reliable.

Only training and evaluation happen on the device: soma.nodes.export always copies to CPU,
so what crosses the store is the same whatever trained it, and soma.nodes.load copies into
the nodes wherever they are.
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import torch
from torch import nn

from soma.errors import SomaError, TaskError

CHOICES = "cpu, cuda, cuda:N (N a GPU index, from 0) or auto"
_CUDA = re.compile(r"cuda(?::(\d+))?")
# Set ("1") by soma's Slurm executor on a step whose jobs share its GPUs: each takes its own.
SLOTS_ENV = "SOMA_GPU_SLOTS"
# This process's GPU slot once taken: (the GPU, its index among those torch saw before, the
# open locked file, kept open for the process's life); None: no slot here.
_SLOT: dict[str, tuple[str, int, IO[str]] | None] = {}


class DeviceError(SomaError, ValueError):
    """A device that is not one soma knows, or that this machine does not have."""


class TaskDeviceError(DeviceError, TaskError):
    """A task's `device` option refused: a task refuses its options as TaskError, like any
    other option, and it is a device refusal too."""


def gpus() -> int:
    """How many GPUs this process sees (0 without a CUDA build of torch or a driver)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_device(text: object, *, option: str = "device") -> torch.device:
    """The torch device that `text` names, `cuda` always with its index (`cuda:0`).

    Refused, naming `option`, when `text` is not one of CHOICES or names a GPU that this
    machine does not have: torch would only say so at the first tensor moved there.
    """
    if not isinstance(text, str):
        raise DeviceError(f"{option}={text!r} must be text: {CHOICES}")
    if text == "cpu":
        return torch.device("cpu")
    if text == "auto":
        index = _own_index()  # before torch first asks CUDA, which reads the visible GPUs once
        return torch.device("cuda", index) if gpus() else torch.device("cpu")
    match = _CUDA.fullmatch(text)
    if match is None:
        raise DeviceError(f"{option}={text!r} is unknown; choose {CHOICES}")
    index = int(match.group(1)) if match.group(1) is not None else _own_index()
    if index >= gpus():
        raise DeviceError(f"{option}={text!r}: this machine has {_gpus_said(gpus())}{_hint()}")
    return torch.device("cuda", index)


def gpu_slot(environ: Mapping[str, str], folder: Path | None = None) -> tuple[str, IO[str]] | None:
    """The GPU this process takes among its step's (`environ`'s CUDA_VISIBLE_DEVICES) and
    its locked file, to keep open while it uses the GPU; None where the step is not marked
    (SLOTS_ENV) or sees one GPU or none. The first free one; when all are held (more jobs
    than GPUs side by side, which the submission's request rules out), it waits for one, a
    lock's release being the event: never two processes on one slot."""
    if environ.get(SLOTS_ENV) != "1":
        return None
    visible = [gpu.strip() for gpu in environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    visible = [gpu for gpu in visible if gpu]
    if len(visible) < 2:
        return None
    if folder is None:
        step = f"{environ.get('SLURM_JOB_ID', 'local')}.{environ.get('SLURM_STEP_ID', '0')}"
        folder = Path(tempfile.gettempdir()) / f"soma-gpus-{step}"
    folder.mkdir(parents=True, exist_ok=True)
    for gpu in visible:
        handle = open(folder / re.sub(r"[^\w.-]", "_", gpu), "a")  # noqa: SIM115 (kept open)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        return gpu, handle
    gpu = visible[os.getpid() % len(visible)]
    handle = open(folder / re.sub(r"[^\w.-]", "_", gpu), "a")  # noqa: SIM115 (kept open)
    fcntl.flock(handle, fcntl.LOCK_EX)
    return gpu, handle


def _own_index() -> int:
    """The index (among the GPUs torch sees) of this process's GPU: its slot's where the step
    shares its GPUs (taken once, CUDA_VISIBLE_DEVICES narrowed to it before torch first asks
    CUDA, so it is `cuda:0`; where torch had asked before, the slot's index among the step's),
    else 0."""
    if "slot" not in _SLOT:
        before = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        taken = gpu_slot(os.environ)
        if taken is None:
            _SLOT["slot"] = None
        else:
            gpu, handle = taken
            index = [g.strip() for g in before.split(",") if g.strip()].index(gpu)
            os.environ["CUDA_VISIBLE_DEVICES"] = gpu
            _SLOT["slot"] = (gpu, index, handle)
    slot = _SLOT["slot"]
    if slot is None:
        return 0
    return 0 if gpus() <= 1 else slot[1]


def task_device(task: str, text: object) -> torch.device:
    """A built-in task's `device` option, refused as a TaskError naming the task's option."""
    try:
        return resolve_device(text, option=f"{task} task option device")
    except DeviceError as error:
        raise TaskDeviceError(str(error)) from None


def _gpus_said(count: int) -> str:
    return "no GPU" if count == 0 else f"{count} GPU" + ("" if count == 1 else "s")


def _hint() -> str:
    """What the job was given, when Slurm (or anyone) narrowed the GPUs it sees."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return f" (CUDA_VISIBLE_DEVICES={visible!r})"
    if not torch.cuda.is_available():
        return " (torch sees no CUDA device; `auto` trains on a GPU only when there is one)"
    return ""


def _tensors(node: Any) -> Iterator[torch.Tensor]:
    """A node's parameters, and a module's buffers too (BatchNorm's running statistics)."""
    yield from node.parameters()
    if isinstance(node, nn.Module):
        yield from node.buffers()


def where(nodes: Mapping[str, Any]) -> torch.device | None:
    """The one device every node's tensors are on; None when there are none or several
    (then the caller's data is left where it is: the nodes' owner placed them on purpose)."""
    found = {tensor.device for node in nodes.values() for tensor in _tensors(node)}
    return found.pop() if len(found) == 1 else None


def move(nodes: Mapping[str, Any], device: torch.device) -> None:
    """Move every node's tensors to `device`, in place, so the caller's nodes are the ones
    trained (and exported) afterwards. A node already there is not touched at all.

    A node that is not a torch module cannot be moved by soma (its tensors are its own
    attributes): refused, naming it, unless it is already on `device`.
    """
    for node_id, node in nodes.items():
        if all(tensor.device == device for tensor in _tensors(node)):
            continue
        if not isinstance(node, nn.Module):
            raise DeviceError(
                f"node {node_id!r} is a {type(node).__name__}, not a torch module: soma cannot "
                f"move its tensors to {device}; move them yourself and pass device=None"
            )
        node.to(device)
