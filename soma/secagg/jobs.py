"""The workflow's jobs under secure aggregation (config `secure_aggregation`): a phase a job.

A client's phases (soma.secagg) run in separate jobs, each after every client of the round
finished the phase before (the DAG is the barrier, so no job ever waits for one that has
not started): `keys` (advertise), `share`, `train` (train, then the masked input), `reveal`,
and the round's `average` (unmask once, then the strategy's step from the mean). A client's
private secrets (its two X25519 private keys, its self-mask seed, its own shares) are kept
between its jobs in its own folder, `private/<run>/round/<r>/client/<k>.json` (mode 0600),
never in the store: whoever reads that folder and the store can unmask that client's export,
so on a cluster it belongs on storage only the client's jobs can read.

Keys are fresh for every attempt: a rerun round draws new ones, so its receipts are not the
bits of the first run (the average is the same within the quantization bound).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from soma.round import Meeting, dropout_reason
from soma.round.records import RecordError, SecureRecord, read_average
from soma.run import step
from soma.run.step import Hosted
from soma.secagg import round as secure_round
from soma.store import Store
from soma.workflow import (
    LOG,
    average_receipt,
    json_numbers,
    meeting_of,
    read_receipt,
    strategy_of,
    task_of,
    write_receipt,
)

# Each phase waits for the ones before through the DAG; this is only how long a job waits
# for a record another job wrote, on a folder slow to show it.
DEADLINE = 600.0
# A client's secrets: readable by its own user only, whatever the umask (see the module docs).
PRIVATE = 0o600


def _secrets(meeting: Meeting, private: str):
    from soma.secagg import Secrets

    return Secrets.from_private_record(secure_round.session_of(meeting), read_receipt(private))


def _receipt(meeting: Meeting, client: int) -> dict[str, Any]:
    return {"run": meeting.run, "round": meeting.round, "client": client, "meeting": meeting.key}


def keys(
    config: Mapping[str, Any], round: int, client: int, previous: str, receipt: str, private: str
) -> None:
    """Phase 1: the client's fresh keys; the public half to the store, the rest kept private."""
    from soma.secagg import advertise

    meeting = meeting_of(config, round, read_receipt(previous))
    secrets = advertise(Store(config["store"]), secure_round.session_of(meeting), client)
    write_receipt(private, secrets.private_record(), mode=PRIVATE)
    write_receipt(receipt, {**_receipt(meeting, client), "phase": "keys"})
    LOG.info("%s, client %d: keys advertised", meeting.what, client)


def share(
    config: Mapping[str, Any],
    round: int,
    client: int,
    previous: str,
    private: str,
    receipt: str,
    shared: str,
) -> None:
    """Phase 2: the client's secrets shared among the round's clients, each share encrypted."""
    from soma.secagg import share as share_secrets

    meeting = meeting_of(config, round, read_receipt(previous))
    secrets = _secrets(meeting, private)
    among = share_secrets(Store(config["store"]), secrets.session, secrets, deadline=DEADLINE)
    write_receipt(shared, secrets.private_record(), mode=PRIVATE)
    write_receipt(receipt, {**_receipt(meeting, client), "phase": "share", "among": among})
    LOG.info("%s, client %d: secrets shared among clients %s", meeting.what, client, among)


def train(
    config: Mapping[str, Any],
    round: int,
    client: int,
    previous: str,
    private: str,
    receipt: str,
) -> None:
    """Phase 3: train, then write only the masked input; or withdraw, saying why (the one
    client step, soma.run.step: the job fails when the round cannot go on without it)."""
    from soma.secagg import masked_input

    tic = time.perf_counter()
    store = Store(config["store"])
    started = read_receipt(previous)
    meeting = meeting_of(config, round, started)
    secrets = _secrets(meeting, private)
    task = task_of(config)
    try:
        data = task.shard(client, config["clients"])
        hosted = Hosted(client, data, task.size(data))
    except Exception as error:
        done = step.leave(store, meeting, client, dropout_reason(error))
    else:
        nodes = task.nodes(config["seed"])
        done = step.secure(store, meeting, task, strategy_of(config), nodes, hosted)
    if done.dropped is not None:  # withdrawn, and the round goes on without it
        write_receipt(receipt, {**_receipt(meeting, client), "dropped": done.dropped})
        return
    trained, size = done.trained
    metrics = done.metrics
    floats = secure_round.floats_of(trained)
    masked_input(store, secrets.session, secrets, floats, size, deadline=DEADLINE)
    record = SecureRecord(client, secrets.session.prefix)
    secure_round.keep_secure_record(store, meeting, record)
    written = {**_receipt(meeting, client), "secure": True, "metrics": json_numbers(metrics)}
    write_receipt(receipt, written)
    LOG.info(
        "%s, client %d: trained, sent its masked input (%.2f s)",
        meeting.what,
        client,
        time.perf_counter() - tic,
    )


def reveal(
    config: Mapping[str, Any],
    round: int,
    client: int,
    previous: str,
    private: str,
    trained: str,
    receipt: str,
) -> None:
    """Phase 4: the shares that unmask the round's sum (of a client that trained)."""
    from soma.secagg import reveal as reveal_shares

    meeting = meeting_of(config, round, read_receipt(previous))
    if "dropped" in read_receipt(trained):
        write_receipt(receipt, {**_receipt(meeting, client), "phase": "reveal", "dropped": True})
        return
    secrets = _secrets(meeting, private)
    came = reveal_shares(Store(config["store"]), secrets.session, secrets, deadline=DEADLINE)
    write_receipt(receipt, {**_receipt(meeting, client), "phase": "reveal", "unmasks": came})


def average(
    config: Mapping[str, Any], round: int, previous: str, revealed: Sequence[str], receipt: str
) -> None:
    """Phase 5: unmask the sum (once), step the strategy from the mean, publish the average."""
    tic = time.perf_counter()
    store = Store(config["store"])
    meeting = meeting_of(config, round, read_receipt(previous))
    digest = secure_round.average_round(
        store, meeting, strategy_of(config), took_part=True, deadline=DEADLINE
    )
    record = read_average(store, digest)
    if record.secure is None:
        raise RecordError(f"{meeting.what}: average record {digest} is not a secure sum's")
    secure = {k: record.secure[k] for k in ("threshold", "error_bound")}
    write_receipt(receipt, average_receipt(meeting, record, inputs=record.inputs, secure=secure))
    LOG.info(
        "%s: the secure sum of %d clients unmasked, weights %s (%.2f s)",
        meeting.what,
        len(record.inputs),
        record.weights,
        time.perf_counter() - tic,
    )
