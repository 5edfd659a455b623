"""Who takes part in a round, and how many must come: sampling and quorum, as pure arithmetic.

The same in every mode and on every executor, because it depends on nothing but the run's
seed, the round and the client count: every process (a Snakefile at parse time, each `soma
client` under srun) computes the same sample without asking anybody. Only the standard
library is imported here (and soma.config.options, which says a refused value), so the
Snakefile can ask without importing torch.

- `participation`: None (everyone, every round), a count of clients (an int, 1..clients) or
  a fraction of them (a float in (0, 1], rounded to the nearest count, at least one).
- `quorum`: None (everyone sampled must come), a count (an int, 1..sampled) or a fraction
  of the sampled clients (a float in (0, 1], rounded up: a quorum of 80% of 9 is 8).
"""

from __future__ import annotations

import functools
import hashlib
import math
import numbers

from soma.config.options import must_be
from soma.errors import SomaError


class ParticipationError(SomaError, ValueError):
    """A participation or quorum that cannot be met."""


def _count_or_fraction(name: str, value: object, of: int, *, up: bool) -> int:
    if value is None:
        return of
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ParticipationError(must_be(name, "a count or a fraction in (0, 1]", value))
    if isinstance(value, numbers.Integral):
        if not 1 <= value <= of:
            raise ParticipationError(must_be(name, f"a count between 1 and {of}", value))
        return int(value)
    fraction = float(value)
    if not (math.isfinite(fraction) and 0 < fraction <= 1):
        raise ParticipationError(must_be(name, "a fraction in (0, 1]", value))
    count = math.ceil(fraction * of - 1e-9) if up else math.floor(fraction * of + 0.5)
    return min(of, max(1, count))


def sample_size(participation: object, clients: int) -> int:
    """How many of `clients` take part in each round."""
    return _count_or_fraction("participation", participation, clients, up=False)


def quorum_size(quorum: object, sampled: int) -> int:
    """How many of the `sampled` clients must come for their round to be averaged."""
    return _count_or_fraction("quorum", quorum, sampled, up=True)


@functools.lru_cache(maxsize=4096)
def _ranked(seed: int, round: int, clients: int, draw: str = "sample") -> tuple[int, ...]:
    """Every client in a fixed pseudo-random order for (seed, round): the order of the
    SHA-256 of their names, so no generator's version can change who was drawn. `draw`
    tells apart draws of the same round (the training sample, the evaluation sample)."""

    def rank(client: int) -> bytes:
        return hashlib.sha256(f"soma/{draw}/{seed}/{round}/{client}".encode()).digest()

    return tuple(sorted(range(clients), key=rank))


def sampled(seed: int, round: int, clients: int, participation: object = None) -> list[int]:
    """The clients that take part in round `round`, sorted; everyone when participation is None."""
    count = sample_size(participation, clients)
    if count == clients:
        return list(range(clients))
    return sorted(_ranked(seed, round, clients)[:count])


def evaluating(
    seed: int,
    round: int,
    clients: int,
    participation: object = None,
    evaluate_participation: object = None,
) -> list[int]:
    """The clients that evaluate round `round`'s average on their own held-out data, sorted:
    the round's training sample when `evaluate_participation` is None; else a count or a
    fraction of all the clients, drawn like the training sample but a draw of its own."""
    if evaluate_participation is None:
        return sampled(seed, round, clients, participation)
    count = _count_or_fraction("evaluate_participation", evaluate_participation, clients, up=False)
    if count == clients:
        return list(range(clients))
    return sorted(_ranked(seed, round, clients, "evaluate")[:count])


def last_sampled_before(
    seed: int, round: int, clients: int, participation: object, client: int
) -> int | None:
    """The last round before `round` in which `client` took part, or None."""
    for earlier in range(round - 1, -1, -1):
        if client in sampled(seed, earlier, clients, participation):
            return earlier
    return None


def policy(
    seed: int, round: int, clients: int, participation: object = None, quorum: object = None
) -> tuple[tuple[int, ...] | None, int | None]:
    """(expected, quorum) of a round as `soma.round.Meeting` takes them, the same in every
    mode: None where it is everyone, so that the default run is keyed as it always was."""
    members = sampled(seed, round, clients, participation)
    needed = quorum_size(quorum, len(members))
    return (
        None if len(members) == clients else tuple(members),
        None if needed == len(members) else needed,
    )
