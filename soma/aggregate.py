"""FedAvg: the weighted mean of exports, node by node, key by key. Pure arithmetic, no I/O.

The mean is kept as a running weighted mean, folded one export at a time with
`soma.arithmetic.lerp` (mean += w * (x - mean), w = n_k / (n_0 + ... + n_k)), so that:
- a list and an iterator take the same path, and an iterator holds one accumulator plus the
  export being folded in, whatever the number of clients;
- the total of the sizes need not be known before the last export arrives;
- the average of one is that one, bit for bit;
- the mean is the same bits on every machine: each step is a single correctly rounded
  operation (torch's `lerp_` fuses them on some CPUs and not on others), and exports are
  folded in the order given. Exports on a GPU are averaged on the CPU.

What is not a number you can halve is not halved: integer and bool tensors (BatchNorm's
`num_batches_tracked` is a count, and the mean of two counts is not a count) keep the first
export's value. Half-precision floats accumulate in float32 and come back in their own dtype.
"""

from __future__ import annotations

import itertools
import math
import numbers
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence

import torch

from soma.arithmetic import Signature, first_difference, lerp, lerp_each
from soma.arithmetic import averageable as _averageable
from soma.arithmetic import working_dtype as _accumulator_dtype
from soma.errors import AggregationError
from soma.nodes import Export

State = Mapping[str, Mapping[str, torch.Tensor]]


def _size_of(size: object, index: int) -> float:
    """A client's size as a weight: a finite, non-negative real number."""
    if isinstance(size, bool) or not isinstance(size, numbers.Real):
        raise AggregationError(f"size of export {index} is {size!r}, not a number")
    try:
        value = float(size)
    except OverflowError:  # 10**400: its repr alone may be thousands of digits
        raise AggregationError(
            f"size of export {index} is too large to be a weight (of type {type(size).__name__}, "
            f"beyond a float's {sys.float_info.max:.3g}): sizes must be >= 0 and finite"
        ) from None
    if not math.isfinite(value) or value < 0:
        raise AggregationError(f"size of export {index} is {size!r}: sizes must be >= 0 and finite")
    return value


def _signature(export: State, index: int) -> Signature:
    """Each key's shape and dtype: what the rest must match, without holding the tensors."""
    if not isinstance(export, Mapping):
        raise AggregationError(f"export {index} is a {type(export).__name__}, not an export")
    signature: Signature = {}
    for node_id, keys in export.items():
        if not isinstance(keys, Mapping):
            raise AggregationError(
                f"node {node_id!r} in export {index} is a {type(keys).__name__}, "
                "not a map of tensors"
            )
        signature[node_id] = {}
        for key, tensor in keys.items():
            if not isinstance(tensor, torch.Tensor):
                raise AggregationError(
                    f"node {node_id!r} key {key!r} in export {index} is a "
                    f"{type(tensor).__name__}, not a tensor"
                )
            problem = _unaverageable(tensor)
            if problem:
                raise AggregationError(
                    f"node {node_id!r} key {key!r} in export {index} is {problem}"
                )
            signature[node_id][key] = (tuple(tensor.shape), tensor.dtype)
    return signature


def _unaverageable(tensor: torch.Tensor) -> str | None:
    """Why `tensor` cannot be folded into a mean (torch would raise half way), or None."""
    if tensor.device.type == "meta":
        return "a meta tensor: it has a shape but no values to average"
    if tensor.is_nested:
        return "a nested tensor: only plain (strided) tensors are averaged"
    if tensor.layout != torch.strided:
        return f"a {tensor.layout} tensor: only plain (strided) tensors are averaged"
    if tensor.is_quantized:
        return "a quantized tensor: its integers are not the numbers it stands for"
    return None


def _check_like(first: Signature, other: State, index: int) -> None:
    """Refuse an export that is not the same network as the first, naming what differs."""
    problem = first_difference(first, _signature(other, index), "export 0", f"export {index}")
    if problem:
        raise AggregationError(problem)


Mean = dict[str, dict[str, torch.Tensor]]


def _start(first: State) -> Mean:
    """The running mean after one export: a copy of it (floats widened), never the input: an
    iterator's exports may be dropped or refilled once folded."""
    with torch.no_grad():
        return {
            node_id: {
                key: t.to(
                    "cpu",
                    _accumulator_dtype(t.dtype),
                    copy=True,
                    memory_format=torch.contiguous_format,  # `lerp` writes into it
                )
                for key, t in keys.items()
            }
            for node_id, keys in first.items()
        }


def _fold(mean: Mean, export: State, weight: float) -> None:
    """mean += weight * (export - mean), for what can be averaged; counts keep the first's."""
    with torch.no_grad():
        for node_id, keys in mean.items():
            theirs = export[node_id]
            for key, acc in keys.items():
                if _averageable(acc.dtype):
                    lerp(acc, theirs[key].to("cpu", acc.dtype), weight, out=acc)


def _finish(mean: Mean, first: Signature) -> Export:
    return {
        node_id: {key: acc.to(first[node_id][key][1]) for key, acc in keys.items()}
        for node_id, keys in mean.items()
    }


Pair = tuple[State, object]
_MISSING = object()


