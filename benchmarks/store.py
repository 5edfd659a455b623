"""How fast the store keeps and recalls an export, against the disk and the hash it is made of.

    python benchmarks/store.py [--sizes 100MB,1GB] [--fedavg-size 100MB] [--n 8] [--dir /tmp]
    python benchmarks/store.py --sizes 100MB --fedavg-size 1GB --n 4 --fedavg-on bucket

For each size, one float32 export of ~130 tensors (65 weight/bias pairs, one node by
default), and in the same run, on the same bytes:

- write+fsync: the tensors' bytes written to one file and fsynced (the disk's best);
- sha256: hashlib over the same bytes in memory (the hash's best);
- keep: `store.keep` of the export, every weight changed since the last keep (as training
  does), into a fresh store, fsyncs included (target >= 0.7 x the slower of the two): the
  store predicts a new blob and writes it while it hashes it; "keep again": the same export
  once more (predicted there: hashed, nothing new written); "beside": both with
  `Store(..., write_beside_hash=True)`, which always writes while it hashes;
- read (cold): that file read back after dropping it from the page cache;
- recall (cold): `store.recall` after dropping the blobs from the page cache, eager and
  lazy, verification included (target >= 0.8 x read: "recall/read", the faster of the
  two); and the eager recall against the slower of cold read and sha256 ("recall/min",
  issue 34's target >= 0.8).

Then fedavg of N exports kept in the store, each variant in its own interpreter: streamed
(`fedavg((r["export"], r["size"]) for r in store.recall_each(names))`) against loading them
all first; time, and peak memory (RssAnon and RssShmem sampled every millisecond, less what
the interpreter held before: a bucket store keeps a large blob it read in a memfd, which is
shared memory, not anonymous) in models (target for streamed: <= 1.2). `--fedavg-on bucket`
keeps the N exports on a bucket instead of a folder: SeaweedFS started on loopback as
benchmarks/s3_round.py starts it, or AWS_ENDPOINT_URL's (then --bucket, which must exist).

Times are the best of --repeat runs. Everything is written under --dir and removed after.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from soma.store import Store  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _measure  # noqa: E402

torch.set_num_threads(1)
CHUNK = 16 << 20


def human(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def make_export(nbytes: int, seed: int, pairs: int = 65, nodes: int = 1) -> dict:
    """~`nbytes` of float32 in `pairs` weight/bias pairs, spread over `nodes` nodes."""
    g = torch.Generator().manual_seed(seed)
    width = 1024
    rows = max(1, (nbytes // 4 - pairs * width) // (pairs * width))
    export: dict[str, dict[str, torch.Tensor]] = {f"node{i}": {} for i in range(nodes)}
    for i in range(pairs):
        node = export[f"node{i % nodes}"]
        node[f"layer{i}.weight"] = torch.rand(rows, width, generator=g)
        node[f"layer{i}.bias"] = torch.rand(width, generator=g)
    return export


def tensor_views(export: dict) -> list[memoryview]:
    return [
        memoryview(t.reshape(-1).view(torch.uint8).numpy())
        for node in export.values()
        for t in node.values()
    ]


def drop_cache(path: Path) -> None:
    """Drop a (synced) file or every file under a folder from the page cache."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for file in files:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def timed(run, before=None) -> float:
    if before is not None:
        before()
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def bench_size(work: Path, nbytes: int, repeat: int, nodes: int) -> dict[str, float]:
    export = make_export(nbytes, seed=1, nodes=nodes)
    views = tensor_views(export)
    total = sum(len(v) for v in views)
    raw = work / "raw.bin"

    def write_raw() -> None:
        fd = os.open(raw, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for v in views:
                while len(v):
                    v = v[os.write(fd, v) :]
            os.fsync(fd)
        finally:
            os.close(fd)

    def read_raw() -> None:
        buffer = bytearray(CHUNK)
        with open(raw, "rb", buffering=0) as f:
            while f.readinto(buffer):
                pass

    def sha() -> None:
        h = hashlib.sha256()
        for v in views:
            h.update(v)

    folder = work / "store"

    def fresh_store() -> None:
        shutil.rmtree(folder, ignore_errors=True)
        os.sync()  # the removal's own writes done before the next timed step, not during it

    def no_raw() -> None:
        raw.unlink(missing_ok=True)
        os.sync()

    def keep(beside: bool | None = None) -> None:
        Store(folder, write_beside_hash=beside).keep("bench", {"export": export, "size": 1})

    def new_export() -> None:
        """A fresh store, and every weight changed in place, as a round of training does
        (the store then predicts a new blob, and writes it while it hashes it)."""
        fresh_store()
        with torch.no_grad():
            for node in export.values():
                for t in node.values():
                    t.add_(1.0)

    store = Store(folder)

    def drop_blobs() -> None:
        drop_cache(folder / "blobs")

    # (name, what to time, what to do first); run in turn, `repeat` times over, so that a
    # change in the machine's load falls on every column rather than on one
    steps = [
        ("write", write_raw, no_raw),
        ("read", read_raw, lambda: drop_cache(raw)),
        ("sha256", sha, None),
        ("keep", keep, new_export),
        ("keep again", keep, None),  # unchanged: hashed, nothing new written
        ("keep beside", lambda: keep(True), new_export),
        ("again beside", lambda: keep(True), None),
        ("recall", lambda: store.recall("bench"), drop_blobs),
        ("recall lazy", lambda: store.recall("bench", lazy=True), drop_blobs),
    ]
    seconds: dict[str, float] = {}
    for _ in range(repeat):
        for name, run, before in steps:
            seconds[name] = min(seconds.get(name, float("inf")), timed(run, before))
    raw.unlink(missing_ok=True)
    fresh_store()
    return {"bytes": total, **{name: total / t for name, t in seconds.items()}}


def anon_sampler() -> tuple[threading.Event, dict[str, int]]:
    """Sample RssAnon + RssShmem ("anon") and RssFile (bytes) every millisecond until the
    event is set."""
    stop, peak = threading.Event(), {"anon": 0, "file": 0}

    def status() -> dict[str, int]:
        out = {}
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("RssAnon:", "RssFile:", "RssShmem:")):
                    key, value = line.split(":")
                    out[key[3:].lower()] = int(value.split()[0]) * 1024
        return {"anon": out["anon"] + out["shmem"], "file": out["file"]}

    def run() -> None:
        while not stop.is_set():
            now = status()
            for key in ("anon", "file"):
                peak[key] = max(peak[key], now[key])
            time.sleep(0.001)

    peak["base anon"] = status()["anon"]
    threading.Thread(target=run, daemon=True).start()
    return stop, peak


