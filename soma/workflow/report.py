"""The summary job's table and plot: per round, the federated run beside its baselines, and
what each round cost.

Presentation of receipts the other jobs wrote: a TSV (and the same table as HTML, for
Snakemake's report, which shows HTML but not TSV) and a plot named by the metric; and of what
`soma status` computes from the run's records of what its rounds cost (round_costs), so that
the table and `soma status` never disagree.
"""

from __future__ import annotations

import html
import io
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from soma.config.configs import ConfigRefused
from soma.files import write_atomic
from soma.run.evaluation import lower_is_better
from soma.slurm import cost
from soma.workflow.common import LOG, shown
from soma.workflow.receipts import read_receipt

if TYPE_CHECKING:
    from matplotlib.figure import Figure


# `validation*`: federated evaluation (soma.run.evaluation), the clients' own held-out data: the
# mean weighted by evaluation size, and the spread over clients; `train_loss`: the clients'
# training loss, weighted by training size.
VALIDATION = tuple(f"validation_{stat}" for stat in ("min", "p10", "median", "p90", "max"))
COLUMNS = (
    "strategy",
    "round",
    "federated",
    "alone",
    "alone_best",
    "centralized",
    "validation",
    *VALIDATION,
    "train_loss",
    "epsilon",
    "epsilon_against",  # whom the epsilon holds against (soma.privacy.ADVERSARIES)
    "epsilon_store_reader",  # each figure the state keeps, by whom it holds against
    "epsilon_weights_reader",
)
# What each round cost (with_costs, issue 56), after the metrics: `cpu_s`, the CPU seconds
# (user and system) its processes used (its train jobs and its averager, as their records in
# the store say; without Slurm too), and the run's so far; where its jobs ran under Slurm,
# what sacct accounts them: core-hours allocated (cores x time held: what an allocation is
# charged), the run's so far, GPU-hours (in a run that had GPUs), the jobs' queue wait, their
# memory peak and, where Slurm accounts it, their energy.
COST = (
    "cpu_s",
    "cpu_s_cumulative",
    "core_hours",
    "core_hours_cumulative",
    "gpu_hours",
    "queue_wait_s",
    "mem_peak_mb",
    "energy_kj",
)
# Who took part in each round (with_attendance), after the costs; `refused` (clients whose
# input the averaging refused, apart from the drop-outs) only in a run that had any.
ATTENDANCE = ("trained", "dropped", "refused", "why")
START = "start"  # the `round` of the starting weights' row: before round 0
# What each column is called in the plot's legend, and how it is drawn.
SERIES = {
    "federated": ("federated ({strategy})", "o-"),
    "centralized": ("centralized (all data)", "s--"),
    "alone": ("alone (mean of clients)", "^:"),
    "alone_best": ("alone (best client)", "v-."),
    "validation": ("validation (clients' own data: mean, 10th-90th percentile)", "d-"),
}


def summary_rows(
    evaluations: Sequence[str],
    alones: Sequence[str],
    central: str | None,
    metric: str,
    strategy: str = "fedavg",
    start: str | None = None,
) -> list[dict[str, Any]]:
    """Per round: the strategy, the federated average's metric, the alone clients' mean and
    best, centralized. The strategy is a column so that the tables of runs with different
    strategies stack into one.

    Rounds are 0-based, as in results/<run>/round/<r>/ and `soma status`: round r's row is
    the metric after round r. With the start receipt's evaluation, a first row `start` holds
    the starting weights' metric, where every column begins (the baselines start from the
    same weights). A metric none of the evaluations has is refused, naming `metric`.
    """
    given = [read_receipt(path) for path in evaluations]
    federated = {e["round"]: e["metrics"] for e in given}
    spent = {e["round"]: e["privacy"] for e in given if e.get("privacy")}
    local = {e["round"]: e["federated"] for e in given if e.get("federated")}
    tested = [m for m in federated.values() if m]  # a task with only evaluate_local has none
    if tested and not any(metric in m for m in tested):
        returned = ", ".join(sorted(tested[0]))
        raise ConfigRefused(
            f"config key `metric`: the task's evaluate() returns {returned}; not {metric!r}"
        )
    alone_runs = [r for r in (read_receipt(p)["per_round"] for p in alones) if r is not None]
    central_run = read_receipt(central)["per_round"] if central else None
    better = min if lower_is_better(metric) else max
    rows = []
    at_start = (read_receipt(start).get("metrics") or {}) if start else {}
    if metric in at_start:  # a start receipt older than its evaluation has no metrics
        at_start = at_start[metric]
        rows.append(_row(strategy, START, at_start, [at_start] * len(alone_runs), better))
        if central_run:
            rows[0]["centralized"] = at_start
    for r in sorted(federated):
        values = [run[r]["metrics"].get(metric) for run in alone_runs]
        row = _row(strategy, r, federated[r].get(metric), values, better)
        if central_run:
            row["centralized"] = central_run[r]["metrics"].get(metric)
        if r in local:
            row.update(validation_columns(local[r], metric))
        if r in spent:  # a DP strategy's privacy spent up to this round (soma.privacy)
            row["epsilon"] = spent[r]["epsilon"]
            row["epsilon_against"] = spent[r].get("against", "unstated")
            for reader, figure in (spent[r].get("epsilons") or {}).items():
                row[f"epsilon_{reader}"] = figure
        rows.append(row)
    return rows


