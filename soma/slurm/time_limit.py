"""A Slurm job's time limit as a known event: the job is signalled before it, and a client
still training then leaves its round saying so, instead of vanishing at the limit.

Profiles ask Slurm for `--signal=URG@<seconds>` (profiles/slurm, `slurm_extra`): Slurm then
sends SIGURG to every process of the job's steps that many seconds before the limit. SIGURG,
not USR1: its default action is to be ignored, so the processes between Slurm and soma
(Snakemake inside the job, srun, sh) live on; USR1 would kill them first. Only the training
of a client listens (`raised_at_time_limit`, soma.run.step), and there the signal raises
`TimeLimit`: the client drops out (or withdraws, under secure aggregation) with that reason,
so its round's quorum goes on at once, and the job ends in time, its receipt saying why.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from soma.errors import SomaError

__all__ = ["REASON", "SIGNAL", "TimeLimit", "raised_at_time_limit"]

SIGNAL = signal.SIGURG
REASON = (
    "time limit, raise `runtime`: Slurm signalled the job before its time limit while the "
    "client was still training (the profile's runtime for rule train)"
)


class TimeLimit(SomaError, RuntimeError):
    """Slurm signalled the job (`--signal=URG@...`): its time limit is near."""


def _raise(signum: int, frame: object) -> None:
    raise TimeLimit(REASON)


@contextmanager
def raised_at_time_limit() -> Iterator[None]:
    """Inside, Slurm's signal raises TimeLimit (in the main thread, the only one Python hands
    signals to; elsewhere nothing changes); outside, it is what it was (ignored)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(SIGNAL, _raise)
    try:
        yield
    finally:
        signal.signal(SIGNAL, previous)
