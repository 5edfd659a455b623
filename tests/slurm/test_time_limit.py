"""soma.slurm.time_limit: Slurm's signal before a job's time limit (SIGURG, `--signal=URG@...`)
makes a client still training leave its round saying so, and the quorum goes on at once. The
signal is sent here by the client's task itself (tests/fixtures/slow_task.py, `signalled`);
tests/slurm/test_slurm_profiles.py has Slurm send it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from soma import cli
from soma.round import status
from soma.slurm.time_limit import SIGNAL, TimeLimit, raised_at_time_limit
from soma.store import Store

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_the_signal_raises_inside_and_is_ignored_again_outside():
    with pytest.raises(TimeLimit, match="time limit, raise `runtime`"):
        with raised_at_time_limit():
            os.kill(os.getpid(), SIGNAL)
            time.sleep(5)  # interrupted at once
    assert signal.getsignal(SIGNAL) is signal.SIG_DFL  # SIGURG's default: ignored
    os.kill(os.getpid(), SIGNAL)  # nothing happens


def test_a_client_signalled_with_nothing_left_to_train_drops_out_all_the_same(
    tmp_path, monkeypatch
):
    """The signal comes as the training would end anyway (no sleep left to cut short): the
    client still drops out saying so, since its job may be killed at the limit whatever it
    does next, and the round goes on with its quorum; a training deaf to the signal is
    caught here without sleeping out its seconds (the test below shows the cut)."""
    monkeypatch.syspath_prepend(str(FIXTURES))  # the task `slow_task`
    store = tmp_path / "store"
    argv = ["simulate", "--store", str(store), "--run", "t", "--rounds", "1", "--clients", "2"]
    argv += ["--quorum", "1", "--task", "slow_task", "--option", "seconds=0"]
    argv += ["--option", "signalled=true", "--threads", "1"]
    assert cli.main(argv) == 0
    (round0,) = status(Store(store), "t")
    (dropped,) = round0["dropped"]
    assert dropped["client"] == 1
    assert "TimeLimit: time limit, raise `runtime`" in dropped["why"]


def test_a_client_signalled_while_training_drops_out_saying_so_and_the_round_goes_on(
    tmp_path, monkeypatch
):
    monkeypatch.syspath_prepend(str(FIXTURES))  # the task `slow_task`
    store = tmp_path / "store"
    argv = ["simulate", "--store", str(store), "--run", "t", "--rounds", "1", "--clients", "2"]
    argv += ["--quorum", "1", "--task", "slow_task", "--option", "seconds=20"]
    argv += ["--option", "signalled=true", "--threads", "1"]
    started = time.monotonic()
    assert cli.main(argv) == 0
    assert time.monotonic() - started < 15  # not the 20 s the client would have slept
    (round0,) = status(Store(store), "t")
    (dropped,) = round0["dropped"]
    assert dropped["client"] == 1
    assert "TimeLimit: time limit, raise `runtime`" in dropped["why"]
