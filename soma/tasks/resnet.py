"""A real-size task: a ResNet-18 (about 11M parameters at `width` 64, 45M at 128) on images
that the task draws itself from a seed, offline.

Why this one: soma's other tasks are at most 820k parameters, and what a real-size run adds
(exports of hundreds of MB through the store, averaging them, training on a GPU, mixed
precision, a data loader, a client that is itself distributed) needs a model whose size is a
knob and whose data costs no download. A ResNet-18 is the model the FL literature's image
benchmarks train (CIFAR-10 in FedAvg's successors, FedML, Flower's baselines); the small GPT
of soma.tasks.adapters exchanges adapters only, which is the opposite of what is measured
here (whole exports of tens of millions of parameters). Its normalization is GroupNorm, not
BatchNorm: BatchNorm's running statistics are a known failure of federated averaging on
skewed clients (Hsieh et al., "The Non-IID Data Quagmire", ICML 2020, replace it by
GroupNorm), and GroupNorm couples no two examples of a batch, so that a client split over
ranks (soma.ranks) computes what one process computes.

The images (`image_size` square, 3 channels) are drawn per client from `data_seed` by NumPy's
SeedSequence (a stream per client, one for the test set, one for the classes' prototypes), so
that every process in every mode generates the same bits: each of `classes` classes is a
smooth random prototype (a 4x4 grid of colours, upsampled), and an example is its class's
prototype, shifted by up to `image_size // 8` pixels, plus Gaussian noise (`noise`). A client
holds `examples` of them, its labels drawn uniformly; `evaluate` scores `test_examples` drawn
alike. The task is easy on purpose: what it measures is the machinery at a model's size.

Training is `epochs` passes of minibatch SGD with momentum (soma.sgd; `lr`, `momentum`,
`batch_size`) over a torch DataLoader shuffled by the caller's seed, on `device` (`auto`: a
GPU when torch sees one), under autocast at `precision` (`fp32`, `bf16`, or `fp16` on a GPU
only, with a gradient scaler). On CPU at fp32 with one thread, the same seed gives the same
bits. Under `torchrun` (soma.ranks) every rank trains its fixed share of each batch,
DistributedDataParallel all-reducing the gradients; rank 0's nodes are the export.

The architecture's size is `width` (the first stage's channels; the stages have 1, 2, 4, 8
times as many) and `blocks` (basic blocks per stage: 2 is ResNet-18); tests run it at width 4
and image_size 8 in a fraction of a second:

    soma simulate --task soma.tasks.resnet --clients 2 --rounds 1 --option width=8
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from soma.device import task_device
from soma.tasks import Context, TaskError, ranges
from soma.tasks.protocol import Objective
from soma.training import adjust_on_cpu, keyed_parameters

_integer = functools.partial(ranges.integer, "resnet")
_number = functools.partial(ranges.number, "resnet")

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
STAGES = 4
PROTOTYPES, TEST = 0, 1  # the streams of the prototypes and of the test set; client k's: k + 2

Data = tuple[torch.Tensor, torch.Tensor]


# -- the data ----------------------------------------------------------------------------------


def _stream(data_seed: int, which: int) -> np.random.Generator:
    """Stream `which` of `data_seed`: a client's draw depends on nothing but its number."""
    return np.random.default_rng(np.random.SeedSequence(data_seed, spawn_key=(which,)))


@functools.lru_cache(maxsize=4)
def prototypes(data_seed: int, classes: int, image_size: int) -> torch.Tensor:
    """Each class's smooth pattern: a 4x4 grid of colours in [-1, 1], upsampled bilinearly."""
    grid = _stream(data_seed, PROTOTYPES).uniform(-1.0, 1.0, (classes, 3, 4, 4))
    small = torch.tensor(grid, dtype=torch.float32)
    up = nn.functional.interpolate(small, size=(image_size, image_size), mode="bilinear")
    return up.contiguous()


