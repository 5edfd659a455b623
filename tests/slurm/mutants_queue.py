"""Broken variants of issue 56's guarantees: a waiting line that says where a missing
client's Slurm job is (soma.slurm.queue), and a holder in an array's task judged by its own
steps (soma.round.holders), not taken over while it computes."""

from __future__ import annotations

from mutants import _replace, mutant


@mutant(
    "slurm_queue_line_without_state",
    caught_by=["tests/slurm/test_queue.py"],
)
def _slurm_queue_line_without_state() -> None:
    """The missing client's job named without its state and reason: `Slurm job 123_7`."""
    import soma.slurm.queue as queue

    def said(queued):
        return f"Slurm job {queued.job}"

    _replace(queue, "said", said)


@mutant("holder_array_task_by_its_job_id", caught_by=["tests/slurm/test_array_holders.py"])
def _holder_array_task_by_its_job_id() -> None:
    """An array task's step looked for under its own job id only, as Slurm never names it:
    a holder alive in its step is judged gone and its claim taken over."""
    import soma.round.holders as holders

    step_state = holders.slurm_step_state

    def slurm_step_state(job_id, step, array=None):
        return step_state(job_id, step, None)

    _replace(holders, "slurm_step_state", slurm_step_state)
