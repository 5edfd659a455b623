"""The `soma` command line: the client script every Slurm task runs, a run's status, its model.

Each task is client `$SLURM_PROCID` unless `--mine` says otherwise.

    srun -n 4 soma client --store /shared/soma --run cifar --rounds 10 --clients 4
    soma status --store /shared/soma --run cifar [--json]
    soma export --store /shared/soma --run cifar [--round 9] -o cifar.safetensors
    soma verify --store /shared/soma [--run cifar]      exit 1 when anything is damaged
    soma repair --store /shared/soma [--run cifar] [--dry-run]
    soma gc --store /shared/soma [--keep-runs cifar ...] [--dry-run] [--min-age 24h]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from soma import holders
from soma.errors import SomaError
from soma.store_errors import StoreError


def _options(pairs: list[str], of: str) -> dict[str, Any]:
    """`key=value` options; values are read as JSON when they parse, else kept as text."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"soma: {of} option {pair!r} is not key=value")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def _count_or_fraction(text: str) -> int | float:
    """`4` is a count, `0.5` a fraction (checked against the client count by soma)."""
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is neither a count nor a fraction"
            ) from None


def client(args: argparse.Namespace) -> int:
    import torch

    from soma.nodes import export, load
    from soma.once import read_record
    from soma.participation import policy
    from soma.round import Meeting, average_round
    from soma.runs import identity
    from soma.store import Store
    from soma.strategies import check_task_takes_objective, load_strategy
    from soma.tasks import load_task

    torch.set_num_threads(args.threads)
    store = Store(args.store)
    task_options = _options(args.option, "task")
    strategy_options = _options(args.strategy_option, "strategy")
    task = load_task(args.task, task_options)
    strategy = load_strategy(args.strategy, strategy_options)
    check_task_takes_objective(args.strategy, strategy, task)
    nodes = task.nodes(args.seed)
    data = task.shard(args.mine, args.clients)
    size = task.size(data)
    start, state, own = store.put_value(export(nodes)), None, None
    for r in range(args.rounds):
        expected, quorum = policy(args.seed, r, args.clients, args.participation, args.quorum)
        meeting = Meeting(
            args.run,
            r,
            args.clients,
            start=start,
            state=state,
            strategy=args.strategy,
            options=strategy_options,
            config=identity(args.task, task_options, args.seed),
            expected=expected,
            quorum=quorum,
        )
        metrics = None
        if args.mine in meeting.members:
            metrics, own = _take_part(store, meeting, task, strategy, nodes, data, size, own, args)
        digest = average_round(store, meeting, deadline=args.deadline)
        record = read_record(store, digest)
        load(nodes, store.recall_digest(record["weights"]))
        start, state = record["weights"], record["state"]
        line = {
            "client": args.mine,
            "round": r,
            "size": size,
            "average": digest,
            "weights": start,
            "train": metrics,
        }
        print(json.dumps(line, sort_keys=True), flush=True)
        _log_round(task, nodes, args, r, record)
    print(
        json.dumps(
            {"client": args.mine, "done": args.rounds, "evaluation": task.evaluate(nodes)},
            sort_keys=True,
        ),
        flush=True,
    )
    return 0


LOG = logging.getLogger("soma.client")


