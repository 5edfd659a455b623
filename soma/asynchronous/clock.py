"""An asynchronous run on a simulated clock, in one process: when each client would finish,
not when this machine gets to it, decides the order of its updates.

Client k's n-th job waits `queue` (its first only: the scheduler's queue) and then takes
`speed_k * jitter_{k,n}` seconds, both drawn from the run's seed: `speed_k` log-normal with
`sigma` (how heavy the stragglers' tail is: a few clients several times slower than the
median, for the whole run), `jitter` log-normal with `jitter`, the queue log-normal around
`queue`. The same draws time a synchronous run (`round_seconds`: each round waits for its
slowest client), so the two are compared on one clock (benchmarks/asynchronous.py). Or the
jobs of a Slurm accounting trace time it (`read_trace`: their queue waits and run times).

Events run in time order (ties by client): a client starts from the latest version, and when
it finishes it trains from the version it started from (the bits do not depend on when the
training runs), contributes, makes every version the buffer allows, and starts again (from
the latest version; if that is the one it just trained from, it waits for the next, since it
would train the same bits again). The
run stops at `rounds` versions, past `until` simulated seconds, or once `target` is reached
(a metric of the task's central evaluation, higher is better unless it is a loss).
"""

from __future__ import annotations

import datetime
import heapq
import math
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from soma.asynchronous.clients import Contributed, begin, train_from
from soma.asynchronous.versions import TooStale
from soma.config.spec import RunSpec
from soma.errors import SomaError
from soma.nodes import load
from soma.store import Store


@dataclass(frozen=True)
class Clock:
    """How long each client's jobs take (see the module), drawn from `seed`."""

    seed: int = 0
    sigma: float = 1.0
    jitter: float = 0.25
    median: float = 1.0
    queue: float = 0.0

    def _draw(self, *key: object) -> random.Random:
        return random.Random("/".join(map(str, (self.seed, *key))))

    def speed(self, client: int) -> float:
        return self._draw("speed", client).lognormvariate(0.0, self.sigma)

    def duration(self, client: int, job: int) -> float:
        """Seconds client `client`'s `job`-th job trains (0: its first)."""
        jitter = self._draw("job", client, job).lognormvariate(0.0, self.jitter)
        return self.median * self.speed(client) * jitter

    def waited(self, client: int) -> float:
        """Seconds client `client`'s first job waits in the queue."""
        if self.queue <= 0:
            return 0.0
        return self._draw("queue", client).lognormvariate(math.log(self.queue), 1.0)

    def round_seconds(self, round: int, clients: int) -> float:
        """A synchronous round's seconds: its slowest client's (and the queue, round 0)."""
        return round_seconds(self, round, clients)


def round_seconds(clock: Clock | Trace, round: int, clients: int) -> float:
    """A synchronous round's seconds on `clock`: its slowest client's (and its queue, round 0)."""
    return max(
        (clock.waited(k) if round == 0 else 0.0) + clock.duration(k, round) for k in range(clients)
    )


class TraceError(SomaError, ValueError):
    """A Slurm accounting trace that gives no job's durations; names the file and the line."""


@dataclass(frozen=True)
class Trace:
    """Jobs' queue waits and run times read from a Slurm accounting trace (`read_trace`):
    client k's n-th job is the trace's job k + n * clients (cycling), its first job's wait
    the trace's job k's. The same trace times a synchronous run (`round_seconds`)."""

    jobs: tuple[tuple[float, float], ...]  # (seconds queued, seconds run), in the trace's order
    clients: int

    def duration(self, client: int, job: int) -> float:
        return self.jobs[(client + job * self.clients) % len(self.jobs)][1]

    def waited(self, client: int) -> float:
        return self.jobs[client % len(self.jobs)][0]

    def round_seconds(self, round: int, clients: int) -> float:
        return round_seconds(self, round, clients)


