"""What is refused about a round before anything is claimed: an export that would poison
the average (a NaN, an infinity), sizes that do not add up, two different networks, a
strategy the meeting cannot run; a refusal names the client, and its record, to blame.

Kept apart so that `contribute` and every process that may average refuse the same things
with the same words.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from soma.arithmetic import Signature, first_difference
from soma.nodes import Export
from soma.round import roll
from soma.round.meeting import Input, Meeting
from soma.round.once import RoundError, RoundIncomplete
from soma.round.roll import _left_out_text, arrivals, present
from soma.store import Store, codecs
from soma.strategies import (
    Arrival,
    Strategy,
    check_arrivals,
    check_strategy_state,
    mean_strategies,
    needs_previous,
    takes_mean,
)


def _check_size(size: object, client: int) -> None:
    if size is not None and (
        isinstance(size, bool)
        or not isinstance(size, (int, float))
        or not math.isfinite(size)
        or not size >= 0
    ):
        raise RoundError(f"client {client}: size {size!r} must be a finite number >= 0")


class Refused(RoundError):
    """A client's export would poison the average (a NaN or an infinity): refused by name."""


def _check_finite(export: Export, mine: int) -> None:
    """Every float of the export is finite, or the refusal names the client, node and key."""
    import torch

    if not isinstance(export, Mapping):
        raise RoundError(f"client {mine}: its export is a {type(export).__name__}, not a map")
    for node_id, keys in export.items():
        if not isinstance(keys, Mapping):
            raise RoundError(f"client {mine}: node {node_id!r} is not a map of tensors")
        for key, tensor in keys.items():
            if not isinstance(tensor, torch.Tensor):
                raise RoundError(
                    f"client {mine}: node {node_id!r} key {key!r} is a "
                    f"{type(tensor).__name__}, not a tensor"
                )
            if (tensor.dtype.is_floating_point or tensor.dtype.is_complex) and not bool(
                torch.isfinite(tensor).all()
            ):
                bad = int((~torch.isfinite(tensor)).sum())
                raise Refused(
                    f"client {mine}: node {node_id!r} key {key!r} holds {bad} value"
                    f"{'s' if bad > 1 else ''} that are NaN or infinite; refused, so that it "
                    "cannot poison the average"
                )


def signature(store: Store, digest: str) -> Signature:
    """An export's nodes, keys, shapes and dtypes, from its record and the tensors' headers."""
    tree, _ = codecs.parse_record(store.get(digest), str(store.blob_path(digest)))
    if not isinstance(tree, dict):
        raise RoundError(f"value {digest} is not an export (a {type(tree).__name__})")
    out: Signature = {}
    for node_id, node in tree.items():
        tag = node.get("$tensors") if isinstance(node, dict) and len(node) == 1 else None
        if not isinstance(tag, str):
            raise RoundError(f"value {digest}: node {node_id!r} is not a map of tensors")
        described = store.describe(tag)
        out[node_id] = {key: (shape, dtype) for key, (dtype, shape) in described.items()}
    return out


def check_input(store: Store, meeting: Meeting, given: Input) -> Signature:
    """A client's weights (and extra) as the averaging will read them: its record says an
    export, every tensor file's header is sound (offsets, sizes) and every value finite;
    checked by every process before anything is claimed, naming the client and its record,
    however the record got there (`contribute` checks too, but a record may be written by
    hand). The weights' signature (nodes, keys, shapes, dtypes)."""
    from soma.store.errors import StoreError

    name = meeting.client(given.client)
    found: Signature = {}
    for digest, what in [(given.weights, "weights"), (given.extra, "extra")]:
        if digest is None:
            continue
        whose = f"{meeting.what}: client {given.client}'s {what} {digest} (record {name!r})"
        try:
            value = store.recall_digest(digest, lazy=True)
        except (StoreError, OSError) as error:
            raise Refused(
                f"{whose} cannot be read, refused before anything is claimed: "
                f"{type(error).__name__}: {error}"
            ) from None
        try:
            _check_finite(value, given.client)
        except RoundError as error:
            raise type(error)(f"{whose}: {error}") from None
        if what == "weights":
            found = {
                node: {key: (tuple(t.shape), t.dtype) for key, t in tensors.items()}
                for node, tensors in value.items()
            }
    return found


