"""What secure aggregation costs a round, against plain FedAvg over the same store.

    python benchmarks/secagg.py                    # 10 and 100 clients, ~9.6k floats
    python benchmarks/secagg.py --clients 10 --hidden 32 --drop 0.2

One round of N clients, simulated in one process (one thread, phase after phase: every
client's advertise, then every client's share, ...), each variant into a fresh store under
--dir:

- plain:    each client `store.keep`s {export, size}; the averager folds them with
            `soma.fedavg` streamed from the store (`recall_each`) and keeps the mean;
- secure:   soma.secagg's five phases for every client, then one `unmask` (and the mean);
- secure, drop: the same with --drop of the clients (default 10%) dying after `share`: the
            unmasker rebuilds their mask keys and takes their pairwise masks off every
            survivor's input (the barrier's wait for them is not counted: deadline 0).

The model is shaped like the digits MLP (soma/tasks/digits.py) with --hidden 128:
{"hidden": Linear(64, 128), "out": Linear(128, 10)}, 9,610 float32 values.

Columns: "clients s" is the clients' work summed over all of them (what the cluster spends),
wall clock, and "CPU s" the same in CPU time (without the waits for fsync, which a shared
disk makes noisy); "client ms" is one client's wall time (the mean; clients run side by side,
so this is what a round waits for on the clients' side); "averager s" the averaging (plain)
or unmasking (secure); "MB" the bytes of new files in the store (blobs and names) and
"files" their count (each a create, write, fsync and link: what a network folder pays per
file). "x" columns are ratios to plain at the same N: the times' the median of the rounds'
own (the variants of one N take turns, A B C C B A..., and each round's ratio compares two
variants run one after another). Times are the best of --repeats rounds.
The barriers' polling is not counted: everybody is always there.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from _measure import recorded  # noqa: E402

import soma  # noqa: E402
from soma import secagg  # noqa: E402
from soma.store import Store  # noqa: E402
from soma.timing import LEASE  # noqa: E402

torch.set_num_threads(1)
PREFIX = "bench/round/0"


def export_of(client: int, hidden: int) -> dict[str, dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(client)
    return {
        "hidden": {
            "weight": torch.randn(hidden, 64, generator=g) * 0.1,
            "bias": torch.randn(hidden, generator=g) * 0.1,
        },
        "out": {
            "weight": torch.randn(10, hidden, generator=g) * 0.1,
            "bias": torch.randn(10, generator=g) * 0.1,
        },
    }


def size_of(client: int) -> int:
    return 50 + (client * 37) % 150


class Clock:
    """Wall and CPU seconds since the last lap (CPU: this process's, so the disk's fsyncs, which
    another job on a shared machine can slow down, count in wall time only)."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def lap(self) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        spent = (wall - self.wall, cpu - self.cpu)
        self.wall, self.cpu = wall, cpu
        return spent


def footprint(directory: Path) -> tuple[int, int]:
    """(bytes, files) of the store's blobs and names."""
    total = files = 0
    for part in ("blobs", "names"):
        for folder, _, names in os.walk(directory / part):
            for name in names:
                total += os.stat(os.path.join(folder, name)).st_size
                files += 1
    return total, files


def plain(directory: Path, exports: list, sizes: list) -> dict:
    store = Store(directory)
    clock = Clock()
    for k, (export, size) in enumerate(zip(exports, sizes, strict=True)):
        store.keep(f"{PREFIX}/client/{k}", {"export": export, "size": size})
    clients = clock.lap()
    names = [f"{PREFIX}/client/{k}" for k in range(len(exports))]
    mean = soma.fedavg((r["export"], r["size"]) for r in store.recall_each(names))
    store.keep(f"{PREFIX}/average", mean)
    averager = clock.lap()
    return {"clients": clients, "averager": averager, "mean": mean}


