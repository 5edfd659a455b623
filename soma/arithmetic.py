"""Arithmetic on exports: the rules every average, server step and privacy step share.

- What is a number: floats and complex numbers are averaged, stepped and noised; integer
  and bool tensors are counts (BatchNorm's `num_batches_tracked`: the mean of two counts is
  not a count) and pass through as the first export's (`averageable`).
- Half precision is worked in float32 and cast back (`working_dtype`): summing many clients,
  or tau^2 = 1e-6 and the small deltas of late rounds, are below what float16 tells from 0.
- Two exports are the same network when they have the same nodes and keys, each of the same
  shape and dtype (`signature`, `first_difference`): whoever compares them (FedAvg's fold,
  the round before anything is claimed, a server optimizer against its start, a robust
  strategy across clients) names the first difference the same way, under its own error.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

# node -> key -> (shape, dtype); a value that is not a tensor is (None, its type's name)
Signature = dict[str, dict[str, tuple[Any, Any]]]


def averageable(dtype: torch.dtype) -> bool:
    """Floats and complex numbers can be averaged; integer and bool counts cannot."""
    return dtype.is_floating_point or dtype.is_complex


def working_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype arithmetic on a key is done in: float32 for half precision, else its own."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def signature(export: Mapping[str, Mapping[str, Any]]) -> Signature:
    """Each key's shape and dtype: what another export must match, without its values."""
    return {
        node_id: {
            key: (tuple(t.shape), t.dtype)
            if isinstance(t, torch.Tensor)
            else (None, type(t).__name__)
            for key, t in keys.items()
        }
        for node_id, keys in export.items()
    }


def first_difference(a: Signature, b: Signature, a_is: str, b_is: str) -> str | None:
    """How two exports differ, the first difference (in sorted node and key order) named
    with what each one is (`a_is`, `b_is`: "export 0", "client 3"), or None when they are
    the same network."""
    for node_id in sorted(set(a) | set(b)):
        if node_id not in b or node_id not in a:
            has, lacks = (a_is, b_is) if node_id in a else (b_is, a_is)
            return f"node {node_id!r} is in {has} but not in {lacks}"
        for key in sorted(set(a[node_id]) | set(b[node_id])):
            if key not in b[node_id] or key not in a[node_id]:
                has, lacks = (a_is, b_is) if key in a[node_id] else (b_is, a_is)
                return f"node {node_id!r} key {key!r} is in {has} but not in {lacks}"
            (sa, da), (sb, db) = a[node_id][key], b[node_id][key]
            for shape, dtype, who in ((sa, da, a_is), (sb, db, b_is)):
                if shape is None:
                    return f"node {node_id!r} key {key!r} is a {dtype} in {who}, not a tensor"
            if sa != sb:
                return f"node {node_id!r} key {key!r}: shape {sa} in {a_is}, {sb} in {b_is}"
            if da != db:
                return f"node {node_id!r} key {key!r}: dtype {da} in {a_is}, {db} in {b_is}"
    return None


# --- the same bits on every machine ----------------------------------------------------------
# torch picks its SIMD kernels by the CPU (ATEN_CPU_CAPABILITY: default, avx2, avx512): a fused
# operation (lerp, addcmul, add with alpha) rounds once where another kernel rounds twice, and
# a reduction within a tensor adds in an order that follows the vector width. An average
# recomputed on another machine would then differ in its last bits and be refused. So the
# server's arithmetic (every average, server step, state and decision on them) is written
# from single IEEE-754 operations, each correctly rounded (a sub, a mul, an add: the same bits
# whatever kernel does it), and every sum across clients or within a tensor runs in an order
# the code fixes, not the machine. Client training is not recomputed and is not held to this.

# Numbers a step of `lerp` works on at once: its scratch (128 KiB of float32) stays in cache,
# so three single operations cost about what one fused pass does.
_CHUNK = 1 << 15
# Running sums of the fixed-order sums of squares (`sum_of_squares`, `row_sums_of_squares`).
_COLUMNS = 4096


def _numbers(tensor: torch.Tensor) -> np.ndarray:
    """A CPU tensor's numbers as a flat numpy view (complex as its real and imaginary parts);
    a view of the same memory when the tensor is contiguous, so that writing to it writes
    the tensor."""
    if tensor.is_complex():
        tensor = torch.view_as_real(tensor)
    return tensor.detach().numpy().reshape(-1)


