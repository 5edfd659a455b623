"""Centered clipping (Karimireddy, He and Jaggi 2021, "Learning from history for Byzantine
robust optimization"): clip each client around a center, and move the center by the mean.

Starting from the weights the round started from (the previous global model), v_0 =
previous, each of the `iterations` passes computes

    v_{l+1} = v_l + (1/n) * sum_i (w_i - v_l) * min(1, tau / ||w_i - v_l||)

over the round's n clients, the norm being L2 over every float key of the export (in
float64); the result is v_iterations. A client's pull on the center is at most tau / n a
pass, however far its weights are: a x100 or x10 sign-flipped client moves the result by
tau / n, not by its whole update, and so does a NaN client, whose norm is not finite and
which is dropped from the sum (it still counts in n).

How it differs from the paper: the paper clips the clients' momentum vectors around the
previous aggregate momentum (its "history"); the clients here send weights and keep no
server-side momentum, so the center is the previous global model and the clipped vectors
are the clients' updates w_i - previous. With `iterations` 1 (the paper's l = 1) that is one
clipped mean of the updates. Unweighted, as the paper: a Byzantine client can claim any size.

Options: `tau` (default 1.0), a finite number > 0, in the units of the weights: the clip
radius of an update. Honest updates within tau move the center as FedAvg's unweighted mean
would; it should be about their typical distance from the center (the digits task's 2-label
clients with plain SGD make updates of norm about 2.5 in the first round, smaller later):
smaller is more robust and slower. `iterations` (default 1), a whole number >= 1.
`bucket` (default 1, none): s clients per bucket, shuffled by the run's seed and the round
(soma.strategies._buckets); each w_i above is then a bucket's unweighted mean and n the
number of buckets (Karimireddy, He and Jaggi 2022 pair bucketing with centered clipping).
The bucket means are formed one bucket at a time (one more model held).

Counts (integer and bool keys) are the first update's, as in FedAvg. No state; it steps
from the round's start (`needs_previous`). Memory: streaming, one client at a time; held are
the center, the sum and one client's difference (three models; 3.7 of anonymous memory as
benchmarks/strategies_memory.py measures it, 8 clients of 50 MB, whatever their number).
With `iterations` > 1 it reads the updates once a pass, so it holds the list of them
(file-backed lazy maps from the store: page cache, not anonymous memory). It cannot step
from the mean alone (no tree, no secure aggregation).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable

import torch

from soma.arithmetic import add_scaled, sum_of_squares, working_dtype
from soma.nodes import Export
from soma.strategies import State, Strategy, StrategyError, Update, floats
from soma.strategies._buckets import Bucketing, Groups, bucket_size

Flat = dict[tuple[str, str], torch.Tensor]


def _center(previous: Export) -> Flat:
    """The starting center: the previous global model's floats, in their working dtype."""
    return {
        (node, key): previous[node][key].to(working_dtype(previous[node][key].dtype)).clone()
        for node, key in floats(previous)
    }


def _difference(center: Flat, weights: Export, client: int) -> Flat:
    out = {}
    for (node, key), v in center.items():
        try:
            tensor = weights[node][key]
        except KeyError:
            raise StrategyError(
                f"centered_clip: client {client} sent no node {node!r} key {key!r}, which the "
                "round's start has"
            ) from None
        if tuple(tensor.shape) != tuple(v.shape):
            raise StrategyError(
                f"centered_clip: client {client}'s node {node!r} key {key!r} is "
                f"{tuple(tensor.shape)}, the round's start {tuple(v.shape)}"
            )
        out[node, key] = tensor.to(v.dtype) - v
    return out


def norm(flat: Flat) -> float:
    """The L2 norm over every tensor of `flat`, accumulated in float64 in a fixed order (the
    same float on every machine: it scales the pull, soma.arithmetic.sum_of_squares)."""
    return math.sqrt(sum_of_squares(flat.values()))


