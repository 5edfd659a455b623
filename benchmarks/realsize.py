"""A whole federated run at a real size against the same training in a plain loop (issue 53).

    python benchmarks/realsize.py                      # 25.1M parameters, ~3 minutes idle
    python benchmarks/realsize.py --width 8 --examples 16 --image-size 8   # a smoke test

soma.tasks.resnet at `--width` 96 (a ResNet-18 of 25.1M parameters, 101 MB an export) on
32x32 images (CIFAR's), `--clients` 2, `--rounds` 1, `--examples` per client, on one thread:
a round of about a minute of training on an idle core, two on a loaded one. What soma adds
is per contribution (an export, hashed and kept, read back and averaged: a few seconds of
CPU a round at this size, `--examples 32` shows it), so the ratio says how long a round's
training is against its model's size; `--width 128 --image-size 16` is 44.7M parameters. Each row
is a fresh interpreter, timed from start to exit (imports included), the rows alternated
`--pairs` times so that a change of load falls on both alike:

- floor: a plain loop in one process, nothing written: the start from the run's seed, each
  client trained from it (`task.train`, the same seeds as soma's), `soma.fedavg` in memory,
  the average evaluated on the test set;
- soma: `soma simulate --store DIR` of the same run (a durable store on this disk: the start,
  every client's export and the average kept, fsynced), `--evaluate none` (soma then
  evaluates the last average once, as the floor does).

Prints each row's wall and CPU seconds and the median over pairs of soma's ratio to the
floor's (issue 53's target: <= 1.05), and then, at this size, the times of soma's parts
(median of `--repeat`): `export` (soma.nodes.export, the nodes copied to CPU tensors),
`keep` (Store.keep of one client's export into a fresh durable store), `average`
(soma.fedavg of the clients' exports streamed from the store, `recall_each`) and `average in
memory` (soma.fedavg of exports already in memory). The table is also written to
benchmarks/results/realsize.md, as its newest run (`--out DIR`: that folder's realsize.md, as a
smoke test's should be).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _measure import Started, Timed, alternated, ratio, timed, write_result

ROOT = Path(__file__).resolve().parent.parent
TASK = "soma.tasks.resnet"


def options_of(args: argparse.Namespace) -> dict:
    return {"width": args.width, "image_size": args.image_size, "examples": args.examples,
            "test_examples": args.test_examples, "batch_size": args.batch_size,
            "device": "cpu"}  # fmt: skip


def floor(args: argparse.Namespace) -> None:
    """The federation in this process, nothing written (soma's seeds: the start from the
    run's seed 0, client k of round r trained with `training_seed(0, r, k)`)."""
    import torch

    torch.set_num_threads(1)
    from _measure import plain_federation

    from soma.tasks import load_task

    task = load_task(TASK, options_of(args))
    nodes, _ = plain_federation(task, args.clients, args.rounds)
    print(json.dumps(task.evaluate(nodes)))


def parts(args: argparse.Namespace, folder: str) -> None:
    """Each of soma's parts at this size, timed `--repeat` times: medians in seconds."""
    import torch

    torch.set_num_threads(1)
    from soma import fedavg
    from soma.nodes import export
    from soma.store import Store
    from soma.tasks import load_task
    from soma.tasks.resnet import parameter_count

    task = load_task(TASK, options_of(args))
    nodes = task.nodes(0)
    times: dict[str, list[float]] = {"export": [], "keep": [], "average": [],
                                     "average in memory": []}  # fmt: skip
    for i in range(args.repeat):
        tic = time.perf_counter()
        exported = [export(nodes)]
        times["export"].append(time.perf_counter() - tic)
        for _ in range(args.clients - 1):  # every weight changed, as training changes them
            exported.append(
                {n: {k: t + 1 for k, t in keys.items()} for n, keys in exported[0].items()}
            )
        store = Store(f"{folder}/parts-{i}")
        names = [f"client/{k}" for k in range(args.clients)]
        for name, export_k in zip(names, exported, strict=True):
            tic = time.perf_counter()
            store.keep(name, {"export": export_k, "size": 1})
            times["keep"].append(time.perf_counter() - tic)
        tic = time.perf_counter()
        fedavg((r["export"], r["size"]) for r in store.recall_each(names))
        times["average"].append(time.perf_counter() - tic)
        tic = time.perf_counter()
        fedavg(exported, [1] * len(exported))
        times["average in memory"].append(time.perf_counter() - tic)
    said = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps({**said, "parameters": parameter_count(nodes)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=96)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--examples", type=int, default=320, help="per client")
    parser.add_argument("--test-examples", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--pairs", type=int, default=1, help="floor, soma: alternated")
    parser.add_argument("--repeat", type=int, default=3, help="of each part's timing")
    parser.add_argument("--dir", default=None, help="where the stores are (default: $TMPDIR)")
    parser.add_argument("--out", default=None, help="the results file's folder")
    parser.add_argument("--floor-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--parts-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_child:
        return floor(args)
    if args.parts_child:
        return parts(args, args.parts_child)
    sizes = ["--width", str(args.width), "--image-size", str(args.image_size),
             "--examples", str(args.examples), "--test-examples", str(args.test_examples),
             "--batch-size", str(args.batch_size), "--clients", str(args.clients),
             "--rounds", str(args.rounds), "--repeat", str(args.repeat)]  # fmt: skip
    options = [x for k, v in options_of(args).items() for x in ("--option", f"{k}={v}")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    started = Started()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="soma-realsize-") as folder:
        commands = {
            "floor": lambda i: [sys.executable, __file__, "--floor-child", *sizes],
            "soma": lambda i: [sys.executable, "-m", "soma.cli", "simulate", "--task", TASK,
                               "--rounds", str(args.rounds), "--clients", str(args.clients),
                               *options, "--store", f"{folder}/store-{i}", "--evaluate", "none"],
        }  # fmt: skip
        rows = alternated(
            {row: (lambda i, c=c: timed(c(i), env=env, cwd=folder)) for row, c in commands.items()},
            args.pairs,
        )
        parts_line = timed([sys.executable, __file__, "--parts-child", folder, *sizes], env=env,
                           cwd=folder).last  # fmt: skip
    measured = json.loads(parts_line)
    lines = table(args, rows, measured)
    print("\n".join(lines))
    out = write_result("realsize", lines, started=started, out=args.out, pairs=str(args.pairs))
    print(f"(written to {out})")


def table(args: argparse.Namespace, rows: dict[str, list[Timed]], measured: dict) -> list[str]:
    """The printout, also the results file's run."""
    count = measured["parameters"]
    wall, cpu = (
        ratio(rows["soma"], rows["floor"], "wall")[0],
        ratio(rows["soma"], rows["floor"], "cpu")[0],
    )
    lines = [
        f"soma.tasks.resnet width {args.width}: {count:,} parameters ({4 * count / 1e6:.0f} MB "
        f"an export), {args.image_size}x{args.image_size} images, {args.clients} clients x "
        f"{args.examples} examples, {args.rounds} round(s), batch {args.batch_size}, 1 thread; "
        f"load {os.getloadavg()[0]:.1f} (uptime's 1-minute average, at the end)",
    ]
    for row, runs in rows.items():
        shown = ", ".join(f"wall {r.wall:.1f} s CPU {r.cpu:.1f} s" for r in runs)
        lines.append(f"{row:>6}: {shown}")
    met = "met" if wall <= 1.05 else "not met"
    lines.append(f"soma / floor: wall {wall:.3f} x, CPU {cpu:.3f} x (median of {len(rows['soma'])} "
                 f"pair(s); target wall <= 1.05: {met})")  # fmt: skip
    for part in ("export", "keep", "average", "average in memory"):
        seconds = measured[part]
        per = 4 * count * (args.clients if part.startswith("average") else 1) / seconds / 1e9
        lines.append(f"{part:>18}: {seconds:.3f} s ({per:.2f} GB/s of exports)")
    lines.append(f"floor's evaluation {rows['floor'][-1].last}")
    return lines


if __name__ == "__main__":
    main()
