"""How long a run's processes wait, and how they poll: one object and one set of defaults.

Waiting is not what a run is: two runs that wait differently train the same bits, so a run's
`Timing` travels beside its description (`RunSpec.timing`), never in its identity or its
meetings. Every mode reads it from the same place (the workflow's config keys
`average_deadline` and `lease`, `soma client`/`soma simulate`'s `--deadline` and `--lease`,
`soma.simulate(deadline=, lease=)`) and every driver hands it on whole, so that a value set by
a user reaches every wait of the run: a plain round's averaging, a tree's nodes and a secure
round's unmasking alike. Pure Python, no torch: the Snakefile's checks import it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from soma.errors import SomaError

DEADLINE = 3600.0  # seconds a process waits for a round before naming who is missing
LEASE = 60.0  # seconds a holder's lease lasts unrenewed; it renews every third of it
# Seconds a peer gives a fault note that was already there when it began to wait before it
# stops on it: a rerun of the failed client forgets its old note as it starts the round
# (soma.round.client.forget_fault), and a peer that came up a little earlier must not stop on
# the note of the attempt before. A note written while a peer waits stops it at once.
FAULT_GRACE = 20.0


@dataclass(frozen=True)
class Backoff:
    """Polling a shared folder: start quick, double, stay at a small cap (about a second).

    Each poll costs a few metadata calls (a listing, a lookup; no blob is read), so a waiting
    process costs about two metadata calls a second once it has reached the cap.
    """

    first: float = 0.01
    cap: float = 1.0

    def delays(self) -> Iterator[float]:
        delay = self.first
        while True:
            yield delay
            delay = min(delay * 2, self.cap)


@dataclass(frozen=True)
class Timing:
    """A run's waits: `deadline`, how long a client waits for its round (None: for ever);
    `average_deadline`, how long the workflow's average job waits for a round whose averaging
    another job or site holds (None: for ever); `lease`, on a store with compare-and-swap, how
    long a holder may go unrenewed before it is taken over; `backoff`, how waiting polls."""

    deadline: float | None = DEADLINE
    average_deadline: float | None = DEADLINE
    lease: float = LEASE
    backoff: Backoff = field(default_factory=Backoff)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Timing:
        """The workflow's config keys: `lease` (absent: LEASE) and `average_deadline` (null or
        absent: for ever, as the schema says; config/config.yaml sets an hour)."""
        return cls(
            average_deadline=config.get("average_deadline"),
            lease=config.get("lease", LEASE),
        )


class DeadlineTooShort(SomaError, ValueError):
    """A quorum's deadline that could pass while a client's store is still retrying: the
    round would be averaged around a client that came and whose writes are failing."""


def check_fault_deadline(
    deadline: float | None,
    *,
    option: str = "--deadline",
    patience: float | None = None,
    grace: float = FAULT_GRACE,
) -> None:
    """DeadlineTooShort, naming both values and the option, when a quorum's `deadline` is
    shorter than the store's patience plus a fault note's grace.

    A client whose store fails goes on retrying for the store's patience
    (soma.store.patience) before it gives up and writes its fault note, and a peer may give
    a note the grace before it stops on it: a deadline shorter than both together lets the
    quorum publish an average without that client, exit 0 with another model, and say the
    client "never came". Only for a run whose deadline averages around somebody (a quorum
    below the clients sampled): where all must come the deadline stops the round instead.
    `patience`: seconds (None: the environment's, SOMA_STORE_PATIENCE or its default)."""
    if deadline is None:
        return
    from soma.store.patience import ENVIRONMENT, Patience

    if patience is None:
        patience = Patience.from_environment().seconds
    if deadline >= patience + grace:
        return
    raise DeadlineTooShort(
        f"{option} {deadline:g}s is shorter than the store's patience {patience:g}s "
        f"({ENVIRONMENT}) plus a fault note's grace {grace:g}s: a quorum would be averaged "
        f"around a client whose store is still retrying; set {option} to at least "
        f"{patience + grace:g}, or lower {ENVIRONMENT}"
    )
