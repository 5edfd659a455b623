"""The workflow's plots and tables as a reader sees them (soma.workflow.report and
soma.workflow.study): every legend outside the axes and apart from every other, naming every
line and bar; the clients' axis 0..the run's clients in whole clients; a cell that does not
apply left empty, a metric that is not a number `nan`."""

from __future__ import annotations

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
    columns = [c for c in (*report.COLUMNS, *report.ATTENDANCE) if any(c in r for r in made)]
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