def draw(
    which: int, n: int, *, data_seed: int, classes: int, image_size: int, noise: float
) -> Data:
    """`n` examples of stream `which`: labels uniform, images their prototype shifted by up
    to image_size // 8 pixels each way, plus N(0, noise) per pixel; float32 and int64."""
    rng = _stream(data_seed, which)
    labels = rng.integers(0, classes, n)
    reach = image_size // 8
    shifts = rng.integers(-reach, reach + 1, (n, 2))
    grains = rng.standard_normal((n, 3, image_size, image_size)).astype(np.float32)
    patterns = prototypes(data_seed, classes, image_size)
    images = torch.empty((n, 3, image_size, image_size), dtype=torch.float32)
    for i in range(n):
        dy, dx = (int(s) for s in shifts[i])
        images[i] = torch.roll(patterns[int(labels[i])], shifts=(dy, dx), dims=(1, 2))
    images += float(noise) * torch.from_numpy(grains)
    return images, torch.from_numpy(labels.astype(np.int64))


# -- the model ---------------------------------------------------------------------------------


def _norm(channels: int) -> nn.GroupNorm:
    """GroupNorm in up to 32 groups (as Wu and He's), as many as divide the channels."""
    return nn.GroupNorm(math.gcd(32, channels), channels)


class Block(nn.Module):
    """ResNet's basic block: two 3x3 convolutions and a shortcut (a 1x1 one where the shape
    changes)."""

    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.norm1 = _norm(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.norm2 = _norm(outputs)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(
                nn.Conv2d(inputs, outputs, 1, stride, bias=False), _norm(outputs)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.norm1(self.conv1(x)))
        return torch.relu(self.norm2(self.conv2(y)) + self.shortcut(x))


def resnet(width: int, blocks: int, classes: int) -> dict[str, nn.Module]:
    """The named nodes: `stem` (a 3x3 convolution, as for CIFAR-sized images), `stage1`..
    `stage4` (`blocks` basic blocks each, the last three halving the resolution), `head`."""
    nodes: dict[str, nn.Module] = {
        "stem": nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), _norm(width), nn.ReLU())
    }
    channels = width
    for s in range(STAGES):
        out = width * 2**s
        layers = [Block(channels if b == 0 else out, out, 2 if s and b == 0 else 1)
                  for b in range(blocks)]  # fmt: skip
        nodes[f"stage{s + 1}"] = nn.Sequential(*layers)
        channels = out
    nodes["head"] = nn.Sequential(Mean(), nn.Flatten(), nn.Linear(channels, classes))
    return nodes


