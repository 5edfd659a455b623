"""What verify, repair and gc share: their refusal, the names of a run, and sizes as text.

Why a module of its own: soma.health.verifying, .repairing and .collecting each need these,
and none of them should import another only for them.
"""

from __future__ import annotations

from collections.abc import Callable

from soma.errors import SomaError
from soma.round import layout
from soma.round.layout import run_of
from soma.store import Store


class HealthError(SomaError):
    """Something verify, repair or gc was asked that it refuses; the message names it."""


def release_names(prefix: str, k: int) -> list[str]:
    """Where client k's distributed-DP release in the meeting at `prefix` may be when its
    client count is unknown: both spellings below FAN_OUT, the fanned-out one above."""
    return _spellings(layout.release, prefix, k)


def client_names(prefix: str, k: int) -> list[str]:
    """Where client k's record in the meeting at `prefix` may be, as `release_names`."""
    return _spellings(layout.client, prefix, k)


def _spellings(spell: Callable[[str, int, int], str], prefix: str, k: int) -> list[str]:
    fanned = spell(prefix, k, layout.FAN_OUT + 1)
    return [fanned] if k >= layout.FAN_OUT else [spell(prefix, k, 1), fanned]


def _names_of(store: Store, run: str | None) -> list[str]:
    if run is None:
        return store.bound()
    names = [n for n in store.bound(layout.run_names(run)) if run_of(n) == run]
    if not names:
        held = sorted({r for r in map(run_of, store.bound()) if r is not None})
        holds = f"the runs it holds: {', '.join(map(repr, held))}" if held else "it holds no runs"
        raise HealthError(f"no run {run!r} in the store at {store.directory} ({holds})")
    return names


def _size(count: int) -> str:
    """A byte count as a report says it: `1.5 MB`, `300 B` (never `None`)."""
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"
