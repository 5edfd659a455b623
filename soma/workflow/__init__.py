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
import logging
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from soma.files import write_atomic
from soma.model import export_best
from soma.nodes import export, load
from soma.round import (
    Input,
    Meeting,
    average_inputs,
    average_round,
    dropout_reason,
    evaluation_name,
    holders,
    layout,
    privacy_spent,
    read_record,
)
from soma.round.lease import LEASE
from soma.round.records import AverageRecord, read_average
from soma.run import identity as runs
from soma.run import step
from soma.run.alone import trained_alone
from soma.run.configs import ConfigRefused
from soma.run.personal import shared
from soma.run.spec import RunSpec
from soma.run.step import Hosted
from soma.store import Store
from soma.strategies import (
    Strategy,
    load_strategy,
)
from soma.tasks import Task, importable_here, load_task

LOG = logging.getLogger("soma.workflow")


def progress(message: str, *args: Any) -> None:
    """A line for the job's log that also shows in snakemake's own output while the run goes
    (see `logged`): what a user watches, one line per round."""
    LOG.info(message, *args, extra={"progress": True})


def write_receipt(
    path: str | os.PathLike, receipt: Mapping[str, Any], *, mode: int | None = None
) -> None:
    """Deterministic JSON, atomically (`soma.files.write_atomic`): a receipt is a file as the
    umask says; a secret passes `mode=0o600`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(receipt, sort_keys=True, indent=2, allow_nan=False) + "\n"
    write_atomic(path, text.encode("utf-8"), mode=mode)


def read_receipt(path: str | os.PathLike) -> dict[str, Any]:
    with open(path, encoding="utf-8") as receipt:
        return json.load(receipt)


def spec_of(config: Mapping[str, Any]) -> RunSpec:
    """The run the config describes (soma.run.spec), as every job reads it."""
    return RunSpec.from_config(config)


def _importable_here() -> None:
    """A task module in the working directory is importable too (soma.tasks)."""
    importable_here()


def task_of(config: Mapping[str, Any]) -> Task:
    """The configured task, with its options (read as `soma.run.options` reads text)."""
    _importable_here()
    spec = spec_of(config)
    return load_task(spec.task, dict(spec.task_options))


def strategy_of(config: Mapping[str, Any]) -> Strategy:
    spec = spec_of(config)
    return load_strategy(spec.strategy, dict(spec.strategy_options))


def meeting_of(config: Mapping[str, Any], round: int, started: Mapping[str, Any]) -> Meeting:
    """Where round `round`'s clients meet: keyed by the receipt it started from and the run."""
    return spec_of(config).meeting(round, started["weights"], started.get("state"))


