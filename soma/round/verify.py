"""An average checked by whoever uses it, not taken on faith.

Every average is a deterministic function of what its record names: the round's start and
the strategy's state (digests in the meeting's identity), the clients' inputs (each the
weights of a record its client signed) and the strategy (bound to the round and the run's
seed). So whoever starts a round from an average another process published can recompute it
and compare digests (`verify_average`), and `soma audit` does the same for every round of a
run afterwards. A roster member who publishes any other model, however well signed, is
refused naming the round, the signer and the first tensor that differs.

How much is checked is the meeting's `verify` (config `verify_averages`):

- `recompute` (the default when the run has a roster or spans sites): the signature, the
  record against the meeting (its start, state, strategy, members), each input against its
  client's signed record, and the weights and state recomputed bit for bit. It costs one
  more aggregation, in each process that did not compute the average itself: nothing in a
  single-process simulation, one per other site, one per other client process under
  `soma client`;
- `signature`: the signature only (by a roster member allowed to average), as before.

A record is checked against its round's identity field by field (`check_identity`): what
the record says it is (a tree, a secure sum, its strategy or start) never chooses how it is
checked; the meeting does. A tree of partial means is recomputed node by node from its
signed inputs, reading only (`soma.round.tree.mean_of`). What cannot be recomputed is said,
never passed silently as recomputed (`NotRecomputable`): a secure sum (nobody sees its
inputs; its session's messages are checked by soma.secagg) and a strategy that draws private
noise (central DP-FedAvg: the noise is fresh from the operating system, so the record and its
signed inputs are checked, not the weights).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from soma.arithmetic import recomputed_under
from soma.errors import SomaError
from soma.nodes import Export
from soma.round import records, signed, tree
from soma.round import signing as signatures
from soma.round.meeting import Input, Meeting
from soma.round.records import AverageRecord
from soma.store import Store
from soma.store.values import value_digest
from soma.strategies import Strategy, UntrustedStrategy, at_round, uniform

log = logging.getLogger(__name__)

RECOMPUTE = "recompute"
SIGNATURE = "signature"
MODES = (RECOMPUTE, SIGNATURE)


class AverageRefused(signatures.SigningError):
    """An average that is not what it says it is: the message names the round, who signed it
    and what differs. Nobody trains from it."""


class NotRecomputable(SomaError):
    """An average that cannot be recomputed from what the store holds, and why."""


@dataclass(frozen=True)
class Recomputed:
    """An average's weights and state as its inputs give them (digests), and the weights."""

    weights: str
    state: str | None
    exported: Export


def not_recomputable(meeting: Meeting, strategy: Strategy) -> str | None:
    """Why the meeting's average cannot be recomputed from the store, or None when it can.
    Decided by the meeting (the round's identity), never by what the record says it is."""
    if meeting.secure is not None:
        return "a secure sum (nobody sees its inputs; its session's messages are checked)"
    if not getattr(strategy, "recomputable", True):
        return f"strategy {meeting.strategy!r} draws private noise, which nobody can draw again"
    return None


def uses_tree(meeting: Meeting, inputs: int) -> bool:
    """Whether a round of `inputs` inputs is averaged as a tree: only where the tree has more
    than one node (up to `fan_in` inputs it is one node, the flat average bit for bit)."""
    return meeting.tree is not None and inputs > meeting.tree


def inputs_of(record: AverageRecord) -> list[Input]:
    """The inputs an average record lists (of a plain or tree round: each names weights)."""
    return [
        Input(int(i["client"]), i["weights"], i.get("size"), i.get("extra"), i.get("record"))
        for i in record.inputs
    ]


# What an average record holds beyond its round's identity: what was averaged and by whom.
# Every other field of the record is the identity's, filled from the meeting by the one
# builder (records.average_record), and is compared with it field by field.
_CONTENT = frozenset(
    {"left_out", "inputs", "weights", "state", "averaged_by", "tree", "secure", "extra"}
)
IDENTITY_FIELDS = tuple(f.name for f in dataclasses.fields(AverageRecord) if f.name not in _CONTENT)


def _shape(record: AverageRecord, what: str) -> tuple[Any, Any]:
    """The record's tree fan-in and secure threshold (None where it says none), refused
    when it says one in a form no averaging writes."""
    tree = record.tree
    if tree is not None and not (isinstance(tree, Mapping) and {"fan_in", "mean"} <= set(tree)):
        raise AverageRefused(f"{what} says tree {tree!r}, which is no tree's record")
    secure = record.secure
    if secure is not None and not (isinstance(secure, Mapping) and "threshold" in secure):
        raise AverageRefused(f"{what} says secure {secure!r}, which is no secure sum's record")
    return (
        None if tree is None else tree["fan_in"],
        None if secure is None else secure["threshold"],
    )


