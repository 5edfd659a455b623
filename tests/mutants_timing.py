"""A broken variant of a run's waits reaching its claims (soma.timing; tests/test_timing_threaded.py
keeps defaults out of the signatures below the drivers); registered into tests/mutants.py's
MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant

_LEASES = [
    "tests/secagg/test_secure_round.py::"
    "test_a_secure_round_on_a_bucket_claims_with_the_configured_lease",
    "tests/run/test_run_layer.py::"
    "test_soma_simulate_takes_a_lease_and_every_claim_on_a_bucket_has_it",
]


@mutant("once_ignores_the_runs_lease", caught_by=_LEASES)
def _once_ignores_the_runs_lease() -> None:
    """Every claim below the drivers (soma.round.once: a round's averaging, a tree's nodes, a
    secure round's unmasking, an asynchronous version) leased for timing.LEASE, whatever lease
    it was handed: what a forgotten `lease=` did while the signatures defaulted it."""
    import soma.round.once
    from soma.timing import LEASE

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
        return real(store, work, deadline=deadline, backoff=backoff, sleep=sleep, lease=LEASE,
                    signing=signing, site=site)  # fmt: skip

    _replace(soma.round.once, "once", once)
