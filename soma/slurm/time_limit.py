"""A Slurm job's time limit as a known event: the job is signalled before it, and a client
still training then leaves its round saying so, instead of vanishing at the limit.

Profiles ask Slurm for `--signal=URG@<seconds>` (profiles/slurm, `slurm_extra`): Slurm then
sends SIGURG to every process of the job's steps that many seconds before the limit. SIGURG,
not USR1: its default action is to be ignored, so the processes between Slurm and soma
(Snakemake inside the job, srun, sh) live on; USR1 would kill them first. Only the training
of a client listens (`raised_at_time_limit`, soma.run.step), and there the signal raises
`TimeLimit`: the client drops out (or withdraws, under secure aggregation) with that reason,
so its round's quorum goes on at once, and the job ends in time, its receipt saying why.
So does the work a process claimed (a round's averaging, soma.round.once): signalled while it
computes, the process lets go and ends, failing with `held_reason`; a holder that has ended is
provably gone, so whoever runs the work next (the job's retry, or any process waiting on the
round) takes it over at once, instead of waiting for the limit to kill it first.
An asynchronous client (`soma client --buffer`, workflow/sbatch/soma-async-array.sbatch) stops
on it wherever it is (`stopped_reason`): its updates are named last and versions made exactly
once, so what it leaves is whole or unnamed, and the same command started again goes on from
the run's latest version.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from soma.errors import SomaError

__all__ = [
    "REASON",
    "SIGNAL",
    "TimeLimit",
    "held_reason",
    "raised_at_time_limit",
    "stopped_reason",
]

SIGNAL = signal.SIGURG
REASON = (
    "time limit, raise `runtime`: Slurm signalled the job before its time limit while the "
    "client was still training (the profile's runtime for rule train)"
)


class TimeLimit(SomaError, RuntimeError):
    """Slurm signalled the job (`--signal=URG@...`): its time limit is near."""


def held_reason(what: str) -> str:
    """Why a process let go of `what` (a round's averaging) it had claimed and was computing."""
    return (
        f"time limit, raise `runtime`: Slurm signalled the job before its time limit while it "
        f"computed {what}, which it had claimed; it lets go and ends, so whoever runs it next "
        "takes it over at once (the profile's runtime for rule average)"
    )


def stopped_reason(run: str) -> str:
    """Why an asynchronous client stopped before the run had its versions (see the module)."""
    return (
        f"time limit: Slurm signalled the job before its time limit, and the asynchronous "
        f"clients of run {run!r} here stopped; nothing is half-written: submit the same job "
        "again (a new array task, a longer --time) and it goes on from the run's latest version"
    )


@contextmanager
def raised_at_time_limit(reason: str = REASON) -> Iterator[None]:
    """Inside, Slurm's signal raises TimeLimit(reason) (in the main thread, the only one
    Python hands signals to; elsewhere nothing changes); outside, it is what it was (ignored)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum: int, frame: object) -> None:
        raise TimeLimit(reason)

    previous = signal.signal(SIGNAL, _raise)
    try:
        yield
    finally:
        signal.signal(SIGNAL, previous)
