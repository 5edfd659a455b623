"""Broken variants of a run's frozen heap (soma.run.heap); registered into tests/mutants.py's
MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant


@mutant("heap_left_frozen", caught_by=["tests/run/test_heap.py"])
def _heap_left_frozen() -> None:
    """Frozen and never unfrozen: what the caller made before a run is never collected."""
    import contextlib
    import gc

    import soma.run.heap

    @contextlib.contextmanager
    def frozen():
        gc.freeze()
        yield

    _replace(soma.run.heap, "frozen", frozen)
