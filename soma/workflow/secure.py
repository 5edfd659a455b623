"""The workflow's jobs under secure aggregation (config `secure_aggregation`): a phase a job.

A client's phases (soma.secagg) run in separate jobs, each after every client of the round
finished the phase before (the DAG is the barrier, so no job ever waits for one that has
not started): `keys` (advertise), `share`, `train` (train, then the masked input), `reveal`,
and the round's `average` (unmask once, then the strategy's step from the mean). A client's
private secrets (its two X25519 private keys, its self-mask seed, its own shares) are kept
between its jobs in a folder of its own (soma.config.secrets: config
`secure_aggregation.secrets`, mode 0700, the file 0600), never in the store, and deleted by
its reveal job: whoever reads that folder and the store can unmask that client's export.

Keys are fresh for every run of a round: a rerun round draws new ones, so its receipts are
not the bits of the first run (the average is the same within the quantization bound). A
client masks once: a rerun of its train job after an earlier attempt claimed its masking
writes nothing masked (soma.secagg.protocol's `masking/<k>`): the earlier masked input
stands, or, if it never came, the client drops out.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from soma.config import secrets as private
from soma.config.spec import RunSpec
from soma.round import Meeting, holders, read_record
from soma.round.records import RecordError, SecureRecord, read_average
from soma.run import base, step
from soma.run.step import Hosted
from soma.secagg import round as secure_round
from soma.store import Store
from soma.workflow.averaging import average_receipt
from soma.workflow.common import LOG, meeting_of, spec_of, strategy_of, task_of
from soma.workflow.receipts import read_receipt, write_receipt

# Each phase waits for the ones before through the DAG; this is only how long a job waits
# for a record another job wrote, on a folder slow to show it.
DEADLINE = 600.0


def _secrets_path(config: Mapping[str, Any], meeting: Meeting, client: int):
    """The file of the client's secrets for this round, in its own folder."""
    template = (config.get("secure_aggregation") or {}).get("secrets")
    return private.path_of(template, meeting.run, meeting.round, client)


def _secrets(config: Mapping[str, Any], meeting: Meeting, client: int):
    from soma.secagg import Secrets

    path = _secrets_path(config, meeting, client)
    return Secrets.from_private_record(secure_round.session_of(meeting), private.read(path, client))


def _receipt(meeting: Meeting, client: int) -> dict[str, Any]:
    return {"run": meeting.run, "round": meeting.round, "client": client, "meeting": meeting.key}


def keys(config: Mapping[str, Any], round: int, client: int, previous: str, receipt: str) -> None:
    """Phase 1: the client's fresh keys; the public half to the store, the rest kept in the
    client's own folder."""
    from soma.secagg import advertise

    meeting = meeting_of(spec_of(config), round, read_receipt(previous))
    path = _secrets_path(config, meeting, client)
    private.own_folder(path.parent, client)  # refused (another user's) before any key is out
    secrets = advertise(RunSpec.config_store(config), secure_round.session_of(meeting), client)
    private.keep(path, client, secrets.private_record())
    write_receipt(receipt, {**_receipt(meeting, client), "phase": "keys"})
    LOG.info("%s, client %d: keys advertised", meeting.what, client)


def share(config: Mapping[str, Any], round: int, client: int, previous: str, receipt: str) -> None:
    """Phase 2: the client's secrets shared among the round's clients, each share encrypted."""
    from soma.secagg import share as share_secrets

    meeting = meeting_of(spec_of(config), round, read_receipt(previous))
    secrets = _secrets(config, meeting, client)
    among = share_secrets(RunSpec.config_store(config), secrets.session, secrets, deadline=DEADLINE)
    private.keep(_secrets_path(config, meeting, client), client, secrets.private_record())
    write_receipt(receipt, {**_receipt(meeting, client), "phase": "share", "among": among})
    LOG.info("%s, client %d: secrets shared among clients %s", meeting.what, client, among)


