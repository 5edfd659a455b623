"""Minibatch SGD with momentum and weight decay, the same arithmetic as `torch.optim.SGD`.

Written out because constructing any `torch.optim` optimizer imports `torch._dynamo`, about
two seconds in every process, and the workflow starts one process per (round, client). The
update matches torch.optim.SGD with dampening 0 and nesterov off, bit for bit (tested).
Its state (the momentum buffers) is the client's own and is never exported.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class SGD:
    def __init__(
        self,
        parameters: Iterable[torch.nn.Parameter],
        *,
        lr: float,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        self.parameters = list(parameters)
        self.lr, self.momentum, self.weight_decay = float(lr), float(momentum), float(weight_decay)
        self.state: dict[torch.nn.Parameter, dict[str, torch.Tensor]] = {}

    def zero_grad(self) -> None:
        for parameter in self.parameters:
            parameter.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for parameter in self.parameters:
            step = parameter.grad
            if step is None:
                continue
            if self.weight_decay:
                step = step.add(parameter, alpha=self.weight_decay)
            if self.momentum:
                state = self.state.setdefault(parameter, {})
                buffer = state.get("momentum_buffer")
                if buffer is None:
                    buffer = state["momentum_buffer"] = step.detach().clone()
                else:
                    buffer.mul_(self.momentum).add_(step)
                step = buffer
            parameter.add_(step, alpha=-self.lr)
