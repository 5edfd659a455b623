"""The control task: a fixed teacher, and clients that each see one corner of its inputs.

A demonstration has to be a control, not a loss going down. Every client learns the same
function (the teacher), so nobody diverges alone; only where they draw their inputs from
differs: one quadrant of the square [-1, 1]^2 each. A client trained alone on its corner for
exactly as long as the federation reads the union of the corners much worse than the average.
"""

from __future__ import annotations

import torch
from torch import nn

from soma.training import TrainingRun

# Quadrants of [-1, 1]^2 by the signs of (x0, x1).
CORNERS = ((1.0, 1.0), (-1.0, 1.0), (-1.0, -1.0), (1.0, -1.0))


def teacher(seed: int = 1234) -> nn.Module:
    """A fixed random network that every client is trying to learn."""
    generator = torch.Generator().manual_seed(seed)
    net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 1.0)
    return net.requires_grad_(False)


def corner(
    index: int, count: int, *, seed: int, teacher_net: nn.Module
) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` inputs drawn from quadrant `index`, labelled by the teacher."""
    generator = torch.Generator().manual_seed(seed)
    signs = torch.tensor(CORNERS[index % len(CORNERS)])
    inputs = torch.rand(count, 2, generator=generator) * signs
    with torch.no_grad():
        targets = teacher_net(inputs)
    return inputs, targets


def union(
    corners: range | list[int], count: int, *, seed: int, teacher_net: nn.Module
) -> tuple[torch.Tensor, torch.Tensor]:
    parts = [corner(c, count, seed=seed + c, teacher_net=teacher_net) for c in corners]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def student_nodes(seed: int = 0, *, batchnorm: bool = False) -> dict[str, nn.Module]:
    """The student's named nodes; the activation has no weights and is absent from exports."""
    torch.manual_seed(seed)
    nodes: dict[str, nn.Module] = {"hidden": nn.Linear(2, 64)}
    if batchnorm:
        nodes["norm"] = nn.BatchNorm1d(64)
    nodes["act"] = nn.Tanh()
    nodes["out"] = nn.Linear(64, 1)
    return nodes


def student(
    seed: int = 0, *, batchnorm: bool = False, lr: float = 0.05, epochs: int = 1
) -> TrainingRun:
    return TrainingRun(
        student_nodes(seed, batchnorm=batchnorm),
        loss=nn.functional.mse_loss,
        lr=lr,
        momentum=0.9,
        epochs=epochs,
        batch_size=32,
        seed=seed,
    )


def demonstrate(rounds: int = 30, clients: int = 3, count: int = 256) -> dict[str, float]:
    """Federated clients on three corners against one trained alone for exactly as long."""
    from soma.aggregate import fedavg

    teacher_net = teacher()
    runs = [student(seed=0) for _ in range(clients)]
    loner = student(seed=0)
    shards = [corner(k, count, seed=100 + k, teacher_net=teacher_net) for k in range(clients)]
    held_out = union(range(clients), 1000, seed=9000, teacher_net=teacher_net)
    for _ in range(rounds):
        for run, shard in zip(runs, shards, strict=True):
            run.fit(shard)
        loner.fit(shards[0])
        average = fedavg([run.export() for run in runs], sizes=[count] * clients)
        for run in runs:
            run.load(average)
    return {
        "federated": float(runs[0].evaluate(held_out)),
        "alone": float(loner.evaluate(held_out)),
    }


if __name__ == "__main__":
    torch.set_num_threads(1)
    result = demonstrate()
    print("mean squared error on the union of the three corners (lower is better)")
    for name, value in result.items():
        print(f"  {name:<10} {value:.4f}")
