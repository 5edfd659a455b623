"""Synthetic(alpha, beta) of the FedProx paper (Li et al., "Federated Optimization in
Heterogeneous Networks", MLSys 2020), generated from its formula with a seed, offline.

Each device k of `devices` (30, as in the paper) draws its own softmax-regression problem:
u_k ~ N(0, alpha), W_k ~ N(u_k, 1) (60 x 10), b_k ~ N(u_k, 1) (10); B_k ~ N(0, beta),
v_k ~ N(B_k, 1) (60); its inputs x ~ N(v_k, Sigma), Sigma diagonal with Sigma_jj = j^-1.2,
and its labels y = argmax(x W_k + b_k) (the paper's Section 5.1; its generator, at
github.com/litian96/FedProx data/synthetic_*/generate_*.py, reads alpha and beta as the
normals' standard deviations, as here). `beta` is how much the devices' inputs differ, and
`alpha` is meant to say how much their models do: the heterogeneity is a knob (the paper's
Synthetic(0, 0), (0.5, 0.5), (1, 1)). But u_k is added to every entry of W_k and b_k, so it
shifts every class's logit by the same u_k (1 + sum_j x_j), which the argmax never sees: in
the paper's formula, kept here, alpha changes no label (tested), and the devices' models
differ by their own draws of W_k and b_k whatever alpha is. `iid: true` is the paper's
Synthetic IID instead: one W, b ~ N(0, 1) for every device, x ~ N(0, Sigma) (alpha and beta
do not apply and must be 0). As in the paper's generator, device k holds
int(lognormal(4, 2)) + 50 examples (a power law's heavy tail: most hold a few hundred, a
few thousands).

Each device's examples are shuffled and split once into training and test rows
(`test_fraction` 0.2: the paper's Appendix C.2, "an 80% training set and a 20% testing
set"; its released generator keeps 10%): a client is one device, trained on its training
rows; `evaluate_local` scores its test rows and `evaluate` the union of every device's test
rows (accuracy, loss; the paper's test accuracy, total correct over total test examples),
with the same over the union of the training rows beside them (`train_set_loss`,
`train_set_accuracy`: the paper's training-loss curve; not the summary's `train_loss`, the
clients' own loss while they train).

Everything is drawn from `data_seed` alone with NumPy's SeedSequence (a stream for the
sizes, one for Synthetic IID's shared model, one per device), so that every process, in
every mode, generates the same bits; the paper's data came from an unseeded generator and
cannot be regenerated, so a seed here is one draw of the same distribution, not the paper's
draw.

The model is multinomial logistic regression, one node {"out": Linear(60, 10)} (torch's
initialization; the paper's code declares an L2 regularizer of 0.001 that its loss never
adds), trained with plain minibatch SGD (`lr` 0.01, `batch_size` 10, the paper's; `epochs`
is 20 in the paper, 1 by default here so that a first run takes seconds).

    soma simulate --task soma.tasks.synthetic --clients 30 --rounds 20 --participation 10

runs it in one process; config/synthetic.yaml is the paper's protocol reduced for two cores.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from soma.device import task_device
from soma.tasks import TaskError, ranges
from soma.tasks.protocol import Objective
from soma.training import TrainingRun, classified

_integer = functools.partial(ranges.integer, "synthetic")
_number = functools.partial(ranges.number, "synthetic")

DIMENSION = 60
CLASSES = 10
DEVICES = 30  # the paper's
EXPONENT = -1.2  # Sigma_jj = j ** EXPONENT, j = 1..60
SIZE_MEAN, SIZE_SIGMA, SIZE_FLOOR = 4.0, 2.0, 50  # int(lognormal(4, 2)) + 50 examples

Data = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class Generated:
    """Every device's training and test rows, and their unions, as tensors (float32
    inputs, int64 labels)."""

    train: tuple[Data, ...]
    test: tuple[Data, ...]
    all_train: Data
    all_test: Data


SIZES, SHARED = 0, 1  # the streams of the sizes and of Synthetic IID's one model


def _stream(data_seed: int, which: int) -> np.random.Generator:
    """Stream SIZES, stream SHARED, and stream k + 2 for device k: SeedSequence spawn keys
    keep them apart, and a device's draw does not depend on how many devices there are."""
    return np.random.default_rng(np.random.SeedSequence(data_seed, spawn_key=(which,)))