def fedavg_child(variant: str, folder: str, n: int) -> None:
    from soma.aggregate import fedavg

    store = Store(folder)
    names = [f"fed/client/{k}" for k in range(n)]
    stop, peak = anon_sampler()
    start = time.perf_counter()
    if variant == "streamed":
        mean = fedavg((r["export"], r["size"]) for r in store.recall_each(names))
    else:
        records = [store.recall(name) for name in names]
        mean = fedavg([r["export"] for r in records], sizes=[r["size"] for r in records])
    seconds = time.perf_counter() - start
    time.sleep(0.01)
    stop.set()
    checksum = float(sum(t.double().sum() for node in mean.values() for t in node.values()))
    print(json.dumps(dict(peak, seconds=seconds, checksum=checksum)))


def bench_fedavg(work: Path, nbytes: int, n: int, where: str | None = None) -> dict[str, dict]:
    """fedavg of `n` exports of `nbytes`, kept in a folder under `work`, or at `where` (a
    bucket's URL: its blobs are not in this host's page cache to begin with)."""
    folder = work / "fedavg"
    store = Store(where or folder)
    for k in range(n):
        export = make_export(nbytes, seed=100 + k)
        model = sum(t.numel() * t.element_size() for t in export["node0"].values())
        store.keep(f"fed/client/{k}", {"export": export, "size": k + 1})
        del export
    out = {}
    for variant in ("streamed", "loaded"):
        if where is None:
            drop_cache(folder / "blobs")
        child = subprocess.run(
            [sys.executable, __file__, "--fedavg-child", variant, where or str(folder), str(n)],
            capture_output=True,
            text=True,
            check=True,
        )
        result = json.loads(child.stdout)
        result["models"] = (result["anon"] - result["base anon"]) / model
        out[variant] = result
    assert out["streamed"]["checksum"] == out["loaded"]["checksum"], "the two means differ"
    shutil.rmtree(folder, ignore_errors=True)
    out["model"] = model
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100MB,1GB")
    parser.add_argument("--fedavg-size", default="100MB")
    parser.add_argument("--n", type=int, default=8, help="exports averaged")
    parser.add_argument("--nodes", type=int, default=1, help="nodes the export is split over")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default="/tmp")
    parser.add_argument("--fedavg-on", choices=("folder", "bucket"), default="folder")
    parser.add_argument("--bucket", default="soma-bench", help="with AWS_ENDPOINT_URL: its bucket")
    parser.add_argument("--fedavg-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fedavg_child:
        variant, folder, n = args.fedavg_child
        fedavg_child(variant, folder, int(n))
        return
    with _measure.recorded("store", pairs=f"best of {args.repeat} a row"):
        measure(args)


def measure(args: argparse.Namespace) -> None:
    """Every size's keep and recall, the streamed fedavg, and their table."""
    work = Path(tempfile.mkdtemp(prefix="soma-bench-", dir=args.dir))
    try:
        rows = [
            bench_size(work, _measure.parse_size(s), args.repeat, args.nodes)
            for s in args.sizes.split(",")
        ]
        fed = averaged(work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"keep/recall, GB/s, best of {args.repeat}, {args.nodes} node(s), ~130 float32 tensors")
    cols = ["write", "sha256", "keep", "keep again", "keep beside", "again beside"]
    cols += ["read", "recall", "recall lazy"]
    print(
        f"{'size':>8} "
        + " ".join(f"{c:>11}" for c in cols)
        + f" {'keep/min':>9} {'recall/read':>12} {'recall/min':>11}"
    )
    for row in rows:
        keep_ratio = row["keep"] / min(row["write"], row["sha256"])
        recall_ratio = max(row["recall"], row["recall lazy"]) / row["read"]
        eager_ratio = row["recall"] / min(row["read"], row["sha256"])
        print(
            f"{human(row['bytes']):>8} "
            + " ".join(f"{row[c] / 1e9:>11.2f}" for c in cols)
            + f" {keep_ratio:>8.2f}{'✓' if keep_ratio >= 0.7 else '✗'}"
            + f" {recall_ratio:>11.2f}{'✓' if recall_ratio >= 0.8 else '✗'}"
            + f" {eager_ratio:>10.2f}{'✓' if eager_ratio >= 0.8 else '✗'}"
        )
    place = "a bucket" if args.fedavg_on == "bucket" else "a folder (cold cache)"
    print(f"\nfedavg of {args.n} exports of {human(fed['model'])} from {place}")
    print(f"{'variant':>10} {'seconds':>8} {'anon+shm':>10} {'models':>7} {'peak file':>10}")
    for variant in ("streamed", "loaded"):
        r = fed[variant]
        mark = ("✓" if r["models"] <= 1.2 else "✗") if variant == "streamed" else ""
        print(
            f"{variant:>10} {r['seconds']:>8.2f} {human(r['anon'] - r['base anon']):>10} "
            f"{r['models']:>6.2f}{mark:1} {human(r['file']):>10}"
        )


def averaged(work: Path, args: argparse.Namespace) -> dict[str, dict]:
    """bench_fedavg on a folder under `work`, or on a bucket (a server started here unless
    AWS_ENDPOINT_URL is set)."""
    nbytes = _measure.parse_size(args.fedavg_size)
    if args.fedavg_on == "folder":
        return bench_fedavg(work, nbytes, args.n)
    from s3_round import server

    with server(work, args.bucket):
        return bench_fedavg(work, nbytes, args.n, f"s3://{args.bucket}/{work.name}")


if __name__ == "__main__":
    main()
