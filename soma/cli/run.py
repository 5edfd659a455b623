"""`soma client` and `soma simulate`: one driver of a run (soma.run.drive), the JSON line each
round leaves on stdout and the log line on stderr."""

from __future__ import annotations

import argparse
import json
import logging
from typing import TYPE_CHECKING, Any

from soma.run import checked

if TYPE_CHECKING:
    from soma.run.step import Hosted


def client(args: argparse.Namespace) -> int:
    """Every round: train each hosted client that the round samples, from the round's start,
    contribute it, and leave with the average (whoever finds the round complete averages);
    the run layer's loop (soma.run.drive). The task and the strategy are made and checked
    (RunSpec.checked) before anything is written: a refused run leaves no store behind.

    `soma simulate` is this very command with every client hosted here (soma.run.simulate),
    and without --store a temporary store, removed at the end."""
    import torch

    from soma.cli import asynchronous
    from soma.config.spec import RunSpec
    from soma.run.drive import drive
    from soma.run.evaluation import has_central
    from soma.run.simulate import evaluated_by_default, store_at
    from soma.tasks import importable_here

    torch.set_num_threads(args.threads)
    importable_here()  # `--task mytask` finds mytask.py here, as the workflow does
    if args.buffer is not None:  # asynchronous rounds (soma.asynchronous)
        return asynchronous.client(args)
    if args.command == "simulate":  # a sample of at most 100 evaluates (soma.run.simulate)
        args.evaluate_participation = evaluated_by_default(
            args.evaluate_participation, args.clients, args.participation
        )
    spec = RunSpec.from_args(args)
    task, strategy = checked.checked(spec)
    if spec.charter is not None and args.store is not None:
        spec.check_charter_at(args.store)  # a pinned run on a store not yet made: none made
    with store_at(args.store, spec, task=task) as store:  # once the run was checked whole
        driven = drive(spec, store, task, strategy, after=_printer(args, task))
        evaluation = task.evaluate(driven.nodes) if has_central(task) else None
    line = {**_who(args, driven.hosted), "done": args.rounds, "evaluation": evaluation}
    print(json.dumps(line, sort_keys=True), flush=True)
    return 0


def _printer(args: argparse.Namespace, task: Any):
    """What a process says after each round: its JSON line, and the round's log line."""

    def after(done, driven) -> None:
        line = _round_line(args, driven.hosted, done)
        print(json.dumps(line), flush=True)
        _log_round(task, driven.nodes, args, done.round, done.record)

    return after


def _who(args: argparse.Namespace, hosted: list[Hosted]) -> dict[str, Any]:
    """A line's subject: `client` for a process of one client, `clients` for several."""
    if len(hosted) == 1:
        return {"client": hosted[0].index}
    return {"clients": [h.index for h in hosted]}


def _round_line(args, hosted, done) -> dict[str, Any]:
    """What a round left this process with, as one JSON line (sorted keys)."""
    metrics, weights = done.metrics, done.record["weights"]
    line = {**_who(args, hosted), "round": done.round, "average": done.average, "weights": weights}
    if len(hosted) == 1:
        line.update(size=hosted[0].size, train=metrics.get(hosted[0].index))
    else:
        line.update(
            sizes={str(h.index): h.size for h in hosted},
            train={str(k): m for k, m in metrics.items()},
        )
    return dict(sorted(line.items()))


LOG = logging.getLogger("soma.client")


def _log_round(task, nodes, args, round: int, record: dict[str, Any]) -> None:
    """One line a round on stderr, as the workflow's evaluation prints it: the new weights'
    test metrics, evaluated by one client (the lowest-numbered member of the round, so
    that exactly one does it; every client with --evaluate all), and who was left out."""
    members = record.get("expected") or list(range(args.clients))
    if args.evaluate == "none" or (args.evaluate == "one" and min(members) not in args.mine):
        return
    if not callable(getattr(task, "evaluate", None)):  # only evaluate_local: soma status shows it
        return
    metrics = task.evaluate(nodes)
    if getattr(args, "tracking", None):  # the central test metrics, where they are computed
        from soma.tracking import track_round

        track_round(args.tracking, round, central=metrics)
    shown = ", ".join(f"{k} {v:.4g}" for k, v in sorted(metrics.items()) if _is_number(v))
    left = record.get("left_out") or []
    also = f" ({len(left)} left out: {', '.join(str(x['client']) for x in left)})" if left else ""
    LOG.info("round %d/%d: %s%s", round, args.rounds - 1, shown, also)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
