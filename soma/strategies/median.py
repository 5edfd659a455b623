"""Coordinate-wise median (Yin et al. 2018): each number of the model is the clients' median.

Robust where FedAvg is not: one client sending garbage (scaled by -100, or NaN) moves a
mean as far as it likes, and a median not at all while the honest clients are the majority.

- Unweighted: the clients' sizes are ignored. A size-weighted median would hand the
  coordinate to whoever claims the most data, and a Byzantine client can claim anything.
- An even number of clients gives the mean of the two middle values, as `numpy.median`
  does; not `torch.median`, which returns the lower one and so leans towards the smaller
  side in every coordinate.
- NaN sorts above +inf: it counts as an extreme value, not as a poison.
- Counts (integer and bool keys) are the first update's, as in FedAvg. No state;
  `previous` is not used.

Not streaming: it holds all N updates (`list(updates)`: each is file-backed lazy mmaps from
the store, so N models of page cache that the kernel can take back) and works key by key,
each key in blocks of at most about `soma.strategies._columns.BLOCK` numbers across the N
clients. Anonymous memory is the output model plus one block and its sort (about 64 MB),
whatever N and however large the largest key (see soma.strategies._columns).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from soma.nodes import Export
from soma.strategies import State, Strategy, Update
from soma.strategies._columns import coordinatewise, gather, sorted_mean


def median(stacked: torch.Tensor) -> torch.Tensor:
    """Per column of an (N, c) block, numpy's median: the middle value, or the mean of the
    two middle ones (the mean of what is left once (N - 1) // 2 are dropped on each side)."""
    return sorted_mean(stacked, (stacked.shape[0] - 1) // 2)


class Median(Strategy):
    def aggregate(
        self, previous: Export, updates: Iterable[Update], state: State | None, *, clients: int
    ) -> tuple[Export, State | None]:
        return coordinatewise(gather(updates), median), None


def make() -> Median:
    return Median()
