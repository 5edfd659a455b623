"""What is refused about a round before anything is claimed: an export that would poison
the average (a NaN, an infinity), sizes that do not add up, two different networks, a
strategy the meeting cannot run; a refusal names the client, and its record, to blame.

Kept apart so that `contribute` and every process that may average refuse the same things
with the same words. A refusal is about one client's input (`refuse_input`: its record, its
weights, their values and shapes, its size, its signature) or about the round as a whole
(`check_round`: the start or state missing, sizes adding to nothing, the strategy, the
tree). Under a quorum an input refused is left out, by every process alike (the refusals are
a function of the store alone), and the round goes on if the quorum is still there
(`decide`); without one, the first refusal stops the round, as it always did.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy
import torch

from soma.arithmetic import Signature, first_difference
from soma.errors import SomaError
from soma.nodes import Export
from soma.round import quorum, records, signed
from soma.round.meeting import Input, Meeting
from soma.round.once import RoundError, RoundIncomplete
from soma.round.quorum import _left_out_text, present
from soma.round.verified_values import VerifiedValues
from soma.store import Store, codecs
from soma.store.errors import StoreError, StoreUnavailable, UnknownDigest
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
            if (tensor.dtype.is_floating_point or tensor.dtype.is_complex) and not _finite(tensor):
                bad = int((~torch.isfinite(tensor)).sum())
                raise Refused(
                    f"client {mine}: node {node_id!r} key {key!r} holds {bad} value"
                    f"{'s' if bad > 1 else ''} that are NaN or infinite; refused, so that it "
                    "cannot poison the average"
                )


_NUMPY_FLOATS = (torch.float16, torch.float32, torch.float64)


def _finite(tensor: torch.Tensor) -> bool:
    """Whether every value of a float (or complex) tensor is finite: numpy's test where
    numpy holds the tensor as it is (a CPU float tensor outside autograd: a fraction of
    torch's two dispatches on a small tensor, ~4 a contribution), torch's elsewhere."""
    if tensor.dtype in _NUMPY_FLOATS and tensor.device.type == "cpu" and not tensor.requires_grad:
        return bool(numpy.isfinite(tensor.numpy()).all())
    return bool(torch.isfinite(tensor).all())


def signature(store: Store, digest: str) -> Signature:
    """An export's nodes, keys, shapes and dtypes, from its record and the tensors' headers."""
    tree, _ = codecs.parse_record(store.get_record(digest), str(store.blob_path(digest)))
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


def _transient(error: BaseException) -> bool:
    """A store that did not answer says nothing about the client: never a refusal."""

    return isinstance(error, StoreUnavailable)


def check_input(
    store: Store, meeting: Meeting, given: Input, *, kept: VerifiedValues | None = None
) -> Signature:
    """A client's weights (and extra) as the averaging will read them: its record says an
    export, every tensor file's header is sound (offsets, sizes) and every value finite;
    checked by every process before anything is claimed, naming the client and its record,
    however the record got there (`contribute` checks too, but a record may be written by
    hand). The weights' signature (nodes, keys, shapes, dtypes). What was read, verified and
    found sound is kept in `kept` (by digest) for the averaging to fold without reading it
    again."""

    name = meeting.client(given.client)
    found: Signature = {}
    for digest, what in [(given.weights, "weights"), (given.extra, "extra")]:
        if digest is None:
            continue
        whose = f"{meeting.what}: client {given.client}'s {what} {digest} (record {name!r})"
        try:
            value = store.recall_digest(digest, lazy=True)
        except (StoreError, OSError) as error:
            if _transient(error):
                raise
            if isinstance(error, UnknownDigest) and not store.has(digest):  # asked only now
                raise RoundError(
                    f"{meeting.what}: client {given.client}'s {what} {digest} are not in the store"
                ) from None
            raise Refused(
                f"{whose} cannot be read, refused before anything is claimed: "
                f"{type(error).__name__}: {error}"
            ) from None
        try:
            _check_finite(value, given.client)
        except RoundError as error:
            raise type(error)(f"{whose}: {error}") from None
        if kept is not None:
            kept.keep(digest, value)
        if what == "weights":
            found = {
                node: {key: (tuple(t.shape), t.dtype) for key, t in tensors.items()}
                for node, tensors in value.items()
            }
    return found


# --- one client's input --------------------------------------------------------------------


def refuse_input(
    store: Store,
    meeting: Meeting,
    given: Input,
    start: Signature | None,
    *,
    kept: VerifiedValues | None = None,
) -> Signature:
    """Everything about one client's input alone, refused naming the client (a RoundError,
    a RecordError, a SigningError...): its weights in the store and sound, its size, its
    network the round's start's (when there is one), its signed record. Its signature."""
    try:
        _check_size(given.size, given.client)
    except RoundError as error:
        raise RoundError(f"{meeting.what}: {error}") from None
    theirs = check_input(store, meeting, given, kept=kept)
    if start is not None and theirs != start:  # spelled only where they differ
        problem = first_difference(start, theirs, "the round's start", f"client {given.client}")
        if problem:
            raise RoundError(f"{meeting.what}: two different networks: {problem}")
    signed.check_signed_inputs(store, meeting, [given])
    return theirs


def reason(meeting: Meeting, client: int, error: BaseException) -> str:
    """Why a client's input is refused, naming the run, the round and the client's record."""
    text = str(error)
    if not text.startswith(meeting.what):
        text = f"{meeting.what}: {text}"
    name = meeting.client(client)
    return text if name in text else f"{text} (client {client}'s record {name!r})"


def _odd_ones(values: Mapping[int, Hashable]) -> tuple[int, set[int]]:
    """The clients whose value is not the one most of them hold (ties: the lowest-numbered
    client's), and the lowest client that holds it: who to refuse when clients disagree
    with nothing (no start) to tell which is right."""
    counts: dict[Hashable, list[int]] = {}
    for k in sorted(values):
        counts.setdefault(values[k], []).append(k)
    held = max(counts.values(), key=lambda ks: (len(ks), -ks[0]))
    return held[0], {k for k in values if k not in held}


def _shape_key(found: Signature) -> str:
    return repr(sorted((n, sorted((k, tuple(s), str(d)) for k, (s, d) in keys.items()))
                       for n, keys in found.items()))  # fmt: skip


def _disagreeing(
    meeting: Meeting, inputs: Sequence[Input], found: Mapping[int, Signature], *, start: bool
) -> dict[int, RoundError]:
    """Among inputs each sound on its own: without a start, those whose network is not
    most clients'; those that say a size where most do not, or the other way round."""
    out: dict[int, RoundError] = {}
    if not start and found:
        model, odd = _odd_ones({k: _shape_key(s) for k, s in found.items()})
        for k in sorted(odd):
            problem = first_difference(found[model], found[k], f"client {model}", f"client {k}")
            out[k] = RoundError(f"{meeting.what}: two different networks: {problem}")
    said = {i.client: i.size is not None for i in inputs if i.client not in out}
    if said:
        _, odd = _odd_ones(said)
        sizes = sorted(k for k, says in said.items() if says)
        silent = sorted(k for k, says in said.items() if not says)
        for k in sorted(odd):
            out[k] = RoundError(
                f"{meeting.what}: clients {sizes} said a size and clients {silent} did not "
                f"(client {k} is refused, as fewer did what it did); all of a round's clients "
                "say a size, or none does"
            )
    return out


# --- the round as a whole ------------------------------------------------------------------


def _check_total(inputs: Sequence[Input], where: str) -> None:
    """Clients that said sizes weigh something in all."""
    if not inputs or inputs[0].size is None:
        return
    try:
        total = math.fsum(float(i.size) for i in inputs)
    except OverflowError:
        total = math.inf
    if not math.isfinite(total) or total == 0:
        raise RoundError(
            f"{where}: the clients' sizes add up to {total!r}; "
            "they must add up to a finite number above zero"
        )


def _check_stored(store: Store, meeting: Meeting) -> None:
    for digest, what in [(meeting.start, "the round's start"), (meeting.state, "its state")]:
        if digest is not None and not store.has(digest):
            raise RoundError(f"{meeting.what}: {what} {digest} is not in the store")


def check_round(
    store: Store, meeting: Meeting, strategy: Strategy, inputs: Sequence[Input]
) -> None:
    """What is refused about the round as a whole, over the inputs it will average."""
    where = meeting.what
    _check_total(inputs, where)
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


# --- deciding ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """What a round averages: the inputs accepted, and each refused client's reason."""

    accepted: list[Input]
    refused: dict[int, str] = field(default_factory=dict)


def leaves_refused_out(meeting: Meeting) -> bool:
    """A refused input is left out only where the round may go on without somebody (a
    quorum below its members); where all must come, a refusal stops the round."""
    return meeting.may_go_on_without_some


def _refusals(
    store: Store, meeting: Meeting, inputs: Sequence[Input], kept: VerifiedValues | None = None
) -> dict[int, BaseException]:
    """Each client whose input is refused, and why, in client order: the same for every
    process that reads the same store."""
    start = None if meeting.start is None else signature(store, meeting.start)
    errors: dict[int, BaseException] = {}
    found: dict[int, Signature] = {}
    for i in sorted(inputs, key=lambda i: i.client):
        try:
            found[i.client] = refuse_input(store, meeting, i, start, kept=kept)
        except SomaError as error:
            if _transient(error):
                raise
            errors[i.client] = error
    sound = [i for i in inputs if i.client not in errors]
    errors.update(_disagreeing(meeting, sound, found, start=start is not None))
    return dict(sorted(errors.items()))


def decide(
    store: Store,
    meeting: Meeting,
    strategy: Strategy,
    inputs: Sequence[Input],
    unreadable: Mapping[int, str] | None = None,
    *,
    kept: VerifiedValues | None = None,
) -> Decision:
    """Everything that can be refused about a round, refused before anything is claimed;
    under a quorum, refused inputs left out (`unreadable`: clients whose records could not
    be read, and why) and the rest averaged if they are still the quorum. The inputs' values
    read and verified are kept in `kept` (soma.round.verified_values)."""
    for i in inputs:
        meeting.check_client(i.client)
    _check_stored(store, meeting)
    with store.reading():  # ~4 blobs an input, from fan-out folders each opened once
        errors = _refusals(store, meeting, inputs, kept) if inputs else {}
    if errors and not leaves_refused_out(meeting):
        raise next(iter(errors.values()))
    refused = {**(unreadable or {}), **{k: reason(meeting, k, e) for k, e in errors.items()}}
    accepted = [i for i in inputs if i.client not in refused]
    if not accepted or not quorum._enough(accepted, meeting.needed):
        _raise_below_quorum(store, meeting, accepted, refused)
    check_round(store, meeting, strategy, accepted)
    return Decision(accepted, dict(sorted(refused.items())))


def _raise_below_quorum(
    store: Store, meeting: Meeting, accepted: Sequence[Input], refused: Mapping[int, str]
) -> None:
    came = {i.client for i in accepted}
    dropped = quorum.roll_call(store, meeting, present(store, meeting))[1]
    left_out = {
        k: records.refused(refused[k]) if k in refused else dropped.get(k, "never came")
        for k in meeting.members
        if k not in came
    }
    refusing = f", {len(refused)} refused" if refused else ""
    raise RoundIncomplete(
        f"{meeting.what}: {len(accepted)} of {len(meeting.members)} clients came{refusing}, "
        f"fewer than the quorum of {meeting.needed}: {_left_out_text(left_out)}",
        sorted(left_out),
    )


def check_inputs(
    store: Store, meeting: Meeting, strategy: Strategy, inputs: Sequence[Input]
) -> None:
    """Everything that can be refused about a round, refused before anything is claimed
    (under a quorum, refused inputs are left out: see `decide`)."""
    decide(store, meeting, strategy, inputs)


def tree_refusal(strategy: str) -> str:
    return (
        f"strategy {strategy!r} needs every client's update, and hierarchical averaging "
        "(tree) hands it only their weighted mean: use a strategy that steps from the mean "
        f"({', '.join(mean_strategies())}), or no tree"
    )
