"""A buffered asynchronous run's settings (FedBuff, Nguyen et al. 2022), read and refused here.

Config `asynchronous: {buffer: K, staleness: {kind: polynomial|constant, a: 0.25, limit: N},
server_lr: 1.0}`; `soma client`/`soma simulate` take `--buffer K --staleness KIND[:A]
--staleness-limit N --server-lr LR`. Pure: no torch, no store, so the spec's parse-time check
(soma.config.spec) reads it. What an asynchronous run cannot be combined with is refused here
too, naming why (`refusal`), before anything is written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from soma.config.options import must_be
from soma.errors import SomaError

KINDS = ("polynomial", "constant")
KEYS = ("buffer", "staleness", "server_lr")
STALENESS_KEYS = ("kind", "a", "limit")


class AsynchronousRefused(SomaError, ValueError):
    """Settings that cannot be an asynchronous run's; the spec re-raises it as its refusal."""


@dataclass(frozen=True)
class Buffered:
    """How versions are made: from `buffer` updates, each weighed by its staleness `s`
    (polynomial: (1 + s)^-a; constant: 1), none older than `limit` versions (None: any),
    stepped by `server_lr` (1: the weighted mean itself, FedAvg's bits when nothing is stale).

    The defaults are declared here once (`buffered` reads them from here). `a` is 0.25, not
    FedBuff's 0.5: on label-skewed digits (one and five local epochs, 3 seeds, a mild and a
    severe straggler tail) 0.5 was the slowest weight to every target measured, and on
    Shakespeare a constant weight let stale updates hold the model back far more than 0.25
    did (`benchmarks/asynchronous.py --study`, docs/benchmarks/asynchronous.md)."""

    buffer: int
    kind: str = "polynomial"
    a: float = 0.25
    limit: int | None = None
    server_lr: float = 1.0

    def value(self) -> dict[str, Any]:
        """As the config spells it: what every version record carries (replay reads it)."""
        return {
            "buffer": self.buffer,
            "staleness": {"kind": self.kind, "a": self.a, "limit": self.limit},
            "server_lr": self.server_lr,
        }


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def buffered(value: object, named: str = "asynchronous") -> Buffered:
    """The settings `value` (a config map), checked: AsynchronousRefused names the key."""
    if not isinstance(value, Mapping):
        raise AsynchronousRefused(must_be(named, "a map with `buffer`", value))
    unknown = sorted(set(map(str, value)) - set(KEYS))
    if unknown:
        raise AsynchronousRefused(
            f"{named} has no key {', '.join(map(repr, unknown))}; it takes {', '.join(KEYS)}"
        )
    buffer = value.get("buffer")
    if isinstance(buffer, bool) or not isinstance(buffer, int) or buffer < 1:
        raise AsynchronousRefused(must_be(f"{named}.buffer", "an integer >= 1", buffer))
    staleness = value.get("staleness") or {}
    if not isinstance(staleness, Mapping):
        raise AsynchronousRefused(must_be(f"{named}.staleness", "a map", staleness))
    unknown = sorted(set(map(str, staleness)) - set(STALENESS_KEYS))
    if unknown:
        raise AsynchronousRefused(
            f"{named}.staleness has no key {', '.join(map(repr, unknown))}; it takes "
            f"{', '.join(STALENESS_KEYS)}"
        )
    kind = staleness.get("kind", Buffered.kind)
    if kind not in KINDS:
        raise AsynchronousRefused(must_be(f"{named}.staleness.kind", " or ".join(KINDS), kind))
    a = staleness.get("a", Buffered.a)
    if not _number(a) or not 0 <= a < math.inf:
        raise AsynchronousRefused(must_be(f"{named}.staleness.a", "a number >= 0", a))
    limit = staleness.get("limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise AsynchronousRefused(
            must_be(f"{named}.staleness.limit", "an integer >= 0 (or null: none)", limit)
        )
    lr = value.get("server_lr", Buffered.server_lr)
    if not _number(lr) or not 0 < lr < math.inf:
        raise AsynchronousRefused(must_be(f"{named}.server_lr", "a number > 0", lr))
    return Buffered(buffer, str(kind), float(a), limit, float(lr))


def refusal(
    settings: Buffered,
    *,
    clients: int,
    strategy: str,
    secure: int | None,
    tree: int | None,
    personal: tuple[str, ...],
    participation: object,
    roster: str | None,
) -> str | None:
    """Why an asynchronous run of these settings cannot be, or None: what holds and what does
    not is said here once (the README's table of combinations follows it)."""
    if settings.buffer > clients:
        return (
            f"buffer {settings.buffer} is more than the run's {clients} clients: a version needs "
            f"{settings.buffer} updates from distinct starts, and could wait for ever"
        )
    if secure is not None:
        return (
            "asynchronous rounds cannot be summed securely: a secure sum masks a fixed cohort "
            "that unmasks together, and a buffer has no cohort (buffered secure aggregation is "
            "an open research problem); run synchronous rounds for secure aggregation"
        )
    if strategy.startswith("dp_") or strategy.endswith("dp_fedavg"):
        return (
            f"strategy {strategy!r} is not supported asynchronously: its privacy account rests "
            "on a round's sampled cohort and its noise on one sum per round; a task's own local "
            "DP (clipping and noise in its train) holds as is, for it never reads the server"
        )
    if strategy != "fedavg":
        return (
            f"strategy {strategy!r} is not supported asynchronously: a version's server step is "
            "FedBuff's staleness-weighted mean (asynchronous.server_lr), which has no "
            "strategy state or client side; use strategy fedavg"
        )
    if tree is not None:
        return "a tree of means is for synchronous rounds: a buffer is a handful of updates"
    if personal:
        return "personal nodes are for synchronous rounds (a client's own state per round)"
    if participation is not None:
        return (
            "participation is for synchronous rounds: asynchronously every client takes part "
            "at its own pace, and `buffer` says how many updates make a version"
        )
    # a roster (`roster`) holds: updates are signed by their clients and versions by the
    # roster's averagers (soma.asynchronous.signed)
    return None


def from_options(
    buffer: int | None, staleness: str, limit: int | None, server_lr: float
) -> dict[str, Any] | None:
    """`--buffer K --staleness KIND[:A] --staleness-limit N --server-lr LR` as the config's
    map (None without --buffer: a synchronous run); checked later with the config's checks."""
    if buffer is None:
        return None
    kind, _, a = str(staleness).partition(":")
    parsed: dict[str, Any] = {"kind": kind, "limit": limit}
    if a:
        try:
            parsed["a"] = float(a)
        except ValueError:
            parsed["a"] = a  # refused by `buffered`, naming it
    return {"buffer": buffer, "staleness": parsed, "server_lr": server_lr}
