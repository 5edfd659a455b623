"""Federated evaluation: each client judges a round's average on its own held-out data.

In a real federation there is no central test set. A task that answers
`evaluate_local(nodes, client, clients) -> (metrics, size)` (see soma.tasks) is asked, each
round, by the clients that evaluate it (`soma.config.participation.evaluating`: the round's
training sample, or `evaluate_participation`), for the metrics of the round's average on their
own held-out split. What is kept, in the store beside the round's meeting (names spelled in
soma.round.layout), is the same in every mode, byte for byte (no host, no time in a record;
a client's record, where its training metrics are, names its writer, but its metrics are
the same in every mode too):

    client/<k>      {..., "metrics"}                         what client k's training said,
                                                             in the record of its weights
    evaluated/<k>   {"client", "weights", "metrics", "size"} client k on its own data
    federated       {"run", "round", "weights", "evaluated", "size", "evaluation",
                     "trained", "training"}                  the round over clients

A client's training metrics are in the record it writes and signs for its weights
(soma.round.records), not in a record and a name of their own: one signature covers both, and
a contribution writes two files fewer (issue 50). Stores written before keep each client's in
`trained/<k>` (`{"client", "metrics", "size"}`); `training_of`, the one reader of them, reads
a client's record first and that name only for a record that has no metrics, so a round of
such a store settles to the very same `federated` record. The evaluation of the average
cannot be folded so: it is made after the average, by then the client's record is written.

`evaluation` and `training` are, per metric, the mean weighted by each client's size (its
evaluation size; for training, the size it trained on) and the spread over clients, unweighted:
`min`, `p10`, `median`, `p90`, `max` (linear interpolation between clients). Whoever writes the
last evaluation record of a round (a workflow `evaluate` job; under `soma client` the process
of the last client to evaluate) finds the round complete and keeps `federated`: no process
waits for another, and a rerun keeps the very same record.

Under secure aggregation nobody evaluates (`RunSpec.evaluating`): each client's metrics and
evaluation size would be in clear beside a sum that hides them.

With a roster (soma.round.signing) these records are signed: `client/<k>` (its metrics with
it) and `evaluated/<k>` by client k, `federated` by a roster member (whoever settles it: it
holds the key of a client that evaluated), each for its own name. Whoever settles checks
every record it aggregates first (a forged one is refused, naming it), and readers (`soma
status`, `soma export --best`, soma.exported) take only a signed `federated`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from soma.errors import SomaError, TaskError
from soma.round import layout
from soma.round import signing as signatures
from soma.round.signed import averager, check_signed
from soma.store import Store

SPREAD = ("min", "p10", "median", "p90", "max")


class EvaluationError(SomaError, ValueError):
    """A federated evaluation that cannot be read as asked (no such metric, no round with it)."""


def lower_is_better(metric: str) -> bool:
    """A loss or an error is better lower; anything else (accuracy, F1, ...) higher."""
    return metric.endswith(("loss", "error", "mse"))


def has_local(task: Any) -> bool:
    """Whether the task evaluates on a client's own held-out data (`evaluate_local`)."""
    return callable(getattr(task, "evaluate_local", None))


def has_central(task: Any) -> bool:
    """Whether the task has a central test set (`evaluate`): optional when it has the other."""
    return callable(getattr(task, "evaluate", None))


def numbers_of(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Metrics as JSON numbers (a NaN or an infinity as null), keys sorted."""

    def number(v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            return v
        return v if isinstance(v, int) else (float(v) if math.isfinite(v) else None)

    return {str(k): number(v) for k, v in sorted(metrics.items())}


def local_metrics(task: Any, nodes: Any, client: int, clients: int) -> tuple[dict[str, Any], int]:
    """Client `client`'s (metrics, size) of `nodes` on its own held-out split; refused, naming
    the client, when the task's answer is not a map of metrics and a count of examples."""
    answer = task.evaluate_local(nodes, client, clients)
    ok = isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[0], Mapping)
    size = answer[1] if ok else None
    if not ok or isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 0:
        raise TaskError(
            f"the task's evaluate_local(nodes, {client}, {clients}) returned {answer!r:.200}, "
            "not (metrics, size): a map of metrics and the count of examples they are of"
        )
    return numbers_of(answer[0]), int(size)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of sorted values, interpolated linearly between them."""
    at = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(at)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (at - low)


def spread(values: Sequence[float], sizes: Sequence[float]) -> dict[str, float | None]:
    """The mean of `values` weighted by `sizes` (None when they weigh nothing), and their
    spread over clients, unweighted: min, 10th percentile, median, 90th percentile, max."""
    ordered = sorted(values)
    total = float(sum(sizes))
    mean = sum(v * s for v, s in zip(values, sizes, strict=True)) / total if total > 0 else None
    return {
        "mean": mean,
        "min": ordered[0],
        "p10": percentile(ordered, 10),
        "median": percentile(ordered, 50),
        "p90": percentile(ordered, 90),
        "max": ordered[-1],
    }


def aggregate(records: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per metric, the spread (see `spread`) over the records that give it as a number."""
    by_metric: dict[str, tuple[list[float], list[float]]] = {}
    for record in records:
        for name, value in (record.get("metrics") or {}).items():
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                continue
            values, sizes = by_metric.setdefault(name, ([], []))
            values.append(float(value))
            sizes.append(float(record.get("size") or 0))
    return {
        name: {**spread(values, sizes), "clients": len(values)}
        for name, (values, sizes) in sorted(by_metric.items())
    }