def _check_sizes(inputs: Sequence[Input], where: str) -> None:
    """All of a round's clients say a size, or none does; and they weigh something in all."""
    said = [i.client for i in inputs if i.size is not None]
    if said and len(said) != len(inputs):
        silent = [i.client for i in inputs if i.size is None]
        raise RoundError(
            f"{where}: clients {said} said a size and clients {silent} did not; "
            "all of a round's clients say a size, or none does"
        )
    for i in inputs:
        _check_size(i.size, i.client)
    if said:
        try:
            total = math.fsum(float(i.size) for i in inputs)
        except OverflowError:
            total = math.inf
        if not math.isfinite(total) or total == 0:
            raise RoundError(
                f"{where}: the clients' sizes add up to {total!r}; "
                "they must add up to a finite number above zero"
            )


def check_inputs(
    store: Store, meeting: Meeting, strategy: Strategy, inputs: Sequence[Input]
) -> None:
    """Everything that can be refused about a round, refused before anything is claimed."""
    where = meeting.what
    for i in inputs:
        meeting.check_client(i.client)
    if not inputs or not roll._enough(inputs, meeting.needed):
        came = {i.client for i in inputs}
        dropped = arrivals(store, meeting, present(store, meeting))[1]
        left_out = {k: dropped.get(k, "never came") for k in meeting.members if k not in came}
        raise RoundIncomplete(
            f"{where}: {len(inputs)} of {len(meeting.members)} clients came, fewer than the "
            f"quorum of {meeting.needed}: {_left_out_text(left_out)}",
            sorted(left_out),
        )
    _check_sizes(inputs, where)
    for digest, what in [(meeting.start, "the round's start"), (meeting.state, "its state")]:
        if digest is not None and not store.has(digest):
            raise RoundError(f"{where}: {what} {digest} is not in the store")
    first: tuple[int, Signature] | None = None
    for i in inputs:
        for digest, what in [(i.weights, "weights"), (i.extra, "extra")]:
            if digest is not None and not store.has(digest):
                raise RoundError(
                    f"{where}: client {i.client}'s {what} {digest} are not in the store"
                )
        theirs = check_input(store, meeting, i)
        if first is None:
            first = (i.client, theirs)
            if meeting.start is not None:
                problem = first_difference(
                    signature(store, meeting.start),
                    theirs,
                    "the round's start",
                    f"client {i.client}",
                )
                if problem:
                    raise RoundError(f"{where}: two different networks: {problem}")
            continue
        problem = first_difference(first[1], theirs, f"client {first[0]}", f"client {i.client}")
        if problem:
            raise RoundError(f"{where}: two different networks: {problem}")
    if meeting.start is None and needs_previous(strategy):
        raise RoundError(
            f"{where}: strategy {meeting.strategy!r} steps from the weights the round started "
            "from, and nobody said which (pass start=)"
        )
    if meeting.tree is not None and not takes_mean(strategy):
        raise RoundError(f"{where}: {tree_refusal(meeting.strategy)}")
    arrived = [Arrival(i.client, i.size, i.extra is not None) for i in inputs]
    check_arrivals(strategy, arrived, clients=meeting.clients)
    check_strategy_state(
        strategy,
        lambda: None if meeting.state is None else store.recall_digest(meeting.state),
        clients=meeting.clients,
    )


def tree_refusal(strategy: str) -> str:
    return (
        f"strategy {strategy!r} needs every client's update, and hierarchical averaging "
        "(tree) hands it only their weighted mean: use a strategy that steps from the mean "
        f"({', '.join(mean_strategies())}), or no tree"
    )
