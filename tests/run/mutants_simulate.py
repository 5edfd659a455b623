"""Broken variants of one process hosting every client (soma.run.simulate, soma.round.once);
registered into tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant

TESTS = "tests/run/test_simulate.py"


@mutant("temporary_store_made_durable", caught_by=[TESTS, "-k", "scratch_and_removed"])
def _temporary_store_made_durable() -> None:
    """The temporary store opened with the run's durability: an fsync for a store that dies
    with the process."""
    import tempfile
    from contextlib import contextmanager

    import soma.run.simulate

    @contextmanager
    def store_at(path, spec, *, task=None):
        if path is not None:
            yield spec.store(path)
            return
        parent = soma.run.simulate.temporary_parent(soma.run.simulate.needed(spec, task))
        with tempfile.TemporaryDirectory(prefix="soma-simulate-", dir=parent) as folder:
            yield spec.store(folder)

    _replace(soma.run.simulate, "store_at", store_at)


@mutant("temporary_store_left_behind", caught_by=[TESTS, "-k", "failed_simulation"])
def _temporary_store_left_behind() -> None:
    """The temporary store removed only when the run ends well."""
    import shutil
    import tempfile
    from contextlib import contextmanager

    import soma.run.simulate
    from soma.config.stores import open_store

    @contextmanager
    def store_at(path, spec, *, task=None):
        if path is not None:
            yield spec.store(path)
            return
        parent = soma.run.simulate.temporary_parent(soma.run.simulate.needed(spec, task))
        folder = tempfile.mkdtemp(prefix="soma-simulate-", dir=parent)
        yield open_store(folder, "scratch", "durability", spec.refused)
        shutil.rmtree(folder)

    _replace(soma.run.simulate, "store_at", store_at)


@mutant("barrier_sleeps_before_it_looks", caught_by=[TESTS, "-k", "never_waits"])
def _barrier_sleeps_before_it_looks() -> None:
    """The round's barrier polled with a delay first, even where this process wrote every
    input (a process hosting every client then sleeps each round)."""
    import soma.round.once

    real = soma.round.once.once

    def once(
        store,
        work,
        *,
        deadline,
        backoff=soma.round.once.POLL,
        sleep=soma.round.once.time.sleep,
        lease,
        signing=None,
        site=None,
    ):
        sleep(next(backoff.delays()))
        return real(store, work, deadline=deadline, backoff=backoff, sleep=sleep, lease=lease,
                    signing=signing, site=site)  # fmt: skip

    _replace(soma.round.once, "once", once)


@mutant("start_read_by_every_client", caught_by=[TESTS, "-k", "reads_each_rounds_start"])
def _start_read_by_every_client() -> None:
    """Each hosted client reads and verifies the round's start again: a read a client where
    one a round does (every client trains from the same bytes)."""
    import soma.run.step

    def read_once(store, digest):
        return lambda: store.recall_digest(digest)

    _replace(soma.run.step, "read_once", read_once)
