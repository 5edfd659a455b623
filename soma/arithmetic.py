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

from collections.abc import Mapping
from typing import Any

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
