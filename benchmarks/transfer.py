"""What `transfer: bfloat16|float16` saves on the wire, and what it costs in accuracy.

    python benchmarks/transfer.py                   # digits (the main job's run) and Shakespeare
    python benchmarks/transfer.py --quick           # fewer rounds: about a minute
    python benchmarks/transfer.py --only digits

Each workload is one `soma.simulate` run per precision (float32, the baseline, then bfloat16
and float16), in this process, one torch thread, each in a store of its own on disk. Per
run it prints the test accuracy after the last round (and its best), the bytes of weights a
round writes (every client's export and the average, read off the round records' digests
and the blobs' sizes) and reads (each sampled client's start and every export the averaging
reads), the store's whole size a round (records and names included), each as a ratio to the
float32 run's; and how far the first round's average lies from float32's: the largest
difference, and its norm against the norm of float32's first update (average - start).
Every run is deterministic: only the seconds change from one run to the next.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from _measure import recorded  # noqa: E402

import soma  # noqa: E402
from soma.store import Store, codecs  # noqa: E402
from soma.tasks import load_task  # noqa: E402

PRECISIONS = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class Workload:
    task: str
    clients: int
    rounds: int
    quick_rounds: int
    participation: int | None = None
    task_options: dict[str, Any] = field(default_factory=dict)


WORKLOADS = {
    # config/config.yaml's run: the README's main job
    "digits": Workload("soma.tasks.digits", 10, 10, 3),
    # config/shakespeare.yaml's run (100 roles, 10 a round, the small LSTM), fewer rounds
    "shakespeare": Workload(
        "soma.tasks.shakespeare", 100, 20, 3, participation=10, task_options={"lr": 0.8}
    ),
}


def blob_size(store: Store, digest: str) -> int:
    """The bytes of the value whose record is blob `digest`: the record and every tensor blob
    it names (soma.store.codecs reads them as Store.recall_digest does)."""
    record = Path(store.blob_path(digest))
    tree, loose = codecs.parse_record(record.read_bytes(), str(record))
    named = [*codecs.references(tree), *([loose] if loose else [])]
    return record.stat().st_size + sum(os.path.getsize(store.blob_path(d)) for d in named)


def store_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def run(workload: Workload, transfer: str, rounds: int, folder: Path) -> dict[str, Any]:
    task = load_task(workload.task, workload.task_options)
    accuracy: list[float] = []

    def after(done, driven) -> None:
        accuracy.append(task.evaluate(driven.nodes)["accuracy"])

    tic = time.perf_counter()
    path = folder / transfer
    simulated = soma.simulate(
        workload.task,
        clients=workload.clients,
        rounds=rounds,
        task_options=workload.task_options,
        participation=workload.participation,
        evaluate_participation=1,
        transfer=transfer,
        store=path,
        durability="scratch",
        after=after,
    )
    seconds = time.perf_counter() - tic
    store = Store(path)
    written = read = 0
    for done in simulated.rounds:
        inputs = [blob_size(store, i["weights"]) for i in done.record["inputs"]]
        written += sum(inputs) + blob_size(store, done.record["weights"])
        read += len(inputs) * blob_size(store, done.record["start"]) + sum(inputs)
    first = simulated.rounds[0].record
    return {
        "accuracy": accuracy,
        "written": written / rounds,
        "read": read / rounds,
        "store": store_bytes(path) / rounds,
        "start": store.recall_digest(first["start"]),
        "average": store.recall_digest(first["weights"]),
        "seconds": seconds,
    }


def flat(export: dict[str, dict[str, Any]]) -> torch.Tensor:
    return torch.cat(
        [
            t.double().flatten()
            for node in export.values()
            for t in node.values()
            if t.is_floating_point()
        ]
    )


def report(name: str, rows: dict[str, dict[str, Any]]) -> None:
    base = rows["float32"]
    update = flat(base["average"]) - flat(base["start"])
    print(f"\n{name}: last / best test accuracy, weights bytes a round, error of round 0's average")
    print(
        f"  {'transfer':<9} {'last':>7} {'best':>7} {'written':>10} {'ratio':>6} {'read':>10} "
        f"{'ratio':>6} {'store':>10} {'ratio':>6} {'max |diff|':>10} {'|diff|/|update|':>15} "
        f"{'s':>5}"
    )
    for transfer, row in rows.items():
        diff = flat(row["average"]) - flat(base["average"])
        print(
            f"  {transfer:<9} {row['accuracy'][-1]:>7.4f} {max(row['accuracy']):>7.4f} "
            f"{row['written']:>10,.0f} {row['written'] / base['written']:>6.3f} "
            f"{row['read']:>10,.0f} {row['read'] / base['read']:>6.3f} "
            f"{row['store']:>10,.0f} {row['store'] / base['store']:>6.3f} "
            f"{diff.abs().max().item():>10.2e} {(diff.norm() / update.norm()).item():>15.2e} "
            f"{row['seconds']:>5.0f}",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few rounds each")
    parser.add_argument("--only", choices=sorted(WORKLOADS), action="append")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"load average {os.getloadavg()[0]:.2f}, torch {torch.__version__}")
    for name in args.only or WORKLOADS:
        workload = WORKLOADS[name]
        rounds = workload.quick_rounds if args.quick else workload.rounds
        with tempfile.TemporaryDirectory(prefix=f"soma-transfer-{name}-") as folder:
            rows = {t: run(workload, t, rounds, Path(folder)) for t in PRECISIONS}
        report(f"{name}, {workload.clients} clients, {rounds} rounds", rows)
    return 0


if __name__ == "__main__":
    with recorded("transfer"):  # a run that fails records nothing
        code = main()
    sys.exit(code)
