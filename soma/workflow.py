"""What the workflow's jobs do; `workflow/scripts/*.py` are one call each into here.

Every job's Snakemake output is a small receipt: deterministic JSON (sorted keys; digests,
sizes and metrics; no timestamps, no paths of the machine), written atomically. The weights
themselves live in the store and are never Snakemake outputs (Snakemake deletes a job's
outputs before it reruns it; a store keeps what it has). A receipt names weights by digest,
and the next job reads exactly those weights, so Snakemake's comparison of small files by
checksum tells when a rerun changed anything downstream.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from soma import holders
from soma.nodes import export, load
from soma.participation import policy
from soma.round import (
    Input,
    Meeting,
    average_inputs,
    contribute,
    drop,
    dropout_reason,
    read_record,
)
from soma.runs import identity, training_seed
from soma.store import Store
from soma.strategies import (
    Strategy,
    check_task_takes_objective,
    load_strategy,
    train_locally,
)
from soma.tasks import Task, load_task


def write_receipt(path: str | os.PathLike, receipt: Mapping[str, Any]) -> None:
    """Deterministic JSON, atomically: a temp file beside it, fsync, rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(receipt, sort_keys=True, indent=2, allow_nan=False) + "\n"
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def read_receipt(path: str | os.PathLike) -> dict[str, Any]:
    with open(path, encoding="utf-8") as receipt:
        return json.load(receipt)


def task_of(config: Mapping[str, Any]) -> Task:
    """The configured task; a module in the working directory is importable too."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return load_task(config["task"], options_of(config))


def options_of(config: Mapping[str, Any]) -> dict[str, Any]:
    """The chosen task's options: `task_options` holds each task's under its import path.

    Snakemake's `--config 'task_options={...}'` hands nested values over as text, so a text
    value is read as a YAML scalar ("3" is 3, "false" is False, "mlp" stays "mlp").
    """
    import yaml

    options = dict((config.get("task_options") or {}).get(config["task"]) or {})
    return {k: yaml.safe_load(v) if isinstance(v, str) else v for k, v in options.items()}


def strategy_options_of(config: Mapping[str, Any]) -> dict[str, Any]:
    """The chosen strategy's options: `strategy_options` holds each strategy's under its name."""
    import yaml

    chosen = config.get("strategy", "fedavg")
    options = dict((config.get("strategy_options") or {}).get(chosen) or {})
    return {k: yaml.safe_load(v) if isinstance(v, str) else v for k, v in options.items()}


def strategy_of(config: Mapping[str, Any]) -> Strategy:
    return load_strategy(config.get("strategy", "fedavg"), strategy_options_of(config))


def meeting_of(config: Mapping[str, Any], round: int, started: Mapping[str, Any]) -> Meeting:
    """Where round `round`'s clients meet: keyed by the receipt it started from and the run."""
    expected, quorum = policy(
        config["seed"], round, config["clients"], config.get("participation"), config.get("quorum")
    )
    return Meeting(
        run=config["run"],
        round=round,
        clients=config["clients"],
        start=started["weights"],
        state=started.get("state"),
        strategy=config.get("strategy", "fedavg"),
        options=strategy_options_of(config),
        config=identity(config["task"], options_of(config), config["seed"]),
        expected=expected,
        quorum=quorum,
    )