def json_numbers(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Metrics as JSON numbers; a NaN or infinite one (a diverging loss) as null, since a
    receipt is strict JSON."""

    def number(v: Any) -> Any:
        if isinstance(v, float):
            return float(v) if math.isfinite(v) else None
        return v

    return {k: number(v) for k, v in sorted(metrics.items())}


def start(config: Mapping[str, Any], receipt: str, run_record: str | None = None) -> None:
    """One run's start: `start_group` of that run alone."""
    start_group([(config, receipt, run_record)])


def start_group(runs: Sequence[tuple[Mapping[str, Any], str, str | None]]) -> None:
    """The run's starting weights, from the seed, kept in the store, and their evaluation;
    and `run_record`, what the run is (`soma.run.identity.record`), where its receipts live.

    The first job of a run, so everything the Snakefile could not check without torch is
    checked here, before any client trains: the task imports and takes its options, the
    strategy (a built-in or an import path) takes its options and fits the task, the task can
    serve this many clients (`check(clients)`): the run layer's `RunSpec.checked()`; and the
    configured metric is one that `evaluate()` returns. Each refusal names the config key.
    The evaluation of the starting weights is the summary's `start` row and the plot's first point.
    `runs` that share a start (a study's points with the same task, options and seed:
    soma.run.study.start_groups) share one job: the weights are made and evaluated once.
    """
    tic = time.perf_counter()
    _importable_here()
    specs = [spec_of(config) for config, _, _ in runs]
    task = [spec.checked() for spec in specs][0][0]  # every run checked before any write
    config = runs[0][0]
    nodes = task.nodes(config["seed"])
    exported = export(nodes)  # before evaluate(), which may move the nodes to a device
    metrics = start_metrics(config, task, nodes)
    store = RunSpec.config_store(config)
    weights = store.put_value(shared(exported, specs[0].personal))  # the same in the group
    for (config, receipt, run_record), spec in zip(runs, specs, strict=True):
        _started(config, receipt, run_record, spec, store, weights, metrics, tic)


def _started(
    config: Mapping[str, Any],
    receipt: str,
    run_record: str | None,
    spec: RunSpec,
    store: Any,
    weights: str,
    metrics: dict[str, Any],
    tic: float,
) -> None:
    """A run's names bound to its starting weights, its record and its start receipt."""
    if spec.secure is not None:  # against whom it holds, when every job runs as this user
        from soma.run.secrets import one_user_warning

        LOG.warning(one_user_warning(spec.secrets, spec.run))
    store.claim(layout.starting(config["run"], weights), weights)  # never rebound by another
    store.bind(layout.start(config["run"]), weights)
    keep_evaluation(store, config["run"], weights, metrics)
    if run_record is not None:
        write_receipt(run_record, runs.record(config))
    write_receipt(
        receipt,
        {
            "run": config["run"],
            "seed": config["seed"],
            "weights": weights,
            "state": None,
            "metrics": metrics,
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
    from soma.evaluation import has_central, local_metrics

    if has_central(task):
        return checked_metrics(config, task.evaluate(nodes))
    checked_metrics(config, local_metrics(task, nodes, 0, config["clients"])[0])
    return {}


def checked_metrics(config: Mapping[str, Any], metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The metrics as JSON numbers, refused unless they hold the configured `metric`."""
    metric = config["metric"]
    if not isinstance(metrics, Mapping) or metric not in metrics:
        returned = ", ".join(sorted(map(str, metrics))) if isinstance(metrics, Mapping) else None
        raise ConfigRefused(
            f"config key `metric`: the task's evaluate() returns "
            f"{returned or 'no metrics'}; not {metric!r}"
        )
    return json_numbers(metrics)


def keep_evaluation(store: Store, run: str, weights: str, metrics: Mapping[str, Any]) -> str:
    """The metrics of `weights` in the store, named by the weights (for `soma status`).

    The name is a function of the weights, and evaluation is deterministic, so a rerun or
    another job evaluating the same weights binds the name to the very same record.
    """
    return store.keep(evaluation_name(run, weights), {"metrics": dict(metrics), "weights": weights})


def shown_value(value: Any) -> str:
    """A metric for a human: three decimals, or as it is (None: a NaN in the receipt)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "nan" if value is None else str(value)
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def shown(metrics: Mapping[str, Any]) -> str:
    """`accuracy 0.936, loss 0.210`: metrics for a log line."""
    return ", ".join(f"{k} {shown_value(v)}" for k, v in sorted(metrics.items())) or "nothing"


def nodes_at(task: Task, store: Store, config: Mapping[str, Any], weights: str) -> dict:
    nodes = task.nodes(config["seed"])
    # a personalized run's weights hold its shared nodes alone (soma.run.personal)
    load(nodes, store.recall_digest(weights), partial=bool(config.get("personal")))
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
    A client that cannot take part (its training raised, its export was refused: NaN,
    infinities) records why in the store (soma.run.step, as in every mode). When the round may
    go on without some of its clients (a quorum below its sample), it drops out instead of
    failing the run, as it does when its previous attempt at this job died (a retry after the
    process was killed or its Slurm job was cancelled): its receipt says why, and the round's
    average names it as left out. Otherwise the job fails, naming the client and the reason.
    """
    task = task_of(config)
    store = RunSpec.config_store(config)
    started = read_receipt(previous)
    meeting = meeting_of(config, round, started)
    written = _train_client(task, store, config, meeting, client, started, before)
    write_receipt(receipt, _keeping_own(written, before))


def train_batch(
    config: Mapping[str, Any],
    round: int,
    batch: int,
    clients: Sequence[int],
    previous: str,
    receipt: str,
    before: Mapping[int, str | None],
) -> None:
    """Clients `clients` of round `round` in one job (config `clients_per_job`), each as its
    own train job would: from the round's start, with its own seed and state. One receipt
    holds each client's receipt, the very one `train` writes for it, under "clients"."""
    task = task_of(config)
    store = RunSpec.config_store(config)
    started = read_receipt(previous)
    meeting = meeting_of(config, round, started)
    for k in clients:
        meeting.check_client(k)
    each = []
    for k in clients:
        written = _train_client(task, store, config, meeting, k, started, before.get(k))
        each.append(_keeping_own(written, before.get(k)))
    write_receipt(receipt, {"run": meeting.run, "round": round, "batch": batch, "clients": each})


def clients_in(receipt: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The client receipts in a receipt: itself, or a batch's (config `clients_per_job`)."""
    return list(receipt["clients"]) if "clients" in receipt else [dict(receipt)]


def _keeping_own(written: dict[str, Any], before: str | None) -> dict[str, Any]:
    """A client that dropped out keeps the own state it had (its personal nodes, SCAFFOLD's
    c_i) for the next round it trains, as a `soma client` process keeps it."""
    if "dropped" not in written or before is None:
        return written
    own = _own_state(before, written["client"])
    return written if own is None else {**written, "own": own}


def _own_state(before: str | None, client: int) -> str | None:
    """The client's own strategy state named by its receipt of the last round it trained."""
    if before is None:
        return None
    for given in clients_in(read_receipt(before)):
        if given["client"] == client:
            return given.get("own")
    raise ConfigRefused(f"receipt {before} has no client {client}: was it written by another run?")


def _train_client(
    task: Task,
    store: Store,
    config: Mapping[str, Any],
    meeting: Meeting,
    client: int,
    started: Mapping[str, Any],
    before: str | None,
) -> dict[str, Any]:
    """One client's training in a round, or its drop-out: the receipt either way."""
    tic = time.perf_counter()
    died = _previous_attempt_died(store, meeting, client)
    if died and step.goes_on_without_some(meeting):
        return _drop_out(store, meeting, client, f"died: {died}")
    try:
        own = _own_state(before, client)
        data = task.shard(client, config["clients"])
        own = None if own is None else store.recall_digest(own)
        hosted = Hosted(client, data, task.size(data), own=own)
    except Exception as error:
        damage = step.store_damage(error, meeting, client)
        if damage is not None:
            store.forget(_started_name(meeting, client))  # its rerun is not a retry
            raise damage from error
        step.log_traceback(meeting, client)
        return _drop_out(store, meeting, client, dropout_reason(error))
    nodes = task.nodes(config["seed"])
    try:
        done = step.plain(
            store, meeting, task, strategy_of(config), nodes, hosted, rounds=config["rounds"]
        )
    except step.StoreDamaged:  # after `soma repair`, a rerun of this job is not a retry
        store.forget(_started_name(meeting, client))
        raise
    if done.dropped is not None:
        return _dropped(meeting, client, done.dropped)
    made = done.contribution
    written = {
        "run": meeting.run,
        "round": meeting.round,
        "client": client,
        "meeting": meeting.key,
        "started_from": started["weights"],
        "weights": made.weights,
        "size": hosted.size,
        "extra": made.extra,
        "own": made.own,
        "metrics": json_numbers(done.metrics),
    }
    _log_training(meeting, written, time.perf_counter() - tic)
    return written


def _log_training(meeting: Meeting, written: Mapping[str, Any], seconds: float) -> None:
    """What a train job did, for its log: who, on how much, how it went, where it went."""
    LOG.info(
        "%s, client %d: trained on %s examples from weights %s: %s (%.2f s)",
        meeting.what,
        written["client"],
        written["size"],
        written["started_from"],
        shown(written["metrics"]),
        seconds,
    )
    LOG.info(
        "sent weights %s to the store as %s%s",
        written["weights"],
        meeting.client(written["client"]),
        "" if written.get("extra") is None else f" (with extra {written['extra']})",
    )


def _started_name(meeting: Meeting, client: int) -> str:
    """Beside the client's record, and fanned out the same way (see Meeting.client)."""
    return meeting.started(client)


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


def _drop_out(store: Store, meeting: Meeting, client: int, why: str) -> dict[str, Any]:
    """The client leaves the round (soma.run.step.leave: recorded, and an error when the
    round cannot go on without it); its receipt."""
    return _dropped(meeting, client, step.leave(store, meeting, client, why).dropped)


def _dropped(meeting: Meeting, client: int, why: str) -> dict[str, Any]:
    return {
        "run": meeting.run,
        "round": meeting.round,
        "client": client,
        "meeting": meeting.key,
        "dropped": why,
    }


def average(
    config: Mapping[str, Any], round: int, clients: Sequence[str], previous: str, receipt: str
) -> None:
    """Average exactly the weights the client receipts name; once, whoever else tries."""
    tic = time.perf_counter()
    store = RunSpec.config_store(config)
    meeting = meeting_of(config, round, read_receipt(previous))
    inputs = []
    for path in clients:
        for given in clients_in(read_receipt(path)):
            if "dropped" not in given:
                inputs.append(
                    Input(given["client"], given["weights"], given["size"], given.get("extra"))
                )
    digest = averaged(store, meeting, config, inputs)
    record = read_average(store, digest)
    inputs_said = [
        {"client": i["client"], "weights": i["weights"], "size": i["size"]} for i in record.inputs
    ]
    write_receipt(receipt, average_receipt(meeting, record, inputs=inputs_said))
    _log_average(meeting, record, digest, time.perf_counter() - tic)


def averaged(
    store: Store, meeting: Meeting, config: Mapping[str, Any], inputs: Sequence[Input]
) -> str:
    """The round's average record: of exactly the inputs this snakemake's receipts name; or,
    at a site (config `site`), whose receipts name only its own clients, of the whole round
    as the store has it, waited for with nobody in charge (soma.round.average_round: the
    quorum, `average_deadline`): whichever site finds it complete averages it, once."""
    deadline, lease = config.get("average_deadline"), config.get("lease", LEASE)
    if spec_of(config).site is None:
        return average_inputs(store, meeting, inputs, deadline=deadline, lease=lease)
    return average_round(store, meeting, deadline=deadline, lease=lease)


def average_receipt(
    meeting: Meeting, record: AverageRecord, *, inputs: list[Any], **more: Any
) -> dict[str, Any]:
    """An average job's receipt, plain or secure (soma.secagg.jobs): one schema, built here."""
    return {
        "run": meeting.run,
        "round": meeting.round,
        "strategy": meeting.strategy,
        "weights": record.weights,
        "state": record.state,
        "inputs": inputs,
        "left_out": record.left_out,
        **more,
    }


def _log_average(meeting: Meeting, record: AverageRecord, digest: str, seconds: float) -> None:
    """What an average job did, for its log: who came (as the record says: at a site, the
    other sites' clients too), who was left out, what came of it."""
    clients = ", ".join(str(i["client"]) for i in record.inputs) or "nobody"
    sizes = ", ".join(str(i["size"]) for i in record.inputs)
    LOG.info("%s: %s of clients %s (sizes %s)", meeting.what, meeting.strategy, clients, sizes)
    for left in record.left_out:
        LOG.warning("%s: client %s left out: %s", meeting.what, left["client"], left["why"])
    LOG.info(
        "averaged weights %s (record %s, under %s) (%.2f s)",
        record.weights,
        digest,
        meeting.prefix,
        seconds,
    )


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
    from soma.evaluation import has_central

    tic = time.perf_counter()
    task = task_of(config)
    store = RunSpec.config_store(config)
    average = read_receipt(averaged)
    weights = average["weights"]
    nodes = nodes_at(task, store, config, weights)
    metrics = checked_metrics(config, task.evaluate(nodes)) if has_central(task) else {}
    kept = keep_evaluation(store, config["run"], weights, metrics)
    evaluation = {"run": config["run"], "round": round, "weights": weights, "metrics": metrics}
    privacy = privacy_spent(store, average, strategy_of(config))  # None: keeps no account
    if privacy is not None:
        evaluation["privacy"] = privacy
    if previous is not None:
        evaluation.update(evaluate_federated(config, task, store, nodes, round, weights, previous))
    write_receipt(receipt, evaluation)
    spec = spec_of(config)
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
    task: Task,
    store: Store,
    nodes: Any,
    round: int,
    weights: str,
    previous: str,
) -> dict[str, Any]:
    """The round's federated evaluation (soma.evaluation): every client that evaluates the
    round, on its own held-out data, each record kept in the store, then the round's; as
    the receipt's `federated` (nothing for a task without `evaluate_local`)."""
    from soma.evaluation import evaluate_round, has_central, has_local

    if not has_local(task):
        return {}
    spec = spec_of(config)
    meeting = meeting_of(config, round, read_receipt(previous))
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
    from soma.evaluation import has_central

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
    task = task_of(config)
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
    task = task_of(config)
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
    from soma.tasks import takes_keyword

    return {"clients": clients} if takes_keyword(everything, "clients") else {}


def best(config: Mapping[str, Any], evaluations: Sequence[str], output: str) -> None:
    """The run's best round as a model file (rule `best`): the round whose federated
    validation `metric` is best (soma.model.export_best), among the weights its evaluation
    receipts name; never chosen by the central test metric."""
    weights = {}
    for path in evaluations:
        given = read_receipt(path)
        weights[given["round"]] = given["weights"]
    store = RunSpec.config_store(config)
    made = export_best(store, config["run"], output, config["metric"], weights=weights)
    LOG.info(
        "best round %d (federated validation %s %s): weights %s written to %s",
        made["round"],
        config["metric"],
        shown_value(made["best"]["validation"]),
        made["weights"],
        output,
    )


def threads(count: int) -> None:
    """Torch threads for this job: one by default, since jobs share the cores."""
    torch.set_num_threads(max(1, int(count)))


class _Progress(logging.Filter):
    """Only the `progress` lines (see `progress`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return bool(getattr(record, "progress", False))


class logged:
    """A job's log: soma's logging to the job's Snakemake log file, tracebacks included.

    Every line goes to the log file; `progress` lines also go to the job's stderr, which
    Snakemake shows in its own output on the local executor (and Slurm in the job's output),
    so that a run says how it goes while it goes. What a task prints by itself (its own
    progress, a library's warnings) goes to the log file too: stdout and stderr are the
    file's while the job runs. A job that fails logs its traceback, then fails as before.
    """

    FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> logged:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.log = open(self.path, "w", encoding="utf-8", buffering=1)  # noqa: SIM115
        self.saved = sys.stdout, sys.stderr
        to_file = logging.StreamHandler(self.log)
        to_file.setFormatter(logging.Formatter(self.FORMAT))
        to_terminal = logging.StreamHandler(sys.stderr)
        to_terminal.addFilter(_Progress())
        self.handlers = [to_file, to_terminal]
        root = logging.getLogger("soma")
        self.level = root.level
        root.setLevel(logging.INFO)
        for handler in self.handlers:
            root.addHandler(handler)
        sys.stdout = sys.stderr = self.log
        self.tic = time.perf_counter()
        return self

    def __exit__(self, kind, error, trace) -> None:
        seconds = time.perf_counter() - self.tic
        if error is not None:
            LOG.error("failed after %.2f s: %s", seconds, error, exc_info=(kind, error, trace))
        else:
            LOG.info("done in %.2f s", seconds)
        sys.stdout, sys.stderr = self.saved
        root = logging.getLogger("soma")
        for handler in self.handlers:
            handler.flush()
            root.removeHandler(handler)
        root.setLevel(self.level)
        self.log.close()
