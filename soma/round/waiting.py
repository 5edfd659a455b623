"""A process that waits says so: at intervals, whom it waits for and where they are.

Every wait of a run asks one `Waiting` at each of its polls (soma.round.once: a client or a
site waiting for the round's clients, or for an average another process claimed; the barriers
of secure aggregation, soma.secagg). It logs a line on the `soma.round.waiting` logger at INFO
(a workflow job's log file, `soma client`'s stderr) once the wait has lasted FIRST seconds,
then EVERY seconds later, the interval doubling up to CAP: at 5 s, 35 s, 95 s, 215 s, then
every two minutes. A wait shorter than FIRST says nothing: a round whose clients come
together logs no more than before.

Whom a line names is asked only when the line is due (naming them may read the store): the
clients missing from the round (by site, when the run has `sites`), or the holder of the
averaging by its record (its site, host, pid, Slurm job: soma.round.holders.describe). Where
the missing clients run as Slurm jobs of this process's job name (an array, one task a
client: soma.slurm.queue), the line says where each job is, from the queue asked at most once
a minute: `clients 1, 2 [client 2: Slurm job 123_2 PENDING (JobHeldUser), expected start
unknown]`; without Slurm, or when the queue cannot be asked, it is as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from soma.errors import SomaError
from soma.slurm import query
from soma.slurm.queue import Queue

LOG = logging.getLogger("soma.round.waiting")

FIRST = 5.0  # seconds of waiting before the first line
EVERY = 30.0  # seconds from the first line to the second; then doubling
CAP = 120.0  # the longest interval between two lines
QUEUE = Queue(query.queue)  # this process's view of Slurm's queue, asked once a minute at most


def _seconds(seconds: float) -> str:
    """`42 s`, `3 min 5 s`, `2 h 10 min`: how long a wait has lasted, for a human."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


class Waiting:
    """One wait's lines: `tick(whom)` at every poll logs one when it is due (see the module)."""

    def __init__(self, what: str) -> None:
        self.what = what  # e.g. "round 3 of run 'digits'"
        self.started = time.monotonic()
        self.due = self.started + FIRST
        self.interval = EVERY

    def tick(self, whom: Callable[..., str], *args: Any) -> None:
        """Say whom this process waits for, `whom(*args)`, when a line is due. A store that
        cannot tell whom (it failed to answer) is said as such: a line never ends a wait."""
        now = time.monotonic()
        if now < self.due:
            return
        self.due, self.interval = now + self.interval, min(self.interval * 2, CAP)
        try:
            said = whom(*args)
        except (SomaError, OSError) as error:
            said = f"whom the store cannot tell now ({error})"
        LOG.info("%s: waited %s so far for %s", self.what, _seconds(now - self.started), said)


def _spans(clients: Sequence[int]) -> str:
    """`0-4, 7, 9`: sorted clients, runs of three or more as a range."""
    ks, parts, i = sorted(clients), [], 0
    while i < len(ks):
        j = i
        while j + 1 < len(ks) and ks[j + 1] == ks[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{ks[i]}-{ks[j]}")
        else:
            parts.extend(str(k) for k in ks[i : j + 1])
        i = j + 1
    return ", ".join(parts)


def _listed(clients: Sequence[int]) -> str:
    return f"client{'s' if len(clients) > 1 else ''} {_spans(clients)}"


def clients(missing: Sequence[int], sites: Mapping[str, Sequence[int]] | None = None) -> str:
    """The clients awaited: `clients 2, 3`; with the run's sites (site -> its clients), where
    each is: `client 1 at site A, clients 2-5 at site B`; and, in brackets, where the queue
    has their Slurm jobs (see the module)."""
    if not missing:
        return "no client (every one came)"
    queued = QUEUE.where(missing)
    queued = f" [{queued}]" if queued else ""
    if not sites:
        return _listed(missing) + queued
    where = {k: site for site, ks in sites.items() for k in ks}
    by_site: dict[str | None, list[int]] = {}
    for k in sorted(missing):
        by_site.setdefault(where.get(k), []).append(k)
    listed = ", ".join(
        _listed(ks) + ("" if site is None else f" at site {site}") for site, ks in by_site.items()
    )
    return listed + queued
