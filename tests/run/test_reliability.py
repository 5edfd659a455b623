"""The store under faults, as figures: real processes killed with SIGKILL at random instants
of keep, claim and gather; a tmpfs filled to the last byte; bits flipped, blobs truncated
and lost, name files garbled; gc in a loop racing writers that keep and gather.

After each fault, `soma verify` is clean, or reports exactly the damage done; no name ever
points at a partial value (every name is recalled whole and checked against what it was
kept with). The counts (trials, faults injected, detected, repaired, lost) are printed at
the end of the module, e.g. `python -m pytest -q tests/run/test_reliability.py`.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import health_worker as worker
import pytest
import torch
from damage import client_export, rerun
from figures import FIGURES, printed
from helpers import communicated, same_weights

import soma
from soma import health
from soma.health import collecting, reach
from soma.round import Backoff, status
from soma.store import Store

pytestmark = pytest.mark.slow
torch.set_num_threads(1)
HERE = Path(__file__).resolve().parents[1]
HOUR = 3600.0
QUICK = Backoff(first=0.002, cap=0.02)


@pytest.fixture(scope="module", autouse=True)
def figures(request):
    """Print the module's figures once every test has added its own."""
    before = set(FIGURES)
    yield
    printed(request, [what for what in FIGURES if what not in before])


def every_name_whole(store: Store) -> int:
    """Recall every name eagerly and check it against what its writer kept; the number of
    names that point at a partial or wrong value (0, or the test has found a loss)."""
    wrong = 0
    for name in store.bound():
        try:
            value = store.recall(name)
        except Exception:  # noqa: BLE001 - any failure to read a name back is a loss
            wrong += 1
            continue
        if name.startswith(("keep/", "group/")):
            trial, i = map(int, name.split("/")[1:])
            same = value == {**value, "i": i, "trial": trial}
            same = same and same_weights(value["export"], worker.keep_value(trial, i)["export"])
            wrong += not same
        elif name.startswith("gather/") and name.endswith("/average"):
            parts = name.split("/")
            r = int(parts[parts.index("round") + 1])
            mean = store.recall_digest(value["weights"])
            wrong += not same_weights(mean, worker.gather_export(r))
    return wrong


def aged(store: Store) -> None:
    """Every blob and temporary made older than gc's floor (`health.MIN_AGE`): a test where
    nothing writes any more lets gc take what the floor would keep a minute longer."""
    then = time.time() - 2 * health.MIN_AGE
    for path in [*(store.directory / "blobs").rglob("*"), *(store.directory / "tmp").iterdir()]:
        if path.is_file():
            os.utime(path, (then, then))


# --- writers killed at random instants ----------------------------------------------------


