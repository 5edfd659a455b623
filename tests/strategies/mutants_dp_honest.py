"""Broken variants of the epsilon against each reader (issue 32, "Honest epsilon in every
mode"), registered into tests/mutants.py's MUTANTS: each keeps DP-FedAvg running and
reporting a number, so that only the figure it gets wrong can catch it."""

from __future__ import annotations

from mutants import _replace, mutant

_R = "tests/strategies/test_privacy_readers.py"


@mutant(
    "dp_distributed_release_at_z",
    caught_by=[_R, "-k", "without_secure_aggregation or budget or tree"],
)
def _dp_distributed_release_at_z() -> None:
    """Distributed DP without secure aggregation accounted at z, as if the store held only
    the sum: the issue's 7.08 where a store reader's figure is 30.1."""
    import soma.privacy

    def distributed_multiplier(multiplier, clients_sampled, secure):
        return multiplier

    _replace(soma.privacy, "distributed_multiplier", distributed_multiplier)


@mutant("dp_secure_round_not_told", caught_by=[_R, "-k", "secure_run_is_told"])
def _dp_secure_round_not_told() -> None:
    """The secure round steps the strategy from the sum without saying it is a secure sum:
    a secure run is reported at the per-release figure (and its budget stops too early)."""
    import soma.secagg.round

    def under_secure_aggregation(strategy):
        return strategy

    _replace(soma.secagg.round, "under_secure_aggregation", under_secure_aggregation)


@mutant("dp_repair_not_told_secure", caught_by=[_R, "-k", "secure_run_is_told"])
def _dp_repair_not_told_secure() -> None:
    """Repair recomputes a secure average's state as if its releases were in the store: a
    state that differs from the round's, so the repair does not restore the lost blob."""
    import soma.secagg.round  # its own binding stays the real one
    import soma.strategies

    def under_secure_aggregation(strategy):
        return strategy

    _replace(soma.strategies, "under_secure_aggregation", under_secure_aggregation)


@mutant("dp_state_of_another_mode_taken", caught_by=[_R, "-k", "other_mode"])
def _dp_state_of_another_mode_taken() -> None:
    """A state's `against` is not read: a central run's state (the store reader's figure
    infinite) goes on in distributed mode as if it were a state kept before the readers
    were apart, and an `against` of nobody passes."""
    import dataclasses

    from soma.strategies import dp_fedavg

    real = dp_fedavg.read_state

    def read_state(state):
        given = dict(state)
        given.pop("against", None)
        for key in ("epsilons", "published"):
            given.pop(key, None)
        return dataclasses.replace(real(given), against=None)

    _replace(dp_fedavg, "read_state", read_state)


@mutant("dp_older_state_charged_at_the_sum", caught_by=[_R, "-k", "kept_before"])
def _dp_older_state_charged_at_the_sum() -> None:
    """A state kept before the readers were apart goes on in distributed mode with its
    rounds charged at the sum's z against the store reader: m times too little."""
    from soma.strategies import dp_fedavg

    def charged_before(self, published):
        return published

    _replace(dp_fedavg.DistributedDPFedAvg, "charged_before", charged_before)
