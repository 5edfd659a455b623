"""`soma slurm usage` (soma.slurm.usage): asked against used per rule, from sacct's text and
the Slurm plugin's log folders, without a cluster (tests/slurm/test_slurm_usage.py runs it
after a run on the test cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest

from soma.slurm.usage import FIELDS, jobs_in, parse_sacct, report, seconds, size_mb

# What `sacct -P -n -o FIELDS -j 101,102,103` prints: a round's submission with 2 GPUs (its
# batch and one step), and two train jobs of a rule; GPU use where Slurm measures it.
SACCT = """\
101|COMPLETED|8|16000M|02:10:00|00:04:00|00:12:00||billing=8,cpu=8,gres/gpu=2,mem=16000M,node=1|
101.batch|COMPLETED|8||||00:00.500|10240K||cpu=00:00:00,mem=10240K
101.0|COMPLETED|8||||00:11:59|1536M||cpu=00:11:59,gres/gpumem=3000M,gres/gpuutil=71,mem=1536M
102|COMPLETED|4|8000M|02:00:00|00:01:00|00:02:00||billing=4,cpu=4,mem=8000M,node=1|
102.0|COMPLETED|4||||00:02:00|300M||cpu=00:02:00,mem=300M
103|TIMEOUT|4|8000M|02:00:00|02:00:30|01:00:00||billing=4,cpu=4,mem=8000M,node=1|
103.0|CANCELLED by 0|4||||01:00:00|400000K||cpu=01:00:00,mem=400000K
104|COMPLETED|1|2000M|00:30:00|00:00:16|00:04.755||billing=1,cpu=1,mem=2000M,node=1|
104.batch|COMPLETED|1||||00:00.012|||
104.0|COMPLETED|1||||00:04.743|||
"""


def test_sacct_sizes_and_durations_are_read_as_slurm_writes_them():
    assert size_mb("1536M") == 1536 and size_mb("1.5G") == 1536 and size_mb("10240K") == 10
    assert size_mb("8000Mn") == 8000 and size_mb("") is None
    assert size_mb(str(2 * 1024 * 1024)) == 2  # a bare number: bytes
    assert seconds("02:10:00") == 7800 and seconds("00:00.500") == 0.5
    assert seconds("1-00:01:00") == 86460 and seconds("UNLIMITED") is None


def test_each_job_is_what_its_line_asked_and_the_most_its_steps_used():
    used = parse_sacct(SACCT)
    assert set(used) == {"101", "102", "103", "104"}
    assert used["104"].rss_mb is None  # 16 s: shorter than Slurm's sampling, no MaxRSS
    round0 = used["101"]
    assert (round0.cpus, round0.mem_mb, round0.limit_s, round0.gpus) == (8, 16000, 7800, 2)
    assert (round0.elapsed_s, round0.cpu_s, round0.rss_mb) == (240, 720, 1536)
    assert round0.gpu == "3000 MB, 71%" and round0.steps == ["batch", "0"]
    assert used["103"].state == "TIMEOUT" and used["103"].rss_mb == pytest.approx(390.625)


def test_the_report_says_per_rule_what_was_asked_used_and_what_fits(tmp_path: Path):
    logs = tmp_path / "slurm_logs"
    for path in ("group_round0_average_start_train/101.log", "rule_train/round_0_client_1/102.log",
                 "rule_train/round_0_client_2/103.log", "rule_train/notes.txt",
                 "group_round1_average_evaluate_train_batch/104.log"):  # fmt: skip
        (logs / path).parent.mkdir(parents=True, exist_ok=True)
        (logs / path).write_text("")
    kinds = jobs_in(logs)
    assert kinds == {
        "101": "group round (average, start, train)",
        "102": "rule train",
        "103": "rule train",
        "104": "group round (average, evaluate, train_batch)",
    }
    lines = report(kinds, parse_sacct(SACCT))
    assert lines == [
        "group round (average, evaluate, train_batch): 1 submission (COMPLETED); "
        "asked 2000 MB, 30.0 min, 1 CPUs; used at most memory not sampled (the job was shorter "
        "than Slurm's JobAcctGatherFrequency), 0.3 min, CPUs busy 30%; suggest runtime: 1",
        "group round (average, start, train): 1 submission (COMPLETED); "
        "asked 16000 MB, 130.0 min, 8 CPUs, 2 GPUs; "
        "used at most 1536 MB (MaxRSS), 4.0 min, CPUs busy 38%, GPU 3000 MB, 71%; "
        "suggest mem_mb: 2600, runtime: 8",
        "rule train: 2 submissions (COMPLETED, TIMEOUT); asked 8000 MB, 120.0 min, 4 CPUs; "
        "used at most 391 MB (MaxRSS), 120.5 min, CPUs busy 13%; "
        "suggest mem_mb: 800, runtime: 241",
    ], lines


def test_the_fields_asked_of_sacct_are_the_ones_read():
    assert FIELDS.split(",")[0] == "JobID" and "MaxRSS" in FIELDS and "TotalCPU" in FIELDS
