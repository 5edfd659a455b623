"""Racing `soma client --buffer` processes with random delays: the run they leave replays bit
for bit from its records, every version was computed once, and no update was consumed twice;
a client killed while it trains leaves no update."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from helpers import HANG, TESTS, soma, soma_processes

from soma.asynchronous.replay import replay
from soma.round import layout, once
from soma.round.once import Place
from soma.store import Store


def _args(
    store: Path | str, *, clients: int, versions: int, buffer: int, delay: float
) -> list[str]:
    return [
        "client", "--store", str(store), "--run", "race", "--rounds", str(versions),
        "--clients", str(clients), "--task", "async_task", "--option", f"delay={delay}",
        "--option", "examples=64", "--buffer", str(buffer), "--staleness-limit", "3",
        "--deadline", "60",
    ]  # fmt: skip


def test_racing_clients_leave_a_run_that_replays_bit_for_bit(tmp_path) -> None:
    args = _args(tmp_path, clients=4, versions=6, buffer=2, delay=0.15)
    lines = soma_processes(args, ["0", "1", "2", "3"], timeout=300, every_line=True)
    store = Store(tmp_path)
    replayed = replay(store, "race")
    assert len(replayed) == 7  # version 0 and exactly the 6 asked for, whoever raced
    assert [r.problems for r in replayed] == [[] for _ in replayed]
    for r in replayed[1:]:  # each version computed exactly once, whoever raced for it
        assert once.computations(store, Place(layout.version("race", r.version))) == 1
        assert len(r.value["consumed"]) == 2
    consumed = [e["update"] for r in replayed for e in r.value["consumed"] + r.value["refused"]]
    assert len(consumed) == len(set(consumed))
    for said in lines:  # every process ends at the run's end: its last version, none past it
        assert said[-1]["versions"] == 6
    shown = soma("status", "--store", str(tmp_path), "--run", "race")
    assert shown.returncode == 0, shown.stderr
    assert "version    6: weights" in shown.stdout and "(staleness " in shown.stdout
    audited = soma("audit", "--store", str(tmp_path), "--run", "race")
    assert audited.returncode == 0, audited.stderr
    assert "the weights recomputed bit for bit" in audited.stdout
    assert audited.stdout.strip().splitlines()[-1].startswith("every check held")


def test_racing_clients_on_a_bucket_leave_a_run_that_replays_bit_for_bit(bucket) -> None:
    import os

    from s3_bucket import BUCKET

    url = f"s3://{BUCKET}/async-race-{os.getpid()}"
    args = _args(url, clients=3, versions=4, buffer=2, delay=0.1)
    lines = soma_processes(args, ["0", "1", "2"], timeout=300, every_line=True)
    store = Store(url)
    replayed = replay(store, "race")
    assert len(replayed) == 5 and [r.problems for r in replayed] == [[] for _ in replayed]
    for r in replayed[1:]:
        assert once.computations(store, Place(layout.version("race", r.version))) == 1
    assert all(said[-1]["versions"] == 4 for said in lines)


def test_a_client_killed_while_it_trains_leaves_no_update(tmp_path) -> None:
    command = [sys.executable, str(TESTS / "round_worker.py")]
    args = _args(tmp_path, clients=2, versions=2, buffer=1, delay=0.0)
    process = subprocess.Popen(
        [*command, *args, "--mine", "1", "--option", "hang=1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    store = Store(tmp_path)
    try:
        deadline = time.monotonic() + HANG  # for a hang: it fails at once if the client died
        while store.resolve(layout.published(layout.version("race", 0))) is None:
            assert time.monotonic() < deadline and process.poll() is None, process.stderr.read()
            time.sleep(0.05)
        time.sleep(0.5)  # into its training, which hangs
    finally:
        process.kill()
        process.wait()
    assert store.bound(layout.updates("race")) == []
    # the run goes on without it: client 0 alone makes both versions (buffer 1)
    lines = soma_processes(args, ["0"], timeout=120, every_line=True)
    assert lines[0][-1]["versions"] == 2
    assert [u.split("/")[-1] for u in store.bound(layout.updates("race"))] == ["0", "0"]
    assert all(not r.problems for r in replay(store, "race"))
