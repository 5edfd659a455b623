"""One client's part in a round, the same in every mode: train from the round's start, release
what the strategy releases, contribute (plain) or hand the export to secure aggregation's
masking (secure); or leave the round, saying why.

Used by `soma client` and `soma simulate` (through soma.run.drive), the workflow's train jobs
(soma.workflow) and its secure train jobs (soma.workflow.secure). A client that cannot take part
(its task raised, its export was refused) always records why (a drop-out record, or under
secure aggregation its withdrawal), so that its peers learn it at once instead of waiting out
their deadline. When the round can go on without it (`goes_on_without_some`), the process
goes on; otherwise it raises `CannotTakePart`, naming the client and the reason.

Who failed is decided by what failed (`failed`): only the task's own code (its shard, its
training: run inside `task_code`) makes a client drop out. An error of the store (any
`StoreError`, an OS error met while reading or writing it, which the store has already
retried for its patience: soma.store.patience) is not the client's: it raises `StoreFault`,
so the process fails naming the store and the error, and no drop-out is recorded; a quorum
then never averages around a broken store. Before it raises, the client leaves a fault note
(soma.round.client.note_fault) if the store still takes one, which stops its peers at once.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from soma import transfer
from soma.errors import SomaError
from soma.nodes import Export, export, load
from soma.round import Contradicts, Contribution, Meeting, contribute, drop, dropout_reason
from soma.round.client import forget_fault, note_fault, released
from soma.round.once import RoundError
from soma.run.evaluation import training_metrics
from soma.run.personal import load_round, own_state, shared
from soma.slurm.time_limit import raised_at_time_limit
from soma.store import Store
from soma.store.errors import CorruptBlob, StoreError, UnknownDigest
from soma.strategies import Strategy, train_locally
from soma.tasks import Context
from soma.training import training_seed, training_threads

LOG = logging.getLogger("soma.client")


class TaskFailed(RoundError):
    """The task's own code raised (`error`): the client's failure, so it drops out."""

    def __init__(self, error: Exception) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


@contextmanager
def task_code() -> Iterator[None]:
    """Whatever the code inside raises is the task's (its shard, its training), even an
    OSError: its own data file missing is the client's failure, not the store's."""
    try:
        yield
    except TaskFailed:
        raise
    except Exception as error:
        raise TaskFailed(error) from error


class CannotTakePart(RoundError):
    """A client could not take part in a round that cannot go on without it; names the
    client, the round and why (its drop-out is recorded already)."""


@dataclass
class Hosted:
    """One client a process trains: its shard, the size it weighs, its own strategy state
    (SCAFFOLD's c_i: the object, carried from the last round it trained)."""

    index: int
    data: Any
    size: int
    own: Any = None


def context_of(meeting: Meeting, client: int, rounds: int | None) -> Context | None:
    """Where client `client` stands in `meeting`'s round of a run of `rounds` rounds (None
    when the caller does not know them: the task is then told nothing)."""
    if rounds is None:
        return None
    return Context(round=meeting.round, rounds=rounds, client=client, clients=meeting.clients)


@dataclass
class Outcome:
    """What a client's step came to: its training metrics and what it wrote (plain: the
    contribution; secure: the export and the weight it is summed with), or why it left."""

    client: int
    metrics: Any = None
    contribution: Contribution | None = None
    trained: tuple[Export, float | None] | None = None
    dropped: str | None = None


def read_once(store: Store, digest: str) -> Callable[[], Export]:
    """The value of blob `digest`, read and verified by the first call and handed to the
    next: the round's start, which every client a process hosts trains from (read once a
    round, not once a client; `load` copies it, so no client's training can touch it). A
    read that fails is not kept (functools.cache keeps no exception): the next call reads again."""
    return functools.cache(functools.partial(store.recall_digest, digest))


def _train(
    store: Store,
    meeting: Meeting,
    task: Any,
    strategy: Strategy,
    nodes: Any,
    hosted: Hosted,
    rounds: int | None,
    start: Callable[[], Export] | None = None,
) -> tuple[Any, Export | None, Any]:
    """Train `hosted` from the round's start (`start()`, or read from the store) with its
    (run seed, round, client) seed; its personal nodes (if the run has any,
    soma.run.personal) from its own state."""
    personal, seed = personal_of(meeting), meeting.config["seed"]
    if personal:
        fresh = functools.partial(task.nodes, seed)
        load_round(nodes, store.recall_digest(meeting.start), hosted.own, personal, fresh)
        mine = None  # the own state is the personal nodes' (no client side: RunSpec.checked)
    else:
        load(nodes, store.recall_digest(meeting.start) if start is None else start())
        mine = hosted.own
    state = None if meeting.state is None else store.recall_digest(meeting.state)
    seed = training_seed(seed, meeting.round, hosted.index)
    context = context_of(meeting, hosted.index, rounds)
    threads = meeting.config.get("threads", 1)  # the run's, whatever this process was given
    with task_code(), raised_at_time_limit(), training_threads(threads):  # soma.slurm's signal
        return train_locally(
            strategy, task, nodes, hosted.data, seed=seed, state=state, mine=mine, context=context
        )


def personal_of(meeting: Meeting) -> tuple[str, ...]:
    """The run's personal nodes, which its meeting carries in the run's identity."""
    return tuple(meeting.config.get("personal") or ())


def plain(
    store: Store,
    meeting: Meeting,
    task: Any,
    strategy: Strategy,
    nodes: Any,
    hosted: Hosted,
    *,
    rounds: int | None = None,
    start: Callable[[], Export] | None = None,
) -> Outcome:
    """Train and contribute, or leave saying why (see the module). `hosted.own` becomes the
    client's new own state. `start`: the round's start as `read_once` hands it to every
    client a process hosts (None: read from the store).

    A client whose distributed-DP release of the round is in the store already (a restart
    after a kill) goes on from it, without training: fresh noise is never drawn for a round
    it released (soma.round.client.released); its metrics are then none ({})."""
    release = releases(strategy)
    try:
        _forget_note(store, meeting, hosted.index)  # it tries again: its old note stops nobody
        done = released(store, meeting, hosted.index) if release else None
        if done is not None:
            LOG.info("client %d goes on from its release in %s", hosted.index, meeting.what)
            hosted.own = None if done.own is None else store.recall_digest(done.own)
            return Outcome(hosted.index, metrics={}, contribution=done)
        metrics, extra, own = _train(store, meeting, task, strategy, nodes, hosted, rounds, start)
        sent, personal = export(nodes), personal_of(meeting)
        if personal:  # never sent, kept as the client's own state
            sent, own = shared(sent, personal), own_state(sent, personal)
        sent = transfer.at(sent, meeting.config.get("transfer", transfer.FULL))
        made = contribute(
            store,
            meeting,
            sent,
            mine=hosted.index,
            size=hosted.size,
            extra=extra,
            own=own,
            release=release,
            metrics=training_metrics(metrics),  # in the record it signs (soma.round.records)
        )
    except Contradicts:  # it already brought other weights: not a drop-out, a refusal
        raise
    except Exception as error:  # the task failed or the export was refused
        return failed(store, meeting, hosted.index, error)
    hosted.own = own
    return Outcome(hosted.index, metrics=metrics, contribution=made)


def releases(strategy: Strategy) -> bool:
    """Whether each client's export under `strategy` is a release (distributed DP: its noise
    is drawn by the attempt), claimed once per client and round (soma.round.client)."""
    return getattr(strategy, "releases", False) is True


def secure(
    store: Store,
    meeting: Meeting,
    task: Any,
    strategy: Strategy,
    nodes: Any,
    hosted: Hosted,
    *,
    rounds: int | None = None,
) -> Outcome:
    """Train, and check the export secure aggregation would mask (its `trained`), or
    withdraw saying why (see the module); masking it is soma.secagg.round's."""
    from soma.secagg import round as secure_round

    try:
        _forget_note(store, meeting, hosted.index)
        metrics, _, _ = _train(store, meeting, task, strategy, nodes, hosted, rounds)
        # no training metrics kept: nothing per client in clear under secure aggregation
        trained, weight = export(nodes), secure_round.weight_of(strategy, hosted.size)
        secure_round.check_export(meeting, hosted.index, trained, weight)
    except Exception as error:  # it shared its keys: the others unmask without it
        return failed(store, meeting, hosted.index, error)
    return Outcome(hosted.index, metrics=metrics, trained=(trained, weight))


class StoreFault(RoundError):
    """The store failed a client's part in a round (unreachable past its patience, full,
    failing, damaged): not the client's failure, so it does not drop out, it fails, naming the
    client, the round, the store and the error."""


class StoreDamaged(StoreFault):
    """What a round starts from (its start, the strategy's state, a client's own state) is
    missing or corrupt in the store: the store's damage, not the client's failure, so the
    client does not drop out (a drop-out would stand after `soma repair`); it fails."""


def store_fault(
    store: Store, error: BaseException, meeting: Meeting, client: int
) -> StoreFault | None:
    """The refusal to drop out when `error` is the store's (see the module), naming the
    client, the round, the store and what to do; None when it is the client's own."""
    if isinstance(error, TaskFailed) or not isinstance(error, (StoreError, OSError)):
        return None
    if isinstance(error, (UnknownDigest, CorruptBlob)):
        return StoreDamaged(
            f"client {client} cannot train in {meeting.what}: the store is damaged "
            f"({type(error).__name__}: {error}); that is not the client's failure, so it does "
            "not drop out: run `soma verify` and `soma repair` on the store, then run again"
        )
    return StoreFault(
        f"client {client} cannot take part in {meeting.what}: the store {store} failed "
        f"({type(error).__name__}: {error}); that is not the client's failure, so it does not "
        "drop out (its peers would average without it): once the store works, run again"
    )


@contextmanager
def store_work(store: Store, what: str, clients: Iterable[int], doing: str) -> Iterator[None]:
    """What a process does in the store outside a client's train step (the run's start, a
    round's announcement, its average, each evaluation record, the round's `federated`): a
    fault of the store met inside (an OS error, the store's own `StoreUnavailable` and
    `UnwritableStore` among them; a blob missing or corrupt) is raised as a `StoreFault`
    (`StoreDamaged` for the blob) naming the process's `clients`, `what` (the round, or the
    run), the store, what it was `doing` and the error, so the command says it in one line,
    never a traceback. Soma's other refusals pass as they are: each names itself (a store's
    missing bucket, a round's `RoundIncomplete`, which is a TimeoutError). Keep task code
    outside: its own OSError is the task's, not the store's."""
    try:
        yield
    except (OSError, UnknownDigest, CorruptBlob) as error:
        faulty = isinstance(error, StoreError) or not isinstance(error, SomaError)
        if not faulty:
            raise
        raise outside_fault(store, what, clients, doing, error) from error


def outside_fault(
    store: Store, what: str, clients: Iterable[int], doing: str, error: BaseException
) -> StoreFault:
    """`store_work`'s refusal: the store's `error`, met while `doing` in `what`."""
    ks = sorted(set(clients))
    who = f"client {ks[0]}" if len(ks) == 1 else "this process"
    if len(ks) > 1:
        more = f" and {len(ks) - 6} more" if len(ks) > 6 else ""
        who = f"clients {', '.join(map(str, ks[:6]))}{more}"
    said = f"{type(error).__name__}: {error}"
    if isinstance(error, (UnknownDigest, CorruptBlob)):
        return StoreDamaged(
            f"{who} cannot go on in {what}: the store {store} is damaged ({said}), met while "
            f"{doing}: run `soma verify` and `soma repair` on the store, then run again"
        )
    return StoreFault(
        f"{who} cannot go on in {what}: the store {store} failed while {doing} ({said}): "
        "once the store works, run again"
    )


def failed(store: Store, meeting: Meeting, client: int, error: BaseException) -> Outcome:
    """The one rule for a client whose part in a round failed with `error` (being handled),
    in every mode: the store's fault is raised (`store_fault`), after a fault note that stops
    the client's peers if the store still takes one; anything else is the client's drop-out
    (`leave`), its traceback logged."""
    fault = store_fault(store, error, meeting, client)
    if fault is not None:
        _note(store, meeting, client, str(fault))
        raise fault from error
    log_traceback(meeting, client)
    own = error.error if isinstance(error, TaskFailed) else error
    return leave(store, meeting, client, dropout_reason(own))


def _note(store: Store, meeting: Meeting, client: int, why: str) -> None:
    """The fault note that stops the client's peers at once, if the store still takes one
    (best effort: where it takes nothing more, they wait for it as for a client that never
    came); under secure aggregation beside its session's withdrawals."""
    if meeting.secure is None:
        note_fault(store, meeting, client, why)
        return
    from soma.secagg.roster import note_fault as note_secure_fault
    from soma.secagg.round import session_of

    try:
        note_secure_fault(store, session_of(meeting), client, why)
    except Exception as error:  # the store is what failed
        LOG.warning("client %d: no fault note in %s either: %s", client, meeting.what, error)


def _forget_note(store: Store, meeting: Meeting, client: int) -> None:
    """The client's fault note from an earlier attempt at this round, forgotten as it tries
    again (its peers give a note a grace for this: soma.round.client.FAULT_GRACE)."""
    if meeting.secure is None:
        forget_fault(store, meeting, client)
        return
    from soma.secagg.round import session_of

    store.forget(session_of(meeting).name("fault", client))  # False: none there


def log_traceback(meeting: Meeting, client: int) -> None:
    """The exception being handled, with its traceback, in the log of whoever hosts the
    client (a drop-out's record keeps only its one-line reason)."""
    LOG.warning("client %d could not take part in %s:", client, meeting.what, exc_info=True)


def leave(store: Store, meeting: Meeting, client: int, why: str) -> Outcome:
    """Record that `client` leaves the round and why (a drop-out; under secure aggregation
    its withdrawal); then go on if the round can without it, else raise CannotTakePart."""
    if meeting.secure is not None:
        from soma.secagg import withdraw
        from soma.secagg.round import session_of

        withdraw(store, session_of(meeting), client, why)
    else:
        drop(store, meeting, mine=client, why=why)
    if not goes_on_without_some(meeting):
        n = len(meeting.members)
        raise CannotTakePart(
            f"client {client} cannot take part in {meeting.what}, which needs all of its "
            f"{n} clients: {why}; to go on without it, give a quorum below {n} (e.g. "
            f"--quorum {n - 1}, or --config quorum={n - 1} in the workflow): the round is "
            "then averaged without it, its drop-out named in the average"
        )
    LOG.warning("client %d drops out of %s: %s", client, meeting.what, why)
    return Outcome(client, dropped=why)


def goes_on_without_some(meeting: Meeting) -> bool:
    """Whether the round can be averaged without some of its clients: a quorum below its
    sample; under secure aggregation a threshold below it (the sum is unmasked with any
    `threshold` of the round's clients, and secure aggregation does not read the quorum)."""
    if meeting.secure is not None:
        return meeting.secure < len(meeting.members)
    return meeting.may_go_on_without_some
