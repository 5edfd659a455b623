"""Coordinate-wise trimmed mean (Yin et al. 2018): per number, drop the extremes, mean the rest.

Option `beta` in [0, 0.5), default 0.2 (as Flower's FedTrimmedAvg): of n clients, the
floor(beta * n) smallest and as many largest values of each coordinate are dropped and the
rest averaged. beta is read as the decimal that was written (0.29 of 100 clients trims 29,
where 0.29 * 100 in binary floats is 28.999999999999996). With fewer than 1 / beta clients
nothing is trimmed and it is the plain mean; beta = 0 is the plain mean on purpose. Since
beta < 0.5, at least one value always remains once there is a client.

Option `bucket` (default 1, none): s clients per bucket; the trimmed mean is then taken over
the ceil(n / s) unweighted bucket means (beta trims a share of the buckets), shuffled by
the run's seed and the round (see soma.strategies._buckets).

- Unweighted: the clients' sizes are ignored (a Byzantine client can claim any size).
- NaN sorts above +inf: once anything is trimmed, it is one more extreme to drop.
- Counts (integer and bool keys) are the first update's, as in FedAvg. No state;
  `previous` is not used.

Not streaming: it holds all N updates (`list(updates)`: each is file-backed lazy mmaps from
the store, so N models of page cache that the kernel can take back) and works key by key,
each key in blocks of at most about `soma.strategies._columns.BLOCK` numbers across the N
clients. Anonymous memory is the output model plus one block and its sort (about 64 MB),
whatever N and however large the largest key (see soma.strategies._columns).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from fractions import Fraction
from functools import partial

from soma.nodes import Export
from soma.strategies import Arrival, State, Strategy, StrategyError, Update
from soma.strategies._buckets import Bucketing, bucket_size, means
from soma.strategies._columns import coordinatewise, gather, sorted_mean


def trimmed(n: int, beta: float) -> int:
    """How many values are dropped on each side of a coordinate of n clients."""
    return math.floor(Fraction(str(beta)) * n)


def check_count(n: int, beta: float) -> None:
    """Refuse a round of which nothing would remain once trimmed."""
    k = trimmed(n, beta)
    if n - 2 * k < 1:
        raise StrategyError(
            f"trimmed_mean with beta={beta} and n={n} clients: trimming {k} on each side "
            "leaves nothing to average"
        )


def _beta(beta: object) -> float:
    if isinstance(beta, bool) or not isinstance(beta, numbers.Real):
        raise StrategyError(f"trimmed_mean: beta={beta!r} is not a number in [0, 0.5)")
    value = float(beta)
    if not 0 <= value < 0.5:  # also refuses NaN
        raise StrategyError(
            f"trimmed_mean: beta={beta!r} is outside [0, 0.5): it is the share trimmed on "
            "each side, and half of each side leaves nothing"
        )
    return value


class TrimmedMean(Bucketing, Strategy):
    name = "trimmed_mean"

    def __init__(self, beta: float, bucket: int = 1) -> None:
        self.beta, self.bucket = beta, bucket

    def check(self, arrivals: Sequence[Arrival], *, clients: int) -> None:
        check_count(self.voters(len(arrivals)), self.beta)

    def aggregate(
        self, previous: Export, updates: Iterable[Update], state: State | None, *, clients: int
    ) -> tuple[Export, State | None]:
        rows = list(updates)
        voters = self.voters(len(rows))
        check_count(voters, self.beta)
        rows, buckets = self.bucketed(gather(rows))
        reduce = partial(sorted_mean, drop=trimmed(voters, self.beta))
        if buckets is None:
            return coordinatewise(rows, reduce), None
        return coordinatewise(rows, lambda stacked: reduce(means(stacked, buckets))), None


def make(*, beta: float = 0.2, bucket: int = 1) -> TrimmedMean:
    """The coordinate-wise mean without the `beta` fraction at each end (robust, unweighted).

    Options (the config's `strategy_options.trimmed_mean`; `--strategy-option KEY=VALUE`
    on `soma client` and `soma simulate`), each checked here and refused naming it:

    - `beta` (0.2): the fraction trimmed at each end, in [0, 0.5).
    - `bucket` (1): s clients a bucket: the rule works on the means of buckets of s clients,
      shuffled by the run's seed and the round, which helps when the clients' data differ.
    """
    return TrimmedMean(_beta(beta), bucket_size("trimmed_mean", bucket))
