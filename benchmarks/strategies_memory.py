"""What the robust strategies cost against FedAvg, on the same exports read from the store.

    python benchmarks/strategies_memory.py                     # 8 clients x 50MB
    python benchmarks/strategies_memory.py --size 200MB --clients 16 --repeats 2

N exports of a ViT-like float32 model with a BatchNorm stem (the layout of
benchmarks/fedavg.py, an int64 count included) are kept in a soma.Store in a temporary
folder. Then each strategy runs in a fresh process (`_measure.run_child`) on the same
exports, recalled lazily from the store (file-backed mmaps, verified), with the blobs
dropped from the page cache before each process so that every one reads them the same way:

- fedavg:        streams: `aggregate` is handed a generator over `recall_each_digest`, so
                 one export is mapped at a time (two while the next is recalled);
- median, trimmed_mean (beta 0.2), krum (f 1), multi-krum (f 1, m 3): not streaming, they
                 take `list(updates)`, so all N exports are mapped at once, and work key by
                 key in blocks of `soma.strategies._columns.BLOCK` numbers across clients;
                 with bucket 2, the bucket means are taken on those blocks;
- centered_clip (iterations 1): streams, from the round's start (the first export,
                 recalled lazily once more); fedavg with norm_bound: reads the updates
                 twice (their norms, then the clipped ones), so all N are mapped at once.

Columns: time is the best of --repeats, recall and hash verification included. "peak RSS"
is the kernel's high-water mark (VmHWM) less the idle process: anonymous memory plus the
store's mapped file pages. "peak anon" is RssAnon sampled every 2 ms, less the idle
process's: what the process itself allocated. Mapped file pages are clean page cache: they
count in RSS (and in a Slurm job's cgroup), but the kernel takes them back when it needs
memory, which it cannot do with anonymous memory. Both are also given in models (xM), and
as ratios against fedavg measured in the same run.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import _measure  # noqa: E402

STRATEGIES = {
    "fedavg": ("fedavg", {}),
    "median": ("median", {}),
    "trimmed_mean": ("trimmed_mean", {"beta": 0.2}),
    "krum": ("krum", {"f": 1, "m": 1}),
    "multi-krum": ("krum", {"f": 1, "m": 3}),
    "median bucket 2": ("median", {"bucket": 2}),
    "krum bucket 2": ("krum", {"f": 0, "bucket": 2}),  # 8 clients: 4 buckets
    "centered_clip": ("centered_clip", {}),
    "fedavg norm_bound 2": ("fedavg", {"norm_bound": 2.0}),
}


# --- The exports, kept once in the store --------------------------------------------------


def fill_store(folder: Path, target: int, clients: int) -> tuple[list[str], int]:
    """N exports of ~target bytes kept in a store at `folder`: their digests, model bytes."""
    import torch
    from fedavg import layout, layout_bytes, make_model  # benchmarks/fedavg.py

    from soma import Store

    torch.set_num_threads(1)
    spec = layout(target)
    store = Store(folder)
    digests = []
    for client in range(clients):
        digests.append(store.put_value(make_model(spec, client)))
    return digests, layout_bytes(spec)[0]


def sizes(clients: int) -> list[float]:
    return [100.0 + 37 * i for i in range(clients)]


def drop_cache(folder: Path) -> None:
    """Drop the store's (synced) files from the page cache, so every child reads them cold."""
    for file in folder.rglob("*"):
        if file.is_file():
            fd = os.open(file, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


# --- One measurement, in a fresh process ---------------------------------------------------


def status_bytes() -> dict[str, int]:
    found = {}
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(("RssAnon:", "RssFile:")):
                name, value = line.split(":")
                found[name[3:].lower()] = int(value.split()[0]) * 1024
    return found


class Sampler:
    """The highest RssAnon and RssFile seen, sampled every 2 ms: the kernel keeps no peak of
    anonymous memory alone (VmHWM counts the mapped file pages too)."""

    def __init__(self) -> None:
        self.peak = {"anon": 0, "file": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, value in status_bytes().items():
                self.peak[name] = max(self.peak[name], value)
            time.sleep(0.002)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        for name, value in status_bytes().items():
            self.peak[name] = max(self.peak[name], value)


def recalled(store, digests: list[str]):
    """The clients' updates, each export recalled lazily only when asked for.

    Not `zip(sizes, store.recall_each_digest(...))`: zip keeps its last result tuple for
    reuse, which holds on to an export already folded (one more model mapped)."""
    from soma.strategies import Update

    exports = store.recall_each_digest(digests, lazy=True)
    for client, size in enumerate(sizes(len(digests))):
        yield Update(client, size, next(exports))


def run_strategy(job: dict, store, digests: list[str]):
    from soma.strategies import at_round, load_strategy, needs_previous

    strategy = at_round(load_strategy(job["strategy"], job["options"]), round=0, seed=0)
    start = store.recall_digest(digests[0], lazy=True) if needs_previous(strategy) else {}
    weights, _ = strategy.aggregate(start, recalled(store, digests), None, clients=len(digests))
    return weights


def warm_up(job: dict, folder: Path) -> None:
    """Run the strategy once on a toy store, so lazy initialisation is not measured."""
    from soma import Store

    toy = Path(folder).parent / f"warm-{os.getpid()}"
    try:
        digests, _ = fill_store(toy, 10**5, len(job["digests"]))
        run_strategy(job, Store(toy), digests)
    finally:
        shutil.rmtree(toy, ignore_errors=True)


def child(job: dict) -> None:
    import torch

    from soma import Store

    torch.set_num_threads(job["threads"])
    folder = Path(job["folder"])
    warm_up(job, folder)
    store = Store(folder)
    times, peaks, anons, files = [], [], [], []
    for _ in range(job["repeats"]):
        drop_cache(folder / "blobs")
        gc.collect()
        _measure.trim()
        idle, idle_anon = _measure.rss_bytes(), status_bytes()["anon"]
        _measure.reset_peak_rss()
        with Sampler() as sampler:
            start = time.perf_counter()
            weights = run_strategy(job, store, job["digests"])
            times.append(time.perf_counter() - start)
        peaks.append(_measure.peak_rss_bytes() - idle)
        anons.append(sampler.peak["anon"] - idle_anon)
        files.append(sampler.peak["file"])
        del weights
    _measure.emit({"times": times, "peak": max(peaks), "anon": max(anons), "file": max(files)})


# --- The parent: fill the store, run the children, tabulate ----------------------------------


def table(rows: list[dict], model: int) -> str:
    head = (
        f"{'strategy':<13} {'time s':>7} {'vs fedavg':>9} {'peak RSS MB':>11} {'xM':>5} "
        f"{'vs fedavg':>9} {'peak anon MB':>12} {'xM':>5} {'vs fedavg':>9}"
    )
    lines = [head, "-" * len(head)]
    base = next((r for r in rows if r["name"] == "fedavg" and "times" in r), None)

    def ratio(row: dict, field: str) -> str:
        if base is None:
            return "-"
        ours = min(row["times"]) if field == "times" else row[field]
        theirs = min(base["times"]) if field == "times" else base[field]
        return f"{ours / theirs:.2f}" if theirs > 0 else "-"

    for row in rows:
        if "times" not in row:
            lines.append(f"{row['name']:<13} {row.get('error', row.get('skipped'))}")
            continue
        lines.append(
            f"{row['name']:<13} {min(row['times']):>7.2f} {ratio(row, 'times'):>9} "
            f"{row['peak'] / 1e6:>11.0f} {row['peak'] / model:>5.2f} {ratio(row, 'peak'):>9} "
            f"{row['anon'] / 1e6:>12.0f} {row['anon'] / model:>5.2f} {ratio(row, 'anon'):>9}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="50MB", help="of one export (decimal: 1MB = 1e6 B)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dir", default=None, help="where the temporary store goes")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(json.loads(args.child))
        return 0
    names = [name.strip() for name in args.strategies.split(",")]
    unknown = [name for name in names if name not in STRATEGIES]
    if unknown:
        parser.error(f"unknown strategies {unknown}; known: {', '.join(STRATEGIES)}")
    with _measure.recorded("strategies_memory", pairs=f"best of {args.repeats} a row"):
        return measure(args, names)


def measure(args: argparse.Namespace, names: list[str]) -> int:
    """Every strategy's time and peak memory on the same store's exports, and their table."""
    target = _measure.parse_size(args.size)

    import torch

    work = Path(tempfile.mkdtemp(prefix="soma-strategies-", dir=args.dir))
    try:
        start = time.perf_counter()
        digests, model = fill_store(work / "store", target, args.clients)
        print(
            f"torch {torch.__version__}, threads {args.threads}, {args.clients} exports of "
            f"{model / 1e6:.1f} MB kept in {time.perf_counter() - start:.1f} s, "
            f"MemAvailable {_measure.memory_available_bytes() / 2**30:.1f} GiB, "
            f"load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        rows = []
        for name in names:
            strategy, options = STRATEGIES[name]
            row: dict = {"name": name}
            need = (args.clients + 4) * model + 600 * 10**6
            if need > 0.9 * _measure.memory_available_bytes():
                row["skipped"] = f"skipped: needs ~{need / 1e9:.1f} GB"
            else:
                job = {
                    "strategy": strategy,
                    "options": options,
                    "folder": str(work / "store"),
                    "digests": digests,
                    "repeats": args.repeats,
                    "threads": args.threads,
                }
                row.update(_measure.run_child([__file__, "--child", json.dumps(job)], args.threads))
            rows.append(row)
            done = f"{min(row['times']):.2f} s" if "times" in row else row.get("error", "")
            print(f"  {name:<13} {done}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(table(rows, model))
    print(
        f"\nxM: in models of {model / 1e6:.1f} MB. peak RSS counts the store's mapped pages "
        "(page cache the kernel can take back); peak anon is the process's own memory."
    )
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (on {os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