def _pairs(exports: Iterable[object], sizes: Sequence[object] | None) -> Iterator[Pair]:
    """(export, size) pairs from exports with sizes, or from exports alone or pairs alone."""
    if sizes is not None:
        count = 0
        for export, size in itertools.zip_longest(exports, sizes, fillvalue=_MISSING):
            if export is _MISSING or size is _MISSING:
                more = "exports" if size is _MISSING else "sizes"
                raise AggregationError(
                    f"the number of sizes differs from the number of exports: "
                    f"there are more {more} than the {count} that pair up"
                )
            count += 1
            yield export, size
        return
    for item in exports:
        if isinstance(item, tuple):
            if len(item) != 2:
                raise AggregationError(f"an (export, size) pair has {len(item)} elements, not 2")
            yield item[0], item[1]
        else:
            yield item, 1  # no sizes: equal weights


def fedavg(
    exports: Iterable[State] | Iterable[Pair], sizes: Sequence[float] | None = None
) -> Export:
    """The weighted mean of exports, weighted by the clients' sizes (equal when none are given).

    Given a list (or tuple), everything is checked before anything is computed. Given an
    iterator, of exports or of `(export, size)` pairs, each export is checked before it is
    folded in, memory stays one model, and a refusal returns nothing.
    """
    exports, sizes = _iterable(exports, "exports"), _sizes_listed(sizes)
    if isinstance(exports, Sequence) and not isinstance(exports, (str, bytes)):
        exports = list(exports)
        if not exports:
            raise AggregationError("nothing to average: no exports were given")
        if sizes is not None and len(sizes) != len(exports):
            raise AggregationError(f"{len(sizes)} sizes for {len(exports)} exports")
        pairs = list(_pairs(exports, sizes))
        _check_all(pairs)
        return _mean_of_all(pairs)
    return _running_mean(_pairs(exports, sizes))


def _iterable(values: object, what: str) -> Iterable:
    if not isinstance(values, Iterable):
        raise AggregationError(
            f"{what} must be a list or an iterator, not {type(values).__name__} {values!r}"
        )
    return values


def _sizes_listed(sizes: object) -> Sequence[object] | None:
    """Sizes as a list (any iterable of them will do: they are a few numbers)."""
    if sizes is None or isinstance(sizes, Sequence):
        return sizes
    return list(_iterable(sizes, "sizes"))


def _check_total(total: float) -> None:
    """Sizes whose sum overflows would weigh every later export by zero: refused."""
    if not math.isfinite(total):
        raise AggregationError(f"the sizes add up to {total!r}: their sum must be a finite number")


def _check_all(pairs: list[tuple[State, object]]) -> None:
    first = _signature(pairs[0][0], 0)
    total = 0.0
    for index, (export, size) in enumerate(pairs):
        total += _size_of(size, index)
        _check_like(first, export, index)
    _check_total(total)
    if total == 0:
        raise AggregationError("the sizes add up to zero: there is nothing to weigh by")


def _fold_weight(index: int, size: float, total: float) -> float | None:
    """Export `index`'s weight in the running mean, n_k / (n_0 + ... + n_k) with `total` that
    sum, or None where it is not folded in (the first; a size of zero; a zero total so far):
    the one rule, for a list and an iterator alike."""
    if index == 0 or total <= 0 or size / total == 0.0:
        return None
    return size / total


def _mean_of_all(pairs: list[tuple[State, object]]) -> Export:
    """The mean of checked exports all in memory: the running mean's operations in its order
    (the same bits as an iterator of them gives), key by key with every export folded into
    one cache-sized piece of the mean at a time (`lerp_each`), so the mean is read and written
    once rather than once per export."""
    first, total = pairs[0][0], 0.0
    folded: list[tuple[State, float]] = []
    for index, (export, size) in enumerate(pairs):
        weight = _size_of(size, index)
        total += weight
        w = _fold_weight(index, weight, total)
        if w is not None:
            folded.append((export, w))
    mean: Mean = {}
    with torch.no_grad():
        for node_id, keys in first.items():
            mean[node_id] = {}
            for key, t in keys.items():
                wide = _accumulator_dtype(t.dtype)
                if not _averageable(wide):  # a count: the first export's
                    mean[node_id][key] = t.to(
                        "cpu", copy=True, memory_format=torch.contiguous_format
                    )
                    continue
                ends = [(export[node_id][key], w) for export, w in folded]
                if wide == t.dtype and all(_on_cpu(x) for x, _ in [(t, 0), *ends]):
                    mean[node_id][key] = lerp_each(t, ends)
                else:  # widened or copied to the CPU one export at a time, as an iterator is
                    acc = t.to("cpu", wide, copy=True, memory_format=torch.contiguous_format)
                    for x, w in ends:
                        lerp(acc, x.to("cpu", wide), w, out=acc)
                    mean[node_id][key] = acc.to(t.dtype)
    return mean


def _on_cpu(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "cpu"


def _running_mean(pairs: Iterator[tuple[State, object]]) -> Export:
    first: Signature | None = None
    mean: Mean = {}
    total = 0.0
    for index, (export, size) in enumerate(pairs):
        weight = _size_of(size, index)
        if first is None:
            first, mean = _signature(export, 0), _start(export)
        else:
            _check_like(first, export, index)
        total += weight
        _check_total(total)
        w = _fold_weight(index, weight, total)
        if w is not None:
            _fold(mean, export, w)
    if first is None:
        raise AggregationError("nothing to average: no exports were given")
    if total == 0:
        raise AggregationError("the sizes add up to zero: there is nothing to weigh by")
    return _finish(mean, first)
