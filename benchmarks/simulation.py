"""One-process simulation against the in-process floor, durable and scratch (issue 23).

    python benchmarks/simulation.py [--rounds 50] [--clients 10]

Digits with plain SGD (momentum 0, 5 local epochs, batch 10), every client hosted by one
process. Each row is a fresh interpreter, timed from start to exit (imports included):

- floor: a plain loop in one process (train the clients one after another, `soma.fedavg`,
  evaluate), nothing written;
- `soma simulate --durability durable` and `--durability scratch`, a store in --dir.

Prints each one's seconds (the best of --repeat, run in turn) and its ratio to the floor
(targets: scratch <= 1.2, durable <= 1.5). Measured in one run, so a loaded machine weighs
on every row alike.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPTIONS = {"epochs": 5, "batch_size": 10, "momentum": 0.0}


def floor(rounds: int, clients: int) -> None:
    """The federation in this process, nothing written."""
    import torch

    torch.set_num_threads(1)
    from soma import fedavg
    from soma.nodes import export, load
    from soma.tasks import digits
    from soma.training import training_seed

    task = digits.make(**OPTIONS)
    shards = [task.shard(k, clients) for k in range(clients)]
    nodes = task.nodes(0)
    weights = export(nodes)
    for r in range(rounds):
        exports = []
        for k, data in enumerate(shards):
            load(nodes, weights)
            task.train(nodes, data, seed=training_seed(0, r, k))
            exports.append(export(nodes))
        weights = fedavg(exports, [task.size(data) for data in shards])
    load(nodes, weights)
    print(json.dumps(task.evaluate(nodes)))


def timed(command: list[str]) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--repeat", type=int, default=2, help="runs of each, interleaved: best")
    parser.add_argument("--floor-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_child:
        floor(args.rounds, args.clients)
        return
    rows = {"floor": [sys.executable, __file__, "--floor-child", "--rounds", str(args.rounds),
                      "--clients", str(args.clients)]}  # fmt: skip
    options = [x for k, v in OPTIONS.items() for x in ("--option", f"{k}={v}")]
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="soma-simulation-") as folder:
        for mode in ("durable", "scratch"):
            rows[f"soma simulate, {mode}"] = [
                sys.executable, "-m", "soma.cli", "simulate", "--task", "soma.tasks.digits",
                "--rounds", str(args.rounds), "--clients", str(args.clients), *options,
                "--durability", mode, "--store", f"{folder}/{mode}", "--evaluate", "none",
            ]  # fmt: skip
        seconds: dict[str, float] = {}
        for _ in range(args.repeat):  # in turn, so that a change of load falls on every row
            for row, command in rows.items():
                seconds[row] = min(seconds.get(row, float("inf")), timed(command))
    print(f"digits, plain SGD (E=5, B=10), {args.clients} clients x {args.rounds} rounds")
    for row, s in seconds.items():
        ratio = s / seconds["floor"]
        target = {"soma simulate, durable": 1.5, "soma simulate, scratch": 1.2}.get(row)
        met = target is not None and ratio <= target
        mark = "" if target is None else f"  (target <= {target}: {'met' if met else 'not met'})"
        print(f"{row:>24}: {s:7.1f} s  {ratio:5.2f} x floor{mark}")


if __name__ == "__main__":
    main()
