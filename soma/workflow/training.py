"""The workflow's train jobs: one client's round (`train`), or several in one job
(`train_batch`, config `clients_per_job`), each client as its own job would train it, or
dropping out with its reason in the receipt."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from soma.config.configs import ConfigRefused
from soma.config.spec import RunSpec
from soma.round import (
    Meeting,
    holders,
    layout,
    read_record,
)
from soma.run import step
from soma.run.step import Hosted
from soma.store import Store
from soma.tasks import Task
from soma.workflow.common import (
    LOG,
    json_numbers,
    shown,
    spec_of,
    strategy_of,
    task_of,
    trained_meeting_of,
)
from soma.workflow.receipts import clients_in, read_receipt, write_receipt


def train(
    config: Mapping[str, Any],
    round: int,
    client: int,
    previous: str,
    receipt: str,
    before: str | None = None,
) -> None:
    """Client `client` of round `round`: start from `previous`'s weights, train, contribute.

    `before` is this client's receipt of the last round it took part in, if any: it names the
    client's own strategy state (SCAFFOLD's c_i), which this round's training continues from.
    A client that cannot take part (its training raised, its export was refused: NaN,
    infinities) records why in the store (soma.run.step, as in every mode). When the round may
    go on without some of its clients (a quorum below its sample), it drops out instead of
    failing the run, as it does when its previous attempt at this job died (a retry after the
    process was killed or its Slurm job was cancelled): its receipt says why, and the round's
    average names it as left out. Otherwise the job fails, naming the client and the reason.
    """
    spec = spec_of(config)
    task = task_of(spec)
    store = RunSpec.config_store(config)
    started = read_receipt(previous)
    meeting = trained_meeting_of(spec, task, round, started)
    written = _train_client(task, store, spec, meeting, client, started, before)
    write_receipt(receipt, _keeping_own(written, before))


def train_batch(
    config: Mapping[str, Any],
    round: int,
    batch: int,
    clients: Sequence[int],
    previous: str,
    receipt: str,
    before: Mapping[int, str | None],
) -> None:
    """Clients `clients` of round `round` in one job (config `clients_per_job`), each as its
    own train job would: from the round's start, with its own seed and state. One receipt
    holds each client's receipt, the very one `train` writes for it, under "clients"."""
    spec = spec_of(config)
    task = task_of(spec)
    store = RunSpec.config_store(config)
    started = read_receipt(previous)
    meeting = trained_meeting_of(spec, task, round, started)
    for k in clients:
        meeting.check_client(k)
    each = []
    for k in clients:
        written = _train_client(task, store, spec, meeting, k, started, before.get(k), batch=batch)
        each.append(_keeping_own(written, before.get(k)))
    write_receipt(receipt, {"run": meeting.run, "round": round, "batch": batch, "clients": each})


def _keeping_own(written: dict[str, Any], before: str | None) -> dict[str, Any]:
    """A client that dropped out keeps the own state it had (its personal nodes, SCAFFOLD's
    c_i) for the next round it trains, as a `soma client` process keeps it."""
    if "dropped" not in written or before is None:
        return written
    own = _own_state(before, written["client"])
    return written if own is None else {**written, "own": own}


def _own_state(before: str | None, client: int) -> str | None:
    """The client's own strategy state named by its receipt of the last round it trained."""
    if before is None:
        return None
    for given in clients_in(read_receipt(before)):
        if given["client"] == client:
            return given.get("own")
    raise ConfigRefused(f"receipt {before} has no client {client}: was it written by another run?")


