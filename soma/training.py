"""A minimal training run: named nodes, applied in order, with an optimizer of its own.

It is what the tests, the demonstration and the workflow's tasks train. Its optimizer (and
the optimizer's momentum) belongs to it and is never exported: only `export()` crosses to
other clients, and `load()` refuses what does not fit before touching anything.

A strategy with a client side (FedProx, SCAFFOLD) changes the local objective through an
`objective` (see soma.strategies): after each backward and before each step it is handed the
parameters, keyed exactly like an export, and the step's learning rate.

A run trains wherever its nodes are, or on `device` (soma.device), moving them there first;
the data is brought to the nodes. Exports are on CPU whatever the device (soma.nodes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from soma.device import move as move_nodes
from soma.device import resolve_device, where
from soma.errors import SomaError
from soma.nodes import Export, export, load
from soma.sgd import SGD

Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Optimizer = Any  # anything with zero_grad() and step(): soma.sgd.SGD, a torch.optim optimizer
Parameters = dict[str, dict[str, nn.Parameter]]

DEFAULT_LR = 0.05


class TrainingError(SomaError, ValueError):
    """A training run cannot be built as asked."""


def keyed_parameters(nodes: Mapping[str, Any]) -> Parameters:
    """Each node's parameters keyed as `soma.export` keys them, so that an objective can pair
    a live parameter with the same key of an export (the round's start, a control variate).
    A task with a training loop of its own builds them once, and hands them to
    `adjust_on_cpu` at every step (see README, "Bring your own task").

    By the same ducks as soma.nodes: a node with `state_dict()` by `named_parameters()`
    names (the state_dict's own keys for a torch module), otherwise `parameters()` in order,
    keyed "0", "1", ... A node without parameters is absent.
    """
    keyed: Parameters = {}
    for node_id, node in nodes.items():
        if callable(getattr(node, "state_dict", None)):
            named = getattr(node, "named_parameters", None)
            if not callable(named):
                raise TrainingError(
                    f"node {node_id!r} has state_dict() but no named_parameters(): its "
                    "parameters cannot be paired with the keys it exports"
                )
            params = dict(named())
        elif callable(getattr(node, "parameters", None)):
            params = {str(i): p for i, p in enumerate(node.parameters())}
        else:
            params = {}
        if params:
            keyed[node_id] = params
    return keyed


def learning_rate(optimizer: Optimizer) -> float:
    """The rate of the optimizer's next step: its first param group's, or its own `.lr`."""
    groups = getattr(optimizer, "param_groups", None)
    if groups:
        return float(groups[0]["lr"])
    lr = getattr(optimizer, "lr", None)
    if lr is None:
        raise TrainingError(
            f"optimizer {type(optimizer).__name__} has neither param_groups nor .lr: "
            "an objective needs each step's learning rate"
        )
    return float(lr)


def off_cpu(parameters: Parameters) -> bool:
    """Whether any parameter lives off CPU, where an objective's exports cannot meet it."""
    return any(p.device.type != "cpu" for keys in parameters.values() for p in keys.values())


def adjust_on_cpu(objective: Any, parameters: Parameters, lr: float) -> None:
    """A strategy's objective applied to one step: call it after `loss.backward()` and before
    `optimizer.step()`, with `keyed_parameters(nodes)` and the step's learning rate. This is
    what `TrainingRun(objective=...)` does; a task with a training loop of its own calls it
    to run FedProx, SCAFFOLD or distributed DP (see README, "Bring your own task").

    Off CPU, `objective.adjust` is given CPU copies of the parameters, their gradients then
    copied back: a strategy's objective keeps the round's start (and SCAFFOLD its control
    variates) as exports, which are on CPU, and torch refuses arithmetic between a GPU
    parameter and a CPU tensor. Two copies per parameter and step are the price, paid only
    off CPU. An objective changes gradients only (soma.strategies), so gradients are all that
    comes back. On CPU it is `objective.adjust(parameters, lr)` itself.
    """
    if not off_cpu(parameters):
        objective.adjust(parameters, lr)
        return
    mirrors = {n: {k: _mirror(p) for k, p in keys.items()} for n, keys in parameters.items()}
    objective.adjust(mirrors, lr)
    with torch.no_grad():
        for node_id, keys in parameters.items():
            for key, parameter in keys.items():
                grad = mirrors[node_id][key].grad
                if parameter.grad is not None and grad is not None:
                    parameter.grad.copy_(grad)


def _mirror(parameter: torch.Tensor) -> torch.Tensor:
    """A CPU copy of `parameter` carrying a CPU copy of its gradient (None stays None)."""
    mirror = parameter.detach().to("cpu", copy=True).requires_grad_(parameter.requires_grad)
    if parameter.grad is not None:
        mirror.grad = parameter.grad.detach().to("cpu", copy=True)
    return mirror


def _placed(nodes: Mapping[str, Any], device: str | torch.device | None) -> torch.device | None:
    """Where a run trains: `device`, the nodes moved there now (before the optimizer holds
    them), or for None wherever the nodes already are (None when they are on several)."""
    if device is None:
        return where(nodes)
    text = str(device) if isinstance(device, torch.device) else device
    resolved = resolve_device(text, option="TrainingRun device")
    move_nodes(nodes, resolved)
    return resolved


class TrainingRun:
    """Named nodes applied in order to an input, trained on `(inputs, targets)`.

    The optimizer is soma's SGD with `lr` (default 0.05), `momentum` and `weight_decay`
    (default 0), which never imports torch._dynamo; or `optimizer`, a factory from the list
    of parameters to anything with zero_grad() and step(), e.g.
    `lambda ps: torch.optim.Adam(ps, lr=1e-3)`. Passing both `optimizer` and any of lr,
    momentum, weight_decay is refused: the factory already says them, and a value that would
    be silently ignored is a mistake waiting to be made.

    `objective` (a strategy's client side, see soma.strategies) is called after each
    backward and before each step with the parameters keyed like an export and the
    optimizer's current learning rate (`param_groups[0]["lr"]`, or `.lr`). Off CPU it is
    handed CPU copies of the parameters (see `adjust_on_cpu`): its tensors are exports.

    `device` (`cpu`, `cuda`, `cuda:N`, `auto`; see soma.device) moves the nodes there, in
    place, so the caller's nodes are the ones trained; None (the default) trains them where
    they already are. `fit`, `evaluate` and calls bring their data to the nodes' device. The
    batches are shuffled on CPU, so the order is the same on every device.
    """

    def __init__(
        self,
        nodes: Mapping[str, nn.Module],
        *,
        loss: Loss,
        lr: float | None = None,
        momentum: float | None = None,
        weight_decay: float | None = None,
        epochs: int = 1,
        batch_size: int = 32,
        seed: int = 0,
        optimizer: Callable[[list[nn.Parameter]], Optimizer] | None = None,
        objective: Any = None,
        device: str | torch.device | None = None,
    ) -> None:
        self.nodes = dict(nodes)
        self.device = _placed(self.nodes, device)
        self.loss = loss
        self.epochs = epochs
        self.batch_size = batch_size
        self._shuffle = torch.Generator().manual_seed(seed)
        parameters = [p for node in self.nodes.values() for p in node.parameters()]
        self.optimizer = _optimizer(parameters, optimizer, lr, momentum, weight_decay)
        self.objective = objective
        self.parameters: Parameters = {}
        if objective is not None:
            self.parameters = keyed_parameters(self.nodes)
            learning_rate(self.optimizer)  # refused now, not after the first backward

    def on_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` on the run's device: itself when it is there already or the run has none."""
        if self.device is None or not isinstance(tensor, torch.Tensor):
            return tensor
        return tensor.to(self.device)

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        inputs = self.on_device(inputs)
        for node in self.nodes.values():
            inputs = node(inputs)
        return inputs

    def train(self, mode: bool = True) -> None:
        for node in self.nodes.values():
            node.train(mode)

    def fit(self, data: tuple[torch.Tensor, torch.Tensor]) -> dict[str, Any]:
        """Local training: `epochs` passes over `data` in shuffled mini-batches."""
        inputs, targets = (self.on_device(tensor) for tensor in data)
        self.train(True)
        total, batches = 0.0, 0
        for _ in range(self.epochs):
            order = torch.randperm(len(inputs), generator=self._shuffle)
            for start in range(0, len(inputs), self.batch_size):
                batch = order[start : start + self.batch_size]
                self.optimizer.zero_grad()
                loss = self.loss(self(inputs[batch]), targets[batch])
                loss.backward()
                if self.objective is not None:
                    self._adjust()
                self.optimizer.step()
                total += float(loss.detach())
                batches += 1
        self.optimizer.zero_grad()
        return {"loss": total / max(batches, 1), "steps": batches}

    def _adjust(self) -> None:
        """The objective's turn between backward and step, on CPU copies when off CPU."""
        adjust_on_cpu(self.objective, self.parameters, learning_rate(self.optimizer))

    @torch.no_grad()
    def evaluate(self, data: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """The loss on `data`, in evaluation mode (BatchNorm uses its running statistics)."""
        inputs, targets = (self.on_device(tensor) for tensor in data)
        self.train(False)
        return self.loss(self(inputs), targets)

    def export(self) -> Export:
        return export(self.nodes)

    def load(
        self, state: Mapping[str, Mapping[str, torch.Tensor]], *, partial: bool = False
    ) -> None:
        load(self.nodes, state, partial=partial)


def _optimizer(
    parameters: list[nn.Parameter],
    factory: Callable[[list[nn.Parameter]], Optimizer] | None,
    lr: float | None,
    momentum: float | None,
    weight_decay: float | None,
) -> Optimizer:
    """soma's SGD from lr/momentum/weight_decay, or the factory's optimizer (never both)."""
    if factory is None:
        return SGD(
            parameters,
            lr=DEFAULT_LR if lr is None else lr,
            momentum=0.0 if momentum is None else momentum,
            weight_decay=0.0 if weight_decay is None else weight_decay,
        )
    given = {
        name: value
        for name, value in (("lr", lr), ("momentum", momentum), ("weight_decay", weight_decay))
        if value is not None
    }
    if given:
        raise TrainingError(
            f"TrainingRun was given optimizer= and also {', '.join(given)}: "
            "say them in the optimizer factory instead"
        )
    return factory(parameters)


def classified(
    nodes: Mapping[str, Any], data: tuple[torch.Tensor, torch.Tensor], *, device: Any = None
) -> dict[str, float]:
    """Accuracy and cross-entropy of a classifier's nodes on `(inputs, labels)`, in one
    batch, without gradients: how the built-in classification tasks evaluate, one way."""
    run = TrainingRun(nodes, loss=torch.nn.functional.cross_entropy, device=device)
    inputs, labels = (run.on_device(tensor) for tensor in data)
    run.train(False)
    with torch.no_grad():
        logits = run(inputs)
        loss = torch.nn.functional.cross_entropy(logits, labels)
    accuracy = (logits.argmax(dim=1) == labels).double().mean()
    return {"accuracy": float(accuracy), "loss": float(loss)}


# --- seeds, threads, and training alone ----------------------------------------------------------


@contextmanager
def training_threads(count: int) -> Iterator[None]:
    """Train on the run's `threads` torch threads (a run setting, part of its identity): on a
    CPU, how many threads split a matrix product decides the order of its sums, so the same
    client trained on 1 and on 4 threads gives other bits. Whatever the process was given (a
    job's Slurm CPUs, `--threads`, torch's own default of every core), its clients train on the
    run's count, and the process's own count is back afterwards."""
    before = torch.get_num_threads()
    if before != count:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def training_seed(seed: int, round: int, client: int) -> int:
    """One seed per (round, client), the same for the federated run and the alone baseline."""
    return (seed * 1_000_003 + round * 7_919 + client * 104_729) % (2**31)


def trained_alone(
    task: Any, nodes: Any, data: Any, *, rounds: int, seed: int, client: int
) -> Iterator[tuple[int, Any]]:
    """A baseline's training, the same in every mode: `data` trained alone from the run's
    start for as many rounds of local training as the federation, round r's seeded as client
    k's training of round r (`training_seed`), so that a client alone is seed for seed its
    federated self without the others. Yields each round and the task's metrics, the nodes
    trained through that round. The workflow's `alone` and `centralized` jobs and the digits
    task's baselines train through it."""
    for r in range(rounds):
        yield r, task.train(nodes, data, seed=training_seed(seed, r, client))
