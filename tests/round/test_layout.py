"""One layout of a round's store names (soma/round/layout.py) and one schema of its records
(soma/round/records.py).

The names are the ones stores were written with, byte for byte (a store written before is
read by them); every name built parses back to what it was built from; the records hold
exactly the keys soma has always written (their digests are compared by reruns and by
`soma repair`); a record that lacks a field it must have is refused naming the client and
the name, never a KeyError.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from soma.round import Input, Meeting, arrivals, contribute, drop, layout, records
from soma.store import Store

KEY = "ab" * 32


def test_the_names_are_the_ones_stores_were_written_with() -> None:
    prefix = layout.meeting("my/run", 3, KEY)
    assert prefix == f"my/run/round/3/{KEY}"
    assert layout.start("my/run") == "my/run/start"
    assert layout.evaluation("my/run", "cd" * 32) == f"my/run/evaluation/{'cd' * 32}"
    assert layout.about(prefix) == f"{prefix}/about"
    assert layout.average(prefix) == f"{prefix}/average"
    assert layout.client(prefix, 999, 1000) == f"{prefix}/client/999"
    assert layout.client(prefix, 999, 1001) == f"{prefix}/client/0/999"
    assert layout.client(prefix, 1000, 1001) == f"{prefix}/client/1/1000"
    assert layout.started(prefix, 7, 10) == f"{prefix}/started/7"
    assert layout.started(prefix, 1000, 1001) == f"{prefix}/started/1/1000"
    place = layout.averaging(prefix, KEY)
    assert place == f"{prefix}/inputs/{KEY}"
    assert layout.tree_node(place, 2, 5) == f"{place}/tree/2/5"
    assert layout.claimed(place) == f"{place}/claimed"
    assert layout.takeover(place, 2) == f"{place}/takeover/2"
    assert layout.computed_by(place, "ef" * 32) == f"{place}/computed/{'ef' * 8}"
    assert layout.published(place) == f"{place}/published"
    assert layout.session(layout.secagg(prefix), "keys", 4) == f"{prefix}/secagg/keys/4"
    meeting = Meeting("my/run", 3, 1001)
    assert meeting.client(1000) == f"{meeting.prefix}/client/1/1000"
    assert meeting.started(1000) == f"{meeting.prefix}/started/1/1000"


@pytest.mark.parametrize("clients", [5, 1000, 1001, 2500])
def test_every_name_built_parses_back(clients: int) -> None:
    prefix = layout.meeting("my/run", 12, KEY)
    for k in {0, 4, min(999, clients - 1), clients - 1}:
        name = layout.parse(layout.client(prefix, k, clients))
        assert name is not None and (name.run, name.round, name.meeting) == ("my/run", 12, KEY)
        assert name.prefix == prefix and name.client == k and name.started is None
        started = layout.parse(layout.started(prefix, k, clients))
        assert started is not None and started.started == k and started.client is None
        assert layout.started(prefix, k, clients) in layout.started_spellings(prefix, k)
    place = layout.averaging(prefix, KEY)
    assert layout.parse(layout.average(prefix)).published == ""
    assert layout.parse(layout.published(place)).published == KEY
    assert layout.parse(layout.claimed(place)).holder == KEY
    assert layout.parse(layout.takeover(place, 3)).holder == KEY
    assert layout.parse(layout.about(prefix)).published is None
    assert layout.parse(f"{prefix}/client/2/1000").client is None, "a misfiled record"
    assert layout.parse("my/run/start") is None
    for name in (layout.start("my/run"), layout.evaluation("my/run", KEY), place):
        assert layout.run_of(name) == "my/run"


def export(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"fc": {"weight": torch.randn(3, 3, generator=g)}}


def test_client_and_drop_out_records_hold_exactly_the_keys_they_always_did(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path)
    meeting = Meeting("r", 0, 3, quorum=1)
    contribute(store, meeting, export(0), mine=0, size=4)
    drop(store, meeting, mine=1, why="failed: no data")
    kept = store.recall(meeting.client(0))
    assert set(kept) == {"client", "size", "weights", "extra", "own", "by"}
    assert (kept["client"], kept["size"], kept["extra"], kept["own"]) == (0, 4, None, None)
    assert set(store.recall(meeting.client(1))) == {"client", "dropped", "by"}
    came, dropped = arrivals(store, meeting, [0, 1])
    digest = store.resolve(meeting.client(0))
    assert came == [Input(0, kept["weights"], 4, None, digest)]
    assert dropped == {1: "failed: no data"}
    assert records.SecureRecord(2, "p").value() == {"client": 2, "secure": "p"}


def test_an_average_record_is_built_as_it_always_was() -> None:
    """The builder's record against the dict soma.round wrote before there was a builder."""
    meeting = Meeting("r", 4, 3, "aa" * 32, None, "fedavg", {"x": 1}, {}, (0, 2), 1)
    inputs = [Input(0, "bb" * 32, 2.0, None, "cc" * 32)]
    built = records.average_record(
        meeting,
        left_out={2: "never came"},
        inputs=[
            records.input_entry(i.client, i.weights, i.size, i.extra, i.record) for i in inputs
        ],
        weights="dd" * 32,
        state=None,
        averaged_by={"host": "h", "pid": 1},
    ).value()
    assert built == {
        "run": "r",
        "round": 4,
        "meeting": meeting.key,
        "clients": 3,
        "strategy": "fedavg",
        "options": {"x": 1},
        "start": "aa" * 32,
        "state_before": None,
        "expected": [0, 2],
        "quorum": 1,
        "left_out": [{"client": 2, "why": "never came"}],
        "inputs": [
            {"client": 0, "weights": "bb" * 32, "size": 2.0, "extra": None, "record": "cc" * 32}
        ],
        "weights": "dd" * 32,
        "state": None,
        "averaged_by": {"host": "h", "pid": 1},
    }
    assert records.parse_average(built, digest="x").value() == built


@pytest.mark.parametrize(
    "record, lacks",
    [({"client": 1, "size": 3}, "'weights'"), ({"client": 1, "weights": KEY}, "'size'")],
)
def test_a_client_record_without_a_field_it_must_have_is_refused_naming_it(
    tmp_path: Path, record: dict, lacks: str
) -> None:
    store = Store(tmp_path)
    meeting = Meeting("r", 0, 2)
    store.keep(meeting.client(1), record)
    with pytest.raises(records.RecordError) as refused:
        arrivals(store, meeting, [1])
    message = str(refused.value)
    assert "client 1's record" in message and repr(meeting.client(1)) in message
    assert lacks in message


def test_an_average_record_without_weights_is_refused_naming_it(tmp_path: Path) -> None:
    store = Store(tmp_path)
    digest = store.put_value({"run": "r", "round": 0, "inputs": []})
    with pytest.raises(records.RecordError, match=f"record {digest} is not an average record"):
        records.read_average(store, digest)