class Mean(nn.Module):
    """Global average pooling as a mean, whose gradient is a broadcast: deterministic on a
    GPU too, where AdaptiveAvgPool2d's backward is not (benchmarks/gpu.py compares bits)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(2, 3), keepdim=True)


def parameter_count(nodes: Mapping[str, nn.Module]) -> int:
    return sum(p.numel() for node in nodes.values() for p in node.parameters())


class Chain(nn.Module):
    """The nodes applied in order, as one module (what DistributedDataParallel wraps); it
    holds the nodes themselves, so training it trains them."""

    def __init__(self, nodes: Mapping[str, nn.Module]) -> None:
        super().__init__()
        self.nodes = nn.ModuleDict(dict(nodes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for node in self.nodes.values():
            x = node(x)
        return x


# -- the task ----------------------------------------------------------------------------------

# make()'s options, as a literal (soma.tasks.declared_options reads it without running this)
OPTIONS = (
    "width",
    "blocks",
    "image_size",
    "classes",
    "examples",
    "test_examples",
    "noise",
    "data_seed",
    "epochs",
    "batch_size",
    "lr",
    "momentum",
    "precision",
    "device",
)


@dataclass
class ResNetTask:
    width: int = 64
    blocks: int = 2
    image_size: int = 32
    classes: int = 10
    examples: int = 256  # per client
    test_examples: int = 512
    noise: float = 0.5
    data_seed: int = 0
    epochs: int = 1
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.9
    precision: str = "fp32"  # fp32, bf16 (autocast; CPU too), fp16 (a GPU only)
    device: str = "auto"  # cpu, cuda, cuda:N or auto (soma.device)

    def __post_init__(self) -> None:
        for name in ("width", "blocks", "classes", "examples", "test_examples", "epochs"):
            _integer(name, getattr(self, name), low=1)
        _integer("classes", self.classes, low=2)
        _integer("image_size", self.image_size, low=8)
        _integer("data_seed", self.data_seed, low=0)
        _integer("batch_size", self.batch_size, low=1)
        _number("noise", self.noise, low=0, high=float("inf"), closed="[)")
        _number("lr", self.lr, low=0, high=float("inf"), closed="()")
        _number("momentum", self.momentum, low=0, high=1, closed="[)")
        if self.precision not in PRECISIONS:
            raise TaskError(
                f"resnet option precision={self.precision!r} is unknown; "
                f"choose one of {', '.join(PRECISIONS)}"
            )
        self._device = task_device("resnet", self.device)
        if self.precision == "fp16" and self._device.type != "cuda":
            raise TaskError(
                f"resnet option precision=fp16 needs a GPU, and device={self.device!r} trains "
                "on the CPU: choose precision bf16 (autocast on the CPU) or fp32"
            )

    # -- the Task protocol -------------------------------------------------------------------

    def nodes(self, seed: int) -> dict[str, nn.Module]:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return resnet(self.width, self.blocks, self.classes)

    def check(self, clients: int) -> None:
        _integer("clients", clients, low=1)

    def shard(self, client: int, clients: int) -> Data:
        if not 0 <= client < clients:
            raise TaskError(f"client {client} is not one of the {clients} clients")
        return self._draw(client + 2, self.examples)

    def _draw(self, which: int, n: int) -> Data:
        return draw(which, n, data_seed=self.data_seed, classes=self.classes,
                    image_size=self.image_size, noise=float(self.noise))  # fmt: skip

    def everything(self, clients: int) -> Data:
        shards = [self.shard(k, clients) for k in range(clients)]
        return torch.cat([x for x, _ in shards]), torch.cat([y for _, y in shards])

    def size(self, data: Data) -> int:
        return len(data[1])

    def preprocessing(self) -> dict[str, str]:
        return {
            "inputs": f"x: images 3 x {self.image_size} x {self.image_size}, float, about "
            "zero-mean unit-scale (the task's own synthetic images, soma.tasks.resnet.draw); "
            f"the {self.classes} outputs are the classes' logits",
        }

    def train(
        self,
        nodes: Mapping[str, nn.Module],
        data: Data,
        *,
        seed: int,
        objective: Objective | None = None,
        context: Context | None = None,
    ) -> dict[str, float]:
        """`epochs` passes of SGD with momentum over a DataLoader shuffled by `seed`, under
        autocast at `precision`; the optimizer lives for this call only. Under torchrun
        (soma.ranks) rank 0 tells the other ranks what to train and every rank trains
        its share of each batch; a strategy's client side is refused there, since only rank
        0 would apply it."""
        from soma import ranks

        if ranks.world()[1] > 1:
            if objective is not None:
                raise TaskError(
                    "resnet under torchrun trains without a strategy's client side (FedProx, "
                    "SCAFFOLD): only rank 0 would apply it; choose a strategy without one"
                )
            told = {"seed": seed}
            if context is not None:
                told.update(client=context.client, clients=context.clients)
            else:
                told["data"] = data
            ranks.lead(told)
        return self.fit(nodes, data, seed=seed, objective=objective)

    def follow(self, told: Mapping[str, Any]) -> None:
        """A rank above 0's share of the training rank 0 leads (soma.ranks.follow): the
        same shapes of nodes (DistributedDataParallel copies rank 0's weights into them) and
        the same data, which it draws itself from the client's number when it was told it."""
        data = told["data"] if "data" in told else self.shard(told["client"], told["clients"])
        self.fit(self.nodes(0), data, seed=told["seed"])

    def fit(
        self,
        nodes: Mapping[str, nn.Module],
        data: Data,
        *,
        seed: int,
        objective: Objective | None = None,
    ) -> dict[str, float]:
        from soma import ranks

        rank, size = ranks.world()
        device = ranks.local_device(self._device)
        chain = Chain(nodes).to(device)
        model: nn.Module = chain
        if size > 1:
            from torch.nn.parallel import DistributedDataParallel

            model = DistributedDataParallel(chain, device_ids=None if device.type == "cpu"
                                            else [device])  # fmt: skip
        parameters = [p for node in nodes.values() for p in node.parameters()]
        fp16 = self.precision == "fp16"
        optimizer, scaler = _optimizer(parameters, float(self.lr), float(self.momentum), fp16)
        keyed = keyed_parameters(nodes) if objective is not None else {}
        model.train(True)
        total, steps = 0.0, 0
        for _ in range(self.epochs):
            for inputs, labels in _loader(data, self.batch_size, seed):
                share = ranks.share(len(labels), rank, size)
                x, y = inputs[share].to(device), labels[share].to(device)
                optimizer.zero_grad()
                with self._autocast(device):
                    logits = model(x)
                # the sum over this rank's share, over the whole batch: the ranks' mean (what
                # DistributedDataParallel averages) is then the batch's mean loss's gradient
                loss = nn.functional.cross_entropy(logits.float(), y, reduction="sum")
                loss = loss * (size / len(labels))
                (scaler.scale(loss) if scaler else loss).backward()
                if scaler:
                    scaler.unscale_(optimizer)
                if objective is not None:
                    adjust_on_cpu(objective, keyed, float(self.lr))
                if scaler:
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
                # the metric: this rank's share's mean loss (the batch's, in one process)
                total += float(loss.detach()) * len(labels) / size / max(len(y), 1)
                steps += 1
        optimizer.zero_grad()
        return {"loss": total / max(steps, 1), "steps": steps}

    def _autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        dtype = PRECISIONS[self.precision]
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=dtype)

    @torch.no_grad()
    def evaluate(self, nodes: Mapping[str, nn.Module]) -> dict[str, float]:
        """Accuracy and loss on the test set, in batches, at the training's precision."""
        inputs, labels = self._draw(TEST, self.test_examples)
        chain = Chain(nodes).to(self._device)
        chain.train(False)
        correct, loss = 0, 0.0
        for start in range(0, len(labels), self.batch_size):
            x = inputs[start : start + self.batch_size].to(self._device)
            y = labels[start : start + self.batch_size].to(self._device)
            with self._autocast(self._device):
                logits = chain(x).float()
            loss += float(nn.functional.cross_entropy(logits, y, reduction="sum"))
            correct += int((logits.argmax(dim=1) == y).sum())
        return {"accuracy": correct / len(labels), "loss": loss / len(labels)}


