"""What a round's records say: client, drop-out and average records, built and read here.

A record is a small JSON value in the store (`Store.put_value`), named by its digest; the
digests are compared (a rerun finds the same average, `soma repair` rebuilds a lost record
and keeps it only when it hashes right), so a record's content is fixed: these types build
exactly the keys and values soma has always written (kept with sorted keys, so their order
is free). A record that lacks what a reader needs is refused by name (`RecordError`: the
client, the name, the record), never a bare KeyError.

    client record     {"client", "size", "weights", "extra", "own", "by", "metrics"?}
    drop-out record   {"client", "dropped", "by"}                   why it will not come
    secure record     {"client", "secure", "by"?}                   took part in a secure sum
    average record    {"run", "round", "meeting", "clients", "strategy", "options", "start",
                       "state_before", "expected", "quorum", "left_out", "inputs", "weights",
                       "state", "averaged_by", "tree"?, "secure"?}

A client record's `metrics` are what the client's training said (numbers only, keys sorted:
soma.run.evaluation.training_metrics), kept in the record the client signs rather than in a
record and a name of their own (issue 50): one signature covers the weights and the metrics,
and a contribution writes two files fewer. A record without them (written before, or by a
caller of `contribute` that gave none) is the same bytes as before and reads as None; the
round's training figures are read through soma.run.evaluation.training_of, whichever the
store holds.

An average's `left_out` is `[{"client", "why"}]`, one entry a member that is not among its
inputs: a drop-out's own reason (`failed: ...`, `refused: ...` when its export was refused
as it was contributed, `died: ...`), `never came`, `came after the round was averaged`,
`never came: Slurm job 123_7 PENDING (Priority) at the deadline` (a round told to go on
without clients whose jobs have not started, `drop_unstarted`: `not_started`,
`is_not_started`; audited as `never came` is, against the client's record), or,
for a client whose input the averaging itself refused under a quorum (a record written by
anything but `contribute`: unreadable, NaN, another network...), `input refused: <why>`
(`refused`, `is_refused`). Refusals are told apart by that prefix alone, so an average with
none is the same record, byte for byte, as it always was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

from soma.round.once import RoundError
from soma.store import Store

if TYPE_CHECKING:
    from soma.round.meeting import Meeting


class RecordError(RoundError):
    """A record that does not say what its kind must: the message names whose and where."""


@dataclass(frozen=True)
class ClientRecord:
    """What client `client` brought to a round: its weights, size, the strategy's extra (e.g.
    SCAFFOLD's delta c_i) and its own state for the next round it trains (digests)."""

    client: int
    weights: str
    size: float | None
    extra: str | None = None
    own: str | None = None
    by: Any = None  # who wrote it (soma.round.holders.me())
    metrics: Mapping[str, Any] | None = None  # what its training said (None: not in the record)

    def value(self) -> dict[str, Any]:
        value = {
            "client": self.client,
            "size": self.size,
            "weights": self.weights,
            "extra": self.extra,
            "own": self.own,
            "by": self.by,
        }
        if self.metrics is not None:  # a record without them is the same bytes as before
            value["metrics"] = dict(self.metrics)
        return value


@dataclass(frozen=True)
class DropRecord:
    """Client `client` will not bring anything to the round, and why (failed, refused, died)."""

    client: int
    dropped: str
    by: Any = None

    def value(self) -> dict[str, Any]:
        return {"client": self.client, "dropped": self.dropped, "by": self.by}


@dataclass(frozen=True)
class SecureRecord:
    """Client `client` took part in the secure sum whose session is `secure` (no weights).
    No `by`: the record is the same bytes whichever process wrote it (a workflow job or a
    `soma client` task), so a secure round's records are the same in every mode."""

    client: int
    secure: str

    def value(self) -> dict[str, Any]:
        return {"client": self.client, "secure": self.secure}


