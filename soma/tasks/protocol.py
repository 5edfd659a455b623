"""What a strategy hands a task's train(): the `Objective` protocol, and how soma asks
whether a task's train() takes a keyword.

It lives with the tasks because a task is written against it (its train() calls `adjust`
after each step, `finish` at the end) and a strategy builds one: strategies import this, and
no task imports a strategy. Torch only for the annotations.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

    from soma.nodes import Export

State = dict[str, Any]
Parameters = Mapping[str, Mapping[str, "torch.nn.Parameter"]]


@runtime_checkable
class Objective(Protocol):
    """What a strategy adds to a client's local objective (see soma.strategies)."""

    def adjust(self, parameters: Parameters, lr: float) -> None: ...

    def finish(self, trained: Export) -> tuple[Export | None, State | None]: ...


def takes_keyword(function: Any, name: str) -> bool:
    """Whether `function` takes keyword `name` by that name (not merely through **kwargs,
    which a task may hand on to something that does not)."""
    try:
        return name in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