def train(config: Mapping[str, Any], round: int, client: int, previous: str, receipt: str) -> None:
    """Phase 3: train, then write only the masked input; or withdraw, saying why (the one
    client step, soma.run.step: the job fails when the round cannot go on without it). A
    rerun after an earlier attempt claimed the client's masking trains nothing and masks
    nothing (`_masked_before`)."""
    from soma.secagg import masked_input

    tic = time.perf_counter()
    spec = spec_of(config)
    store = RunSpec.config_store(config)
    started = read_receipt(previous)
    meeting = meeting_of(spec, round, started)
    earlier = _masked_before(store, meeting, client)
    if earlier is not None:
        write_receipt(receipt, earlier)
        return
    secrets = _secrets(config, meeting, client)
    task = task_of(spec)
    base.check(task, spec.seed, spec.run, started.get("base"))  # the run's base (soma.run.base)
    try:
        with step.task_code():
            data = task.shard(client, spec.clients)
            hosted = Hosted(client, data, task.size(data))
    except Exception as error:  # its shard: it shared its keys, the others unmask without it
        done = step.failed(store, meeting, client, error)
    else:
        nodes = task.nodes(spec.seed)
        done = step.secure(
            store, meeting, task, strategy_of(spec), nodes, hosted, rounds=spec.rounds
        )
    if done.dropped is not None:  # withdrawn, and the round goes on without it
        write_receipt(receipt, {**_receipt(meeting, client), "dropped": done.dropped})
        return
    trained, size = done.trained
    floats = secure_round.floats_of(trained)
    masked_input(store, secrets.session, secrets, floats, size, deadline=DEADLINE)
    record = SecureRecord(client, secrets.session.prefix)
    secure_round.keep_secure_record(store, meeting, record)
    # No per-client metrics in the receipt: its loss and its step count (so its size) are
    # what the masks hide, and every job can read the receipts.
    written = {**_receipt(meeting, client), "secure": True}
    write_receipt(receipt, written)
    LOG.info(
        "%s, client %d: trained, sent its masked input (%.2f s)",
        meeting.what,
        client,
        time.perf_counter() - tic,
    )


def _masked_before(store: Store, meeting: Meeting, client: int) -> dict[str, Any] | None:
    """The receipt of a rerun train job whose earlier attempt claimed the client's masking
    (None: none did). Its masks are used once (soma.secagg.protocol), so this attempt draws
    none: the earlier masked input stands if it was written, else the client drops out (its
    self-mask seed is then never revealed, so whatever the earlier attempt wrote stays hidden)."""
    session = secure_round.session_of(meeting)
    if store.resolve(session.name("masking", client)) is None:
        return None
    if store.resolve(session.name("masked", client)) is not None:
        secure_round.keep_secure_record(store, meeting, SecureRecord(client, session.prefix))
        LOG.warning(
            "%s, client %d: an earlier attempt sent its masked input; nothing masked again",
            meeting.what,
            client,
        )
        return {**_receipt(meeting, client), "secure": True, "metrics": {}, "earlier": True}
    why = "an earlier attempt claimed its masking and never sent it: its masks are used once"
    return {**_receipt(meeting, client), "dropped": step.leave(store, meeting, client, why).dropped}


def reveal(
    config: Mapping[str, Any],
    round: int,
    client: int,
    previous: str,
    trained: str,
    receipt: str,
) -> None:
    """Phase 4: the shares that unmask the round's sum (of a client that trained); then the
    client's secrets of the round are deleted, their last use."""
    from soma.secagg import reveal as reveal_shares

    meeting = meeting_of(spec_of(config), round, read_receipt(previous))
    path = _secrets_path(config, meeting, client)
    store = RunSpec.config_store(config)
    done = store.resolve(secure_round.session_of(meeting).name("reveal", client))
    if done is not None and not path.exists():  # a rerun: revealed, and its secrets deleted
        came = sorted(int(u) for u in read_record(store, done)["b"])
        write_receipt(receipt, {**_receipt(meeting, client), "phase": "reveal", "unmasks": came})
        return
    if "dropped" in read_receipt(trained):
        write_receipt(receipt, {**_receipt(meeting, client), "phase": "reveal", "dropped": True})
        private.forget(path)
        return
    secrets = _secrets(config, meeting, client)
    came = reveal_shares(store, secrets.session, secrets, deadline=DEADLINE)
    write_receipt(receipt, {**_receipt(meeting, client), "phase": "reveal", "unmasks": came})
    private.forget(path)
    LOG.info("%s, client %d: shares revealed, its secrets %s deleted", meeting.what, client, path)


def average(
    config: Mapping[str, Any], round: int, previous: str, revealed: Sequence[str], receipt: str
) -> None:
    """Phase 5: unmask the sum (once), step the strategy from the mean, publish the average."""
    tic = time.perf_counter()
    spec = spec_of(config)
    store = RunSpec.config_store(config)
    meeting = meeting_of(spec, round, read_receipt(previous))
    digest = secure_round.average_round(
        store,
        meeting,
        strategy_of(spec),
        took_part=True,
        deadline=DEADLINE,
        lease=spec.timing.lease,
    )
    record = read_average(store, digest)
    if record.secure is None:
        raise RecordError(f"{meeting.what}: average record {digest} is not a secure sum's")
    secure = {k: record.secure[k] for k in ("threshold", "error_bound")}
    write_receipt(receipt, average_receipt(meeting, record, inputs=record.inputs, secure=secure))
    LOG.info("%s: %s", meeting.what, holders.averaged(record.averaged_by))
    LOG.info(
        "%s: the secure sum of %d clients unmasked, weights %s (%.2f s)",
        meeting.what,
        len(record.inputs),
        record.weights,
        time.perf_counter() - tic,
    )
