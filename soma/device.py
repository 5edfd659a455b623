"""Where training runs: `cpu`, `cuda`, `cuda:N` or `auto`, read once and refused by name.

A device is said as text because it is a task option: it crosses JSON, the workflow's config
and the command line, and is refused when the task is made, before any round starts, rather
than by torch in the middle of the first one. `auto` is `cuda` when torch sees a GPU and
`cpu` otherwise, so that one configuration runs on a laptop and on a GPU node alike. Under
Slurm a job sees only the GPUs it was given (CUDA_VISIBLE_DEVICES), numbered from 0, so
`cuda` (the first visible GPU, `cuda:0`) is the job's own.

Only training and evaluation happen on the device: soma.nodes.export always copies to CPU,
so what crosses the store is the same whatever trained it, and soma.nodes.load copies into
the nodes wherever they are.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from soma.errors import SomaError, TaskError

CHOICES = "cpu, cuda, cuda:N (N a GPU index, from 0) or auto"
_CUDA = re.compile(r"cuda(?::(\d+))?")


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
        return torch.device("cuda", 0) if gpus() else torch.device("cpu")
    match = _CUDA.fullmatch(text)
    if match is None:
        raise DeviceError(f"{option}={text!r} is unknown; choose {CHOICES}")
    index = int(match.group(1) or 0)
    if index >= gpus():
        raise DeviceError(f"{option}={text!r}: this machine has {_gpus_said(gpus())}{_hint()}")
    return torch.device("cuda", index)


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