def _loader(data: Data, batch_size: int, seed: int) -> Iterator[Data]:
    """The data's batches, shuffled by `seed` on the CPU (the same order on every device)."""
    from torch.utils.data import DataLoader, TensorDataset

    order = torch.Generator().manual_seed(seed)
    return iter(DataLoader(TensorDataset(*data), batch_size=batch_size, shuffle=True,
                           generator=order, num_workers=0))  # fmt: skip


def _optimizer(parameters: list, lr: float, momentum: float, fp16: bool) -> tuple[Any, Any]:
    """soma's SGD (no torch._dynamo import); at fp16, torch's and a gradient scaler, which
    needs a torch optimizer (fp16 is a GPU's, where two seconds of imports do not count)."""
    if not fp16:
        from soma.sgd import SGD

        return SGD(parameters, lr=lr, momentum=momentum), None
    optimizer = torch.optim.SGD(parameters, lr=lr, momentum=momentum)
    return optimizer, torch.amp.GradScaler("cuda")


def make(**options: Any) -> ResNetTask:
    """A ResNet-18-like model on images drawn from a seed: a real-size export through the store.

    Options (the config's `task_options`, keyed by `soma.tasks.resnet`; `--option KEY=VALUE` on
    `soma client` and `soma simulate`):

    - `width` (64), `blocks` (2): the first stage's channels and the basic blocks per stage
      (2 is ResNet-18; width 64 is about 11M parameters).
    - `image_size` (32), `classes` (10): the square images' side and the classes drawn.
    - `examples` (256), `test_examples` (512): a client's examples, and the central test set's.
    - `noise` (1.0): the Gaussian noise on each example.
    - `data_seed` (0): the seed every image is drawn from.
    - `epochs` (1), `batch_size` (32), `lr` (0.05), `momentum` (0.9): local SGD.
    - `precision` (`fp32`): `fp32`, `bf16` (autocast, CPU too) or `fp16` (a GPU only).
    - `device` (`auto`): `cpu`, `cuda`, `cuda:N` or `auto` (a GPU when torch sees one).
    """
    return ResNetTask(**options)
