"""What a training run exports, and putting it back: weights node by node.

An export is `{node_id: {key: tensor}}`. A node is asked for its weights by the same two
ducks everywhere in soma: `state_dict()` by name (buffers such as BatchNorm's
`running_mean` and `num_batches_tracked` included), or else `parameters()` in order, keyed
`"0"`, `"1"`, ... (text: a map that crosses a store has text keys). A node with neither, or
with an empty answer, has no weights and is simply absent. Optimizer state is never part of
it: momentum is a client's own, and averaging it is not what averaging weights means.

An export is always on CPU, wherever the nodes trained (soma.device): it is what crosses the
store and what strategies do arithmetic on, so it must not depend on which machine made it.
`load` copies it into the nodes wherever they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from soma.errors import ElsewhereError, ExportError, LoadError
from soma.transfer import exact_widening

Export = dict[str, dict[str, torch.Tensor]]


@dataclass(frozen=True)
class Elsewhere:
    """A node trained where it runs, on another machine: the copy here never learnt anything."""

    node: Any
    on: str


def elsewhere(node: Any, on: str) -> Elsewhere:
    """Mark `node` as trained on machine `on`, so exporting or loading it here is refused."""
    return Elsewhere(node, on)


def _live_weights(node_id: str, node: Any) -> dict[str, torch.Tensor]:
    """The node's own tensors (not copies), by the state_dict duck or else the parameters duck."""
    if isinstance(node, Elsewhere):
        raise ElsewhereError(
            f"node {node_id!r} is trained where it runs, on {node.on!r}: its weights are there, "
            "and the copy here never learnt anything"
        )
    if callable(getattr(node, "state_dict", None)):
        state = node.state_dict()
        for key, value in state.items():
            if not isinstance(key, str):
                raise ExportError(f"node {node_id!r}: state_dict key {key!r} is not text")
            if not isinstance(value, torch.Tensor):
                raise ExportError(
                    f"node {node_id!r}: state_dict entry {key!r} is a {type(value).__name__}, "
                    "not a tensor"
                )
        return dict(state)
    if callable(getattr(node, "parameters", None)):
        return {str(i): p for i, p in enumerate(node.parameters())}
    return {}


def _check_node_ids(nodes: Mapping[str, Any]) -> None:
    for node_id in nodes:
        if not isinstance(node_id, str):
            raise ExportError(f"node id {node_id!r} is a {type(node_id).__name__}, not text")


def _snapshot(tensor: torch.Tensor) -> torch.Tensor:
    """A detached copy on CPU, never a view, even of a CPU tensor: the nodes go on training
    after an export, and the export must not change with them.

    A meta tensor has no data to bring to CPU, so it stays a meta copy; the store refuses it
    by name when it is contributed (soma.store.tensorfile).
    """
    if tensor.device.type == "meta":
        return tensor.detach().clone()
    return tensor.detach().to("cpu", copy=True)


def export(nodes: Mapping[str, Any]) -> Export:
    """A snapshot of every node's weights on CPU: detached copies, never views of the live
    tensors, whatever device the nodes are on."""
    _check_node_ids(nodes)
    live = {node_id: _live_weights(node_id, node) for node_id, node in nodes.items()}
    with torch.no_grad():
        return {
            node_id: {key: _snapshot(tensor) for key, tensor in weights.items()}
            for node_id, weights in live.items()
            if weights
        }


def load(
    nodes: Mapping[str, Any],
    state: Mapping[str, Mapping[str, torch.Tensor]],
    *,
    partial: bool = False,
) -> None:
    """Put an export back where it came from, or refuse it having changed nothing.

    Every check (nodes, keys, shapes, dtypes, completeness, values there are to copy, tied
    weights given one value) happens before the first copy, unlike torch's `load_state_dict`,
    which copies what matches before it raises. A dtype fits when it is the live tensor's or
    widens into it exactly (bfloat16 weights kept by a run's `transfer` into a float32
    model: soma.transfer); a narrowing, or a float for a count, is refused.
    `partial=True` allows leaving nodes or keys out (layers kept local, FedBN-style).
    Each source is copied into the live tensor, on whatever device that one is (an export is
    on CPU, the nodes may be on a GPU): the device is the nodes', never the state's.
    """
    copies = _planned_copies(nodes, state, partial)
    _refuse_what_cannot_be_copied(copies)
    with torch.no_grad():
        for copy in copies:
            copy.target.copy_(copy.source)


