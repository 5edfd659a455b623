"""The checks that need a GPU, in one script of a few minutes on one GPU (issue 53, item 8).

    python benchmarks/gpu.py                 # on cuda: soma.tasks.resnet at width 64 (11.2M)
    python benchmarks/gpu.py --dry           # on the CPU at a tiny size (the suite runs it)

On one device (`cuda`, or the CPU with --dry), soma.tasks.resnet's clients:

1. bits: client 0 trained twice from the same start and seed (torch's deterministic
   algorithms on: CUBLAS_WORKSPACE_CONFIG set, cuDNN's benchmark off) gives the same bits, or
   says it does not; every export is on the CPU whatever trained it;
2. the average: `soma.simulate` of `--clients` clients, one round, trained on the device,
   against the same clients trained by hand on the device and their exports averaged by
   `soma.fedavg` on the CPU: the same bits (soma averages on the CPU, so a GPU changes what
   is trained, never how it is averaged); and the hand-made exports averaged again after a
   round trip through the GPU and back (`.cuda().cpu()`): the same bits too;
3. step time: the task's training step (its DataLoader, soma's SGD, autocast) against a
   plain loop on the same device (the same nodes as one nn.Sequential, the same batches
   sliced from tensors already there, torch's SGD), each the median of `--steps` timed steps
   after warm-up, synchronized;
4. peak memory: torch.cuda.max_memory_allocated over one client's training (n/a on the CPU);
5. precision: `--rounds` rounds of `soma.simulate` at fp32 and at bf16 (autocast), and the
   test accuracy and loss of each.

The table is printed and written as the newest run of benchmarks/results/gpu.md (`--out DIR`:
that folder's gpu.md). A --dry run, a smoke test, writes only where it is told (`--out`, or
$SOMA_BENCHMARK_RESULTS), so that it never replaces a GPU's recorded run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _measure, also when imported

from _measure import RESULTS_ENV, Started, write_result  # noqa: E402

SIZES = {
    "gpu": {"width": 64, "image_size": 32, "examples": 512, "test_examples": 512,
            "batch_size": 64},
    "dry": {"width": 4, "image_size": 8, "examples": 16, "test_examples": 16, "batch_size": 8},
}  # fmt: skip
TASK = "soma.tasks.resnet"


def _deterministic() -> tuple[bool, bool]:
    """torch's deterministic algorithms, before CUDA is first touched (warn only: an op
    without a deterministic kernel still runs, and check 1 says whether the bits held); the
    settings it replaced."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    before = torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    return before


def _same(a: dict, b: dict) -> bool:
    import torch

    return a.keys() == b.keys() and all(
        a[n].keys() == b[n].keys() and all(torch.equal(a[n][k], b[n][k]) for k in a[n]) for n in a
    )


def _on_cpu(exported: dict) -> bool:
    return all(t.device.type == "cpu" for keys in exported.values() for t in keys.values())


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bits_and_average(options: dict, clients: int) -> list[str]:
    """Checks 1 and 2."""
    import torch

    import soma
    from soma.nodes import export, load
    from soma.tasks import load_task
    from soma.training import training_seed

    task = load_task(TASK, options)
    start = export(task.nodes(0))
    exports, sizes = [], []
    for k in range(clients):
        nodes = task.nodes(0)
        load(nodes, start)
        data = task.shard(k, clients)
        task.train(nodes, data, seed=training_seed(0, 0, k))
        exports.append(export(nodes))
        sizes.append(task.size(data))
    again = task.nodes(0)
    load(again, start)
    task.train(again, task.shard(0, clients), seed=training_seed(0, 0, 0))
    by_hand = soma.fedavg(exports, sizes)
    run = soma.simulate(TASK, clients=clients, rounds=1, task_options=options)
    lines = [
        f"bits: client 0 trained twice, the same bits: {_same(export(again), exports[0])}; "
        f"every export on the CPU: {all(_on_cpu(e) for e in exports)}",
        f"average: soma.simulate's round on {task._device} == soma.fedavg on the CPU of the "
        f"clients trained by hand there: {_same(export(run.nodes), by_hand)}",
    ]
    if torch.cuda.is_available():
        there = [{n: {k: t.cuda().cpu() for k, t in keys.items()} for n, keys in e.items()}
                 for e in exports]  # fmt: skip
        lines.append(f"average: the same exports after a round trip through the GPU average "
                     f"to the same bits: {_same(soma.fedavg(there, sizes), by_hand)}")  # fmt: skip
    return lines


