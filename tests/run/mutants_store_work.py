"""Broken variants of the store's faults outside the train step (registered into
tests/mutants.py's MUTANTS)."""

from __future__ import annotations

from mutants import _replace, mutant


@mutant("store_fault_outside_step_unwrapped", caught_by=["tests/run/test_store_faults_outside.py"])
def _store_fault_outside_step_unwrapped() -> None:
    """An error of the store met outside a client's train step (its evaluation record, the
    round's average, the run's start) escapes as it came: a traceback, naming no client."""
    from contextlib import contextmanager

    import soma.run.step

    @contextmanager
    def store_work(store, what, clients, doing):
        yield

    _replace(soma.run.step, "store_work", store_work)
