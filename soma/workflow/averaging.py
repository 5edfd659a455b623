"""The workflow's `average` job: the round's average of exactly the weights its client
receipts name (or, at a site, of the whole round as the store has it), and the one schema of
an average receipt, which the secure average (soma.workflow.secure) writes too."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from soma.config.spec import RunSpec
from soma.round import (
    Input,
    Meeting,
    average_inputs,
    average_round,
    holders,
)
from soma.round.records import AverageRecord, read_average
from soma.store import Store
from soma.workflow.common import LOG, meeting_of, spec_of
from soma.workflow.receipts import clients_in, read_receipt, write_receipt


def average(
    config: Mapping[str, Any], round: int, clients: Sequence[str], previous: str, receipt: str
) -> None:
    """Average exactly the weights the client receipts name; once, whoever else tries."""
    tic = time.perf_counter()
    spec = spec_of(config)
    store = RunSpec.config_store(config)
    meeting = meeting_of(spec, round, read_receipt(previous))
    inputs = []
    for path in clients:
        for given in clients_in(read_receipt(path)):
            if "dropped" not in given:
                inputs.append(
                    Input(given["client"], given["weights"], given["size"], given.get("extra"))
                )
    digest = averaged(store, meeting, spec, inputs)
    record = read_average(store, digest)
    inputs_said = [
        {"client": i["client"], "weights": i["weights"], "size": i["size"]} for i in record.inputs
    ]
    write_receipt(receipt, average_receipt(meeting, record, inputs=inputs_said))
    _log_average(meeting, record, digest, time.perf_counter() - tic)


def averaged(store: Store, meeting: Meeting, spec: RunSpec, inputs: Sequence[Input]) -> str:
    """The round's average record: of exactly the inputs this snakemake's receipts name; or,
    at a site (config `site`), whose receipts name only its own clients, of the whole round
    as the store has it, waited for with nobody in charge (soma.round.average_round: the
    quorum, `average_deadline`): whichever site finds it complete averages it, once. While it
    waits, its log says for which clients and sites, or for which site's averaging."""
    deadline, lease = spec.timing.average_deadline, spec.timing.lease
    if spec.site is None:
        return average_inputs(store, meeting, inputs, deadline=deadline, lease=lease)
    return average_round(
        store, meeting, deadline=deadline, lease=lease, site=spec.site, sites=spec.site_clients()
    )


def average_receipt(
    meeting: Meeting, record: AverageRecord, *, inputs: list[Any], **more: Any
) -> dict[str, Any]:
    """An average job's receipt, plain or secure (soma.workflow.secure): one schema, built here."""
    return {
        "run": meeting.run,
        "round": meeting.round,
        "strategy": meeting.strategy,
        "weights": record.weights,
        "state": record.state,
        "inputs": inputs,
        "left_out": record.left_out,
        # the task's base (soma.run.base), named on to the next round's jobs
        **({"base": meeting.config["base"]} if "base" in meeting.config else {}),
        **more,
    }


def _log_average(meeting: Meeting, record: AverageRecord, digest: str, seconds: float) -> None:
    """What an average job did, for its log: who came (as the record says: at a site, the
    other sites' clients too), who was left out, whether this job computed the average or
    took another's (whose: its record's `averaged_by`), what came of it."""
    clients = ", ".join(str(i["client"]) for i in record.inputs) or "nobody"
    sizes = ", ".join(str(i["size"]) for i in record.inputs)
    LOG.info("%s: %s of clients %s (sizes %s)", meeting.what, meeting.strategy, clients, sizes)
    for left in record.left_out:
        LOG.warning("%s: client %s left out: %s", meeting.what, left["client"], left["why"])
    LOG.info("%s: %s", meeting.what, holders.averaged(record.averaged_by))
    LOG.info(
        "averaged weights %s (record %s, under %s) (%.2f s)",
        record.weights,
        digest,
        meeting.prefix,
        seconds,
    )
