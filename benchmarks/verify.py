"""What checking an average costs (soma.round.verify) against the round it checks, in one run.

    python benchmarks/verify.py [--clients 10] [--task soma.tasks.digits] [--rounds 2]
                                [--export-mb 100] [--export-clients 4] [--bucket-export-mb MB]
                                [--workloads task exports] [--repeats 3] [--bucket|--no-bucket]

A process that did not compute an average checks it before training from it: by its
signature only (`verify_averages: signature`), or recomputed bit for bit from its signed
inputs (`recompute`, the default with a roster: signature, record against the meeting, each
input against its client's signed record, then the strategy's aggregation again and the
digests compared). This measures what that check costs per round, against the round.

The run is signed: a roster of every client, their key pairs made in a temporary folder, so
every record is signed and every signature check is real. Two workloads:

- task: --task's real model (its `nodes(0)` exported; digits: softmax, 650 floats) from
  --clients clients (10);
- exports: a model of --export-mb MB (one node of float32 weight/bias pairs of ~4 MB, as
  benchmarks/s3_round.py makes it) from --export-clients clients (4); on the bucket
  --bucket-export-mb of it (default the same).

Each client's export has its own weights (new blobs every repeat); the round starts from a
start export already in the store (the previous average, as in a run). Per round, on a fresh
store each time, seconds are the best of --repeats:

- contributions: `soma.round.contribute` of every client (each record signed by its client);
- averaging: `soma.round.average_round` computing the average (claim, checks of the inputs,
  the mean streamed from the store, publish, signed);
- round: the two together (the best of their per-repeat sums);
- simulate (task only): `soma.simulate` of the task, --clients clients x --rounds rounds,
  signed by the same roster, per round: the whole round, local training included;
- signature: `verify_average(..., mode="signature")`;
- recompute: `verify_average(..., mode="recompute")`, asserted to have recomputed the average
  bit for bit.

Both checks run in a fresh Store object and a Meeting built anew whose roster holds no
private key: another process's view of the same published average (no in-process cache of
the averager's is reused; on the folder the operating system's page cache still holds the
blobs just written, as for another process on the same host, not on another host).

The bucket is SeaweedFS on loopback, started as benchmarks/s3_round.py starts it (or the
endpoint of AWS_ENDPOINT_URL, with --bucket-name, which must exist); --bucket is on by
default when `weed` is on the PATH or AWS_ENDPOINT_URL is set. The folder and the bucket,
and the workloads, take turns within each repeat (so a change in the machine's load falls on
all). Ratios: recompute / round, recompute / averaging, recompute / simulate's round, and
signature / round, each the median over the repeats of that repeat's own ratio (not a ratio
of two bests, which may come from two repeats under two loads).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from _measure import recorded  # noqa: E402
from s3_round import BUCKET, Places, clean, model, nbytes, server  # noqa: E402

import soma  # noqa: E402
from soma.nodes import export as export_of  # noqa: E402
from soma.round import Meeting, average_round, contribute  # noqa: E402
from soma.round.signing import Signing, make_keys, read_roster  # noqa: E402
from soma.round.verify import RECOMPUTE, SIGNATURE, verify_average  # noqa: E402
from soma.store import Store  # noqa: E402
from soma.tasks import load_task  # noqa: E402
from soma.timing import LEASE  # noqa: E402

torch.set_num_threads(1)
RUN = "bench"
ROWS = ("contributions", "averaging", "round", "simulate", "signature", "recompute")


@dataclass
class Workload:
    """What one round is made of: its clients' exports around a base, and its meeting's
    config."""

    name: str
    clients: int
    base: Callable[[], dict]
    config: dict

    def exports(self, base: dict, repeat: int) -> list[dict]:
        """Every client's export: the base moved a little, differently each client and
        repeat (so each is new bytes in the store)."""
        return [
            {
                n: {k: t + (1 + repeat * self.clients + c) * 1e-3 for k, t in keys.items()}
                for n, keys in base.items()
            }
            for c in range(self.clients)
        ]


@dataclass
class Best:
    """Each row's seconds in every repeat: the best of them shown, and each ratio the median
    of the repeats' own ratios (a repeat's rows run one after another, so each of its ratios
    compares two rows under one load; a ratio of two bests would compare two repeats')."""

    runs: dict[str, list[float]] = field(default_factory=lambda: {row: [] for row in ROWS})

    def add(self, row: str, seconds: float) -> None:
        self.runs[row].append(seconds)

    @property
    def seconds(self) -> dict[str, float]:
        return {row: min(runs, default=float("inf")) for row, runs in self.runs.items()}

    def ratio(self, row: str, over: str) -> float:
        """The median over the repeats of row's seconds / over's (nan where one is missing)."""
        pairs = list(zip(self.runs[row], self.runs[over], strict=False))
        if not pairs or len(self.runs[row]) != len(self.runs[over]):
            return float("nan")
        return statistics.median(a / b for a, b in pairs)


