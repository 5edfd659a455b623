"""Clients of an asynchronous run, each at its own pace: `soma client` (every hosted client
of a process, in turn) and the simulated clock (soma.asynchronous.clock) both train through
`train_from` and contribute through `soma.asynchronous.versions`, so a client's update is the
same bits whichever drives it (its seed is the run's, the version it started from, its index).

A process loops: make every version the pending updates allow; train each hosted client
whose last start is older than the latest version, from the latest; contribute; until the
run has `rounds` versions (the stop), or no new version came for the deadline, or Slurm
signals the job before its time limit (soma.slurm.time_limit: it stops there, leaving nothing
half-written, and the same command started again goes on from the latest version).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from soma.asynchronous import signed
from soma.asynchronous.versions import TooStale, VersionError, Versions
from soma.config.spec import RunSpec
from soma.nodes import Export, export, load
from soma.round.signing import holds
from soma.run.step import Hosted, task_code
from soma.slurm.time_limit import raised_at_time_limit, stopped_reason
from soma.store import Store
from soma.strategies import train_locally
from soma.tasks import Context
from soma.training import training_seed, training_threads

LOG = logging.getLogger("soma.client")


def begin(spec: RunSpec, store: Store, task: Any) -> tuple[Versions, Any, list[Hosted]]:
    """The run's versions (version 0 published if it was not), the task's nodes and this
    process's hosted clients (`spec.mine`)."""
    settings = spec.buffered()
    if settings is None:
        raise VersionError(f"run {spec.run!r} is not asynchronous (no `asynchronous` settings)")
    signing, mine = spec.signing, tuple(spec.mine or ())
    for k in mine:  # a hosted client whose key this process lacks: refused before any write
        holds(signing, k)
    spec.check_charter(store)  # another roster (or charter) than the run's: refused now
    versions = Versions(store, spec.run, settings, spec.rounds, signing, mine)  # none past rounds
    nodes = task.nodes(spec.seed)
    timing = spec.timing
    versions.begin(store.put_value(export(nodes)), deadline=timing.deadline, backoff=timing.backoff)
    hosted = []
    for k in spec.mine or ():
        data = task.shard(k, spec.clients)
        hosted.append(Hosted(k, data, task.size(data)))
    return versions, nodes, hosted


def train_from(
    spec: RunSpec, versions: Versions, task: Any, strategy: Any, nodes: Any, hosted: Hosted, v: int
) -> tuple[Any, Export]:
    """Client `hosted` trained from version v: its metrics and trained weights. Its seed and
    context are those of round v of a synchronous run, so that with every client starting
    every version together the run trains the synchronous run's bits."""
    found = versions.record(v)
    assert found is not None
    load(nodes, versions.store.recall_digest(found[1]["weights"]))
    seed = training_seed(spec.seed, v, hosted.index)
    context = Context(round=v, rounds=spec.rounds, client=hosted.index, clients=spec.clients)
    with task_code(), training_threads(spec.threads):  # the run's (soma.training)
        metrics, _, _ = train_locally(
            strategy, task, nodes, hosted.data, seed=seed, state=None, mine=None, context=context
        )
    return metrics, export(nodes)


@dataclass
class Contributed:
    """One update this process contributed (or had refused as too stale: `refused`)."""

    client: int
    start: int
    metrics: Any
    name: str | None
    refused: str | None = None


@dataclass
class Ran:
    """What a process's asynchronous run came to: its updates and the latest version."""

    versions: Versions
    nodes: Any
    hosted: list[Hosted]
    contributed: list[Contributed] = field(default_factory=list)
    latest: int = 0


def run_clients(
    spec: RunSpec,
    store: Store,
    task: Any,
    strategy: Any,
    *,
    after: Callable[[Contributed, Ran], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Ran:
    """Every hosted client at its own pace until the run has `spec.rounds` versions (see the
    module); `after(contributed, ran)` once each update is contributed or refused. Slurm's
    signal before the job's time limit raises TimeLimit wherever the loop is."""
    with raised_at_time_limit(stopped_reason(spec.run)):
        return _run_clients(spec, store, task, strategy, after=after, sleep=sleep)


def _run_clients(
    spec: RunSpec,
    store: Store,
    task: Any,
    strategy: Any,
    *,
    after: Callable[[Contributed, Ran], None] | None,
    sleep: Callable[[float], None],
) -> Ran:
    versions, nodes, hosted = begin(spec, store, task)
    timing = spec.timing
    ran = Ran(versions, nodes, hosted)
    last = {h.index: -1 for h in hosted}
    waits = dict(deadline=timing.deadline, lease=timing.lease, backoff=timing.backoff)
    delays, since = timing.backoff.delays(), time.monotonic()
    while True:
        v = versions.advance(**waits)
        if v >= spec.rounds:
            break
        trained = False
        for h in hosted:
            v = versions.latest()
            if v >= spec.rounds or last[h.index] >= v:
                continue
            done = _one(spec, versions, task, strategy, nodes, h, v)
            if done.refused is None:
                last[h.index] = v
            ran.contributed.append(done)
            if after is not None:
                after(done, ran)
            versions.advance(**waits)
            trained = True
        if trained:
            delays, since = timing.backoff.delays(), time.monotonic()
            continue
        if timing.deadline is not None and time.monotonic() - since > timing.deadline:
            raise VersionError(
                f"asynchronous run {spec.run!r}: no version after {versions.latest()} for "
                f"{timing.deadline:g}s, and this process's clients all contributed from it: "
                f"fewer than {versions.settings.buffer} updates are pending; are the other "
                f"clients running?{_averagers(versions)}"
            )
        sleep(next(delays))
    ran.latest = versions.latest()
    load(nodes, store.recall_digest(versions.record(ran.latest)[1]["weights"]))
    return ran


def _averagers(versions: Versions) -> str:
    """What a deadline's refusal adds when this process cannot make a version itself."""
    if signed.may_make(versions.signing, versions.among):
        return ""
    chosen = versions.signing.averagers if versions.signing is not None else None
    return (
        f" (this process holds no key of the averagers {list(chosen or ())}: a process "
        "hosting one of them makes the versions; is one running?)"
    )


def _one(
    spec: RunSpec, versions: Versions, task: Any, strategy: Any, nodes: Any, h: Hosted, v: int
) -> Contributed:
    """Client `h` trained from version v and its update contributed (or refused as stale)."""
    metrics, trained = train_from(spec, versions, task, strategy, nodes, h, v)
    try:
        name = versions.contribute(h.index, v, trained, h.size)
    except TooStale as error:
        LOG.warning("%s", error)
        return Contributed(h.index, v, metrics, None, refused=str(error))
    return Contributed(h.index, v, metrics, name)
