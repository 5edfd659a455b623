"""The workflow's plots and tables as a reader sees them (soma.workflow.report and
soma.workflow.study): every legend outside the axes and apart from every other, naming every
line and bar; the clients' axis 0..the run's clients in whole clients; a cell that does not
apply left empty, a metric that is not a number `nan`."""

from __future__ import annotations

import html
import itertools
from typing import Any

import pytest
from matplotlib import pyplot

from soma.config.study import Point, Study
from soma.workflow import report
from soma.workflow.study import study_plot


def rows(rounds: int, clients: int, *, dropping: bool = False) -> list[dict[str, Any]]:
    """A run's rows as summary_rows and with_attendance make them: every series, the
    clients' spread, and who took part (some dropping out and refused, if `dropping`)."""
    start = dict.fromkeys(("federated", "alone", "alone_best", "centralized"), 0.11)
    made: list[dict[str, Any]] = [{"strategy": "fedavg", "round": report.START, **start}]
    for r in range(rounds):
        rise = 1 - 0.5 / (r + 1)
        row = {"strategy": "fedavg", "round": r, "federated": 0.9 * rise, "alone": 0.26}
        row.update(alone_best=0.33, centralized=0.95, validation=0.9 * rise)
        row.update(validation_p10=0.7 * rise, validation_p90=rise, train_loss=0.4 / (r + 1))
        left, refused = (r % 3, r % 2) if dropping else (0, 0)
        why = f"failed {left}" if left else ""
        row.update(trained=clients - left - refused, dropped=left, why=why)
        if dropping:
            row["refused"] = refused
        made.append(row)
    return made


def drawn(made: list[dict[str, Any]], clients: int | None) -> Any:
    shown = (*report.COLUMNS, *report.COST, *report.ATTENDANCE)
    columns = [c for c in shown if any(c in r for r in made)]
    return report.plotted(made, columns, "accuracy", report.plot_title(made, columns), clients)


def a_study_plot() -> Any:
    """Six points with long labels, their lines crossing where a legend inside would sit."""
    made = []
    for s, p in itertools.product(["fedavg", "fedadam", "scaffold"], [1.0, 0.5]):
        for r in [report.START, *range(10)]:
            mean = 0.1 + 0.08 * report.x_of(r) * (1 + p)
            point = {"strategy": s, "participation": str(p), "round": r}
            made.append({**point, "accuracy_mean": mean, "accuracy_std": 0.02})
    return study_plot(made, ["strategy", "participation"], "accuracy", "s")


def legends(figure: Any) -> list[Any]:
    return [*figure.legends, *(a.get_legend() for a in figure.axes if a.get_legend())]


FIGURES = {
    "digits: 10 clients, 10 rounds": lambda: drawn(rows(10, 10), 10),
    "3 clients, drop-outs and refusals": lambda: drawn(rows(10, 3, dropping=True), 3),
    "100 rounds of 50 clients": lambda: drawn(rows(100, 50), 50),
    "no attendance": lambda: drawn(
        [{k: v for k, v in r.items() if k not in report.ATTENDANCE} for r in rows(5, 3)], None
    ),  # fmt: skip
    "a study of six points": a_study_plot,
    "what each round cost, beside": lambda: drawn(costed(STATUS), 3),
    "what each round cost, no attendance": lambda: drawn(
        [{k: v for k, v in r.items() if k not in report.ATTENDANCE} for r in costed(STATUS)], None
    ),  # fmt: skip
}


@pytest.mark.parametrize("make", FIGURES.values(), ids=FIGURES.keys())
def test_no_legend_covers_the_axes_another_legend_or_leaves_the_figure(make) -> None:
    figure = make()
    try:
        figure.canvas.draw()
        renderer = figure.canvas.get_renderer()
        found = legends(figure)
        assert found, "a legend names the lines"
        boxes = [legend.get_window_extent(renderer) for legend in found]
        for box in boxes:
            for axes in figure.axes:  # the data area, and its ticks and labels
                assert not box.overlaps(axes.get_tightbbox(renderer)), (box, axes)
            whole = figure.bbox
            assert whole.x0 <= box.x0 and box.x1 <= whole.x1 and whole.y0 <= box.y0, "cut off"
        for one, other in itertools.combinations(boxes, 2):
            assert not one.overlaps(other)
        named = [t.get_text() for legend in found for t in legend.get_texts()]
        labelled = [label for a in figure.axes for label in a.get_legend_handles_labels()[1]]
        assert sorted(named) == sorted(labelled), "every line and bar is in a legend"
    finally:
        pyplot.close(figure)


