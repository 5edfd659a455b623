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

    python benchmarks/asynchronous.py --study [--seeds 0 1 2] [--versions 300]

`--study` is what the default staleness weight was chosen from (issue 56): the same
comparison on two tasks, each over `--seeds` (the clock's draws; training seeds stay 0): digits
with one local epoch under both tails, and `skewed`, the label-skewed digits (two labels a
client) with five local epochs under the severe tail (`--task skewed1`: one label a client), for
the weights (1 + s)^-a, a 0.5, 0.25 and 0 (constant). Each seed's rows as above, then a
summary per task, tail, target and weight: in how many seeds it reached the target, the
async/sync ratio of each seed and their median (a seed that never reached counts as
infinite), and the mean final and best accuracy over the seeds.
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
    # issue 56's second task: label-skewed digits, five local epochs (two labels a client, one)
    "skewed": ("soma.tasks.digits", {**OPTIONS, "epochs": 5}),
    "skewed1": ("soma.tasks.digits", {**OPTIONS, "epochs": 5, "labels_per_client": 1}),
    "shakespeare": ("soma.tasks.shakespeare", SHAKESPEARE),
}
SEVERITIES = {"mild": 0.5, "severe": 1.5}
# --study: (task, straggler tail) pairs, the weights' exponents and the seeds it runs
STUDY = (("skewed", "severe"), ("digits", "severe"), ("digits", "mild"))
STUDY_A = (0.5, 0.25, 0.0)
STUDY_SEEDS = (0, 1, 2)


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


def weight(a: float) -> str:
    """The staleness weight as the CLI spells it (`--staleness KIND[:A]`)."""
    return "constant" if a == 0 else f"poly:{a:g}"


def compare(which: str, severity: str, seed: int, args, table: list[dict]) -> list[str]:
    """One (task, tail, seed): print its rows, append them to `table`, return its notes."""
    from soma.asynchronous.clock import Clock

    sigma = SEVERITIES[severity]
    clock = Clock(seed=seed, sigma=sigma, queue=args.queue)
    s_curve, s_wall = synchronous(args.clients, args.rounds, clock, which)
    runs = {
        a: asynchronous(args.clients, args.versions, args.buffer, clock, a, which) for a in args.a
    }
    for target in args.targets:
        s_time, s_n = first(s_curve, target)
        for a, (a_curve, _, _) in runs.items():
            a_time, a_n = first(a_curve, target)
            ratio = a_time / s_time if s_time < float("inf") else float("nan")
            table.append(
                {"task": which, "tail": severity, "target": target, "a": a, "seed": seed,
                 "ratio": ratio, "final": a_curve[-1][1], "best": max(x for _, x in a_curve),
                 "s_final": s_curve[-1][1], "s_best": max(x for _, x in s_curve)}
            )  # fmt: skip
            print(
                f"{which:<8} {seed:>4} {severity + f' ({sigma})':<13} {target:>6.2f} "
                f"{s_time:>7.1f} {s_n or '-':>6} {weight(a):>9} {a_time:>7.1f} "
                f"{a_n or '-':>8} {ratio:>10.2f}"
            )
    notes = []
    for a, (a_curve, a_wall, stale) in runs.items():
        p90 = statistics.quantiles(stale, n=10)[-1] if len(stale) > 1 else 0
        notes.append(
            f"{which}, seed {seed}, {severity}, {weight(a)}: staleness of consumed updates mean "
            f"{statistics.mean(stale):.2f}, p90 {p90:.0f}, max {max(stale)}; accuracy "
            f"final/best sync {s_curve[-1][1]:.3f}/{max(x for _, x in s_curve):.3f}, async "
            f"{a_curve[-1][1]:.3f}/{max(x for _, x in a_curve):.3f}; wall s sync "
            f"{s_wall:.1f}, async {a_wall:.1f}"
        )
    return notes


