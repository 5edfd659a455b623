"""A round's averaging at its job's time limit (soma.round.once, soma.slurm.time_limit): Slurm's
signal before the limit ends a process computing the averaging it claimed, and the next one
takes the claim over at once, not when the limit would have killed the holder. A real
averaging process (tests/lease_worker.py) on a folder store, signalled as Slurm signals it;
tests/slurm/test_slurm_profiles.py has Slurm send the signal to a client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import HANG

import soma.round
from soma.round import Backoff, Meeting, arrivals, average_round, contribute, inputs_key, present
from soma.round.once import Place, computations
from soma.slurm.time_limit import SIGNAL, TimeLimit
from soma.store import Store
from soma.timing import LEASE

HERE = Path(__file__).parents[1]


def a_round(folder: Path) -> tuple[Store, Meeting]:
    """A folder store and round 0 of run r, whose two clients both came."""
    store, meeting = Store(folder), Meeting("r", 0, 2)
    for k in range(2):
        g = torch.Generator().manual_seed(k)
        contribute(store, meeting, {"fc": {"weight": torch.randn(4, 3, generator=g)}}, mine=k)
    return store, meeting


def place_of(store: Store, meeting: Meeting) -> Place:
    inputs, _ = arrivals(store, meeting, present(store, meeting))
    return Place(f"{meeting.prefix}/inputs/{inputs_key(meeting.key, inputs)}")


def test_an_averaging_signalled_while_it_computes_lets_go_publishing_nothing(
    tmp_path, monkeypatch
) -> None:
    """In one process: Slurm's signal comes while the averaging this process claimed computes
    (sent by the computation itself), and the averaging ends raising TimeLimit, saying why,
    instead of computing on into the limit; nothing is published and its claim is left to
    whoever runs it next (the test below: another process takes a signalled one over)."""
    store, meeting = a_round(tmp_path / "store")
    real = soma.round._Averaging.compute

    def signalled(self, inputs, me):  # noqa: ANN001, ANN202
        os.kill(os.getpid(), SIGNAL)  # as Slurm sends it, before the job's time limit
        return real(self, inputs, me)

    monkeypatch.setattr(soma.round._Averaging, "compute", signalled)
    with pytest.raises(TimeLimit, match="time limit, raise `runtime`") as raised:
        average_round(store, meeting, deadline=30, backoff=Backoff(first=0.01), lease=LEASE)
    assert "round 0 of run 'r'" in str(raised.value), raised.value
    place = place_of(store, meeting)
    assert store.resolve(place.claimed) is not None, "it had claimed the averaging"
    assert store.resolve(place.published) is None and store.resolve(meeting.average) is None
    assert computations(store, place) == 0


def test_an_averager_signalled_before_its_time_limit_lets_go_and_is_taken_over_at_once(
    tmp_path,
) -> None:
    store, meeting = a_round(tmp_path / "store")
    command = [sys.executable, str(HERE / "lease_worker.py"), "--store", str(tmp_path / "store")]
    # computes for 20 s unless told: the signal comes while it computes, and a holder deaf to
    # it computes on, publishes and ends well (exit 0, no TimeLimit said), which fails below
    command += ["--run", "r", "--lease", "1", "--hold", "20"]
    holder = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert json.loads(holder.stdout.readline()) == {"computing": holder.pid}
        holder.send_signal(SIGNAL)
        _, err = holder.communicate(timeout=HANG)
    finally:
        holder.kill()
    # it let go at the signal: it ended failing, saying why, not having computed its 20 s
    assert holder.returncode == 1, err
    assert "TimeLimit: time limit, raise `runtime`" in err and "round 0 of run 'r'" in err, err
    started = time.monotonic()
    digest = average_round(
        store, meeting, deadline=30, backoff=Backoff(first=0.01, cap=0.1), lease=LEASE
    )
    assert time.monotonic() - started < 5, "taken over at once: its holder had ended"
    place = place_of(store, meeting)
    assert store.bound(place.takeovers) == [place.takeover(1)]
    assert computations(store, place) == 1  # the signalled one never finished its computation
    assert store.resolve(meeting.average) == digest
