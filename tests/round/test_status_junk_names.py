"""Names a store writer adds under a run's rounds that soma never writes (junk beside a
meeting's records, meetings that hold nothing but junk) cost `soma status` O(1) each: it lists
them, looks a few up, and reads no record or blob for them (issue 52 measured ~9 ms of CPU per
junk name per status). Counted as the store's reads, so that the test holds at any load."""

from __future__ import annotations

import torch

from soma.round import Meeting, announce, contribute, status
from soma.store import Store

KINDS = ("resolve", "recall", "recall_digest", "get_record")


def reads_of_status(store: Store, junk: int) -> dict[str, int]:
    """Plant `junk` names in run r's round 0 (half beside the meeting's records, half in
    meetings of their own), then count what `soma status` of run r reads of the store."""
    meeting = Meeting(run="r", round=0, clients=3, start=None, state=None, strategy="fedavg")
    announce(store, meeting)
    contribute(store, meeting, {"fc": {"weight": torch.zeros(2, 2)}}, mine=0)
    digest = store.resolve(meeting.client(0))
    assert digest is not None
    for i in range(junk):
        if i % 2:
            store.bind(f"r/round/0/{i:064x}/junk/{i}", digest)
        else:
            store.bind(f"{meeting.prefix}/client/x{i}", digest)
    counts = dict.fromkeys(KINDS, 0)
    kind = type(store)
    for name in KINDS:
        if hasattr(kind, name):
            original = getattr(kind, name)

            def counted(self, *args, _original=original, _name=name, **kwargs):
                counts[_name] += 1
                return _original(self, *args, **kwargs)

            setattr(store, name, counted.__get__(store))
    status(store, "r")
    return counts


def test_junk_names_under_a_runs_rounds_cost_a_few_lookups_each_and_no_record_read(
    tmp_path,
) -> None:
    few = reads_of_status(Store(tmp_path / "few"), 10)
    many = reads_of_status(Store(tmp_path / "many"), 1000)
    records = [k for k in KINDS if k != "resolve"]
    assert {k: many[k] for k in records} == {k: few[k] for k in records}, (few, many)
    assert many["resolve"] - few["resolve"] <= 3 * (1000 - 10), (few, many)