@pytest.mark.parametrize("clients", [3, 10, 50])
def test_the_clients_axis_is_the_runs_clients_in_whole_clients(clients) -> None:
    figure = drawn(rows(10, clients, dropping=True), clients)
    try:
        metric, below = figure.axes
        assert below.get_ylim() == (0, clients)
        ticks = list(below.get_yticks())
        assert ticks[0] == 0 and ticks[-1] == clients and all(t == int(t) for t in ticks)
        assert metric.get_shared_x_axes().joined(metric, below), "the bars stand at their rounds"
    finally:
        pyplot.close(figure)


def test_without_the_runs_clients_the_axis_is_the_most_a_round_had() -> None:
    made = rows(4, 10)
    for row in made[1:]:
        row["trained"] = 4  # participation 0.4: 4 of 10 each round
    figure = drawn(made, None)
    try:
        assert figure.axes[1].get_ylim() == (0, 4)
    finally:
        pyplot.close(figure)


def test_a_cell_that_does_not_apply_is_empty_and_a_metric_not_a_number_nan(tmp_path) -> None:
    made = rows(2, 3)
    made[2]["federated"] = None  # diverged: the receipt's metric was NaN
    table, page = tmp_path / "summary.tsv", tmp_path / "summary.html"
    report.summary(made, "accuracy", str(table), str(tmp_path / "a.png"), page=str(page))
    lines = [line.split("\t") for line in table.read_text().splitlines()]
    at = {name: i for i, name in enumerate(lines[0])}
    start = lines[1]
    assert start[at["round"]] == "start" and start[at["federated"]] == "0.1100"
    for column in ("validation", "validation_p10", "train_loss", "trained", "dropped", "why"):
        assert start[at[column]] == "", column  # nobody validates the starting weights
    assert lines[3][at["federated"]] == "nan" and lines[2][at["federated"]] == "0.4500"
    assert "nan" not in lines[1] and "<td></td>" in page.read_text()


def test_a_study_table_says_to_target_once_per_point_and_not_without_a_target(tmp_path) -> None:
    from soma.workflow import write_receipt
    from soma.workflow.study import study_summary

    points = tuple(
        Point(f"s_seed-{seed}", {"seed": seed}, {"rounds": 3}) for seed in (0, 1)
    )  # fmt: skip
    for point in points:
        base = tmp_path / point.run
        write_receipt(base / "start.json", {"metrics": {"loss": 5.0}})
        for r, loss in enumerate([3.0, 1.5, 0.5]):
            write_receipt(base / "round" / str(r) / "evaluation.json", {"metrics": {"loss": loss}})
    for target, said in (({"metric": "loss", "value": 2.0}, "2"), (None, None)):
        study = Study("s", ("seed",), points, target)
        table = tmp_path / "summary.tsv"
        study_summary(study, "loss", str(table), str(tmp_path / "loss.png"), str(tmp_path))
        lines = [line.split("\t") for line in table.read_text().splitlines()]
        if said is None:
            assert "to_target" not in lines[0]
            continue
        assert lines[0][-1] == "to_target"
        assert [line[-1] for line in lines[1:]] == ["", "", "", said]  # the last row only


# --- what each round cost (issue 56, item 3) -----------------------------------------------