def timed(run: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    out = run()
    return time.perf_counter() - start, out


def roster_in(folder: Path, clients: int) -> Path:
    """Key pairs of clients 0..clients-1 in `folder`, and the roster file naming them."""
    roster = {str(k): make_keys(folder, k)[1] for k in range(clients)}
    path = folder / "roster.json"
    path.write_text(json.dumps(roster))
    return path


def one_round(place: str, work: Workload, base: dict, repeat: int, keys: Path, best: Best) -> None:
    """Contribute every client, average, then check the published average as another
    process would: by signature, and recomputed."""
    roster = read_roster(keys / "roster.json")
    writer = Signing.of(roster, str(keys / "{client}.key"))
    store = Store(place)
    start = store.put_value(base)  # the round's start: the previous average, already there
    meeting = Meeting(RUN, 1, work.clients, start=start, config=work.config, signing=writer)
    exports = work.exports(base, repeat)

    def contributions() -> None:
        for k, export in enumerate(exports):
            contribute(store, meeting, export, mine=k, size=1.0 + k)

    contributed, _ = timed(contributions)
    averaged, digest = timed(lambda: average_round(store, meeting, deadline=120, lease=LEASE))
    assert isinstance(digest, str)
    best.add("contributions", contributed)
    best.add("averaging", averaged)
    best.add("round", contributed + averaged)
    exports.clear()  # the clients' copies freed before the checks

    def check(mode: str) -> str | None:
        # another process's view: a fresh store object, a meeting made anew, no private key
        reader = Meeting(
            RUN,
            1,
            work.clients,
            start=start,
            config=work.config,
            signing=Signing.of(roster, None),
        )
        return verify_average(Store(place), reader, digest, mode=mode)

    seconds, why = timed(lambda: check(SIGNATURE))
    assert why is None, why
    best.add("signature", seconds)
    seconds, why = timed(lambda: check(RECOMPUTE))
    assert why is None, f"not recomputed: {why}"
    best.add("recompute", seconds)


def simulated(place: str, args: argparse.Namespace, keys: Path, best: Best) -> None:
    """A whole signed run of the task, per round (training included)."""
    seconds, _ = timed(
        lambda: soma.simulate(
            args.task,
            clients=args.clients,
            rounds=args.rounds,
            roster=keys / "roster.json",
            keys=str(keys / "{client}.key"),
            store=place,
            deadline=120,
        )
    )
    best.add("simulate", seconds / args.rounds)


def workloads(args: argparse.Namespace, where: str) -> list[Workload]:
    out = []
    if "task" in args.workloads:
        task = load_task(args.task)
        out.append(
            Workload(
                "task",
                args.clients,
                lambda: export_of(task.nodes(0)),
                {"task": args.task, "seed": 0},
            )
        )
    mb = args.bucket_export_mb if where == "bucket" else args.export_mb
    if "exports" in args.workloads and mb > 0:
        out.append(
            Workload(
                f"exports {mb:g} MB",
                args.export_clients,
                lambda: model(mb),
                {"task": "exports", "export_mb": mb, "seed": 0},
            )
        )
    return out


def measure(args: argparse.Namespace, places: Places, keys: Path, kinds: list[str]) -> dict:
    got: dict[tuple[str, str], Best] = {}
    sizes: dict[tuple[str, str], int] = {}
    for repeat in range(args.repeats):
        for where in kinds:
            for work in workloads(args, where):
                best = got.setdefault((work.name, where), Best())
                base = work.base()
                sizes[(work.name, where)] = nbytes(base)
                one_round(places.fresh(where), work, base, repeat, keys, best)
                del base
                if work.name == "task":
                    simulated(places.fresh(where), args, keys, best)
                print(
                    f"  repeat {repeat + 1}/{args.repeats}: {work.name} on the {where} done",
                    flush=True,
                )
    return {"best": got, "sizes": sizes}


def report(args: argparse.Namespace, got: dict, endpoint: str | None) -> None:
    load = os.getloadavg()
    print(
        f"\nverify_average against the round, seconds per round (best of {args.repeats}; "
        f"ratios: the median of each repeat's own); "
        f"signed run (roster of every client); {os.cpu_count()} cores, load average "
        f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} (a loaded machine inflates every row)"
    )
    if endpoint:
        print(f"bucket: {endpoint}")
    header = (
        f"{'workload':<22}{'store':<8}{'contrib':>9}{'average':>9}{'round':>9}{'simul.':>9}"
        f"{'sign.':>9}{'recomp.':>9}{'rec/rnd':>9}{'rec/avg':>9}{'rec/sim':>9}{'sig/rnd':>9}"
    )
    print(header)
    for (name, where), best in got["best"].items():
        s = best.seconds
        clients = args.clients if name == "task" else args.export_clients
        size = got["sizes"][(name, where)]
        each = f"{size / 1e6:.3g} MB" if size >= 1e5 else f"{size / 1e3:.3g} kB"
        label = f"{name.split()[0]} ({clients}x{each})"
        sim, r = s["simulate"], best.ratio
        print(
            f"{label:<22}{where:<8}{s['contributions']:>9.4f}{s['averaging']:>9.4f}"
            f"{s['round']:>9.4f}{_or_dash(sim, '9.4f')}{s['signature']:>9.4f}"
            f"{s['recompute']:>9.4f}{r('recompute', 'round'):>9.2f}"
            f"{r('recompute', 'averaging'):>9.2f}"
            f"{_or_dash(r('recompute', 'simulate'), '9.2f')}{r('signature', 'round'):>9.3f}"
        )
    print(
        "contrib: every client's contribution; average: average_round computing it; round: "
        "both; simul.: soma.simulate per round (training included); sign.: verify_average "
        "mode=signature; recomp.: mode=recompute (both in a fresh Store, another process's "
        "view); rec/rnd, rec/avg, rec/sim, sig/rnd: ratios of those seconds"
    )


