"""Federated evaluation's records in a signed run (soma.run.evaluation): `client/<k>` (its
training metrics in it) and `evaluated/<k>` signed by client k, `federated` by a roster member;
whoever settles a round refuses a forged client record, naming it, before it reaches the
round's `federated`, and reads no client's metrics from another client's record."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

pytest.importorskip("cryptography")

from signed_runs import CLIENTS, make_keys_and_roster, meeting_of, signed_run  # noqa: E402

from soma.round import Meeting, layout  # noqa: E402
from soma.round import signing as signatures  # noqa: E402
from soma.round.records import read_average  # noqa: E402
from soma.round.signing import Signing, SigningError, read_roster  # noqa: E402
from soma.run.evaluation import settle, training_of  # noqa: E402
from soma.store import Store  # noqa: E402


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("keys")
    make_keys_and_roster(folder)
    return folder


def _meeting(store: Store, prefix: str, keys: Path) -> Meeting:
    """The round's meeting as its clients held it (its identity, the roster and keys)."""
    about = store.recall(layout.about(prefix))
    fields = {f.name for f in dataclasses.fields(Meeting)} - {"signing"}
    given = {k: v for k, v in about.items() if k in fields}
    if given.get("expected") is not None:
        given["expected"] = tuple(given["expected"])
    signing = Signing.of(read_roster(keys / "roster.json"), str(keys / "{client}.key"))
    meeting = Meeting(**given, signing=signing)
    assert meeting.prefix == prefix
    return meeting


def test_every_evaluation_record_is_signed_by_its_writer(tmp_path, keys):
    store = signed_run(tmp_path / "s", keys)
    reader = Signing.of(read_roster(keys / "roster.json"), None)
    prefix = meeting_of(store, 0)
    for k in range(CLIENTS):
        assert store.resolve(layout.trained(prefix, k, CLIENTS)) is None  # in its record now
        assert "loss" in store.recall(layout.client(prefix, k, CLIENTS))["metrics"]
        for name in (layout.evaluated(prefix, k, CLIENTS), layout.client(prefix, k, CLIENTS)):
            digest = store.resolve(name)
            signatures.check(store, reader, digest, name=name, writer=k, what=name)
            other = (k + 1) % CLIENTS
            with pytest.raises(SigningError, match=f"not client {other}'s"):
                signatures.check(store, reader, digest, name=name, writer=other, what=name)
    name = layout.federated(prefix)
    signatures.check(store, reader, store.resolve(name), name=name, writer=None, what=name)


def _forged(store: Store, name: str) -> dict:
    """The record at `name`, its signature taken off and its metrics zeroed."""
    forged = {k: v for k, v in store.recall(name).items() if k != "signed"}
    forged["metrics"] = {m: 0.0 for m in forged["metrics"]}
    return forged


def test_settling_refuses_a_forged_client_record_naming_it(tmp_path, keys):
    store = signed_run(tmp_path / "s", keys)
    prefix = meeting_of(store, 0)
    meeting = _meeting(store, prefix, keys)
    kept = store.recall(layout.federated(prefix))
    name = layout.evaluated(prefix, 1, CLIENTS)
    store.keep(name, _forged(store, name))
    with pytest.raises(SigningError, match="client 1's .* record .*evaluated/1.* is unsigned"):
        settle(store, meeting, kept["weights"], list(range(CLIENTS)))
    assert store.recall(layout.federated(prefix)) == kept, "the round's record stands"


def _inputs(store: Store, prefix: str) -> list[dict]:
    return read_average(store, store.resolve(layout.average(prefix))).inputs


def test_training_metrics_are_read_only_from_their_own_client_s_signed_record(tmp_path, keys):
    """The metrics settle aggregates are those of the record the average took, which client k
    signed: a forged record (its metrics changed, unsigned) and another client's record are
    refused, naming the client; a record changed after it was signed too; an old store's
    record without metrics gives its signed `trained/<k>`, a forged one refused the same way."""
    store = signed_run(tmp_path / "s", keys)
    prefix = meeting_of(store, 0)
    meeting = _meeting(store, prefix, keys)
    inputs = sorted(_inputs(store, prefix), key=lambda entry: entry["client"])
    read = training_of(store, meeting, inputs)
    assert [r["client"] for r in read] == list(range(CLIENTS)) and all(r["metrics"] for r in read)
    forged = store.put_value(_forged(store, layout.client(prefix, 1, CLIENTS)))
    with pytest.raises(SigningError, match="client 1's record .*client/1.* is unsigned"):
        training_of(store, meeting, [{"client": 1, "record": forged}])
    theirs = {"client": 2, "record": inputs[1]["record"]}  # client 1's record, said client 2's
    with pytest.raises(SigningError, match="not client 2's"):
        training_of(store, meeting, [theirs])
    signed = store.recall_digest(inputs[1]["record"])
    changed = store.put_value({**signed, "metrics": {m: 0.0 for m in signed["metrics"]}})
    with pytest.raises(SigningError, match="client 1's record .*does not verify"):
        training_of(store, meeting, [{"client": 1, "record": changed}])  # its signature kept
    # a store written before the metrics were in the record: its signed `trained/<k>`
    old = {k: v for k, v in signed.items() if k not in ("metrics", signatures.SIGNED)}
    old_record = signatures.put(store, meeting.signing, old, name=meeting.client(1), by=1)
    name = layout.trained(prefix, 1, CLIENTS)
    said = {"client": 1, "metrics": read[1]["metrics"], "size": read[1]["size"]}
    signatures.keep(store, meeting.signing, said, name=name, by=1)
    assert training_of(store, meeting, [{"client": 1, "record": old_record}]) == [read[1]]
    store.keep(name, {**said, "metrics": {m: 0.0 for m in said["metrics"]}})  # unsigned
    with pytest.raises(SigningError, match="client 1's training record .*trained/1.* is unsigned"):
        training_of(store, meeting, [{"client": 1, "record": old_record}])