def check_identity(meeting: Meeting, record: AverageRecord) -> None:
    """Refuse a record that is not of this meeting: every field of the round's identity
    (`IDENTITY_FIELDS`, as `records.average_record` fills them from the meeting) must equal
    the record's, and so must how it was averaged: a tree exactly where the meeting's fan-in
    makes one of its inputs, a secure sum exactly where the meeting is secure, its inputs
    plain weights or secure entries accordingly. What a record says it is never chooses how
    it is checked."""
    what = f"{meeting.what}: the average record"
    wanted = records.average_record(
        meeting, left_out={}, inputs=[], weights="", state=None, averaged_by=None
    )
    for key in IDENTITY_FIELDS:
        found, want = getattr(record, key), getattr(wanted, key)
        if isinstance(want, Mapping):
            found, want = (dict(found) if isinstance(found, Mapping) else found), dict(want)
        if found != want:
            raise AverageRefused(f"{what} says {key} {found!r}; the meeting's is {want!r}")
    secure_entries = [isinstance(i, Mapping) and i.get("secure") is True for i in record.inputs]
    if meeting.secure is None and any(secure_entries):
        raise AverageRefused(f"{what} lists secure-sum entries as inputs; the round is not secure")
    if meeting.secure is not None and not all(secure_entries):
        raise AverageRefused(
            f"{what} lists plain weights as inputs; the round is a secure sum (threshold "
            f"{meeting.secure}), whose record lists none"
        )
    if any(not (isinstance(i, Mapping) and "client" in i) for i in record.inputs):
        raise AverageRefused(f"{what} lists an input that names no client")
    fan_in = meeting.tree if uses_tree(meeting, len(record.inputs)) else None
    threshold = meeting.secure
    found_fan_in, found_threshold = _shape(record, what)
    if found_fan_in != fan_in:
        raise AverageRefused(
            f"{what} says tree {found_fan_in!r}; the meeting's is {fan_in!r} for "
            f"{len(record.inputs)} inputs (fan-in {meeting.tree!r})"
        )
    if found_threshold != threshold:
        raise AverageRefused(
            f"{what} says secure {found_threshold!r}; the meeting's is {threshold!r}"
        )


def check_consistent(store: Store, meeting: Meeting, record: AverageRecord) -> None:
    """Refuse a record that is not of this meeting (`check_identity`), whose inputs and
    left-out are not exactly the members, or whose inputs are not what their clients'
    records (signed, with a roster) say they brought."""
    what = f"{meeting.what}: the average record"
    check_identity(meeting, record)
    if meeting.secure is not None:
        came = [int(i["client"]) for i in record.inputs]
        left = [e.get("client") for e in record.left_out]
        if len(set(came)) != len(came) or sorted(came + left) != meeting.members:
            raise AverageRefused(
                f"{what} lists inputs of clients {came} and left out {left}: not each of the "
                f"members {meeting.members} once"
            )
        return  # a secure sum's inputs are its session's messages, checked by soma.secagg
    inputs = inputs_of(record)
    came = [i.client for i in inputs]
    left = [e.get("client") for e in record.left_out]
    if len(set(came)) != len(came) or sorted(came + left) != meeting.members:
        raise AverageRefused(
            f"{what} lists inputs of clients {came} and left out {left}: not each of the "
            f"members {meeting.members} once"
        )
    if meeting.signing is not None:
        signed.check_signed_inputs(store, meeting, inputs)
        return
    for i in inputs:  # unsigned: at least the record each input names is the client's
        if i.record is not None and store.resolve(meeting.client(i.client)) != i.record:
            raise AverageRefused(
                f"{what}: client {i.client}'s input names record {i.record[:12]}, which is "
                f"not the record at {meeting.client(i.client)!r}"
            )


def _strategy(meeting: Meeting) -> Strategy:
    """The meeting's strategy; one named by the store that is not built in is never
    imported, and its average is said not recomputable."""
    try:
        return meeting.strategy_object()
    except UntrustedStrategy as error:
        raise NotRecomputable(
            f"{meeting.what}: its average cannot be recomputed: {error}"
        ) from None


def recompute(store: Store, meeting: Meeting, record: AverageRecord) -> Recomputed:
    """The average `record` recomputed from its inputs, its start, its state and the
    meeting's strategy (bound to the round and the seed, as the averager bound it); a tree
    round's node by node (`tree.mean_of`: each node's partial mean from its children, in
    the order the averaging folded them, nothing written), the root's mean then stepped by
    the strategy."""
    strategy = _strategy(meeting)
    why = not_recomputable(meeting, strategy)
    if why is not None:
        raise NotRecomputable(f"{meeting.what}: its average cannot be recomputed: {why}")
    previous = None if meeting.start is None else store.recall_digest(meeting.start, lazy=True)
    state = None if meeting.state is None else store.recall_digest(meeting.state)
    bound = at_round(strategy, round=meeting.round, seed=meeting.config.get("seed"))
    inputs = inputs_of(record)
    if uses_tree(meeting, len(inputs)):
        assert meeting.tree is not None and record.tree is not None  # check_identity's
        leaves = tree.leaves_of(inputs, uniform=uniform(strategy))
        mean, weight = tree.mean_of(store, leaves, meeting.tree)
        root = value_digest(mean)
        if (root, weight) != (record.tree["mean"], record.tree.get("weight")):
            raise AverageRefused(
                f"{meeting.what}: the average record's tree root is mean "
                f"{str(record.tree['mean'])[:12]}, weight {record.tree.get('weight')!r}; its "
                f"inputs give mean {root[:12]}, weight {weight!r}"
            )
        weights, new_state = bound.from_mean(previous, mean, state, clients=meeting.clients)
    else:
        weights, new_state = bound.aggregate(
            previous, (i.update(store) for i in inputs), state, clients=meeting.clients
        )
    return Recomputed(
        value_digest(weights), None if new_state is None else value_digest(new_state), weights
    )


