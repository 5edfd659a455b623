"""Tasks: what a federated run trains, named by import path so that users can bring their own.

A task is a module with `make(**options) -> Task`; the workflow's `task:` (and the command
line's `--task`) is its import path, e.g. `soma.tasks.digits` or `mypkg.mytask`, and
`task_options:` are handed to `make`. A Task answers four questions:

- `nodes(seed)`: the model's named nodes, fresh from a seed (every client starts from the
  same weights because the run's start is kept in the store and loaded).
- `shard(client, clients)`: client `client`'s training data, deterministic, of a size
  `size(data)` (the weight its export carries in the average).
- `train(nodes, data, *, seed, objective=None)`: local training of the nodes on the data
  (the task builds its own optimizer, which is never exported); returns metrics (JSON
  numbers). `objective` is the strategy's client side (FedProx's proximal term, SCAFFOLD's
  control variates; see soma.strategies): pass it on to `TrainingRun(objective=...)`, or
  call its `adjust(parameters, lr)` after each backward in a loop of your own. A task whose
  train() takes no `objective` still works with every strategy that has no client side
  (FedAvg, FedAdam, the robust ones); one that does is refused before any round starts.
- `evaluate(nodes)`: metrics on held-out data, e.g. `{"accuracy": 0.93, "loss": 0.21}`.

Optionally `everything()`: all the training data as one shard, for the centralized baseline
(by default the union of all shards is not assumed to be expressible, and the baseline is
skipped).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from torch import nn

from soma.errors import SomaError


class TaskError(SomaError):
    """A task cannot be found or does not answer the protocol."""


@runtime_checkable
class Task(Protocol):
    def nodes(self, seed: int) -> dict[str, nn.Module]: ...

    def shard(self, client: int, clients: int) -> Any: ...

    def size(self, data: Any) -> int: ...

    def train(
        self, nodes: Mapping[str, nn.Module], data: Any, *, seed: int
    ) -> dict[str, float]: ...

    def evaluate(self, nodes: Mapping[str, nn.Module]) -> dict[str, float]: ...


REQUIRED = ("nodes", "shard", "size", "train", "evaluate")


def load_task(path: str, options: Mapping[str, Any] | None = None) -> Task:
    """The task at import path `path`, made with `options`; refused clearly when it is not one."""
    try:
        module = importlib.import_module(path)
    except ImportError as error:
        raise TaskError(f"task {path!r} cannot be imported: {error}") from error
    make = getattr(module, "make", None)
    if not callable(make):
        raise TaskError(f"task module {path!r} has no make(**options) function")
    try:
        task = make(**dict(options or {}))
    except TypeError as error:
        raise TaskError(
            f"task {path!r} refused its options {dict(options or {})}: {error}"
        ) from error
    missing = [name for name in REQUIRED if not callable(getattr(task, name, None))]
    if missing:
        raise TaskError(f"task {path!r} lacks {', '.join(missing)} (see soma.tasks)")
    return task
