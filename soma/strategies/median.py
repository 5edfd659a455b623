"""Coordinate-wise median (Yin et al. 2018): each number of the model is the clients' median.

Robust where FedAvg is not: one client sending garbage (scaled by -100, or NaN) moves a
mean as far as it likes, and a median only by one rank per coordinate while the honest
clients are the majority: in each coordinate the median becomes a neighbouring honest value
(with n honest clients and one attacker, the middle of n + 1 values instead of n). That is
not nothing when honest clients disagree widely: with 10 clients holding two digits each
(soma.tasks.digits), one x10 sign-flipper costs the median about 12 points of accuracy at
round 20. Bucketing (option `bucket`, below) is the answer for such non-IID clients.

Option `bucket` (default 1, none): s clients per bucket; the median is then taken over the
ceil(n / s) unweighted bucket means, shuffled by the run's seed and the round (see
soma.strategies._buckets).

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
from soma.strategies._buckets import Bucketing, bucket_size, means
from soma.strategies._columns import coordinatewise, gather, sorted_mean


def median(stacked: torch.Tensor) -> torch.Tensor:
    """Per column of an (N, c) block, numpy's median: the middle value, or the mean of the
    two middle ones (the mean of what is left once (N - 1) // 2 are dropped on each side)."""
    return sorted_mean(stacked, (stacked.shape[0] - 1) // 2)


class Median(Bucketing, Strategy):
    name = "median"

    def __init__(self, bucket: int = 1) -> None:
        self.bucket = bucket

    def aggregate(
        self, previous: Export, updates: Iterable[Update], state: State | None, *, clients: int
    ) -> tuple[Export, State | None]:
        rows, buckets = self.bucketed(gather(updates))
        if buckets is None:
            return coordinatewise(rows, median), None
        return coordinatewise(rows, lambda stacked: median(means(stacked, buckets))), None


def make(*, bucket: int = 1) -> Median:
    """The coordinate-wise median (robust, unweighted).

    Options (the config's `strategy_options.median`; `--strategy-option KEY=VALUE`
    on `soma client` and `soma simulate`), each checked here and refused naming it:

    - `bucket` (1): s clients a bucket: the rule works on the means of buckets of s clients,
      shuffled by the run's seed and the round, which helps when the clients' data differ.
    """
    return Median(bucket_size("median", bucket))
