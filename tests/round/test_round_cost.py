"""Issue 56, item 3 (`soma status`'s part): what each round cost. Every holder record says
the CPU seconds its process had used (soma.round.holders `cpu_s`), so a run without Slurm
shows each round's CPU seconds; a run whose records name Slurm jobs shows their core- and
GPU-hours, queue wait and energy, sacct asked once and never required (here its text is
faked where soma asks it, soma.slurm.query.accounting)."""

from __future__ import annotations

import pytest

import soma
from soma.round import holders, report
from soma.slurm.limits import SlurmRefused
from soma.store import Store

# `sacct -P -n -o COST_FIELDS -j 40,41_3`: a client's job that served both rounds (4 cores,
# 10 min each way: queued, then ran), and an array's task that served round 1 only.
SACCT = """\
40|COMPLETED|2026-12-06T10:00:00|2026-12-06T10:10:00|2026-12-06T10:20:00|00:10:00|4|cpu=4,node=1|00:20:00||
41_3|COMPLETED|2026-12-06T10:00:00|2026-12-06T10:00:00|2026-12-06T10:30:00|00:30:00|2|cpu=2,gres/gpu=1,node=1|00:30:00||36000
"""


def by(pid: int, cpu_s: float, job: str | None = None, array: str | None = None) -> dict:
    found = {"host": "h", "pid": pid, "pid_start": 7, "cpu_s": cpu_s, "slurm_job": job}
    return found if array is None else {**found, "slurm_array": array}


def test_a_holder_record_says_the_cpu_time_its_process_had_used() -> None:
    before = holders.me()["cpu_s"]
    sum(i * i for i in range(300_000))  # some CPU work
    after = holders.me()["cpu_s"]
    assert isinstance(before, float) and 0 < before < after


def test_each_round_counts_what_its_processes_used_since_their_records_before() -> None:
    """Process 1 (a `soma client` hosting clients 0 and 1) wrote at 10 s and 12 s in round
    0, 30 s in round 1; process 2 (an averager) at 5 s, then 6 s; process 3 only in round 1."""
    rows = [
        {"_by": [by(1, 10.0), by(1, 12.0), by(2, 5.0)]},
        {"_by": [by(1, 30.0), by(2, 6.0), by(3, 4.0), None]},
        {"_by": [{"host": "h", "pid": 9}]},  # records older than cpu_s: nothing said
    ]
    report._costs(rows)
    assert [row["cpu_s"] for row in rows] == [17.0, 18.0 + 1.0 + 4.0, None]
    assert all("_by" not in row and row["cost"] is None for row in rows)  # no Slurm job


def test_a_rounds_slurm_jobs_are_costed_from_one_sacct(monkeypatch) -> None:
    asked = []

    def accounting(jobs, fields):
        asked.append(jobs)
        return SACCT

    monkeypatch.setattr("soma.slurm.query.accounting", accounting)
    rows = [
        {"_by": [by(1, 1.0, job="40")]},
        {"_by": [by(1, 2.0, job="40"), by(5, 1.0, job="77", array="41_3")]},
    ]
    report._costs(rows)
    assert asked == [["40", "41_3"]]  # once, an array's task by its array name
    first, second = rows[0]["cost"], rows[1]["cost"]
    assert first["jobs"] == 1 and first["cpu_hours"] == pytest.approx(4 * 600 / 3600 / 2)
    assert first["queue_s"] == 600 and second["queue_s"] == 0  # the wait: the job's first round
    assert second["gpu_hours"] == pytest.approx(0.5) and second["energy_j"] == 36000
    assert second["unaccounted_energy"] == ["40"]


def test_without_sacct_a_round_shows_no_slurm_cost_and_its_cpu_all_the_same(monkeypatch) -> None:
    def accounting(jobs, fields):
        raise SlurmRefused("no `sacct` here: is this a Slurm login node?")

    monkeypatch.setattr("soma.slurm.query.accounting", accounting)
    rows = [{"_by": [by(1, 3.0, job="40")]}]
    report._costs(rows)
    assert rows[0]["cost"] is None and rows[0]["cpu_s"] == 3.0


def test_a_simulated_run_shows_each_rounds_cpu_seconds(tmp_path) -> None:
    soma.simulate("soma.tasks.control", clients=3, rounds=2, store=tmp_path / "s", run="r")
    rows = report.status(Store(tmp_path / "s"), "r")
    assert [row["round"] for row in rows] == [0, 1]
    assert all(row["cpu_s"] > 0 and row["cost"] is None for row in rows)