def sizes(data_seed: int, devices: int) -> np.ndarray:
    """Each device's example count: int(lognormal(4, 2)) + 50, as the paper's generator."""
    drawn = _stream(data_seed, SIZES).lognormal(SIZE_MEAN, SIZE_SIGMA, devices)
    return drawn.astype(np.int64) + SIZE_FLOOR


def _device(
    k: int, n: int, *, alpha: float, beta: float, iid: bool, data_seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Device k's n examples (inputs, labels) and their shuffled order, from its stream."""
    rng = _stream(data_seed, k + 2)
    scale = np.power(np.arange(1, DIMENSION + 1, dtype=np.float64), EXPONENT / 2)  # sqrt(Sigma)
    if iid:
        shared = _stream(data_seed, SHARED)
        weights = shared.normal(0.0, 1.0, (DIMENSION, CLASSES))
        bias = shared.normal(0.0, 1.0, CLASSES)
        mean = np.zeros(DIMENSION)
    else:
        u, big_b = rng.normal(0.0, alpha), rng.normal(0.0, beta)
        weights = rng.normal(u, 1.0, (DIMENSION, CLASSES))
        bias = rng.normal(u, 1.0, CLASSES)
        mean = rng.normal(big_b, 1.0, DIMENSION)
    inputs = mean + scale * rng.standard_normal((n, DIMENSION))
    labels = np.argmax(inputs @ weights + bias, axis=1).astype(np.int64)
    return inputs, labels, rng.permutation(n)


@functools.lru_cache(maxsize=4)
def generate(
    alpha: float, beta: float, iid: bool, data_seed: int, devices: int, test_fraction: float
) -> Generated:
    """Every device's examples, shuffled and split into (training, test) rows: the first
    int((1 - test_fraction) * n) of a shuffle (by the device's stream) train, the rest
    test, as the paper's generator splits them."""
    train, test = [], []
    for k, n in enumerate(sizes(data_seed, devices)):
        inputs, labels, order = _device(
            k, int(n), alpha=alpha, beta=beta, iid=iid, data_seed=data_seed
        )
        cut = int((1.0 - test_fraction) * len(labels))
        train.append((inputs[order[:cut]], labels[order[:cut]]))
        test.append((inputs[order[cut:]], labels[order[cut:]]))
    return Generated(
        tuple(_tensors(*part) for part in train),
        tuple(_tensors(*part) for part in test),
        _union(train),
        _union(test),
    )


def _tensors(inputs: np.ndarray, labels: np.ndarray) -> Data:
    return torch.tensor(inputs, dtype=torch.float32), torch.tensor(labels, dtype=torch.int64)


def _union(parts: list[tuple[np.ndarray, np.ndarray]]) -> Data:
    return _tensors(np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts]))


# The options make() takes, read without running this module (soma.tasks.declared_options);
# tests/tasks/test_synthetic.py holds it to SyntheticTask's fields.
OPTIONS = (
    "alpha",
    "beta",
    "iid",
    "devices",
    "data_seed",
    "test_fraction",
    "epochs",
    "lr",
    "batch_size",
    "device",
)


