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


@mutant("quorum_policy_ignores_the_queue", caught_by=["tests/round/test_drop_unstarted.py"])
def _quorum_policy_ignores_the_queue() -> None:
    """`drop_unstarted` set, and the queue never read: a held client is said `never came`."""
    import soma.round.average as average

    def _unstarted(meeting, here, queue):
        return {}

    _replace(average, "_unstarted", _unstarted)


@mutant(
    "quorum_policy_drops_a_running_client",
    caught_by=[
        "tests/round/test_drop_unstarted.py::"
        "test_at_the_deadline_a_held_or_cancelled_clients_job_is_said_and_a_running_one_is_not",
        "tests/slurm/test_queue.py::test_not_started_is_pending_or_ended_never_running_nor_absent",
    ],
)
def _quorum_policy_drops_a_running_client() -> None:
    """Any job of a missing client counts as not started, a running one too: a client that
    computes is said never to have started."""
    import soma.slurm.queue as queue

    def not_started(missing, jobs, name):
        return {
            k: ", ".join(f"Slurm job {q.job} {q.state}" for q in queued)
            for k, queued in sorted(queue._by_client(missing, jobs, name).items())
        }

    _replace(queue, "not_started", not_started)
