"""The digits task with clients that misbehave, for the benchmarks and their tests: a task
module (`benchmarks.faulty`, importable from the repository's root) run like any other by
`soma.simulate`, so a Byzantine client or a failure goes through the one client step.

Options: every option of soma.tasks.digits, and

- `attack` ([kind, factor], kind `scale` or `sign_flip`) with `attackers` (clients, [0] by
  default): what an attacker trains is replaced by `attacked(trained, attack)` before the
  client step exports it, whenever it takes part (a strategy's client side, SCAFFOLD's
  extra, is then computed from what it sends: attack only strategies without one);
- `fail` (training seeds, soma.training.training_seed of (seed, round, client)): the
  trainings that raise instead, so that the client step drops the client from that round
  (the round goes on under a quorum that allows it, and stops otherwise).

Its shard carries the client's index beside the digits' data, which is how train() knows
whose training it is.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from soma.nodes import Export, export, load
from soma.strategies import Objective
from soma.tasks import TaskError
from soma.tasks.digits import DigitsTask

ATTACKS = ("scale", "sign_flip")
Attack = tuple[str, float]


def check_attack(attack: object) -> Attack | None:
    """None, or `(kind, factor)` with kind in ATTACKS and a finite real factor; refused by name."""
    if attack is None:
        return None
    ok = isinstance(attack, (tuple, list)) and len(attack) == 2 and attack[0] in ATTACKS
    factor = attack[1] if ok else None
    ok = ok and not isinstance(factor, bool) and isinstance(factor, numbers.Real)
    if not ok or not np.isfinite(float(factor)):
        raise TaskError(
            f"attack must be None or (kind, factor) with kind one of {', '.join(ATTACKS)} "
            f"and a finite number as factor, not {attack!r}"
        )
    return str(attack[0]), float(factor)


def attacked(weights: Export, attack: Attack) -> Export:
    """What a Byzantine client sends instead of what it trained: every float times `factor`
    (`scale`) or times `-factor` (`sign_flip`). Integer and bool counts are sent as they are:
    the robust strategies leave counts to the first update anyway, so garbage there would
    test nothing. A new export; `weights` is left alone."""
    kind, factor = attack
    times = factor if kind == "scale" else -factor
    with torch.no_grad():
        return {
            node_id: {
                key: tensor * times
                if tensor.dtype.is_floating_point or tensor.dtype.is_complex
                else tensor.clone()
                for key, tensor in keys.items()
            }
            for node_id, keys in weights.items()
        }


def _integers(name: str, values: object) -> tuple[int, ...]:
    ok = isinstance(values, (list, tuple)) and all(
        isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in values
    )
    if not ok:
        raise TaskError(f"faulty option {name} must be a list of integers, not {values!r}")
    return tuple(int(v) for v in values)


@dataclass
class FaultyDigits(DigitsTask):
    attack: Any = None
    attackers: Any = (0,)
    fail: Any = ()

    def __post_init__(self) -> None:
        self._attack = check_attack(self.attack)
        self._attackers = set(_integers("attackers", self.attackers))
        self._fail = set(_integers("fail", self.fail))
        super().__post_init__()

    def shard(self, client: int, clients: int) -> tuple[int, Any]:
        return client, super().shard(client, clients)

    def size(self, data: tuple[int, Any]) -> int:
        return super().size(data[1])

    def train(
        self,
        nodes: Mapping[str, nn.Module],
        data: tuple[int, Any],
        *,
        seed: int,
        objective: Objective | None = None,
    ) -> dict[str, float]:
        """The digits' training of the client's data; an attacker's weights then replaced,
        a failing training raised before it starts."""
        client, inner = data
        if seed in self._fail:
            raise TaskError(f"client {client} fails on purpose (training seed {seed})")
        metrics = super().train(nodes, inner, seed=seed, objective=objective)
        if self._attack is not None and client in self._attackers:
            load(nodes, attacked(export(nodes), self._attack))
        return metrics


def make(**options: Any) -> FaultyDigits:
    return FaultyDigits(**options)
