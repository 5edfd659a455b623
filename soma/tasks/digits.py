"""Handwritten digits: the workflow's default task (scikit-learn's bundled 8x8 digits, offline).

The 1797 images are split once into training and test sets (stratified, `split_seed`,
`test_fraction`) and scaled with statistics of the training set only (`scale`: `standard`,
per-pixel mean and standard deviation, or `unit`, /16). The training set is shared among the
clients by `soma.partition` (`partition`, `alpha`, `labels_per_client`, `partition_seed`); a
client's shard depends on (clients, those options) only, so every process computes the same
one. The model is named nodes: `softmax` is {"out": Linear(64, 10)}, `mlp` is
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

    python -m soma.tasks.digits --simulate --clients 10 --rounds 10

runs the federation in one process and prints it beside the two baselines (each client alone,
and all the data centralized, both for rounds x epochs epochs).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib.util
import json
import numbers
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from soma import partition as partitions
from soma.device import task_device
from soma.nodes import Export, export, load
from soma.run.participation import ParticipationError, quorum_size, sample_size
from soma.run.participation import sampled as participation_sample
from soma.strategies import (
    Arrival,
    Objective,
    State,
    Update,
    at_round,
    check_arrivals,
    check_strategy_state,
    check_task_takes_objective,
    load_strategy,
    train_locally,
)
from soma.tasks import TaskError
from soma.training import TrainingRun

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
        mean = train_x.mean(axis=0)
        std = np.maximum(train_x.std(axis=0), STD_FLOOR)
        train_x, test_x = (train_x - mean) / std, (test_x - mean) / std
    split = train_x, labels[train], test_x, labels[test]
    for array in split:
        array.setflags(write=False)
    return split


def _tensors(inputs: np.ndarray, labels: np.ndarray) -> Data:
    return (
        torch.tensor(inputs, dtype=torch.float32),
        torch.tensor(labels, dtype=torch.int64),
    )


def _integer(name: str, value: object, *, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise TaskError(f"digits option {name} must be an integer >= {low}, not {value!r}")


def _number(name: str, value: object, *, low: float, high: float, closed: str) -> None:
    """A real number in an interval: closed is '[)', '()', '[]' or '(]'."""
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real)
    if ok:
        v = float(value)
        ok = np.isfinite(v) and (v >= low if closed[0] == "[" else v > low)
        ok = ok and (v <= high if closed[1] == "]" else v < high)
    if not ok:
        raise TaskError(
            f"digits option {name} must be a number in {closed[0]}{low}, {high}{closed[1]}, "
            f"not {value!r}"
        )


# The options make() takes, as a literal: soma.tasks.declared_options reads it from this file
# without running it (no torch), so that the Snakefile refuses a misspelt option at parse time.
# tests/test_checks.py holds it to DigitsTask's fields.
OPTIONS = (
    "partition",
    "alpha",
    "labels_per_client",
    "model",
    "hidden",
    "lr",
    "momentum",
    "epochs",
    "batch_size",
    "split_seed",
    "partition_seed",
    "test_fraction",
    "scale",
    "device",
)


@dataclass
class DigitsTask:
    partition: str = "labels_per_client"
    alpha: float = 0.5
    labels_per_client: int = 2
    model: str = "softmax"
    hidden: int = 32
    lr: float = 0.1
    momentum: float = 0.9
    epochs: int = 2
    batch_size: int = 16
    split_seed: int = 0
    partition_seed: int = 0
    test_fraction: float = 0.25
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
            )
        return self._shards[clients][client]

    def shard(self, client: int, clients: int) -> Data:
        rows = torch.as_tensor(self.indices(client, clients))
        return self._train[0][rows], self._train[1][rows]

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
        run = TrainingRun(nodes, loss=nn.functional.cross_entropy, device=self._device)
        inputs, labels = (run.on_device(tensor) for tensor in self._test)
        run.train(False)
        with torch.no_grad():
            logits = run(inputs)
            loss = nn.functional.cross_entropy(logits, labels)
        accuracy = (logits.argmax(dim=1) == labels).double().mean()
        return {"accuracy": float(accuracy), "loss": float(loss)}


def make(**options) -> DigitsTask:
    return DigitsTask(**options)


# -- in-process simulation: the federation beside its two baselines ----------------------

ATTACKS = ("scale", "sign_flip")
Attack = tuple[str, float]


def check_attack(attack: object) -> Attack | None:
    """None, or `(kind, factor)` with kind in ATTACKS and a finite real factor; refused by name."""
    if attack is None:
        return None
    ok = isinstance(attack, (tuple, list)) and len(attack) == 2 and attack[0] in ATTACKS
    factor = attack[1] if ok else None
    ok = ok and not isinstance(factor, bool) and isinstance(factor, numbers.Real)
    if not ok or not np.isfinite(float(factor)):
        raise TaskError(
            f"attack must be None or (kind, factor) with kind one of {', '.join(ATTACKS)} "
            f"and a finite number as factor, not {attack!r}"
        )
    return str(attack[0]), float(factor)


def attacked(weights: Export, attack: Attack) -> Export:
    """What a Byzantine client sends instead of what it trained: every float times `factor`
    (`scale`) or times `-factor` (`sign_flip`). Integer and bool counts are sent as they are:
    the robust strategies leave counts to the first update anyway, so garbage there would
    test nothing. A new export; `weights` is left alone."""
    kind, factor = attack
    times = factor if kind == "scale" else -factor
    with torch.no_grad():
        return {
            node_id: {
                key: tensor * times
                if tensor.dtype.is_floating_point or tensor.dtype.is_complex
                else tensor.clone()
                for key, tensor in keys.items()
            }
            for node_id, keys in weights.items()
        }


def centralized(task: DigitsTask, rounds: int, *, seed: int = 0) -> float:
    """Test accuracy of the federation's start trained on all the training data in one place
    for rounds x epochs epochs (as many example-gradients as the whole federation's)."""
    longer = dataclasses.replace(task, epochs=task.epochs * rounds)
    nodes = task.nodes(seed)
    longer.train(nodes, task.everything(), seed=seed * 1_000_003 + 999)
    return longer.evaluate(nodes)["accuracy"]


Dropouts = Callable[[int, list[int]], Iterable[int]]


def drop_one_per_round(round_index: int, sampled: list[int]) -> list[int]:
    """One sampled client fails every round: the one at `round_index % len(sampled)` of the
    sampled list, so that over the rounds every client is lost in turn (`--drop-one-per-round`).
    """
    return [sampled[round_index % len(sampled)]]


def take_part(
    seed: int,
    round_index: int,
    clients: int,
    participation: object,
    dropouts: Dropouts | None,
    quorum: object,
) -> list[int]:
    """Who trains in round `round_index` (0-based, as the workflow counts): the sampled
    clients that did not fail, sorted; refused when fewer than the quorum are left.

    The sample is `soma.run.participation.sampled`'s, so the simulation draws exactly the clients
    the distributed run would. A dropout that names a client not sampled this round is
    refused: it would be a bug in the caller's failure model, silently ignored otherwise.
    """
    sampled = participation_sample(seed, round_index, clients, participation)
    failed: set[int] = set()
    if dropouts is not None:
        for client in dropouts(round_index, list(sampled)):
            ok = not isinstance(client, bool) and isinstance(client, numbers.Integral)
            if not ok or client not in sampled:
                raise ParticipationError(
                    f"round {round_index}: dropouts named client {client!r}, which is not one "
                    f"of the round's sampled clients {sampled}"
                )
            failed.add(int(client))
    came = [k for k in sampled if k not in failed]
    needed = quorum_size(quorum, len(sampled))
    if len(came) < needed:
        missing = [k for k in sampled if k in failed]
        raise ParticipationError(
            f"round {round_index} (0-based) is below its quorum: {len(came)} of the "
            f"{len(sampled)} sampled clients came, {needed} must; missing: clients {missing}"
        )
    return came


def simulate(
    task: DigitsTask,
    clients: int,
    rounds: int,
    *,
    seed: int = 0,
    every: int = 1,
    baselines: bool = True,
    strategy: str = "fedavg",
    strategy_options: Mapping[str, object] | None = None,
    attack: Attack | None = None,
    participation: object = None,
    dropouts: Dropouts | None = None,
    quorum: object = None,
) -> dict[str, object]:
    """`strategy` for `rounds` rounds in one process, and (optionally) alone and centralized.

    Each round goes through the strategy seam as the distributed round does (see
    soma.workflow.train and soma.round): every client loads the global weights, trains with
    the strategy's objective (FedProx's proximal term, SCAFFOLD's correction) if it has one,
    and keeps its own state in memory (SCAFFOLD's c_i); the strategy checks the arrivals and
    aggregates the updates, streamed one at a time in client order, into the next global
    weights and its server state. With `fedavg` this is `soma.fedavg` of the clients'
    exports weighted by their sizes, bit for bit as before the seam.

    Round r's client k trains with seed `seed * 1_000_003 + r * 1000 + k` (r from 1). The
    strategy aggregates bound to round r - 1 (0-based, as the workflow counts) and `seed`
    (`soma.strategies.at_round`: bucketing's shuffle, FedAdam's bias correction).
    `attack` makes client 0 Byzantine: from round 1 it sends `attacked(trained, attack)`
    instead of its trained weights (its own state and extra are left honest) whenever it
    takes part.

    Partial participation, as the distributed run has it (see `take_part`): round r takes
    `soma.run.participation.sampled(seed, r - 1, clients, participation)`, the round's 0-based
    index being the workflow's, so both draw the same clients; `dropouts(r - 1, sampled)`
    names those that fail the round, and the round is refused (ParticipationError naming it
    and the missing) when fewer than `quorum_size(quorum, len(sampled))` remain. Only those
    who came train and are aggregated, weighed by their own sizes; the strategy is still
    told the run's `clients` (SCAFFOLD's N). A client that sits a round out keeps nothing
    from it: when next sampled it loads the global weights of that moment, and its own
    strategy state (SCAFFOLD's c_i) is the one from its last participation. With
    participation None and no dropouts every client trains every round, bit for bit as
    before. The result's `participants` lists who took part in each round. Alone: each
    client trains from the same start for rounds x epochs epochs on its shard; the mean test
    accuracy over clients is reported. Centralized: see `centralized`. The result also holds
    the final global weights (`weights`), for comparisons bit for bit.
    """
    rule = load_strategy(strategy, strategy_options)
    check_task_takes_objective(strategy, rule, task)
    attack = check_attack(attack)
    # Refused before any training: a participation or quorum that no round could meet.
    quorum_size(quorum, sample_size(participation, clients))
    if dropouts is not None and not callable(dropouts):
        raise ParticipationError(
            f"dropouts must be None or a callable (round_index, sampled) -> clients that fail, "
            f"not {dropouts!r}"
        )
    shards = [task.shard(k, clients) for k in range(clients)]
    sizes = [task.size(s) for s in shards]
    start = export(task.nodes(seed))
    nodes = task.nodes(seed)
    weights: Export = start
    state: State | None = None
    own: list[State | None] = [None] * clients
    history: list[dict[str, float]] = []
    participants: list[list[int]] = []
    seconds = aggregating = 0.0
    for r in range(1, rounds + 1):
        came = take_part(seed, r - 1, clients, participation, dropouts, quorum)
        participants.append(came)
        sent: list[Export] = []
        extras: list[Export | None] = []
        for k in came:
            load(nodes, weights)
            step_seed = seed * 1_000_003 + r * 1000 + k
            tic = time.perf_counter()
            _, extra, own[k] = train_locally(
                rule, task, nodes, shards[k], seed=step_seed, state=state, mine=own[k]
            )
            trained = export(nodes)
            seconds += time.perf_counter() - tic
            sent.append(attacked(trained, attack) if attack and k == 0 else trained)
            extras.append(extra)
        arrivals = [
            Arrival(k, float(sizes[k]), extra is not None)
            for k, extra in zip(came, extras, strict=True)
        ]
        check_arrivals(rule, arrivals, clients=clients)
        check_strategy_state(rule, lambda kept=state: kept, clients=clients)
        updates = (
            Update(k, float(sizes[k]), weights_k, extra)
            for k, weights_k, extra in zip(came, sent, extras, strict=True)
        )
        tic = time.perf_counter()
        bound = at_round(rule, round=r - 1, seed=seed)
        weights, state = bound.aggregate(weights, updates, state, clients=clients)
        aggregating += time.perf_counter() - tic
        if r % every == 0 or r == rounds:
            load(nodes, weights)
            history.append({"round": r, **task.evaluate(nodes)})
    trainings = sum(len(came) for came in participants)
    result: dict[str, object] = {
        "strategy": strategy,
        "strategy_options": dict(strategy_options or {}),
        "attack": attack,
        "participation": participation,
        "quorum": quorum,
        "participants": participants,
        "federated": history,
        "weights": weights,
        "train_call_seconds": seconds / max(trainings, 1),
        "aggregate_seconds": aggregating / rounds,
    }
    if baselines:
        longer = dataclasses.replace(task, epochs=task.epochs * rounds)
        alone = []
        for k, data in enumerate(shards):
            load(nodes, start)
            longer.train(nodes, data, seed=seed * 1_000_003 + k)
            alone.append(longer.evaluate(nodes)["accuracy"])
        result["alone"] = float(np.mean(alone))
        result["alone_each"] = alone
        result["centralized"] = centralized(task, rounds, seed=seed)
    return result


def _attack_argument(text: str) -> Attack:
    kind, _, factor = text.partition(":")
    try:
        return check_attack((kind, float(factor)))
    except (TaskError, ValueError) as error:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not KIND:FACTOR with KIND one of {', '.join(ATTACKS)}"
        ) from error


