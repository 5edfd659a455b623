"""A baseline's training, the same in every mode: one body of data trained alone from the
run's start for as many rounds of local training as the federation, round r's seeded as
client k's training of round r (soma.run.identity.training_seed), so that a client alone is
seed for seed its federated self without the others.

The workflow's `alone` and `centralized` jobs (soma.workflow; centralized trains as client
0) and the digits task's baselines (soma.tasks.digits.alone, .centralized) train through it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from soma.run.identity import training_seed


def trained_alone(
    task: Any, nodes: Any, data: Any, *, rounds: int, seed: int, client: int
) -> Iterator[tuple[int, Any]]:
    """Train `nodes` on `data`, round after round: yields each round and the task's metrics,
    the nodes trained through that round."""
    for r in range(rounds):
        yield r, task.train(nodes, data, seed=training_seed(seed, r, client))
