"""`soma status` never silently skips a round (issue 31): a name where a round's or a
meeting's folder belongs (a planted link) and an unreadable client record are said, naming
run, round and record, and the command exits 1; a client whose input the averaging refused
is shown apart from the drop-outs. In-process (`soma.cli.main`), plus one real `soma status`
process (slow)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from helpers import soma

from soma.cli import main
from soma.round import Backoff, Meeting, average_round, contribute, drop, status
from soma.store import Store, codecs
from soma.timing import LEASE

torch.set_num_threads(1)
QUICK = Backoff(first=0.002, cap=0.02)


def weights(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"fc": {"w": torch.randn(4, 3, generator=g)}}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Run `ctl`: round 0 averaged without client 2, whose hand-written record holds a NaN
    (quorum 2 of 3), and client 1's failure in round 1 (quorum 1 of 2, averaged)."""
    folder = tmp_path / "store"
    s = Store(folder)
    first = Meeting("ctl", 0, 3, quorum=2)
    for k in (0, 1):
        contribute(s, first, weights(k), mine=k, size=10)
    bad = weights(2)
    bad["fc"]["w"][0, 0] = float("nan")
    value = {"client": 2, "size": 10, "weights": s.put_value(bad), "extra": None, "own": None}
    s.bind(first.client(2), s.put(codecs.record_bytes({**value, "by": None}, None)))
    average_round(s, first, deadline=5, backoff=QUICK, lease=LEASE)
    second = Meeting("ctl", 1, 2, quorum=1)
    contribute(s, second, weights(3), mine=0, size=10)
    drop(s, second, mine=1, why="failed: RuntimeError: boom")
    average_round(s, second, deadline=5, backoff=QUICK, lease=LEASE)
    return folder


def run_status(store: Path, capsys, *flags: str) -> tuple[int, str, str]:
    code = main(["status", "--store", str(store), "--run", "ctl", *flags])
    out = capsys.readouterr()
    return code, out.out, out.err


def line_of(out: str, round: int) -> list[str]:
    return [x for x in out.splitlines() if x.startswith(f"round {round:>4}")]


def plant_link(store: Path, at: str, tmp_path: Path) -> Path:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    link = store / "names" / at
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(elsewhere, link)
    return link


def test_a_refused_input_is_shown_apart_from_the_drop_outs(store, capsys) -> None:
    code, out, _ = run_status(store, capsys)
    assert code == 0
    (first,) = line_of(out, 0)
    assert "3/3 written, 1 refused; average " in first
    assert "; refused client 2: round 0 of run 'ctl': client 2's weights " in first
    assert "NaN or infinite" in first and "left out" not in first
    (second,) = line_of(out, 1)
    assert "left out client 1: failed: RuntimeError: boom" in second and "refused" not in second
    rows = status(Store(store), "ctl")
    assert rows[0]["left_out"] == [] and [x["client"] for x in rows[0]["refused"]] == [2]
    assert rows[1]["refused"] == [] and [x["client"] for x in rows[1]["left_out"]] == [1]


@pytest.mark.parametrize("where", ["round", "meeting"])
def test_a_planted_link_for_a_round_is_said_and_status_exits_1(
    store, capsys, tmp_path, where
) -> None:
    if where == "round":
        at = "ctl/round/7"
    else:
        at = f"ctl/round/7/{'e' * 64}"
    link = plant_link(store, at, tmp_path)
    code, out, err = run_status(store, capsys)
    assert code == 1 and "Traceback" not in err
    (said,) = line_of(out, 7)
    assert f"cannot read {at!r} (round 7 of run 'ctl')" in said
    assert str(link) in said and "symbolic link" in said
    assert len(line_of(out, 0)) == len(line_of(out, 1)) == 1, "the other rounds are still shown"
    code, out, _ = run_status(store, capsys, "--json")
    rows = json.loads(out)
    assert code == 1 and [row["round"] for row in rows] == [0, 1, 7]
    assert rows[2]["meeting"] is None and len(rows[2]["problems"]) == 1


def test_a_run_with_only_a_planted_round_is_not_an_unknown_run(tmp_path, capsys) -> None:
    folder = tmp_path / "store"
    Store(folder).keep("other/start", {"x": 1})
    plant_link(folder, "ctl/round/0", tmp_path)
    code, out, _ = run_status(folder, capsys)
    assert code == 1 and "cannot read 'ctl/round/0' (round 0 of run 'ctl')" in out


def test_an_unreadable_client_record_is_said_naming_it_and_the_rest_still_read(
    store, capsys
) -> None:
    s = Store(store)
    (row,) = [r for r in status(s, "ctl") if r["round"] == 1]
    meeting = f"ctl/round/1/{row['meeting']}"
    s.bind(f"{meeting}/client/0", s.put(b"not a soma record"))
    code, out, _ = run_status(store, capsys)
    assert code == 1
    (said,) = line_of(out, 1)
    assert f"cannot read client 0's record '{meeting}/client/0'" in said
    assert "1 dropped out" in said, "client 1's drop-out is still read"


@pytest.mark.slow
def test_soma_status_as_a_process_exits_1_naming_the_round_it_cannot_read(store, tmp_path) -> None:
    plant_link(store, "ctl/round/7", tmp_path)
    done = soma("status", "--store", str(store), "--run", "ctl")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "round    7: cannot read 'ctl/round/7' (round 7 of run 'ctl')" in done.stdout
    assert "refused client 2" in done.stdout