def _log_round(task, nodes, args, round: int, record: dict[str, Any]) -> None:
    """One line a round on stderr, as the workflow's evaluation prints it: the new weights'
    test metrics, evaluated by one client (the lowest-numbered member of the round, so
    that exactly one does it; every client with --evaluate all), and who was left out."""
    members = record.get("expected") or list(range(args.clients))
    if args.evaluate == "none" or (args.evaluate == "one" and args.mine != min(members)):
        return
    metrics = task.evaluate(nodes)
    shown = ", ".join(f"{k} {v:.4g}" for k, v in sorted(metrics.items()) if _is_number(v))
    left = record.get("left_out") or []
    also = f" ({len(left)} left out: {', '.join(str(x['client']) for x in left)})" if left else ""
    LOG.info("round %d/%d: %s%s", round, args.rounds - 1, shown, also)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _take_part(store, meeting, task, strategy, nodes, data, size, own, args):
    """Train, and contribute; or, when the task fails or the export is refused, drop out
    saying why (the round goes on without this client if its quorum allows)."""
    from soma.nodes import export
    from soma.round import contribute, drop, dropout_reason
    from soma.runs import training_seed
    from soma.strategies import train_locally

    state = None if meeting.state is None else store.recall_digest(meeting.state)
    seed = training_seed(args.seed, meeting.round, args.mine)
    try:
        metrics, extra, mine = train_locally(
            strategy, task, nodes, data, seed=seed, state=state, mine=own
        )
        contribute(store, meeting, export(nodes), mine=args.mine, size=size, extra=extra, own=mine)
    except Exception as error:  # the task failed or the export was refused: drop out
        why = dropout_reason(error)
        drop(store, meeting, mine=args.mine, why=why)
        print(f"soma: client {args.mine} drops out of {meeting.what}: {why}", file=sys.stderr)
        return None, own
    return metrics, mine


class NoStore(SomaError):
    """A store path with no store at it: refused, never made (reading must leave no trace)."""


def _existing_store(path: str):
    """The store at `path`, which must already be one: `Store()` makes what is missing, and
    a command that only reads must not leave an empty store behind a mistyped path."""
    from soma.store import Store

    folder = Path(path)
    if not (folder / "names").is_dir() or not (folder / "blobs").is_dir():
        why = "" if folder.is_dir() else " (no such folder)"
        raise NoStore(f"no store at {path}{why}")
    return Store(folder)


def _metrics_text(metrics: Any) -> str:
    if not isinstance(metrics, dict):
        return ""
    shown = [
        f"{name} {value:.4g}" if isinstance(value, float) else f"{name} {value}"
        for name, value in sorted(metrics.items())
    ]
    return "; " + ", ".join(shown) if shown else ""


def status(args: argparse.Namespace) -> int:
    """Per round: who wrote, who is missing, who was left out, the average and its metrics.

    Exits 1 when a round could not be read (it is said on that round's line, and every
    other round is still shown), and refuses a store or a run that is not there.
    """
    from soma.round import check_run
    from soma.round import status as round_status

    store = _existing_store(args.store)
    check_run(store, args.run)
    table = round_status(store, args.run, clients=args.clients)
    unreadable = any(row["problems"] for row in table)
    if args.json:
        print(json.dumps(table, indent=2, sort_keys=True))
        return 1 if unreadable else 0
    if not table:
        print(f"run {args.run!r}: no rounds yet in {args.store}")
        return 0
    several = {row["round"] for row in table if sum(r["round"] == row["round"] for r in table) > 1}
    for row in table:
        print(_status_line(row, several))
    return 1 if unreadable else 0


def _status_line(row: dict[str, Any], several: set[int]) -> str:
    if row["expected"] is None:
        written = f"{len(row['written'])}/? written (the round does not say its clients: --clients)"
    else:
        written = f"{len(row['written'])}/{len(row['expected'])} written"
    missing = f", missing {row['missing']}" if row["missing"] else ""
    holder = row["averaging"]
    if row["average"]:
        state = f"average {row['average'][:16]}"
        if len(row["averages_by_inputs"]) > 1:
            state += f" ({len(row['averages_by_inputs'])} averages: the round was rerun)"
    elif holder:
        state = f"averaging held by {holders.describe(holder)}"
        state += " (gone)" if holder["gone"] else ""
    else:
        state = "not averaged"
    meeting = f" [{row['meeting'][:8]}, {row['strategy']}]" if row["round"] in several else ""
    left = "".join(f"; left out client {x['client']}: {x['why']}" for x in row["left_out"])
    problems = "".join(f"; {problem}" for problem in row["problems"])
    metrics = _metrics_text(row["metrics"])
    return f"round {row['round']:>4}{meeting}: {written}{missing}; {state}{metrics}{left}{problems}"


