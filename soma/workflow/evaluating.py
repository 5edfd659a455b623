"""The workflow's `evaluate` job: a round's average on the central test set, and its
federated evaluation (each client on its own held-out data), kept in the store and in the
round's evaluation receipt; the one progress line a user watches."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from soma.config.configs import ConfigRefused
from soma.config.spec import RunSpec
from soma.round import evaluation_name, privacy_spent
from soma.store import Store
from soma.tasks import Task
from soma.workflow.common import (
    LOG,
    checked_metrics,
    keep_evaluation,
    meeting_of,
    nodes_at,
    progress,
    shown,
    shown_value,
    spec_of,
    strategy_of,
    task_of,
)
from soma.workflow.receipts import read_receipt, write_receipt


def evaluate(
    config: Mapping[str, Any],
    round: int,
    averaged: str,
    receipt: str,
    previous: str | None = None,
) -> None:
    """The round's average on the held-out test set; its metrics kept in the store too. And,
    for a task with `evaluate_local`, its federated evaluation (`evaluate_federated`; needs
    `previous`, the receipt the round started from); either may be all there is.

    The one line a user watches, `round 3/9: accuracy 0.936` (0-based, the last round
    being rounds - 1, as in the table, the plot and results/<run>/round/<r>/), goes to the
    terminal as well as to the log.
    """
    from soma.run.evaluation import has_central

    tic = time.perf_counter()
    spec = spec_of(config)
    task = task_of(spec)
    store = RunSpec.config_store(config)
    average = read_receipt(averaged)
    weights = average["weights"]
    nodes = nodes_at(task, store, config, weights)
    metrics = checked_metrics(config, task.evaluate(nodes)) if has_central(task) else {}
    kept = keep_evaluation(store, config["run"], weights, metrics)
    evaluation = {"run": config["run"], "round": round, "weights": weights, "metrics": metrics}
    privacy = privacy_spent(store, average, strategy_of(spec))  # None: keeps no account
    if privacy is not None:
        evaluation["privacy"] = _strict_json(privacy)
    if previous is not None:
        federated = evaluate_federated(config, spec, task, store, nodes, round, weights, previous)
        evaluation.update(federated)
    write_receipt(receipt, evaluation)
    if spec.tracking is not None:
        from soma.tracking import track_round

        track_round(
            spec.tracking,
            round,
            central=metrics,
            federated=evaluation.get("federated"),
            privacy=privacy,
        )  # fmt: skip
    LOG.info(
        "round %d: weights %s evaluated: %s; kept as %s (record %s) (%.2f s)",
        round,
        weights,
        shown(metrics),
        evaluation_name(config["run"], weights),
        kept,
        time.perf_counter() - tic,
    )
    metric = config["metric"]
    federated = (evaluation.get("federated") or {}).get("evaluation") or {}
    value = metrics[metric] if metric in metrics else (federated.get(metric) or {}).get("mean")
    progress("round %d/%d: %s %s", round, config["rounds"] - 1, metric, shown_value(value))


def evaluate_federated(
    config: Mapping[str, Any],
    spec: RunSpec,
    task: Task,
    store: Store,
    nodes: Any,
    round: int,
    weights: str,
    previous: str,
) -> dict[str, Any]:
    """The round's federated evaluation (soma.run.evaluation): every client that evaluates the
    round, on its own held-out data, each record kept in the store, then the round's; as
    the receipt's `federated` (nothing for a task without `evaluate_local`)."""
    from soma.run.evaluation import evaluate_round, has_central, has_local

    if not has_local(task):
        return {}
    meeting = meeting_of(spec, round, read_receipt(previous))
    evaluators = spec.evaluating(round)
    if not evaluators:  # nobody evaluates (secure aggregation: RunSpec.evaluating)
        return {}
    mine = evaluators if spec.hosted is None else spec.hosted
    federated = evaluate_round(
        store, meeting, task, nodes, weights, mine, evaluators, spec.personal, spec.seed
    )
    if spec.site is not None:  # the round's record is the store's, once every site evaluated
        LOG.info("round %d: site %s's clients evaluated weights %s", round, spec.site, weights)
        return {}
    evaluated = federated["evaluation"]
    if evaluated and config["metric"] not in evaluated and not has_central(task):
        raise ConfigRefused(
            f"config key `metric`: the task's evaluate_local() returns "
            f"{', '.join(sorted(evaluated))}; not {config['metric']!r}"
        )
    LOG.info(
        "round %d: clients %s evaluated weights %s on their own data: %s",
        round,
        federated["evaluated"],
        weights,
        shown({k: v["mean"] for k, v in evaluated.items()}),
    )
    return {"federated": federated}


def _strict_json(value: Any) -> Any:
    """`value` with each non-finite float as its text ("inf": central DP's epsilon against a
    store reader), which a receipt's strict JSON cannot hold as a number."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {k: _strict_json(v) for k, v in value.items()}
    return value