def read_trace(path: str | os.PathLike[str], clients: int) -> Trace:
    """The jobs of `sacct -X -P -n -o Submit,Start,End` (one job a line, `|` between times,
    ISO 8601): each one's queue wait (Start - Submit) and run time (End - Start). Jobs that
    never started or ended (Unknown, None) are skipped; a trace with none left is refused."""
    jobs = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            fields = line.strip().split("|")
            if not line.strip() or any(f in ("Unknown", "None", "") for f in fields):
                continue
            try:
                submit, start, end = (datetime.datetime.fromisoformat(f) for f in fields)
            except ValueError:
                raise TraceError(
                    f"{path}, line {number}: {line.strip()!r} is not Submit|Start|End "
                    "(sacct -X -P -n -o Submit,Start,End)"
                ) from None
            jobs.append(((start - submit).total_seconds(), (end - start).total_seconds()))
    if not jobs:
        raise TraceError(
            f"{path}: no job that started and ended (sacct -X -P -n -o Submit,Start,End)"
        )
    return Trace(tuple(jobs), clients)


def reached(metrics: dict[str, Any] | None, target: tuple[str, float] | None) -> bool:
    """Whether `metrics` reach `target` (name, value): at least it, or at most for a loss."""
    if target is None or not metrics or target[0] not in metrics:
        return False
    name, value = target
    return metrics[name] <= value if "loss" in name else metrics[name] >= value


@dataclass
class Timeline:
    """A simulated run: each version's simulated time, its staleness list and its metrics;
    the updates contributed or refused; why it stopped."""

    times: list[float] = field(default_factory=list)
    staleness: list[list[int]] = field(default_factory=list)
    metrics: list[Any] = field(default_factory=list)
    contributed: list[Contributed] = field(default_factory=list)
    stopped: str = ""
    nodes: Any = None


def simulate_clock(
    spec: RunSpec,
    store: Store,
    task: Any,
    strategy: Any,
    clock: Clock | Trace,
    *,
    until: float | None = None,
    target: tuple[str, float] | None = None,
    evaluate: Callable[[Any], Any] | None = None,
) -> Timeline:
    """Every client of `spec` (its `mine`) on the simulated clock (see the module)."""
    versions, nodes, hosted = begin(spec, store, task)
    by_index = {h.index: h for h in hosted}
    line = Timeline(nodes=nodes)

    def version_made(now: float) -> None:
        while len(line.times) <= versions.latest():
            v = len(line.times)
            record = versions.record(v)[1]
            load(nodes, store.recall_digest(record["weights"]))
            line.times.append(now)
            line.staleness.append([e["staleness"] for e in record["consumed"]])
            line.metrics.append(None if evaluate is None else evaluate(nodes))

    version_made(0.0)
    jobs = dict.fromkeys(by_index, 0)
    started: dict[int, int] = {}
    parked: list[int] = []  # clients that contributed from the latest version: until the next
    events: list[tuple[float, int, int]] = []  # (time, 0 start | 1 finish, client)
    for k in by_index if not reached(line.metrics[0], target) else ():  # reached at once
        heapq.heappush(events, (clock.waited(k), 0, k))
    if not events and target is not None:
        line.stopped = f"target {target[0]} {target[1]:g}"
    while events:
        now, kind, k = heapq.heappop(events)
        if until is not None and now > until:
            line.stopped = f"deadline {until:g}s"
            break
        if kind == 0:
            if started.get(k) == versions.latest():  # the same bits again: wait for a version
                parked.append(k)
                continue
            started[k] = versions.latest()
            heapq.heappush(events, (now + clock.duration(k, jobs[k]), 1, k))
            jobs[k] += 1
            continue
        v = started[k]
        metrics, trained = train_from(spec, versions, task, strategy, nodes, by_index[k], v)
        try:
            name = versions.contribute(k, v, trained, by_index[k].size)
            line.contributed.append(Contributed(k, v, metrics, name))
        except TooStale as error:
            line.contributed.append(Contributed(k, v, metrics, None, refused=str(error)))
        made = versions.latest() < versions.advance(deadline=0.0, lease=spec.timing.lease)
        version_made(now)
        if versions.latest() >= spec.rounds:
            line.stopped = f"{spec.rounds} versions"
            break
        if reached(line.metrics[-1], target):
            line.stopped = f"target {target[0]} {target[1]:g}"
            break
        heapq.heappush(events, (now, 0, k))
        for waiting in parked if made else ():
            heapq.heappush(events, (now, 0, waiting))
        parked = parked if not made else []
    load(nodes, store.recall_digest(versions.record(versions.latest())[1]["weights"]))
    return line
