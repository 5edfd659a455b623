"""Federated fine-tuning of adapters: LoRA (through `peft`) on a small pretrained character
model, the pretrained base kept once in the store and never sent again (extra `adapters`).

The model (`CharModel`) is a tiny causal self-attention model over a window of characters of
LEAF's alphabet (soma.tasks.plays): embeddings, one attention block with `q`, `k`, `v`, `out`
Linear layers and an MLP (`up`, `down`), and a `head` over the 80 characters; it predicts
every next character of the window. It is made of nn.Linear/nn.Embedding layers because
peft's LoRA adapts those (not nn.LSTM). Its pretrained weights, the base, are the file
`base` (safetensors, the model's own tensor names, its shape in the metadata:
`save_base`; `python examples/federated_lora.py --pretrain-only -o base.safetensors` makes
one from plays that the federation does not hold).

Clients are the speaking roles of the plays `plays` (soma.tasks.plays.roles), the longest
first: client k is the k-th longest role, its text cut into windows of the model's length
plus one (no overlap), the first `1 - test_fraction` of them its training data (at most
`max_windows`), the rest its held-out data (`evaluate_local`); `evaluate` is on the
held-out windows of every role of those plays (at most `test_windows`, evenly taken).

`train: lora` (the default): the nodes are the adapters alone, one node per adapted layer
(`targets`, of rank `rank`, scaled by `alpha / rank`), named as peft names them
(`base_model.model.q`, keys `lora_A.weight`, `lora_B.weight`): each node holds the very
lora_A/lora_B modules of the peft model the task trains, so that loading an average into
the nodes changes that model. Only they are exported, each round: a few kB where the model
is ~190 kB. The frozen rest is `base(seed)` (soma.tasks: the optional method), which soma
puts in the store once, binds by digest into the run's identity (a client whose base file
differs meets apart, refused naming both digests) and writes beside the adapters into the
model file, so that peft (`set_peft_model_state_dict`) or plain PyTorch (the merged
weights, `merged`) loads it.

Averaging A and B separately is not averaging the updates: the mean of B_i A_i is not
(mean B_i)(mean A_i). FedIT-style averaging of both (the default) lives with that error;
`freeze_a: true` is FFA-LoRA (Sun et al., ICLR 2024): A stays at its seeded initialisation,
the same at every client, and only B trains and is exported, so the average of the B_i A
is exactly (mean B_i) A, the average update, at half the bytes. A frozen A is part of the
base then (the model file needs it).

`train: full` trains and exports every weight of the model (the base is then the run's
start, sent each round): full federated fine-tuning, the comparison for the bytes and the
accuracy.

Local training is `epochs` epochs of Adam (`lr`, `batch_size`), shuffled by the caller's
seed; the optimizer is the call's own, never exported. On CPU with one thread the same seed
gives the same bits.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from soma.errors import TaskError
from soma.nodes import Export
from soma.tasks import ranges
from soma.tasks.protocol import Objective

_integer = functools.partial(ranges.integer, "adapters")
_positive = functools.partial(ranges.positive, "adapters")

TRAINS = ("lora", "full")
METADATA = "soma.adapters.model"  # the base file's metadata key: the model's shape, JSON
PREFIX = "base_model.model."  # where peft puts the adapted model: its adapters' names start so

# The options make() takes, as a literal (soma.tasks.declared_options reads it without torch).
OPTIONS = (
    "base",
    "plays",
    "train",
    "rank",
    "alpha",
    "targets",
    "freeze_a",
    "epochs",
    "lr",
    "batch_size",
    "max_windows",
    "test_windows",
    "test_fraction",
    "min_lines",
)

RENAMED = {"base": "base_path", "train": "mode"}

Data = tuple[torch.Tensor, torch.Tensor]


class PeftMissing(TaskError):
    """The adapters task needs `peft`, which is not installed (pip install 'soma[adapters]')."""


def _peft() -> Any:
    """peft, imported when asked (it pulls transformers: about 2 s), refused clearly when absent."""
    try:
        import peft
    except ImportError as error:
        raise PeftMissing(
            "task soma.tasks.adapters needs peft, which is not installed here "
            f"({error}): pip install 'soma[adapters]'"
        ) from None
    return peft


# --- the model ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """What a CharModel is: its vocabulary, window, width and MLP width."""

    vocabulary: int
    window: int = 32
    dim: int = 64
    hidden: int = 128


class CharModel(nn.Module):
    """A tiny causal self-attention character model: each position's logits over the
    vocabulary for the next character, from the characters up to it."""

    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.shape = shape
        d = shape.dim
        self.embed = nn.Embedding(shape.vocabulary, d)
        self.position = nn.Embedding(shape.window, d)
        self.norm1 = nn.LayerNorm(d)
        self.q, self.k, self.v, self.out = (nn.Linear(d, d) for _ in range(4))
        self.norm2 = nn.LayerNorm(d)
        self.up, self.down = nn.Linear(d, shape.hidden), nn.Linear(shape.hidden, d)
        self.norm3 = nn.LayerNorm(d)
        self.head = nn.Linear(d, shape.vocabulary)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        h = self.embed(x) + self.position(torch.arange(t))
        a = self.norm1(h)
        q, k, v = self.q(a), self.k(a), self.v(a)
        scores = q @ k.transpose(1, 2) / self.shape.dim**0.5
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        attended = scores.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v
        h = h + self.out(attended)
        h = h + self.down(torch.relu(self.up(self.norm2(h))))
        return self.head(self.norm3(h))


def save_base(model: CharModel, path: str | os.PathLike[str]) -> Path:
    """Write `model` as a base file: its state_dict by its own names (what
    `CharModel(shape).load_state_dict(safetensors.torch.load_file(path))` loads), its shape
    in the metadata; atomically (soma.files's writer: the whole file or none)."""
    from safetensors.torch import save

    from soma.files import write_atomic

    state = {name: tensor.detach().contiguous() for name, tensor in model.state_dict().items()}
    shape = json.dumps(model.shape.__dict__, sort_keys=True)
    try:
        return write_atomic(path, save(state, metadata={METADATA: shape}))
    except OSError as error:
        raise TaskError(f"cannot write the base to {os.fspath(path)!r}: {error}") from error


@functools.lru_cache(maxsize=4)
def _read_base(path: str, stamp: tuple[int, int]) -> tuple[Shape, dict[str, torch.Tensor]]:
    """The base file's shape and tensors (cached by path, size and mtime)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(path, framework="pt") as f:
            metadata = dict(f.metadata() or {})
            tensors = {name: f.get_tensor(name) for name in f.keys()}
    except (SafetensorError, OSError) as error:
        raise TaskError(f"adapters option base={path!r} cannot be read: {error}") from None
    if METADATA not in metadata:
        raise TaskError(
            f"adapters option base={path!r} is no base file (its metadata has no {METADATA!r}): "
            "make one with soma.tasks.adapters.save_base, e.g. "
            "`python examples/federated_lora.py --pretrain-only -o base.safetensors`"
        )
    shape = Shape(**json.loads(metadata[METADATA]))
    return shape, tensors


def read_base(path: str | os.PathLike[str]) -> tuple[Shape, dict[str, torch.Tensor]]:
    """The base file `path`: the model's shape and its state_dict."""
    path = os.fspath(path)
    try:
        stat = os.stat(path)
    except OSError as error:
        raise TaskError(
            f"adapters option base={path!r} cannot be read: {error.strerror} (make a base "
            "with `python examples/federated_lora.py --pretrain-only -o base.safetensors`)"
        ) from None
    return _read_base(path, (stat.st_size, stat.st_mtime_ns))


def merged(state: Mapping[str, torch.Tensor], scaling: float) -> dict[str, torch.Tensor]:
    """A model file's tensors (base by the model's names, adapters by peft's) as the plain
    model's state_dict, each adapted layer's weight W + scaling * B @ A: what plain PyTorch
    loads (`CharModel(shape).load_state_dict(merged(load_file(path), alpha / rank))`)."""
    plain = {k: v.clone() for k, v in state.items() if not k.startswith(PREFIX)}
    for name in state:
        if name.startswith(PREFIX) and name.endswith(".lora_A.weight"):
            layer = name[len(PREFIX) : -len(".lora_A.weight")]
            a, b = state[name], state[f"{PREFIX}{layer}.lora_B.weight"]
            plain[f"{layer}.weight"] = plain[f"{layer}.weight"] + scaling * (b @ a)
    return plain


# --- the nodes ---------------------------------------------------------------------------------


class Adapter(nn.Module):
    """One adapted layer's trained part: the peft model's own lora_A and lora_B modules (or
    lora_B alone under `freeze_a`), so that loading the node changes the model."""

    def __init__(self, layer: nn.Module, *, freeze_a: bool) -> None:
        super().__init__()
        if not freeze_a:
            self.lora_A = layer.lora_A["default"]
        self.lora_B = layer.lora_B["default"]


def model_of(nodes: Mapping[str, nn.Module]) -> nn.Module:
    """The model that `nodes` (from `AdaptersTask.nodes`) belong to."""
    for node in nodes.values():
        model = node.__dict__.get("_soma_model")
        if model is not None:
            return model
    raise TaskError("these nodes are not the adapters task's (made by its nodes(seed))")


def _own(node: nn.Module, model: nn.Module) -> nn.Module:
    """`node` remembering its model, outside its state_dict (not a registered submodule)."""
    object.__setattr__(node, "_soma_model", model)
    return node


# --- the data ----------------------------------------------------------------------------------


def _chunks(codes: Sequence[int], length: int) -> list[list[int]]:
    """Windows of `length` characters, one after the other (no overlap)."""
    return [list(codes[i : i + length]) for i in range(0, len(codes) - length + 1, length)]


def _tensors(chunks: Sequence[Sequence[int]]) -> Data:
    """(inputs, targets): each chunk less its last character, and less its first."""
    if not chunks:
        empty = torch.zeros(0, 0, dtype=torch.int64)
        return empty, empty
    block = torch.tensor(chunks, dtype=torch.int64)
    return block[:, :-1], block[:, 1:]


@dataclass
class AdaptersTask:
    base_path: str | None = None  # option `base`
    plays: Sequence[str] | None = None
    mode: str = "lora"  # option `train`
    rank: int = 4
    alpha: float = 8.0
    targets: Sequence[str] = ("q", "k", "v", "out")
    freeze_a: bool = False
    epochs: int = 1
    lr: float = 0.005
    batch_size: int = 16
    max_windows: int = 64
    test_windows: int = 1000
    test_fraction: float = 0.2
    min_lines: int = 50

    def __post_init__(self) -> None:
        if self.base_path is None:
            raise TaskError(
                "adapters option base is required: the pretrained model's file (make one with "
                "`python examples/federated_lora.py --pretrain-only -o base.safetensors`)"
            )
        if self.mode not in TRAINS:
            raise TaskError(
                f"adapters option train must be one of {', '.join(TRAINS)}, not {self.mode!r}"
            )
        for name in ("rank", "epochs", "batch_size", "max_windows", "test_windows", "min_lines"):
            _integer(name, getattr(self, name), low=1)
        _positive("alpha", self.alpha)
        _positive("lr", self.lr)
        if not isinstance(self.freeze_a, bool):
            raise TaskError(
                f"adapters option freeze_a must be true or false, not {self.freeze_a!r}"
            )
        if self.freeze_a and self.mode != "lora":
            raise TaskError("adapters option freeze_a is LoRA's (train: lora), not full training's")
        if not (0 < float(self.test_fraction) < 1):
            raise TaskError(
                f"adapters option test_fraction must be in (0, 1), not {self.test_fraction!r}"
            )
        if isinstance(self.plays, str):  # `--option plays=hamlet`: one play
            self.plays = (self.plays,)
        if isinstance(self.targets, str) or not all(isinstance(t, str) for t in self.targets):
            raise TaskError(
                f"adapters option targets must be a list of layer names, not {self.targets!r}"
            )
        self.shape, self._base = read_base(self.base_path)
        known = {n for n, m in CharModel(self.shape).named_modules() if isinstance(m, nn.Linear)}
        unknown = sorted(set(self.targets) - known)
        if unknown or not self.targets:
            what = ", ".join(map(repr, unknown)) + " not a layer" if unknown else "no layer"
            raise TaskError(
                f"adapters option targets {list(self.targets)!r}: {what} of the model; its "
                f"Linear layers are {', '.join(sorted(known))}"
            )
        if self.mode == "lora":
            _peft()  # refused now, before any client trains
        from soma.tasks import plays as plays_

        self._roles = sorted(
            plays_.roles(
                list(self.plays) if self.plays is not None else None, min_lines=self.min_lines
            ),
            key=lambda r: (-len(r.text), r.play, r.name),
        )
        if not self._roles:
            raise TaskError(
                f"adapters option plays {self.plays!r}: no role has {self.min_lines} lines"
            )

    # -- what a model file and a reader need ---------------------------------------------------

    @property
    def scaling(self) -> float:
        return float(self.alpha) / self.rank

    def lora_config(self) -> dict[str, Any]:
        """The LoraConfig keywords of the adapters (what peft is given)."""
        return {
            "r": self.rank,
            "lora_alpha": self.alpha,
            "target_modules": sorted(self.targets),
            "lora_dropout": 0.0,
            "bias": "none",
        }

    def preprocessing(self) -> dict[str, str]:
        """What the model's inputs are, and how the file's adapters are read (soma.tasks)."""
        from soma.tasks import plays as plays_

        return {
            "inputs": f"x: windows of up to {self.shape.window} characters, each its index in "
            "the alphabet (characters outside it as soma.tasks.plays.encode says); the model's "
            f"outputs are each position's logits over the {self.shape.vocabulary} characters "
            "of the next one",
            "alphabet": plays_.ALPHABET,
            "model": json.dumps(self.shape.__dict__, sort_keys=True),
            "lora_config": json.dumps(self.lora_config(), sort_keys=True),
            "train": self.mode,
        }

    # -- the data ----------------------------------------------------------------------------

    def check(self, clients: int) -> None:
        """More clients than the plays have roles are refused, before any client trains."""
        if clients > len(self._roles):
            raise TaskError(
                f"the plays {list(self.plays) if self.plays else 'all'} have {len(self._roles)} "
                f"roles of at least {self.min_lines} lines, fewer than {clients} clients"
            )

    @functools.cached_property
    def _split(self) -> list[tuple[list[list[int]], list[list[int]]]]:
        """Each role's (training, held-out) windows."""
        from soma.tasks import plays as plays_

        out = []
        for role in self._roles:
            chunks = _chunks(plays_.encode(role.text), self.shape.window + 1)
            cut = max(1, int(round(len(chunks) * (1 - float(self.test_fraction)))))
            out.append((chunks[:cut][: self.max_windows], chunks[cut:][: self.max_windows]))
        return out

    def shard(self, client: int, clients: int) -> Data:
        self.check(clients)
        return _tensors(self._split[client][0])

    def size(self, data: Data) -> int:
        return len(data[0])

    def everything(self, clients: int) -> Data:
        """Every client's training windows as one shard (the centralized baseline)."""
        inputs, targets = zip(*(self.shard(k, clients) for k in range(clients)), strict=True)
        return torch.cat(inputs), torch.cat(targets)

    @functools.cached_property
    def test_data(self) -> Data:
        held = [chunk for _, out in self._split for chunk in out]
        step = max(1, len(held) // self.test_windows)
        return _tensors(held[::step][: self.test_windows])

    # -- the Task protocol ---------------------------------------------------------------------

    def _model(self) -> CharModel:
        """The pretrained model: the base file's weights."""
        model = CharModel(self.shape)
        model.load_state_dict(self._base)
        return model

    def nodes(self, seed: int) -> dict[str, nn.Module]:
        """The trained part: every layer with weights (`full`), or the adapters (`lora`)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = self._model()
            if self.mode == "full":
                return {
                    name: _own(module, model)
                    for name, module in model.named_modules()
                    if name and list(module.parameters(recurse=False))
                }
            peft = _peft()
            wrapped = peft.get_peft_model(model, peft.LoraConfig(**self.lora_config()))
        return {
            name: _own(Adapter(module, freeze_a=self.freeze_a), wrapped)
            for name, module in wrapped.named_modules()
            if isinstance(getattr(module, "lora_B", None), nn.ModuleDict)
            and "default" in module.lora_B
        }

    def base(self, seed: int) -> Export | None:
        """The frozen weights the nodes of `seed` sit on, never trained, never sent again
        (soma.tasks): the pretrained model by its own names, and under `freeze_a` each
        adapter's frozen A (by peft's name); None for `full` (everything is trained)."""
        if self.mode == "full":
            return None
        export: Export = {}
        for name, tensor in self._base.items():
            node, key = name.rsplit(".", 1)
            export.setdefault(node, {})[key] = tensor.detach().clone()
        if self.freeze_a:
            model = model_of(self.nodes(seed))
            for name, module in model.named_modules():
                if (
                    isinstance(getattr(module, "lora_A", None), nn.ModuleDict)
                    and "default" in module.lora_A
                ):
                    weight = module.lora_A["default"].weight
                    export.setdefault(name, {})["lora_A.weight"] = weight.detach().clone()
        return export

    def train(
        self,
        nodes: Mapping[str, nn.Module],
        data: Data,
        *,
        seed: int,
        objective: Objective | None = None,
    ) -> dict[str, float]:
        """`epochs` epochs of Adam on the nodes' parameters alone, batches shuffled by `seed`."""
        from soma.training import adjust_on_cpu, keyed_parameters

        model = model_of(nodes)
        parameters = [p for node in nodes.values() for p in node.parameters()]
        for p in model.parameters():
            p.requires_grad_(False)
        for p in parameters:
            p.requires_grad_(True)
        optimizer = torch.optim.Adam(parameters, lr=float(self.lr))
        keyed = keyed_parameters(nodes) if objective is not None else {}
        inputs, targets = data
        shuffle = torch.Generator().manual_seed(seed)
        model.train(True)
        total, steps = 0.0, 0
        for _ in range(self.epochs):
            order = torch.randperm(len(inputs), generator=shuffle)
            for start in range(0, len(inputs), self.batch_size):
                batch = order[start : start + self.batch_size]
                optimizer.zero_grad()
                loss = _loss(model(inputs[batch]), targets[batch])
                loss.backward()
                if objective is not None:
                    adjust_on_cpu(objective, keyed, float(self.lr))
                optimizer.step()
                total, steps = total + float(loss.detach()), steps + 1
        optimizer.zero_grad()
        return {"loss": total / max(steps, 1), "steps": steps}

    def evaluate(self, nodes: Mapping[str, nn.Module]) -> dict[str, float]:
        """Next-character accuracy and loss on the held-out windows of the plays' roles."""
        return self._metrics(nodes, self.test_data)

    def evaluate_local(
        self, nodes: Mapping[str, nn.Module], client: int, clients: int
    ) -> tuple[dict[str, float], int]:
        """The same on client `client`'s own held-out windows, and their count."""
        self.check(clients)
        held = _tensors(self._split[client][1])
        if len(held[0]) == 0:
            return {}, 0
        return self._metrics(nodes, held), len(held[0])

    def _metrics(self, nodes: Mapping[str, nn.Module], data: Data) -> dict[str, float]:
        model = model_of(nodes)
        model.train(False)
        with torch.no_grad():
            logits = model(data[0])
            loss = _loss(logits, data[1])
        accuracy = (logits.argmax(dim=-1) == data[1]).double().mean()
        return {"accuracy": float(accuracy), "loss": float(loss)}


def _loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def make(**options: Any) -> AdaptersTask:
    """LoRA adapters fine-tuned across clients on a pretrained character model.

    Needs `pip install 'soma[adapters]'`. Options `base` and `train` are the task's fields
    `base_path` and `mode` (base() and train() are its methods).

    Options (the config's `task_options`, keyed by `soma.tasks.adapters`; `--option KEY=VALUE` on
    `soma client` and `soma simulate`):

    - `base` (required): the pretrained model's safetensors file
      (`python examples/federated_lora.py --pretrain-only -o FILE`).
    - `plays` (null: all 38): the plays whose speaking roles are the clients.
    - `train` (`lora`): `lora` (only the adapters trained and sent) or `full`.
    - `rank` (4), `alpha` (8): the adapters' rank and scale (alpha / rank).
    - `targets` (`[q, k, v, out]`): the Linear layers adapted.
    - `freeze_a` (false): FFA-LoRA, A frozen at its seeded start and only B sent.
    - `epochs` (1), `lr` (0.005), `batch_size` (16): local Adam.
    - `max_windows` (64): a client's training (and held-out) windows at most.
    - `test_windows` (1000): the central test set.
    - `test_fraction` (0.2): each role's held-out share.
    - `min_lines` (50): roles with fewer lines are no client.
    """
    for field_name in RENAMED.values():
        if field_name in options:
            raise TypeError(f"unexpected keyword argument {field_name!r}")
    for option, field_name in RENAMED.items():
        if option in options:
            options[field_name] = options.pop(option)
    return AdaptersTask(**options)


# --- pretraining the base ------------------------------------------------------------------------


def pretrain(
    plays: Sequence[str] | None,
    *,
    window: int = 32,
    dim: int = 64,
    hidden: int = 128,
    epochs: int = 2,
    lr: float = 0.005,
    batch_size: int = 32,
    max_windows: int | None = None,
    seed: int = 0,
) -> CharModel:
    """A CharModel trained centrally on every line of `plays` (the "public" corpus the base
    is pretrained on): `epochs` epochs of Adam on windows of `window` characters."""
    from soma.tasks import plays as plays_

    text = "\n".join(
        role.text for role in plays_.roles(list(plays) if plays else None, min_lines=1)
    )
    chunks = _chunks(plays_.encode(text), window + 1)
    if max_windows is not None:
        chunks = chunks[:: max(1, len(chunks) // max_windows)][:max_windows]
    inputs, targets = _tensors(chunks)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = CharModel(Shape(plays_.VOCABULARY, window, dim, hidden))
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    shuffle = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        order = torch.randperm(len(inputs), generator=shuffle)
        for start in range(0, len(inputs), batch_size):
            batch = order[start : start + batch_size]
            optimizer.zero_grad()
            _loss(model(inputs[batch]), targets[batch]).backward()
            optimizer.step()
    return model