def with_attendance(
    rows: Sequence[Mapping[str, Any]], averages: Sequence[str]
) -> list[dict[str, Any]]:
    """The rows with who took part in each round, from the rounds' average receipts: how
    many clients trained, how many dropped out, and why by kind (soma.run.attendance), and,
    in a run where the averaging refused a client's input, how many were refused (apart
    from the drop-outs); the start's row has none. A client left out of every round it was
    sampled for is named in a warning (the run's last line), with its last reason."""
    from soma.run.attendance import never_trained, took_part, warning

    given = [read_receipt(path) for path in averages]
    by_round = {int(a["round"]): a for a in given}
    refusing = any(_refused(a) for a in given)
    out = []
    for row in rows:
        row = dict(row)
        receipt = by_round.get(row["round"]) if row["round"] != START else None
        if receipt is None:
            row.update(trained="", dropped="", why="", **({"refused": ""} if refusing else {}))
        else:
            seen = took_part({**receipt, "left_out": _dropped(receipt)})
            row.update(trained=seen.trained, dropped=seen.dropped, why=seen.reasons())
            if refusing:
                row["refused"] = len(_refused(receipt))
        out.append(row)
    for client, why in never_trained(given).items():
        LOG.warning(warning(client, why), extra={"progress": True})  # to the terminal too
    return out


@dataclass(frozen=True)
class Spent:
    """What a run's rounds cost, as the summary shows it: each round's cost columns (COST),
    and the run's in one line (`said`, "" when no record says)."""

    rounds: dict[int, dict[str, Any]]
    said: str


def round_costs(config: Mapping[str, Any], averages: Sequence[str]) -> Spent | None:
    """What each round of the run cost, from the run's records in the store by the one
    computation `soma status` shows (soma.round.report.status: its `cpu_s` and `cost`, Slurm's
    accounting asked once), of the meetings the average receipts name. Never required: a
    store that cannot be read is a warning, and the table has no cost columns."""
    from soma.config.spec import RunSpec
    from soma.errors import SomaError
    from soma.round import report as rounds
    from soma.store.errors import StoreError

    given = [read_receipt(path) for path in averages]
    if not given:
        return None
    try:
        found = rounds.status(RunSpec.config_store(config), str(given[0]["run"]))
    except (SomaError, StoreError, OSError) as error:
        LOG.warning("what each round cost is not shown: cannot read the run's records: %s", error)
        return None
    return costs_of(found, {int(a["round"]): a.get("weights") for a in given})


