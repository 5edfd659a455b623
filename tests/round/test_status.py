"""`soma status`, run as users run it: the metric per round, who is missing, who was left out,
a run or a store that is not there, and a corrupt record said on its own round's line."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from soma.round import (
    Meeting,
    average_round,
    contribute,
    drop,
    evaluation_name,
    read_record,
    status,
)
from soma.store import Store
from soma.timing import LEASE

torch.set_num_threads(1)


def weights(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"fc": {"weight": torch.randn(4, 3, generator=g), "bias": torch.randn(4, generator=g)}}


def soma_status(store: Path, run: str, *flags: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "soma.cli", "status", "--store", str(store), "--run", run]
    return subprocess.run([*command, *flags], capture_output=True, text=True, timeout=120)


def line_of(out: str, round: int) -> str:
    (line,) = [x for x in out.splitlines() if x.startswith(f"round {round:>4}")]
    return line


@pytest.fixture
def store(tmp_path) -> Path:
    """Run `ctl`: round 0 averaged and evaluated; round 1 of 4 clients where 2 and 3 never
    wrote; round 2 averaged without client 2, which failed (quorum 2 of 3). And run `other`."""
    folder = tmp_path / "store"
    s = Store(folder)
    first = Meeting("ctl", 0, 2)
    for k in (0, 1):
        contribute(s, first, weights(k), mine=k, size=10)
    averaged = read_record(s, average_round(s, first, deadline=5, lease=LEASE))["weights"]
    s.keep(
        evaluation_name("ctl", averaged),
        {"metrics": {"accuracy": 0.936, "loss": 0.25}, "weights": averaged},
    )
    for k in (0, 1):
        contribute(s, Meeting("ctl", 1, 4), weights(k), mine=k, size=10)
    third = Meeting("ctl", 2, 3, quorum=2)
    for k in (0, 1):
        contribute(s, third, weights(10 + k), mine=k, size=10)
    drop(s, third, mine=2, why="failed: RuntimeError: boom")
    average_round(s, third, deadline=5, lease=LEASE)
    contribute(s, Meeting("other", 0, 1), weights(9), mine=0)
    return folder


@pytest.mark.slow
def test_the_metric_the_workflow_recorded_is_shown_on_its_round(store) -> None:
    done = soma_status(store, "ctl")
    assert done.returncode == 0, done.stderr
    assert "accuracy 0.936" in line_of(done.stdout, 0) and "loss 0.25" in line_of(done.stdout, 0)
    assert "accuracy" not in line_of(done.stdout, 2), "round 2 was never evaluated"
    rows = json.loads(soma_status(store, "ctl", "--json").stdout)
    assert rows[0]["metrics"] == {"accuracy": 0.936, "loss": 0.25}
    assert rows[0]["weights"] == Store(store).recall_digest(rows[0]["average"])["weights"]
    assert [row["metrics"] for row in rows[1:]] == [None, None]
    assert all(row["problems"] == [] for row in rows)


@pytest.mark.slow
def test_who_is_missing_is_who_the_round_expected_not_a_guess_from_who_wrote(store) -> None:
    line = line_of(soma_status(store, "ctl").stdout, 1)
    assert "2/4 written, missing [2, 3]" in line and "not averaged" in line


@pytest.mark.slow
def test_who_was_left_out_and_why(store) -> None:
    line = line_of(soma_status(store, "ctl").stdout, 2)
    assert "2/3 written, 1 dropped out; average " in line
    assert "left out client 2: failed: RuntimeError: boom" in line


@pytest.mark.slow
def test_a_drop_out_is_counted_apart_from_the_writes_and_is_not_missing(tmp_path) -> None:
    """A client recorded as died wrote nothing: "5/5 written" beside it would be false."""
    s = Store(tmp_path)
    meeting = Meeting("ctl", 0, 5, quorum=4)
    for k in (0, 1, 3):
        contribute(s, meeting, weights(k), mine=k, size=10)
    drop(s, meeting, mine=2, why="died: its previous job ended")
    line = line_of(soma_status(tmp_path, "ctl").stdout, 0)
    assert "3/5 written, 1 dropped out, missing [4]; not averaged" in line
    (row,) = status(s, "ctl")
    assert row["written"] == [0, 1, 3] and row["missing"] == [4]
    assert row["dropped"] == [{"client": 2, "why": "died: its previous job ended"}]
    contribute(s, meeting, weights(4), mine=4, size=10)
    average_round(s, meeting, deadline=5, lease=LEASE)
    line = line_of(soma_status(tmp_path, "ctl").stdout, 0)
    assert "4/5 written, 1 dropped out; average " in line


@pytest.mark.slow
def test_a_run_the_store_does_not_hold_is_refused_naming_the_runs_it_does(store) -> None:
    for flags in ((), ("--json",)):
        done = soma_status(store, "nope", *flags)
        assert done.returncode == 1 and done.stdout == ""
        assert done.stderr.strip() == (
            f"soma: no run 'nope' in the store at {store} (the runs it holds: 'ctl', 'other')"
        )
    # a run that has started (its start is kept) but has no round yet is not unknown
    s = Store(store)
    s.bind("fresh/start", s.put_value(weights(0)))
    done = soma_status(store, "fresh")
    assert done.returncode == 0 and "no rounds yet" in done.stdout


@pytest.mark.slow
def test_a_missing_store_is_refused_and_never_made(tmp_path) -> None:
    for path in (tmp_path / "nowhere", tmp_path / "nowhere" / "deeper"):
        done = soma_status(path, "ctl")
        assert done.returncode == 1
        assert done.stderr.strip() == f"soma: no store at {path} (no such folder)"
    assert not (tmp_path / "nowhere").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    done = soma_status(empty, "ctl")
    assert done.returncode == 1 and done.stderr.strip() == f"soma: no store at {empty}"
    assert os.listdir(empty) == [], "reading a folder that is not a store leaves it as it was"


@pytest.mark.slow
def test_a_corrupt_record_is_said_on_its_round_and_the_other_rounds_are_still_shown(
    store,
) -> None:
    average = status(Store(store), "ctl")[0]["average"]
    blob = Store(store).blob_path(average)
    blob.chmod(stat.S_IRUSR | stat.S_IWUSR)
    blob.write_bytes(b'{"not": "what it was"}')
    done = soma_status(store, "ctl")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    line = line_of(done.stdout, 0)
    assert "cannot read its average record" in line and "corrupt" in line and str(blob) in line
    assert "missing [2, 3]" in line_of(done.stdout, 1)
    assert "left out client 2" in line_of(done.stdout, 2)
    rows = json.loads(soma_status(store, "ctl", "--json").stdout)
    assert len(rows[0]["problems"]) == 1 and rows[1]["problems"] == rows[2]["problems"] == []


@pytest.mark.slow
def test_a_name_that_holds_no_digest_is_said_on_its_round(store) -> None:
    key = status(Store(store), "ctl")[2]["meeting"]
    about = store / "names" / "ctl" / "round" / "2" / key / "about"
    about.write_bytes(b"scribbled over\n")
    done = soma_status(store, "ctl")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    line = line_of(done.stdout, 2)
    assert "cannot read its meeting record" in line and "does not hold a digest" in line
    assert "left out client 2" in line, "what could be read is still shown"
    assert "accuracy 0.936" in line_of(done.stdout, 0)


@pytest.mark.slow
def test_meetings_of_one_round_are_labelled_by_the_settings_they_differ_in(tmp_path) -> None:
    s = Store(tmp_path)

    def config(hidden: int) -> dict:
        return {"task": "t", "options": {"hidden": hidden}, "seed": 0}

    apart = (
        Meeting("two", 0, 1, config=config(64)),
        Meeting("two", 0, 1, strategy="fedavgm", config=config(64)),
        Meeting("two", 0, 1, config=config(32)),
    )
    for meeting in apart:
        contribute(s, meeting, weights(0), mine=0)
    # two meetings of round 1 whose settings are the same: only their starts differ
    for start in (weights(1), weights(2)):
        contribute(s, Meeting("two", 1, 1, start=s.put_value(start)), weights(0), mine=0)
    done = soma_status(tmp_path, "two")
    assert done.returncode == 0, done.stderr

    def labels(r: int) -> list[str]:
        lines = [x for x in done.stdout.splitlines() if x.startswith(f"round {r:>4}")]
        return sorted(line.split("[")[1].split("]")[0] for line in lines)

    assert labels(0) == [
        "strategy fedavg, task_options.hidden 32",
        "strategy fedavg, task_options.hidden 64",
        "strategy fedavgm, task_options.hidden 64",
    ]
    assert [label.split()[:2] for label in labels(1)] == [["start", "weights"]] * 2
    rows = json.loads(soma_status(tmp_path, "two", "--json").stdout)
    assert sorted(row["apart"] for row in rows if row["round"] == 0) == labels(0)
