"""The round loop of a process that hosts clients: `soma client` (its clients, `--mine`) and
`soma simulate` (every client of the run, in one interpreter). Both run this one loop, the
one client step (soma.run.step) and the one meeting (RunSpec.meeting), so a run simulated
trains the very bits of the same run under `soma client` (and under the workflow).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from soma.config.spec import RunSpec
from soma.round import layout
from soma.run import base, collector, step
from soma.run.step import Hosted
from soma.store import Store
from soma.timing import Timing


@dataclass
class Round:
    """What one round left this process with: the average's record and digest, and each
    hosted client's training metrics (None: it dropped out)."""

    round: int
    average: str
    record: dict[str, Any]
    metrics: dict[int, Any] = field(default_factory=dict)
    # the round's metrics over clients (soma.run.evaluation), when this process settled them
    federated: dict[str, Any] | None = None


@dataclass
class Driven:
    """A driven run: the task's nodes at the last average, the hosted clients, each round."""

    nodes: Any
    hosted: list[Hosted]
    rounds: list[Round]

    @property
    def weights(self) -> str:
        """The digest of the last round's average weights."""
        return self.rounds[-1].record["weights"]


def drive(
    spec: RunSpec,
    store: Store,
    task: Any,
    strategy: Any,
    *,
    after: Callable[[Round, Driven], None] | None = None,
) -> Driven:
    """Every round of `spec` for its clients `spec.mine`: train each one the round samples
    (soma.run.step), then leave with the round's average (whoever finds the round complete
    averages it), every wait as `spec.timing` says. `after(round, driven)` is called once a
    round is averaged, its weights loaded into `driven.nodes`. `task` and `strategy` are
    `soma.run.checked.checked(spec)`'s. A process that shares the run with others logs, each
    round, whether it computed the average or took another's, and whose."""
    from soma import transfer
    from soma.nodes import export
    from soma.run.personal import shared

    spec.check_charter(store)  # another roster than the run's: refused before any write
    spec = base.keep(spec, store, task)  # a task's frozen base: in the store once, in the identity
    nodes = task.nodes(spec.seed)
    hosted = []
    for k in spec.mine or ():
        data = task.shard(k, spec.clients)
        hosted.append(Hosted(k, data, task.size(data)))
    driven = Driven(nodes, hosted, [])
    with step.store_work(store, f"run {spec.run!r}", spec.mine or (), "keeping the run's start"):
        start = store.put_value(transfer.at(shared(export(nodes), spec.personal), spec.transfer))
        store.claim(layout.starting(spec.run, start), start)  # reachable while round 0 trains
    with collector.frozen():  # what is made above is never freed by the rounds (soma.run.collector)
        _rounds(spec, store, task, strategy, driven, start, after)
    _warn_never_trained(driven)
    return driven


def _rounds(
    spec: RunSpec,
    store: Store,
    task: Any,
    strategy: Any,
    driven: Driven,
    start: str,
    after: Callable[[Round, Driven], None] | None,
) -> None:
    """`drive`'s rounds, from the run's start."""
    from soma.nodes import load
    from soma.round import announce, average_round, holders
    from soma.round.once import read_record

    timing, nodes, hosted = spec.timing, driven.nodes, driven.hosted
    state = None
    for r in range(spec.rounds):
        meeting = spec.meeting(r, start, state)
        records = "reading or writing the round's records"
        with step.store_work(store, meeting.what, spec.mine or (), records):
            announce(store, meeting)  # the round is open from now: `gc --keep-runs` sees it
            taking_part = [h for h in hosted if h.index in meeting.members]
            metrics: dict[int, Any] = {}
            if meeting.secure is not None:
                digest = _secure_round(
                    store, meeting, task, strategy, nodes, taking_part, metrics, timing, spec.rounds
                )
            else:
                starting = step.read_once(store, start)  # one read of the start a round
                with store.group():  # one commit for every client hosted here (soma.files)
                    for h in taking_part:
                        metrics[h.index] = step.plain(
                            store, meeting, task, strategy, nodes, h, rounds=spec.rounds,
                            start=starting,
                        ).metrics  # fmt: skip
                digest = average_round(store, meeting, deadline=timing.deadline, lease=timing.lease)
            record = read_record(store, digest)
            if len(hosted) < spec.clients:  # other processes host the rest: say who averaged
                step.LOG.info("%s: %s", meeting.what, holders.averaged(record.get("averaged_by")))
            load(nodes, store.recall_digest(record["weights"]), partial=bool(spec.personal))
        start, state = record["weights"], record["state"]
        federated = evaluate_hosted(spec, store, task, nodes, meeting, record, hosted)
        driven.rounds.append(Round(r, digest, record, metrics, federated))
        if after is not None:
            after(driven.rounds[-1], driven)


def _warn_never_trained(driven: Driven) -> None:
    """A hosted client left out of every round it was sampled for ends the run with a
    warning naming it and its last reason (soma.run.attendance), not in silence."""
    from soma.run.attendance import never_trained, warning

    records = [done.record for done in driven.rounds]
    for client, why in never_trained(records, [h.index for h in driven.hosted]).items():
        step.LOG.warning(warning(client, why))


def evaluate_hosted(
    spec: RunSpec,
    store: Store,
    task: Any,
    nodes: Any,
    meeting: Any,
    record: dict[str, Any],
    hosted: list[Hosted],
) -> dict[str, Any] | None:
    """This process's clients that evaluate the round evaluate its average on their own data
    (soma.run.evaluation); the round's `federated` record when this process completed it (then
    also tracked, with the privacy spent, when `spec.tracking` says where)."""
    from soma.run.evaluation import evaluate_round, has_local

    if not has_local(task):
        return None
    evaluators = spec.evaluating(meeting.round)
    if not evaluators:  # nobody evaluates (secure aggregation: RunSpec.evaluating)
        return None
    mine = [h.index for h in hosted]
    federated = evaluate_round(
        store, meeting, task, nodes, record["weights"], mine, evaluators, spec.personal, spec.seed
    )
    if federated is not None and spec.tracking is not None and set(mine) & set(evaluators):
        from soma.round import privacy_spent
        from soma.tracking import track_round

        privacy = privacy_spent(store, record, trusted=(spec.strategy,))  # the local config's
        track_round(spec.tracking, meeting.round, federated=federated, privacy=privacy)
    return federated


def _secure_round(
    store: Store,
    meeting: Any,
    task: Any,
    strategy: Any,
    nodes: Any,
    taking_part: list[Hosted],
    metrics: dict[int, Any],
    timing: Timing,
    rounds: int,
) -> str:
    """The round under secure aggregation (soma.secagg.round): this process's clients go
    through its phases together, each trained by the one client step; the average's digest."""
    from soma.secagg import round as secure_round

    by_index = {h.index: h for h in taking_part}

    def train(k: int):
        done = step.secure(store, meeting, task, strategy, nodes, by_index[k], rounds=rounds)
        metrics[k] = done.metrics
        return done.dropped if done.dropped is not None else done.trained

    secure_round.take_part(store, meeting, sorted(by_index), train, deadline=timing.deadline)
    return secure_round.average_round(
        store,
        meeting,
        strategy,
        took_part=bool(taking_part),
        deadline=timing.deadline,
        lease=timing.lease,
    )