# --- in the store ---------------------------------------------------------------------------


def training_metrics(metrics: Any) -> dict[str, Any]:
    """What a client's training said, as its record keeps it (soma.round.records): the numbers
    only (a string or a tensor the task returned is left out), as JSON numbers, keys sorted."""
    given = metrics if isinstance(metrics, Mapping) else {}
    return numbers_of(
        {k: v for k, v in given.items() if isinstance(v, numbers.Real) and not isinstance(v, bool)}
    )


def training_of(
    store: Store, meeting: Any, inputs: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """What the training of each client the average took in said (`inputs`: the average
    record's entries), as `{"client", "metrics", "size"}` in the entries' order: the one
    reader of the clients' training metrics (see the module). Each is read from the record
    the entry names (else the one bound under the client's name), refused unless it is
    client k's, signed by client k where the run has a roster (a forged one never reaches
    the round's `federated`); a record without metrics (a store written before) gives the
    client's own `trained/<k>`, checked the same way, and a client with neither is left out."""
    from soma.round.records import ClientRecord, read_client

    found = []
    for entry in inputs:
        k = entry["client"]
        name = meeting.client(k)
        digest = entry.get("record") or store.resolve(name)
        record = None
        if digest is not None:
            check_signed(store, meeting, digest, name=name, writer=k, what=f"client {k}'s record")
            record = read_client(store, digest, client=k, name=name)
        if isinstance(record, ClientRecord) and record.metrics is not None:
            found.append({"client": k, "metrics": dict(record.metrics), "size": record.size})
            continue
        earlier = layout.trained(meeting.prefix, k, meeting.clients)
        kept = _signed_record(store, meeting, earlier, k, "training")
        if kept is not None:
            found.append({"client": k, "metrics": kept.get("metrics"), "size": kept.get("size")})
    return found


def evaluate_round(
    store: Store,
    meeting: Any,
    task: Any,
    nodes: Any,
    weights: str,
    mine: Iterable[int],
    evaluators: Sequence[int],
    personal: Sequence[str] = (),
    seed: int = 0,
) -> dict[str, Any] | None:
    """Clients `mine` (those of `evaluators` this process hosts) evaluate the average
    `weights` on their own held-out data, each record kept; then the round's `federated`
    record if every evaluator's is there (see the module), else None. `nodes` is loaded with
    the weights afresh for each client, so one client's evaluation cannot touch another's.
    With `personal` nodes (soma.run.personal), each client evaluates the shared weights with
    its own personal nodes, so only the evaluators whose record the average took in (their
    own state is in it, the same in every mode) evaluate; the run's `seed` makes the nodes.
    A store that fails any of it is a `StoreFault` naming the clients, the round and the
    store (soma.run.step.store_work); the task's own errors are its own."""
    from soma.nodes import load
    from soma.run.personal import load_round
    from soma.run.step import store_work

    mine = sorted(set(mine))
    with store_work(store, meeting.what, mine, "reading the round's average to evaluate it"):
        average = store.recall_digest(weights)
        owns = _own_states(store, meeting) if personal else {}
    if personal:
        evaluators = [k for k in evaluators if k in owns]
    records = {}
    for k in sorted(set(mine) & set(evaluators)):  # the task's code: outside store_work
        if personal:
            load_round(nodes, average, owns[k], personal, lambda: task.nodes(seed))
        else:
            load(nodes, average)
        metrics, size = local_metrics(task, nodes, k, meeting.clients)
        records[k] = {"client": k, "weights": weights, "metrics": metrics, "size": size}
    keeping = "keeping the evaluation records"
    with store_work(store, meeting.what, records, keeping), store.group():  # one commit
        for k, record in records.items():
            name = layout.evaluated(meeting.prefix, k, meeting.clients)
            with store_work(store, meeting.what, [k], f"keeping its evaluation record {name}"):
                signatures.keep(store, meeting.signing, record, name=name, by=k)
    if not personal:
        load(nodes, average)
    with store_work(store, meeting.what, mine, "keeping the round's federated evaluation"):
        return settle(store, meeting, weights, evaluators)


def _own_states(store: Store, meeting: Any) -> dict[int, Any]:
    """The own state of each client the round's average took in (None: it keeps none)."""
    from soma.round.records import read_average, read_client

    averaged = store.resolve(layout.average(meeting.prefix))
    owns: dict[int, Any] = {}
    if averaged is None:
        return owns
    for entry in read_average(store, averaged).inputs:
        k, own = entry["client"], None
        if entry.get("record"):
            name = meeting.client(k)
            record = read_client(store, entry["record"], client=k, name=name)
            own = None if record.own is None else store.recall_digest(record.own)
        owns[k] = own
    return owns


def _recorded(store: Store, name: str) -> dict[str, Any] | None:
    digest = store.resolve(name)
    return None if digest is None else store.recall_digest(digest)


def _signed_record(
    store: Store, meeting: Any, name: str, k: int, what: str
) -> dict[str, Any] | None:
    """Client k's record at `name`, or None; with a roster refused (SigningError, naming it)
    unless client k signed it: a forged one never reaches the round's `federated`."""
    digest = store.resolve(name)
    if digest is None:
        return None
    check_signed(store, meeting, digest, name=name, writer=k, what=f"client {k}'s {what} record")
    return store.recall_digest(digest)


def settle(
    store: Store, meeting: Any, weights: str, evaluators: Sequence[int]
) -> dict[str, Any] | None:
    """The round's `federated` record, kept once every evaluator's record of `weights` is
    there (None until then). Training is aggregated over the clients the average took in."""
    from soma.round.records import read_average

    evaluated = []
    for k in sorted(evaluators):
        name = layout.evaluated(meeting.prefix, k, meeting.clients)
        record = _signed_record(store, meeting, name, k, "evaluation")
        if record is None or record.get("weights") != weights:
            return None
        evaluated.append(record)
    averaged = store.resolve(layout.average(meeting.prefix))
    came = [] if averaged is None else read_average(store, averaged).inputs
    trained = training_of(store, meeting, sorted(came, key=lambda entry: entry["client"]))
    value = {
        "run": meeting.run,
        "round": meeting.round,
        "weights": weights,
        "evaluated": [r["client"] for r in evaluated],
        "size": sum(r["size"] for r in evaluated),
        "evaluation": aggregate(evaluated),
        "trained": [r["client"] for r in trained],
        "training": aggregate(trained),
    }
    name = layout.federated(meeting.prefix)
    signatures.keep(store, meeting.signing, value, name=name, by=averager(meeting))
    return value


def federated_of(store: Store, run: str, round: int, meeting: str) -> dict[str, Any] | None:
    """The `federated` record of a round's meeting, or None (not evaluated, or not yet)."""
    return _recorded(store, layout.federated(layout.meeting(run, round, meeting)))


def best_round(by_round: Mapping[int, Mapping[str, Any]], metric: str) -> tuple[int, float]:
    """The round whose federated validation mean of `metric` is best (the first of equals),
    and that mean: lower for a loss or an error, higher for anything else. `by_round` holds
    each round's `evaluation` (see `aggregate`). Refused, naming the metric, when no round
    has it."""
    scored = {
        r: m[metric]["mean"]
        for r, m in by_round.items()
        if isinstance((m or {}).get(metric), Mapping) and m[metric].get("mean") is not None
    }
    if not scored:
        found = sorted({name for m in by_round.values() for name in (m or {})})
        raise EvaluationError(
            f"metric {metric!r}: no round has a federated validation mean of it "
            f"(the rounds have {', '.join(found) or 'no federated evaluation'})"
        )
    sign = 1.0 if lower_is_better(metric) else -1.0
    best = min(sorted(scored), key=lambda r: sign * scored[r])
    return best, scored[best]
