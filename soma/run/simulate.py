"""A federated run simulated: every client of the run in one interpreter, for any task.

`soma simulate` and `soma.simulate(...)` run the very loop of `soma client` (soma.run.drive)
with every client hosted by this one process: the same client step, the same seeds
(soma.training.training_seed), the same meetings in a store, so its weights are bit-identical to
those of `soma client` (and of the workflow) for the same run. Without a store it uses a
temporary folder, removed at the end (`store_at`): on a RAM-backed folder when there is room,
and `scratch` whatever the run's durability, for nothing of it outlives the process.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from soma.config.options import typed
from soma.config.spec import RunSpec
from soma.config.stores import open_store
from soma.files import DURABLE, SCRATCH
from soma.run import checked
from soma.run.drive import Round, drive
from soma.timing import DEADLINE, LEASE, Timing
from soma.transfer import FULL

if TYPE_CHECKING:
    from soma.store import Store

LOG = logging.getLogger("soma.simulate")

# A simulation's federated evaluation, unless told otherwise: at most this many clients a
# round evaluate its average on their own data (drawn from the seed and the round, as any
# `evaluate_participation`), so that with thousands of clients a round evaluating stays a
# small part of it training (issue 34); `soma client` and the workflow evaluate the sample.
EVALUATED = 100


def evaluated_by_default(
    given: int | float | None, clients: int, participation: int | float | None
) -> int | float | None:
    """`given`, else the round's sample (None) up to EVALUATED clients, else EVALUATED."""
    from soma.config.participation import ParticipationError, sample_size

    if given is not None:
        return given
    try:
        sampled = sample_size(participation, clients)
    except ParticipationError:  # refused, naming the key, by the run's check
        return None
    return None if sampled <= EVALUATED else EVALUATED


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
    drop_unstarted: bool = False,
    secure_aggregation: int | None = None,
    tree: int | None = None,
    personal: tuple[str, ...] | list[str] = (),
    evaluate_participation: int | float | None = None,
    tracking: str | None = None,
    roster: str | Path | None = None,
    keys: str | Path | None = None,
    averagers: tuple[int, ...] | list[int] | None = None,
    charter: str | None = None,
    verify_averages: str | None = None,
    run: str = "simulation",
    store: str | Path | None = None,
    durability: str = DURABLE,
    threads: int = 1,
    deadline: float | None = DEADLINE,
    lease: float = LEASE,
    transfer: str = FULL,
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
        drop_unstarted=drop_unstarted,
        secure=secure_aggregation,
        tree=tree,
        personal=tuple(personal),
        roster=None if roster is None else str(roster),
        keys=None if keys is None else str(keys),
        averagers=None if averagers is None else tuple(averagers),
        charter=charter,
        verify_averages=verify_averages,
        mine=tuple(range(clients)) if isinstance(clients, int) else None,
        durability=durability,
        threads=threads,
        given="library",
        evaluate_participation=evaluated_by_default(evaluate_participation, clients, participation),
        tracking=None if tracking is None else str(tracking),
        timing=Timing(deadline=deadline, lease=lease),
        transfer=transfer,
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
    with store_at(store, spec, task=task) as kept:
        driven = drive(spec, kept, task, strategy, after=after)
        evaluation = task.evaluate(driven.nodes) if has_central(task) else None
        return Simulated(driven.rounds, driven.weights, evaluation, driven.nodes)


# A RAM-backed folder: a temporary store there costs no disk write, and dropping it costs
# no more than freeing its pages (on a disk, removing a run's thousands of files took a third
# of a small simulation's time).
RAM = Path("/dev/shm")
# Bytes a contribution leaves in a store beside its weights: records, names, evaluations,
# each file taking at least a page (about 18 files a contribution).
PER_CONTRIBUTION = 80_000
# A cgroup limit this high is none (cgroup v1 says so with 2**63 less a page).
UNLIMITED = 1 << 60


@contextmanager
def store_at(path: str | Path | None, spec: RunSpec, *, task: Any = None) -> Iterator[Store]:
    """The store at `path`, opened with `spec`'s durability (RunSpec.store); or (None) one in
    a temporary folder nobody else sees, removed at the end, also when the run fails. That
    one is `scratch` whatever `spec` says: nothing of it outlives the process, so an fsync
    would buy nothing. It goes where `temporary_parent` says, sized by `task`'s nodes (None:
    as if they were small); a run that ends well says so, and where the model went (nowhere:
    `--store` keeps it), as `soma simulate`'s last line on stderr."""
    if path is not None:
        yield spec.store(path)
        return
    parent = temporary_parent(needed(spec, task))
    with tempfile.TemporaryDirectory(prefix="soma-simulate-", dir=parent) as folder:
        yield open_store(folder, SCRATCH, spec.named("durability"), spec.refused)
    LOG.info(
        "no store given: run %r was kept in a temporary store, now removed, and its model with "
        "it; give --store DIR to keep it (then soma export --store DIR --run %s -o model."
        "safetensors)",
        spec.run,
        spec.run,
    )


def needed(spec: RunSpec, task: Any) -> int:
    """Bytes a whole run may leave in its store, generously: every round's contributions and
    average (and as much again for a strategy's state), each with its records; the task's
    nodes at the run's seed are made once to weigh them."""
    weights = 0
    for node in (task.nodes(spec.seed) if task is not None else {}).values():
        if callable(getattr(node, "state_dict", None)):  # the ducks soma.nodes.export takes
            tensors = list(node.state_dict().values())
        else:
            tensors = list(node.parameters()) if callable(getattr(node, "parameters", None)) else []
        weights += sum(t.numel() * t.element_size() for t in tensors if hasattr(t, "numel"))
    return spec.rounds * (spec.clients + 4) * (weights + PER_CONTRIBUTION)


def temporary_parent(needed: int) -> str | None:
    """Where a temporary store goes: `$TMPDIR` when it is set (the user's, or the cluster's,
    choice of where temporary files belong); else `RAM` (/dev/shm) when it is a folder
    this process may write with room for `needed` bytes twice over (its free space, the
    memory available, and this process's cgroup's memory limit: pages of a RAM-backed folder
    count against all three); else None, the system's temporary folder."""
    if os.environ.get("TMPDIR"):
        return None
    if not (RAM.is_dir() and os.access(RAM, os.W_OK | os.X_OK)):
        return None
    try:
        found = os.statvfs(RAM)
    except OSError:
        return None
    room = min(found.f_bavail * found.f_frsize, _memory_available())
    return str(RAM) if 2 * needed <= room else None


def _memory_available() -> int:
    """Bytes of memory this process may still take: the least of the machine's available
    memory and the room under each memory limit of its cgroup and its parents (v2, or v1's
    memory controller, as Slurm sets them); unknown ones count as unlimited."""
    room = UNLIMITED
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                room = min(room, int(line.split()[1]) * 1024)
        groups = Path("/proc/self/cgroup").read_text().splitlines()
    except (OSError, ValueError, IndexError):
        return room
    for line in groups:
        _, controllers, where = line.split(":", 2)
        if controllers == "":
            root, limit, usage = Path("/sys/fs/cgroup"), "memory.max", "memory.current"
        elif "memory" in controllers.split(","):
            root = Path("/sys/fs/cgroup/memory")
            limit, usage = "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            continue
        group = root / where.lstrip("/")
        for level in (group, *group.parents):
            try:
                text = (level / limit).read_text().strip()
                if text != "max" and int(text) < UNLIMITED:
                    room = min(room, int(text) - int((level / usage).read_text()))
            except (OSError, ValueError):
                pass
            if level == root:
                break
    return room
