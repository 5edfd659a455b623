"""Broken variants of the workflow's plots and tables (soma.workflow.report, soma.workflow.study,
soma.config.study's job names), registered into tests/mutants.py's MUTANTS."""

from __future__ import annotations

from typing import Any

from mutants import _replace, mutant

REPORT = "tests/workflow/test_report.py"


@mutant("plot_legends_inside", caught_by=[REPORT, "-k", "no_legend_covers"])
def _plot_legends_inside() -> None:
    """Each axes draws its own legend where matplotlib puts it, inside: the clients' legend
    over the metric's (the bug a new user met)."""
    import soma.workflow.report

    def legend_below(figure: Any, columns: int = 2) -> None:
        for axes in figure.axes:
            if axes.get_legend_handles_labels()[0]:
                axes.legend(loc="lower right")

    _replace(soma.workflow.report, "legend_below", legend_below)


@mutant("plot_clients_axis_thrice", caught_by=[REPORT, "-k", "clients_axis"])
def _plot_clients_axis_thrice() -> None:
    """The clients' axis runs to three times the most a round had (30 for 10 clients)."""
    import soma.workflow.report

    drawn = soma.workflow.report._draw_attendance

    def _draw_attendance(axes: Any, counted: Any, clients: Any) -> None:
        drawn(axes, counted, clients)
        axes.set_ylim(0, 3 * max(t + d + r for _, t, d, r, _ in counted))

    _replace(soma.workflow.report, "_draw_attendance", _draw_attendance)


@mutant("table_cells_nan", caught_by=[REPORT, "-k", "cell_that_does_not_apply"])
def _table_cells_nan() -> None:
    """A cell the row has no column for reads `nan`, as a metric that is not a number does."""
    import soma.workflow.report

    shown = soma.workflow.report.cell

    def cell(row: Any, column: str) -> str:
        return "nan" if row.get(column) is None else shown(row, column)

    _replace(soma.workflow.report, "cell", cell)


@mutant("study_to_target_every_row", caught_by=[REPORT, "-k", "to_target_once"])
def _study_to_target_every_row() -> None:
    """Every row of a point repeats its `to_target`."""
    import soma.workflow.study

    made = soma.workflow.study.study_rows

    def study_rows(study: Any, results: str = soma.workflow.study.RESULTS) -> list:
        rows = made(study, results)
        said: dict[tuple, Any] = {}
        for row in reversed(rows):
            point = tuple(row[k] for k in study.keys if k != "seed")
            said.setdefault(point, row.get("to_target", ""))
            if study.target is not None:
                row["to_target"] = said[point]
        return rows

    _replace(soma.workflow.study, "study_rows", study_rows)


@mutant(
    "study_jobs_by_place",
    caught_by=["tests/workflow/test_study.py", "-k", "named_by_the_point"],
)
def _study_jobs_by_place() -> None:
    """A study's jobs are named `point<i>`, which says nothing of the point."""
    import soma.config.study

    def job_names(study: Any) -> list[str]:
        return [f"point{i}" for i in range(len(study.points))]

    _replace(soma.config.study, "job_names", job_names)


@mutant("summary_cost_of_round_before", caught_by=[REPORT, "-k", "what_it_cost"])
def _summary_cost_of_round_before() -> None:
    """Round r's cost columns are round r-1's (round 0's none): the table is off by a round."""
    import soma.workflow.report

    made = soma.workflow.report.costs_of

    def costs_of(status: Any, weights: Any) -> Any:
        spent = made(status, weights)
        shifted = {r: spent.rounds.get(r - 1, {}) for r in spent.rounds}
        return soma.workflow.report.Spent(shifted, spent.said)

    _replace(soma.workflow.report, "costs_of", costs_of)


@mutant("summary_cpu_counted_twice", caught_by=[REPORT, "-k", "what_it_cost or rounds_cost"])
def _summary_cpu_counted_twice() -> None:
    """The run's CPU seconds so far count each round's twice."""
    import soma.workflow.report

    made = soma.workflow.report.costs_of

    def costs_of(status: Any, weights: Any) -> Any:
        spent = made(status, weights)
        for said in spent.rounds.values():
            if "cpu_s_cumulative" in said:
                said["cpu_s_cumulative"] += said["cpu_s"]
        return spent

    _replace(soma.workflow.report, "costs_of", costs_of)


@mutant("plot_cost_per_round", caught_by=[REPORT, "-k", "against_what_the_rounds_cost"])
def _plot_cost_per_round() -> None:
    """The plot's cost axis is each round's own cost, not the run's so far: accuracy against
    what one round cost says nothing of what reaching it took."""
    import soma.workflow.report

    chosen = soma.workflow.report.cost_axis

    def cost_axis(rows: Any) -> Any:
        found = chosen(rows)
        if found is None:
            return None
        column, scale, label = found
        return column.removesuffix("_cumulative"), scale, label

    _replace(soma.workflow.report, "cost_axis", cost_axis)
