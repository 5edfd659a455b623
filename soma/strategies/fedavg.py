"""FedAvg (McMahan et al. 2017): the clients' weights, averaged by their sizes. Streams.

The new global weights are `soma.fedavg` of the updates: one model in memory whatever the
number of clients, integer counts left as the first update's, no state. `previous` is not
used: FedAvg forgets where the round started.
"""

from __future__ import annotations

from collections.abc import Iterable

from soma.aggregate import fedavg
from soma.nodes import Export
from soma.strategies import State, Strategy, Update


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


def make() -> FedAvg:
    return FedAvg()
