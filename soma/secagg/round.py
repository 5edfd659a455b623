"""A round under secure aggregation: the clients' sum is unmasked, never their exports.

The same meeting as any round (soma.round.Meeting, keyed also by the threshold), with the
secure sum's session under `<meeting>/secagg` (soma.secagg) instead of the clients'
exports in the clear:

    <meeting>/secagg/...        keys, encrypted shares, masked inputs, revealed shares, sum
    <meeting>/client/<k>        that client k took part ("secure": the session), no weights
    <meeting>/inputs/<key>/     the averaging of the published sum, once (soma.round.once)
    <meeting>/average           the meeting's average: the strategy's step from the mean

A process hosts one client or several (`soma client --mine 0-4`); its clients go through
each phase together, so that none of them waits at a barrier for another it has not yet
run. Keys and shares are made before training: a client whose training fails has shared,
and the round recovers it from the others' shares (with at least `threshold` of them). The
averager learns the size-weighted sum and the total size, steps the strategy from their
quotient (only strategies that step from the mean: `from_mean`), and the record names who
contributed and who dropped out, never a client's weights.

Integer and bool tensors (BatchNorm's counts) are not summed (soma.secagg refuses them:
keeping one client's would reveal it); the round keeps the start's.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from soma.nodes import Export
from soma.round import (
    Meeting,
    RoundError,
    averager,
    check_average,
    check_signed,
    layout,
    once,
    records,
    tree_refusal,
)
from soma.round import signing as signatures
from soma.round.once import POLL, Backoff, Place
from soma.store import Store
from soma.store.errors import StoreError
from soma.strategies import (
    Arrival,
    Strategy,
    at_round,
    check_arrivals,
    takes_mean,
    under_secure_aggregation,
    uniform,
)


def session_prefix(meeting: Meeting) -> str:
    return layout.secagg(meeting.prefix)


def check_strategy(name: str, strategy: Strategy) -> None:
    """Secure aggregation hands the strategy the mean alone, never an update."""
    if not takes_mean(strategy):
        refusal = tree_refusal(name).replace("hierarchical averaging (tree)", "secure aggregation")
        raise RoundError(refusal.replace("or no tree", "or no secure aggregation"))


def floats_of(export: Export) -> Export:
    """What is summed: the float tensors (counts stay the start's)."""
    return {
        node: {k: t for k, t in keys.items() if t.dtype.is_floating_point}
        for node, keys in export.items()
    }


def session_of(meeting: Meeting):
    from soma.secagg import Session

    if meeting.secure is None:
        raise RoundError(f"{meeting.what} is not under secure aggregation")
    prefix, members = session_prefix(meeting), tuple(meeting.members)
    return Session(prefix, members, meeting.secure, signing=meeting.signing)


def weight_of(strategy: Strategy, size: float | None) -> float | None:
    """What a client's export weighs in the secure sum: its size, or 1 for a strategy that
    weighs every client the same (`uniform`: distributed DP's sensitivity bound)."""
    return None if uniform(strategy) else size


def check_export(meeting: Meeting, client: int, export: Export, size: float | None) -> None:
    """What the secure sum would refuse of this export (NaN, infinities, a value past the
    ring's bound), refused before it is masked: its client then drops out, saying why."""
    from soma.secagg import check_input

    check_input(session_of(meeting), client, floats_of(export), size)


def take_part(
    store: Store,
    meeting: Meeting,
    clients: Sequence[int],
    train: Callable[[int], tuple[Export, float | None] | str],
    *,
    deadline: float | None,
    backoff: Backoff = POLL,
) -> list[int]:
    """Clients `clients` of this process through every phase; `train(k)` is client k's
    (export, size), or why it drops out (text). The clients that contributed."""
    from soma.secagg import advertise, masked_input, reveal, share, withdraw
    from soma.secagg.consistency import confirm

    session = session_of(meeting)
    secrets = {k: advertise(store, session, k) for k in clients}
    for k in clients:
        share(store, session, secrets[k], deadline=deadline, backoff=backoff)
    contributed = []
    for k in clients:
        trained = train(k)
        if isinstance(trained, str):  # it shared: the others' shares unmask without it
            withdraw(store, session, k, trained)
            continue
        export, size = trained
        masked_input(
            store, session, secrets[k], floats_of(export), size, deadline=deadline, backoff=backoff
        )
        keep_secure_record(store, meeting, records.SecureRecord(k, session.prefix))
        contributed.append(k)
    for k in contributed if meeting.signing is not None else ():  # all sign before any reveals
        confirm(store, session, secrets[k], deadline=deadline, backoff=backoff)
    for k in contributed:
        reveal(store, session, secrets[k], deadline=deadline, backoff=backoff)
    return contributed


def keep_secure_record(store: Store, meeting: Meeting, record: records.SecureRecord) -> str:
    """That client `record.client` took part, under its name, signed by it with a roster."""
    name = meeting.client(record.client)
    return signatures.keep(store, meeting.signing, record.value(), name=name, by=record.client)


class _SecureAveraging:
    """The averaging of a published secure sum, as `soma.round.once` asks about it."""

    def __init__(
        self,
        store: Store,
        meeting: Meeting,
        strategy: Strategy,
        unmask: bool,
        *,
        deadline: float | None,
        lease: float,
    ) -> None:
        self.store, self.meeting, self.strategy = store, meeting, strategy
        self.what, self.unmask = meeting.what, unmask
        self.deadline, self.lease = deadline, lease

    def done(self) -> str | None:
        return self.store.resolve(self.meeting.average)

    def ready(self, past: bool) -> str | None:
        if self.unmask:  # a client of the round: unmask (once, whoever claims it), then go on
            from soma.secagg import unmask

            unmask(self.store, session_of(self.meeting), deadline=self.deadline, lease=self.lease)
            self.unmask = False
        return self.store.resolve(layout.session(session_prefix(self.meeting), "sum"))

    def check(self, inputs: str) -> None:
        check_strategy(self.meeting.strategy, self.strategy)
        sum_name = layout.session(session_prefix(self.meeting), "sum")
        check_signed(self.store, self.meeting, inputs, name=sum_name, writer=None, what="its sum")
        check_sum(self.store, self.meeting, inputs)
        averager(self.meeting)  # a roster member's key to sign the average with, or refused

    def place(self, inputs: str) -> Place:
        key = hashlib.sha256(f"{self.meeting.key}/secure/{inputs}".encode()).hexdigest()
        return Place(self.meeting.averaging(key))

    def compute(self, inputs: str, me: dict[str, Any]) -> str:
        return _average(self.store, self.meeting, self.strategy, inputs, me)

    def settle(self, published: str) -> str:
        if self.store.resolve(self.meeting.average) is None:
            once.publish(self.store, self.meeting.average, published)
        return self.store.resolve(self.meeting.average) or published

    def missing(self) -> tuple[list[int], str]:
        return [], " (the secure sum was never published)"


def check_sum(store: Store, meeting: Meeting, sum_digest: str) -> None:
    """The published secure sum as the averaging will read it: a sum's record (its keys),
    contributors among the round's members, a finite total above zero and every summed
    value finite; checked by every process before the averaging is claimed, naming the sum,
    however its record got there."""

    import torch

    from soma.secagg.session import VERSION

    where = f"{meeting.what}: the secure sum {sum_digest}"
    try:
        result = store.recall_digest(sum_digest, lazy=True)
    except (StoreError, OSError) as error:
        raise RoundError(f"{where} cannot be read: {type(error).__name__}: {error}") from None
    if not isinstance(result, dict) or result.get("secagg") != VERSION:
        raise RoundError(f"{where} is not a secure sum's record")
    missing = [k for k in ("weighted", "total", "contributors", "dropped", "error_bound")
               if k not in result]  # fmt: skip
    if missing:
        raise RoundError(f"{where} has no {', '.join(map(repr, missing))}")
    contributors = result["contributors"]
    if not isinstance(contributors, list) or not all(
        isinstance(k, int) and k in meeting.members for k in contributors
    ):
        raise RoundError(f"{where}: contributors {contributors!r} are not the round's clients")
    total = result["total"]
    if (
        isinstance(total, bool)
        or not isinstance(total, (int, float))
        or not (math.isfinite(total) and total > 0)
    ):
        raise RoundError(f"{where}: its total size {total!r} is not a finite number above zero")
    weighted = result["weighted"]
    if not isinstance(weighted, dict):
        raise RoundError(f"{where}: its weighted sum is not a map of nodes")
    for node, keys in weighted.items():
        if not isinstance(keys, dict):
            raise RoundError(f"{where}: node {node!r} is not a map of tensors")
        for key, tensor in keys.items():
            if not isinstance(tensor, torch.Tensor) or not bool(torch.isfinite(tensor).all()):
                raise RoundError(
                    f"{where}: node {node!r} key {key!r} is not a tensor of finite values; "
                    "refused before the averaging is claimed"
                )


def mean_of_sum(store: Store, sum_digest: str, previous: Export) -> Export:
    """The clients' mean from the published secure sum: its floats, the start's counts."""
    from soma.secagg import average

    result = store.recall_digest(sum_digest)
    assert isinstance(result, dict)
    mean = average(result["weighted"], result["total"], like=floats_of(previous))
    return {node: {**keys, **mean.get(node, {})} for node, keys in previous.items()}


def _average(
    store: Store, meeting: Meeting, strategy: Strategy, sum_digest: str, me: dict[str, Any]
) -> str:
    result = store.recall_digest(sum_digest)
    assert isinstance(result, dict)
    previous = store.recall_digest(meeting.start)
    whole = mean_of_sum(store, sum_digest, previous)
    state = None if meeting.state is None else store.recall_digest(meeting.state)
    arrived = [Arrival(k, None, False) for k in result["contributors"]]
    check_arrivals(strategy, arrived, clients=meeting.clients)  # e.g. distributed DP's m
    strategy = at_round(strategy, round=meeting.round, seed=meeting.config.get("seed"))
    strategy = under_secure_aggregation(strategy)  # the store holds the sum, no client's input
    weights, new_state = strategy.from_mean(previous, whole, state, clients=meeting.clients)
    came = set(result["contributors"])
    record = records.average_record(
        meeting,
        left_out={
            k: "dropped out after sharing its keys" if k in result["dropped"] else "never came"
            for k in meeting.members
            if k not in came
        },
        inputs=[records.secure_entry(k) for k in sorted(came)],
        weights=store.put_value(weights),
        state=None if new_state is None else store.put_value(new_state),
        averaged_by=me,
        secure={
            "sum": sum_digest,
            "threshold": meeting.secure,
            "error_bound": result["error_bound"],
        },
    )
    by = averager(meeting)
    return signatures.put(store, meeting.signing, record.value(), name=meeting.average, by=by)


def average_round(
    store: Store,
    meeting: Meeting,
    strategy: Strategy,
    *,
    took_part: bool,
    deadline: float | None,
    backoff: Backoff = POLL,
    sleep: Callable[[float], None] = time.sleep,
    lease: float,
) -> str:
    """The meeting's average record (digest), once the secure sum is published: a process
    whose clients took part unmasks (whoever claims it first), any other waits for it. On a
    bucket both claims (the unmasking and the averaging) come with leases of `lease` seconds,
    their records signed with the run's roster."""
    if meeting.start is None:
        raise RoundError(f"{meeting.what}: a secure round needs the weights it started from")
    work = _SecureAveraging(
        store, meeting, strategy, unmask=took_part, deadline=deadline, lease=lease
    )
    digest = once.once(
        store,
        work,
        deadline=deadline,
        backoff=backoff,
        sleep=sleep,
        lease=lease,
        signing=meeting.signing,
    )
    check_average(store, meeting, digest)
    return digest
