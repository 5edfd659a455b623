"""Krum and multi-Krum (Blanchard et al. 2017): keep the clients that sit among their peers.

Options:
- `f` (default 1): how many Byzantine clients the round tolerates. Krum's guarantee needs
  n >= 2f + 3 clients, so a round with fewer is refused (`check`), naming n and f. The
  default tolerates one: Krum that tolerates none (f = 0) is a choice to make knowingly,
  and f = 1 only asks for 5 clients.
- `m` (default 1): how many clients are kept. m = 1 is Krum, m > 1 multi-Krum; m must be
  in [1, n - f], since keeping more than the n - f honest ones keeps a Byzantine one.

Option `bucket` (default 1, none): s clients per bucket. Krum then scores the ceil(n / s)
unweighted bucket means (shuffled by the run's seed and the round, see
soma.strategies._buckets) instead of the clients: n in the conditions above is the number of
buckets, f still the Byzantine clients (each spoils at most one bucket), m the buckets kept,
and the result is FedAvg of every client of the kept buckets, weighted by their sizes.

Each client's score is the sum of the squared L2 distances, over all float keys of the
whole export, to its n - f - 2 nearest other clients; the m lowest scores are kept (a tie
goes to the lower client id), and the result is FedAvg of the kept clients, weighted by
their sizes (`soma.strategies.fedavg.weighted_mean`). Sizes do not enter the scores: a
client cannot buy its way in by claiming more data, only weigh more once it is in.

- Counts (integer and bool keys) are those of the first kept update, as FedAvg of the kept
  ones gives: a client Krum rejected contributes nothing, not even its counts.
- A client sending NaN or inf is at distance NaN from everyone, and NaN sorts above every
  number, so it is never among anyone's nearest and its own score is never kept.
- No state; `previous` is not used.

Not streaming: it holds all N updates (`list(updates)`: each is file-backed lazy mmaps from
the store, so N models of page cache that the kernel can take back). The distances are
computed key by key, each key in blocks of at most about `soma.strategies._columns.BLOCK`
numbers across the N clients, widened to float64 and accumulated into an N x N float64
matrix: anonymous memory is one block in float64 and its differences (about 64 MB), then
the output model, whatever N (see soma.strategies._columns). The work is N (N - 1) / 2
differences of the whole model, then one weighted mean of the m kept.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence

import torch

from soma.arithmetic import row_sums_of_squares
from soma.nodes import Export
from soma.strategies import Arrival, State, Strategy, StrategyError, Update, floats
from soma.strategies._buckets import Bucketing, Groups, bucket_size, means
from soma.strategies._columns import blocks, gather
from soma.strategies.fedavg import weighted_mean


def check_count(n: int, f: int, m: int) -> None:
    """Refuse a round too small for Krum's guarantee, or one that cannot keep m clients."""
    if n < 2 * f + 3:
        raise StrategyError(
            f"krum with f={f} needs n >= 2f + 3 = {2 * f + 3} clients, and the round has "
            f"n={n}: lower f or add clients"
        )
    if not 1 <= m <= n - f:
        raise StrategyError(
            f"krum keeps m={m} clients, outside [1, n - f] = [1, {n - f}] for n={n} clients "
            f"and f={f}: keeping more than n - f may keep a Byzantine one"
        )


def distances(rows: Sequence[Update], buckets: Groups | None = None) -> torch.Tensor:
    """The N x N squared L2 distances between the clients' whole exports, in float64 and in
    a fixed order, the same on every machine (or between the means of the `buckets`, when
    given)."""
    n = len(rows) if buckets is None else len(buckets)
    upper = torch.zeros((n, n), dtype=torch.float64)
    with torch.no_grad():
        for node_id, key in floats(rows[0].weights):
            for _, stacked in blocks(rows, node_id, key, torch.float64):
                if buckets is not None:
                    stacked = means(stacked, buckets)
                for i in range(n - 1):
                    upper[i, i + 1 :] += row_sums_of_squares(stacked[i + 1 :] - stacked[i])
    return upper + upper.T


def scores(squared: torch.Tensor, f: int) -> list[float]:
    """Each client's sum of squared distances to its n - f - 2 nearest other clients."""
    n = squared.shape[0]
    out = []
    for i in range(n):
        others = torch.cat((squared[i, :i], squared[i, i + 1 :]))
        out.append(math.fsum(others.sort().values[: n - f - 2].tolist()))  # exact, any order
    return out


def chosen(scores: list[float], clients: list[int], m: int) -> list[int]:
    """The places of the m lowest scores (ties to the lower client id, NaN last), in order."""

    def rank(i: int) -> tuple[bool, float, int]:
        nan = math.isnan(scores[i])
        return nan, 0.0 if nan else scores[i], clients[i]

    return sorted(sorted(range(len(scores)), key=rank)[:m])


def _count(name: str, value: object, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise StrategyError(f"krum: {name}={value!r} is not a whole number")
    if value < least:
        raise StrategyError(f"krum: {name}={value!r} is below {least}")
    return int(value)


class Krum(Bucketing, Strategy):
    name = "krum"

    def __init__(self, f: int, m: int, bucket: int = 1) -> None:
        self.f, self.m, self.bucket = f, m, bucket

    def check(self, arrivals: Sequence[Arrival], *, clients: int) -> None:
        check_count(self.voters(len(arrivals)), self.f, self.m)

    def aggregate(
        self, previous: Export, updates: Iterable[Update], state: State | None, *, clients: int
    ) -> tuple[Export, State | None]:
        rows = list(updates)
        check_count(self.voters(len(rows)), self.f, self.m)
        rows, buckets = self.bucketed(gather(rows))
        if buckets is None:
            kept = chosen(scores(distances(rows), self.f), [r.client for r in rows], self.m)
            return weighted_mean(rows[i] for i in kept), None
        places = list(range(len(buckets)))  # ties to the lower bucket
        kept = chosen(scores(distances(rows, buckets), self.f), places, self.m)
        members = sorted(i for b in kept for i in buckets[b])
        return weighted_mean(rows[i] for i in members), None


def make(*, f: int = 1, m: int = 1, bucket: int = 1) -> Krum:
    """Krum and multi-Krum (Blanchard et al. 2017): the clients closest to their neighbours.

    Options (the config's `strategy_options.krum`; `--strategy-option KEY=VALUE`
    on `soma client` and `soma simulate`), each checked here and refused naming it:

    - `f` (1): the Byzantine clients a round tolerates; a round needs n ≥ 2f + 3 clients.
    - `m` (1): the clients kept and averaged by size, in [1, n − f]; 1 is Krum, more multi-Krum.
    - `bucket` (1): s clients a bucket: the rule works on the means of buckets of s clients,
      shuffled by the run's seed and the round, which helps when the clients' data differ.
    """
    return Krum(_count("f", f, 0), _count("m", m, 1), bucket_size("krum", bucket))
