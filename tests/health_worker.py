"""Writers for tests/run/test_reliability.py: real processes that keep, claim and gather, to be
killed at random instants or raced by a gc.

    python tests/health_worker.py serve <store>
        reads `<op> <trial>` lines (op: keep, claim, gather, group); for each, forks a writer (torch
        is imported once, here), prints `started <pid>`, waits for it, prints
        `reaped <pid> <killed-by-signal> <operations done>`
    python tests/health_worker.py reput <store> <epoch> <count> <seed>
        says `ready`, waits for a line, then keeps `reput_value(epoch, i)` under
        `reput/<pid>/<i>` for every i, in a seeded order, and reads each back

Applies SOMA_MUTANT like the test process does, so a writer is as broken as its parent.
"""

from __future__ import annotations

import mmap
import os
import random
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import torch  # noqa: E402

torch.set_num_threads(1)

KEEP_FLOATS = 1 << 17  # 512 kB a node: a keep takes a few ms, so kills land inside it
GATHER_FLOATS = 1 << 15


def keep_value(trial: int, i: int) -> dict:
    """A value whose every element says which it is: a partial one cannot pass for whole."""
    mark = float(trial * 10_000 + i)
    return {
        "export": {
            "a": {"w": torch.full((KEEP_FLOATS,), mark)},
            "b": {"w": torch.full((KEEP_FLOATS,), -mark), "n": torch.tensor([i])},
        },
        "i": i,
        "trial": trial,
    }


def gather_export(r: int) -> dict:
    return {"fc": {"w": torch.full((GATHER_FLOATS,), float(r)), "b": torch.arange(8.0) + r}}


def reput_value(epoch: int, i: int) -> dict:
    return {"w": torch.full((4096,), float(epoch * 100_000 + i)), "i": i, "epoch": epoch}


def _keep(store, trial: int, done) -> None:
    for i in range(10_000):
        store.keep(f"keep/{trial}/{i}", keep_value(trial, i))
        done[0] += 1


def _claim(store, trial: int, done) -> None:
    for i in range(10_000):
        who = store.put_value({"trial": trial, "i": i, "pid": os.getpid()})
        store.claim(f"claim/{trial}/{i}", who)
        store.recall(f"claim/{trial}/{i}")
        done[0] += 1


def _gather(store, trial: int, done) -> None:
    """Rounds of a run that two gather trials share (trials 6g+2 and 6g+5): the second finds
    the rounds the first averaged, takes over the averaging it was killed holding (its pid
    is gone), and goes on."""
    import soma
    from soma.round import Backoff

    quick = Backoff(first=0.001, cap=0.01)
    for r in range(10_000):
        soma.gather(
            store, gather_export(r), run=f"gather/{trial // 6}", round=r, clients=1, mine=0,
            size=1, deadline=30, backoff=quick,
        )  # fmt: skip
        done[0] += 1


def _group(store, trial: int, done) -> None:
    """Group commits, as a process hosting 4 clients makes them: 4 values kept, bound together
    at the end of the group (`group/<trial>/<i>`, i = 4 * commit + client)."""
    for commit in range(10_000):
        with store.group():
            for c in range(4):
                i = 4 * commit + c
                store.keep(f"group/{trial}/{i}", keep_value(trial, i))
        done[0] += 1


def serve(directory: str) -> None:
    from soma.store import Store

    ops = {"keep": _keep, "claim": _claim, "gather": _gather, "group": _group}
    print("ready", flush=True)
    for line in sys.stdin:
        op, trial = line.split()
        shared = mmap.mmap(-1, 8)  # the count of operations done, seen after a SIGKILL too
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                done = _Count(shared)
                ops[op](Store(directory), int(trial), done)
                code = 0
            finally:
                os._exit(code)
        print(f"started {pid}", flush=True)
        _, status = os.waitpid(pid, 0)
        count = struct.unpack("<q", shared[:8])[0]
        print(f"reaped {pid} {int(os.WIFSIGNALED(status))} {count}", flush=True)


class _Count:
    """`done[0] += 1` into memory shared with the parent."""

    def __init__(self, shared: mmap.mmap) -> None:
        self.shared = shared

    def __getitem__(self, index: int) -> int:
        return struct.unpack("<q", self.shared[:8])[0]

    def __setitem__(self, index: int, value: int) -> None:
        self.shared[:8] = struct.pack("<q", value)


def reput(directory: str, epoch: int, count: int, seed: int) -> None:
    from soma.store import Store

    store = Store(directory)
    order = list(range(count))
    random.Random(seed).shuffle(order)
    print("ready", flush=True)
    sys.stdin.readline()  # go: the test has made the blobs old, and its gc is looping
    for i in order:
        name = f"reput/{os.getpid()}/{i}"
        store.keep(name, reput_value(epoch, i))
        back = store.recall(name)
        assert back["i"] == i and bool((back["w"] == epoch * 100_000 + i).all()), name


def main(argv: list[str]) -> None:
    import mutants

    mutants.apply_from_environment()
    if argv[0] == "serve":
        serve(argv[1])
    elif argv[0] == "reput":
        reput(argv[1], int(argv[2]), int(argv[3]), int(argv[4]))
    else:
        raise SystemExit(f"unknown command {argv[0]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
