"""The workflow's baselines: each client trained `alone` on its own shard, and
`centralized` training on all the data, for as long as the federation, each measured on the
central test set (the summary's columns beside the federated run's)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from soma.config.spec import RunSpec
from soma.tasks import Task
from soma.training import trained_alone
from soma.workflow.common import LOG, json_numbers, nodes_at, shown, spec_of, task_of
from soma.workflow.receipts import read_receipt, write_receipt


def _baseline(
    config: Mapping[str, Any],
    task: Task,
    data,
    start: str,
    client: int,
    who: str,
    *,
    quiet: bool = False,
) -> list:
    """Train from the start on one body of data for as many rounds, evaluating each; each
    round in the log, since a baseline job runs as long as the whole federation (`quiet`:
    without the training's own metrics, a client's loss and steps)."""
    store = RunSpec.config_store(config)
    nodes = nodes_at(task, store, config, start)
    per_round = []
    tic = time.perf_counter()
    rounds, seed = config["rounds"], config["seed"]
    for r, trained in trained_alone(task, nodes, data, rounds=rounds, seed=seed, client=client):
        metrics = json_numbers(task.evaluate(nodes))
        per_round.append({"round": r, "metrics": metrics})
        LOG.info(
            "%s, round %d: trained (%s), evaluated %s (%.2f s)",
            who,
            r,
            "withheld"
            if quiet
            else shown(json_numbers(trained if isinstance(trained, Mapping) else {})),
            shown(metrics),
            time.perf_counter() - tic,
        )
        tic = time.perf_counter()
    return per_round


def _no_test_set(config: Mapping[str, Any], task: Task, receipt: str, **more: Any) -> bool:
    """A baseline is measured on the central test set: a task without `evaluate` has none,
    and the baseline's receipt says so (the summary leaves its column out)."""
    from soma.run.evaluation import has_central

    if has_central(task):
        return False
    why = "the task has no evaluate(): no central test set"
    LOG.warning("no baseline: %s", why)
    write_receipt(receipt, {"run": config["run"], **more, "per_round": None, "why": why})
    return True


def alone(config: Mapping[str, Any], client: int, started: str, receipt: str) -> None:
    """Client `client` trained on its own shard alone, for exactly as long as the federation.
    Under secure aggregation its size and its training's metrics (loss, steps) are neither
    in the receipt nor in the log: they are what the secure sum hides of it; its test
    metrics, which the summary's alone columns need, are."""
    task = task_of(spec_of(config))
    if _no_test_set(config, task, receipt, client=client):
        return
    data = task.shard(client, config["clients"])
    start_weights = read_receipt(started)["weights"]
    secure = config.get("secure_aggregation") is not None
    size = None if secure else task.size(data)
    shown_size = "(size withheld: secure aggregation)" if secure else f"{size}"
    LOG.info("client %d alone: %s examples, from weights %s", client, shown_size, start_weights)
    who = f"client {client} alone"
    per_round = _baseline(config, task, data, start_weights, client, who, quiet=secure)
    written = {"run": config["run"], "client": client, "per_round": per_round}
    write_receipt(receipt, written if secure else {**written, "size": size})


def centralized(config: Mapping[str, Any], started: str, receipt: str) -> None:
    """All the training data in one place, for as many rounds of local epochs."""
    task = task_of(spec_of(config))
    if _no_test_set(config, task, receipt):
        return
    everything = getattr(task, "everything", None)
    if everything is None:
        why = "the task has no everything()"
        LOG.warning("no centralized baseline: %s", why)
        write_receipt(receipt, {"run": config["run"], "per_round": None, "why": why})
        return
    data = everything(**told_clients(everything, config["clients"]))
    start_weights = read_receipt(started)["weights"]
    size = task.size(data)
    LOG.info("centralized: %s examples, from weights %s", size, start_weights)
    write_receipt(
        receipt,
        {
            "run": config["run"],
            "size": size,
            "per_round": _baseline(config, task, data, start_weights, 0, "centralized"),
        },
    )


def told_clients(everything: Any, clients: int) -> dict[str, int]:
    """`everything(clients=...)` for a task's everything() that takes the client count (the
    union of the clients' shards may depend on it), nothing for one that does not."""
    from soma.tasks.protocol import takes_keyword

    return {"clients": clients} if takes_keyword(everything, "clients") else {}