def step_times(options: dict, steps: int) -> list[str]:
    """Checks 3 and 4: the task's step and a plain loop's, on the same device, and the
    peak memory of one client's training."""
    import torch

    from soma.tasks import load_task

    task = load_task(TASK, options)
    device = task._device
    batch = task.batch_size
    x, y = task.shard(0, 1)
    enough = (steps + 2) * batch  # warm-up and timed steps from one shard
    copies = -(-enough // len(y))
    x, y = x.repeat(copies, 1, 1, 1)[:enough], y.repeat(copies)[:enough]
    nodes = task.nodes(0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    _sync(device)
    tic = time.perf_counter()
    task.train(nodes, (x, y), seed=0)
    _sync(device)
    total = time.perf_counter() - tic
    ours = total / (steps + 2)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    model = torch.nn.Sequential(*task.nodes(0).values()).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=task.lr, momentum=task.momentum)
    xs, ys = x.to(device), y.to(device)
    timed = []
    for i in range(steps + 2):
        _sync(device)
        tic = time.perf_counter()
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xs[i * batch : (i + 1) * batch]),
                                                 ys[i * batch : (i + 1) * batch])  # fmt: skip
        loss.backward()
        optimizer.step()
        _sync(device)
        timed.append(time.perf_counter() - tic)
    plain = statistics.median(timed[2:])
    shown = "n/a (the CPU)" if peak is None else f"{peak / 2**20:.0f} MiB"
    return [
        f"step: the task's {1e3 * ours:.1f} ms (its whole training / steps, warm-up included),"
        f" a plain loop's {1e3 * plain:.1f} ms (median), {ours / plain:.2f} x; batch {batch}",
        f"peak GPU memory of one client's training: {shown}",
    ]


def precisions(options: dict, clients: int, rounds: int, cuda: bool) -> list[str]:
    """Check 5: the same run at fp32 and at bf16 (and fp16 on a GPU)."""
    import soma

    lines = []
    for precision in ("fp32", "bf16", "fp16") if cuda else ("fp32", "bf16"):
        tic = time.perf_counter()
        run = soma.simulate(TASK, clients=clients, rounds=rounds,
                            task_options={**options, "precision": precision})  # fmt: skip
        said = ", ".join(f"{k} {v:.4f}" for k, v in sorted(run.evaluation.items()))
        lines.append(f"precision {precision}: {said} after {rounds} rounds "
                     f"({time.perf_counter() - tic:.1f} s)")  # fmt: skip
    return lines


def main(argv: Sequence[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry", action="store_true", help="on the CPU, at a tiny size")
    parser.add_argument("--width", type=int, default=None)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="of each precision's run")
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--out", default=None, help="the results file's folder")
    args = parser.parse_args(argv)
    import torch

    if not args.dry and not torch.cuda.is_available():
        raise SystemExit("benchmarks/gpu.py: torch sees no GPU; run it on a GPU node, or --dry")
    threads, before = torch.get_num_threads(), _deterministic()
    torch.set_num_threads(1)
    try:
        return _measured(args, Started() if argv is None else Started(argv=(__file__, *argv)))
    finally:  # as they were: the suite runs --dry in its own process's torch
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(before[0])
        torch.backends.cudnn.benchmark = before[1]


def _measured(args: argparse.Namespace, started: Started) -> list[str]:
    import torch

    options = {**SIZES["dry" if args.dry else "gpu"], "device": "cpu" if args.dry else "cuda"}
    if args.width is not None:
        options["width"] = args.width
    from soma.tasks import load_task
    from soma.tasks.resnet import parameter_count

    count = parameter_count(load_task(TASK, options).nodes(0))
    where = "the CPU (--dry)" if args.dry else torch.cuda.get_device_name(0)
    lines = [f"soma.tasks.resnet {options}: {count:,} parameters, on {where}; torch "
             f"{torch.__version__}"]  # fmt: skip
    lines += bits_and_average(options, args.clients)
    lines += step_times(options, args.steps)
    lines += precisions(options, args.clients, args.rounds, cuda=not args.dry)
    print("\n".join(lines))
    if args.dry and args.out is None and not os.environ.get(RESULTS_ENV):
        return lines
    out = write_result("gpu", lines, started=started, out=args.out, notes=notes(args))
    print(f"(written to {out})", file=sys.stderr)
    return lines


def notes(args: argparse.Namespace) -> list[str]:
    """What a reader of the results file must know: a --dry run is no GPU's figure."""
    return ["A --dry run: on the CPU at a tiny size, no GPU's figure."] if args.dry else []


if __name__ == "__main__":
    main()
