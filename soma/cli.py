"""The `soma` command line: the same client script on every Slurm task, and a round's status.

Each task is client `$SLURM_PROCID` unless `--mine` says otherwise.

    srun -n 4 soma client --store /shared/soma --run cifar --rounds 10 --clients 4
    soma status --store /shared/soma --run cifar [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from soma import holders
from soma.errors import SomaError


def _options(pairs: list[str]) -> dict[str, Any]:
    """`key=value` task options; values are read as JSON when they parse, else kept as text."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"soma: task option {pair!r} is not key=value")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def client(args: argparse.Namespace) -> int:
    import torch

    from soma.nodes import export, load
    from soma.round import average_name, gather
    from soma.store import Store
    from soma.tasks import load_task

    torch.set_num_threads(args.threads)
    store = Store(args.store)
    task = load_task(args.task, _options(args.option))
    nodes = task.nodes(args.seed)
    data = task.shard(args.mine, args.clients)
    size = task.size(data)
    for r in range(args.rounds):
        metrics = task.train(nodes, data, seed=args.seed + 7919 * r + 104729 * args.mine)
        mean = gather(
            store,
            export(nodes),
            run=args.run,
            round=r,
            clients=args.clients,
            mine=args.mine,
            size=size,
            deadline=args.deadline,
        )
        load(nodes, mean)
        line = {
            "client": args.mine,
            "round": r,
            "size": size,
            "average": store.resolve(average_name(args.run, r)),
            "train": metrics,
        }
        print(json.dumps(line, sort_keys=True), flush=True)
    print(
        json.dumps(
            {"client": args.mine, "done": args.rounds, "evaluation": task.evaluate(nodes)},
            sort_keys=True,
        ),
        flush=True,
    )
    return 0


def round_status(store, run: str, clients: int | None = None) -> list[dict[str, Any]]:
    """Per round: who wrote, who is missing, who holds the averaging, the average's digest."""
    from soma.round import average_name, current_holder, present, round_prefix

    prefix = f"{run}/round/"
    rounds = sorted(
        {
            int(n[len(prefix) :].split("/", 1)[0])
            for n in store.bound(prefix)
            if n[len(prefix) :].split("/", 1)[0].isdigit()
        }
    )
    if clients is None:
        seen = [k for r in rounds for k in present(store, run, r, 1 << 30)]
        clients = max(seen) + 1 if seen else 0
    table = []
    for r in rounds:
        here = present(store, run, r, clients)
        latest = current_holder(store, run, r)
        prefix_r = round_prefix(run, r)
        averaged = [n for n in store.bound(f"{prefix_r}/") if "/averaged/" in n]
        # the workflow's averagings are keyed by their inputs: one per distinct set of weights
        keyed = {
            n.split("/")[-2]: store.resolve(n)
            for n in store.bound(f"{prefix_r}/inputs/")
            if n.endswith("/average")
        }
        plain = store.resolve(average_name(run, r))
        table.append(
            {
                "round": r,
                "clients": clients,
                "written": here,
                "missing": [k for k in range(clients) if k not in here],
                "averaging": None
                if latest is None
                else {"claim": latest[0], **latest[1], "gone": holders.gone(latest[1])},
                "averagings": len(averaged),
                "average": plain or (next(iter(keyed.values())) if len(keyed) == 1 else None),
                "averages_by_inputs": keyed,
            }
        )
    return table


def status(args: argparse.Namespace) -> int:
    from soma.store import Store

    table = round_status(Store(args.store), args.run, args.clients)
    if args.json:
        print(json.dumps(table, indent=2, sort_keys=True))
        return 0
    if not table:
        print(f"run {args.run!r}: no rounds in {args.store}")
        return 0
    for row in table:
        written = f"{len(row['written'])}/{row['clients']} written"
        missing = f", missing {row['missing']}" if row["missing"] else ""
        holder = row["averaging"]
        if row["average"]:
            state = f"average {row['average'][:16]}"
        elif row["averages_by_inputs"]:
            state = f"{len(row['averages_by_inputs'])} averages (the round was rerun)"
        elif holder:
            state = f"averaging held by {holders.describe(holder)}"
            state += " (gone)" if holder["gone"] else ""
        else:
            state = "not averaged"
        print(f"round {row['round']:>4}: {written}{missing}; {state}")
    return 0


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
    c.add_argument("--seed", type=int, default=0, help="the seed of the starting weights")
    c.add_argument(
        "--deadline",
        type=float,
        default=3600.0,
        help="seconds to wait for a round before naming who is missing",
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
    s.add_argument("--clients", type=int, default=None)
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=status)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if getattr(args, "command", None) == "client" and args.mine is None:
        procid = os.environ.get("SLURM_PROCID")
        if procid is None:
            raise SystemExit("soma client: --mine not given and $SLURM_PROCID is not set")
        args.mine = int(procid)
    try:
        return args.func(args)
    except SomaError as error:
        print(f"soma: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