def _count_or_fraction(text: str) -> int | float:
    """A count ("5") or a fraction ("0.5"), kept apart by their spelling: 1 is one client,
    1.0 is all of them. Whether the number fits is soma.run.participation's to say."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a count (an integer) nor a fraction (a number in (0, 1])"
        ) from None


def _main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m soma.tasks.digits")
    parser.add_argument("--simulate", action="store_true", help="run the federation in one process")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--every", type=int, default=1, help="evaluate every this many rounds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--options", default="{}", help="task options as JSON")
    parser.add_argument("--strategy", default="fedavg", help="built-in name or import path")
    parser.add_argument("--strategy-options", default="{}", help="strategy options as JSON")
    parser.add_argument(
        "--attack",
        type=_attack_argument,
        help="client 0 sends garbage: scale:FACTOR (weights x FACTOR) or sign_flip:FACTOR "
        "(weights x -FACTOR)",
    )
    parser.add_argument(
        "--participation",
        type=_count_or_fraction,
        help="clients per round: a count (5) or a fraction (0.5); default everyone",
    )
    parser.add_argument(
        "--quorum",
        type=_count_or_fraction,
        help="of the sampled clients, how many must come: a count or a fraction; default all",
    )
    parser.add_argument(
        "--drop-one-per-round",
        action="store_true",
        help="one sampled client fails every round (the one at round %% len(sampled))",
    )
    parser.add_argument("--no-baselines", action="store_true")
    args = parser.parse_args(argv)
    if not args.simulate:
        parser.error("nothing to do: pass --simulate")
    torch.set_num_threads(1)
    task = make(**json.loads(args.options))
    partial = args.participation is not None or args.quorum is not None or args.drop_one_per_round
    tic = time.perf_counter()
    try:
        result = simulate(
            task,
            args.clients,
            args.rounds,
            seed=args.seed,
            every=args.every,
            baselines=not args.no_baselines,
            strategy=args.strategy,
            strategy_options=json.loads(args.strategy_options),
            attack=args.attack,
            participation=args.participation,
            dropouts=drop_one_per_round if args.drop_one_per_round else None,
            quorum=args.quorum,
        )
    except ParticipationError as error:
        parser.exit(1, f"{parser.prog}: error: {error}\n")
    print(f"task: {task}")
    options = json.dumps(result["strategy_options"])
    attack = "" if args.attack is None else "  attack: client 0 {} {:g}".format(*args.attack)
    print(f"strategy: {args.strategy} {options}{attack}")
    if partial:
        each = sample_size(args.participation, args.clients)
        lost = "one sampled client fails every round" if args.drop_one_per_round else "no dropouts"
        print(
            f"participation: {args.participation} ({each} of {args.clients} sampled per round), "
            f"quorum {args.quorum} ({quorum_size(args.quorum, each)} of {each}), {lost}"
        )
    took_part = {r: len(came) for r, came in enumerate(result["participants"], start=1)}
    for row in result["federated"]:
        line = f"round {row['round']:4d}  accuracy {row['accuracy']:.4f}  loss {row['loss']:.4f}"
        if partial:
            line += f"  took part {took_part[row['round']]}/{args.clients}"
        print(line)
    if "alone" in result:
        print(f"alone (mean over clients): {result['alone']:.4f}")
        print(f"centralized:               {result['centralized']:.4f}")
    print(f"one local training call: {1000 * result['train_call_seconds']:.1f} ms")
    print(f"one aggregation:         {1000 * result['aggregate_seconds']:.1f} ms")
    print(f"total: {time.perf_counter() - tic:.1f} s")


if __name__ == "__main__":
    _main()
