"""Broken variants of an asynchronous run's guarantees (soma.asynchronous): each update
consumed once, exactly one version v + 1, a version replayable from its record. Registered
into tests/mutants.py's MUTANTS; caught by racing `soma client` processes and the replay."""

from __future__ import annotations

from mutants import _replace, mutant

_RACING = (
    "tests/asynchronous/test_racing.py::test_racing_clients_leave_a_run_that_replays_bit_for_bit"
)
_VERSIONS = "tests/asynchronous/test_versions.py"
_PAST_ROUNDS = (
    "tests/asynchronous/test_versions.py"
    "::test_a_version_past_the_runs_rounds_is_never_made_whoever_races"
)


@mutant("async_update_consumed_twice", caught_by=[_RACING, _VERSIONS])
def _async_update_consumed_twice() -> None:
    """What earlier versions consumed is forgotten but the last's: an update can be pending
    again, and consumed by a second version."""
    from soma.asynchronous import versions

    original = versions.Versions.consumed

    def consumed(self, through):
        if through < 2:
            return original(self, through)
        return original(self, through) - original(self, through - 2)

    _replace(versions.Versions, "consumed", consumed)


@mutant("async_two_versions", caught_by=[_RACING])
def _async_two_versions() -> None:
    """Version v + 1 is made where its inputs say (a place per set of pending updates, as a
    round's quorum averaging is), then bound: two processes that found different updates
    both make a version v + 1, and the last one bound wins."""
    import hashlib

    from soma.asynchronous import versions
    from soma.round.once import Place

    def done(self):
        return None  # never sees the other's version: it makes its own

    def place(self, inputs):
        key = hashlib.sha256(repr([u.name for u in inputs.consumed]).encode()).hexdigest()
        return Place(f"{self._place.prefix}/inputs/{key}")

    def settle(self, published):
        self.versions.store.bind(self._place.published, published)
        return published

    _replace(versions._Next, "done", done)
    _replace(versions._Next, "place", place)
    _replace(versions._Next, "settle", settle)


@mutant("async_versions_past_rounds", caught_by=[_PAST_ROUNDS])
def _async_versions_past_rounds() -> None:
    """The run's `rounds` is a check-then-act again: a process looks at the latest version
    once, finds it short of the run's last, then makes every version the pending updates
    allow, claiming versions past the last once another process made it."""
    from soma.asynchronous import versions

    original = versions.Versions.advance

    def advance(self, *, deadline, backoff=versions.POLL, sleep=versions.time.sleep, lease):
        rounds = self.rounds
        if rounds is not None and self.latest() >= rounds:
            return self.latest()
        self.rounds = None  # the bound checked, then not part of what is claimed
        try:
            return original(self, deadline=deadline, backoff=backoff, sleep=sleep, lease=lease)
        finally:
            self.rounds = rounds

    _replace(versions.Versions, "advance", advance)


@mutant("async_staleness_unweighed", caught_by=[_VERSIONS])
def _async_staleness_unweighed() -> None:
    """A stale update weighs as a fresh one in the step (its record still says its weight)."""
    from soma.asynchronous import arithmetic

    _replace(arithmetic, "staleness_weight", lambda kind, a, staleness: 1.0)


@mutant("async_too_stale_contributed", caught_by=[_VERSIONS, "-k", "too_stale"])
def _async_too_stale_contributed() -> None:
    """An update past the staleness limit is contributed anyway (no limit when contributing)."""
    import dataclasses

    from soma.asynchronous import versions

    original = versions.Versions.contribute

    def contribute(self, client, start, trained, size):
        unlimited = dataclasses.replace(self.settings, limit=None)
        settings, self.settings = self.settings, unlimited
        try:
            return original(self, client, start, trained, size)
        finally:
            self.settings = settings

    _replace(versions.Versions, "contribute", contribute)


@mutant("async_replay_trusts_weights", caught_by=[_VERSIONS, "-k", "do_not_recompute"])
def _async_replay_trusts_weights() -> None:
    """The replay checks what a version's record says, but takes its weights on trust."""
    from soma.asynchronous import replay

    _replace(replay, "value_digest", lambda value: "trusted")
    original = replay._problems

    def _problems(versions, v, record, before, seen):
        return [p for p in original(versions, v, record, before, seen) if "recompute" not in p]

    _replace(replay, "_problems", _problems)
