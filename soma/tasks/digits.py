"""Handwritten digits: the workflow's default task (scikit-learn's bundled 8x8 digits, offline).

The 1797 images are split once into training and test sets (stratified, `split_seed`,
`test_fraction`) and scaled with statistics of the training set only (`scale`: `standard`,
per-pixel mean and standard deviation, or `unit`, /16). The training set is shared among the
clients by `soma.partition` (`partition`, `alpha`, `labels_per_client`, `partition_seed`,
`min_size`: a shard of fewer examples is refused, naming the client); a
client's shard depends on (clients, those options) only, so every process computes the same
one. Each client keeps `validation_fraction` of its shard (0.2; drawn by `split_seed`) out of
training, for federated evaluation (`evaluate_local`); it trains on the rest.
The model is named nodes: `softmax` is {"out": Linear(64, 10)}, `mlp` is
{"hidden": Linear(64, hidden), "act": ReLU, "out": Linear(hidden, 10)}. Local training is
`epochs` epochs of minibatch SGD (lr, momentum, batch_size) with cross-entropy, shuffled by
the caller's seed; `evaluate` gives accuracy and loss on the test set. On CPU with one thread
(the workflow's `threads: 1`; the thread count is left to the caller), the same seed gives
bit-identical weights.

The defaults are tuned for the workflow's `snakemake --cores 2` run, where each (round,
client) training is a process of its own: 10 clients holding two digits each, 10 rounds
(about 0.95 test accuracy, against about 0.25 for a client trained alone). A process that
trains pays for importing torch (about 2 s) and little else: neither scikit-learn nor
`torch.optim` (which imports `torch._dynamo`, another 2 s) is imported.

    soma simulate --task soma.tasks.digits --clients 10 --rounds 10

runs the federation in one process (soma.simulate, the bits of `soma client` and of the
workflow); `alone` and `centralized` are its two baselines, as the workflow computes them.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from soma import partition as partitions
from soma.device import task_device
from soma.tasks import TaskError, ranges
from soma.tasks.protocol import Objective
from soma.training import TrainingRun, classified, trained_alone

_integer = functools.partial(ranges.integer, "digits")
_number = functools.partial(ranges.number, "digits")

CLASSES = 10
FEATURES = 64
MODELS = ("mlp", "softmax")
SCALES = ("standard", "unit")
STD_FLOOR = 0.1  # in units of the /16 scale

Data = tuple[torch.Tensor, torch.Tensor]


@functools.lru_cache(maxsize=1)
def _read_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits (1797 x 64 pixels in 0..16, and the labels).

    Read straight from the CSV that scikit-learn ships, which is what `load_digits` reads:
    importing `sklearn.datasets` costs about 2 s, paid by every (round, client) process.
    """
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location, "datasets", "data", "digits.csv.gz")
        if path.is_file():
            table = np.loadtxt(path, delimiter=",")
            inputs, labels = table[:, :-1], table[:, -1].astype(np.int64)
            break
    else:
        from sklearn.datasets import load_digits  # the file moved: ask scikit-learn

        inputs, labels = load_digits(return_X_y=True)
        inputs, labels = np.array(inputs, dtype=np.float64), np.array(labels, dtype=np.int64)
    inputs.setflags(write=False)
    labels.setflags(write=False)
    return inputs, labels


def split_rows(split_seed: int = 0, test_fraction: float = 0.25) -> tuple[np.ndarray, np.ndarray]:
    """The (training, test) rows of the 1797 images: a stratified split, fixed by the seed.

    round(test_fraction * n) of each digit's n images (at least one, never all) go to the test
    set, chosen by `split_seed`; both keep the images' original order.
    """
    labels = _read_digits()[1]
    rng = np.random.default_rng(split_seed)
    test = np.zeros(len(labels), dtype=bool)
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        count = min(max(int(round(test_fraction * len(members))), 1), len(members) - 1)
        test[members[:count]] = True
    return np.flatnonzero(~test), np.flatnonzero(test)


