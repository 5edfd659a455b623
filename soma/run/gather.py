"""`soma.gather`: one process's part in a round, in one call, with the waits a user gives.

The round barrier of the design note: write mine, wait for all, one of us averages, all
leave with the mean. A driver: the user-facing defaults of a round's waits live here (from
soma.timing), and everything below it (soma.round) takes them as required arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from soma.nodes import Export
from soma.round import average
from soma.round.client import contribute
from soma.round.meeting import Meeting
from soma.round.once import POLL, Backoff
from soma.store import Store
from soma.timing import DEADLINE, LEASE


def gather(
    store: Store,
    export: Export,
    *,
    run: str,
    round: int,
    clients: int,
    mine: int,
    size: float | None = None,
    deadline: float | None = DEADLINE,
    backoff: Backoff = POLL,
    lease: float = LEASE,
    start: str | None = None,
    state: str | None = None,
    strategy: str = "fedavg",
    options: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
    expected: Sequence[int] | None = None,
    quorum: int | None = None,
    tree: int | None = None,
) -> Export:
    """The round barrier: write mine, wait for all, one of us averages, all leave with the mean.

    The same call on every client. A client arriving after the average exists finds it and
    does not wait; the only client of a round averages it itself. `start`, `state`,
    `strategy`, `options` and `config` say which run this is (see `Meeting`); a strategy
    that steps from the round's start (FedAdam, SCAFFOLD) needs `start`. `expected` is who
    takes part (None: everyone) and `quorum` how many must come for the round to be averaged
    without the rest once `deadline` has passed (None: all of them). `tree` is a fan-in:
    the round's mean is then built as a tree of partial means that every client helps with
    (soma.round.tree), for rounds of many clients. `deadline` and `lease` are the run's
    waits (soma.timing): on a bucket the averaging's claim comes with a lease of `lease` seconds.
    """
    meeting = Meeting(
        run,
        round,
        clients,
        start,
        state,
        strategy,
        dict(options or {}),
        dict(config or {}),
        None if expected is None else tuple(expected),
        quorum,
        tree,
    )
    contribute(store, meeting, export, mine=mine, size=size)
    digest = average.average_round(store, meeting, deadline=deadline, backoff=backoff, lease=lease)
    return average.weights_of_average(store, digest)
