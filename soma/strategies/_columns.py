"""Key by key across clients: what the strategies that cannot stream (median, Krum) are made of.

A coordinate-wise statistic needs every client's value of a coordinate at once, so these
strategies hold all N updates (`gather`: `list(updates)`). That costs little anonymous
memory: each update's weights are file-backed lazy mmaps from the store. Their pages (read
once when the store verifies them) are clean page cache: they count in the resident size,
N models of it, but the kernel takes them back whenever it needs the memory.

The arithmetic walks the float keys one at a time and cuts each key's numbers into blocks
(`blocks`), each stacked across the clients as an (N, c) tensor of at most about `BLOCK`
numbers. What is held in anonymous memory is therefore the output model plus one block and
what is done with it (a sort's values and int64 indices, or Krum's float64 differences:
about 64 MB either way), whatever N and however large the largest key: that key never has
to fit N times.

Integer and bool keys are counts (BatchNorm's `num_batches_tracked`): they take the first
update's value, as in FedAvg. Half-precision floats are worked in float32 and come back in
their own dtype; complex numbers are worked as their real and imaginary parts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import torch

from soma.arithmetic import first_difference, mean_of_rows, signature, working_dtype
from soma.nodes import Export
from soma.strategies import StrategyError, Update, floats

# Numbers held across all clients in one block: 2**22 float32 are 16 MB (32 MB in float64).
BLOCK = 1 << 22


def gather(updates: Iterable[Update]) -> list[Update]:
    """All the updates, refused unless there is at least one and they are all one network."""
    rows = list(updates)
    if not rows:
        raise StrategyError("nothing to aggregate: no client sent an update")
    check_same_network(rows)
    return rows


def check_same_network(rows: Sequence[Update]) -> None:
    """Refuse updates that are not the same network as the first, naming node, key, both
    shapes and both clients: a coordinate-wise statistic of two networks means nothing."""
    for row in rows[1:]:
        _check_pair(rows[0], row)


def _check_pair(first: Update, row: Update) -> None:
    a_is, b_is = f"client {first.client}", f"client {row.client}"
    problem = first_difference(signature(first.weights), signature(row.weights), a_is, b_is)
    if problem:
        raise StrategyError(f"{problem}: {a_is} and {b_is} are not the same network")


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """What a key is worked in: half precision widened (soma.arithmetic), complex split into
    real parts."""
    if dtype.is_complex:
        return torch.empty(0, dtype=dtype).real.dtype
    return working_dtype(dtype)


def _flat(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's numbers as one row (a view when it is contiguous, as the store's are)."""
    if tensor.dtype.is_complex:
        tensor = torch.view_as_real(tensor)
    return tensor.reshape(-1)


def blocks(
    rows: Sequence[Update], node_id: str, key: str, dtype: torch.dtype | None = None
) -> Iterator[tuple[slice, torch.Tensor]]:
    """(where, stacked): the key's numbers cut in blocks, each stacked across the clients as an
    (N, c) tensor in `dtype` (default: `work_dtype`), so that N clients of a huge key never
    need N copies of it at once. `where` is the block's place in the key's flat numbers."""
    flats = [_flat(row.weights[node_id][key]) for row in rows]
    dtype = dtype or work_dtype(rows[0].weights[node_id][key].dtype)
    total, width = flats[0].numel(), max(1, BLOCK // len(rows))
    for start in range(0, total, width):
        where = slice(start, min(total, start + width))
        stacked = torch.empty((len(rows), where.stop - where.start), dtype=dtype)
        for i, flat in enumerate(flats):
            stacked[i].copy_(flat[where])
        yield where, stacked


def coordinatewise(
    rows: Sequence[Update], reduce: Callable[[torch.Tensor], torch.Tensor]
) -> Export:
    """A new export whose float numbers are `reduce` of each (N, c) block over its clients
    (dim 0), and whose counts are the first update's. Nothing in it aliases an update."""
    first = rows[0].weights
    out: Export = {node_id: {} for node_id in first}
    float_keys = set(floats(first))
    with torch.no_grad():
        for node_id, keys in first.items():
            for key, tensor in keys.items():
                if (node_id, key) not in float_keys:
                    out[node_id][key] = tensor.clone()
                    continue
                result = torch.empty(tensor.shape, dtype=tensor.dtype)
                target = _flat(result)
                for where, stacked in blocks(rows, node_id, key):
                    target[where] = reduce(stacked)
                out[node_id][key] = result
    return out


def sorted_mean(stacked: torch.Tensor, drop: int) -> torch.Tensor:
    """Per column, the mean of what is left once the `drop` smallest and `drop` largest values
    are dropped. NaN sorts above +inf: once anything is dropped, a client sending NaN is one
    more extreme to drop, not a poison."""
    n = stacked.shape[0]
    if drop == 0:
        return mean_of_rows(stacked)
    ordered = stacked.sort(dim=0).values
    return mean_of_rows(ordered[drop : n - drop])