def costs_of(status: Sequence[Mapping[str, Any]], weights: Mapping[int, Any]) -> Spent:
    """Each round's cost columns from `soma status`'s rows of the run, the round's row the one
    whose average has `weights[round]` (the meeting the workflow's receipts name; else the
    round's only meeting): the round's own figures, and the run's so far while every round
    up to it said its own (a sum that leaves a round out would read as the whole)."""
    chosen: dict[int, Mapping[str, Any]] = {}
    for r in sorted(weights):
        of_round = [row for row in status if row.get("round") == r]
        named = [row for row in of_round if row.get("weights") == weights[r]]
        if len(named) == 1 or len(of_round) == 1:
            chosen[r] = (named or of_round)[0]
    accounted = {r: cost.total_of(row["cost"]) for r, row in chosen.items() if row.get("cost")}
    gpus = any(t.gpu_hours for t in accounted.values())
    energy = any(t.energy_j is not None for t in accounted.values())
    columns: dict[int, dict[str, Any]] = {}
    cpu: float | None = 0.0
    core: float | None = 0.0
    for r in sorted(weights):
        said: dict[str, Any] = {}
        used = chosen.get(r, {}).get("cpu_s")
        cpu = None if cpu is None or used is None else cpu + used
        if used is not None:
            said.update(cpu_s=float(used), **({} if cpu is None else {"cpu_s_cumulative": cpu}))
        summed = accounted.get(r)
        core = None if core is None or summed is None else core + summed.cpu_hours
        if summed is not None:
            said["core_hours"] = summed.cpu_hours
            if core is not None:
                said["core_hours_cumulative"] = core
            if gpus:
                said["gpu_hours"] = summed.gpu_hours
            said["queue_wait_s"] = round(summed.queue_s)
            if summed.mem_peak_mb is not None:
                said["mem_peak_mb"] = round(summed.mem_peak_mb)
            if energy:
                said["energy_kj"] = None if summed.energy_j is None else summed.energy_j / 1000
        columns[r] = said
    return Spent(columns, _run_said(columns, list(accounted.values())))


def _run_said(columns: Mapping[int, Mapping[str, Any]], accounted: list[cost.Total]) -> str:
    """The run's cost in one line: its rounds' CPU time, and its Slurm jobs' (cost.said)."""
    parts = []
    used = [c["cpu_s"] for c in columns.values() if "cpu_s" in c]
    if used:
        unsaid = len(columns) - len(used)
        parts.append(
            f"the rounds' processes used {sum(used):.1f} CPU-seconds "
            f"({sum(used) / 3600:.3f} CPU-hours)"
            + (f"; {unsaid} round{'s' if unsaid > 1 else ''} not said" if unsaid else "")
        )
    if accounted:
        parts.append(f"their Slurm jobs: {cost.said(cost.combined(accounted))}")
    return "; ".join(parts)


def with_costs(rows: Sequence[Mapping[str, Any]], spent: Spent | None) -> list[dict[str, Any]]:
    """The rows with what each round cost (COST, from `round_costs`); the start's row has
    none (its cumulative cost is 0 on the plot: the rounds' spending starts there)."""
    out = [dict(row) for row in rows]
    if spent is not None:
        for row in out:
            if row["round"] != START:
                row.update(spent.rounds.get(int(row["round"]), {}))
    return out


