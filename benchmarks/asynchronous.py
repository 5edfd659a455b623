"""Time to accuracy on a simulated clock: synchronous rounds against asynchronous buffers
(FedBuff) under stragglers (issue 36).

    python benchmarks/asynchronous.py [--clients 10] [--buffer 3] [--targets 0.9 0.92 0.95]
    python benchmarks/asynchronous.py --task shakespeare --rounds 15 --versions 50 --a 0 \
        --targets 0.25 0.3 0.35

Digits (soma.tasks.digits, two labels a client, a softmax, one local epoch), or LEAF's
Shakespeare as config/shakespeare.yaml reduces it (`--task shakespeare`, the first roles).
Every client's n-th job takes `speed_k * jitter` simulated seconds, both log-normal and drawn
from the seed (soma.asynchronous.clock.Clock), its first job waiting in a log-normal queue as
well; a mild and a severe straggler tail (sigma of the speeds). A synchronous round waits for
its slowest client (`Clock.round_seconds`, the same draws); an asynchronous run makes a
version from every `--buffer` updates, each weighed by its staleness ((1 + s)^-a, for each
`--a`: FedBuff's 0.5 and a constant 0). Each row: the simulated seconds until the test
accuracy first reaches a target (and the rounds or versions it took), and the asynchronous
run's over the synchronous one's (the baseline, run in the same process from the same
draws); then, per severity, the staleness of the updates the asynchronous run consumed, each
run's best accuracy and the wall seconds each took here (both go through soma's store, a
temporary folder).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from _measure import recorded

os.environ.setdefault("OMP_NUM_THREADS", "1")

OPTIONS = {"epochs": 1, "labels_per_client": 2, "model": "softmax"}
# config/shakespeare.yaml's task, its roles the clients (`--task shakespeare`)
SHAKESPEARE = {"model": "small", "max_windows": 1000, "test_windows": 2000, "lr": 0.8}
TASKS = {
    "digits": ("soma.tasks.digits", OPTIONS),
    "shakespeare": ("soma.tasks.shakespeare", SHAKESPEARE),
}
SEVERITIES = {"mild": 0.5, "severe": 1.5}


def synchronous(
    clients: int, rounds: int, clock, which: str = "digits"
) -> tuple[list[tuple[float, float]], float]:
    """Each round's (simulated seconds, test accuracy) of `soma simulate`'s FedAvg, and the
    wall seconds it took."""
    from soma.run.simulate import simulate
    from soma.tasks import load_task

    path, options = TASKS[which]
    task = load_task(path, options)
    curve: list[tuple[float, float]] = []

    def after(done, driven) -> None:
        now = (curve[-1][0] if curve else 0.0) + clock.round_seconds(done.round, clients)
        curve.append((now, task.evaluate(driven.nodes)["accuracy"]))

    started = time.perf_counter()
    simulate(path, clients=clients, rounds=rounds, task_options=options, after=after)
    return curve, time.perf_counter() - started


def asynchronous(
    clients: int, versions: int, buffer: int, clock, a: float = 0.5, which: str = "digits"
):
    """Each version's (simulated seconds, test accuracy), the wall seconds it took, and the
    staleness of every update it consumed."""
    from soma.asynchronous.clock import simulate_clock
    from soma.config.spec import RunSpec
    from soma.run import checked
    from soma.store import Store

    spec = RunSpec(
        run="bench", task=TASKS[which][0], clients=clients, rounds=versions,
        task_options=TASKS[which][1], mine=tuple(range(clients)), given="library",
        durability="scratch",
        asynchronous={"buffer": buffer, "staleness": {"kind": "polynomial", "a": a}},
    )  # fmt: skip
    task, strategy = checked.checked(spec)
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        store = Store(folder, durability="scratch")  # as soma simulate's temporary store
        line = simulate_clock(spec, store, task, strategy, clock, evaluate=task.evaluate)
        wall = time.perf_counter() - started
    curve = [(t, m["accuracy"]) for t, m in zip(line.times[1:], line.metrics[1:], strict=True)]
    return curve, wall, sum(line.staleness, [])


def first(curve: list[tuple[float, float]], target: float) -> tuple[float, int | None]:
    """(simulated seconds, rounds or versions) when the accuracy first reaches `target`."""
    for i, (when, accuracy) in enumerate(curve):
        if accuracy >= target:
            return when, i + 1
    return float("inf"), None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(TASKS), default="digits")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--buffer", type=int, default=3)
    parser.add_argument("--targets", type=float, nargs="+", default=[0.9, 0.92, 0.95])
    parser.add_argument("--rounds", type=int, default=40, help="synchronous rounds run")
    parser.add_argument("--versions", type=int, default=300, help="asynchronous versions run")
    parser.add_argument("--queue", type=float, default=1.0, help="median first-job queue wait")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--a", type=float, nargs="+", default=[0.5, 0.0], help="staleness weights (1 + s)^-a"
    )
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    from soma.asynchronous.clock import Clock

    print(
        f"{args.task}, {args.clients} clients, buffer {args.buffer}, {args.rounds} rounds against "
        f"{args.versions} versions, load {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'stragglers':<18} {'target':>6} {'sync s':>7} {'rounds':>6} {'a':>4} {'async s':>7} "
        f"{'versions':>8} {'async/sync':>10}"
    )
    notes = []
    for name, sigma in SEVERITIES.items():
        clock = Clock(seed=args.seed, sigma=sigma, queue=args.queue)
        s_curve, s_wall = synchronous(args.clients, args.rounds, clock, args.task)
        runs = {
            a: asynchronous(args.clients, args.versions, args.buffer, clock, a, args.task)
            for a in args.a
        }
        for target in args.targets:
            s_time, s_n = first(s_curve, target)
            for a, (a_curve, _, _) in runs.items():
                a_time, a_n = first(a_curve, target)
                ratio = a_time / s_time if s_time < float("inf") else float("nan")
                print(
                    f"{name + f' (sigma {sigma})':<18} {target:>6.2f} {s_time:>7.1f} "
                    f"{s_n or '-':>6} {a:>4g} {a_time:>7.1f} {a_n or '-':>8} {ratio:>10.2f}"
                )
        for a, (a_curve, a_wall, stale) in runs.items():
            p90 = statistics.quantiles(stale, n=10)[-1] if len(stale) > 1 else 0
            notes.append(
                f"{name}, a {a:g}: staleness of consumed updates mean "
                f"{statistics.mean(stale):.2f}, p90 {p90:.0f}, max {max(stale)}; "
                f"best accuracy sync {max(x for _, x in s_curve):.3f}, "
                f"async {max(x for _, x in a_curve):.3f}; "
                f"wall s sync {s_wall:.1f}, async {a_wall:.1f}"
            )
    print("\n".join(notes))


if __name__ == "__main__":
    with recorded("asynchronous"):
        main()
