"""A process that waits says so (soma.round.waiting): at growing intervals, naming the clients
it waits for and their site, or the holder of the averaging by its site and host; the
average's log says whether this process computed it or took another's, and whose; `soma
status` names a holder and an averager by site. In process (the intervals shortened), and
with two real `soma client` processes, one started late."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from helpers import HANG

from soma.cli import main
from soma.round import (
    AveragerDied,
    Meeting,
    arrivals,
    average_round,
    contribute,
    holders,
    inputs_key,
    present,
    read_record,
    waiting,
)
from soma.round.once import Backoff, Place
from soma.store import Store
from soma.timing import LEASE

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]
QUICK = Backoff(first=0.005, cap=0.05)
SITES = {"A": [0, 1], "B": [2, 3]}


def weights(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"fc": {"weight": torch.randn(4, 3, generator=g), "bias": torch.randn(4, generator=g)}}


@pytest.fixture
def quick_lines(monkeypatch, caplog) -> pytest.LogCaptureFixture:
    """Waiting lines after 0.2 s, then every 0.3 s doubling up to 0.6 s; captured."""
    monkeypatch.setattr(waiting, "FIRST", 0.2)
    monkeypatch.setattr(waiting, "EVERY", 0.3)
    monkeypatch.setattr(waiting, "CAP", 0.6)
    caplog.set_level(logging.INFO, logger="soma.round.waiting")
    return caplog


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "soma.round.waiting"]


def test_a_wait_is_said_first_after_a_while_then_at_doubling_intervals_up_to_a_cap(
    quick_lines,
) -> None:
    said: list[float] = []
    wait = waiting.Waiting("round 0 of run 'w'")
    started = time.monotonic()
    while time.monotonic() - started < 2.0:
        before = len(lines(quick_lines))
        wait.tick(str, "client 1")
        if len(lines(quick_lines)) > before:
            said.append(time.monotonic() - started)
        time.sleep(0.005)
    assert said and said[0] >= 0.2, "nothing is said of a wait shorter than FIRST"
    gaps = [b - a for a, b in zip(said, said[1:], strict=False)]
    assert len(said) >= 3, said
    # each time is read just after its tick, so a gap may come out a few ms short of the
    # interval the process kept (measured once: 0.29998 for 0.3); 20 ms of slack still
    # tells 0.3 from 0.6, and a doubling from none
    slack = 0.02
    assert gaps[0] >= 0.3 - slack and all(g >= 0.6 - slack for g in gaps[1:]), gaps  # capped
    assert all(g < 1.2 for g in gaps), gaps  # never more than the cap (and some slack)
    assert all(re.fullmatch(r"round 0 of run 'w': waited \d s so far for client 1", x) for x in
               lines(quick_lines))  # fmt: skip


def test_the_clients_awaited_are_named_by_site() -> None:
    assert waiting.clients([2, 3], SITES) == "clients 2, 3 at site B"
    assert waiting.clients([1, 2, 3], SITES) == "client 1 at site A, clients 2, 3 at site B"
    assert waiting.clients(list(range(6)) + [9]) == "clients 0-5, 9"
    assert waiting.clients([4]) == "client 4"


def test_a_site_waiting_for_the_round_names_the_missing_clients_and_their_site(
    tmp_path, quick_lines
) -> None:
    store, meeting = Store(tmp_path), Meeting("w", 0, 4)
    for k in SITES["A"]:
        contribute(store, meeting, weights(k), mine=k)
    done: list[str] = []
    waiter = threading.Thread(
        target=lambda: done.append(
            average_round(
                store, meeting, deadline=60, backoff=QUICK, site="A", sites=SITES, lease=LEASE
            )
        )
    )
    waiter.start()
    until = time.monotonic() + HANG  # for a hang: the waiter's line comes within its poll
    while not lines(quick_lines) and time.monotonic() < until and waiter.is_alive():
        time.sleep(0.05)
    for k in SITES["B"]:
        contribute(store, meeting, weights(k), mine=k)
    waiter.join(60)
    said = lines(quick_lines)
    assert said, "a site waiting for the others' clients said nothing"
    assert all("round 0 of run 'w': waited" in x for x in said), said
    assert "for clients 2, 3 at site B (quorum 4 of 4, 2 came)" in said[0], said
    by = read_record(store, done[0])["averaged_by"]
    assert by["site"] == "A", "the holder record names its site"
    assert holders.averaged(by).startswith("computed the average here (site A, host ")


def test_a_process_waiting_for_an_average_another_holds_names_its_site_and_host(
    tmp_path, quick_lines, capsys
) -> None:
    store, meeting = Store(tmp_path), Meeting("r", 0, 2)
    for k in range(2):
        contribute(store, meeting, weights(k), mine=k)
    holder = holders.me(role="averaging", site="B")  # alive, as far as anyone can tell
    holder["host"] = "gpu-node-07"  # no Slurm job: asking Slurm may take long here
    inputs, _ = arrivals(store, meeting, present(store, meeting))
    place = Place(meeting.averaging(inputs_key(meeting.key, inputs)))
    assert store.claim(place.claimed, store.put_value(holder))
    with pytest.raises(AveragerDied) as died:
        average_round(
            store, meeting, deadline=1.0, backoff=QUICK, site="A", sites={"A": [0, 1]}, lease=LEASE
        )
    where = f"site B (host gpu-node-07, pid {holder['pid']}, since {holder['when']})"
    assert f"claimed by {where}" in str(died.value)
    said = lines(quick_lines)
    assert said and all(f"for the average, claimed by {where}" in x for x in said), said
    assert main(["status", "--store", str(tmp_path), "--run", "r"]) == 0
    assert f"round    0: 2/2 written; averaging held by {where}" in capsys.readouterr().out


def test_the_average_says_who_computed_it_and_soma_status_names_its_site(tmp_path, capsys) -> None:
    mine = holders.me(site="A")
    here = f"host {mine['host']}, pid {os.getpid()}"
    assert holders.averaged(mine).startswith(f"computed the average here (site A, {here}, since")
    theirs = {**mine, "pid": 1}
    there = f"host {mine['host']}, pid 1, since"
    assert holders.averaged(theirs).startswith(f"took the average computed by site A ({there}")
    old = {k: v for k, v in theirs.items() if k != "site"}  # a record from before sites
    assert holders.averaged(old).startswith(f"took the average computed by {there}")
    store, meeting = Store(tmp_path), Meeting("s", 0, 1)
    contribute(store, meeting, weights(0), mine=0)
    average_round(
        store, meeting, deadline=5, backoff=QUICK, site="B", sites={"B": [0]}, lease=LEASE
    )
    assert main(["status", "--store", str(tmp_path), "--run", "s"]) == 0
    line = r"round    0: 1/1 written; average weights [0-9a-f]{12} by site B"
    assert re.search(line, capsys.readouterr().out)


# --- real processes ---------------------------------------------------------------------------


@pytest.mark.slow
def test_a_soma_client_waiting_for_a_late_one_says_so_and_one_says_it_took_the_others_average(
    tmp_path,
) -> None:
    """Two `soma client` processes on a folder store, the second started only once the first
    said it waits for it: the first's log names client 1; afterwards one says it computed the
    average here, the other that it took it, naming the first's host and pid."""
    command = [sys.executable, "-m", "soma.cli", "client", "--store", str(tmp_path / "store")]
    command += ["--run", "late", "--rounds", "1", "--clients", "2", "--task", "soma.tasks.control"]
    command += ["--option", "examples=32", "--option", "epochs=1", "--evaluate", "none"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    logs = [tmp_path / f"{k}.log" for k in range(2)]
    first = subprocess.Popen([*command, "--mine", "0"], stdout=subprocess.DEVNULL,
                             stderr=logs[0].open("w"), env=env)  # fmt: skip
    until = time.monotonic() + HANG  # for a hang: the first's exit fails at once
    while "waited" not in logs[0].read_text() and first.poll() is None:
        assert time.monotonic() < until, logs[0].read_text()
        time.sleep(0.2)
    second = subprocess.Popen([*command, "--mine", "1"], stdout=subprocess.DEVNULL,
                              stderr=logs[1].open("w"), env=env)  # fmt: skip
    for process in (first, second):
        assert process.wait(timeout=HANG) == 0, [log.read_text() for log in logs]
    said = [log.read_text() for log in logs]
    waited = [x for x in said[0].splitlines() if "waited" in x]
    assert waited and all("round 0 of run 'late': waited" in x for x in waited), said[0]
    assert all(x.endswith("for client 1 (quorum 2 of 2, 1 came)") for x in waited), waited
    computed = [
        k for k in range(2) if "round 0 of run 'late': computed the average here" in said[k]
    ]
    assert len(computed) == 1, said
    (took,) = {0, 1} - set(computed)
    pid = (first, second)[computed[0]].pid
    assert "round 0 of run 'late': took the average computed by host " in said[took], said
    assert f", pid {pid}, since " in said[took], said
