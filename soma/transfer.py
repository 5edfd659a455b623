"""The precision a run's weights travel and are kept at in the store (config `transfer`).

`float32` (the default) keeps every export as the model made it. `bfloat16` and `float16`
halve the bytes each round writes and reads: the starting weights, every client's export and
every published average are kept at that precision; each average is still worked in float32
(soma.arithmetic.working_dtype) and cast back, and a client loads the stored weights into
its float32 model by an exact widening (soma.nodes.load). What is lost is the rounding of
each stored weight (2^-9 of its value for bfloat16, 2^-12 for float16; float16 also
overflows past 65504): README, "Fewer bytes on the wire", has its measured cost.

Only floating tensors wider than the transfer precision are cast; counts (BatchNorm's
`num_batches_tracked`) and what a strategy sends beside the weights (SCAFFOLD's control
variates) are kept as they are. Pure arithmetic: no store; torch is imported when a tensor
is cast, so that the config's check (no torch: the Snakefile) reads the names from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

FULL = "float32"
PRECISIONS = ("float32", "bfloat16", "float16")  # torch's names of the dtypes


def at(export: Mapping[str, Mapping[str, Any]], transfer: str) -> dict[str, dict[str, Any]]:
    """`export` as it is kept under `transfer`: its wider floating tensors cast to that
    precision, everything else as it is. float32 keeps the export as the model made it,
    whatever its dtypes (a float64 model stays float64): the same objects, nothing copied."""
    import torch

    if transfer == FULL:
        return {node: dict(weights) for node, weights in export.items()}
    target = getattr(torch, transfer)
    return {
        node: {key: _narrowed(value, target) for key, value in weights.items()}
        for node, weights in export.items()
    }


def _narrowed(value: Any, target: torch.dtype) -> Any:
    import torch

    if not isinstance(value, torch.Tensor) or not value.dtype.is_floating_point:
        return value
    if torch.finfo(value.dtype).bits <= torch.finfo(target).bits:
        return value
    return value.to(target)


def exact_widening(source: torch.dtype, target: torch.dtype) -> bool:
    """Whether every `source` value is a `target` value (bfloat16 or float16 into float32 or
    float64, float32 into float64): a load that widens so loses nothing."""
    if not (source.is_floating_point and target.is_floating_point) or source == target:
        return source == target
    import torch

    wide, narrow = torch.finfo(target), torch.finfo(source)
    return wide.bits > narrow.bits and wide.eps <= narrow.eps and wide.max >= narrow.max
