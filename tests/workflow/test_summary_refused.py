"""The workflow's summary and plot show clients whose input the averaging refused (issue 31)
apart from the drop-outs: a `refused` column, and bars of their own, only in a run that had
any (a run without keeps the table it always had)."""

from __future__ import annotations

import json

from soma.round.records import refused
from soma.workflow import report


def average(round: int, came: list[int], left: dict[int, str]) -> dict:
    return {
        "round": round,
        "inputs": [{"client": k} for k in came],
        "left_out": [{"client": k, "why": why} for k, why in left.items()],
    }


NAN = refused("round 1 of run 'r': client 2's weights ... hold 1 value that are NaN")
ROUNDS = [
    average(0, [0, 1, 2], {3: "failed: RuntimeError: boom"}),
    average(1, [0, 1], {2: NAN, 3: "never came"}),
]


def shown(tmp_path, rounds: list[dict]) -> list[dict]:
    paths = []
    for r, receipt in enumerate(rounds):
        paths.append(tmp_path / f"{r}.json")
        paths[-1].write_text(json.dumps(receipt))
    rows = [{"strategy": "fedavg", "round": r, "federated": 0.5} for r in range(len(rounds))]
    return report.with_attendance(rows, [str(p) for p in paths])


def table(tmp_path, rows: list[dict]) -> list[list[str]]:
    path = tmp_path / "summary.tsv"
    report.summary(rows, "accuracy", str(path), str(tmp_path / "accuracy.png"))
    return [line.split("\t") for line in path.read_text().splitlines()]


def test_refused_clients_have_a_column_of_their_own_apart_from_the_drop_outs(tmp_path) -> None:
    lines = table(tmp_path, shown(tmp_path, ROUNDS))
    assert lines[0][-4:] == ["trained", "dropped", "refused", "why"]
    assert lines[1][-4:] == ["3", "1", "0", "failed 1"]
    assert lines[2][-4:] == ["2", "1", "1", "never came 1"]


def test_the_plot_draws_the_refused_on_top_of_the_drop_outs(tmp_path) -> None:
    rows = shown(tmp_path, ROUNDS)
    columns = [c for c in (*report.COLUMNS, *report.ATTENDANCE) if any(c in r for r in rows)]
    figure = report.plotted(rows, columns, "accuracy", "t")
    (clients,) = figure.axes[1:]
    bars = [p.get_height() for p in clients.patches]
    assert bars == [3, 2, 1, 1, 0, 1]  # trained, then dropped on them, then refused on those
    labels = clients.get_legend_handles_labels()[1]
    assert labels == ["clients trained", "clients dropped out", "clients refused (input)"]


def test_a_run_without_refusals_keeps_the_table_it_always_had(tmp_path) -> None:
    plain = [average(0, [0, 1], {2: "failed: RuntimeError: boom"})]
    lines = table(tmp_path, shown(tmp_path, plain))
    assert lines[0][-3:] == ["trained", "dropped", "why"] and "refused" not in lines[0]
