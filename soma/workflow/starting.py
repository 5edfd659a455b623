"""The workflow's `start` job (and a study's shared start): a run's starting weights, checked
config and start receipt, made once per group of runs that start alike."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from soma import transfer
from soma.config import identity as runs
from soma.config.spec import RunSpec
from soma.nodes import export, load
from soma.round import layout
from soma.run import base, checked
from soma.run.personal import shared
from soma.tasks import Task
from soma.workflow.common import (
    LOG,
    _importable_here,
    checked_metrics,
    keep_evaluation,
    progress,
    shown,
    shown_value,
    spec_of,
)
from soma.workflow.receipts import write_receipt


def start(config: Mapping[str, Any], receipt: str, run_record: str | None = None) -> None:
    """One run's start: `start_group` of that run alone."""
    start_group([(config, receipt, run_record)])


def start_group(runs: Sequence[tuple[Mapping[str, Any], str, str | None]]) -> None:
    """The run's starting weights, from the seed, kept in the store, and their evaluation;
    and `run_record`, what the run is (`soma.config.identity.record`), where its receipts live.

    The first job of a run, so everything the Snakefile could not check without torch is
    checked here, before any client trains: the task imports and takes its options, the
    strategy (a built-in or an import path) takes its options and fits the task, the task can
    serve this many clients (`check(clients)`): the run layer's deep check (soma.run.checked);
    and the configured metric is one that `evaluate()` returns. Each refusal names the config key.
    The evaluation of the starting weights is the summary's `start` row and the plot's first point.
    `runs` that share a start (a study's points with the same task, options and seed:
    soma.config.study.start_groups) share one job: the weights are made and evaluated once.
    """
    tic = time.perf_counter()
    _importable_here()
    specs = [spec_of(config) for config, _, _ in runs]
    task = [checked.checked(spec) for spec in specs][0][0]  # every run checked before any write
    config = runs[0][0]
    store = RunSpec.config_store(config)  # an unwritable store refused before any evaluation
    nodes = task.nodes(config["seed"])
    exported = transfer.at(export(nodes), specs[0].transfer)  # kept at the run's precision
    if specs[0].transfer != transfer.FULL:
        load(nodes, exported)  # the start's row: the weights the clients start from
    metrics = start_metrics(config, task, nodes)  # evaluate() may move the nodes to a device
    weights = store.put_value(shared(exported, specs[0].personal))  # the same in the group
    kept = base.keep(specs[0], store, task).base  # the task's frozen base, once (soma.run.base)
    for (config, receipt, run_record), spec in zip(runs, specs, strict=True):
        _started(config, receipt, run_record, spec, store, weights, metrics, tic, kept)


def _started(
    config: Mapping[str, Any],
    receipt: str,
    run_record: str | None,
    spec: RunSpec,
    store: Any,
    weights: str,
    metrics: dict[str, Any],
    tic: float,
    kept: str | None = None,
) -> None:
    """A run's names bound to its starting weights, its record and its start receipt; a
    task's base (`kept`, its digest) named in both, whence every job of the run meets under
    it (soma.workflow.common.meeting_of)."""
    if spec.secure is not None:  # against whom it holds, when every job runs as this user
        from soma.config.secrets import one_user_warning

        LOG.warning(one_user_warning(spec.secrets, spec.run))
    store.claim(layout.starting(config["run"], weights), weights)  # never rebound by another
    store.bind(layout.start(config["run"]), weights)
    keep_evaluation(store, config["run"], weights, metrics)
    based = {} if kept is None else {"base": kept}  # only with one: other receipts unchanged
    if run_record is not None:  # the base beside the declared config (parse time cannot know it)
        write_receipt(run_record, {**runs.record(config), **based})
    write_receipt(
        receipt,
        {
            "run": config["run"],
            "seed": config["seed"],
            "weights": weights,
            "state": None,
            "metrics": metrics,
            **based,
        },
    )
    LOG.info(
        "start of run %r: weights %s from seed %d, kept as %s; evaluated %s (%.2f s)",
        config["run"],
        weights,
        config["seed"],
        layout.start(config["run"]),
        shown(metrics),
        time.perf_counter() - tic,
    )
    progress("start: %s %s", config["metric"], shown_value(metrics[config["metric"]]))


def start_metrics(config: Mapping[str, Any], task: Task, nodes: Any) -> dict[str, Any]:
    """The starting weights' central test metrics, checked to hold `metric`; a task with only
    `evaluate_local` has none, and client 0's own evaluation is what says it has `metric`."""
    from soma.run.evaluation import has_central, local_metrics

    if has_central(task):
        return checked_metrics(config, task.evaluate(nodes))
    checked_metrics(config, local_metrics(task, nodes, 0, config["clients"])[0])
    return {}