@dataclass(frozen=True)
class _Copy:
    """One live tensor and what the state gives it, named for the messages."""

    node: str
    key: str
    target: torch.Tensor
    source: torch.Tensor

    @property
    def where(self) -> str:
        return f"node {self.node!r} key {self.key!r}"


def _planned_copies(
    nodes: Mapping[str, Any], state: Mapping[str, Mapping[str, torch.Tensor]], partial: bool
) -> list[_Copy]:
    """Every (live tensor, source) pair the state asks for, each checked against its target."""
    _check_node_ids(nodes)
    if not isinstance(state, Mapping):
        raise LoadError(f"the state is a {type(state).__name__}, not a map of nodes")
    for node_id in state:
        if node_id not in nodes:
            raise LoadError(f"node {node_id!r} is in the state but not in this training run")
    live: dict[str, dict[str, torch.Tensor]] = {}
    for node_id, node in nodes.items():
        if node_id in state or not partial:
            live[node_id] = _live_weights(node_id, node)
    copies: list[_Copy] = []
    for node_id, weights in live.items():
        if node_id not in state and weights:
            raise LoadError(
                f"node {node_id!r} is left out of the state (pass partial=True to keep it local)"
            )
        given = state.get(node_id, {})
        if not isinstance(given, Mapping):
            raise LoadError(
                f"node {node_id!r} in the state is a {type(given).__name__}, "
                "not a map of tensors by key"
            )
        copies.extend(_node_copies(node_id, weights, given, partial))
    return copies


def _node_copies(
    node_id: str, weights: dict[str, torch.Tensor], given: Mapping[str, Any], partial: bool
) -> list[_Copy]:
    for key in given:
        if key not in weights:
            raise LoadError(f"node {node_id!r} has no key {key!r} (it has {sorted(weights)})")
    copies = []
    for key, target in weights.items():
        if key not in given:
            if partial:
                continue
            raise LoadError(
                f"node {node_id!r} key {key!r} is left out of the state "
                "(pass partial=True to keep it local)"
            )
        source = given[key]
        if not isinstance(source, torch.Tensor):
            raise LoadError(
                f"node {node_id!r} key {key!r}: a {type(source).__name__}, not a tensor"
            )
        if source.shape != target.shape:
            raise LoadError(
                f"node {node_id!r} key {key!r}: shape {tuple(source.shape)} in the state, "
                f"{tuple(target.shape)} in the training run"
            )
        if not exact_widening(source.dtype, target.dtype):
            raise LoadError(
                f"node {node_id!r} key {key!r}: dtype {source.dtype} in the state, "
                f"{target.dtype} in the training run"
            )
        copies.append(_Copy(node_id, key, target, source))
    return copies


def _refuse_what_cannot_be_copied(copies: list[_Copy]) -> None:
    """What only shows when copying, refused before the first copy: a meta tensor (a shape
    with no values; copying from one raises half way through a load), and one live tensor
    under two keys (tied weights) given two different values (the last would silently win)."""
    for copy in copies:
        if copy.source.device.type == "meta":
            raise LoadError(
                f"{copy.where} is a meta tensor in the state: it has a shape but no values to load"
            )
        if copy.target.device.type == "meta":
            raise LoadError(
                f"{copy.where} is a meta tensor in the training run: it has no memory to load "
                "values into (materialize the node first, e.g. with to_empty)"
            )
    first: dict[tuple, _Copy] = {}
    for copy in copies:
        seen = first.setdefault(_memory(copy.target), copy)
        if seen is not copy and not _same_values(seen.source, copy.source):
            raise LoadError(
                f"{seen.where} and {copy.where} are one tensor in the training run (tied "
                "weights), and the state gives them different values"
            )


def _memory(tensor: torch.Tensor) -> tuple:
    """What makes two tensors the same live tensor: the same view of the same storage."""
    if tensor.layout != torch.strided:
        return (id(tensor),)
    return (
        tensor.device,
        tensor.untyped_storage().data_ptr(),
        tensor.storage_offset(),
        tuple(tensor.shape),
        tensor.stride(),
        tensor.dtype,
    )


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    b = b.to(a.device)
    if torch.equal(a, b):
        return True
    if a.is_floating_point() or a.is_complex():
        return bool(torch.allclose(a, b, rtol=0.0, atol=0.0, equal_nan=True))
    return False
