"""`soma client --buffer K` and `soma simulate --buffer K`: an asynchronous run (soma.asynchronous),
its options and the JSON lines it leaves on stdout: one per update contributed (`soma client`)
or per version made on the simulated clock (`soma simulate`), then one when it is done."""

from __future__ import annotations

import argparse
import json
from typing import Any

from soma.config.asynchronous import Buffered
from soma.config.spec import BadArgument


def add_arguments(c: argparse.ArgumentParser, *, simulated: bool) -> None:
    """The options of an asynchronous run (and, for `soma simulate`, of its simulated clock)."""
    c.add_argument(
        "--buffer",
        type=int,
        default=None,
        metavar="K",
        help="asynchronous rounds (FedBuff): a version is made, exactly once, by whoever finds "
        "K updates no version consumed; each client trains from the latest version at its own "
        "pace; --rounds is then the number of versions (default: synchronous rounds)",
    )
    c.add_argument(
        "--staleness",
        default="polynomial",
        metavar="KIND[:A]",
        help="how an update s versions old weighs: polynomial[:A] ((1+s)^-A, "
        f"A {Buffered.a:g} by default) or constant",
    )
    c.add_argument(
        "--staleness-limit",
        type=int,
        default=None,
        metavar="N",
        help="refuse updates more than N versions old; the client starts again from the latest "
        "(default: no limit)",
    )
    c.add_argument(
        "--server-lr",
        type=float,
        default=1.0,
        help="the server's step along the buffer's weighted change (1: its weighted mean)",
    )
    if not simulated:
        return
    c.add_argument(
        "--straggling",
        type=float,
        default=1.0,
        metavar="SIGMA",
        help="with --buffer, the simulated clock: client speeds log-normal with this sigma "
        "(drawn from --seed; 0: every client as fast)",
    )
    c.add_argument(
        "--queue",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="with --buffer, the median wait of a client's first job in the queue (log-normal)",
    )
    c.add_argument(
        "--trace",
        default=None,
        metavar="FILE",
        help="with --buffer, time the clients by a Slurm accounting trace instead: the output of "
        "`sacct -X -P -n -o Submit,Start,End`, client k's n-th job the trace's job k + n * clients",
    )
    c.add_argument(
        "--until",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --buffer, stop past this many simulated seconds",
    )
    c.add_argument(
        "--target",
        default=None,
        metavar="METRIC=VALUE",
        help="with --buffer, stop once the task's test METRIC reaches VALUE (at most, for a loss)",
    )


def target_of(text: str | None) -> tuple[str, float] | None:
    """`accuracy=0.9` as (name, value); refused by name otherwise."""
    if text is None:
        return None
    name, _, value = text.partition("=")
    try:
        number = float(value)
    except ValueError:
        number = None
    if not name or number is None:
        raise BadArgument(f"--target must be METRIC=VALUE (accuracy=0.9), not {text!r}")
    return name, number


def client(args: argparse.Namespace) -> int:
    """An asynchronous run's clients hosted here (see the module); checked whole first."""
    from soma.asynchronous.clients import run_clients
    from soma.asynchronous.clock import Clock, read_trace, simulate_clock
    from soma.config.spec import RunSpec
    from soma.run import checked
    from soma.run.evaluation import has_central
    from soma.run.simulate import store_at

    spec = RunSpec.from_args(args)
    task, strategy = checked.checked(spec)
    target = target_of(getattr(args, "target", None))
    central = task.evaluate if has_central(task) else None
    if spec.charter is not None and args.store is not None:
        spec.check_charter_at(args.store)  # a pinned run on a store not yet made: none made
    with store_at(args.store, spec, task=task) as store:
        if args.command == "simulate":
            clock = (
                Clock(seed=spec.seed, sigma=args.straggling, queue=args.queue)
                if args.trace is None
                else read_trace(args.trace, spec.clients)
            )
            line = simulate_clock(
                spec, store, task, strategy, clock, until=args.until, target=target,
                evaluate=central,
            )  # fmt: skip
            for v, when in enumerate(line.times):
                shown = {"version": v, "time": round(when, 6), "staleness": line.staleness[v]}
                _print({**shown, "evaluation": line.metrics[v]})
            consumed = sum(line.staleness, [])
            done: dict[str, Any] = {
                "versions": len(line.times) - 1,
                "stopped": line.stopped,
                "staleness": {str(s): consumed.count(s) for s in sorted(set(consumed))},
            }
            nodes = line.nodes
        else:
            ran = run_clients(spec, store, task, strategy, after=_printed)
            done, nodes = {"versions": ran.latest}, ran.nodes
        _print({**done, "evaluation": None if central is None else central(nodes)})
    return 0


def _printed(contributed: Any, ran: Any) -> None:
    line = {"client": contributed.client, "from": contributed.start}
    if contributed.refused is not None:
        line["refused"] = contributed.refused
    else:
        line.update(update=contributed.name, train=contributed.metrics)
    _print(line)


def _print(line: dict[str, Any]) -> None:
    print(json.dumps(line, sort_keys=True), flush=True)