def secure(directory: Path, exports: list, sizes: list, dropped: set[int]) -> dict:
    store = Store(directory)
    n = len(exports)
    session = secagg.Session(PREFIX, tuple(range(n)), n // 2 + 1)
    alive = [k for k in range(n) if k not in dropped]
    deadline = 0.0 if dropped else None  # nobody waits for the dead: not counted
    phase_times: dict[str, tuple[float, float]] = {}

    def timed(phase: str, clients: list[int], run) -> None:
        clock = Clock()
        for k in clients:
            run(k)
        phase_times[phase] = clock.lap()

    keep: dict[int, secagg.Secrets] = {}
    timed(
        "advertise",
        list(range(n)),
        lambda k: keep.__setitem__(k, secagg.advertise(store, session, k)),
    )
    timed("share", list(range(n)), lambda k: secagg.share(store, session, keep[k], deadline=None))
    timed(
        "masked",
        alive,
        lambda k: secagg.masked_input(store, session, keep[k], exports[k], sizes[k], deadline=None),
    )
    timed("reveal", alive, lambda k: secagg.reveal(store, session, keep[k], deadline=deadline))
    clock = Clock()
    weighted, total = secagg.unmask(store, session, deadline=None, lease=LEASE)
    mean = secagg.average(weighted, total, like=exports[0])
    averager = clock.lap()
    return {
        "clients": tuple(map(sum, zip(*phase_times.values(), strict=True))),
        "phases": phase_times,
        "averager": averager,
        "mean": mean,
        "alive": alive,
    }


def measure(where: Path, n: int, drop: set[int] | None, exports, sizes) -> dict:
    """One round of one variant into a fresh store `where`: its times, what it wrote, and how
    far its mean is from soma.fedavg's."""
    if drop is None:
        out = plain(where, exports, sizes)
        contributors = list(range(n))
    else:
        out = secure(where, exports, sizes, drop)
        contributors = out["alive"]
    written, files = footprint(where)
    shutil.rmtree(where)
    want = soma.fedavg([exports[k] for k in contributors], [sizes[k] for k in contributors])
    mean = out.pop("mean")
    error = max(
        (mean[node][key].double() - want[node][key].double()).abs().max().item()
        for node in want
        for key in want[node]
    )
    return {**out, "written": written, "files": files, "error": error}


def best_of(runs: list[dict]) -> dict:
    """The rounds of one variant: wall and CPU each at its best, and every round kept (for the
    ratios, round by round)."""
    best = {**runs[0], "runs": runs}
    for out in runs[1:]:
        for part in ("clients", "averager"):
            best[part] = tuple(map(min, best[part], out[part]))
        if "phases" in out:
            best["phases"] = {
                p: tuple(map(min, best["phases"][p], t)) for p, t in out["phases"].items()
            }
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", default="10,100")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--drop", type=float, default=0.1, help="fraction dying after share")
    parser.add_argument("--repeats", type=int, default=3, help="rounds a variant; the best")
    parser.add_argument("--dir", default=None, help="where the stores go (default: a temp dir)")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="soma-secagg-bench-", dir=args.dir))
    floats = sum(t.numel() for keys in export_of(0, args.hidden).values() for t in keys.values())
    print(
        f"model: digits MLP, hidden {args.hidden}: {floats} float32 ({floats * 4 / 1e3:.1f} kB); "
        f"torch {torch.__version__}, 1 thread, best of {args.repeats}, "
        f"load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    rows = []
    try:
        for n in [int(c) for c in args.clients.split(",")]:
            exports = [export_of(k, args.hidden) for k in range(n)]
            sizes = [size_of(k) for k in range(n)]
            dropped = set(range(n - max(1, round(args.drop * n)), n))
            variants = [
                ("plain", None),
                ("secure", set()),
                (f"secure, {len(dropped)} drop", dropped),
            ]
            runs: dict[str, list[dict]] = {label: [] for label, _ in variants}
            for attempt in range(args.repeats):  # in turns, A B C then C B A
                for label, drop in variants if attempt % 2 == 0 else variants[::-1]:
                    where = base / f"{n}-{label}-{attempt}"
                    runs[label].append(measure(where, n, drop, exports, sizes))
            for label, _ in variants:
                row = {"variant": label, "n": n, **best_of(runs[label])}
                rows.append(row)
                phases = ", ".join(
                    f"{p} {wall:.2f}/{cpu:.2f}" for p, (wall, cpu) in row.get("phases", {}).items()
                )
                print(
                    f"  N={n:<4} {label:<16} clients {row['clients'][0]:.2f} s "
                    f"(CPU {row['clients'][1]:.2f}), averager {row['averager'][0]:.3f} s, "
                    f"{row['written'] / 1e6:.2f} MB in {row['files']} files, "
                    f"|mean - fedavg| {row['error']:.1e}"
                    + (f"\n        phases, wall/CPU s: {phases}" if phases else ""),
                    flush=True,
                )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print()
    print(table(rows))
    return 0


def median_ratio(row: dict, ref: dict, part: str) -> float:
    """The median over the rounds of row's `part` wall seconds over plain's of the same turn."""
    return statistics.median(
        r[part][0] / p[part][0] for r, p in zip(row["runs"], ref["runs"], strict=True)
    )


def table(rows: list[dict]) -> str:
    head = (
        f"{'variant':<16} {'N':>4} {'clients s':>9} {'CPU s':>6} {'client ms':>9} "
        f"{'averager s':>10} {'MB':>6} {'files':>6} | {'x wall':>6} {'x CPU':>6} "
        f"{'x avg':>6} {'x bytes':>7} {'x files':>7}"
    )
    lines = [head, "-" * len(head)]
    base = {row["n"]: row for row in rows if row["variant"] == "plain"}
    for row in rows:
        ref = base[row["n"]]
        (wall, cpu), (avg, _) = row["clients"], row["averager"]
        cpus = statistics.median(
            r["clients"][1] / p["clients"][1] for r, p in zip(row["runs"], ref["runs"], strict=True)
        )
        lines.append(
            f"{row['variant']:<16} {row['n']:>4} {wall:>9.2f} {cpu:>6.2f} "
            f"{1e3 * wall / row['n']:>9.1f} {avg:>10.3f} {row['written'] / 1e6:>6.2f} "
            f"{row['files']:>6} | {median_ratio(row, ref, 'clients'):>6.1f} {cpus:>6.1f} "
            f"{median_ratio(row, ref, 'averager'):>6.1f} {row['written'] / ref['written']:>7.1f} "
            f"{row['files'] / ref['files']:>7.1f}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    with recorded("secagg"):  # a run that fails records nothing
        code = main()
    sys.exit(code)