def _refused(receipt: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The left-out entries of an average receipt whose client's input was refused."""
    from soma.round.records import is_refused

    return [x for x in receipt.get("left_out") or [] if is_refused(x.get("why"))]


def _dropped(receipt: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The other left-out entries: drop-outs, and clients that never came."""
    refused = _refused(receipt)
    return [x for x in receipt.get("left_out") or [] if x not in refused]


def validation_columns(federated: Mapping[str, Any], metric: str) -> dict[str, Any]:
    """A round's federated evaluation of `metric` (mean and spread) and training loss, as
    the table's columns (see COLUMNS)."""
    columns: dict[str, Any] = {}
    spread = (federated.get("evaluation") or {}).get(metric)
    if spread:
        columns["validation"] = spread.get("mean")
        columns.update({c: spread.get(c.removeprefix("validation_")) for c in VALIDATION})
    loss = (federated.get("training") or {}).get("loss")
    if loss:
        columns["train_loss"] = loss.get("mean")
    return columns


def _row(
    strategy: str, round: int | str, federated: Any, alone: list, better: Callable[[list], Any]
) -> dict[str, Any]:
    """One row of the table; the alone columns only when there are clients alone."""
    row: dict[str, Any] = {"strategy": strategy, "round": round, "federated": federated}
    if alone:
        known = [v for v in alone if v is not None]
        row["alone"] = sum(known) / len(known) if len(known) == len(alone) else None
        row["alone_best"] = better(known) if known else None
    return row


def summary(
    rows: Sequence[Mapping[str, Any]],
    metric: str,
    table: str,
    plot: str,
    page: str | None = None,
    run: str | None = None,
    clients: int | None = None,
    spent: str = "",
) -> None:
    """The per-round table (TSV, and as an HTML page for the report) and the plot (PNG), its
    clients' axis 0..`clients` (the run's); `spent`, what the run cost in one line
    (Spent.said), on the page and in the log."""
    columns = [c for c in (*COLUMNS, *COST, *ATTENDANCE) if any(c in row for row in rows)]
    cells = [[cell(row, c) for c in columns] for row in rows]
    title = plot_title(rows, columns)
    _write_text(table, "\n".join("\t".join(line) for line in [columns, *cells]) + "\n")
    if page is not None:
        head = f"{run or 'run'}: test {metric}"
        _write_text(page, html_table(columns, cells, head, title, spent))
    draw(rows, columns, metric, plot, title, clients)
    LOG.info("wrote %s (%d rows), %s%s", table, len(rows), plot, f" and {page}" if page else "")
    if spent:
        LOG.info("what the run cost: %s", spent)
    if rows:
        last = rows[-1]
        LOG.info("round %s: %s", last["round"], shown({c: last.get(c) for c in columns[2:]}))


def cell(row: Mapping[str, Any], column: str) -> str:
    """A table cell: four decimals for a metric; `nan` where the row has the column but its
    metric was not a number (a diverged run); empty where the row has no such column (the
    start's validation: nobody evaluates the starting weights on their own data), as TSV
    leaves a value out (pandas reads both as NaN)."""
    if column not in row:
        return ""
    value = row[column]
    if value is None:
        return "nan"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _write_text(path: str, text: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text.encode("utf-8"))


def plot_title(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """What the plot compares, naming only the baselines it has."""
    strategy = rows[0]["strategy"] if rows else "fedavg"
    others = [
        name
        for column, name in (("alone", "each client alone"), ("centralized", "centralized"))
        if column in columns
    ]
    against = f" against {' and '.join(others)}" if others else ""
    return f"Federated ({strategy}){against}"


def html_table(
    columns: Sequence[str],
    cells: Sequence[Sequence[str]],
    head: str,
    about: str,
    spent: str = "",
) -> str:
    """The table as a page of its own: Snakemake's report shows HTML, and a TSV only as a
    download; `spent`, what the run cost, under it."""
    header = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "\n".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in line) + "</tr>"
        for line in cells
    )
    style = (
        "body{font-family:sans-serif}table{border-collapse:collapse}"
        "th,td{padding:3px 10px;border-bottom:1px solid #ccc;text-align:right}"
    )
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(head)}</title>'
        f"<style>{style}</style></head>\n<body><h3>{html.escape(head)}</h3>"
        f"<p>{html.escape(about)}; round 0-based, start: the starting weights.</p>\n"
        f"<table>\n<thead><tr>{header}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>\n"
        + (f"<p>What the run cost: {html.escape(spent)}.</p>\n" if spent else "")
        + "</body></html>\n"
    )


def x_of(round: int | str) -> int:
    """Where a row sits on the plot's x-axis: its round, and the start just before round 0."""
    return -1 if round == START else int(round)


def round_ticks(rounds: Sequence[int | str]) -> list[int]:
    """Integer ticks over the table's rounds (about ten at most), and the start's just before
    round 0: the plot's x-axis is the table's `round` column."""
    from matplotlib.ticker import MaxNLocator

    numbered = [int(r) for r in rounds if r != START]
    ticks = []
    if numbered:
        low, high = min(numbered), max(numbered)
        found = MaxNLocator(nbins=10, integer=True).tick_values(low, high)
        ticks = sorted({int(t) for t in found if low <= t <= high} | {low})
    if START not in rounds:
        return ticks
    if len(ticks) > 1 and ticks[1] - ticks[0] > 1:
        ticks = ticks[1:]  # sparse ticks: `start` and the first round would overlap
    return [x_of(START), *ticks]


def _band(axes: Any, rows: Sequence[Mapping[str, Any]], xs: Sequence[int], color: str) -> None:
    """The 10th-90th percentile over clients of federated evaluation, around its mean."""

    def series(column: str) -> list[float]:
        return [math.nan if row.get(column) is None else row[column] for row in rows]

    low, high = series("validation_p10"), series("validation_p90")
    axes.fill_between(xs, low, high, alpha=0.2, color=color, linewidth=0)