def export(args: argparse.Namespace) -> int:
    """One average's weights as a safetensors file plain PyTorch loads (see soma.model)."""
    from soma.model import export_average

    store = _existing_store(args.store)
    made = export_average(store, args.run, args.output, round=args.round, average=args.average)
    print(
        f"{args.output}: round {made['round']} of run {made['run']!r}, "
        f"weights {made['weights']}, average {made['average']}"
    )
    return 0


def _progress_bar(label: str):
    """A progress line on stderr when it is a terminal (else None): bytes, percent, speed;
    redrawn at most ten times a second, and ended by `done()`."""
    if not sys.stderr.isatty():
        return None
    import time

    started = time.monotonic()
    shown = [0.0]

    def show(done: int, total: int) -> None:
        now = time.monotonic()
        if now - shown[0] < 0.1 and done < total:
            return
        shown[0] = now
        rate = done / max(now - started, 1e-9) / 1e6
        percent = 100.0 * done / total if total else 100.0
        print(
            f"\r{label}: {done / 1e9:.2f}/{total / 1e9:.2f} GB {percent:5.1f}% {rate:7.0f} MB/s",
            end="",
            file=sys.stderr,
            flush=True,
        )

    show.done = lambda: print("", file=sys.stderr)  # type: ignore[attr-defined]
    return show


def _print_report(report: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report.as_dict(), indent=2, sort_keys=True))
    else:
        for line in report.lines():
            print(line)


def verify(args: argparse.Namespace) -> int:
    """Every blob hashed against its name, every name and reference present: exit 1 when
    anything is damaged, each problem said with its path and what fixes it."""
    from soma.health import verify as verify_store

    store = _existing_store(args.store)
    bar = _progress_bar("verify")
    try:
        report = verify_store(store, args.run, progress=bar)
    finally:
        if bar is not None:
            bar.done()
    _print_report(report, args.json)
    return 0 if report.clean else 1


def repair(args: argparse.Namespace) -> int:
    """Rebuild what can be recomputed (averages, from their inputs); exit 1 when damage is
    left, each said with the job whose rerun fixes it."""
    from soma.health import repair as repair_store

    store = _existing_store(args.store)
    bar = _progress_bar("verify")
    try:
        report = repair_store(store, args.run, dry_run=args.dry_run, progress=bar)
    finally:
        if bar is not None:
            bar.done()
    _print_report(report, args.json)
    return 0 if report.clean else 1


def _duration(text: str) -> float:
    """Seconds from `90`, `90s`, `30m`, `6h` or `2d`."""
    scale = {"s": 1, "m": 60, "h": 3600, "d": 86400}.get(text[-1:], None)
    try:
        return float(text[:-1] if scale else text) * (scale or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration (90, 90s, 30m, 6h or 2d)"
        ) from None


