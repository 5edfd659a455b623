"""The control task as a Task: a fixed teacher, and each client on one corner of its inputs.

`device` (cpu, cuda, cuda:N or auto; see soma.device) is where the students train and are
evaluated; the teacher and the data are made on CPU, so every device sees the same data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from soma.device import task_device
from soma.tasks import teacher as control
from soma.tasks.protocol import Objective
from soma.training import TrainingRun

VALIDATION = 64  # a client's held-out inputs for federated evaluation


@dataclass
class ControlTask:
    examples: int = 256
    epochs: int = 1
    lr: float = 0.05
    teacher_seed: int = 1234
    device: str = "cpu"  # the default keeps runs bit-identical to those before the option

    def __post_init__(self) -> None:
        self._device = task_device("control", self.device)
        self.teacher = control.teacher(self.teacher_seed)

    def nodes(self, seed: int) -> dict[str, nn.Module]:
        return control.student_nodes(seed)

    def shard(self, client: int, clients: int) -> tuple[torch.Tensor, torch.Tensor]:
        return control.corner(client, self.examples, seed=100 + client, teacher_net=self.teacher)

    def size(self, data: tuple[torch.Tensor, torch.Tensor]) -> int:
        return len(data[0])

    def train(
        self,
        nodes: Mapping[str, nn.Module],
        data,
        *,
        seed: int,
        objective: Objective | None = None,
    ) -> dict[str, float]:
        run = TrainingRun(
            nodes,
            loss=nn.functional.mse_loss,
            lr=self.lr,
            momentum=0.9,
            epochs=self.epochs,
            batch_size=32,
            seed=seed,
            objective=objective,
            device=self._device,
        )
        return run.fit(data)

    def evaluate(self, nodes: Mapping[str, nn.Module]) -> dict[str, float]:
        held_out = control.union(
            range(len(control.CORNERS)), 500, seed=9000, teacher_net=self.teacher
        )
        run = TrainingRun(nodes, loss=nn.functional.mse_loss, device=self._device)
        return {"loss": float(run.evaluate(held_out))}

    def evaluate_local(
        self, nodes: Mapping[str, nn.Module], client: int, clients: int
    ) -> tuple[dict[str, float], int]:
        """The loss on client `client`'s own held-out inputs: fresh ones from its corner,
        never those it trained on (federated evaluation, soma.run.evaluation)."""
        held_out = control.corner(
            client, VALIDATION, seed=7000 + client, teacher_net=self.teacher
        )  # fmt: skip
        run = TrainingRun(nodes, loss=nn.functional.mse_loss, device=self._device)
        return {"loss": float(run.evaluate(held_out))}, VALIDATION


def make(**options) -> ControlTask:
    """The control task: a fixed teacher network, each client on one corner of its inputs.

    It serves any client count in seconds, so it is what `soma client` and `soma simulate` train
    without `--task`.

    Options (the config's `task_options`, keyed by `soma.tasks.control`; `--option KEY=VALUE` on
    `soma client` and `soma simulate`):

    - `examples` (256): examples a client holds.
    - `epochs` (1), `lr` (0.05): local training.
    - `teacher_seed` (1234): the teacher network's draw.
    - `device` (`cpu`): `cpu`, `cuda`, `cuda:N`, or `auto` (the job's GPU when Slurm gave one).
    """
    return ControlTask(**options)