@functools.lru_cache(maxsize=8)
def _split(split_seed: int, test_fraction: float, scale: str) -> tuple[np.ndarray, ...]:
    """(train inputs, train labels, test inputs, test labels), the inputs scaled.

    Scaling is fitted on the training set only: `unit` is /16 (pixels in [0, 1]); `standard`
    then subtracts each pixel's training mean and divides by its training standard deviation,
    floored at STD_FLOOR so that border pixels almost always blank are not blown up.
    """
    inputs, labels = _read_digits()
    train, test = split_rows(split_seed, test_fraction)
    train_x, test_x = inputs[train] / 16.0, inputs[test] / 16.0
    if scale == "standard":
        mean, std = standardization(split_seed, test_fraction)
        train_x, test_x = (train_x - mean) / std, (test_x - mean) / std
    split = train_x, labels[train], test_x, labels[test]
    for array in split:
        array.setflags(write=False)
    return split


@functools.lru_cache(maxsize=8)
def standardization(split_seed: int = 0, test_fraction: float = 0.25) -> tuple[np.ndarray, ...]:
    """The `standard` scale's per-pixel (mean, std) of the training set's pixels / 16, the
    std floored at STD_FLOOR: what `_split` applies, and what a model file says
    (`DigitsTask.preprocessing`), so that its model is used outside soma as it was trained."""
    inputs, _ = _read_digits()
    train_x = inputs[split_rows(split_seed, test_fraction)[0]] / 16.0
    mean, std = train_x.mean(axis=0), np.maximum(train_x.std(axis=0), STD_FLOOR)
    mean.setflags(write=False)
    std.setflags(write=False)
    return mean, std


def _tensors(inputs: np.ndarray, labels: np.ndarray) -> Data:
    return (
        torch.tensor(inputs, dtype=torch.float32),
        torch.tensor(labels, dtype=torch.int64),
    )


# The options make() takes, as a literal: soma.tasks.declared_options reads it from this file
# without running it (no torch), so that the Snakefile refuses a misspelt option at parse time.
# tests/run/test_checks.py holds it to DigitsTask's fields.
OPTIONS = (
    "partition",
    "alpha",
    "labels_per_client",
    "min_size",
    "model",
    "hidden",
    "lr",
    "momentum",
    "epochs",
    "batch_size",
    "split_seed",
    "partition_seed",
    "test_fraction",
    "validation_fraction",
    "scale",
    "device",
)