# `soma status`'s rows of a run (soma.round.report.status: `cpu_s`, `cost`), as round_costs
# reads them: round 1 met twice (a rerun with another config: the receipts name the meeting
# whose average has weights "b"), its other meeting's cost never counted; Slurm's accounting
# of each round's jobs (`cost`, soma.slurm.cost.Total as a dict), energy accounted for one.
def slurm_cost(core_hours: float, queue_s: float, energy_j: float | None) -> dict[str, Any]:
    return {
        "jobs": 2, "cpu_hours": core_hours, "gpu_hours": 0.0, "cpu_used_hours": core_hours / 2,
        "queue_s": queue_s, "elapsed_s": core_hours * 3600, "mem_peak_mb": 1536.0,
        "energy_j": energy_j, "unaccounted_energy": [] if energy_j else ["41"],
        "queue_share": 0.1,
    }  # fmt: skip


STATUS = [
    {"round": 0, "weights": "a", "cpu_s": 12.5, "cost": slurm_cost(0.5, 600, 7200.0)},
    {"round": 1, "weights": "other", "cpu_s": 99.0, "cost": slurm_cost(9.0, 0, None)},
    {"round": 1, "weights": "b", "cpu_s": 7.5, "cost": slurm_cost(0.25, 30, None)},
    {"round": 2, "weights": "c", "cpu_s": 5.0, "cost": slurm_cost(0.25, 0, 1800.0)},
]
WEIGHTS = {0: "a", 1: "b", 2: "c"}


def costed(status: list[dict[str, Any]], rounds: int = 3) -> list[dict[str, Any]]:
    spent = report.costs_of(status, {r: WEIGHTS[r] for r in range(rounds)})
    return report.with_costs(rows(rounds, 3), spent)


def test_each_round_shows_what_it_cost_and_what_the_run_had_spent(tmp_path) -> None:
    table, page, plot = tmp_path / "summary.tsv", tmp_path / "summary.html", tmp_path / "a.png"
    spent = report.costs_of(STATUS, WEIGHTS)
    made = report.with_costs(rows(3, 3), spent)
    report.summary(made, "accuracy", str(table), str(plot), page=str(page), spent=spent.said)
    lines = [line.split("\t") for line in table.read_text().splitlines()]
    header = lines[0]
    costs = header[header.index("cpu_s") : header.index("trained")]  # after the metrics
    assert costs == [
        "cpu_s", "cpu_s_cumulative", "core_hours", "core_hours_cumulative", "queue_wait_s",
        "mem_peak_mb", "energy_kj",
    ]  # fmt: skip
    assert "gpu_hours" not in header, "no GPU in the run: no GPU column"
    at = {name: i for i, name in enumerate(header)}
    by_round = {line[at["round"]]: line for line in lines[1:]}
    assert [by_round[r][at["cpu_s"]] for r in ("start", "0", "1", "2")] == [
        "", "12.5000", "7.5000", "5.0000"
    ]  # fmt: skip
    assert [by_round[r][at["cpu_s_cumulative"]] for r in "012"] == ["12.5000", "20.0000", "25.0000"]
    assert [by_round[r][at["core_hours"]] for r in "012"] == ["0.5000", "0.2500", "0.2500"]
    assert [by_round[r][at["core_hours_cumulative"]] for r in "012"] == [
        "0.5000", "0.7500", "1.0000"
    ]  # fmt: skip
    assert [by_round[r][at["queue_wait_s"]] for r in "012"] == ["600", "30", "0"]
    assert [by_round[r][at["energy_kj"]] for r in "012"] == ["7.2000", "nan", "1.8000"]
    assert by_round["0"][at["mem_peak_mb"]] == "1536"
    assert spent.said.startswith("the rounds' processes used 25.0 CPU-seconds (0.007 CPU-hours)")
    assert "their Slurm jobs: 1.0 core-hours" in spent.said and "energy 9.0 kJ" in spent.said
    assert "What the run cost: the rounds' processes used 25.0" in html.unescape(page.read_text())


