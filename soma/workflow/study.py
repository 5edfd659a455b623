"""A study's table and plot (rule `study_summary`): its points compared over their seeds.

Per point (the grid's keys other than `seed`) and round: each metric's mean and standard
deviation (sample, n-1; `nan` with one seed) over the seeds, read from the runs' own
evaluation receipts (the same numbers as their summary.tsv), and the rounds the seeds' mean
took to reach the study's `target` (on the point's last row: a fact of the point, not of a
round). The plot draws each point's mean with a band of one standard deviation on either side.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from soma.config.study import Study
from soma.run.evaluation import lower_is_better
from soma.workflow.common import LOG
from soma.workflow.receipts import RESULTS, evaluation_path, read_receipt, start_path
from soma.workflow.report import (
    START,
    _write_text,
    cell,
    legend_below,
    round_ticks,
    save_png,
    x_of,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def evaluations(results: str, run: str, rounds: int) -> list[str]:
    """A run's receipts that hold its metrics, in order: its start, then each round's."""
    return [start_path(run, results=results)] + [
        evaluation_path(run, r, results=results) for r in range(rounds)
    ]


def _metrics(paths: Sequence[str]) -> list[tuple[int | str, dict[str, float]]]:
    out: list[tuple[int | str, dict[str, float]]] = []
    for i, path in enumerate(paths):
        metrics = read_receipt(path).get("metrics") or {}
        numbers = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
        out.append((START if i == 0 else i - 1, numbers))
    return out


def study_rows(study: Study, results: str = RESULTS) -> list[dict[str, Any]]:
    """The table's rows: per point and round, `<metric>_mean`, `<metric>_std`, `seeds`; with a
    target, the point's last row holds `to_target` (rounds until the seeds' mean reached the
    target; "" when it did not within the rounds), said once as it is one fact per point."""
    groups: dict[tuple[tuple[str, str], ...], list[str]] = {}
    rounds = {}
    for point in study.points:
        groups.setdefault(point.group(), []).append(point.run)
        rounds[point.run] = int(point.config["rounds"])
    rows = []
    for group, runs in groups.items():
        per_run = [_metrics(evaluations(results, run, rounds[run])) for run in runs]
        mine = []
        for at in range(min(len(r) for r in per_run)):
            row: dict[str, Any] = dict(group)
            row["round"] = per_run[0][at][0]
            row["seeds"] = len(runs)
            names = sorted(set.intersection(*(set(r[at][1]) for r in per_run)))
            for name in names:
                row[f"{name}_mean"], row[f"{name}_std"] = spread([r[at][1][name] for r in per_run])
            mine.append(row)
        if study.target is not None and mine:
            mine[-1]["to_target"] = _to_target(mine, study.target)
        rows.extend(mine)
    return rows


def spread(values: Sequence[float]) -> tuple[float, float | None]:
    """The mean and the sample standard deviation (n-1: the seeds are a sample of the seeds
    one could draw); None with one seed, where there is no spread to estimate."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def _to_target(rows: Sequence[Mapping[str, Any]], target: Mapping[str, Any]) -> Any:
    """Rounds until the mean reached the target (round r is r + 1 rounds); "" when never."""
    column, value = f"{target['metric']}_mean", float(target["value"])
    for row in rows:
        got = row.get(column)
        if row["round"] == START or got is None:
            continue
        if (got <= value) if lower_is_better(target["metric"]) else (got >= value):
            return int(row["round"]) + 1
    return ""


def study_summary(
    study: Study, metric: str, table: str, plot: str, results: str = RESULTS
) -> list[dict[str, Any]]:
    """Write the study's summary.tsv and its plot of `metric`; the rows."""
    rows = study_rows(study, results)
    keys = [k for k in study.keys if k != "seed"]
    named = sorted({c for row in rows for c in row if c.endswith(("_mean", "_std"))})
    columns = [*keys, "round", "seeds", *named]
    if study.target is not None:
        columns.append("to_target")
    lines = ["\t".join(columns)] + ["\t".join(cell(row, c) for c in columns) for row in rows]
    _write_text(table, "\n".join(lines) + "\n")
    save_png(study_plot(rows, keys, metric, study.name), plot)
    LOG.info("study %r: wrote %s (%d rows) and %s", study.name, table, len(rows), plot)
    return rows


def study_plot(
    rows: Sequence[Mapping[str, Any]], keys: Sequence[str], metric: str, name: str
) -> Figure:
    """Each point's mean of `metric` per round, with a band of one standard deviation; the
    legend below the axes, where it covers no point's line however many there are (a Figure,
    so that tests can read its artists)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(6.4, 5.0), dpi=100, layout="constrained")
    points: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        label = ", ".join(f"{k}={row[k]}" for k in keys) or "all"
        points.setdefault(label, []).append(row)
    for label, mine in points.items():
        xs = [x_of(row["round"]) for row in mine]
        mean = [_number(row.get(f"{metric}_mean")) for row in mine]
        std = [_number(row.get(f"{metric}_std"), 0.0) for row in mine]
        (line,) = axes.plot(xs, mean, "o-", markersize=3, label=label)
        low = [m - s for m, s in zip(mean, std, strict=True)]
        high = [m + s for m, s in zip(mean, std, strict=True)]
        axes.fill_between(xs, low, high, color=line.get_color(), alpha=0.2)
    ticks = round_ticks([row["round"] for row in next(iter(points.values()), [])])
    axes.set_xticks(ticks, ["start" if t == x_of(START) else str(t) for t in ticks])
    axes.set_xlabel("round (0-based, as in the table)")
    axes.set_ylabel(f"test {metric} (mean ± std over seeds)")
    axes.set_title(f"study {name}")
    axes.grid(alpha=0.3)
    legend_below(figure)
    return figure


def _number(value: Any, missing: float = math.nan) -> float:
    return missing if value is None else float(value)