@dataclass
class SyntheticTask:
    alpha: float = 1.0
    beta: float = 1.0
    iid: bool = False
    devices: int = DEVICES
    data_seed: int = 0
    test_fraction: float = 0.2
    epochs: int = 1
    lr: float = 0.01
    batch_size: int = 10
    device: str = "cpu"  # cpu, cuda, cuda:N or auto (soma.device); cpu keeps runs bit-identical

    def __post_init__(self) -> None:
        _number("alpha", self.alpha, low=0, high=float("inf"), closed="[)")
        _number("beta", self.beta, low=0, high=float("inf"), closed="[)")
        if not isinstance(self.iid, bool):
            raise TaskError(f"synthetic option iid must be true or false, not {self.iid!r}")
        if self.iid and (self.alpha or self.beta):
            raise TaskError(
                f"synthetic option iid: true is the paper's Synthetic IID (one model for every "
                f"device, inputs ~ N(0, Sigma)), where alpha and beta do not apply: set alpha "
                f"and beta to 0, not {self.alpha!r} and {self.beta!r}"
            )
        _integer("devices", self.devices, low=1)
        _integer("data_seed", self.data_seed, low=0)
        _number("test_fraction", self.test_fraction, low=0, high=1, closed="()")
        _integer("epochs", self.epochs, low=1)
        _number("lr", self.lr, low=0, high=float("inf"), closed="()")
        _integer("batch_size", self.batch_size, low=1)
        self._device = task_device("synthetic", self.device)

    @property
    def data(self) -> Generated:
        """The generated devices (cached: every call with these options is the same draw)."""
        return generate(
            float(self.alpha),
            float(self.beta),
            self.iid,
            int(self.data_seed),
            int(self.devices),
            float(self.test_fraction),
        )

    def check(self, clients: int) -> None:
        """A client is one device: a run has as many clients as the task generates devices
        (the data of device k do not depend on the client count, so another count cannot
        be served by re-dealing them; change `devices` instead)."""
        _integer("clients", clients, low=1)
        if clients != self.devices:
            raise TaskError(
                f"synthetic generates {self.devices} devices (option devices) and a client is "
                f"one device: clients must be {self.devices}, not {clients} (or set the task "
                f"option devices to {clients})"
            )

    def preprocessing(self) -> dict[str, str]:
        """What the model's inputs are: the generated features as they are, unscaled."""
        return {
            "inputs": f"x: the {DIMENSION} features of a Synthetic example as generated, "
            f"unscaled; the model's {CLASSES} outputs are the logits of the classes 0..9",
            "formula": "x",
        }

    # -- the Task protocol ---------------------------------------------------------------

    def nodes(self, seed: int) -> dict[str, nn.Module]:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return {"out": nn.Linear(DIMENSION, CLASSES)}

    def shard(self, client: int, clients: int) -> Data:
        """Device `client`'s training rows."""
        self.check(clients)
        if isinstance(client, bool) or not isinstance(client, numbers.Integral):
            raise TaskError(f"client must be an integer, not {client!r}")
        if not 0 <= client < clients:
            raise TaskError(
                f"client {client} is not one of the {clients} clients (0..{clients - 1})"
            )
        return self.data.train[client]

    def everything(self) -> Data:
        """Every device's training rows in one place (the centralized baseline)."""
        return self.data.all_train

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
        """`epochs` epochs of plain minibatch SGD (no momentum, as the paper), batches
        shuffled by `seed`; `objective` is the strategy's client side (FedProx, SCAFFOLD)."""
        run = TrainingRun(
            nodes,
            loss=nn.functional.cross_entropy,
            lr=float(self.lr),
            epochs=self.epochs,
            batch_size=self.batch_size,
            seed=seed,
            objective=objective,
            device=self._device,
        )
        return run.fit(data)

    def evaluate(self, nodes: Mapping[str, nn.Module]) -> dict[str, float]:
        """Accuracy and loss on the union of every device's test rows, and the same on the
        union of their training rows (`train_set_accuracy`, `train_set_loss`), as the paper
        plots them."""
        test = self._metrics(nodes, self.data.all_test)
        train = self._metrics(nodes, self.data.all_train)
        return {**test, "train_set_accuracy": train["accuracy"], "train_set_loss": train["loss"]}

    def evaluate_local(
        self, nodes: Mapping[str, nn.Module], client: int, clients: int
    ) -> tuple[dict[str, float], int]:
        """Accuracy and loss on device `client`'s own test rows, and their count."""
        self.check(clients)
        test = self.data.test[client]
        if len(test[1]) == 0:
            return {}, 0
        return self._metrics(nodes, test), len(test[1])

    def _metrics(self, nodes: Mapping[str, nn.Module], data: Data) -> dict[str, float]:
        return classified(nodes, data, device=self._device)


def make(**options) -> SyntheticTask:
    """Synthetic(α, β) of the FedProx paper (Li et al., MLSys 2020), generated offline.

    A client is a device, so a run's `clients` must equal `devices`.

    Options (the config's `task_options`, keyed by `soma.tasks.synthetic`; `--option KEY=VALUE` on
    `soma client` and `soma simulate`):

    - `alpha` (1.0): how much the devices' models differ (it changes no label: see the module).
    - `beta` (1.0): how much the devices' inputs differ.
    - `iid` (false): the paper's Synthetic IID (`alpha` and `beta` must then be 0).
    - `devices` (30): devices generated.
    - `data_seed` (0): the seed the devices are drawn from.
    - `test_fraction` (0.2): each device's held-out share.
    - `epochs` (1), `lr` (0.01), `batch_size` (10): local plain SGD (the paper: 20, 0.01, 10).
    - `device` (`cpu`): `cpu`, `cuda`, `cuda:N`, or `auto` (the job's GPU when Slurm gave one).
    """
    return SyntheticTask(**options)