def _train_client(
    task: Task,
    store: Store,
    spec: RunSpec,
    meeting: Meeting,
    client: int,
    started: Mapping[str, Any],
    before: str | None,
    *,
    batch: int | None = None,
) -> dict[str, Any]:
    """One client's training in a round, or its drop-out: the receipt either way. `batch`:
    the batch of `train_batch` it is trained in (None: its own `train` job)."""
    tic = time.perf_counter()
    died = _previous_attempt_died(store, meeting, client, batch=batch)
    if died and step.goes_on_without_some(meeting):
        return _drop_out(store, meeting, client, f"died: {died}")
    try:
        try:
            own = _own_state(before, client)
            with step.task_code():
                data = task.shard(client, spec.clients)
                size = task.size(data)
            own = None if own is None else store.recall_digest(own)
            hosted = Hosted(client, data, size, own=own)
        except Exception as error:  # before training: its shard, or its own state
            done = step.failed(store, meeting, client, error)
        else:
            nodes = task.nodes(spec.seed)
            done = step.plain(
                store, meeting, task, strategy_of(spec), nodes, hosted, rounds=spec.rounds
            )
    except step.StoreFault:  # once the store works, a rerun of this job is not a retry
        _forget_started(store, meeting, client)
        raise
    if done.dropped is not None:
        return _dropped(meeting, client, done.dropped)
    made = done.contribution
    written = {
        "run": meeting.run,
        "round": meeting.round,
        "client": client,
        "meeting": meeting.key,
        "started_from": started["weights"],
        "weights": made.weights,
        "size": hosted.size,
        "extra": made.extra,
        "own": made.own,
        "metrics": json_numbers(done.metrics),
    }
    _log_training(meeting, written, time.perf_counter() - tic)
    return written


def _forget_started(store: Store, meeting: Meeting, client: int) -> None:
    """The job's started marker forgotten, so that its rerun is not taken for the retry of a
    job that died (a drop-out); where the failing store will not even forget it, the rerun
    finds the fault note beside it instead (`_previous_attempt_died`)."""
    try:
        store.forget(_started_name(meeting, client))
    except Exception as error:  # the store is what failed
        LOG.warning("%s, client %d: its started marker stays: %s", meeting.what, client, error)


def _log_training(meeting: Meeting, written: Mapping[str, Any], seconds: float) -> None:
    """What a train job did, for its log: who, on how much, how it went, where it went."""
    LOG.info(
        "%s, client %d: trained on %s examples from weights %s: %s (%.2f s)",
        meeting.what,
        written["client"],
        written["size"],
        written["started_from"],
        shown(written["metrics"]),
        seconds,
    )
    LOG.info(
        "sent weights %s to the store as %s%s",
        written["weights"],
        meeting.client(written["client"]),
        "" if written.get("extra") is None else f" (with extra {written['extra']})",
    )


def _started_name(meeting: Meeting, client: int) -> str:
    """Beside the client's record, and fanned out the same way (see Meeting.client)."""
    return meeting.started(client)


def _previous_attempt_died(
    store: Store, meeting: Meeting, client: int, *, batch: int | None = None
) -> str | None:
    """Whether an earlier attempt at this very job started, left nothing, and is provably
    gone; and this attempt says that it started. A client trained in a batch's job (config
    `clients_per_job`) says which batch, so that the advice for its damaged export names the
    batch's receipt to rerun (soma.health.advice, soma.workflow.receipts.batch_path)."""
    name = _started_name(meeting, client)
    earlier = store.resolve(name)
    mine = {} if batch is None else {"batch": batch}
    store.bind(name, store.put_value(holders.me(role="training", client=client, **mine)))
    if earlier is None or store.resolve(meeting.client(client)) is not None:
        return None
    if store.resolve(layout.fault(meeting.prefix, client, meeting.clients)) is not None:
        return None  # it failed on the store's fault, and said so: this is its rerun
    holder = read_record(store, earlier)
    if not holders.gone(holder):
        return None
    return f"its previous job ({holders.describe(holder)}) ended before it wrote anything"


def _drop_out(store: Store, meeting: Meeting, client: int, why: str) -> dict[str, Any]:
    """The client leaves the round (soma.run.step.leave: recorded, and an error when the
    round cannot go on without it); its receipt."""
    return _dropped(meeting, client, step.leave(store, meeting, client, why).dropped)


def _dropped(meeting: Meeting, client: int, why: str) -> dict[str, Any]:
    return {
        "run": meeting.run,
        "round": meeting.round,
        "client": client,
        "meeting": meeting.key,
        "dropped": why,
    }
