"""What Slurm jobs cost (soma.slurm.cost), from sacct's text, without a cluster; and, on the
test cluster (tests/slurm: skipped, saying why, without it), the summary's cost columns of a
run whose process ran as a Slurm job, from sacct as it is."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from soma.slurm.cost import Cost, by_round, combined, parse_costs, said, total, total_of

# What `sacct -P -n -o COST_FIELDS -j ...` prints: an array's task (1 core, held 8 s in the
# queue, no energy plugin: 0), a GPU job with energy accounted on its line, a job whose steps
# alone say their energy, and one still pending (Start Unknown).
SACCT = """\
376_1|COMPLETED|2026-12-06T11:18:16|2026-12-06T11:18:24|2026-12-06T11:18:30|00:00:06|1|billing=1,cpu=1,mem=1000M,node=1|00:02.171||0
376_1.batch|COMPLETED|2026-12-06T11:18:24|2026-12-06T11:18:24|2026-12-06T11:18:30|00:00:06|1|cpu=1,mem=1000M,node=1|00:00.015|10240K|0
376_1.0|COMPLETED|2026-12-06T11:18:24|2026-12-06T11:18:24|2026-12-06T11:18:30|00:00:06|1|cpu=1,mem=1000M,node=1|00:02.156|1536M|0
500|COMPLETED|2026-12-06T10:00:00|2026-12-06T11:00:00|2026-12-06T13:00:00|02:00:00|8|billing=8,cpu=8,gres/gpu=2,mem=16000M,node=1|10:00:00||7200000
500.0|COMPLETED|2026-12-06T11:00:00|2026-12-06T11:00:00|2026-12-06T13:00:00|02:00:00|8|cpu=8,gres/gpu=2|09:59:00|3G|7100000
501|COMPLETED|2026-12-06T10:00:00|2026-12-06T10:00:30|2026-12-06T10:01:30|00:01:00|2|cpu=2,node=1|00:01:00||
501.0|COMPLETED|2026-12-06T10:00:30|2026-12-06T10:00:30|2026-12-06T10:01:00|00:00:30|2|cpu=2|00:00:30||1500
501.1|COMPLETED|2026-12-06T10:01:00|2026-12-06T10:01:00|2026-12-06T10:01:30|00:00:30|2|cpu=2|00:00:30||500
502|PENDING|2026-12-06T10:00:00|Unknown|Unknown|00:00:00|4|billing=4,cpu=4,node=1|00:00:00||0
"""


def test_each_job_says_what_it_was_allocated_used_and_waited():
    costs = parse_costs(SACCT)
    assert list(costs) == ["376_1", "500", "501", "502"]
    task = costs["376_1"]
    assert (task.cpus, task.gpus, task.elapsed_s, task.queue_s) == (1, 0, 6.0, 8.0)
    assert task.cpu_hours == pytest.approx(6 / 3600) and task.gpu_hours == 0
    assert task.cpu_used_s == pytest.approx(2.171)
    assert task.mem_peak_mb == 1536  # the largest of its steps
    assert task.energy_j is None  # 0: no energy plugin, not "free"
    gpu = costs["500"]
    assert (gpu.cpu_hours, gpu.gpu_hours, gpu.queue_s) == (16.0, 4.0, 3600.0)
    assert gpu.energy_j == 7_200_000 and gpu.mem_peak_mb == 3072
    assert costs["501"].energy_j == 2000  # the job's line has none: its steps'
    pending = costs["502"]
    assert pending.queue_s is None and pending.cpu_hours == 0


def test_a_run_sums_its_jobs_and_says_which_have_no_energy():
    summed = total(parse_costs(SACCT).values())
    assert summed.jobs == 4
    assert summed.cpu_hours == pytest.approx(6 / 3600 + 16 + 2 / 60)
    assert summed.gpu_hours == 4.0
    assert summed.queue_s == 8 + 3600 + 30
    assert summed.queue_share == pytest.approx((8 + 3630) / (8 + 3630 + 6 + 7200 + 60))
    assert summed.mem_peak_mb == 3072
    assert summed.energy_j == 7_202_000 and summed.unaccounted_energy == ["376_1", "502"]
    assert total([]).queue_share is None and total([]).energy_j is None
    assert total([Cost("1", cpus=2, elapsed_s=1800)]).cpu_hours == 1.0


def test_a_runs_cost_is_said_in_one_line():
    assert said(total(parse_costs(SACCT).values())) == (
        "16.0 core-hours (10.0 used), 4.0 GPU-hours, memory peak 3072 MB, queue wait 33 % of "
        "the jobs' time, energy 7202.0 kJ (2 jobs not accounted)"
    )
    assert said(total([Cost("1", cpus=1, elapsed_s=3600)])) == (
        "1.0 core-hours (0.0 used), 0 GPU-hours, memory peak not sampled, queue wait 0 % of "
        "the jobs' time, energy not accounted"
    )
    small = said(total([Cost("1", cpus=1, elapsed_s=130, cpu_used_s=2)]))  # a test run's
    assert small.startswith("0.036 core-hours (0.00056 used)"), small


def test_a_job_that_served_several_rounds_is_split_among_them_and_the_rounds_add_up():
    """Job 500 (a client's job that runs every round) served rounds 0-3, 376_1 only round
    0: each round's share of 500 is a quarter, its queue wait counted in its first round,
    and the rounds sum to the run; a job sacct does not know (999) is left out."""
    costs = parse_costs(SACCT)
    rounds = by_round({0: {"500", "376_1"}, 1: {"500"}, 2: {"500", "999"}, 3: {"500"}}, costs)
    assert list(rounds) == [0, 1, 2, 3]
    assert rounds[0].jobs == 2 and rounds[1].jobs == 1
    assert rounds[1].cpu_hours == pytest.approx(16 / 4) and rounds[1].gpu_hours == 1.0
    assert rounds[0].queue_s == 3600 + 8 and rounds[1].queue_s == 0
    assert rounds[3].energy_j == pytest.approx(7_200_000 / 4)
    added = sum(r.cpu_hours for r in rounds.values())
    assert added == pytest.approx(total([costs["500"], costs["376_1"]]).cpu_hours)
    assert by_round({0: {"999"}}, costs) == {}


def test_a_runs_rounds_combine_into_the_runs_cost() -> None:
    """The rounds of a run (by_round splits a job that served several so that they add up)
    combine into the run's sum: the hours and waits added, the peak the largest, every job
    without energy named once."""
    costs = parse_costs(SACCT)
    rounds = by_round({0: {"500", "376_1"}, 1: {"500", "502"}}, costs)
    whole, jobs = combined(rounds.values()), total(costs[j] for j in ("500", "376_1", "502"))
    assert whole.cpu_hours == pytest.approx(jobs.cpu_hours)
    assert whole.queue_s == jobs.queue_s and whole.mem_peak_mb == 3072
    assert whole.unaccounted_energy == ["376_1", "502"]
    assert whole.energy_j == pytest.approx(7_200_000)
    assert total_of({**vars(whole), "queue_share": 0.5}) == whole  # soma status's dict
    assert combined([]) == total([])


@pytest.mark.slurm
def test_the_summary_of_a_run_on_the_test_cluster_says_each_rounds_core_hours(
    slurm, tmp_path: Path
) -> None:
    """A run in one Slurm job (`soma simulate` under srun, 1 core): the summary's table has
    each round's core-hours, as sacct accounts the job (split between the two rounds its
    records name), its queue wait in the first, and the CPU seconds the records say."""
    from slurm.harness import FEW_JOBS, ended

    from soma.round.report import status
    from soma.slurm.cost import sacct_costs
    from soma.store import Store
    from soma.workflow import report, write_receipt

    store = tmp_path / "store"
    command = ["srun", "-J", slurm.prefix, "-n", "1", "-c", "1", sys.executable, "-m", "soma.cli"]
    command += ["simulate", "--clients", "2", "--rounds", "2", "--store", store, "--run", "r"]
    done = slurm.run(command, cwd=tmp_path, timeout=FEW_JOBS)
    assert done.returncode == 0, done.tail()
    rows = status(Store(store), "r")
    (job,) = {row["averaged_by"]["slurm_job"] for row in rows}
    assert ended(job) == "COMPLETED"
    averages = []
    for row in rows:
        path = tmp_path / "results" / f"{row['round']}.json"
        write_receipt(path, {"run": "r", "round": row["round"], "weights": row["weights"]})
        averages.append(str(path))
    spent = report.round_costs({"store": str(store)}, averages)
    assert spent is not None
    table = tmp_path / "summary.tsv"
    made = report.with_costs([{"strategy": "fedavg", "round": r} for r in (0, 1)], spent)
    report.summary(made, "accuracy", str(table), str(tmp_path / "a.png"), spent=spent.said)
    lines = [line.split("\t") for line in table.read_text().splitlines()]
    header = lines[0]
    for column in ("cpu_s", "cpu_s_cumulative", "core_hours", "core_hours_cumulative"):
        assert column in header, (column, header)
    core = [float(line[header.index("core_hours")]) for line in lines[1:]]
    whole = sacct_costs([job])[job].cpu_hours
    assert whole > 0 and sum(core) == pytest.approx(whole, abs=1e-3), (core, whole)
    assert [line[header.index("queue_wait_s")] != "" for line in lines[1:]] == [True, True]
    assert float(lines[2][header.index("queue_wait_s")]) == 0, "the wait counted in round 0"
    assert "their Slurm jobs:" in spent.said and "core-hours" in spent.said
