"""A norm bound on updates, in front of any streaming strategy: the option `norm_bound` of
fedavg, fedprox, fedavgm, fedadam, fedyogi and fedadagrad (`NormBound` wraps a user's too).

With `norm_bound: k`, each client's update u_i = w_i - previous (over every float key of the
export) is clipped to k times the median of the round's update norms:

    c   = k * median(||u_1||, ..., ||u_n||)    (numpy's median: the mean of the two middle
                                                 ones for even n)
    w_i = previous + u_i * min(1, c / ||u_i||)

and the clipped weights go to the wrapped strategy, one client at a time, in the order
they came. An update within the bound is handed on as it is (its own tensors, bit for bit).
The norm is the L2 norm over the whole export, accumulated in float64; an update whose norm
is not finite (NaN or inf in it) is clipped to nothing (the client sends `previous`) and
counts as +inf in the median. The median is the bound's anchor because at most a minority
of attackers cannot move it past the honest norms: a x100 scaled or x10 sign-flipped update
is brought back to k honest norms, which a mean can absorb. It does not help against
attacks of ordinary norm (a small consistent bias): that is the robust rules' job.

Counts (integer and bool keys) are left as the client sent them. The bound needs the start
of the round (`needs_previous`), and every update's norm before the first is folded, so it
reads the updates twice: first their norms (one at a time, nothing kept but n numbers),
then the clipped updates (one at a time): memory is the wrapped strategy's plus one
clipped model. The updates are file-backed lazy maps from the store, so the list of them
costs page cache, not anonymous memory. A bounded strategy cannot step from the mean alone
(each update must be seen), so it is refused under a tree or secure aggregation.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import statistics
from collections.abc import Iterable, Iterator, Sequence

import torch

from soma.arithmetic import sum_of_squares, working_dtype
from soma.nodes import Export
from soma.strategies import (
    State,
    Strategy,
    StrategyError,
    Update,
    at_round,
    floats,
    has_own,
    hook,
)


def bound_of(strategy: str, value: object) -> float | None:
    """The option `norm_bound`: None (off) or a finite number > 0, or a refusal naming it."""
    if value is None:
        return None
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real)
    if not ok or not (math.isfinite(value) and value > 0):
        raise StrategyError(
            f"{strategy} option norm_bound={value!r} must be null (off) or a finite number "
            "> 0 (the multiple of the round's median update norm each update is clipped to)"
        )
    return float(value)


def update_norm(previous: Export, weights: Export, client: int) -> float:
    """||weights - previous|| over every float key, in float64 and in a fixed order (the same
    float on every machine, soma.arithmetic.sum_of_squares); refused by key when they are
    not the same network."""
    squares: list[float] = []
    with torch.no_grad():
        for node_id, key in floats(previous):
            try:
                tensor = weights[node_id][key]
            except KeyError:
                raise StrategyError(
                    f"norm_bound: client {client} sent no node {node_id!r} key {key!r}, which "
                    "the round's start has"
                ) from None
            if tensor.shape != previous[node_id][key].shape:
                raise StrategyError(
                    f"norm_bound: client {client}'s node {node_id!r} key {key!r} is "
                    f"{tuple(tensor.shape)}, the round's start "
                    f"{tuple(previous[node_id][key].shape)}"
                )
            diff = tensor.to(torch.float64) - previous[node_id][key].to(torch.float64)
            squares.append(sum_of_squares([diff]))
    return math.sqrt(math.fsum(squares))


def clipped(previous: Export, weights: Export, scale: float) -> Export:
    """previous + (weights - previous) * scale for the floats; counts as they were."""
    out: Export = {node_id: dict(keys) for node_id, keys in weights.items()}
    with torch.no_grad():
        for node_id, key in floats(previous):
            start, tensor = previous[node_id][key], weights[node_id][key]
            work = working_dtype(tensor.dtype)
            if scale == 0:  # nothing of it: inf * 0 would be NaN
                out[node_id][key] = start.to(tensor.dtype).clone()
                continue
            moved = start.to(work) + (tensor.to(work) - start.to(work)) * scale
            out[node_id][key] = moved.to(tensor.dtype)
    return out


def cap_of(norms: Sequence[float], bound: float) -> float:
    """bound times the median norm, a norm that is not finite counting as +inf."""
    return bound * statistics.median(n if math.isfinite(n) else math.inf for n in norms)


class NormBound(Strategy):
    """`inner`, fed each update clipped to `bound` times the round's median update norm. Every
    hook but `aggregate` (and `from_mean`, which it cannot have) is the inner strategy's."""

    needs_previous = True

    def __init__(self, inner: Strategy, bound: float) -> None:
        self.inner, self.bound = inner, bound
        self.uniform = bool(hook(inner, "uniform"))
        for name in ("check", "check_state", "local", "privacy_spent"):
            if has_own(inner, name):  # only what it has: has_own(self, ...) stays the inner's
                setattr(self, name, hook(inner, name))

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
                "norm_bound clips each update from the weights the round started from, and "
                "there are none"
            )
        rows = list(updates)
        norms = [update_norm(previous, row.weights, row.client) for row in rows]
        cap = cap_of(norms, self.bound) if rows else math.inf

        def bounded() -> Iterator[Update]:
            for row, norm in zip(rows, norms, strict=True):
                if math.isfinite(norm) and norm <= cap:
                    yield row
                else:
                    scale = cap / norm if math.isfinite(norm) else 0.0
                    yield dataclasses.replace(row, weights=clipped(previous, row.weights, scale))

        return self.inner.aggregate(previous, bounded(), state, clients=clients)

    def for_round(self, *, round: int, seed: int | None) -> Strategy:
        inner = at_round(self.inner, round=round, seed=seed)
        return self if inner is self.inner else NormBound(inner, self.bound)


def bounded(strategy: Strategy, bound: float | None) -> Strategy:
    """`strategy` itself when `bound` is None, else behind a NormBound."""
    return strategy if bound is None else NormBound(strategy, bound)