def test_writers_killed_at_random_instants_of_keep_claim_and_gather(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    server = subprocess.Popen(
        [sys.executable, str(HERE / "health_worker.py"), "serve", str(store.directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    rng = random.Random(1313)
    try:
        assert server.stdout.readline() == "ready\n"
        for trial in range(30):
            op = ("keep", "claim", "gather")[trial % 3]
            server.stdin.write(f"{op} {trial}\n")
            server.stdin.flush()
            started = server.stdout.readline().split()
            assert started[0] == "started", started
            time.sleep(rng.uniform(0.005, 0.25))
            try:
                os.kill(int(started[1]), signal.SIGKILL)
            except ProcessLookupError:  # ended on its own: the assert below says so
                pass
            reaped = server.stdout.readline().split()
            assert reaped[:3] == ["reaped", started[1], "1"], f"not killed, it ended: {reaped}"
            figures = FIGURES[f"SIGKILL in {op}"]
            figures["trials"] += 1
            figures["faults"] += int(reaped[2])
            figures["operations done"] += int(reaped[3])
            figures["temporaries left"] += len(os.listdir(store.directory / "tmp"))
            report = health.verify(store)
            figures["detected"] += len(report.problems)
            assert report.clean, report.lines()
            wrong = every_name_whole(store)
            figures["lost"] += wrong
            assert wrong == 0, f"trial {trial}: {wrong} names point at partial values"
            # nothing writes now: what the killed writer left goes, and verify stays clean
            aged(store)
            cleaned = health.gc(store, min_age=health.MIN_AGE)
            assert os.listdir(store.directory / "tmp") == [], cleaned.lines()
            assert health.verify(store).clean
            for name in store.bound("keep/"):  # keep the store small
                store.forget(name)
        taken = [n for n in store.bound("gather/") if "/takeover/" in n]
        FIGURES["SIGKILL in gather"]["averagings taken over"] += len(taken)
    finally:
        server.stdin.close()
        server.kill()
        server.wait()


def test_writers_killed_at_random_instants_of_group_commits(tmp_path: Path) -> None:
    """A process hosting several clients commits them as a group (Store.group): killed at
    any instant, no name reaches a partial value, and the names are bound in order, after
    every value of their group was written."""
    store = Store(tmp_path / "store")
    server = subprocess.Popen(
        [sys.executable, str(HERE / "health_worker.py"), "serve", str(store.directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    rng = random.Random(2323)
    try:
        assert server.stdout.readline() == "ready\n"
        for trial in range(8):
            server.stdin.write(f"group {trial}\n")
            server.stdin.flush()
            started = server.stdout.readline().split()
            time.sleep(rng.uniform(0.005, 0.3))
            try:
                os.kill(int(started[1]), signal.SIGKILL)
            except ProcessLookupError:
                pass
            reaped = server.stdout.readline().split()
            assert reaped[:3] == ["reaped", started[1], "1"], f"not killed, it ended: {reaped}"
            figures = FIGURES["SIGKILL in group commit"]
            figures["trials"] += 1
            figures["faults"] += 1
            figures["operations done"] += int(reaped[3])
            report = health.verify(store)
            figures["detected"] += len(report.problems)
            assert report.clean, report.lines()
            wrong = every_name_whole(store)
            figures["lost"] += wrong
            assert wrong == 0, f"trial {trial}: {wrong} names point at partial values"
            bound = [int(n.rsplit("/", 1)[1]) for n in store.bound(f"group/{trial}/")]
            assert sorted(bound) == list(range(len(bound)))
            assert 4 * int(reaped[3]) <= len(bound) <= 4 * int(reaped[3]) + 4
            aged(store)
            health.gc(store, min_age=health.MIN_AGE)
            for name in store.bound("group/"):
                store.forget(name)
    finally:
        server.stdin.close()
        server.kill()
        server.wait()


# --- a filesystem that fills up -----------------------------------------------------------


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    """An 8 MB tmpfs (we are root in CI); skipped, saying why, where it cannot be mounted."""
    point = tmp_path / "small"
    point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip() or 'mount failed'}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


def test_a_full_filesystem_fails_keeps_cleanly_and_loses_nothing(small_tmpfs: Path) -> None:
    store = Store(small_tmpfs / "store")
    rng = random.Random(7)
    figures = FIGURES["tmpfs full (8 MB)"]
    kept: dict[str, torch.Tensor] = {}
    for cycle in range(8):
        figures["trials"] += 1
        while True:
            name = f"fill/{cycle}/{len(kept)}"
            w = torch.rand(
                rng.randint(1, 400) * 1024, generator=torch.Generator().manual_seed(len(kept))
            )
            try:
                store.keep(name, {"export": {"n": {"w": w}}, "i": len(kept)})
            except OSError as error:
                assert error.errno == errno.ENOSPC, error
                figures["faults"] += 1
                figures["detected"] += 1  # refused, never "succeeded" over a partial blob
                break
            kept[name] = w
        assert os.listdir(store.directory / "tmp") == [], "a failed write leaves no temporary"
        report = health.verify(store)
        assert report.clean, report.lines()
        for name, w in kept.items():
            same = torch.equal(store.recall(name)["export"]["n"]["w"], w)
            figures["lost"] += not same
            assert same, name
        assert store.resolve(f"fill/{cycle}/{len(kept)}") is None
        for name in rng.sample(sorted(kept), len(kept) // 2):  # free some, as a user would
            store.forget(name)
            del kept[name]
        aged(store)
        health.gc(store, min_age=health.MIN_AGE)
        assert health.verify(store).clean


# --- bits flipped, blobs truncated and lost, names garbled --------------------------------


def federated_run(store: Store, rounds: int = 4, clients: int = 3) -> list[dict]:
    start, state, records = store.put_value(client_export(-1, 0)), None, []
    for r in range(rounds):
        threads = [
            threading.Thread(
                target=soma.gather,
                args=(store, client_export(r, k)),
                kwargs=dict(
                    run="ctl",
                    round=r,
                    clients=clients,
                    mine=k,
                    size=10 + k,
                    deadline=60,
                    backoff=QUICK,
                    start=start,
                    state=state,
                    strategy="fedadam",
                    options={"server_lr": 0.1},
                ),
            )  # fmt: skip
            for k in range(clients)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        record = store.recall_digest(status(store, "ctl")[r]["average"])
        records.append(record)
        start, state = record["weights"], record["state"]
    return records


def _inject(store: Store, rng: random.Random, target: str) -> tuple[str, str]:
    """One fault; (what verify must report: a digest, or a name file's path; its kind)."""
    if target.startswith("name:"):
        name = target[5:]
        path = store.directory / "names" / name
        data = bytearray(path.read_bytes())
        data[rng.randrange(64)] ^= 1 << rng.randrange(7)
        path.write_bytes(bytes(data))
        text = data[:64].decode("ascii", errors="replace")
        if all(c in "0123456789abcdef" for c in text):
            return text, "missing"
        return str(path), "bad-name"
    path = store.blob_path(target)
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    how = rng.choice(["flip", "flip", "truncate", "delete"])
    if how == "flip" and data:
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
        return target, "corrupt"
    if how == "truncate" and data:
        path.write_bytes(bytes(data[: rng.randrange(len(data))]))
        return target, "corrupt"
    path.unlink()
    return target, "missing"


def _ancestors(graph, digest: str, seen: set[str] | None = None) -> set[str]:
    seen = set() if seen is None else seen
    for ref in graph.parents.get(digest, []):
        if ref.record is not None and ref.record not in seen:
            seen.add(ref.record)
            _ancestors(graph, ref.record, seen)
    return seen


def _victims(rng: random.Random, graph, names: list[str]) -> list[str]:
    """One name file, or 1-3 blobs none of which is under another (a blob under a corrupt
    record is not reached, so its loss could not be seen; that is not what is tested)."""
    if rng.random() < 0.2:
        return ["name:" + rng.choice(names)]
    wanted = rng.choice([1, 1, 2, 3])
    chosen: list[str] = []
    for digest in rng.sample(sorted(graph.reached()), 12):
        if len(chosen) == wanted:
            break
        if not any(
            digest in _ancestors(graph, c) or c in _ancestors(graph, digest) for c in chosen
        ):
            chosen.append(digest)
    return chosen


_LOST = [
    ("an average's record", "record of the average"),
    ("a holder's record", "who held or did work"),
    ("a meeting's identity", "identity of round"),
    ("a round's start", "started from"),
]


def test_flipped_truncated_lost_and_garbled_are_reported_exactly_and_repaired(
    tmp_path: Path,
) -> None:
    pristine = Store(tmp_path / "pristine")
    federated_run(pristine)
    assert health.verify(pristine).clean
    names = pristine.bound()
    graph = reach.walk(pristine, {n: pristine.resolve(n) for n in names})
    rng = random.Random(2024)
    figures = FIGURES["bits, truncations, losses"]
    for trial in range(40):
        where = tmp_path / f"trial{trial}"
        shutil.copytree(pristine.directory, where, symlinks=True)
        store = Store(where)
        targets = _victims(rng, graph, names)
        injected = dict(_inject(store, rng, t) for t in targets)
        in_names = set(injected) if targets[0].startswith("name:") else set()
        figures["trials"] += 1
        figures["faults"] += len(injected)
        report = health.verify(store)
        found = {
            p.digest if p.kind in ("corrupt", "missing") else p.path: p.kind
            for p in report.problems
        }
        figures["detected"] += len(set(found) & set(injected))
        assert found == injected, (trial, report.lines(), injected)
        repaired = health.repair(store)
        figures["repaired"] += len(set(injected) - {p.digest or p.path for p in repaired.left})
        for problem in repaired.left:
            assert "delete" not in problem.fix
            figures["rerun"] += rerun(store, pristine, problem)
        after = health.repair(store)
        figures["lost"] += len(after.left)
        for problem in after.left:
            kind = next((k for k, says in _LOST if says in problem.fix), "other")
            kind = "a name file" if (problem.digest or problem.path) in in_names else kind
            figures[f"lost: {kind}"] += 1
        for problem in after.left:  # what is lost is lost for good, and said so
            assert "backup" in problem.fix, problem.line()
        if not after.left:
            assert every_name_whole(store) == 0
        shutil.rmtree(where)


# --- gc racing writers --------------------------------------------------------------------


def _gc_loop(store: Store, stop: threading.Event, passes: list[int], errors: list) -> None:
    while not stop.is_set():
        try:
            report = health.gc(store, min_age=HOUR)
        except Exception as error:  # noqa: BLE001 - reported by the test
            errors.append(error)
            return
        passes[0] += 1
        passes[1] += report.blobs_removed
        passes[2] += report.raced


def test_gc_in_a_loop_against_writers_that_put_old_unreachable_blobs_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the refresh and the attic exist for: blobs nothing reaches, old enough to
    go, put again by writers (a stat and a utime) while a gc is removing them. The gc is
    slowed between its listing and each removal (1 ms, a slow network folder) so that the
    writers' puts land in that window, not only before or after it."""
    real = collecting._collect

    def slow(store, digest, cutoff):
        time.sleep(0.001)
        return real(store, digest, cutoff)

    monkeypatch.setattr(collecting, "_collect", slow)
    store = Store(tmp_path / "store")
    figures = FIGURES["gc vs re-puts"]
    for epoch in range(4):
        writers = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(HERE / "health_worker.py"),
                    "reput",
                    str(store.directory),
                    str(epoch),
                    "150",
                    str(seed),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            for seed in (epoch, epoch + 100)
        ]
        for i in range(150):
            store.put_value(worker.reput_value(epoch, i))
        for path in (store.directory / "blobs").rglob("*"):
            if path.is_file():
                os.utime(path, (time.time() - 2 * HOUR, time.time() - 2 * HOUR))
        for w in writers:
            assert w.stdout.readline() == "ready\n", w.communicate()[1]
        stop, passes, errors = threading.Event(), [0, 0, 0], []
        collector = threading.Thread(target=_gc_loop, args=(store, stop, passes, errors))
        collector.start()
        for w in writers:
            w.stdin.write("go\n")
            w.stdin.flush()
        communicated(writers, 300, fail_fast=True)
        stop.set()
        collector.join()
        assert not errors, errors
        figures["trials"] += 1
        figures["gc passes"] += passes[0]
        figures["faults"] += 300  # puts of old unreachable blobs, racing the gc
        figures["removed"] += passes[1]
        figures["raced, put back"] += passes[2]
        report = health.verify(store)
        figures["detected"] += len(report.problems)
        assert report.clean, report.lines()
        for name in store.bound("reput/"):
            i = int(name.rsplit("/", 1)[1])
            value = store.recall(name)
            ok = value["i"] == i and bool((value["w"] == epoch * 100_000 + i).all())
            figures["lost"] += not ok
            assert ok, name
            store.forget(name)


def test_gc_in_a_loop_while_soma_clients_keep_and_gather(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four `soma client` processes run three rounds while gc loops; the store already holds
    every blob they will write, from an identical run since dropped and two hours old, so
    every put races the gc, which is slowed (20 ms before each removal, a pass lasting about
    as long as the run) so that the puts land between its listing and its removals."""
    real = collecting._collect

    def slow(store, digest, cutoff):
        time.sleep(0.02)
        return real(store, digest, cutoff)

    monkeypatch.setattr(collecting, "_collect", slow)

    def clients(run: str) -> list[subprocess.Popen]:
        base = [sys.executable, str(HERE / "round_worker.py"), "client", "--store", str(tmp_path)]
        args = ["--run", run, "--rounds", "3", "--clients", "4", "--option", "examples=64"]
        args += ["--option", "epochs=100", "--evaluate", "none"]  # rounds long enough to race
        return [
            subprocess.Popen(
                [*base, *args, "--mine", str(k)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            for k in range(4)
        ]

    communicated(clients("before"), 300, fail_fast=True)
    store = Store(tmp_path)
    before = [row["weights"] for row in status(store, "before")]
    old = {p.name for p in (tmp_path / "blobs").rglob("*") if p.is_file()}
    for name in store.bound():
        store.forget(name)
    for path in (tmp_path / "blobs").rglob("*"):
        if path.is_file():
            os.utime(path, (time.time() - 2 * HOUR, time.time() - 2 * HOUR))
    stop, passes, errors = threading.Event(), [0, 0, 0], []
    collector = threading.Thread(target=_gc_loop, args=(store, stop, passes, errors))
    running = clients("ctl")
    deadline = time.monotonic() + 120
    while not store.bound("ctl/") and time.monotonic() < deadline:
        time.sleep(0.005)  # the gc starts as the first client contributes to round 0
    collector.start()
    communicated(running, 300, fail_fast=True)
    stop.set()
    collector.join()
    assert not errors, errors
    figures = FIGURES["gc vs soma client"]
    figures["trials"] += 1
    figures["gc passes"] += passes[0]
    figures["removed"] += passes[1]
    figures["raced, put back"] += passes[2]
    again = reach.walk(store, {n: store.resolve(n) for n in store.bound()}).reached() & old
    figures["faults"] += len(again)  # old unreachable blobs the live run put again
    report = health.verify(store)
    figures["detected"] += len(report.problems)
    assert report.clean, report.lines()
    assert [row["weights"] for row in status(store, "ctl")] == before, "the same run, bit for bit"
    for row in status(store, "ctl"):
        record = store.recall_digest(row["average"])
        assert store.recall_digest(record["weights"])
        for given in record["inputs"]:
            assert store.recall_digest(given["weights"])
