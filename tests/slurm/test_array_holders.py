"""A holder running as a task of a Slurm array (workflow/sbatch/soma-async-array.sbatch):
Slurm names its job and steps `123_7` and `123_7.0` in squeue and in sacct's JobID, while the
task's own job id (SLURM_JOB_ID, the record's `slurm_job`) is another number. Read by that
number alone, a holder alive in its step looked ended, and its claim was taken over while it
computed (two computations of one version, seen on the test cluster). Fake sacct and squeue,
as Slurm 22.05 prints them for task 123_7 whose own id is 130."""

from __future__ import annotations

import pytest
from helpers import fake_commands

from soma.round import holders

pytestmark = pytest.mark.slow  # gone() runs the fake sacct and squeue

HOLDER = {"host": "another-node", "pid": 1, "slurm_job": "130", "slurm_step": "0"}


def _fake(tmp_path, monkeypatch, *, sacct: str, steps: str) -> None:
    """sacct prints `sacct` for JobIDRaw (`-o JobIDRaw,State`) and the array's name for any
    other format; squeue lists `steps` for -s and says the job runs otherwise."""
    named = sacct.replace("130.", "123_7.")
    fakes = {
        "sacct": f"case \"$*\" in *JobIDRaw*) echo '{sacct}';; *) echo '{named}';; esac",
        "squeue": f'case "$*" in *-s*) for s in {steps}; do echo $s; done;; *) echo RUNNING;; esac',
    }
    monkeypatch.setenv("PATH", fake_commands(tmp_path, fakes))


@pytest.mark.parametrize(
    ("sacct", "steps", "record", "gone"),
    [
        ("130.0|RUNNING", "", {}, False),  # accounting by the job's own id
        ("130.0|COMPLETED", "", {}, True),
        ("", "123_7.batch 123_7.0 123_8.0", {"slurm_array": "123_7"}, False),
        ("", "123_7.batch 123_8.0", {"slurm_array": "123_7"}, True),
        ("", "123_7.batch 123_7.0", {}, False),  # an older record: nobody can tell, alive
    ],
)
def test_an_array_tasks_holder_is_judged_by_its_own_steps(
    tmp_path, monkeypatch, sacct, steps, record, gone
) -> None:
    _fake(tmp_path, monkeypatch, sacct=sacct, steps=steps or "''")
    assert holders.gone({**HOLDER, **record}) is gone


def test_a_holder_record_in_an_arrays_task_names_the_task(monkeypatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "130")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "123")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "7")
    me = holders.me()
    assert (me["slurm_job"], me["slurm_array"]) == ("130", "123_7")
    assert "Slurm job 130 (array task 123_7)" in holders.describe(me)  # as squeue names it
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID")
    assert "slurm_array" not in holders.me()  # outside an array, a record as before
