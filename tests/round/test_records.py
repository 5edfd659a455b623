"""Records trusted because they are in the store (issue 20): every input checked where it is
used, a client's record claimed, repair of every record kind, and holder checks that name a
dead holder as dead. Library-level and quick (no workflow run here)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import overlapping_export

from soma.round import Backoff, Contradicts, Meeting, RoundError, contribute, drop
from soma.round.records import RecordError
from soma.run.gather import gather
from soma.store import Store
from soma.timing import LEASE

QUICK = Backoff(first=0.002, cap=0.02)


def _export(v: float) -> dict:
    return {"fc": {"w": torch.full((2, 3), v), "b": torch.full((3,), v)}}


def _client_record(store: Store, weights: str, k: int = 1, size: float | None = 1.0) -> dict:
    return {"client": k, "size": size, "weights": weights, "extra": None, "own": None, "by": None}


def _claimed(store: Store) -> list[str]:
    return [n for n in store.bound() if "/inputs/" in n or n.endswith("/average")]


def _gather0(store: Store, **kw) -> dict:
    return gather(
        store, _export(1.0), run="r", round=0, clients=2, mine=0, size=1.0, deadline=2,
        backoff=QUICK, **kw,
    )  # fmt: skip


def test_a_hand_written_record_with_nan_is_refused_before_the_claim_naming_the_client(
    tmp_path,
) -> None:
    """Where all must come, the refusal stops the round (under a quorum it is left out:
    tests/round/test_refused_inputs.py)."""
    store = Store(tmp_path)
    meeting = Meeting("r", 0, 2)
    bad = _export(1.0)
    bad["fc"]["w"][0, 1] = float("nan")
    store.keep(meeting.client(1), _client_record(store, store.put_value(bad)))
    with pytest.raises(RoundError, match=r"client 1's weights .* NaN or infinite"):
        _gather0(store)
    assert _claimed(store) == []


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("bad_value", ["nan", "inf", "-inf"])
def test_a_nan_or_infinity_of_any_float_dtype_is_refused_before_the_claim(
    tmp_path, dtype: torch.dtype, bad_value: str
) -> None:
    """Checked by numpy where it holds the dtype, by torch elsewhere (bfloat16): both refuse."""
    store = Store(tmp_path)
    meeting = Meeting("r", 0, 2)
    bad = {"fc": {k: t.to(dtype) for k, t in _export(1.0)["fc"].items()}}
    bad["fc"]["b"][2] = float(bad_value)
    store.keep(meeting.client(1), _client_record(store, store.put_value(bad)))
    with pytest.raises(RoundError, match=r"client 1's weights .* key 'b' holds 1 value that"):
        _gather0(store)
    assert _claimed(store) == []


def test_a_record_with_overlapping_tensor_offsets_is_refused_before_the_claim_naming_it(
    tmp_path,
) -> None:
    store = Store(tmp_path)
    meeting = Meeting("r", 0, 2)
    store.keep(meeting.client(1), _client_record(store, overlapping_export(store)))
    with pytest.raises(RoundError, match=r"client 1's weights .*record .*client/1.*overlaps"):
        _gather0(store)
    assert _claimed(store) == []


def test_a_record_without_weights_is_refused_naming_the_client_not_a_key_error(tmp_path) -> None:
    store = Store(tmp_path)
    meeting = Meeting("r", 0, 2)
    store.keep(meeting.client(1), {"client": 1, "size": 1.0})
    with pytest.raises(RecordError, match=r"client 1's record .*client/1.* has no 'weights'"):
        _gather0(store)
    assert _claimed(store) == []


def test_a_second_contribution_with_other_weights_is_refused_and_the_first_stands(
    tmp_path,
) -> None:
    store = Store(tmp_path)
    meeting = Meeting("r", 0, 2)
    first = contribute(store, meeting, _export(1.0), mine=1, size=1.0)
    again = contribute(store, meeting, _export(1.0), mine=1, size=1.0)  # a rerun: fine
    assert again.record == first.record
    with pytest.raises(Contradicts, match=r"client 1 already contributed to round 0 of run 'r'"):
        contribute(store, meeting, _export(2.0), mine=1, size=1.0)
    assert store.resolve(meeting.client(1)) == first.record
    out = _gather0(store)
    assert torch.equal(out["fc"]["w"], torch.full((2, 3), 1.0))


def test_a_client_that_dropped_out_may_come_back_with_its_weights(tmp_path) -> None:
    store = Store(tmp_path)
    meeting = Meeting("r", 0, 2)
    drop(store, meeting, mine=1, why="failed: its state was lost")
    made = contribute(store, meeting, _export(3.0), mine=1, size=1.0)
    assert store.resolve(meeting.client(1)) == made.record
    assert torch.equal(_gather0(store)["fc"]["b"], torch.full((3,), 2.0))


def test_a_holder_that_died_since_the_last_check_is_taken_over_at_the_deadline(tmp_path) -> None:
    """Holder checks are 10 s apart; a deadline of 1 s used to report "AveragerDied ... may
    be alive" about a pid that had died in between. Checked at the deadline, it is dead."""
    import subprocess
    import sys
    import threading

    from soma.round import arrivals, average_round, holders, inputs_key, present
    from soma.round.once import Place

    store = Store(tmp_path)
    meeting = Meeting("r", 0, 2)
    for k in (0, 1):
        contribute(store, meeting, _export(float(k)), mine=k, size=1.0)
    came, _ = arrivals(store, meeting, present(store, meeting))
    place = Place(meeting.averaging(inputs_key(meeting.key, came)))
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        holder = {**holders.me(), "pid": sleeper.pid,
                  "pid_start": holders._process_start(sleeper.pid)}  # fmt: skip
        assert store.claim(place.claimed, store.put_value(holder))
        threading.Timer(0.3, sleeper.kill).start()  # alive at the first check, dead after
        digest = average_round(store, meeting, deadline=1.0, backoff=QUICK, lease=LEASE)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert store.resolve(place.takeover(1)) is not None
    assert store.resolve(meeting.average) == digest


