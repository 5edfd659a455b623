"""A client's training metrics kept in the record of its weights (soma.run.evaluation,
soma.round.records): a contribution writes no `trained/<k>`, the round's `federated` is
aggregated from the records the average took, only from each one's own client, and a store
written before (each client's metrics under `trained/<k>`) is read to the same figures."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from soma import simulate
from soma.round import Meeting, layout
from soma.round.records import ClientRecord, RecordError, parse_client, read_average
from soma.run.evaluation import training_of
from soma.store import Store

CLIENTS = 3


def _run(folder: Path) -> tuple[Store, Meeting, list[dict]]:
    """A one-round unsigned run of the control task: its store, meeting and the average's
    inputs in client order."""
    simulate("soma.tasks.control", clients=CLIENTS, rounds=1, run="plain", store=folder)
    store = Store(folder)
    ((r, key),) = layout.meetings(store.bound(layout.rounds("plain")), "plain")
    prefix = layout.meeting("plain", r, key)
    about = store.recall(layout.about(prefix))
    fields = {f.name for f in dataclasses.fields(Meeting)} - {"signing"}
    given = {k: v for k, v in about.items() if k in fields}
    if given.get("expected") is not None:
        given["expected"] = tuple(given["expected"])
    meeting = Meeting(**given, signing=None)
    assert meeting.prefix == prefix
    inputs = read_average(store, store.resolve(layout.average(prefix))).inputs
    return store, meeting, sorted(inputs, key=lambda entry: entry["client"])


def test_a_contribution_keeps_its_training_metrics_in_its_record_and_no_name_of_their_own(
    tmp_path,
) -> None:
    store, meeting, inputs = _run(tmp_path / "s")
    assert not [n for n in store.bound("") if "/trained/" in n]
    read = training_of(store, meeting, inputs)
    for k, entry in enumerate(inputs):
        record = store.recall_digest(entry["record"])
        assert record["metrics"] and "loss" in record["metrics"]
        assert read[k] == {"client": k, "metrics": record["metrics"], "size": record["size"]}
    federated = store.recall(layout.federated(meeting.prefix))
    assert federated["trained"] == list(range(CLIENTS))
    assert federated["training"]["loss"]["clients"] == CLIENTS


def test_a_record_said_to_be_another_client_s_is_refused_naming_both(tmp_path) -> None:
    store, meeting, inputs = _run(tmp_path / "s")
    with pytest.raises(RecordError, match="client 0's, not client 2's"):
        training_of(store, meeting, [{"client": 2, "record": inputs[0]["record"]}])


def test_a_store_written_before_is_read_from_each_client_s_trained_record(tmp_path) -> None:
    """A client record with no metrics (written before they were kept in it) gives the
    client's `trained/<k>` as it was: the same figures, so such a round settles the same."""
    store, meeting, inputs = _run(tmp_path / "s")
    new = training_of(store, meeting, inputs)
    old_inputs = []
    for entry, said in zip(inputs, new, strict=True):
        k = entry["client"]
        old = {
            key: v for key, v in store.recall_digest(entry["record"]).items() if key != "metrics"
        }
        store.keep(layout.trained(meeting.prefix, k, meeting.clients), said)
        old_inputs.append({**entry, "record": store.put_value(old)})
    assert training_of(store, meeting, old_inputs) == new
    store.forget(layout.trained(meeting.prefix, 1, meeting.clients))
    assert [r["client"] for r in training_of(store, meeting, old_inputs)] == [0, 2]


def test_a_client_record_keeps_its_metrics_and_one_without_is_the_same_bytes_as_before() -> None:
    record = ClientRecord(3, "ab" * 32, 10, None, None, None, {"loss": 0.5})
    value = record.value()
    assert value["metrics"] == {"loss": 0.5}
    assert parse_client(value, client=3, name="n") == record
    plain = ClientRecord(3, "ab" * 32, 10).value()
    assert sorted(plain) == ["by", "client", "extra", "own", "size", "weights"]
    assert parse_client(plain, client=3, name="n").metrics is None
    with pytest.raises(RecordError, match="client 3's record 'n': its training metrics"):
        parse_client({**value, "metrics": [1, 2]}, client=3, name="n")
