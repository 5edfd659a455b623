"""FedAvg (McMahan et al. 2017): the clients' weights, averaged by their sizes. Streams.

The new global weights are `soma.fedavg` of the updates: one model in memory whatever the
number of clients, integer counts left as the first update's, no state. `previous` is not
used: FedAvg forgets where the round started.

Option `norm_bound` (default null, off): clip each update to that multiple of the round's
median update norm before the mean (soma.strategies._norm_bound); the strategy then needs the
round's start and cannot step from the mean alone (no tree, no secure aggregation).
"""

from __future__ import annotations

from collections.abc import Iterable

from soma.aggregate import fedavg
from soma.nodes import Export
from soma.strategies import State, Strategy, Update
from soma.strategies._norm_bound import bound_of, bounded


def weighted_mean(updates: Iterable[Update]) -> Export:
    """The size-weighted mean of the updates' weights (equal weights when sizes are None)."""
    return fedavg((u.weights, 1 if u.size is None else u.size) for u in updates)


class FedAvg(Strategy):
    def aggregate(
        self, previous: Export, updates: Iterable[Update], state: State | None, *, clients: int
    ) -> tuple[Export, State | None]:
        return weighted_mean(updates), None

    def from_mean(
        self, previous: Export, mean: Export, state: State | None, *, clients: int
    ) -> tuple[Export, State | None]:
        return mean, None


def make(*, norm_bound: float | None = None) -> Strategy:
    """The size-weighted mean (McMahan et al. 2017), the default strategy.

    Options (the config's `strategy_options.fedavg`; `--strategy-option KEY=VALUE`
    on `soma client` and `soma simulate`), each checked here and refused naming it:

    - `norm_bound` (null): clip each update to this many times the round's median update norm
      before the mean; needs every update, so no tree and no secure aggregation.
    """
    return bounded(FedAvg(), bound_of("fedavg", norm_bound))
