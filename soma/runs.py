"""What makes a federated run the run it is, the same in every mode (workflow, `soma client`).

Both modes derive each (round, client)'s training seed and the run's declared identity from
here, so the same configuration trains the same bits whichever way it is run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def training_seed(seed: int, round: int, client: int) -> int:
    """One seed per (round, client), the same for the federated run and the alone baseline."""
    return (seed * 1_000_003 + round * 7_919 + client * 104_729) % (2**31)


def identity(task: str, options: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """The part of a run's identity that is not the strategy's: its task, options and seed.

    Clients meet under a name keyed by it (see soma.round.Meeting): two runs that share a
    name but differ here never meet.
    """
    return {"task": task, "options": dict(options), "seed": seed}
