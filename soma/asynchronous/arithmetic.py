"""A version's server step (FedBuff, Nguyen et al. 2022): pure arithmetic, no I/O.

Each consumed update i was trained from version `from_i` into weights x_i, on n_i examples;
its staleness is s_i = v - from_i when version v + 1 is made from version v, and it weighs
s(s_i): (1 + s)^-a (polynomial) or 1 (constant). The step is

    w_{v+1} = w_v + lr * sum_i (n_i s(s_i) / sum_j n_j) (x_i - w_{from_i})

computed as a weighted mean of points p_i = w_v + (x_i - w_{from_i}) (p_i = x_i, exactly,
when the update is fresh), m = fedavg(p_i by n_i s(s_i)), and w_{v+1} = lerp(w_v, m, scale)
(soma.arithmetic.lerp: single operations, the same bits on every machine)
with scale = lr * sum_i n_i s(s_i) / sum_i n_i; when scale is 1 the step is m itself. So
with nothing stale and lr 1, a version is bit for bit the synchronous FedAvg of the same
updates (soma.aggregate.fedavg, folded in the same client order). What is not a float
(integer counts) keeps the first update's value, as FedAvg does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from soma.aggregate import fedavg
from soma.arithmetic import lerp
from soma.nodes import Export


def staleness_weight(kind: str, a: float, staleness: int) -> float:
    """How much an update `staleness` versions old weighs (1 when fresh, whatever the kind)."""
    if kind == "constant":
        return 1.0
    if kind == "polynomial":
        return float((1.0 + staleness) ** -a)
    raise ValueError(f"staleness kind {kind!r} is neither polynomial nor constant")


@dataclass(frozen=True)
class Consumed:
    """One consumed update as the step sees it: its trained weights, the weights it started
    from (None: the version being stepped from, so nothing to carry over), its size and its
    staleness weight."""

    trained: Export
    start: Export | None
    size: float
    weight: float


def _carried(current: Export, point: Consumed) -> Export:
    """p = w_v + (x - w_from): the update's change, carried onto the current weights."""
    if point.start is None:
        return point.trained
    out: dict[str, dict[str, torch.Tensor]] = {}
    for node, keys in point.trained.items():
        out[node] = {}
        for key, x in keys.items():
            if x.is_floating_point():
                out[node][key] = current[node][key] + (x - point.start[node][key])
            else:
                out[node][key] = x
    return out


def server_step(current: Export, points: Sequence[Consumed], server_lr: float) -> Export:
    """The next version's weights from the current ones and the consumed updates, in order."""
    if not points:
        raise ValueError("a version is made of at least one update")
    weighed = [p.size * p.weight for p in points]
    mean = fedavg((_carried(current, p), w) for p, w in zip(points, weighed, strict=True))
    total = sum(p.size for p in points)
    scale = server_lr * (sum(weighed) / total if total > 0 else 1.0)
    if scale == 1.0:
        return mean
    out: dict[str, dict[str, torch.Tensor]] = {}
    for node, keys in mean.items():
        out[node] = {}
        for key, m in keys.items():
            w = current[node][key]
            out[node][key] = lerp(w, m.to(w.dtype), scale) if w.is_floating_point() else m
    return out
