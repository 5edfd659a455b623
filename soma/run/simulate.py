"""A federated run simulated: every client of the run in one interpreter, for any task.

`soma simulate` and `soma.simulate(...)` run the very loop of `soma client` (soma.run.drive)
with every client hosted by this one process: the same client step, the same seeds
(soma.training.training_seed), the same meetings in a store, so its weights are bit-identical to
those of `soma client` (and of the workflow) for the same run. Without a store it uses a
temporary folder, removed at the end.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from soma.config.options import typed
from soma.config.spec import RunSpec
from soma.files import DURABLE
from soma.run import checked
from soma.run.drive import Round, drive
from soma.timing import DEADLINE, LEASE, Timing

if TYPE_CHECKING:
    from soma.store import Store


@dataclass
class Simulated:
    """A simulated run: each round (its average's record and digest, each client's training
    metrics, its federated evaluation), the digest of the last average's weights, and their
    evaluation by the task (None: the task has only `evaluate_local`)."""

    rounds: list[Round]
    weights: str
    evaluation: Any
    nodes: Any


def simulate(
    task: str,
    *,
    clients: int,
    rounds: int,
    task_options: Mapping[str, Any] | None = None,
    strategy: str = "fedavg",
    strategy_options: Mapping[str, Any] | None = None,
    seed: int = 0,
    participation: int | float | None = None,
    quorum: int | float | None = None,
    secure_aggregation: int | None = None,
    tree: int | None = None,
    personal: tuple[str, ...] | list[str] = (),
    evaluate_participation: int | float | None = None,
    tracking: str | None = None,
    roster: str | Path | None = None,
    keys: str | Path | None = None,
    run: str = "simulation",
    store: str | Path | None = None,
    durability: str = DURABLE,
    deadline: float | None = DEADLINE,
    lease: float = LEASE,
    after: Callable[[Round, Any], None] | None = None,
) -> Simulated:
    """Run `rounds` rounds of `clients` clients of `task` in this interpreter (see the
    module). Options given as text read as everywhere else (soma.config.options); the run is
    checked whole (RunSpec.checked) before anything is written."""
    spec = RunSpec(
        run=run,
        task=task,
        clients=clients,
        rounds=rounds,
        task_options=typed(task_options),
        strategy=strategy,
        strategy_options=typed(strategy_options),
        seed=seed,
        participation=participation,
        quorum=quorum,
        secure=secure_aggregation,
        tree=tree,
        personal=tuple(personal),
        roster=None if roster is None else str(roster),
        keys=None if keys is None else str(keys),
        mine=tuple(range(clients)) if isinstance(clients, int) else None,
        durability=durability,
        given="library",
        evaluate_participation=evaluate_participation,
        tracking=None if tracking is None else str(tracking),
        timing=Timing(deadline=deadline, lease=lease),
    )
    return simulate_spec(spec, store, after=after)


def simulate_spec(
    spec: RunSpec,
    store: str | Path | None,
    *,
    after: Callable[[Round, Any], None] | None = None,
) -> Simulated:
    """`simulate` of a spec whose `mine` is every client."""
    from soma.run.evaluation import has_central

    task, strategy = checked.checked(spec)
    with store_at(store, spec) as kept:
        driven = drive(spec, kept, task, strategy, after=after)
        evaluation = task.evaluate(driven.nodes) if has_central(task) else None
        return Simulated(driven.rounds, driven.weights, evaluation, driven.nodes)


@contextmanager
def store_at(path: str | Path | None, spec: RunSpec) -> Iterator[Store]:
    """The store at `path`, or (None) one in a temporary folder, removed at the end; opened
    with `spec`'s durability (RunSpec.store)."""
    if path is not None:
        yield spec.store(path)
        return
    with tempfile.TemporaryDirectory(prefix="soma-simulate-") as folder:
        yield spec.store(folder)