def test_a_run_so_far_is_not_said_past_a_round_whose_records_do_not_say() -> None:
    status = [dict(row, cost=None) for row in STATUS]
    status[0]["cpu_s"] = None  # records older than `cpu_s`
    made = {row["round"]: row for row in costed(status)}
    assert "cpu_s" not in made[0] and made[1]["cpu_s"] == 7.5
    assert all("cpu_s_cumulative" not in made[r] for r in (0, 1, 2))
    assert all("core_hours" not in made[r] for r in (0, 1, 2)), "no Slurm: no core-hours"
    spent = report.costs_of(status, WEIGHTS)
    assert (
        spent.said
        == "the rounds' processes used 12.5 CPU-seconds (0.003 CPU-hours); 1 round not said"
    )


def test_the_plot_draws_the_metric_against_what_the_rounds_cost_beside_the_rounds() -> None:
    made = costed(STATUS)
    figure = drawn(made, 3)
    try:
        metric, below, spent = figure.axes
        assert below.get_ylim() == (0, 3) and metric.get_shared_x_axes().joined(metric, below)
        assert spent.get_shared_y_axes().joined(metric, spent)
        assert "core-hours" in spent.get_xlabel()
        against = {tuple(line.get_ydata()): list(line.get_xdata()) for line in spent.get_lines()}
        federated = tuple(row["federated"] for row in made)
        assert against[federated] == [0.0, 0.5, 0.75, 1.0], "the start at 0, then the run so far"
        lines = metric.get_lines()  # federated first, validation last (report.SERIES)
        colours = [lines[0].get_color(), lines[-1].get_color()]
        assert [line.get_color() for line in spent.get_lines()] == colours, "the same lines"
    finally:
        pyplot.close(figure)
    without_slurm = costed([dict(row, cost=None) for row in STATUS])
    figure = drawn(without_slurm, 3)
    try:
        spent = figure.axes[-1]
        assert spent.get_xlabel().endswith("(s)")
        assert list(spent.get_lines()[0].get_xdata()) == [0.0, 12.5, 20.0, 25.0]
    finally:
        pyplot.close(figure)


def test_a_runs_rounds_cost_what_their_records_and_slurms_accounting_say(
    tmp_path, monkeypatch
) -> None:
    """A run whose process ran as Slurm job 40 (4 cores, 10 min queued, 10 min run): both
    rounds' records name it, so each round is half its core-hours, its wait in the first; the
    CPU seconds are `soma status`'s, the one computation of them."""
    import soma
    from soma.round.report import status
    from soma.store import Store
    from soma.workflow import write_receipt

    sacct = (
        "40|COMPLETED|2026-12-06T10:00:00|2026-12-06T10:10:00|2026-12-06T10:20:00|00:10:00|4|"
        "cpu=4,node=1|00:20:00||\n"
    )
    asked = []
    monkeypatch.setattr(
        "soma.slurm.query.accounting", lambda jobs, fields: asked.append(jobs) or sacct
    )
    monkeypatch.setenv("SLURM_JOB_ID", "40")
    for name in ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(name, raising=False)
    simulated = soma.simulate(
        "soma.tasks.control", clients=3, rounds=2, store=tmp_path / "s", run="r"
    )
    averages = []
    for done in simulated.rounds:
        path = tmp_path / "results" / "round" / str(done.round) / "average.json"
        write_receipt(path, {"run": "r", "round": done.round, "weights": done.record["weights"]})
        averages.append(str(path))
    spent = report.round_costs({"store": str(tmp_path / "s")}, averages)
    assert spent is not None and asked[-1] == ["40"]
    said = [row["cpu_s"] for row in status(Store(tmp_path / "s"), "r")]
    assert [spent.rounds[r]["cpu_s"] for r in (0, 1)] == said
    assert [spent.rounds[r]["core_hours"] for r in (0, 1)] == pytest.approx([4 / 6 / 2] * 2)
    assert [spent.rounds[r]["queue_wait_s"] for r in (0, 1)] == [600, 0]
    assert "energy_kj" not in spent.rounds[0], "no energy plugin: no energy column"
    (tmp_path / "file").write_text("not a store")  # never required: a warning, no column
    assert report.round_costs({"store": str(tmp_path / "file")}, averages) is None