def clip_pass(center: Flat, rows: Iterable[Update], tau: float) -> tuple[Flat, Export, int]:
    """One pass: the next center, the first update's weights (for counts) and n."""
    total = {k: torch.zeros_like(v) for k, v in center.items()}
    first: Export | None = None
    n = 0
    for row in rows:
        first = row.weights if first is None else first
        n += 1
        diff = _difference(center, row.weights, row.client)
        size = norm(diff)
        if not math.isfinite(size):
            continue  # NaN or inf: no pull at all (it still counts in n)
        scale = min(1.0, tau / size) if size > 0 else 1.0
        for k, d in diff.items():
            add_scaled(total[k], d, scale)
        del diff  # before the next client's: one difference held at a time
    if first is None:
        raise StrategyError("nothing to aggregate: no client sent an update")
    for k, v in total.items():  # in place: the sum becomes the next center
        v.div_(n).add_(center[k])
    return total, first, n


def bucket_means(rows: list[Update], buckets: Groups) -> Iterable[Update]:
    """Each bucket as one update: the unweighted mean of its clients' weights (counts: its
    first client's), formed when it is reached, so that one bucket mean is held at a time."""
    for b, bucket in enumerate(buckets):
        first = rows[bucket[0]].weights
        mean: Export = {node: dict(keys) for node, keys in first.items()}
        for node, key in floats(first):
            work = working_dtype(first[node][key].dtype)
            total = sum(
                (rows[i].weights[node][key].to(work) for i in bucket[1:]), first[node][key].to(work)
            )
            mean[node][key] = total / len(bucket)
        yield Update(b, None, mean)


class CenteredClip(Bucketing, Strategy):
    needs_previous = True
    name = "centered_clip"

    def __init__(self, tau: float, iterations: int, bucket: int = 1) -> None:
        self.tau, self.iterations, self.bucket = tau, iterations, bucket

    def aggregate(
        self,
        previous: Export | None,
        updates: Iterable[Update],
        state: State | None,
        *,
        clients: int,
    ) -> tuple[Export, State | None]:
        if previous is None:
            raise StrategyError(
                "centered_clip clips around the weights the round started from, and there are none"
            )
        rows = updates if self.iterations == 1 and self.bucket == 1 else list(updates)
        buckets = None
        if self.bucket > 1:
            rows, buckets = self.bucketed(list(rows))
        center = _center(previous)
        with torch.no_grad():
            for _ in range(self.iterations):
                passed = rows if buckets is None else bucket_means(rows, buckets)
                center, first, _ = clip_pass(center, passed, self.tau)
        out: Export = {  # floats: the center in their own dtype; counts: the first update's
            node: {
                k: center[node, k].to(t.dtype) if (node, k) in center else t.clone()
                for k, t in keys.items()
            }
            for node, keys in first.items()
        }
        return out, None


def make(*, tau: float = 1.0, iterations: int = 1, bucket: int = 1) -> CenteredClip:
    """Centered clipping around the previous global model (Karimireddy et al. 2021; robust).

    Options (the config's `strategy_options.centered_clip`; `--strategy-option KEY=VALUE`
    on `soma client` and `soma simulate`), each checked here and refused naming it:

    - `tau` (1.0): the clipping radius, in the units of the weights, > 0.
    - `iterations` (1): the clipping's fixed-point iterations, ≥ 1.
    - `bucket` (1): s clients a bucket: the rule works on the means of buckets of s clients,
      shuffled by the run's seed and the round, which helps when the clients' data differ.
    """
    ok = not isinstance(tau, bool) and isinstance(tau, numbers.Real)
    if not ok or not (math.isfinite(tau) and tau > 0):
        raise StrategyError(f"centered_clip option tau must be a finite number > 0, not {tau!r}")
    if (
        isinstance(iterations, bool)
        or not isinstance(iterations, numbers.Integral)
        or iterations < 1
    ):
        raise StrategyError(
            f"centered_clip option iterations must be a whole number >= 1, not {iterations!r}"
        )
    return CenteredClip(float(tau), int(iterations), bucket_size("centered_clip", bucket))
