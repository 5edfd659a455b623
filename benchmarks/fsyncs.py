"""How many durability calls (fsync, fdatasync, syncfs) a run makes per contribution.

    python benchmarks/fsyncs.py [--clients 4] [--rounds 2] [--task soma.tasks.control]

One `soma simulate`-shaped run (every client hosted by this one process, soma.run.drive) in a
fresh store under --dir, counting every os.fsync, os.fdatasync and libc syncfs the whole run
makes (the start weights, the contributions, the averages and their records), divided by its
contributions; per place in soma that made them, too. Durable by default; `--durability
scratch` should count none. The issue-23 target: <= 3 per contribution on the durable path
(4 clients, 2 rounds of the control task; it was 23.6).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _measure import recorded  # noqa: E402

from soma import files  # noqa: E402


def count(clients: int, rounds: int, task: str, durability: str, folder: str) -> dict:
    """The run's durability calls: in all, per contribution, and by where they came from."""
    import soma

    made: collections.Counter[str] = collections.Counter()

    def counted(kind: str, real):
        def call(*args):
            frames = [
                f"{Path(f.filename).stem}.{f.name}"
                for f in traceback.extract_stack()[:-1]
                if "/soma/" in f.filename and "/store/" not in f.filename
            ]
            made[f"{kind} <- " + " <- ".join(reversed(frames[-3:]))] += 1
            return real(*args)

        return call

    saved = os.fsync, os.fdatasync, files._SYNCFS
    os.fsync, os.fdatasync = counted("fsync", os.fsync), counted("fdatasync", os.fdatasync)
    if files._SYNCFS is not None:
        files._SYNCFS = counted("syncfs", files._SYNCFS)
    try:
        soma.simulate(task, clients=clients, rounds=rounds, store=folder, durability=durability)
    finally:
        os.fsync, os.fdatasync, files._SYNCFS = saved
    total = sum(made.values())
    kinds = collections.Counter()
    for where, n in made.items():
        kinds[where.split(" ", 1)[0]] += n
    return {
        "total": total,
        "per_contribution": total / (clients * rounds),
        "kinds": dict(kinds),
        "where": made.most_common(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--task", default="soma.tasks.control")
    parser.add_argument("--durability", default="both", choices=["both", *files.DURABILITIES])
    parser.add_argument("--dir", default=None, help="where the store is made (default: /tmp)")
    parser.add_argument("--where", action="store_true", help="list where the calls came from")
    parser.add_argument(
        "--no-syncfs",
        action="store_true",
        help="a pass fsyncs each file and folder, as where "
        "syncfs is not exact (non-Linux, FUSE...)",
    )
    args = parser.parse_args()
    if args.no_syncfs:
        files._SYNCFS = None
    modes = files.DURABILITIES if args.durability == "both" else (args.durability,)
    for mode in modes:
        with tempfile.TemporaryDirectory(dir=args.dir, prefix="soma-fsyncs-") as folder:
            got = count(args.clients, args.rounds, args.task, mode, folder)
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(got["kinds"].items())) or "none"
        print(
            f"{mode}: {got['total']} durability calls ({kinds}) for "
            f"{args.clients * args.rounds} contributions ({args.clients} clients hosted by one "
            f"process x {args.rounds} rounds): {got['per_contribution']:.2f} per contribution"
            + (" (target <= 3)" if mode == files.DURABLE else "")
        )
        if args.where:
            for where, n in got["where"]:
                print(f"  {n:4d}  {where}")


if __name__ == "__main__":
    with recorded("fsyncs"):
        main()
