"""The digits federation as the benchmarks run it: `soma.simulate` (the one loop, client step
and seeds of `soma client` and the workflow, so its weights are theirs bit for bit), each
round evaluated, beside the task's two baselines (soma.tasks.digits.alone, .centralized).

An attack or dropouts run the task `benchmarks.faulty` (the digits with misbehaving clients)
instead of `soma.tasks.digits`; the repository's root must be importable (the benchmarks put
it on sys.path).
"""

from __future__ import annotations

import dataclasses
import numbers
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import soma
from benchmarks.faulty import Attack, check_attack
from soma.config.participation import ParticipationError, sampled
from soma.nodes import export
from soma.tasks import digits
from soma.training import training_seed

DIGITS, FAULTY = "soma.tasks.digits", "benchmarks.faulty"

Dropouts = Callable[[int, list[int]], Iterable[int]]


def options_of(task: digits.DigitsTask) -> dict[str, Any]:
    """The options `task` was made with (digits.make(**options_of(task)) is the same task)."""
    return {f.name: getattr(task, f.name) for f in dataclasses.fields(digits.DigitsTask) if f.init}


def drop_one_per_round(round_index: int, chosen: list[int]) -> list[int]:
    """One sampled client fails every round: the one at `round_index % len(chosen)` of the
    sampled list, so that over the rounds every client is lost in turn."""
    return [chosen[round_index % len(chosen)]]


def failing(
    dropouts: Dropouts | None, seed: int, clients: int, rounds: int, participation: object
) -> list[int]:
    """The training seeds of the (round, client) trainings that `dropouts(round, sampled)`
    says fail, every round's asked before anything trains; a client not sampled that
    round is refused (a bug in the caller's failure model, silently ignored otherwise)."""
    if dropouts is None:
        return []
    if not callable(dropouts):
        raise ParticipationError(
            f"dropouts must be None or a callable (round_index, sampled) -> clients that fail, "
            f"not {dropouts!r}"
        )
    seeds = []
    for r in range(rounds):
        chosen = sampled(seed, r, clients, participation)
        for client in dropouts(r, list(chosen)):
            ok = not isinstance(client, bool) and isinstance(client, numbers.Integral)
            if not ok or client not in chosen:
                raise ParticipationError(
                    f"round {r}: dropouts named client {client!r}, which is not one "
                    f"of the round's sampled clients {chosen}"
                )
            seeds.append(training_seed(seed, r, int(client)))
    return seeds


def simulate(
    task: digits.DigitsTask,
    clients: int,
    rounds: int,
    *,
    seed: int = 0,
    every: int = 1,
    baselines: bool = True,
    strategy: str = "fedavg",
    strategy_options: Mapping[str, object] | None = None,
    attack: Attack | None = None,
    participation: object = None,
    dropouts: Dropouts | None = None,
    quorum: object = None,
    store: str | Path | None = None,
) -> dict[str, object]:
    """`soma.simulate` of the digits `task` (its options), evaluated after every `every`th
    round and the last (`federated`: rows of round, 1-based, accuracy and loss), with who
    took part in each round (`participants`), the final weights (`weights`, an export) and
    their digest (`digest`), and the seconds of each round (`round_seconds`); and, with
    `baselines`, the mean over clients of each alone (`alone`, `alone_each`) and
    `centralized`. `attack` makes client 0 Byzantine in every round it takes part;
    `dropouts(round, sampled)` names the clients that fail each round (see `failing`).
    """
    attack = check_attack(attack)
    options = options_of(task)
    fail = failing(dropouts, seed, clients, rounds, participation)
    path = DIGITS
    if attack is not None or fail:
        path = FAULTY
        options = {**options, "attack": None if attack is None else list(attack), "fail": fail}
    history: list[dict[str, float]] = []
    participants: list[list[int]] = []
    seconds: list[float] = []
    tic = time.perf_counter()

    def after(done: Any, driven: Any) -> None:
        nonlocal tic
        seconds.append(time.perf_counter() - tic)
        participants.append(sorted(k for k, m in done.metrics.items() if m is not None))
        r = done.round + 1
        if r % every == 0 or r == rounds:
            history.append({"round": r, **task.evaluate(driven.nodes)})
        tic = time.perf_counter()

    simulated = soma.simulate(
        path,
        clients=clients,
        rounds=rounds,
        task_options=options,
        strategy=strategy,
        strategy_options=dict(strategy_options or {}),
        seed=seed,
        participation=participation,
        quorum=quorum,
        store=store,
        after=after,
    )
    result: dict[str, object] = {
        "strategy": strategy,
        "strategy_options": dict(strategy_options or {}),
        "attack": attack,
        "participation": participation,
        "quorum": quorum,
        "participants": participants,
        "federated": history,
        "weights": export(simulated.nodes),
        "digest": simulated.weights,
        "round_seconds": seconds,
    }
    if baselines:
        alone = [digits.alone(task, k, clients, rounds, seed=seed) for k in range(clients)]
        result["alone"] = sum(alone) / len(alone)
        result["alone_each"] = alone
        result["centralized"] = digits.centralized(task, rounds, seed=seed)
    return result
