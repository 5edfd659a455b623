"""A client's export as ring elements and back: its layout (nodes, keys, shapes, dtypes),
quantized with the size as one more element, and the masked input's tensors.

What can be refused about an export (not floating point, not finite, above the overflow
bound) is refused here, before anything is written (`check_input`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from soma.nodes import Export
from soma.secagg.errors import BadInput, SecAggError
from soma.secagg.session import Session

Layout = list[tuple[str, str, tuple[int, ...], str]]  # (node, key, shape, dtype), sorted


def _size_value(size: object, mine: int, what: str) -> float:
    if size is None:
        return 1.0
    if isinstance(size, bool) or not isinstance(size, numbers.Real):
        raise BadInput(f"{what}: client {mine}'s size is {size!r}, not a number")
    value = float(size)
    if not math.isfinite(value) or value < 0:
        raise BadInput(f"{what}: client {mine}'s size is {size!r}; sizes are >= 0 and finite")
    return value


def _layout(export: object, mine: int, what: str) -> Layout:
    if not isinstance(export, Mapping) or not export:
        raise BadInput(
            f"{what}: client {mine}'s export is not a non-empty {{node: {{key: tensor}}}}"
        )
    layout: Layout = []
    for node in sorted(export):
        keys = export[node]
        if not isinstance(node, str) or not isinstance(keys, Mapping) or not keys:
            raise BadInput(
                f"{what}: client {mine}'s node {node!r} is not a non-empty map of tensors"
            )
        for key in sorted(keys):
            tensor = keys[key]
            where = f"client {mine}, node {node!r} key {key!r}"
            if not isinstance(key, str) or not isinstance(tensor, torch.Tensor):
                raise BadInput(f"{what}: {where} is not a tensor under a text key")
            if not tensor.dtype.is_floating_point:
                raise BadInput(
                    f"{what}: {where} is {tensor.dtype}; only floating-point tensors are summed "
                    "securely (a count's mean is not a count, and keeping one client's would "
                    "reveal it): leave it out of the export"
                )
            layout.append(
                (node, key, tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."))
            )
    return layout


def quantized(
    session: Session, mine: int, export: Export, size: float | None
) -> tuple[Layout, np.ndarray]:
    """(layout, q(size * export) then q(size)) as one flat array of ring elements; refused,
    naming client, node and key, if anything is not finite or breaks the overflow bound."""
    what = session.what
    weight = _size_value(size, mine, what)
    layout = _layout(export, mine, what)
    fixed, parties = session.fixed, len(session.members)
    count = sum(math.prod(shape) for _, _, shape, _ in layout)
    flat = np.empty(count + 1, dtype=fixed.dtype)
    flat[count:] = fixed.encode(np.array([weight]), parties, f"{what}: client {mine}'s size")
    at = 0
    for node, key, _shape, _ in layout:
        values = export[node][key].detach().to("cpu", torch.float64).reshape(-1).numpy()
        n = values.size
        where = f"{what}: client {mine}, node {node!r} key {key!r} (times its size {weight:g})"
        flat[at : at + n] = fixed.encode(values * weight, parties, where)
        at += n
    return layout, flat


def check_input(session: Session, mine: int, export: Export, size: float | None) -> None:
    """Refuse, before anything is written, an export or size that cannot be summed securely:
    not floating point, not finite, or above the overflow bound (see soma.secagg.quantize)."""
    session.check_member(mine)
    quantized(session, mine, export, size)


def tensors_of(layout: Layout, flat: np.ndarray) -> dict[str, dict[str, torch.Tensor]]:
    out: dict[str, dict[str, torch.Tensor]] = {}
    at = 0
    for node, key, shape, _ in layout:
        n = math.prod(shape)
        out.setdefault(node, {})[key] = torch.from_numpy(flat[at : at + n].reshape(shape).copy())
        at += n
    return out


def ring_tensors(layout: Layout, flat: np.ndarray) -> dict[str, torch.Tensor]:
    """A masked input's ring elements as one tensor map (one blob): "<i>" is the i-th entry of
    the layout, shaped as it, and "size" the masked size."""
    out: dict[str, torch.Tensor] = {}
    at = 0
    for i, (_, _, shape, _) in enumerate(layout):
        n = math.prod(shape)
        out[str(i)] = torch.from_numpy(flat[at : at + n].reshape(shape).copy())
        at += n
    out["size"] = torch.from_numpy(flat[at:].copy())
    return out


def flat_of(layout: Layout, value: Mapping[str, Any], dtype: type, where: str) -> np.ndarray:
    """A masked input's ring tensors back as one flat array, in layout order, size last."""
    parts = []
    try:
        for i, (node, key, shape, _) in enumerate(layout):
            tensor = value["ring"][str(i)]
            if tuple(tensor.shape) != shape:
                raise SecAggError(
                    f"{where}: node {node!r} key {key!r} is shaped {tuple(tensor.shape)}"
                )
            parts.append(tensor.numpy().reshape(-1))
        parts.append(value["ring"]["size"].numpy().reshape(-1))
    except (KeyError, TypeError, AttributeError):
        raise SecAggError(f"{where}: not a masked input of this layout") from None
    flat = np.concatenate(parts)
    if flat.dtype != dtype or flat.size != sum(math.prod(s) for _, _, s, _ in layout) + 1:
        raise SecAggError(f"{where}: not a masked input of this layout and ring")
    return flat


def layout_of(record: Mapping[str, Any], where: str) -> Layout:
    try:
        return [
            (str(n), str(k), tuple(int(d) for d in s), str(t)) for n, k, s, t in record["layout"]
        ]
    except (KeyError, TypeError, ValueError):
        raise SecAggError(f"{where} has no layout") from None