AnyClientRecord = Union[ClientRecord, DropRecord, SecureRecord]  # noqa: UP007


def _whose(client: int, name: str, digest: str | None) -> str:
    where = f"{name!r}" + ("" if digest is None else f" (record {digest})")
    return f"client {client}'s record {where}"


def parse_client(
    value: object, *, client: int, name: str, digest: str | None = None
) -> AnyClientRecord:
    """The client record `value` kept at `name`, checked: a RecordError names the client and
    the name when it is not a record, is another client's, or lacks a field it must have."""
    whose = _whose(client, name, digest)
    if not isinstance(value, dict):
        raise RecordError(f"{whose} is a {type(value).__name__}, not a record")
    if value.get("client") != client:
        raise RecordError(f"{whose} is client {value.get('client')!r}'s, not client {client}'s")
    if "dropped" in value:
        return DropRecord(client, str(value["dropped"]), value.get("by"))
    if "secure" in value:
        return SecureRecord(client, str(value["secure"]))
    missing = [key for key in ("weights", "size") if key not in value]
    if missing:
        raise RecordError(
            f"{whose} has no {' and no '.join(map(repr, missing))}: it is neither an export "
            "nor a drop-out"
        )
    if not isinstance(value["weights"], str):
        raise RecordError(f"{whose}: its weights {value['weights']!r} are not a digest")
    metrics = value.get("metrics")
    if metrics is not None and not isinstance(metrics, dict):
        raise RecordError(f"{whose}: its training metrics {metrics!r:.80} are not a map")
    return ClientRecord(
        client,
        value["weights"],
        value["size"],
        value.get("extra"),
        value.get("own"),
        value.get("by"),
        metrics,
    )


def read_client(store: Store, digest: str, *, client: int, name: str) -> AnyClientRecord:
    """Client `client`'s record (by digest, kept at `name`), checked (see parse_client)."""
    return parse_client(store.recall_digest(digest), client=client, name=name, digest=digest)


# --- average records ------------------------------------------------------------------------

REFUSED = "input refused"  # the prefix of a left-out reason that is a refusal, not a drop-out


def refused(why: str) -> str:
    """The left-out reason of a client whose input the averaging refused."""
    return f"{REFUSED}: {why}"


def is_refused(why: object) -> bool:
    """Whether a left-out reason is a refusal of the client's input (not a drop-out)."""
    return isinstance(why, str) and why.startswith(f"{REFUSED}: ")


NEVER_CAME = "never came"  # a member that wrote nothing to the round


def not_started(said: str) -> str:
    """The left-out reason of a client whose Slurm job had not started, or had ended, when
    the round went on without it (`said`: its job, as soma.slurm.queue says it)."""
    return f"{NEVER_CAME}: {said} at the deadline"


def is_not_started(why: object) -> bool:
    """Whether a left-out reason says the client never came, and where its job was then:
    nothing of the client need be in the store (not a drop-out, which its record says)."""
    return isinstance(why, str) and why.startswith(f"{NEVER_CAME}: ")


def input_entry(
    client: int, weights: str, size: float | None, extra: str | None, record: str | None
) -> dict[str, Any]:
    """One client's part in an average, as its record lists it."""
    return {"client": client, "weights": weights, "size": size, "extra": extra, "record": record}


def secure_entry(client: int) -> dict[str, Any]:
    """A contributor to a secure sum, as the average's record lists it (no weights)."""
    return {"client": client, "secure": True}