def _numbers(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Metrics as JSON numbers; a NaN or infinite one (a diverging loss) as null, since a
    receipt is strict JSON."""

    def number(v: Any) -> Any:
        if isinstance(v, float):
            return float(v) if math.isfinite(v) else None
        return v

    return {k: number(v) for k, v in sorted(metrics.items())}


def start(config: Mapping[str, Any], receipt: str) -> None:
    """The run's starting weights, from the seed, kept in the store.

    The first job of a run: a strategy given by import path, its options, and whether the
    task can take the strategy's client side are all checked here, before any training.
    """
    task = task_of(config)
    check_task_takes_objective(config.get("strategy", "fedavg"), strategy_of(config), task)
    store = Store(config["store"])
    weights = store.put_value(export(task.nodes(config["seed"])))
    store.bind(f"{config['run']}/start", weights)
    write_receipt(
        receipt, {"run": config["run"], "seed": config["seed"], "weights": weights, "state": None}
    )


def _nodes_at(task: Task, store: Store, config: Mapping[str, Any], weights: str) -> dict:
    nodes = task.nodes(config["seed"])
    load(nodes, store.recall_digest(weights))
    return nodes


def train(
    config: Mapping[str, Any],
    round: int,
    client: int,
    previous: str,
    receipt: str,
    before: str | None = None,
) -> None:
    """Client `client` of round `round`: start from `previous`'s weights, train, contribute.

    `before` is this client's receipt of the last round it took part in, if any: it names the
    client's own strategy state (SCAFFOLD's c_i), which this round's training continues from.
    When the round may go on without some of its clients (a quorum below its sample), a
    client that cannot take part drops out instead of failing the run: its training raised,
    its export was refused (NaN, infinities), or its previous attempt at this job died (a
    retry after the process was killed or its Slurm job was cancelled). Its receipt and its
    record in the store then say why, and the round's average names it as left out.
    """
    task = task_of(config)
    store = Store(config["store"])
    started = read_receipt(previous)
    meeting = meeting_of(config, round, started)
    died = _previous_attempt_died(store, meeting, client)
    if died and meeting.may_go_on_without_some:
        _drop_out(store, meeting, client, receipt, f"died: {died}")
        return
    try:
        written = _train_and_contribute(task, store, config, meeting, client, started, before)
    except Exception as error:
        if not meeting.may_go_on_without_some:
            raise
        _drop_out(store, meeting, client, receipt, dropout_reason(error))
        return
    write_receipt(receipt, written)


def _started_name(meeting: Meeting, client: int) -> str:
    return f"{meeting.prefix}/started/{client}"


def _previous_attempt_died(store: Store, meeting: Meeting, client: int) -> str | None:
    """Whether an earlier attempt at this very job started, left nothing, and is provably
    gone; and this attempt says that it started."""
    name = _started_name(meeting, client)
    earlier = store.resolve(name)
    store.bind(name, store.put_value(holders.me(role="training", client=client)))
    if earlier is None or store.resolve(meeting.client(client)) is not None:
        return None
    holder = read_record(store, earlier)
    if not holders.gone(holder):
        return None
    return f"its previous job ({holders.describe(holder)}) ended before it wrote anything"


def _drop_out(store: Store, meeting: Meeting, client: int, receipt: str, why: str) -> None:
    drop(store, meeting, mine=client, why=why)
    print(f"client {client} drops out of {meeting.what}: {why}")
    write_receipt(
        receipt,
        {
            "run": meeting.run,
            "round": meeting.round,
            "client": client,
            "meeting": meeting.key,
            "dropped": why,
        },
    )


def _train_and_contribute(
    task: Task,
    store: Store,
    config: Mapping[str, Any],
    meeting: Meeting,
    client: int,
    started: Mapping[str, Any],
    before: str | None,
) -> dict[str, Any]:
    nodes = _nodes_at(task, store, config, started["weights"])
    data = task.shard(client, config["clients"])
    size = task.size(data)
    own = read_receipt(before).get("own") if before else None
    metrics, extra, own_next = train_locally(
        strategy_of(config),
        task,
        nodes,
        data,
        seed=training_seed(config["seed"], meeting.round, client),
        state=None if started.get("state") is None else store.recall_digest(started["state"]),
        mine=None if own is None else store.recall_digest(own),
    )
    mine = contribute(
        store, meeting, export(nodes), mine=client, size=size, extra=extra, own=own_next
    )
    return {
        "run": meeting.run,
        "round": meeting.round,
        "client": client,
        "meeting": meeting.key,
        "started_from": started["weights"],
        "weights": mine.weights,
        "size": size,
        "extra": mine.extra,
        "own": mine.own,
        "metrics": _numbers(metrics),
    }


def average(
    config: Mapping[str, Any], round: int, clients: Sequence[str], previous: str, receipt: str
) -> None:
    """Average exactly the weights the client receipts name; once, whoever else tries."""
    store = Store(config["store"])
    meeting = meeting_of(config, round, read_receipt(previous))
    inputs = []
    for path in clients:
        given = read_receipt(path)
        if "dropped" not in given:
            inputs.append(
                Input(given["client"], given["weights"], given["size"], given.get("extra"))
            )
    digest = average_inputs(store, meeting, inputs, deadline=config.get("average_deadline"))
    record = read_record(store, digest)
    write_receipt(
        receipt,
        {
            "run": config["run"],
            "round": round,
            "strategy": meeting.strategy,
            "weights": record["weights"],
            "state": record["state"],
            "inputs": [
                {"client": i["client"], "weights": i["weights"], "size": i["size"]}
                for i in record["inputs"]
            ],
            "left_out": record["left_out"],
        },
    )


def evaluate(config: Mapping[str, Any], round: int, averaged: str, receipt: str) -> None:
    """The round's average on the held-out test set."""
    task = task_of(config)
    store = Store(config["store"])
    weights = read_receipt(averaged)["weights"]
    metrics = task.evaluate(_nodes_at(task, store, config, weights))
    write_receipt(
        receipt,
        {"run": config["run"], "round": round, "weights": weights, "metrics": _numbers(metrics)},
    )