def _round(store: Store, run: str = "r", clients: int = 3, **kw) -> Meeting:
    import threading

    threads = [
        threading.Thread(
            target=gather,
            args=(store, _export(float(k))),
            kwargs=dict(
                run=run,
                round=0,
                clients=clients,
                mine=k,
                size=1.0 + k,
                deadline=30,
                backoff=QUICK,
                **kw,
            ),
        )  # fmt: skip
        for k in range(clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return Meeting(run, 0, clients, **kw)


def test_a_garbled_name_file_is_bound_again_to_what_the_records_say_it_held(tmp_path) -> None:
    """Garbled (no digest) or another digest (of nothing): each name of a meeting is bound
    again by `soma repair` to the digest the records pointing at it prove it held."""
    from soma import health

    store = Store(tmp_path)
    meeting = _round(store)
    kinds = ["about", "client/1", "average", "published", "claimed", "computed"]
    for i, which in enumerate(kinds):
        name = next(n for n in store.bound(meeting.prefix) if f"/{which}" in n)
        held = store.resolve(name)
        path = store.directory / "names" / name
        path.write_text("not a digest\n" if i % 2 else "0" * 64 + "\n")
        assert not health.verify(store).clean, which
        repaired = health.repair(store)
        assert repaired.clean, (which, repaired.lines())
        assert store.resolve(name) == held, which
    assert health.verify(store).clean


def test_a_tree_rounds_identity_average_and_nodes_are_rebuilt_by_repair(tmp_path) -> None:
    """Repair used to ignore a meeting's tree: its `about`, its average record and the
    tree's node records were left "restore from a backup"."""
    import os

    from soma import health

    store = Store(tmp_path)
    meeting = _round(store, run="t", clients=5, tree=2)
    names = store.bound(meeting.prefix)
    lost = [meeting.about, meeting.average]
    lost += [n for n in names if n.endswith(("/tree/1/0/published", "/tree/3/0/published"))]
    assert len(lost) == 4
    for name in lost:
        held = store.resolve(name)
        os.unlink(store.blob_path(held))
        repaired = health.repair(store)
        assert repaired.clean, (name, repaired.lines())
        assert store.has(held)
    assert health.verify(store).clean


def test_a_lost_strategy_state_fails_the_train_jobs_and_the_run_resumes_after_repair(
    tmp_path,
) -> None:
    """Under a quorum, a deleted strategy state used to make every round-2 client "drop
    out": their receipts said so, and after `soma repair` the run stayed stuck until
    `--forcerun`. It is the store's damage: the train jobs fail (no receipt, so Snakemake
    runs them again) and withdraw their started markers (a rerun is not a retry of a job
    that died), and after repair the round trains and averages. The workflow's own job
    functions, in the order Snakemake runs them."""
    import os

    import yaml

    from soma import health, workflow
    from soma.run.step import StoreDamaged

    root = Path(__file__).resolve().parents[2]
    config = yaml.safe_load((root / "config" / "config.yaml").read_text())
    config.update(yaml.safe_load((root / "config" / "control.yaml").read_text()))
    config.update(store=str(tmp_path / "store"), run="q", clients=3, rounds=3, quorum=2,
                  strategy="fedadam")  # fmt: skip
    config["task_options"]["soma.tasks.control"]["examples"] = 32
    store = Store(tmp_path / "store")
    previous = str(tmp_path / "start.json")
    workflow.start(config, previous)
    for r in range(3):
        receipts = [str(tmp_path / f"{r}-{k}.json") for k in range(3)]
        if r == 2:
            os.unlink(store.blob_path(workflow.read_receipt(previous)["state"]))
            for k in range(3):
                with pytest.raises(StoreDamaged, match=rf"client {k} cannot train .*soma repair"):
                    workflow.train(config, r, k, previous, receipts[k])
                assert not Path(receipts[k]).exists()
            assert health.repair(store).clean
        for k in range(3):
            workflow.train(config, r, k, previous, receipts[k])
            assert "dropped" not in workflow.read_receipt(receipts[k])
        workflow.average(config, r, receipts, previous, str(tmp_path / f"average{r}.json"))
        previous = str(tmp_path / f"average{r}.json")
    assert [i["client"] for i in workflow.read_receipt(previous)["inputs"]] == [0, 1, 2]


def test_a_hand_written_secure_sum_with_nan_is_refused_before_the_claim(tmp_path) -> None:
    from soma.round import layout
    from soma.secagg.round import average_round, session_prefix
    from soma.strategies import load_strategy

    store = Store(tmp_path)
    meeting = Meeting("s", 0, 3, start=store.put_value(_export(0.0)), secure=2)
    weighted = _export(2.0)
    weighted["fc"]["b"][1] = float("nan")
    store.keep(layout.session(session_prefix(meeting), "sum"),
               {"secagg": 1, "weighted": weighted, "total": 2.0, "contributors": [0, 1],
                "dropped": [], "error_bound": 0.0})  # fmt: skip
    with pytest.raises(RoundError, match=r"secure sum .*node 'fc' key 'b' is not a tensor of"):
        average_round(
            store, meeting, load_strategy("fedavg"), took_part=False, deadline=1, lease=LEASE
        )
    assert _claimed(store) == []