@dataclass(frozen=True)
class AverageRecord:
    """A meeting's average: the round and meeting it averaged, who was left out and why, the
    inputs, the resulting weights and strategy state, and who averaged (a holder record);
    `tree` (fan_in, mean, weight) when it was averaged as a tree, `secure` (sum, threshold,
    error_bound) when it was a secure sum."""

    run: str
    round: int
    meeting: str | None
    clients: int
    strategy: str
    options: Mapping[str, Any]
    start: str | None
    state_before: str | None
    expected: list[int] | None
    quorum: int | None
    left_out: list[dict[str, Any]]
    inputs: list[dict[str, Any]]
    weights: str
    state: str | None
    averaged_by: Any = None
    tree: dict[str, Any] | None = None
    secure: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # keys of other versions, kept as read

    def value(self) -> dict[str, Any]:
        value = {
            **self.extra,
            "run": self.run,
            "round": self.round,
            "meeting": self.meeting,
            "clients": self.clients,
            "strategy": self.strategy,
            "options": dict(self.options),
            "start": self.start,
            "state_before": self.state_before,
            "expected": self.expected,
            "quorum": self.quorum,
            "left_out": self.left_out,
            "inputs": self.inputs,
            "weights": self.weights,
            "state": self.state,
            "averaged_by": self.averaged_by,
        }
        if self.tree is not None:
            value["tree"] = self.tree
        if self.secure is not None:
            value["secure"] = self.secure
        return value

    def put(self, store: Store) -> str:
        """Keep the record in the store; its digest."""
        return store.put_value(self.value())


_AVERAGE_NEEDS = ("run", "round", "clients", "strategy", "left_out", "inputs", "weights")
_AVERAGE_KEYS = frozenset(AverageRecord.__dataclass_fields__) - {"extra"}


def average_record(
    meeting: Meeting,
    *,
    left_out: Mapping[int, str],
    inputs: Sequence[Mapping[str, Any]],
    weights: str,
    state: str | None,
    averaged_by: Any,
    tree: dict[str, Any] | None = None,
    secure: dict[str, Any] | None = None,
) -> AverageRecord:
    """The record of a meeting's average, the one builder (plain, tree and secure rounds,
    and `soma repair`'s rebuilding): `left_out` is why each member that did not come, in
    member order in the record."""
    return AverageRecord(
        run=meeting.run,
        round=meeting.round,
        meeting=meeting.key,
        clients=meeting.clients,
        strategy=meeting.strategy,
        options=dict(meeting.options),
        start=meeting.start,
        state_before=meeting.state,
        expected=meeting.members,
        quorum=meeting.needed,
        left_out=[{"client": k, "why": left_out[k]} for k in meeting.members if k in left_out],
        inputs=[dict(i) for i in inputs],
        weights=weights,
        state=state,
        averaged_by=averaged_by,
        tree=tree,
        secure=secure,
    )


def parse_average(value: object, *, digest: str) -> AverageRecord:
    """The average record `value` (by digest), checked: a RecordError names the record and
    what it lacks."""
    if not isinstance(value, dict):
        raise RecordError(f"average record {digest} is a {type(value).__name__}, not a record")
    missing = [key for key in _AVERAGE_NEEDS if key not in value]
    if missing:
        raise RecordError(
            f"record {digest} is not an average record: it has no {', '.join(map(repr, missing))}"
        )
    if not isinstance(value["inputs"], list) or not isinstance(value["left_out"], list):
        raise RecordError(f"average record {digest}: its inputs and left_out are not lists")
    return AverageRecord(
        run=value["run"],
        round=value["round"],
        meeting=value.get("meeting"),
        clients=value["clients"],
        strategy=value["strategy"],
        options=value.get("options") or {},
        start=value.get("start"),
        state_before=value.get("state_before"),
        expected=value.get("expected"),
        quorum=value.get("quorum"),
        left_out=value["left_out"],
        inputs=value["inputs"],
        weights=value["weights"],
        state=value.get("state"),
        averaged_by=value.get("averaged_by"),
        tree=value.get("tree"),
        secure=value.get("secure"),
        extra={k: v for k, v in value.items() if k not in _AVERAGE_KEYS},
    )


def read_average(store: Store, digest: str) -> AverageRecord:
    """The average record `digest`, checked (see parse_average)."""
    return parse_average(store.recall_digest(digest), digest=digest)