def _baseline(config: Mapping[str, Any], task: Task, data, start: str, client: int) -> list:
    store = Store(config["store"])
    nodes = _nodes_at(task, store, config, start)
    per_round = []
    for r in range(config["rounds"]):
        task.train(nodes, data, seed=training_seed(config["seed"], r, client))
        per_round.append({"round": r, "metrics": _numbers(task.evaluate(nodes))})
    return per_round


def alone(config: Mapping[str, Any], client: int, started: str, receipt: str) -> None:
    """Client `client` trained on its own shard alone, for exactly as long as the federation."""
    task = task_of(config)
    data = task.shard(client, config["clients"])
    start_weights = read_receipt(started)["weights"]
    write_receipt(
        receipt,
        {
            "run": config["run"],
            "client": client,
            "size": task.size(data),
            "per_round": _baseline(config, task, data, start_weights, client),
        },
    )


def centralized(config: Mapping[str, Any], started: str, receipt: str) -> None:
    """All the training data in one place, for as many rounds of local epochs."""
    task = task_of(config)
    everything = getattr(task, "everything", None)
    if everything is None:
        write_receipt(
            receipt,
            {"run": config["run"], "per_round": None, "why": "the task has no everything()"},
        )
        return
    data = everything()
    start_weights = read_receipt(started)["weights"]
    write_receipt(
        receipt,
        {
            "run": config["run"],
            "size": task.size(data),
            "per_round": _baseline(config, task, data, start_weights, 0),
        },
    )


def lower_is_better(metric: str) -> bool:
    """A loss or an error is better lower; anything else (accuracy, F1, ...) higher."""
    return metric.endswith(("loss", "error", "mse"))


def summary_rows(
    evaluations: Sequence[str],
    alones: Sequence[str],
    central: str | None,
    metric: str,
    strategy: str = "fedavg",
) -> list[dict[str, Any]]:
    """Per round: the strategy, the federated average's metric, the alone clients' mean,
    centralized. The strategy is a column so that the tables of runs with different
    strategies stack into one."""
    federated = {e["round"]: e["metrics"] for e in map(read_receipt, evaluations)}
    alone_runs = [read_receipt(p)["per_round"] for p in alones]
    central_run = read_receipt(central)["per_round"] if central else None
    rows = []
    for r in sorted(federated):
        row: dict[str, Any] = {
            "strategy": strategy,
            "round": r,
            "federated": federated[r].get(metric),
        }
        if alone_runs:
            values = [run[r]["metrics"].get(metric) for run in alone_runs]
            row["alone"] = sum(values) / len(values)
            row["alone_best"] = (min if lower_is_better(metric) else max)(values)
        if central_run:
            row["centralized"] = central_run[r]["metrics"].get(metric)
        rows.append(row)
    return rows


def summary(rows: Sequence[Mapping[str, Any]], metric: str, table: str, plot: str) -> None:
    """The per-round table (TSV) and the accuracy-per-round plot (PNG)."""
    columns = [
        c
        for c in ("strategy", "round", "federated", "alone", "alone_best", "centralized")
        if any(c in row for row in rows)
    ]
    lines = ["\t".join(columns)]
    for row in rows:
        lines.append(
            "\t".join(
                f"{row[c]:.4f}" if isinstance(row.get(c), float) else str(row.get(c, ""))
                for c in columns
            )
        )
    Path(table).parent.mkdir(parents=True, exist_ok=True)
    Path(table).write_text("\n".join(lines) + "\n", encoding="utf-8")

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(6, 4), dpi=100)
    rounds = [row["round"] + 1 for row in rows]
    strategy = rows[0]["strategy"] if rows else "fedavg"
    for column, style in (("federated", "o-"), ("centralized", "s--"), ("alone", "^:")):
        if column in columns:
            label = {"alone": "alone (mean of clients)", "federated": f"federated ({strategy})"}
            label = label.get(column, column)
            axes.plot(rounds, [row[column] for row in rows], style, label=label)
    axes.set_xlabel("round")
    axes.set_ylabel(f"test {metric}")
    axes.set_title(f"Federated ({strategy}) against its two baselines")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(plot, metadata={"Software": None})
    pyplot.close(figure)


def threads(count: int) -> None:
    """Torch threads for this job: one by default, since jobs share the cores."""
    torch.set_num_threads(max(1, int(count)))


class logged:
    """Send a job's stdout and stderr (tracebacks included) to its Snakemake log."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> None:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.log = open(self.path, "w", encoding="utf-8")  # noqa: SIM115
        self.saved = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = self.log

    def __exit__(self, kind, error, trace) -> None:
        if error is not None:
            import traceback

            traceback.print_exception(kind, error, trace, file=self.log)
        sys.stdout, sys.stderr = self.saved
        self.log.close()
