"""Broken variant of the staleness default's guarantee: the weight a run gets when it names
none is the one benchmarks/asynchronous.py --study chose (docs/benchmarks/asynchronous.md),
declared once and said by the how-to. Registered into tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant

_DEFAULT = "tests/asynchronous/test_staleness_default.py"


@mutant("async_staleness_default_drifts", caught_by=[_DEFAULT])
def _async_staleness_default_drifts() -> None:
    """The parser falls back to FedBuff's 0.5 while the declaration says otherwise: runs that
    name no exponent would silently weigh stale updates as nobody measured."""
    from soma.config import asynchronous

    original = asynchronous.buffered

    def buffered(value, named="asynchronous"):
        settings = original(value, named)
        if "a" not in (value.get("staleness") or {}):
            return asynchronous.Buffered(
                settings.buffer, settings.kind, 0.5, settings.limit, settings.server_lr
            )
        return settings

    _replace(asynchronous, "buffered", buffered)
