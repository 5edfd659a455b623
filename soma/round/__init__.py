"""A federated round on a shared folder, with nobody in charge: the layout, contribute, gather.

A round is remembered by what went into it. Its clients meet under a name keyed by the
weights they started from and the run's identity (the client count, the strategy, its
options and its state, and whatever else the caller declares the run to be: task, options,
seed), so two runs that share a name but not their inputs never meet, and never hand each
other an answer. A client waiting for another that joined a different meeting of its run and
round (other settings) is told at once, naming the settings that differ (`MeetingsDiffer`);
`soma status` labels a round's meetings by them (`labels`). The averaging lives under the
digest of exactly what the clients brought:

    <run>/round/<r>/<meeting>/about           the meeting's identity (claimed once)
    <run>/round/<r>/<meeting>/client/<k>      what client k brought: weights, size, extra
                                              (client/<k // 1000>/<k> beyond 1,000 clients)
    <run>/round/<r>/<meeting>/inputs/<key>/   one averaging of these inputs (soma.round.once)
    <run>/round/<r>/<meeting>/average         the meeting's average (claimed: the first one)

Both modes use this one layout (spelled and parsed by soma.round.layout alone, its records typed
by soma.round.records). `gather` (the same call on every client, `soma client` under srun)
averages whoever's records are there once all are; the workflow's averaging job averages
exactly the inputs its client jobs reported (`average_inputs`). A round rerun with different
weights is a different averaging; one with the same weights finds the
average it already had. Weights and strategy states are values of their own in the store
(`Store.put_value`), and records name them by digest, so a record is a few hundred bytes
of JSON that a waiting client reads without touching a tensor.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from soma.arithmetic import Signature, first_difference
from soma.nodes import Export
from soma.round import holders, layout, once, records, tree
from soma.round import signing as signatures
from soma.round.lease import LEASE
from soma.round.once import (
    POLL,
    AveragerDied,
    Backoff,
    Place,
    RoundError,
    RoundIncomplete,
    current_holder,
    read_record,
)
from soma.round.tree import check_fan_in
from soma.run.identity import differences, shown
from soma.store import Store, codecs
from soma.strategies import (
    Arrival,
    Strategy,
    Update,
    at_round,
    check_arrivals,
    check_strategy_state,
    load_strategy,
    mean_strategies,
    needs_previous,
    privacy_of,
    takes_mean,
    uniform,
)

__all__ = [
    "AveragerDied",
    "Backoff",
    "Input",
    "Meeting",
    "MeetingsDiffer",
    "RoundError",
    "RoundIncomplete",
    "average_inputs",
    "average_round",
    "contribute",
    "gather",
    "read_record",
    "status",
    "weights_of_average",
]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Meeting:
    """Where one round's clients meet: the run, the round, and everything that makes it this run.

    `start` is the digest of the weights the round began from (`Store.put_value(export)`;
    the previous round's average weights), `state` the digest of the strategy's state carried
    from the round before; `config` is whatever else the caller declares the run to be (its
    task, the task's options, the seed). Two runs under one name that differ in any of them
    meet apart. A bare call with none of them meets by run, round, clients and strategy only.

    `expected` is who takes part in the round (None: every client; see soma.run.participation),
    and `quorum` how many of them must come for it to be averaged without the rest (None:
    all of them). A client that fails or whose export is refused drops out, saying why.
    """

    run: str
    round: int
    clients: int
    start: str | None = None
    state: str | None = None
    strategy: str = "fedavg"
    options: Mapping[str, Any] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)
    expected: tuple[int, ...] | None = None
    quorum: int | None = None
    tree: int | None = None  # the fan-in of hierarchical averaging (soma.round.tree); None: flat
    secure: int | None = None  # secure aggregation's threshold (soma.secagg.round); None: off
    signing: signatures.Signing | None = None  # the run's roster, its records signed; None: off

    def __post_init__(self) -> None:
        run = self.run
        if not isinstance(run, str) or not run or "/round/" in f"/{run}/":
            raise RoundError(f"run name {run!r} must be non-empty text without a 'round' segment")
        if not _is_int(self.round) or self.round < 0:
            raise RoundError(f"round {self.round!r} must be an integer >= 0")
        if not _is_int(self.clients) or self.clients < 1:
            raise RoundError(f"clients {self.clients!r} must be an integer >= 1")
        if not isinstance(self.strategy, str) or not self.strategy:
            raise RoundError(f"strategy {self.strategy!r} must be a name or an import path")
        if self.expected is not None:
            expected = tuple(self.expected)
            if not expected or list(expected) != sorted(set(expected)):
                raise RoundError(f"expected clients {expected!r} must be sorted and distinct")
            for k in expected:
                if not _is_int(k) or not 0 <= k < self.clients:
                    raise RoundError(f"expected client {k!r} is not one of 0..{self.clients - 1}")
            object.__setattr__(self, "expected", expected)
        if self.quorum is not None and (
            not _is_int(self.quorum) or not 1 <= self.quorum <= len(self.members)
        ):
            raise RoundError(
                f"quorum {self.quorum!r} must be a count between 1 and {len(self.members)}"
            )
        if self.tree is not None:
            check_fan_in(self.tree)
        if self.secure is not None and (
            not _is_int(self.secure) or not 2 <= self.secure <= len(self.members)
        ):
            raise RoundError(
                f"secure aggregation's threshold {self.secure!r} must be a count between 2 "
                f"and the round's {len(self.members)} clients"
            )

    @property
    def members(self) -> list[int]:
        """Who takes part in this round."""
        return list(range(self.clients)) if self.expected is None else list(self.expected)

    @property
    def needed(self) -> int:
        """How many of the members must come for the round to be averaged without the rest."""
        return len(self.members) if self.quorum is None else self.quorum

    @property
    def may_go_on_without_some(self) -> bool:
        return self.needed < len(self.members)

    def identity(self) -> dict[str, Any]:
        """What the meeting is keyed by (everything but the run's name and the round)."""
        return {
            "clients": self.clients,
            "start": self.start,
            "state": self.state,
            "strategy": self.strategy,
            "options": dict(self.options),
            "config": dict(self.config),
            "expected": None if self.expected is None else list(self.expected),
            "quorum": self.quorum,
            # only when set, so that every flat run keeps the key it always had
            **({} if self.tree is None else {"tree": self.tree}),
            **({} if self.secure is None else {"secure": self.secure}),
            **({} if self.signing is None else {"roster": self.signing.digest}),
        }

    @property
    def key(self) -> str:
        return hashlib.sha256(codecs.canonical_json(self.identity())).hexdigest()

    @property
    def prefix(self) -> str:
        return layout.meeting(self.run, self.round, self.key)

    @property
    def about(self) -> str:
        return layout.about(self.prefix)

    @property
    def average(self) -> str:
        return layout.average(self.prefix)

    def client(self, k: int) -> str:
        """Client k's record. A run of more than FAN_OUT clients files them by thousands
        (`client/<k // 1000>/<k>`), so that no folder holds more than a thousand names."""
        return layout.client(self.prefix, k, self.clients)

    def started(self, k: int) -> str:
        """A workflow train job's marker for client k: beside its record, fanned out alike."""
        return layout.started(self.prefix, k, self.clients)

    def averaging(self, key: str) -> str:
        """The place of the averaging of the inputs whose digest is `key` (soma.round.once)."""
        return layout.averaging(self.prefix, key)

    @property
    def what(self) -> str:
        return f"round {self.round} of run {self.run!r}"

    def check_client(self, mine: object) -> int:
        if not _is_int(mine) or not 0 <= mine < self.clients:
            raise RoundError(
                f"client {mine!r} is not one of the round's clients 0..{self.clients - 1}"
            )
        if mine not in self.members:
            raise RoundError(
                f"client {mine} does not take part in {self.what} (it takes {self.members})"
            )
        return mine

    def strategy_object(self) -> Strategy:
        return load_strategy(self.strategy, self.options)


@dataclass(frozen=True)
class Input:
    """One client's part in an average: its index, weights, size, and what it sent beside."""

    client: int
    weights: str
    size: float | None
    extra: str | None = None  # a strategy's client-side extra (SCAFFOLD's delta c_i)
    record: str | None = None  # the client's record, when it came through the store


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


def announce(store: Store, meeting: Meeting) -> None:
    """The meeting's identity, written once, so that `status` can say what it is, and gc
    that the round is open (a process announces it as the round begins: soma.run.drive)."""
    if store.resolve(meeting.about) is None:
        about = {"run": meeting.run, "round": meeting.round, **meeting.identity()}
        store.claim(meeting.about, store.put_value(about))


@dataclass(frozen=True)
class Contribution:
    record: str  # the digest of the client's record
    weights: str  # the digest of its weights
    extra: str | None = None
    own: str | None = None  # the client's own state (kept for the next round it trains)


def contribute(
    store: Store,
    meeting: Meeting,
    export: Export,
    *,
    mine: int,
    size: float | None = None,
    extra: Export | None = None,
    own: object = None,
) -> Contribution:
    """Write what client `mine` learnt, its size, and what its strategy sends beside, to the round.

    `own` is the client's own strategy state (SCAFFOLD's c_i): kept under this client and
    round, and named by its record, for the next round this client trains.
    """
    meeting.check_client(mine)
    signatures.holds(meeting.signing, mine)
    _check_size(size, mine)
    _check_finite(export, mine)
    if extra is not None:
        _check_finite(extra, mine)
    weights = store.put_value(export)
    extra_digest = None if extra is None else store.put_value(extra)
    own_digest = None if own is None else store.put_value(own)
    announce(store, meeting)
    record = records.ClientRecord(mine, weights, size, extra_digest, own_digest, holders.me())
    kept = _claim_record(store, meeting, record)
    return Contribution(kept, weights, extra_digest, own_digest)


class Contradicts(RoundError):
    """A client contributes to a round it already brought other weights to: the first stands."""


def _claim_record(store: Store, meeting: Meeting, record: records.ClientRecord) -> str:
    """Client records are claimed, not bound: a second contribution with other weights
    (size, extra, own state) is refused naming the client and round, the same ones again
    (a rerun) find the record there; a drop-out or a record that cannot be read is replaced
    (the client came back, or `soma verify` advised this rerun)."""
    name = meeting.client(record.client)
    digest = signatures.put(store, meeting.signing, record.value(), name=name, by=record.client)
    if store.claim(name, digest, at_commit=True):  # only this client claims its record
        return digest
    from soma.errors import SomaError

    try:
        there = store.resolve(name)
        earlier = (
            None
            if there is None
            else records.read_client(store, there, client=record.client, name=name)
        )
    except (SomaError, OSError):
        earlier = None
    if not isinstance(earlier, records.ClientRecord):
        store.bind(name, digest)
        return digest
    mine = (record.weights, record.size, record.extra, record.own)
    if (earlier.weights, earlier.size, earlier.extra, earlier.own) != mine:
        raise Contradicts(
            f"client {record.client} already contributed to {meeting.what} (record {name!r}: "
            f"weights {earlier.weights}, size {earlier.size!r}); a second contribution with "
            f"weights {record.weights}, size {record.size!r} is refused and the first stands: "
            "a rerun of a client must bring the same weights (the same seed), or name another run"
        )
    assert there is not None
    return there


def drop(store: Store, meeting: Meeting, *, mine: int, why: str) -> str:
    """Say that client `mine` will not bring anything to the round, and why (failed, refused,
    its job died): the others need not wait for it, and the average's record names it."""
    meeting.check_client(mine)
    signatures.holds(meeting.signing, mine)
    announce(store, meeting)
    record = records.DropRecord(mine, str(why), holders.me())
    return signatures.keep(
        store, meeting.signing, record.value(), name=meeting.client(mine), by=mine
    )


def dropout_reason(error: BaseException) -> str:
    """Why a client dropped out, in a word and the error: refused (its export would poison
    the average) or failed (its task raised)."""
    kind = "refused" if isinstance(error, Refused) else "failed"
    return f"{kind}: {type(error).__name__}: {error}"


def check_signed(
    store: Store, meeting: Meeting, digest: str, *, name: str, writer: int | None, what: str
) -> None:
    """Refuse the record `digest` at `name` unless its `writer` (None: anyone on the roster)
    signed it, when the run has a roster (soma.round.signing)."""
    where = f"{meeting.what}: {what}"
    signatures.check(store, meeting.signing, digest, name=name, writer=writer, what=where)


def averager(meeting: Meeting) -> int | None:
    """Whose key signs the meeting's average (a roster member whose key this process holds;
    refused when none), or None when the run has no roster."""
    return None if meeting.signing is None else meeting.signing.any_member(meeting.members)


def check_signed_inputs(store: Store, meeting: Meeting, inputs: Sequence[Input]) -> None:
    """With a roster, each input is what its client's signed record says (the workflow's
    inputs come from its receipts, not from the store): refused by name otherwise."""
    if meeting.signing is None:
        return
    for i in inputs:
        name = meeting.client(i.client)
        digest = store.resolve(name)
        if digest is None:
            raise signatures.SigningError(
                f"{meeting.what}: client {i.client} has no signed record at {name!r} for the "
                f"weights {i.weights} it is said to have brought"
            )
        check_signed(store, meeting, digest, name=name, writer=i.client, what="its record")
        record = records.read_client(store, digest, client=i.client, name=name)
        said = getattr(record, "weights", None), getattr(record, "size", None)
        if said + (getattr(record, "extra", None),) != (i.weights, i.size, i.extra):
            raise signatures.SigningError(
                f"{meeting.what}: client {i.client}'s signed record {digest[:12]} is not the "
                f"input it is said to have brought (weights {i.weights[:12]})"
            )


def check_average(store: Store, meeting: Meeting, digest: str) -> str:
    """The meeting's average `digest`, once checked signed by somebody on the roster."""
    name = meeting.average
    check_signed(store, meeting, digest, name=name, writer=None, what="the average record")
    return digest


def present(store: Store, meeting: Meeting) -> list[int]:
    """The members whose records (an export or a drop-out) are in the meeting, sorted."""
    prefix = layout.clients(meeting.prefix)
    members = set(meeting.members)
    found = []
    for name in store.bound(prefix):
        k = layout.client_of(name[len(meeting.prefix) + 1 :])
        if k is not None and k in members and name == meeting.client(k):
            found.append(k)
    return sorted(found)


def arrivals(store: Store, meeting: Meeting, here: list[int]) -> tuple[list[Input], dict[int, str]]:
    """What each present member brought: its part in the average, or why it dropped out."""
    inputs, dropped = [], {}
    for k in here:
        name = meeting.client(k)
        digest = store.resolve(name)
        check_signed(store, meeting, digest, name=name, writer=k, what=f"client {k}'s record")
        record = records.read_client(store, digest, client=k, name=name)
        if isinstance(record, records.DropRecord):
            dropped[k] = record.dropped
        elif isinstance(record, records.ClientRecord):
            inputs.append(Input(k, record.weights, record.size, record.extra, digest))
        else:
            raise records.RecordError(
                f"{meeting.what}: client {k}'s record {name!r} is a secure round's, in a round "
                "in the clear"
            )
    return inputs, dropped


def _complete(here: list[int], clients: int) -> bool:
    """Everyone is accounted for when every member has a record (an export or a drop-out)."""
    return len(here) == clients


def _enough(came: Sequence[Input], needed: int) -> bool:
    """A round is averaged only when at least the quorum came; nobody goes on below it."""
    return len(came) >= needed


def _left_out_text(left_out: Mapping[int, str]) -> str:
    return "; ".join(f"client {k} {why}" for k, why in sorted(left_out.items()))


# --- checking, before anything is claimed ---------------------------------------------------


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
    if not inputs or not _enough(inputs, meeting.needed):
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


# --- meetings of one round that differ ------------------------------------------------------


class MeetingsDiffer(RoundError):
    """Clients of one run and round meet apart: the settings they were given differ."""


def settings(about: Mapping[str, Any]) -> dict[str, Any]:
    """A meeting's identity (its `about` record) by the names a user sets (the config's keys,
    where there is one), so that two meetings are told apart key by key."""
    config = dict(about.get("config") or {})
    return {
        "task": config.pop("task", None),
        "task_options": config.pop("options", None) or {},
        "seed": config.pop("seed", None),
        **config,
        "clients": about.get("clients"),
        "strategy": about.get("strategy"),
        "strategy_options": about.get("options") or {},
        "expected": about.get("expected"),
        "quorum": about.get("quorum"),
        "tree": about.get("tree"),
        "secure_aggregation": about.get("secure"),
    }


# How a meeting's starting point is said when it is all that differs.
STARTING_POINT = {"start": "start weights", "state": "strategy state"}


def meeting_differences(
    theirs: Mapping[str, Any], mine: Mapping[str, Any]
) -> list[tuple[str, Any, Any]]:
    """The settings two meetings' `about` records differ in (see `soma.run.identity.differences`);
    only when they differ in none, their starting points (the start weights, the strategy's
    state), which the settings of the rounds before decide."""
    found = differences(settings(theirs), settings(mine))
    if found:
        return found
    return [
        (said, theirs.get(key), mine.get(key))
        for key, said in STARTING_POINT.items()
        if theirs.get(key) != mine.get(key)
    ]


def said_apart(found: Sequence[tuple[str, Any, Any]]) -> tuple[str, str]:
    """`found` (from `meeting_differences`) said from each side: ("strategy fedadam",
    "strategy fedavg"); a digest is shortened to 12 characters."""

    def value(v: Any) -> str:
        text = shown(v)
        return text[:12] if isinstance(v, str) and len(v) == 64 else text

    return (
        ", ".join(f"{key} {value(a)}" for key, a, _ in found),
        ", ".join(f"{key} {value(b)}" for key, _, b in found),
    )


def labels(store: Store, run: str, found: Iterable[tuple[int, str]]) -> dict[tuple[int, str], str]:
    """Per (round, meeting key) of `found`, what tells the meeting apart from the other
    meetings of its round: the settings it differs in, with its own values ("strategy
    fedadam"); "" for a round's only meeting, or a meeting whose `about` cannot be read."""
    from soma.errors import SomaError
    from soma.store.errors import StoreError

    by_round: dict[int, list[str]] = {}
    for r, key in found:
        by_round.setdefault(r, []).append(key)
    told: dict[tuple[int, str], str] = {}
    for r, keys in by_round.items():
        abouts: dict[str, Mapping[str, Any] | None] = {}
        for key in keys if len(keys) > 1 else ():
            try:
                digest = store.resolve(layout.about(layout.meeting(run, r, key)))
                abouts[key] = None if digest is None else read_record(store, digest)
            except (SomaError, StoreError, OSError):
                abouts[key] = None
        for key in keys:
            mine, apart = abouts.get(key), {}
            for other, theirs in abouts.items():
                if other != key and mine is not None and theirs is not None:
                    for name, _, value in meeting_differences(theirs, mine):
                        apart.setdefault(name, value)
            told[(r, key)] = said_apart([(k, None, v) for k, v in sorted(apart.items())])[1]
    return told


# How often a waiting client looks for its clients in other meetings of its round (seconds).
ELSEWHERE_EVERY = 1.0


# When this process began: a note from another meeting (see _Elsewhere) older than that was
# left for somebody else, by a run long gone.
_SINCE = time.time()


class _Elsewhere:
    """Whether a client this meeting waits for joined another meeting of the same run and
    round instead, which nobody would ever average with this one.

    A record (or started marker) there counts when its writer may be alive, or when it was
    written while this meeting waited: a record left by a crashed run whose process is
    provably gone does not stop a new one. A meeting already averaged is past, not a rival.
    Whoever finds a rival leaves it a note (`<rival>/apart/<its own key>`) before it stops:
    the rival may still be training its other clients, and by its first look the finder's
    records are a gone process's; a note written since the rival's process began counts.
    """

    def __init__(self, store: Store, meeting: Meeting) -> None:
        self.store, self.meeting = store, meeting
        self.folder = layout.round_prefix(meeting.run, meeting.round)
        self.seen: set[str] | None = None  # the records there at the first look
        self.next = 0.0

    def check(self, waiting: Sequence[int]) -> None:
        now = time.monotonic()
        if now < self.next or not waiting:
            return
        self.next = now + ELSEWHERE_EVERY
        waiting_for = set(waiting)
        first, seen = self.seen is None, set()
        alive: dict[str, bool] = {}
        noted = self._noted()
        for key in self.store.entries(self.folder):
            prefix = layout.meeting(self.meeting.run, self.meeting.round, key)
            if not self._rival(key):
                continue
            names = self.store.bound(layout.clients(prefix))
            names += self.store.bound(layout.started_markers(prefix))
            for name in names:
                rest = name[len(prefix) + 1 :]
                k = layout.client_of(rest)
                k = layout.started_of(rest) if k is None else k
                if k is None or k not in waiting_for:
                    continue
                seen.add(name)
                if key in noted:
                    raise self._apart(key, k)
                if not first:
                    if name not in (self.seen or ()):
                        raise self._apart(key, k)
                    continue
                holder = self._writer(name)
                if holder is None:
                    continue
                said = codecs.canonical_json(holder).decode()
                if said not in alive:
                    alive[said] = not holders.gone(holder)
                if alive[said]:
                    raise self._apart(key, k)
        if first:
            self.seen = seen

    def _noted(self) -> set[str]:
        """The meetings that left this one a note since this process began."""
        found = set()
        for name in self.store.bound(layout.notes(self.meeting.prefix)):
            note = self._record(name)
            at = None if note is None else note.get("at")
            if isinstance(at, int | float) and at >= _SINCE:
                found.add(name.rsplit("/", 1)[1])
        return found

    def _tell(self, key: str, client: int) -> None:
        """Leave meeting `key` a note that this one found its client there (best effort)."""
        from soma.errors import SomaError
        from soma.store.errors import StoreError

        note = {"client": client, "at": time.time(), "by": holders.me()}
        try:
            other = layout.meeting(self.meeting.run, self.meeting.round, key)
            self.store.keep(layout.note(other, self.meeting.key), note)
        except (SomaError, StoreError, OSError):
            pass

    def _record(self, name: str) -> dict[str, Any] | None:
        """The record `name` names; None when it cannot be read (it is not this meeting's to
        judge: `soma verify` says so)."""
        from soma.errors import SomaError
        from soma.store.errors import StoreError

        try:
            digest = self.store.resolve(name)
            record = None if digest is None else read_record(self.store, digest)
        except (SomaError, StoreError, OSError):
            return None
        return record if isinstance(record, dict) else None

    def _writer(self, name: str) -> dict[str, Any] | None:
        """Who wrote the record (or started marker) `name`, if it can be read."""
        record = self._record(name)
        holder = None if record is None else record.get("by", record)
        return holder if isinstance(holder, dict) else None

    def _rival(self, key: str) -> bool:
        """Another meeting of the round, not yet averaged."""
        average = layout.average(layout.meeting(self.meeting.run, self.meeting.round, key))
        return key != self.meeting.key and self.store.resolve(average) is None

    def _apart(self, key: str, client: int) -> MeetingsDiffer:
        """The refusal naming `client` and what differs; meeting `key` is told first."""
        self._tell(key, client)
        other = layout.meeting(self.meeting.run, self.meeting.round, key)
        digest = self.store.resolve(layout.about(other))
        theirs = None if digest is None else read_record(self.store, digest)
        mine = {"run": self.meeting.run, "round": self.meeting.round, **self.meeting.identity()}
        found = [] if theirs is None else meeting_differences(theirs, mine)
        if not found:
            joined = f"joined another meeting of it ({key[:12]}), whose settings are not recorded"
        elif found[0][0] in STARTING_POINT.values():
            there, here = said_apart(found)
            joined = f"joined with the same settings but another start, {there}; you have {here}"
        else:
            there, here = said_apart(found)
            joined = f"joined with {there}; you have {here}"
        return MeetingsDiffer(
            f"{self.meeting.what}: client {client} {joined}. The two never meet: give every "
            "client of a run the same settings, or name another run"
        )


# --- averaging ------------------------------------------------------------------------------


def inputs_key(meeting: str, inputs: Sequence[Input]) -> str:
    """The digest of what one averaging is made of: the meeting's key, and each client's part."""
    listed = [
        [i.client, i.weights, i.size, i.extra] for i in sorted(inputs, key=lambda i: i.client)
    ]
    return hashlib.sha256(codecs.canonical_json([meeting, listed])).hexdigest()


def _updates(store: Store, inputs: Sequence[Input]) -> Iterator[Update]:
    """The clients' updates, one at a time, each export lazily mapped from the store."""
    for i in inputs:
        yield Update(
            client=i.client,
            size=i.size,
            weights=store.recall_digest(i.weights, lazy=True),
            extra=None if i.extra is None else store.recall_digest(i.extra, lazy=True),
        )


def _average(
    store: Store, meeting: Meeting, strategy: Strategy, inputs: list[Input], me: dict[str, Any]
) -> str:
    """The strategy's arithmetic over the inputs, and the record that says what went in."""
    previous = None if meeting.start is None else store.recall_digest(meeting.start, lazy=True)
    state = None if meeting.state is None else store.recall_digest(meeting.state)
    root = _tree_root(store, meeting, inputs, me)
    strategy = at_round(strategy, round=meeting.round, seed=meeting.config.get("seed"))
    if root is None:
        weights, new_state = strategy.aggregate(
            previous, _updates(store, inputs), state, clients=meeting.clients
        )
    else:
        mean = store.recall_digest(root.mean, lazy=True)
        weights, new_state = strategy.from_mean(previous, mean, state, clients=meeting.clients)
    came = {i.client for i in inputs}
    here = present(store, meeting)
    dropped = arrivals(store, meeting, here)[1]
    left_out = {
        k: dropped.get(k) or ("came after the round was averaged" if k in here else "never came")
        for k in meeting.members
        if k not in came
    }
    record = records.average_record(
        meeting,
        left_out=left_out,
        inputs=[
            records.input_entry(i.client, i.weights, i.size, i.extra, i.record) for i in inputs
        ],
        weights=store.put_value(weights),
        state=None if new_state is None else store.put_value(new_state),
        averaged_by=me,
        tree=None
        if root is None
        else {"fan_in": meeting.tree, "mean": root.mean, "weight": root.weight},
    )
    signer = averager(meeting)
    return signatures.put(store, meeting.signing, record.value(), name=meeting.average, by=signer)


def _uses_tree(meeting: Meeting, inputs: Sequence[Input]) -> bool:
    """A tree only where it has more than one node: up to `fan_in` inputs, a tree is one
    node, the flat average bit for bit, so it is computed flat without the tree's records."""
    return meeting.tree is not None and len(inputs) > meeting.tree


def _tree_root(
    store: Store, meeting: Meeting, inputs: Sequence[Input], me: dict[str, Any]
) -> tree.Node | None:
    if not _uses_tree(meeting, inputs):
        return None
    place = meeting.averaging(inputs_key(meeting.key, inputs))
    leaves = tree.leaves_of(inputs, uniform=uniform(meeting.strategy_object()))
    return tree.reduce(store, place, leaves, meeting.tree, me=me)


class _Averaging:
    """One round's averaging as `soma.round.once` asks about it."""

    def __init__(
        self,
        store: Store,
        meeting: Meeting,
        ready: Callable[[bool], list[Input] | None],
        missing: Callable[[], tuple[list[int], str]],
        *,
        late: bool,
    ) -> None:
        self.store, self.meeting, self.what = store, meeting, meeting.what
        self.ready, self.missing, self.late = ready, missing, late
        self.strategy = meeting.strategy_object()

    def done(self) -> str | None:
        # whoever arrives late leaves with the meeting's average, whatever it was made of
        return self.store.resolve(self.meeting.average) if self.late else None

    def check(self, inputs: list[Input]) -> None:
        check_inputs(self.store, self.meeting, self.strategy, inputs)
        check_signed_inputs(self.store, self.meeting, inputs)
        averager(self.meeting)  # a roster member's key to sign the average with, or refused

    def place(self, inputs: list[Input]) -> Place:
        return Place(self.meeting.averaging(inputs_key(self.meeting.key, inputs)))

    def share(self, inputs: list[Input], me: dict[str, Any]) -> None:
        """Work any process may do before the claim: the tree's nodes, spread among all."""
        _tree_root(self.store, self.meeting, inputs, me)

    def compute(self, inputs: list[Input], me: dict[str, Any]) -> str:
        return _average(self.store, self.meeting, self.strategy, inputs, me)

    def settle(self, published: str) -> str:
        """The first averaging published becomes the meeting's average (claimed: once)."""
        if self.store.resolve(self.meeting.average) is None:
            once.publish(self.store, self.meeting.average, published)
        return self.store.resolve(self.meeting.average) if self.late else published


def average_round(
    store: Store,
    meeting: Meeting,
    *,
    deadline: float | None = 3600.0,
    backoff: Backoff = POLL,
    sleep: Callable[[float], None] = time.sleep,
    lease: float = LEASE,
) -> str:
    """Make sure the meeting has an average; the digest of its record.

    Waits for every member to come or drop out; then whoever gets the claim averages and
    publishes, and everyone else waits for what was published. A holder that is provably gone
    (its Slurm job ended, or on this host its process is gone) is taken over; one that may be
    alive is waited for. `deadline` is seconds of waiting (None: forever). Going on without
    somebody is the meeting's policy, its quorum: past the deadline the round is averaged over
    whoever came if they are at least the quorum; below it, a RoundIncomplete names the
    clients that never came. An AveragerDied names who claimed the averaging and never
    published. On a bucket (a store with compare-and-swap) a holder is judged by its lease of
    `lease` seconds instead (soma.round.lease).
    """

    elsewhere = _Elsewhere(store, meeting)

    def ready(past: bool) -> list[Input] | None:
        """Everyone accounted for; or, past the deadline, at least the quorum came. A client
        waited for that joined another meeting of the round is said at once (MeetingsDiffer)."""
        here = present(store, meeting)
        accounted = _complete(here, len(meeting.members))
        if not accounted:
            elsewhere.check([k for k in meeting.members if k not in here])
        if not (accounted or past):
            return None
        came, dropped = arrivals(store, meeting, here)
        if _enough(came, meeting.needed):
            return came
        if accounted and dropped:  # nobody else is coming: say so now, not at the deadline
            raise RoundIncomplete(
                f"{meeting.what}: {len(came)} of {len(meeting.members)} clients came, fewer than "
                f"the quorum of {meeting.needed}: {_left_out_text(dropped)}",
                sorted(dropped),
            )
        return None

    def missing() -> tuple[list[int], str]:
        here = present(store, meeting)
        came, dropped = arrivals(store, meeting, here)
        never = [k for k in meeting.members if k not in here]
        detail = f" (quorum {meeting.needed} of {len(meeting.members)}, {len(came)} came"
        detail += f"; {_left_out_text(dropped)})" if dropped else ")"
        return never, detail

    work = _Averaging(store, meeting, ready, missing, late=True)
    digest = once.once(
        store, work, deadline=deadline, backoff=backoff, sleep=sleep, lease=lease,
        signing=meeting.signing,
    )  # fmt: skip
    return check_average(store, meeting, digest)


def average_inputs(
    store: Store,
    meeting: Meeting,
    inputs: Sequence[Input],
    *,
    deadline: float | None = 3600.0,
    backoff: Backoff = POLL,
    lease: float = LEASE,
) -> str:
    """Average exactly these clients' weights, once; the record's digest.

    What the workflow's averaging job calls: its inputs are what its client jobs reported.
    A second job with the same inputs (a retry, another snakemake sharing the store) finds
    the claim taken and waits for, then reuses, the published average.
    """
    inputs = sorted(inputs, key=lambda i: i.client)
    for i in inputs:
        meeting.check_client(i.client)
    work = _Averaging(store, meeting, lambda past: list(inputs), lambda: ([], ""), late=False)
    digest = once.once(
        store, work, deadline=deadline, backoff=backoff, lease=lease, signing=meeting.signing
    )
    return check_average(store, meeting, digest)


def weights_of_average(store: Store, digest: str) -> Export:
    """The mean weights an average record (by digest) names."""
    return store.recall_digest(records.read_average(store, digest).weights)


def gather(
    store: Store,
    export: Export,
    *,
    run: str,
    round: int,
    clients: int,
    mine: int,
    size: float | None = None,
    deadline: float | None = 3600.0,
    backoff: Backoff = POLL,
    start: str | None = None,
    state: str | None = None,
    strategy: str = "fedavg",
    options: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
    expected: Sequence[int] | None = None,
    quorum: int | None = None,
    tree: int | None = None,
) -> Export:
    """The round barrier: write mine, wait for all, one of us averages, all leave with the mean.

    The same call on every client. A client arriving after the average exists finds it and
    does not wait; the only client of a round averages it itself. `start`, `state`,
    `strategy`, `options` and `config` say which run this is (see `Meeting`); a strategy
    that steps from the round's start (FedAdam, SCAFFOLD) needs `start`. `expected` is who
    takes part (None: everyone) and `quorum` how many must come for the round to be averaged
    without the rest once `deadline` has passed (None: all of them). `tree` is a fan-in:
    the round's mean is then built as a tree of partial means that every client helps with
    (soma.round.tree), for rounds of many clients.
    """
    meeting = Meeting(
        run,
        round,
        clients,
        start,
        state,
        strategy,
        dict(options or {}),
        dict(config or {}),
        None if expected is None else tuple(expected),
        quorum,
        tree,
    )
    contribute(store, meeting, export, mine=mine, size=size)
    digest = average_round(store, meeting, deadline=deadline, backoff=backoff)
    return weights_of_average(store, digest)


# --- what a run's rounds look like, for `soma status` ---------------------------------------


class UnknownRun(RoundError):
    """A run the store holds nothing of; the message lists the runs it does hold."""


def runs(store: Store) -> list[str]:
    """The runs with rounds in the store. A run's name may hold '/' but never a 'round'
    segment (see Meeting), so the first `round/<digits>` in a name ends the run's name."""
    return layout.runs(store.bound())


def meetings(store: Store, run: str) -> list[tuple[int, str]]:
    """Every (round, meeting key) of the run in the store, in round order."""
    return layout.meetings(store.bound(layout.rounds(run)), run)


def check_run(store: Store, run: str) -> list[tuple[int, str]]:
    """The run's meetings; or, when the store holds nothing of the run (no round and no
    start), an UnknownRun naming the runs it does hold: a mistyped name is told so, never
    shown as a run with no rounds."""
    found = meetings(store, run)
    if not found and store.resolve(layout.start(run)) is None:
        held = runs(store)
        holds = f"the runs it holds: {', '.join(map(repr, held))}" if held else "it holds no runs"
        raise UnknownRun(f"no run {run!r} in the store at {store.directory} ({holds})")
    return found


def evaluation_name(run: str, weights: str) -> str:
    """Where the workflow keeps the metrics of weights `weights` (`{"metrics", "weights"}`)."""
    return layout.evaluation(run, weights)


def status(store: Store, run: str, *, clients: int | None = None) -> list[dict[str, Any]]:
    """Per round and meeting: who was expected, who wrote, who dropped out and why (a
    drop-out's record is not a write), who is missing, who was left out and why, who
    averages, the average, how many averagings were computed, and the metrics the workflow
    recorded for the average's weights.

    `apart` is what tells the meeting from the other meetings of its round (see `labels`).
    Who was expected is what the meeting recorded; `clients` only where none is recorded
    (never guessed from the clients that wrote). A record or name that cannot be read (a
    corrupt blob, a name file that holds no digest) is one of the row's `problems`, so that
    one bad round never hides the others.
    """
    found = meetings(store, run)
    apart = labels(store, run, found)
    return [
        {**_status_row(store, run, r, key, clients), "apart": apart[(r, key)]} for r, key in found
    ]


def privacy_spent(
    store: Store, record: Mapping[str, Any], strategy: Strategy | None = None
) -> dict[str, Any] | None:
    """The epsilon (and delta) spent up to this round, as its strategy reports it
    (`Strategy.privacy_spent`); `record` is an average's record or its workflow receipt
    (both name the strategy and the state), `strategy` the strategy when the record does
    not hold its options (a receipt). The state is read only for a strategy that reports
    privacy, as another's may be a model's worth of tensors."""
    name = record.get("strategy") or "fedavg"
    if strategy is None:
        strategy = load_strategy(name, record.get("options") or {})
    state = record.get("state")
    return privacy_of(name, strategy, lambda: None if not state else store.recall_digest(state))


def _federated(store: Store, prefix: str, weights: str) -> dict[str, Any] | None:
    """The round's federated evaluation of its average (soma.evaluation), once settled."""
    digest = store.resolve(layout.federated(prefix))
    if digest is None:
        return None
    record = read_record(store, digest)
    if record.get("weights") != weights:
        return None  # the evaluation of an earlier average of the meeting: not this one's
    return {k: record.get(k) for k in ("evaluated", "size", "evaluation", "trained", "training")}


def _status_row(store: Store, run: str, r: int, key: str, clients: int | None) -> dict[str, Any]:
    from soma.errors import SomaError
    from soma.store.errors import StoreError

    prefix = layout.meeting(run, r, key)
    row: dict[str, Any] = {
        "round": r,
        "meeting": key,
        "clients": clients,
        "expected": None if clients is None else list(range(clients)),
        "quorum": None,
        "strategy": None,
        "written": [],
        "dropped": [],
        "missing": [],
        "left_out": [],
        "averaging": None,
        "averagings": 0,
        "average": None,
        "averages_by_inputs": {},
        "weights": None,
        "metrics": None,
        "privacy": None,
        "federated": None,
        "problems": [],
    }

    def attempt(what: str, step: Callable[[], None]) -> None:
        try:
            step()
        except (SomaError, StoreError, OSError) as error:
            row["problems"].append(f"cannot read its {what}: {error}")

    def about() -> None:
        digest = store.resolve(layout.about(prefix))
        record = read_record(store, digest) if digest else {}
        count = record.get("clients", clients)
        expected = record.get("expected") or (None if count is None else list(range(count)))
        row.update(
            clients=count,
            expected=expected,
            quorum=record.get("quorum"),
            strategy=record.get("strategy"),
        )

    def written() -> None:
        # A drop-out's record is not a write: it says why that client brought nothing.
        found = {}
        for name in store.bound(layout.clients(prefix)):
            k = layout.client_of(name[len(prefix) + 1 :])
            if k is not None:
                found[k] = name
        dropped = {}
        for k, name in found.items():
            record = records.read_client(store, store.resolve(name), client=k, name=name)
            if isinstance(record, records.DropRecord):
                dropped[k] = record.dropped
        row["written"] = sorted(k for k in found if k not in dropped)
        row["dropped"] = [{"client": k, "why": dropped[k]} for k in sorted(dropped)]

    def averagings() -> None:
        under = layout.inputs(prefix)
        found = sorted({layout.under(n, under) for n in store.bound(under)})
        holder, computed = None, 0
        for a in found:
            place = Place(layout.averaging(prefix, a))
            computed += once.computations(store, place)
            latest = current_holder(store, place)
            pending = store.resolve(place.published) is None
            if latest is not None and (holder is None or pending):
                holder = {
                    "claim": latest[0],
                    **latest[1],
                    "gone": pending and holders.gone(latest[1]),
                }
        row.update(averaging=holder, averagings=computed)
        row["averages_by_inputs"] = {
            a: store.resolve(Place(layout.averaging(prefix, a)).published) for a in found
        }

    def average() -> None:
        row["average"] = store.resolve(layout.average(prefix))
        if row["average"]:
            record = records.read_average(store, row["average"])
            row.update(left_out=record.left_out, weights=record.weights)

    def privacy() -> None:
        if row["average"]:
            row["privacy"] = privacy_spent(
                store, records.read_average(store, row["average"]).value()
            )

    def metrics() -> None:
        digest = store.resolve(evaluation_name(run, row["weights"]))
        if digest is not None:
            record = read_record(store, digest)
            if record.get("weights") != row["weights"]:
                raise RoundError(f"record {digest} is the evaluation of other weights")
            row["metrics"] = record.get("metrics")

    attempt("meeting record (about)", about)
    attempt("client records", written)
    attempt("averaging records", averagings)
    attempt("average record", average)
    if row["weights"]:  # the average record was read: what it says can be followed
        attempt("privacy spent (its strategy)", privacy)
        attempt("evaluation record", metrics)
        attempt(
            "federated evaluation",
            lambda: row.update(federated=_federated(store, prefix, row["weights"])),
        )
    expected = row["expected"]
    came = {*row["written"], *(x["client"] for x in row["dropped"])}
    row["missing"] = [] if expected is None else [k for k in expected if k not in came]
    return row
