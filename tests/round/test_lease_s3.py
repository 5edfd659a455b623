"""Holders across sites (soma.round.lease): on a bucket a claim comes with a lease, renewed by
compare-and-swap; a holder whose lease ran out is taken over, and a late holder cannot
publish over its successor. Real averaging processes on the real S3 server (the `bucket`
fixture), killed and stopped with real signals; leases of a second."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("boto3", reason="boto3 (soma[s3]) is not installed")

from helpers import HANG  # noqa: E402
from s3_bucket import BUCKET  # noqa: E402

from soma.cli import main as soma  # noqa: E402
from soma.round import (  # noqa: E402
    Backoff,
    Meeting,
    arrivals,
    average_round,
    contribute,
    holders,
    inputs_key,
    layout,  # noqa: E402
    present,
)
from soma.round.once import Place, computations  # noqa: E402
from soma.store import Store  # noqa: E402
from soma.store.errors import BadStore  # noqa: E402

HERE = Path(__file__).parents[1]
QUICK = Backoff(first=0.01, cap=0.1)
_PREFIXES = iter(range(10**6))


def weights(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"fc": {"weight": torch.randn(4, 3, generator=g)}}


def a_round(signing=None) -> tuple[str, Store, Meeting]:  # noqa: ANN001
    """A store under a prefix of its own, and a meeting of two clients who both came."""
    url = f"s3://{BUCKET}/lease{next(_PREFIXES)}-{os.getpid()}"
    store, meeting = Store(url), Meeting("r", 0, 2, signing=signing)
    for k in range(2):
        contribute(store, meeting, weights(k), mine=k)
    return url, store, meeting


def place_of(store: Store, meeting: Meeting) -> Place:
    inputs, _ = arrivals(store, meeting, present(store, meeting))
    return Place(f"{meeting.prefix}/inputs/{inputs_key(meeting.key, inputs)}")


class Worker:
    """An averaging process (tests/lease_worker.py) whose output lines are read as they come."""

    def __init__(
        self, url: str, *, lease: float, hold: float, gate: bool = False, signed: Path | None = None
    ) -> None:
        command = [sys.executable, str(HERE / "lease_worker.py"), "--store", url, "--run", "r"]
        command += ["--lease", str(lease), "--hold", str(hold), *(["--gate"] if gate else [])]
        if signed is not None:  # a folder with roster.json and every client's key
            command += ["--roster", str(signed / "roster.json")]
            command += ["--keys", str(signed / "{client}.key")]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        self.pid = self.process.pid
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(json.loads(line))

    def go(self) -> Worker:
        """Begin averaging (its imports may be done already); with a gate, then compute."""
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        return self

    def said(self, key: str, timeout: float = HANG) -> object:
        """The value of the next line saying `key` (the others skipped)."""
        end = time.monotonic() + timeout
        while True:
            line = self.lines.get(timeout=max(0.01, end - time.monotonic()))
            if key in line:
                return line[key]

    def drain(self) -> None:
        """Forget the lines said so far."""
        while not self.lines.empty():
            self.lines.get_nowait()

    def signal(self, number: int) -> None:
        os.kill(self.pid, number)

    def end(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


@pytest.fixture
def workers():
    started: list[Worker] = []
    yield lambda *a, **k: started.append(Worker(*a, **k)) or started[-1]
    for w in started:
        w.signal(signal.SIGCONT) if w.process.poll() is None else None
        w.end()


def averaged_by(store: Store, digest: str) -> int:
    return store.recall_digest(digest)["averaged_by"]["pid"]


def test_a_holder_killed_mid_averaging_is_taken_over_after_its_lease(bucket, workers) -> None:
    url, store, meeting = a_round()
    holder = workers(url, lease=1.0, hold=60).go()
    assert holder.said("computing") == holder.pid
    holder.signal(signal.SIGKILL)
    start = time.monotonic()
    digest = average_round(store, meeting, deadline=20, backoff=QUICK, lease=1.0)
    assert time.monotonic() - start > 1.0, "taken over only once its lease ran out"
    place = place_of(store, meeting)
    assert store.bound(place.takeovers) == [place.takeover(1)]
    assert computations(store, place) == 1 and averaged_by(store, digest) == os.getpid()
    assert store.resolve(meeting.average) == store.resolve(place.published) == digest
    assert store.recall(place.lease)["published"] == digest
    assert soma(["verify", "--store", url]) == 0, "a lease is a record like any other"


def test_a_renewing_holder_is_not_taken_over_however_long_it_works(bucket, workers) -> None:
    url, store, meeting = a_round()
    holder = workers(url, lease=1.0, hold=2.5).go()
    holder.said("computing")
    start = time.monotonic()
    digest = average_round(store, meeting, deadline=20, backoff=QUICK, lease=1.0)
    assert time.monotonic() - start > 2.0, "waited longer than a lease for its holder"
    place = place_of(store, meeting)
    assert store.bound(place.takeovers) == [] and computations(store, place) == 1
    assert averaged_by(store, digest) == holder.pid
    assert holder.said("average") == digest


def test_a_holder_stopped_past_its_lease_wakes_and_cannot_publish_over_its_successor(
    bucket, workers
) -> None:
    url, store, meeting = a_round()
    late, successor = (workers(url, lease=1.0, hold=0, gate=True) for _ in range(2))
    late.go().said("computing")  # it holds the lease, and computes until its gate opens
    late.signal(signal.SIGSTOP)
    assert successor.go().said("computing") == successor.pid  # took over: the late one stopped
    late.drain()  # what it said before it stopped: the stop outlasted a lease, read by now
    late.signal(signal.SIGCONT)  # its work not done: its renewals go on while it waits
    # A renewal in flight at the stop may end as renewed on waking; the next one cannot.
    woke = late.said("renewed") is False or late.said("renewed") is False
    assert woke, "a holder woken past its lease renewed it"
    late.go()  # it computes, and publishes (over its successor) or is refused
    late.said("turned")
    successor.go()
    digest = successor.said("average")
    assert late.said("average") == digest, "the late holder leaves with its successor's average"
    said = {}
    for w in (late, successor):
        assert w.process.wait(timeout=HANG) == 0, w.process.stderr.read()
        said[w] = w.process.stderr.read()
    place = place_of(store, meeting)
    assert "overwritten by no successor" not in said[successor], "the late holder wrote it"
    assert averaged_by(store, digest) == successor.pid, "the late holder published over it"
    assert store.resolve(meeting.average) == store.resolve(place.published) == digest
    assert store.bound(place.takeovers) == [place.takeover(1)]
    assert computations(store, place) == 2, "both computed, and both are on record"
    assert [n for n in store.bound(meeting.prefix) if n.endswith("/published")] == [place.published]


def test_a_claim_and_a_lease_nobody_on_the_roster_signed_are_taken_over_at_once(
    bucket, tmp_path
) -> None:
    pytest.importorskip("cryptography")
    from soma.round.signing import SIGNED, Signing, make_keys

    roster = {k: make_keys(tmp_path, k)[1] for k in range(2)}
    signing = Signing.of(roster, str(tmp_path / "{client}.key"))
    _, store, meeting = a_round(signing)
    place = place_of(store, meeting)
    assert store.claim(place.claimed, store.put_value(holders.me(role="forger")))
    forged = {"holder": "x", "generation": 9, "renewals": 0, "seconds": 1e9, "published": None}
    assert store.swap(place.lease, None, store.put_value(forged)) is not None
    start = time.monotonic()
    digest = average_round(store, meeting, deadline=30, backoff=QUICK, lease=30.0)
    assert time.monotonic() - start < 10, "a forged claim holds nothing: no lease to wait out"
    assert store.bound(place.takeovers) == [place.takeover(1)]
    assert averaged_by(store, digest) == os.getpid()
    taker = store.recall(place.takeover(1))
    lease = store.recall(place.lease)
    assert SIGNED in taker and SIGNED in lease and lease["published"] == digest
    assert lease["holder"] == store.resolve(place.takeover(1)) and lease["generation"] == 1


def test_a_server_that_ignores_if_match_is_refused_before_anything_is_swapped(bucket) -> None:
    store = Store(f"s3://{BUCKET}/ignores-if-match-{os.getpid()}")
    a = store.put(b"a")

    def strip(request: object, **_: object) -> None:  # what such a server does with it
        if "If-Match" in request.headers:
            del request.headers["If-Match"]

    store.backend.client.meta.events.register("before-sign.s3.PutObject", strip)
    with pytest.raises(BadStore, match="ignores If-Match"):
        store.swap(layout.lease("p"), None, a)
    assert store.resolve(layout.lease("p")) is None


# --- whoever can write the bucket but holds no roster key ----------------------------------


def roster_in(folder: Path):  # noqa: ANN201
    """A roster of two clients whose keys are all in `folder` (roster.json beside them)."""
    pytest.importorskip("cryptography")
    from soma.round.signing import Signing, make_keys

    roster = {k: make_keys(folder, k)[1] for k in range(2)}
    (folder / "roster.json").write_text(json.dumps(roster))
    return Signing.of(roster, str(folder / "{client}.key"))


class Forger:
    """Whoever can write the bucket but holds no roster key: it overwrites a place's lease with
    an unconditional PUT every `every` seconds, by turns unsigned, signed by a key off the
    roster, and (once it has seen some) a genuine signed lease of the place from before. Each
    says its holder lasts `seconds` and is further on than any renewal."""

    def __init__(self, store: Store, place: Place, off: Path, seconds: float) -> None:
        from soma.round.signing import Signing, make_keys

        self.store, self.place, self.seconds = store, place, seconds
        self.off = Signing.of({9: make_keys(off, 9)[1]}, str(off / "{client}.key"))
        self.old: list[str] = []  # genuine leases seen, to bind again
        self.writes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def look(self) -> None:
        """Remember the genuine lease there now (before forging anything)."""
        digest = self.store.resolve(self.place.lease)
        if digest is not None and digest not in self.old:
            self.old.append(digest)

    def forge(self) -> None:
        from soma.round import signing as signatures

        terms = {"holder": "x", "generation": 0, "renewals": 10**6 + self.writes,
                 "seconds": self.seconds, "published": None}  # fmt: skip
        turn = self.writes % 3
        if turn == 0 or (turn == 2 and not self.old):
            digest = self.store.put_value(terms)
        elif turn == 1:
            name = self.place.lease
            digest = signatures.put(self.store, self.off, terms, name=name, by=9)
        else:
            # the next old lease each turn: with 3 of them, writes % 3 would name one only
            digest = self.old[(self.writes // 3) % len(self.old)]
        self.store.bind(self.place.lease, digest)
        self.writes += 1

    def start(self, every: float) -> Forger:
        def forging() -> None:
            while not self._stop.wait(every):
                self.forge()

        self._thread = threading.Thread(target=forging, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def test_a_lease_nobody_on_the_roster_signed_neither_takes_a_live_holder_over_nor_stops_it(
    bucket, workers, tmp_path
) -> None:
    signing = roster_in(tmp_path)
    url, store, meeting = a_round(signing)
    holder = workers(url, lease=1.0, hold=6.0, signed=tmp_path).go()
    waiter = workers(url, lease=1.0, hold=0, signed=tmp_path)
    holder.said("computing")
    place = place_of(store, meeting)
    forger = Forger(store, place, tmp_path / "off", seconds=0.01)
    forger.look()
    forger.start(every=0.15)
    try:
        waiter.go()
        digest = average_round(store, meeting, deadline=30, backoff=QUICK, lease=1.0)
    finally:
        forger.stop()
    assert computations(store, place) == 1, "a forged lease took a live holder's work over"
    assert store.bound(place.takeovers) == [] and averaged_by(store, digest) == holder.pid
    assert holder.said("average") == digest and waiter.said("average") == digest
    assert forger.writes >= 15, "the lease was overwritten all along the holder's work"
    assert store.resolve(meeting.average) == store.resolve(place.published) == digest


LONG = 3.0


def test_a_signed_holder_killed_under_forged_leases_is_taken_over_once_its_lease_runs_out(
    bucket, workers, tmp_path
) -> None:
    signing = roster_in(tmp_path)
    url, store, meeting = a_round(signing)
    # a lease of 3 s, which the forger's old genuine leases (bound again every 0.6 s) keep
    # alive under the mutant even when a loaded machine delays its thread by seconds
    holder = workers(url, lease=LONG, hold=60, signed=tmp_path).go()
    holder.said("computing")
    place = place_of(store, meeting)
    forger = Forger(store, place, tmp_path / "off", seconds=1e9)
    looked = time.monotonic()
    while len(forger.old) < 3:  # a few of its genuine renewals, to bind again once it is dead
        assert time.monotonic() - looked < HANG, "the holder renewed its lease fewer than 3 times"
        forger.look()
        time.sleep(0.2)
    holder.signal(signal.SIGKILL)
    holder.process.wait()
    forger.start(every=0.2)
    start = time.monotonic()
    try:
        digest = average_round(store, meeting, deadline=30, backoff=QUICK, lease=LONG)
    finally:
        forger.stop()
    assert time.monotonic() - start > LONG, "taken over only once its lease ran out"
    assert forger.writes >= 5
    assert store.bound(place.takeovers) == [place.takeover(1)]
    assert computations(store, place) == 1 and averaged_by(store, digest) == os.getpid()
    assert store.resolve(meeting.average) == store.resolve(place.published) == digest
