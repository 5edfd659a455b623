"""Broken variants of a run's frozen heap (soma.run.collector); registered into tests/mutants.py's
MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant


@mutant("collector_left_frozen", caught_by=["tests/run/test_collector.py"])
def _collector_left_frozen() -> None:
    """Frozen and never unfrozen: what the caller made before a run is never collected."""
    import contextlib
    import gc

    import soma.run.collector

    @contextlib.contextmanager
    def frozen():
        gc.freeze()
        yield

    _replace(soma.run.collector, "frozen", frozen)
