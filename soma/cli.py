"""The `soma` command line: the client script every Slurm task runs, a run's status, its model.

Each task is client `$SLURM_PROCID` unless `--mine` says otherwise.

    srun -n 4 soma client --store /shared/soma --run cifar --rounds 10 --clients 4
    soma simulate --rounds 10 --clients 4 [--store /tmp/s]   every client in this process
    soma status --store /shared/soma --run cifar [--json]
    soma export --store /shared/soma --run cifar [--round 9 | --best] -o cifar.safetensors
    soma verify --store /shared/soma [--run cifar]      exit 1 when anything is damaged
    soma repair --store /shared/soma [--run cifar] [--dry-run]
    soma gc --store /shared/soma [--keep-runs cifar ... [--force]] [--dry-run] [--min-age 1h]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from soma.errors import SomaError
from soma.round import holders
from soma.round.lease import LEASE
from soma.run.spec import BadArgument

if TYPE_CHECKING:
    from soma.run.step import Hosted


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


def clients_of(text: str) -> list[int]:
    """`3`, `0-4`, `0,2,5` or `0-4,8`: the clients one process hosts (soma.run.options)."""
    from soma.run.options import clients_of as parsed

    try:
        return parsed(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def client(args: argparse.Namespace) -> int:
    """Every round: train each hosted client that the round samples, from the round's start,
    contribute it, and leave with the average (whoever finds the round complete averages);
    the run layer's loop (soma.run.drive). The task and the strategy are made and checked
    (RunSpec.checked) before anything is written: a refused run leaves no store behind.

    `soma simulate` is this very command with every client hosted here (soma.run.simulate),
    and without --store a temporary store, removed at the end."""
    import torch

    from soma.evaluation import has_central
    from soma.run.drive import drive
    from soma.run.simulate import store_at
    from soma.run.spec import RunSpec
    from soma.tasks import importable_here

    torch.set_num_threads(args.threads)
    importable_here()  # `--task mytask` finds mytask.py here, as the workflow does
    spec = RunSpec.from_args(args)
    task, strategy = spec.checked()
    with store_at(args.store, spec) as store:  # only once the run was checked whole
        driven = drive(
            spec,
            store,
            task,
            strategy,
            deadline=args.deadline,
            lease=args.lease,
            after=_printer(args, task),
        )
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


class NoStore(SomaError, ValueError):
    """A store path with no store at it: refused, never made (reading must leave no trace)."""


def _existing_store(path: str):
    """The store at `path`, which must already be one: `Store()` makes what is missing, and
    a command that only reads must not leave an empty store behind a mistyped path."""
    from soma.store import Store, check_folder
    from soma.store.backend import scheme_of

    if scheme_of(path) not in (None, "file"):
        return Store(path)  # a bucket: opening one makes nothing
    folder = check_folder(path) if scheme_of(path) == "file" else Path(path)
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


def _federated_text(federated: Any) -> str:
    """`; validation accuracy 0.91 [min 0.80, p10 0.82, median 0.93, max 1.00] over 4
    clients; train loss 0.31`: a round's federated evaluation (soma.evaluation)."""
    if not isinstance(federated, dict):
        return ""
    parts = []
    for name, spread in sorted((federated.get("evaluation") or {}).items()):
        stats = ", ".join(
            f"{stat} {_g(spread.get(stat))}" for stat in ("min", "p10", "median", "max")
        )
        parts.append(f"validation {name} {_g(spread.get('mean'))} [{stats}]")
    said = "; " + ", ".join(parts) + f" over {len(federated.get('evaluated') or [])} clients"
    loss = (federated.get("training") or {}).get("loss")
    return said + (f"; train loss {_g(loss.get('mean'))}" if loss else "")