def summary(table: list[dict], versions: int) -> None:
    """Per task, tail, target and weight, over the seeds: how many reached the target, each
    seed's async/sync ratio ('-': not in `versions` versions) and their median (a seed that
    never reached counts as infinite), and the mean final and best accuracy."""
    print(
        f"\nover seeds  {'task':<8} {'stragglers':<10} {'target':>6} {'weight':>9} "
        f"{'reached':>7} {'async/sync per seed':<22} {'median':>6} {'final':>5} {'best':>5}"
    )
    keys = dict.fromkeys((r["task"], r["tail"], r["target"], r["a"]) for r in table)
    for task, tail, target, a in keys:
        rows = [r for r in table if (r["task"], r["tail"], r["target"], r["a"]) == (task, tail,
                target, a)]  # fmt: skip
        ratios = [r["ratio"] for r in rows]
        reached = [x for x in ratios if x == x and x < float("inf")]
        median = statistics.median([x if x == x else float("inf") for x in ratios])
        each = " ".join("-" if not (x == x and x < float("inf")) else f"{x:.2f}" for x in ratios)
        print(
            f"{'':<12}{task:<8} {tail:<10} {target:>6.2f} {weight(a):>9} "
            f"{f'{len(reached)}/{len(rows)}':>7} {each:<22} "
            f"{'-' if median == float('inf') else f'{median:.2f}':>6} "
            f"{statistics.mean(r['final'] for r in rows):>5.3f} "
            f"{statistics.mean(r['best'] for r in rows):>5.3f}"
        )
    for task, tail in dict.fromkeys((r["task"], r["tail"]) for r in table):
        rows = [r for r in table if (r["task"], r["tail"]) == (task, tail)]
        by_seed = {r["seed"]: r for r in rows}.values()
        print(
            f"{'':<12}{task:<8} {tail:<10} synchronous final "
            f"{statistics.mean(r['s_final'] for r in by_seed):.3f}, best "
            f"{statistics.mean(r['s_best'] for r in by_seed):.3f} (mean over seeds; "
            f"asynchronous runs {versions} versions)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(TASKS), default="digits")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--buffer", type=int, default=3)
    parser.add_argument("--targets", type=float, nargs="+", default=[0.9, 0.92, 0.95])
    parser.add_argument("--rounds", type=int, default=40, help="synchronous rounds run")
    parser.add_argument("--versions", type=int, default=300, help="asynchronous versions run")
    parser.add_argument("--queue", type=float, default=1.0, help="median first-job queue wait")
    parser.add_argument("--seed", type=int, default=None, help="one seed (0 unless --seeds)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="several seeds")
    parser.add_argument(
        "--a", type=float, nargs="+", default=None,
        help="staleness weights (1 + s)^-a (0.5 0, or 0.5 0.25 0 with --study)",
    )  # fmt: skip
    parser.add_argument(
        "--study", action="store_true",
        help=f"both tasks and tails {STUDY}, seeds {STUDY_SEEDS}: the default's evidence",
    )  # fmt: skip
    args = parser.parse_args()
    if args.seeds is None:
        args.seeds = (
            [args.seed] if args.seed is not None else list(STUDY_SEEDS if args.study else [0])
        )
    if args.a is None:
        args.a = list(STUDY_A) if args.study else [0.5, 0.0]
    import torch

    torch.set_num_threads(1)
    pairs = STUDY if args.study else tuple((args.task, name) for name in SEVERITIES)
    print(
        f"{', '.join(f'{t} ({TASKS[t][1]})' for t in dict.fromkeys(t for t, _ in pairs))}; "
        f"{args.clients} clients, buffer {args.buffer}, {args.rounds} rounds against "
        f"{args.versions} versions, seeds {args.seeds}, load {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'task':<8} {'seed':>4} {'stragglers':<13} {'target':>6} {'sync s':>7} {'rounds':>6} "
        f"{'weight':>9} {'async s':>7} {'versions':>8} {'async/sync':>10}"
    )
    notes: list[str] = []
    table: list[dict] = []
    for which, severity in pairs:
        for seed in args.seeds:
            notes += compare(which, severity, seed, args, table)
    print("\n".join(notes))
    summary(table, args.versions)


if __name__ == "__main__":
    with recorded("asynchronous"):
        main()
