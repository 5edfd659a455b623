"""A client that is itself distributed: `soma client` under `torchrun`, every rank training.
What the ranks say to each other and which share each trains, beneath the tasks that train
under it; the entry point torchrun runs is soma.cli.ranks.

    torchrun --nproc-per-node 2 -m soma.cli.ranks -- client --store S --run R --rounds 10 \\
        --clients 8 --mine 3 --task soma.tasks.resnet

(the `--` keeps torchrun from reading soma's `--run` as an abbreviation of its `--run-path`).

Rank 0 is the `soma client` process: it meets the round, loads its start, contributes the
export and leaves with the average, exactly as a client without torchrun does (a federation
may mix both: the run's identity is the same). The other ranks only train: each time rank 0's
task trains, it tells them what (`lead`: the seed and the client's number, from which each
rank draws the same shard itself), DistributedDataParallel copies rank 0's weights into
theirs, every rank computes the gradient of its fixed share of each batch (`share`) and the
gradients are all-reduced, so that rank 0's nodes, the export, are trained by all of them.
Between trainings the others wait on rank 0 (`follow`); when rank 0's client is done (or
refused, or failed) it tells them to stop.

A strategy with a client side (FedProx, SCAFFOLD) is refused on every rank before anything:
only rank 0 would apply it. A task takes part by answering `follow(told)` (a rank's share of
what rank 0's train() said with `lead`) and by training with DistributedDataParallel when
`world()` has several ranks: soma.tasks.resnet does. A task without `follow` is refused on
every rank before anything. The process group is gloo on the CPU, NCCL for CUDA tensors
when there is a GPU; a rank trains on its own GPU (`local_device`: LOCAL_RANK, as torchrun
numbers them).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist

from soma.errors import SomaError

STOP = None  # what rank 0 says when its client is done


class RanksError(SomaError, ValueError):
    """A command or task that cannot run as a distributed client."""


def world() -> tuple[int, int]:
    """(this process's rank, the number of ranks): (0, 1) outside a process group."""

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def local_device(device: torch.device) -> torch.device:
    """Where this rank trains: a task's GPU becomes the rank's own (LOCAL_RANK) under
    torchrun, every rank a GPU of the node; the CPU stays the CPU."""
    if device.type != "cuda" or world()[1] == 1:
        return device
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))


def share(n: int, rank: int, size: int) -> slice:
    """Rank `rank`'s fixed, contiguous share of a batch of `n` (the first ranks one fewer
    when `size` does not divide `n`; none at all for a batch smaller than the ranks)."""
    return slice(n * rank // size, n * (rank + 1) // size)


def _said(told: Any) -> Any:
    """Rank 0's `told`, broadcast to every rank (on the CPU, whatever the backend)."""

    box = [told]
    dist.broadcast_object_list(box, src=0, device=torch.device("cpu"))
    return box[0]


def lead(told: Mapping[str, Any] | None) -> None:
    """Rank 0 tells the others what to train (a mapping its task's `follow` reads), or STOP."""
    if world()[0] != 0:
        raise RanksError(f"rank {world()[0]} called lead(): only rank 0 leads (soma.ranks)")
    _said(None if told is None else dict(told))


def follow(task: Any) -> int:
    """A rank above 0: train what rank 0 says, each time it says it, until it says STOP; how
    many trainings it took part in."""
    done = 0
    while (told := _said(None)) is not STOP:
        task.follow(told)
        done += 1
    return done
