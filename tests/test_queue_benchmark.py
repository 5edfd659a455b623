"""benchmarks/slurm_queue.py, its smallest run on the test cluster: synchronous rounds that
wait for every client and the asynchronous array, one client held a few seconds, each to its
end, and the table written through the shared writer (benchmarks/_measure.py).

Needs the one-node cluster of tests/slurm (`bash tests/slurm/start.sh`); skipped when it is
not running. About a minute: two arrays of 4 digits clients."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from slurm.cluster import cluster_running

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parent.parent


def benchmark():
    path = ROOT / "benchmarks" / "slurm_queue.py"
    spec = importlib.util.spec_from_file_location("slurm_queue_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_smallest_run_waits_out_the_hold_and_writes_its_table(tmp_path):
    up, why = cluster_running()
    if not up:
        pytest.skip(why)
    argv = ["--quick", "--modes", "all,async", "--release", "5", "10", "--versions", "30"]
    queue = benchmark()
    outcomes = queue.main([*argv, "--out", str(tmp_path)])
    synchronous, asynchronous = outcomes
    (released,) = queue.Schedule.drawn(0, 4, 1, 5, 10).held.values()
    assert synchronous.finished and len(synchronous.curve) == 3
    assert set(synchronous.states.values()) == {"COMPLETED"}, synchronous.states
    # every round waited for the held client: none before its release
    assert all(seconds >= released for seconds, _ in synchronous.curve), synchronous.curve
    assert asynchronous.finished and len(asynchronous.curve) == 30
    for outcome in outcomes:
        assert outcome.cost.jobs == 4 and outcome.cost.cpu_hours > 0
        assert outcome.hours_until(float("inf")) == pytest.approx(outcome.cost.cpu_hours, 0.05)
    written = (tmp_path / "slurm_queue.md").read_text()
    assert written.startswith("## Run of ") and "| load average | " in written
    assert "sync, all wait " in written and "async, buffer 2 " in written
