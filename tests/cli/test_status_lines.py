"""`soma status`'s lines: a round's line fits 100 columns by default and shows its average's
weights digest (the one every mode prints for the same weights: tests/helpers.py's
same_bits_in_every_mode holds the modes to it); --wide says every detail, where its average's
arithmetic ran among them (torch and CPU capability, soma.round.holders), so a reader whose
recomputation differs can see both sides; without --run, the store's runs, one line each."""

from __future__ import annotations

import json

import pytest
import torch
from signed_runs import RUN, signed_run

import soma
from soma.cli import main
from soma.cli.show import _status_line
from soma.round import status

WIDTH = 100


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """A store with a run of rounds (`r`, 2 rounds) and an asynchronous one (`a`)."""
    path = tmp_path_factory.mktemp("status") / "s"
    soma.simulate("soma.tasks.control", clients=2, rounds=2, store=path, run="r")
    asynchronous = ["simulate", "--clients", "3", "--rounds", "2", "--buffer", "2"]
    assert main([*asynchronous, "--option", "examples=32", "--store", str(path), "--run", "a"]) == 0
    return str(path)


def said(capsys, *argv: str) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(list(argv))
    return code, capsys.readouterr().out.splitlines()


def test_a_rounds_line_fits_100_columns_and_shows_its_weights(store, capsys) -> None:
    code, lines = said(capsys, "status", "--store", store, "--run", "r")
    rows = status(soma.Store(store), "r")
    assert code == 0 and len(lines) == 2
    for line, row in zip(lines, rows, strict=True):
        assert len(line) <= WIDTH, line
        assert f"average weights {row['weights'][:12]}; validation loss " in line, line
        assert row["average"][:12] not in line, "the record's digest differs between modes"


def test_wide_says_where_the_average_was_computed(store) -> None:
    (row, _) = status(soma.Store(store), "r")
    line = _status_line(row, set(), wide=True)
    cpu = torch.backends.cpu.get_cpu_capability()
    assert f"(computed under torch {torch.__version__}, {cpu})" in line
    assert f"average {row['average'][:16]} (weights {row['weights'][:16]})" in line
    assert "[min " in line and "train loss" in line
    short = _status_line(row, set())
    assert "computed under" not in short and "[min " not in short


def test_what_a_round_cost_is_said_wide_and_its_core_hours_short_where_they_fit(store) -> None:
    """(issue 56) Its processes' CPU seconds without Slurm, and its Slurm jobs' cost
    (soma.round.report `cost`: here as sacct would make it, tests/round/test_round_cost.py)."""
    (row, _) = status(soma.Store(store), "r")
    assert row["cpu_s"] > 0 and row["cost"] is None  # a run without Slurm
    assert f"; CPU {row['cpu_s']:.1f} s" in _status_line(row, set(), wide=True)
    assert "CPU" not in _status_line(row, set()) and "core-hours" not in _status_line(row, set())
    cost = {"jobs": 2, "cpu_hours": 1.5, "gpu_hours": 0.0, "cpu_used_hours": 0.5,
            "queue_s": 600.0, "elapsed_s": 1800.0, "mem_peak_mb": None, "energy_j": None,
            "unaccounted_energy": ["40", "41"], "queue_share": 0.25}  # fmt: skip
    costed = {**row, "cost": cost}
    wide = (
        "; Slurm (2 jobs): 1.5 core-hours (0.5 used), 0 GPU-hours, memory peak not sampled, "
        "queue wait 25 % of the jobs' time, energy not accounted"
    )
    assert wide in _status_line(costed, set(), wide=True)
    roomy = _status_line({**costed, "federated": None}, set())
    assert len(roomy) <= WIDTH and roomy.endswith("; 1.50 core-hours")
    crowded = _status_line(costed, set())  # its federated evaluation leaves no room
    assert len(crowded) <= WIDTH and "core-hours" not in crowded


def test_many_missing_clients_are_counted_not_listed(store) -> None:
    (row, _) = status(soma.Store(store), "r")
    row = {**row, "expected": list(range(40)), "missing": list(range(2, 40))}
    assert "38 missing (--wide names them)" in _status_line(row, set())
    assert f"missing {list(range(2, 40))}" in _status_line(row, set(), wide=True)


def test_without_run_the_stores_runs_are_listed(store, capsys) -> None:
    code, lines = said(capsys, "status", "--store", store)
    (r,) = status(soma.Store(store), "r")[-1:]
    assert code == 0 and len(lines) == 2, lines
    assert lines[0].startswith("a  versions    3 published; last version 2 at "), lines
    when = r["averaged_by"]["when"][:16].replace("T", " ")
    assert lines[1] == (
        f"r  rounds      2 of 2 averaged; last round 1 at {when} UTC, weights {r['weights'][:12]}"
    )
    code, lines = said(capsys, "status", "--store", store, "--wide")
    assert lines[1].endswith(f", weights {r['weights']}"), "--wide: the whole digest"
    code, lines = said(capsys, "status", "--store", store, "--json")
    rows = json.loads("\n".join(lines))
    assert [(x["run"], x["kind"]) for x in rows] == [("a", "versions"), ("r", "rounds")]
    assert rows[1]["weights"] == r["weights"] and rows[1]["averaged"] == 2


def test_an_asynchronous_runs_lines_are_short(store, capsys) -> None:
    code, lines = said(capsys, "status", "--store", store, "--run", "a")
    assert code == 0 and lines[1].startswith("version    1: weights "), lines
    assert all(len(line) <= WIDTH for line in lines), lines
    assert "(staleness " in lines[1]
    code, wide = said(capsys, "status", "--store", store, "--run", "a", "--wide")
    assert "weight 1)" in wide[1], wide


def test_listing_refuses_a_runs_flags_and_a_store_that_is_not_there(store, tmp_path, capsys):
    assert main(["status", "--store", store, "--roster", "roster.json"]) == 1
    assert "--roster is of one run: give --run" in capsys.readouterr().err
    assert main(["status", "--store", str(tmp_path / "nowhere")]) == 1
    assert "no store at" in capsys.readouterr().err


def test_an_empty_store_says_it_holds_no_runs(tmp_path, capsys) -> None:
    soma.Store(tmp_path / "empty")
    code, lines = said(capsys, "status", "--store", str(tmp_path / "empty"))
    assert code == 0 and lines == [f"no runs in the store at {tmp_path / 'empty'}"]


def test_a_signed_run_is_listed_as_the_store_says_and_told_to_be_checked(tmp_path, keys, capsys):
    signed_run(tmp_path / "s", keys)
    code, lines = said(capsys, "status", "--store", str(tmp_path / "s"))
    assert code == 0 and len(lines) == 1 and lines[0].startswith(f"{RUN}  rounds      2 of 2")
    assert lines[0].endswith("; signed: check it with --run and --roster"), lines