def _or_dash(value: float, spec: str) -> str:
    if value != value or value in (float("inf"), 0.0):  # nan, or not measured
        return f"{'-':>{spec.split('.')[0]}}"
    return format(value, f">{spec}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="soma.tasks.digits")
    parser.add_argument("--clients", type=int, default=10, help="the task workload's clients")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of soma.simulate")
    parser.add_argument("--export-mb", type=float, default=100.0, help="0: no exports workload")
    parser.add_argument("--export-clients", type=int, default=4)
    parser.add_argument(
        "--bucket-export-mb", type=float, default=None, help="on the bucket (default --export-mb)"
    )
    parser.add_argument(
        "--workloads", nargs="+", choices=("task", "exports"), default=["task", "exports"]
    )
    parser.add_argument("--repeats", type=int, default=3)
    default_bucket = bool(shutil.which("weed") or os.environ.get("AWS_ENDPOINT_URL"))
    parser.add_argument(
        "--bucket",
        action=argparse.BooleanOptionalAction,
        default=default_bucket,
        help=f"measure on a bucket too (default here: {default_bucket})",
    )
    parser.add_argument("--bucket-name", default=BUCKET, help="with AWS_ENDPOINT_URL: existing")
    parser.add_argument("--dir", default=None, help="where the folder stores are (default /tmp)")
    args = parser.parse_args()
    if args.bucket_export_mb is None:
        args.bucket_export_mb = args.export_mb
    work = Path(tempfile.mkdtemp(prefix="soma-verify-", dir=args.dir))
    try:
        keys = work / "keys"
        roster_in(keys, max(args.clients, args.export_clients))
        places = Places(work, args.bucket_name)
        if not args.bucket:
            got = measure(args, places, keys, ["folder"])
            report(args, got, None)
            return
        given = bool(os.environ.get("AWS_ENDPOINT_URL"))
        with server(work, args.bucket_name) as endpoint:
            try:
                got = measure(args, places, keys, ["folder", "bucket"])
            finally:
                if given:
                    clean(args.bucket_name)
        report(args, got, endpoint)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    with recorded("verify"):
        main()