@dataclass
class DigitsTask:
    partition: str = "labels_per_client"
    alpha: float = 0.5
    labels_per_client: int = 2
    min_size: int = 2  # examples a client's shard must hold at least (soma.partition)
    model: str = "softmax"
    hidden: int = 32
    lr: float = 0.1
    momentum: float = 0.9
    epochs: int = 2
    batch_size: int = 16
    split_seed: int = 0
    partition_seed: int = 0
    test_fraction: float = 0.25
    # each client's share of its shard held out for federated evaluation (evaluate_local)
    validation_fraction: float = 0.2
    scale: str = "standard"
    device: str = "cpu"  # cpu, cuda, cuda:N or auto (soma.device); cpu keeps runs bit-identical
    _shards: dict[int, list[np.ndarray]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.partition not in partitions.SCHEMES:
            raise TaskError(
                f"digits option partition={self.partition!r} is unknown; "
                f"choose one of {', '.join(partitions.SCHEMES)}"
            )
        _number("alpha", self.alpha, low=0, high=float("inf"), closed="()")
        _integer("labels_per_client", self.labels_per_client, low=1)
        _integer("min_size", self.min_size, low=1)
        if self.labels_per_client > CLASSES:
            raise TaskError(
                f"digits option labels_per_client={self.labels_per_client} is more than the "
                f"{CLASSES} digits there are"
            )
        if self.model not in MODELS:
            raise TaskError(
                f"digits option model={self.model!r} is unknown; choose one of {', '.join(MODELS)}"
            )
        _integer("hidden", self.hidden, low=1)
        _number("lr", self.lr, low=0, high=float("inf"), closed="()")
        _number("momentum", self.momentum, low=0, high=1, closed="[)")
        _integer("epochs", self.epochs, low=1)
        _integer("batch_size", self.batch_size, low=1)
        _integer("split_seed", self.split_seed, low=0)
        _integer("partition_seed", self.partition_seed, low=0)
        _number("test_fraction", self.test_fraction, low=0, high=1, closed="()")
        _number("validation_fraction", self.validation_fraction, low=0, high=1, closed="[)")
        if self.scale not in SCALES:
            raise TaskError(
                f"digits option scale={self.scale!r} is unknown; choose one of {', '.join(SCALES)}"
            )
        self._device = task_device("digits", self.device)
        train_x, train_y, test_x, test_y = _split(
            self.split_seed, float(self.test_fraction), self.scale
        )
        self.train_labels = train_y
        self._train = _tensors(train_x, train_y)
        self._test = _tensors(test_x, test_y)

    def check(self, clients: int) -> None:
        """Refuse a client count these options cannot serve, before any client trains.

        The workflow's `start` job calls it, so that a partition that would leave digits to
        nobody (or clients with nothing) stops the run at once, not in round 0's train jobs.
        """
        _integer("clients", clients, low=1)
        n = self.labels_per_client
        if self.partition == "labels_per_client" and clients * n < CLASSES:
            holding = f"{n} digit{'s' if n > 1 else ''}"
            who = f"{clients} clients holding {holding} each cover"
            who = who if clients > 1 else f"1 client holding {holding} covers"
            raise TaskError(
                f"{who} {clients * n} of the {CLASSES} digits; the others would belong to "
                "no client "
                f"(partition labels_per_client needs clients x labels_per_client >= {CLASSES}): "
                f"raise labels_per_client to {-(-CLASSES // clients)} or clients to "
                f"{-(-CLASSES // n)}, or choose partition iid or dirichlet"
            )
        try:
            self.indices(0, clients)  # the whole partition for this many clients, cached
        except partitions.PartitionError as error:
            raise TaskError(
                f"digits partition {self.partition} for {clients} clients: {error}"
            ) from error

    def preprocessing(self) -> dict[str, str]:
        """What the model's inputs are made of (soma.tasks: written into every model file),
        so that a model file is used outside soma on inputs scaled as in training: raw
        pixels score about 0.87 where the scaled ones score the run's 0.95."""
        made = {
            "inputs": "x: an 8x8 image's 64 pixels, row by row, each 0..16, as float "
            "(sklearn.datasets.load_digits().data); the model's 10 outputs are the logits of "
            "the digits 0..9",
        }
        if self.scale == "unit":
            return {**made, "formula": "x / 16"}
        mean, std = standardization(self.split_seed, float(self.test_fraction))
        return {
            **made,
            "formula": "(x / 16 - mean) / std, pixel by pixel (mean and std: JSON lists of 64 "
            "numbers, the training split's)",
            "mean": json.dumps(mean.tolist()),
            "std": json.dumps(std.tolist()),
        }

    # -- the Task protocol ---------------------------------------------------------------

    def nodes(self, seed: int) -> dict[str, nn.Module]:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            if self.model == "softmax":
                return {"out": nn.Linear(FEATURES, CLASSES)}
            return {
                "hidden": nn.Linear(FEATURES, self.hidden),
                "act": nn.ReLU(),
                "out": nn.Linear(self.hidden, CLASSES),
            }

    def indices(self, client: int, clients: int) -> np.ndarray:
        """Client `client`'s rows of the training set (of `clients`), sorted."""
        _integer("clients", clients, low=1)
        if isinstance(client, bool) or not isinstance(client, numbers.Integral):
            raise TaskError(f"client must be an integer, not {client!r}")
        if not 0 <= client < clients:
            raise TaskError(
                f"client {client} is not one of the {clients} clients (0..{clients - 1})"
            )
        if clients not in self._shards:
            self._shards[clients] = partitions.partition(
                self.train_labels,
                clients,
                self.partition,
                alpha=float(self.alpha),
                labels_per_client=self.labels_per_client,
                seed=self.partition_seed,
                min_size=self.min_size,
            )
        return self._shards[clients][client]

    def held_out(self, client: int, clients: int) -> tuple[np.ndarray, np.ndarray]:
        """Client `client`'s rows split into (training, validation), both sorted: a share
        `validation_fraction` of its rows (at least one when it has two or more, never all)
        drawn by `split_seed`, the client and the client count, so every process agrees."""
        rows = self.indices(client, clients)
        count = int(round(float(self.validation_fraction) * len(rows)))
        if self.validation_fraction > 0 and len(rows) > 1:
            count = min(max(count, 1), len(rows) - 1)
        else:
            count = 0
        rng = np.random.default_rng([self.split_seed, clients, client])
        validation = np.zeros(len(rows), dtype=bool)
        validation[rng.permutation(len(rows))[:count]] = True
        return rows[~validation], rows[validation]

    def _rows(self, rows: np.ndarray) -> Data:
        at = torch.as_tensor(rows, dtype=torch.int64)
        return self._train[0][at], self._train[1][at]

    def shard(self, client: int, clients: int) -> Data:
        """The client's training rows: its shard less its validation rows (`held_out`)."""
        return self._rows(self.held_out(client, clients)[0])

    def everything(self) -> Data:
        return self._train

    def size(self, data: Data) -> int:
        return len(data[0])

    def train(
        self,
        nodes: Mapping[str, nn.Module],
        data: Data,
        *,
        seed: int,
        objective: Objective | None = None,
    ) -> dict[str, float]:
        """`epochs` epochs of minibatch SGD with momentum, batches shuffled by `seed`.

        The optimizer (and its momentum) lives for this call only and is never exported.
        `objective` is the strategy's client side (FedProx, SCAFFOLD), applied every step.
        The nodes are moved to the `device` option's device, in place, and the data with them.
        """
        run = TrainingRun(
            nodes,
            loss=nn.functional.cross_entropy,
            lr=float(self.lr),
            momentum=float(self.momentum),
            epochs=self.epochs,
            batch_size=self.batch_size,
            seed=seed,
            objective=objective,
            device=self._device,
        )
        return run.fit(data)

    def evaluate(self, nodes: Mapping[str, nn.Module]) -> dict[str, float]:
        """Accuracy and loss on the test set, on the `device` option's device (nodes moved)."""
        return self._metrics(nodes, self._test)

    def evaluate_local(
        self, nodes: Mapping[str, nn.Module], client: int, clients: int
    ) -> tuple[dict[str, float], int]:
        """Accuracy and loss on client `client`'s validation rows (`held_out`), and their
        count: federated evaluation (soma.run.evaluation); nothing for a client that has none."""
        rows = self.held_out(client, clients)[1]
        if len(rows) == 0:
            return {}, 0
        return self._metrics(nodes, self._rows(rows)), len(rows)

    def _metrics(self, nodes: Mapping[str, nn.Module], data: Data) -> dict[str, float]:
        return classified(nodes, data, device=self._device)


def make(**options) -> DigitsTask:
    """The digits task: scikit-learn's `load_digits` split among clients, the workflow's default.

    Options (the config's `task_options`, keyed by `soma.tasks.digits`; `--option KEY=VALUE` on
    `soma client` and `soma simulate`):

    - `partition` (`labels_per_client`): how the training set is split, `iid`, `dirichlet`
      (label skew by Dirichlet(`alpha`)), `labels_per_client` or `quantity` (sizes skewed).
    - `alpha` (0.5): the Dirichlet concentration.
    - `labels_per_client` (2): labels each client holds.
    - `min_size` (2): a client's shard of fewer examples is refused, naming it.
    - `model` (`softmax`): `softmax` or `mlp` (one hidden layer of `hidden`).
    - `hidden` (32): the MLP's width.
    - `lr` (0.1), `momentum` (0.9), `epochs` (2), `batch_size` (16): local SGD.
    - `split_seed` (0), `partition_seed` (0): the test split's and the partition's draws.
    - `test_fraction` (0.25): the central test set's share.
    - `validation_fraction` (0.2): each client's held-out share, for federated evaluation.
    - `scale` (`standard`): the inputs scaled by the training set's statistics.
    - `device` (`cpu`): `cpu`, `cuda`, `cuda:N`, or `auto` (the job's GPU when Slurm gave one).
    """
    return DigitsTask(**options)


# -- the two baselines: not federated, trained as the workflow's `alone` and `centralized`
# jobs train them (soma.training.trained_alone): from the run's start, a round's local
# training per round.


def _trained_alone(task: DigitsTask, data: Data, rounds: int, *, seed: int, client: int) -> dict:
    nodes = task.nodes(seed)
    for _ in trained_alone(task, nodes, data, rounds=rounds, seed=seed, client=client):
        pass
    return task.evaluate(nodes)


def alone(task: DigitsTask, client: int, clients: int, rounds: int, *, seed: int = 0) -> float:
    """Test accuracy of client `client` (of `clients`) trained on its shard alone from the
    federation's start, for as many rounds of local training as the federation."""
    data = task.shard(client, clients)
    return _trained_alone(task, data, rounds, seed=seed, client=client)["accuracy"]


def centralized(task: DigitsTask, rounds: int, *, seed: int = 0) -> float:
    """Test accuracy of the federation's start trained on all the training data in one place
    for as many rounds of local training (seeded as client 0's, as the workflow's job)."""
    return _trained_alone(task, task.everything(), rounds, seed=seed, client=0)["accuracy"]
