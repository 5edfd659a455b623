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

DEADLINE = 3600.0  # seconds a process waits for a round before naming who is missing
LEASE = 60.0  # seconds a holder's lease lasts unrenewed; it renews every third of it


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