def lerp(
    start: torch.Tensor, end: torch.Tensor, weight: float, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """start + weight * (end - start), in `out` (a new tensor when None; `start` itself for
    in place), the same bits on every machine.

    torch.lerp's two-sided form (end - (1 - weight) * (end - start) from weight 0.5 up), so
    that weight 1 gives `end` and weight 0 `start` exactly, and equal inputs give themselves;
    but every step a single correctly rounded operation, worked in cache-sized chunks.
    `start`, `end` and `out` are CPU tensors of one float or complex dtype and shape; half
    precision is worked in float32 and rounded back once."""
    if start.dtype != working_dtype(start.dtype):
        wide = lerp(start.float(), end.float(), weight).to(start.dtype)
        return wide if out is None else out.copy_(wide)
    if out is None:
        out = torch.empty(start.shape, dtype=start.dtype)
    elif not out.is_contiguous():
        raise ValueError("lerp writes into a contiguous tensor")
    a, b, o = _numbers(start), _numbers(end), _numbers(out)
    far = abs(weight) >= 0.5
    w = a.dtype.type(1.0 - weight if far else weight)
    scratch = np.empty(min(_CHUNK, o.size), dtype=o.dtype)
    for first in range(0, o.size, _CHUNK):
        last = min(first + _CHUNK, o.size)
        t = scratch[: last - first]
        np.subtract(b[first:last], a[first:last], out=t)
        np.multiply(t, w, out=t)
        if far:
            np.subtract(b[first:last], t, out=o[first:last])
        else:
            np.add(a[first:last], t, out=o[first:last])
    return out


def lerp_each(start: torch.Tensor, folds: Sequence[tuple[torch.Tensor, float]]) -> torch.Tensor:
    """`start` folded with each `(end, weight)` in turn, as `lerp` would give them one call at
    a time (the same operations on each number, in the same order: the same bits), into a
    new tensor.

    Why a function of its own: given every end at once, it works chunk by chunk, folding all
    of them into one chunk of the result while that chunk is in cache, so the result is read
    and written from memory once rather than once per end. `start` and every end are CPU
    tensors of one working dtype and shape."""
    out = torch.empty(start.shape, dtype=start.dtype)
    o = _numbers(out)
    if not folds:
        np.copyto(o, _numbers(start))
        return out
    a = _numbers(start)
    steps = [
        (_numbers(end), abs(w) >= 0.5, o.dtype.type(1.0 - w if abs(w) >= 0.5 else w))
        for end, w in folds
    ]
    scratch = np.empty(min(_CHUNK, o.size), dtype=o.dtype)
    for first in range(0, o.size, _CHUNK):
        last = min(first + _CHUNK, o.size)
        t, into, acc = scratch[: last - first], o[first:last], a[first:last]
        for b, far, w in steps:
            end = b[first:last]
            np.subtract(end, acc, out=t)
            np.multiply(t, w, out=t)
            if far:
                np.subtract(end, t, out=into)
            else:
                np.add(acc, t, out=into)
            acc = into
    return out


def add_scaled(total: torch.Tensor, addend: torch.Tensor, scale: float) -> torch.Tensor:
    """total += scale * addend, in place, as two single operations (a multiply, then an add)
    where `add_(addend, alpha=scale)` fuses them on some machines and not on others."""
    return total.add_(addend * scale)


def mean_of_rows(stacked: torch.Tensor) -> torch.Tensor:
    """The mean over dim 0 of an (n, ...) tensor: its rows added in order, one at a time,
    then divided by n (where `mean(dim=0)` adds in an order that follows the vector width)."""
    total = stacked[0].clone()
    for row in stacked[1:]:
        total.add_(row)
    return total.div_(stacked.shape[0])


def _fixed_sums_of_squares(numbers: np.ndarray) -> list[float]:
    """Per row of an (m, c) array, the sum of its numbers' squares in float64, in an order
    fixed by this code: each row cut into lengths of `_COLUMNS`, added one after another
    into `_COLUMNS` running sums (element-wise adds, the same bits at any vector width), the
    last length short, and the running sums then summed exactly (math.fsum: correctly
    rounded whatever the order). Worked a few MB at a time, so a large key costs no copy."""
    m, c = numbers.shape
    columns = np.zeros((m, _COLUMNS), dtype=np.float64)
    step = _COLUMNS * max(1, (1 << 18) // (_COLUMNS * max(m, 1)))
    for first in range(0, c, step):
        piece = numbers[:, first : first + step].astype(np.float64)
        np.square(piece, out=piece)
        full, tail = divmod(piece.shape[1], _COLUMNS)
        for r in range(full):
            np.add(columns, piece[:, r * _COLUMNS : (r + 1) * _COLUMNS], out=columns)
        if tail:
            np.add(columns[:, :tail], piece[:, full * _COLUMNS :], out=columns[:, :tail])
    return [math.fsum(row) for row in columns]


def sum_of_squares(tensors: Iterable[torch.Tensor]) -> float:
    """The sum of the squares of every number of `tensors` (complex: both parts), in float64
    and in a fixed order: the same float on every machine, so a norm that scales or chooses
    (clipping, centered clipping, a norm bound) decides alike wherever it is recomputed."""
    parts = []
    for tensor in tensors:
        if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16; float32 holds it exactly
            tensor = tensor.float()
        numbers = _numbers(tensor.cpu())
        if numbers.size:
            parts.extend(_fixed_sums_of_squares(numbers.reshape(1, -1)))
    return math.fsum(parts)


def row_sums_of_squares(rows: torch.Tensor) -> torch.Tensor:
    """Per row of an (m, c) float64 tensor, the sum of its squares, in a fixed order
    (`sum_of_squares`'s): Krum's distances, alike on every machine."""
    sums = _fixed_sums_of_squares(rows.detach().cpu().numpy())
    return torch.tensor(sums, dtype=torch.float64)


def recomputed_under() -> str:
    """Where a recomputation ran, for a refusal to say: the server's arithmetic gives the same
    bits on any IEEE-754 machine, so a difference is the record's, not the CPU's; said anyway,
    so that whoever doubts it can recompute on another machine and compare."""
    capability = torch.backends.cpu.get_cpu_capability()
    return f"recomputed under torch {torch.__version__}, CPU capability {capability}"