def draw(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    metric: str,
    plot: str,
    title: str,
    clients: int | None = None,
) -> None:
    """The plot as a PNG; no timestamp or version in it, so a rerun writes the same bytes."""
    figure = plotted(rows, columns, metric, title, clients)
    save_png(figure, plot)


def save_png(figure: Figure, plot: str) -> None:
    """A figure as a PNG written atomically, without the metadata that would change its bytes
    from one matplotlib to the next."""
    from matplotlib import pyplot

    Path(plot).parent.mkdir(parents=True, exist_ok=True)
    png = io.BytesIO()
    figure.savefig(png, format="png", metadata={"Software": None})
    pyplot.close(figure)
    write_atomic(plot, png.getbuffer())


def plotted(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    metric: str,
    title: str,
    clients: int | None = None,
) -> Figure:
    """The metric per round on the table's rounds, one line per column of the table, and,
    when the rows say who took part, the clients of each round in a panel below on an axis
    of 0..`clients` (default: the most a round had); when the rows say what the rounds cost
    (COST), the federated lines against the run's cost so far, to the right (`cost_axis`).
    One legend, below the axes, so that it covers neither a line nor a bar (a Figure, so that
    tests can read its artists)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    counted = attendance(rows)
    spent = cost_axis(rows)
    costly = None
    if spent is not None:  # the metric against what the rounds cost, to the right
        figure = pyplot.figure(figsize=(12.0, 6.2 if counted else 5.0), dpi=100)
        figure.set_layout_engine("constrained")
        grid = figure.add_gridspec(
            2 if counted else 1, 2, height_ratios=(3, 1)[: 1 + bool(counted)]
        )
        axes = figure.add_subplot(grid[0, 0])
        below = figure.add_subplot(grid[1, 0], sharex=axes) if counted else axes
        if counted:
            axes.tick_params(labelbottom=False)
        costly = figure.add_subplot(grid[0, 1], sharey=axes)
    elif counted:
        figure, (axes, below) = pyplot.subplots(
            2, 1, sharex=True, figsize=(6.4, 6.2), dpi=100, height_ratios=(3, 1),
            layout="constrained",
        )  # fmt: skip
    else:
        figure, axes = pyplot.subplots(figsize=(6.4, 5.0), dpi=100, layout="constrained")
        below = axes
    xs = [x_of(row["round"]) for row in rows]
    strategy = rows[0]["strategy"] if rows else "fedavg"
    for column, (label, style) in SERIES.items():
        if column in columns:
            ys = [math.nan if row.get(column) is None else row[column] for row in rows]
            (line,) = axes.plot(xs, ys, style, label=label.format(strategy=strategy))
            if column == "validation" and "validation_p10" in columns:
                _band(axes, rows, xs, line.get_color())
            if costly is not None and spent is not None and column in AGAINST_COST:
                _draw_cost(costly, rows, spent, ys, line)
    ticks = round_ticks([row["round"] for row in rows])
    below.set_xticks(ticks, ["start" if t == x_of(START) else str(t) for t in ticks])
    below.set_xlabel("round (0-based, as in the table)")
    axes.set_ylabel(f"{metric}" if "validation" in columns else f"test {metric}")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    if counted:
        _draw_attendance(below, counted, clients)
    legend_below(figure)
    return figure


# The lines drawn against cost too: the federated run's (the baselines are other jobs, whose
# cost no round's record counts).
AGAINST_COST = ("federated", "validation")


def cost_axis(rows: Sequence[Mapping[str, Any]]) -> tuple[str, float, str] | None:
    """The cost the plot's right panel is drawn against, when the rows say one: the run's
    core-hours so far under Slurm (what an allocation is charged), else its CPU time so far
    (in hours once it passes one, else in seconds); as (column, scale, axis label)."""
    for column, label in (
        ("core_hours_cumulative", "core-hours allocated so far (Slurm: cores x time held)"),
        ("cpu_s_cumulative", "CPU time of the rounds' processes so far"),
    ):
        known = [row[column] for row in rows if row.get(column) is not None]
        if known:
            if column == "core_hours_cumulative":
                return column, 1.0, label
            hours = max(known) >= 3600
            return column, 1 / 3600 if hours else 1.0, f"{label} ({'CPU-hours' if hours else 's'})"
    return None


def _draw_cost(
    axes: Any,
    rows: Sequence[Mapping[str, Any]],
    spent: tuple[str, float, str],
    ys: Sequence[float],
    line: Any,
) -> None:
    """A line of the metric (`ys`, drawn as `line`; unlabelled: the legend names it once)
    against the run's cost so far: the start at 0 (no round has spent anything), a round
    whose cost no record says left out."""
    name, scale, label = spent

    def x(row: Mapping[str, Any]) -> float:
        if row["round"] == START:
            return 0.0
        return math.nan if row.get(name) is None else row[name] * scale

    axes.plot(
        [x(row) for row in rows], ys, line.get_marker(), linestyle=line.get_linestyle(),
        color=line.get_color(),
    )  # fmt: skip
    axes.set_xlabel(label)
    axes.set_title("the federated run against what its rounds cost")
    axes.grid(alpha=0.3)
    axes.tick_params(labelleft=False)


def legend_below(figure: Figure, columns: int = 2) -> None:
    """One legend for every labelled artist of the figure's axes, outside them, below: it
    hides no data however the lines run (the figure's constrained layout makes it room)."""
    handles, labels = [], []
    for axes in figure.axes:
        for handle, label in zip(*axes.get_legend_handles_labels(), strict=True):
            handles.append(handle)
            labels.append(label)
    if handles:
        figure.legend(
            handles, labels, loc="outside lower center", ncols=min(columns, len(handles)),
            fontsize="small", frameon=False,
        )  # fmt: skip


# A round's attendance as the plot draws it: where, trained, dropped, refused, why.
Attendance = tuple[int, int, int, int, str]


def attendance(rows: Sequence[Mapping[str, Any]]) -> list[Attendance]:
    """The rows that say who took part (with_attendance; not the start's), as bars."""
    return [
        (
            x_of(row["round"]),
            row["trained"],
            row["dropped"],
            row["refused"] if isinstance(row.get("refused"), int) else 0,
            row.get("why") or "",
        )
        for row in rows
        if isinstance(row.get("trained"), int) and isinstance(row.get("dropped"), int)
    ]


def _draw_attendance(axes: Any, counted: Sequence[Attendance], clients: int | None) -> None:
    """Who took part in each round, as stacked bars on an axis of 0..clients: clients that
    trained, on them those that dropped out (labelled by why, as in the table's `why`), and
    on those the clients whose input the averaging refused."""
    at = [c[0] for c in counted]
    trained = [c[1] for c in counted]
    dropped = [c[2] for c in counted]
    refused = [c[3] for c in counted]
    axes.bar(at, trained, width=0.5, color="tab:gray", alpha=0.5, label="clients trained")
    if any(dropped):
        axes.bar(
            at, dropped, width=0.5, bottom=trained, color="tab:red", alpha=0.4,
            label="clients dropped out",
        )  # fmt: skip
        for x, _, d, _, why in counted if len(counted) <= 20 else ():  # legible, or not at all
            if d:  # inside the bars, read upwards from their foot
                axes.annotate(why, (x, 0), xytext=(0, 2), textcoords="offset points",
                              rotation=90, ha="center", va="bottom", fontsize=7)  # fmt: skip
    if any(refused):
        on = [t + d for t, d in zip(trained, dropped, strict=True)]
        axes.bar(
            at, refused, width=0.5, bottom=on, color="tab:purple", alpha=0.4,
            label="clients refused (input)",
        )  # fmt: skip
    top = max(clients or 0, *(t + d + r for _, t, d, r, _ in counted), 1)
    axes.set_ylim(0, top)
    axes.set_yticks(client_ticks(top))
    axes.set_ylabel("clients")
    axes.grid(axis="y", alpha=0.3)


def client_ticks(clients: int) -> list[int]:
    """Whole clients from 0 to `clients`, `clients` the top one: multiples of a round step
    (1, 2 or 5 times a power of ten; at most five steps to the top), the last moved up to
    `clients` when within half a step of it."""
    steps = (m * 10**e for e in itertools.count() for m in (1, 2, 5))
    step = next(s for s in steps if clients <= 5 * s)
    ticks = list(range(0, clients, step))
    if len(ticks) > 1 and clients - ticks[-1] <= step / 2:
        ticks.pop()
    return [*ticks, clients]
