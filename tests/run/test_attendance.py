"""Who took part, shown (soma.run.attendance): per round, in the summary table and the plot,
how many clients trained, dropped out and why; a client that never trained ends the run
with a warning naming it and its last error, its traceback in the log."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from soma.run.attendance import never_trained, took_part
from soma.run.simulate import simulate
from soma.workflow import report

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def average(round: int, came: list[int], left: dict[int, str]) -> dict:
    return {
        "round": round,
        "inputs": [{"client": k} for k in came],
        "left_out": [{"client": k, "why": why} for k, why in left.items()],
    }


ROUNDS = [
    average(0, [0, 1], {2: "failed: RuntimeError: boom", 3: "never came"}),
    average(1, [0, 3], {2: "failed: RuntimeError: boom again"}),
    average(2, [0, 1, 3], {}),
]


def test_each_round_counts_who_trained_and_who_dropped_out_by_kind() -> None:
    seen = took_part(ROUNDS[0])
    assert (seen.trained, seen.dropped, seen.reasons()) == (2, 2, "failed 1, never came 1")
    assert took_part(ROUNDS[2]).reasons() == ""


def test_only_a_client_left_out_of_every_round_it_was_sampled_for_is_named() -> None:
    assert never_trained(ROUNDS) == {2: "failed: RuntimeError: boom again"}
    assert never_trained(ROUNDS, among=[0, 1, 3]) == {}


def test_the_table_and_the_plot_show_who_took_part(tmp_path, caplog) -> None:
    paths = []
    for r, receipt in enumerate(ROUNDS):
        paths.append(tmp_path / f"{r}.json")
        paths[-1].write_text(json.dumps(receipt))
    rows = [{"strategy": "fedavg", "round": report.START, "federated": 0.1}]
    rows += [{"strategy": "fedavg", "round": r, "federated": 0.5} for r in range(3)]
    with caplog.at_level(logging.WARNING):
        shown = report.with_attendance(rows, [str(p) for p in paths])
    assert "client 2 took part in none of the rounds" in caplog.text and "boom again" in caplog.text
    table, plot = tmp_path / "summary.tsv", tmp_path / "accuracy.png"
    report.summary(shown, "accuracy", str(table), str(plot))
    lines = [line.split("\t") for line in table.read_text().splitlines()]
    assert lines[0][-3:] == ["trained", "dropped", "why"]
    assert lines[1][-3:] == ["", "", ""]  # the start
    assert lines[2][-3:] == ["2", "2", "failed 1, never came 1"]
    columns = [c for c in (*report.COLUMNS, *report.ATTENDANCE) if any(c in r for r in shown)]
    figure = report.plotted(shown, columns, "accuracy", "t")
    bars = [p.get_height() for a in figure.axes[1:] for p in a.patches]
    assert bars[:3] == [2, 2, 3] and bars[3:] == [2, 1, 0]  # trained, then dropped on them


def test_a_client_that_never_trains_ends_the_run_with_a_warning(monkeypatch, caplog) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    with caplog.at_level(logging.WARNING, logger="soma.client"):
        done = simulate(
            "told_task", clients=3, rounds=2, quorum=2, task_options={"fails": 1}, deadline=60
        )
    assert [len(r.record["inputs"]) for r in done.rounds] == [2, 2]
    warned = [r for r in caplog.records if "took part in none" in r.getMessage()]
    assert len(warned) == 1 and "client 1 " in warned[0].getMessage()
    assert "RuntimeError: client 1 cannot train" in warned[0].getMessage()
    assert any(r.exc_info and "cannot train" in str(r.exc_info[1]) for r in caplog.records)


@pytest.mark.parametrize("kind", ["failed", "never came"])
def test_a_reason_is_of_the_kind_it_starts_with(kind) -> None:
    assert took_part(average(0, [], {0: f"{kind}: x: y"})).why == {kind: 1}
