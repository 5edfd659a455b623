"""A version's claimer killed while it computes is taken over, as a round's averager is: on a
folder at once (its pid is gone), on a bucket once its lease ran out; the version is then
made once, and the run replays."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time

import torch
from helpers import TESTS

from soma.asynchronous.replay import replay
from soma.asynchronous.versions import Versions
from soma.config.asynchronous import Buffered
from soma.round import layout, once
from soma.round.once import Place
from soma.store import Store
from soma.timing import Backoff

QUICK = Backoff(first=0.002, cap=0.02)
_PREFIXES = itertools.count()


def _killed_mid_version(url: str) -> tuple[Store, Place]:
    """A run with one pending update, whose version 1 a process claimed and was killed
    making: the store and version 1's place."""
    store = Store(url)
    versions = Versions(store, "a", Buffered(buffer=1))
    versions.begin(store.put_value({"fc": {"w": torch.zeros(3)}}), deadline=None)
    versions.contribute(0, 0, {"fc": {"w": torch.ones(3)}}, 1)
    worker = subprocess.Popen(
        [sys.executable, str(TESTS / "async_worker.py"), url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout.readline().strip() == "computing", worker.stderr.read()
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    place = Place(layout.version("a", 1))
    assert store.resolve(place.claimed) is not None and store.resolve(place.published) is None
    return store, place


def _taken_over(store: Store, place: Place) -> None:
    versions = Versions(store, "a", Buffered(buffer=1))
    assert versions.advance(backoff=QUICK, deadline=30, lease=1.0) == 1
    assert store.bound(place.takeovers) == [place.takeover(1)]
    assert once.computations(store, place) == 1
    assert versions.record(1)[1]["averaged_by"]["pid"] == os.getpid()
    assert [r.problems for r in replay(store, "a")] == [[], []]


def test_a_claimer_killed_mid_version_is_taken_over_on_a_folder(tmp_path) -> None:
    _taken_over(*_killed_mid_version(str(tmp_path)))


def test_a_claimer_killed_mid_version_is_taken_over_on_a_bucket_after_its_lease(bucket) -> None:
    from s3_bucket import BUCKET

    store, place = _killed_mid_version(f"s3://{BUCKET}/async{next(_PREFIXES)}-{os.getpid()}")
    started = time.monotonic()
    _taken_over(store, place)
    assert time.monotonic() - started > 0.5, "taken over only once its lease ran out"