def _g(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else "nan"


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
    if row.get("dropped"):
        written += f", {len(row['dropped'])} dropped out"
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
    apart = row.get("apart") or f"{row['meeting'][:8]}, {row['strategy']}"
    meeting = f" [{apart}]" if row["round"] in several else ""
    left = "".join(f"; left out client {x['client']}: {x['why']}" for x in row["left_out"])
    problems = "".join(f"; {problem}" for problem in row["problems"])
    metrics = _metrics_text(row["metrics"]) + _privacy_text(row.get("privacy"))
    metrics += _federated_text(row.get("federated"))
    return f"round {row['round']:>4}{meeting}: {written}{missing}; {state}{metrics}{left}{problems}"


def _privacy_text(spent: Any) -> str:
    """The privacy a DP strategy has spent up to the round, as (epsilon, delta)."""
    if not isinstance(spent, dict):
        return ""
    budget = f" of a budget of {spent['budget']:.4g}" if "budget" in spent else ""
    from soma.privacy import ADVERSARIES

    against = spent.get("against")
    whom = f", against {ADVERSARIES.get(against, against)}" if against else ""
    at = f"at delta {spent['delta']:g}{whom}"
    return f"; privacy spent: epsilon {spent['epsilon']:.4g}{budget} {at}"


def export(args: argparse.Namespace) -> int:
    """One average's weights as a safetensors file plain PyTorch loads (see soma.model)."""
    from soma.model import export_average

    if args.best:
        return _export_best(args)
    store = _existing_store(args.store)
    made = export_average(store, args.run, args.output, round=args.round, average=args.average)
    print(
        f"{args.output}: round {made['round']} of run {made['run']!r}, "
        f"weights {made['weights']}, average {made['average']}"
    )
    return 0


def _export_best(args: argparse.Namespace) -> int:
    """`soma export --best`: the round whose federated validation `--metric` is best."""
    from soma.model import export_best

    if args.round is not None or args.average is not None:
        raise BadArgument("--best chooses the round itself: give it without --round or --average")
    store = _existing_store(args.store)
    made = export_best(store, args.run, args.output, args.metric)
    print(
        f"{args.output}: round {made['round']} of run {made['run']!r} (best federated "
        f"validation {args.metric} {made['best']['validation']:.4g}), weights {made['weights']}"
    )
    return 0


# --- the arguments, all checked before anything is read, made or trained -----------------


def one_line(error: BaseException) -> str:
    """The error's message on one line: a refusal is one line of stderr, never a traceback."""
    return "; ".join(line.strip() for line in str(error).splitlines() if line.strip())


def check_arguments(args: argparse.Namespace) -> None:
    """Every argument of the command, checked before it runs: a refused command has made
    nothing (no store behind a mistyped path), read nothing and trained nothing."""
    if args.store is not None:
        _check_store(args.store)
    if getattr(args, "run", None) is not None:
        _check_run(args.run)
    if getattr(args, "clients", None) is not None:
        _at_least("--clients", args.clients, 1)
    if getattr(args, "round", None) is not None:
        _at_least("--round", args.round, 0)
    if args.command in ("client", "simulate"):
        _check_client(args)


def _at_least(option: str, value: int, least: int) -> None:
    if value < least:
        raise BadArgument(f"{option} must be an integer >= {least}, not {value}")


def _check_store(path: str) -> None:
    from soma.store import check_folder
    from soma.store.errors import StoreError

    try:
        check_folder(path)
    except StoreError as error:
        raise BadArgument(f"--store {path}: {error}") from None


def _check_run(run: str) -> None:
    from soma.store.errors import StoreError
    from soma.store.names import check_run_name

    try:
        check_run_name(run)
    except StoreError as error:
        raise BadArgument(f"--run {run!r} is not a run's name: {error}") from None


def _check_client(args: argparse.Namespace) -> None:
    """`soma client`'s own argument (--deadline), then the run's pure check (soma.run.spec:
    numbers, sampling, secure aggregation, tree, the task's option names); the task and the
    strategy are made and checked together by `client`, before it writes anything."""
    from soma.run.spec import RunSpec

    if math.isnan(args.deadline) or args.deadline < 0:
        raise BadArgument(
            f"--deadline must be a number of seconds >= 0 (inf: forever), not {args.deadline}"
        )
    if not args.lease >= 1 or math.isinf(args.lease):
        raise BadArgument(f"--lease must be a number of seconds >= 1, not {args.lease}")
    RunSpec.from_args(args).check()


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
    removing blobs (it says which, and that `soma repair` comes first). What it refuses (a
    --min-age below its floor, a symbolic link in the store, a run still going) is the
    library's refusal (soma.health.gc), said in one line."""
    from soma.health import GRACE
    from soma.health import gc as collect

    store = _existing_store(args.store)
    report = collect(
        store,
        keep_runs=args.keep_runs,
        dry_run=args.dry_run,
        min_age=GRACE if args.min_age is None else args.min_age,
        force=args.force,
    )
    _print_report(report, args.json)
    return 1 if report.blocked else 0


class _Defaults(argparse.HelpFormatter):
    """`--help` shows every option's default: the value itself, unless the help already
    says it (`default: ...`) or the option has none (a flag off, an empty list, None)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if "default" in text or action.required or default is argparse.SUPPRESS:
            return text
        if isinstance(default, bool) or default is None or default == []:
            return text + " (default: none)" if action.nargs != 0 else text
        return text + " (default: %(default)s)"


def keys(args: argparse.Namespace) -> int:
    """A fresh Ed25519 key pair for each client (soma.round.signing): `<out>/<k>.key` (mode
    0600: keep it where only that client's jobs read it) and `<out>/<k>.pub`; prints the
    roster of their public keys, one JSON object, for the run's `roster` file."""
    from soma.round.signing import SigningError, make_keys

    taken = [str(Path(args.out) / f"{k}.key") for k in args.client]
    taken = [path for path in taken if os.path.lexists(path)]
    if taken:  # refused before any key is made
        raise SigningError(f"{', '.join(taken)} exist: a client's key is made once")
    roster = {}
    for k in args.client:
        path, public = make_keys(args.out, k)
        roster[str(k)] = public
        print(f"client {k}: private key {path}", file=sys.stderr)
    print(json.dumps(roster, indent=1), flush=True)
    return 0


def _run_arguments(c: argparse.ArgumentParser) -> None:
    """What a run is and how a process drives it: `soma client`'s and `soma simulate`'s."""
    c.add_argument(
        "--durability",
        default="durable",
        help="durable: a name is durable before it is said bound, never before what it "
        "reaches; scratch: no fsync (a machine crash means rerunning the round), refused on "
        "a store that says it is shared (its file `shared`)",
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
        "--secure-aggregation",
        type=int,
        default=None,
        metavar="T",
        help="secure aggregation (soma.secagg): nobody, the averager included, reads a "
        "client's weights, only their sum; T of the round's clients must come to unmask it "
        "(FedAvg-style strategies; needs the `privacy` extra; default: off)",
    )
    c.add_argument(
        "--roster",
        default=None,
        metavar="FILE",
        help="signed records: a JSON or YAML file of client -> Ed25519 public key (soma keys); "
        "every record is signed by its writer and checked before use (default: unsigned)",
    )
    c.add_argument(
        "--keys",
        default=None,
        metavar="PATH",
        help="with --roster, this process's clients' private keys: a path, {client} standing "
        "for the client (e.g. keys/{client}.key)",
    )
    c.add_argument(
        "--tree",
        type=int,
        default=None,
        metavar="FAN_IN",
        help="average through a tree of partial means, FAN_IN inputs a node, the work "
        "shared by every process of the round (FedAvg-style strategies; default: flat)",
    )
    c.add_argument(
        "--personal",
        action="append",
        default=[],
        metavar="NODE",
        help="a node each client keeps for itself: never sent nor averaged, kept as its own "
        "state (FedPer, FedBN; repeatable)",
    )
    c.add_argument(
        "--deadline",
        type=float,
        default=3600.0,
        help="seconds to wait for a round before naming who is missing",
    )
    c.add_argument(
        "--lease",
        type=float,
        default=LEASE,
        help="on a bucket: seconds an averaging's holder may go without renewing its lease "
        f"before it is taken over (default {LEASE:g})",
    )
    c.add_argument(
        "--evaluate",
        choices=("one", "all", "none"),
        default="one",
        help="who logs the test metrics of each round's new weights on stderr: one client "
        "(the lowest-numbered of the round), every client, or nobody",
    )
    c.add_argument(
        "--evaluate-participation",
        type=_count_or_fraction,
        default=None,
        help="who evaluates each round's average on their own held-out data (a task's "
        "evaluate_local): a count or a fraction of the clients, drawn from the seed and the "
        "round (default: the round's sample)",
    )
    c.add_argument(
        "--tracking",
        default=None,
        metavar="DIR",
        help="write per-round metrics as TensorBoard event files in DIR (the `tracking` "
        "extra; default: none)",
    )
    c.add_argument(
        "--threads",
        type=int,
        default=int(os.environ.get("SOMA_THREADS", "1")),
        help="torch threads (default: $SOMA_THREADS, else 1: safe when jobs share cores)",
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="soma", description=__doc__.split("\n")[0], formatter_class=_Defaults
    )
    commands = top.add_subparsers(dest="command", required=True)
    commands_add = commands.add_parser

    def add_parser(*args: Any, **kwargs: Any) -> argparse.ArgumentParser:
        return commands_add(*args, formatter_class=_Defaults, **kwargs)

    commands.add_parser = add_parser  # type: ignore[method-assign]
    c = commands.add_parser("client", help="train one client's shard for every round")
    c.add_argument("--store", required=True, help="the shared folder every task can see")
    c.add_argument("--run", required=True, help="the run's name (two runs may share a store)")
    c.add_argument("--rounds", type=int, required=True)
    c.add_argument("--clients", type=int, required=True)
    c.add_argument(
        "--mine",
        type=clients_of,
        default=None,
        help="the clients this process trains: 3, 0-4 or 0,2,5-7 (default: $SLURM_PROCID, "
        "or with --per-task B, task p's B clients p*B..p*B+B-1)",
    )
    c.add_argument(
        "--per-task",
        type=int,
        default=1,
        metavar="B",
        help="clients per task when --mine is not given (default 1)",
    )
    _run_arguments(c)
    c.set_defaults(func=client)
    m = commands.add_parser(
        "simulate", help="every client of a run in this one process (the bits of soma client)"
    )
    m.add_argument(
        "--store",
        default=None,
        help="the store to keep the run in (default: a temporary folder, removed at the end)",
    )
    m.add_argument("--run", default="simulation", help="the run's name")
    m.add_argument("--rounds", type=int, required=True)
    m.add_argument("--clients", type=int, required=True)
    _run_arguments(m)
    m.set_defaults(func=client)
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
    e.add_argument(
        "--best",
        action="store_true",
        help="the round whose federated validation --metric (the clients' own held-out "
        "data, never the central test set) is best",
    )
    e.add_argument(
        "--metric", default="accuracy", help="with --best: the metric (a loss: lower is better)"
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
    k = commands.add_parser(
        "keys", help="make clients' Ed25519 key pairs for signed records; print their roster"
    )
    k.add_argument("--out", required=True, help="the folder to write <k>.key and <k>.pub in")
    k.add_argument(
        "--client", type=clients_of, required=True, help="the clients: 3, 0-4 or 0,2,5-7"
    )
    k.set_defaults(func=keys, store=None)
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
        "--force",
        action="store_true",
        help="with --keep-runs: drop a run even with an open round (no average published yet)",
    )
    g.add_argument(
        "--dry-run", action="store_true", help="say what would be removed; remove nothing"
    )
    g.add_argument(
        "--min-age",
        type=_duration,
        default=None,
        metavar="DURATION",
        help="remove only what was untouched this long, at least 2m: 90s, 30m, 6h, 2d "
        "(default 1h, soma.health.GRACE)",
    )
    g.add_argument("--json", action="store_true", help="machine-readable output")
    g.set_defaults(func=gc)
    return top


def _mine_from_slurm(args: argparse.Namespace) -> list[int]:
    """Task p of an srun hosts client p, or with --per-task B clients p*B..p*B+B-1."""
    procid = os.environ.get("SLURM_PROCID")
    if procid is None:
        raise SystemExit("soma client: --mine not given and $SLURM_PROCID is not set")
    if not procid.isdigit():
        raise SystemExit(f"soma client: $SLURM_PROCID is {procid!r}, not a task number")
    if args.per_task < 1:
        raise SystemExit(f"soma client: --per-task {args.per_task} must be at least 1")
    first = int(procid) * args.per_task
    mine = list(range(first, min(first + args.per_task, args.clients)))
    if not mine:
        raise SystemExit(
            f"soma client: task {procid} with --per-task {args.per_task} hosts no client "
            f"of {args.clients}"
        )
    return mine


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if getattr(args, "command", None) == "client" and args.mine is None:
        args.mine = _mine_from_slurm(args)
    if getattr(args, "command", None) == "simulate":
        args.mine = list(range(args.clients)) if args.clients > 0 else []
    try:
        check_arguments(args)
        return args.func(args)
    except SomaError as error:
        print(f"soma: {one_line(error)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
