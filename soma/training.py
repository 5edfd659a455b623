"""A minimal training run: named nodes, applied in order, with an optimizer of its own.

It is what the tests, the demonstration and the workflow's tasks train. Its optimizer (and
the optimizer's momentum) belongs to it and is never exported: only `export()` crosses to
other clients, and `load()` refuses what does not fit before touching anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from soma.nodes import Export, export, load
from soma.sgd import SGD

Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class TrainingRun:
    """Named nodes applied in order to an input, trained with SGD on `(inputs, targets)`."""

    def __init__(
        self,
        nodes: Mapping[str, nn.Module],
        *,
        loss: Loss,
        lr: float = 0.05,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        epochs: int = 1,
        batch_size: int = 32,
        seed: int = 0,
    ) -> None:
        self.nodes = dict(nodes)
        self.loss = loss
        self.epochs = epochs
        self.batch_size = batch_size
        self._shuffle = torch.Generator().manual_seed(seed)
        parameters = [p for node in self.nodes.values() for p in node.parameters()]
        self.optimizer = SGD(parameters, lr=lr, momentum=momentum, weight_decay=weight_decay)

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        for node in self.nodes.values():
            inputs = node(inputs)
        return inputs

    def train(self, mode: bool = True) -> None:
        for node in self.nodes.values():
            node.train(mode)

    def fit(self, data: tuple[torch.Tensor, torch.Tensor]) -> dict[str, Any]:
        """Local training: `epochs` passes over `data` in shuffled mini-batches."""
        inputs, targets = data
        self.train(True)
        total, batches = 0.0, 0
        for _ in range(self.epochs):
            order = torch.randperm(len(inputs), generator=self._shuffle)
            for start in range(0, len(inputs), self.batch_size):
                batch = order[start : start + self.batch_size]
                self.optimizer.zero_grad()
                loss = self.loss(self(inputs[batch]), targets[batch])
                loss.backward()
                self.optimizer.step()
                total += float(loss.detach())
                batches += 1
        self.optimizer.zero_grad()
        return {"loss": total / max(batches, 1), "steps": batches}

    @torch.no_grad()
    def evaluate(self, data: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """The loss on `data`, in evaluation mode (BatchNorm uses its running statistics)."""
        inputs, targets = data
        self.train(False)
        return self.loss(self(inputs), targets)

    def export(self) -> Export:
        return export(self.nodes)

    def load(
        self, state: Mapping[str, Mapping[str, torch.Tensor]], *, partial: bool = False
    ) -> None:
        load(self.nodes, state, partial=partial)