def gc(args: argparse.Namespace) -> int:
    """Remove unreachable blobs older than --min-age and temporaries of writers that are
    gone; with --keep-runs, every other run's names first. Exit 1 when damage kept it from
    removing blobs (it says which, and that `soma repair` comes first)."""
    from soma.health import gc as collect
    from soma.store import REFRESH_AFTER

    if args.min_age < 2 * REFRESH_AFTER:
        raise SystemExit(
            f"soma: gc --min-age {args.min_age:g}s is below {2 * REFRESH_AFTER:g}s: a live writer "
            f"refreshes a blob it puts only when it is older than {REFRESH_AFTER:g}s, so gc "
            "could remove a blob under it"
        )
    store = _existing_store(args.store)
    report = collect(store, keep_runs=args.keep_runs, dry_run=args.dry_run, min_age=args.min_age)
    _print_report(report, args.json)
    return 1 if report.blocked else 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="soma", description=__doc__.split("\n")[0])
    commands = top.add_subparsers(dest="command", required=True)
    c = commands.add_parser("client", help="train one client's shard for every round")
    c.add_argument("--store", required=True, help="the shared folder every task can see")
    c.add_argument("--run", required=True, help="the run's name (two runs may share a store)")
    c.add_argument("--rounds", type=int, required=True)
    c.add_argument("--clients", type=int, required=True)
    c.add_argument(
        "--mine", type=int, default=None, help="this client's index (default: $SLURM_PROCID)"
    )
    c.add_argument("--task", default="soma.tasks.control", help="a task's import path")
    c.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a task option (repeatable)",
    )
    c.add_argument(
        "--strategy",
        default="fedavg",
        help="how a round's updates become the next weights: a built-in name or an import path",
    )
    c.add_argument(
        "--strategy-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a strategy option (repeatable)",
    )
    c.add_argument(
        "--participation",
        type=_count_or_fraction,
        default=None,
        help="clients per round: a count (4) or a fraction (0.5), drawn from the seed and the "
        "round (default: everyone)",
    )
    c.add_argument(
        "--quorum",
        type=_count_or_fraction,
        default=None,
        help="how many of a round's clients must come for it to be averaged without the rest "
        "once --deadline has passed: a count or a fraction (default: all of them)",
    )
    c.add_argument("--seed", type=int, default=0, help="the seed of the starting weights")
    c.add_argument(
        "--deadline",
        type=float,
        default=3600.0,
        help="seconds to wait for a round before naming who is missing",
    )
    c.add_argument(
        "--evaluate",
        choices=("one", "all", "none"),
        default="one",
        help="who logs the test metrics of each round's new weights on stderr: one client "
        "(the lowest-numbered of the round), every client, or nobody",
    )
    c.add_argument(
        "--threads",
        type=int,
        default=int(os.environ.get("SOMA_THREADS", "1")),
        help="torch threads (default 1: safe when jobs share cores)",
    )
    c.set_defaults(func=client)
    s = commands.add_parser("status", help="per round: who wrote, who is missing, the average")
    s.add_argument("--store", required=True)
    s.add_argument("--run", required=True)
    s.add_argument(
        "--clients", type=int, default=None, help="the client count, where a round does not say"
    )
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=status)
    e = commands.add_parser(
        "export", help="one round's average as a safetensors file plain PyTorch loads"
    )
    e.add_argument("--store", required=True)
    e.add_argument("--run", required=True)
    e.add_argument(
        "--round", type=int, default=None, help="the round (default: the last one averaged)"
    )
    e.add_argument(
        "--average",
        default=None,
        metavar="DIGEST",
        help="which average, when the round has several (a unique prefix will do)",
    )
    e.add_argument("-o", "--output", required=True, help="the model file to write")
    e.set_defaults(func=export)
    v = commands.add_parser(
        "verify", help="hash every blob, check every name and reference; exit 1 on damage"
    )
    v.add_argument("--store", required=True)
    v.add_argument("--run", default=None, help="only what this run's names reach")
    v.add_argument("--json", action="store_true", help="machine-readable output")
    v.set_defaults(func=verify)
    r = commands.add_parser(
        "repair", help="rebuild damaged averages from their inputs; say what reruns the rest"
    )
    r.add_argument("--store", required=True)
    r.add_argument("--run", default=None, help="only what this run's names reach")
    r.add_argument("--dry-run", action="store_true", help="say what would be done; do nothing")
    r.add_argument("--json", action="store_true", help="machine-readable output")
    r.set_defaults(func=repair)
    g = commands.add_parser(
        "gc", help="remove unreachable blobs and temporaries of writers that are gone"
    )
    g.add_argument("--store", required=True)
    g.add_argument(
        "--keep-runs",
        nargs="+",
        default=None,
        metavar="RUN",
        help="remove the names of every run but these first (default: keep every name)",
    )
    g.add_argument(
        "--dry-run", action="store_true", help="say what would be removed; remove nothing"
    )
    g.add_argument(
        "--min-age",
        type=_duration,
        default=24 * 3600.0,
        metavar="DURATION",
        help="remove only what was untouched this long: 90s, 30m, 6h, 2d (default 24h)",
    )
    g.add_argument("--json", action="store_true", help="machine-readable output")
    g.set_defaults(func=gc)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if getattr(args, "command", None) == "client" and args.mine is None:
        procid = os.environ.get("SLURM_PROCID")
        if procid is None:
            raise SystemExit("soma client: --mine not given and $SLURM_PROCID is not set")
        args.mine = int(procid)
    try:
        return args.func(args)
    except (SomaError, StoreError) as error:
        print(f"soma: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