def first_difference(published: Export, recomputed: Export) -> str:
    """The first node and key (sorted) where two exports differ, and how."""
    nodes = sorted(set(published) | set(recomputed))
    for node in nodes:
        mine, theirs = recomputed.get(node), published.get(node)
        if mine is None or theirs is None:
            return f"node {node!r} is {'missing from' if theirs is None else 'extra in'} it"
        for key in sorted(set(mine) | set(theirs)):
            a, b = mine.get(key), theirs.get(key)
            if a is None or b is None:
                return f"{node}.{key} is {'missing from' if b is None else 'extra in'} it"
            if a.shape != b.shape or a.dtype != b.dtype:
                return (
                    f"{node}.{key} is {b.dtype} {tuple(b.shape)}; its inputs give "
                    f"{a.dtype} {tuple(a.shape)}"
                )
            if not torch.equal(a, b):
                gap = (a.double() - b.double()).abs().max().item()
                return f"{node}.{key} differs (by up to {gap:.3g})"
    return "its weights are the same tensors under another record"


def verify_average(
    store: Store, meeting: Meeting, digest: str, *, mode: str | None = None
) -> str | None:
    """Refuse (AverageRefused) the meeting's average `digest` unless it is what it says:
    signed by a member allowed to average, and (`recompute`) recomputed bit for bit. What
    was not recomputed, and why (None: recomputed, or only signatures were asked for)."""
    signer = signed.check_average(store, meeting, digest)
    if (mode or meeting.verifies) != RECOMPUTE:
        return None
    record = records.read_average(store, digest)
    check_consistent(store, meeting, record)
    try:
        why = not_recomputable(meeting, _strategy(meeting))
    except NotRecomputable as error:
        why = str(error)
    if why is not None:
        log.info(
            "%s: its average's signature and record checked, not recomputed: %s", meeting.what, why
        )
        return why
    found = recompute(store, meeting, record)
    if (found.weights, found.state) == (record.weights, record.state):
        return None
    by = "nobody's key (the run has no roster)" if signer is None else f"client {signer}"
    if found.weights != record.weights:
        published = store.recall_digest(record.weights, lazy=True)
        assert isinstance(published, dict)
        differs = first_difference(published, found.exported)
    else:
        differs = f"its strategy state {str(record.state)[:12]} is not {str(found.state)[:12]}"
    raise AverageRefused(
        f"{meeting.what}: the average {digest[:12]} signed by {by} is not what its inputs "
        f"give: {differs} ({recomputed_under()}); refused, nobody trains from it"
    )


def meeting_from_about(
    store: Store,
    run: str,
    round: int,
    key: str,
    signing: signatures.Signing | None,
    *,
    verify: str | None = None,
) -> Meeting:
    """The meeting keyed `key` rebuilt from its `about` record (checked: the record hashes
    to the key, and it names the roster `signing` has, or none). Its strategy is named by
    the store: only a built-in one is ever loaded (`Meeting.trusted`)."""
    from soma.round import layout

    prefix = layout.meeting(run, round, key)
    name = layout.about(prefix)
    digest = store.resolve(name)
    if digest is None:
        raise records.RecordError(f"round {round} of run {run!r}: no meeting record at {name!r}")
    about = store.recall_digest(digest)
    if not isinstance(about, Mapping):
        raise records.RecordError(f"{name!r} (record {digest[:12]}) is not a meeting's record")
    roster = about.get("roster")
    if roster != (None if signing is None else signing.digest):
        given = "none" if signing is None else signing.digest[:12]
        raise signatures.SigningError(
            f"round {round} of run {run!r}: its meeting names roster {str(roster)[:12]}; the "
            f"roster given is {given}"
        )
    meeting = _meeting(run, round, about, signing, verify)
    if meeting.key != key:
        raise records.RecordError(
            f"{name!r} (record {digest[:12]}) describes meeting {meeting.key[:12]}, not {key[:12]}"
        )
    return meeting


def _meeting(
    run: str,
    round: int,
    about: Mapping[str, Any],
    signing: signatures.Signing | None,
    verify: str | None,
) -> Meeting:
    expected = about.get("expected")
    return Meeting(
        run=run,
        round=round,
        clients=about["clients"],
        start=about.get("start"),
        state=about.get("state"),
        strategy=about.get("strategy", "fedavg"),
        options=dict(about.get("options") or {}),
        config=dict(about.get("config") or {}),
        expected=None if expected is None else tuple(expected),
        quorum=about.get("quorum"),
        tree=about.get("tree"),
        secure=about.get("secure"),
        signing=signing,
        verify=verify,
        trusted=False,  # named by the store: only a built-in strategy loads
    )
