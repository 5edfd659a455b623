"""How flaky the tests that start processes are: run them N times, under CPU hogs, and count.

    python tests/flakiness.py --runs 5 --hogs 2 [-m "not fast and not slurm and not mutants"]
                              [--json out.json] [pytest args...]

Each run is a fresh `python -m pytest -q -rf -p no:cacheprovider` of the selection (by default
every heavy tier, so the S3 tier's tests too, without the Slurm cluster and the mutants'
reruns), with `--hogs` busy processes at nice 0 beside it for the whole run (the load CI's
shared machines put on a test). Printed: each run's exit status and wall time, then one row per
test that failed at least once, with its failures out of the runs; `--json` writes the same. A
test that fails under load is a broken test (tests/README.md): this is how to find it before CI
does.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# `-rf`'s line: "FAILED <node id> - <message>"; a node id may hold spaces (a parameter's)
FAILED = re.compile(r"^(FAILED|ERROR) (.+?)(?: - .*)?$")


def _hog() -> None:  # pragma: no cover - a busy loop until killed
    while True:
        pass


def run_once(selection: str, extra: list[str]) -> tuple[int, float, list[str]]:
    """One pytest run of the selection: its exit status, wall seconds and failed node ids."""
    command = [sys.executable, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider"]
    command += ["-m", selection, *extra]
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    failed = [m.group(2) for line in done.stdout.splitlines() if (m := FAILED.match(line))]
    return done.returncode, time.monotonic() - started, failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--hogs", type=int, default=2, help="busy processes beside each run")
    parser.add_argument("-m", dest="selection", default="not fast and not slurm and not mutants")
    parser.add_argument("--json", help="also write the table here")
    args, extra = parser.parse_known_args(argv)
    counts: Counter[str] = Counter()
    runs = []
    for r in range(args.runs):
        hogs = [multiprocessing.Process(target=_hog, daemon=True) for _ in range(args.hogs)]
        for hog in hogs:
            hog.start()
        try:
            code, wall, failed = run_once(args.selection, extra)
        finally:
            for hog in hogs:
                hog.kill()
                hog.join()
        counts.update(failed)
        runs.append({"run": r, "exit": code, "wall_s": round(wall, 1), "failed": failed})
        load = os.getloadavg()[0]
        print(f"run {r}: exit {code}, {wall:.0f} s, {len(failed)} failed (load {load:.1f})")
    print(f"\n{len(counts)} tests failed at least once in {args.runs} runs under {args.hogs} hogs")
    for test, n in counts.most_common():
        print(f"  {n}/{args.runs}  {test}")
    if args.json:
        table = {"runs": runs, "failures": dict(counts), "hogs": args.hogs}
        Path(args.json).write_text(json.dumps(table, indent=1) + "\n")
    return 0 if not counts else 1


if __name__ == "__main__":
    sys.exit(main())
