"""Broken variants of private noise and honest accounting (registered into tests/mutants.py's
MUTANTS): each keeps DP-FedAvg running, so that only the guarantee it breaks can catch it."""

from __future__ import annotations

from mutants import _replace, mutant

_H = "tests/strategies/test_privacy_honest.py"


@mutant("dp_noise_keyed_by_a_fixed_seed", caught_by=[_H, "-k", "two_runs"])
def _dp_noise_keyed_by_a_fixed_seed() -> None:
    """'Private' noise keyed by what the config says: every run draws the same noise, which
    whoever reads the config can draw again and take off."""
    import soma.privacy

    seeded = soma.privacy.reproducible_noise_not_private
    _replace(soma.privacy, "private_noise", lambda: seeded(0))


@mutant("dp_noise_from_a_small_seed", caught_by=[_H, "-k", "brute_force"])
def _dp_noise_from_a_small_seed() -> None:
    """Noise keyed by a 10-bit seed from the operating system: different every run, and yet
    a search of every seed strips it (the audit's attack on torch's 32 bits, shrunk)."""
    import secrets

    import soma.privacy

    seeded = soma.privacy.reproducible_noise_not_private
    _replace(soma.privacy, "private_noise", lambda: seeded(secrets.randbelow(2**10), "central", 1))


@mutant("dp_noise_key_of_any_length", caught_by=[_H, "-k", "256_bits"])
def _dp_noise_key_of_any_length() -> None:
    """A key shorter than 256 bits (a 32-bit seed) is padded and taken."""
    import soma.privacy

    real = soma.privacy.NoiseSource

    class Padded(real):
        __slots__ = ()

        def __init__(self, key: bytes) -> None:
            if isinstance(key, int):
                key = key.to_bytes(8, "big")
            if isinstance(key, str):
                key = key.encode()
            super().__init__(bytes(key).ljust(32, b"\0")[:32])

    soma.privacy.NoiseSource = Padded


@mutant("dp_epsilon_amplified_by_a_public_sample", caught_by=[_H, "-k", "worst_placed or budget"])
def _dp_epsilon_amplified_by_a_public_sample() -> None:
    """A round costs a client a tenth of what it does, as if a sample of 10 in 100 were
    secret from whoever reads the store (it is written in every round record)."""
    import soma.privacy
    from soma.strategies import dp_fedavg

    def round_cost(self) -> float:
        return soma.privacy.exposure(self.options.noise_multiplier) / 10

    _replace(dp_fedavg.DPFedAvg, "round_cost", round_cost)


@mutant("dp_reproducible_noise_counted_as_private", caught_by=[_H, "-k", "infinite_epsilon"])
def _dp_reproducible_noise_counted_as_private() -> None:
    """Noise keyed by a seed in the config is accounted as if nobody could strip it."""
    import soma.privacy
    from soma.strategies import dp_fedavg

    def epsilon(self, exposure) -> float:
        return soma.privacy.epsilon_public(exposure.worst(), self.options.delta)

    _replace(dp_fedavg.DPFedAvg, "epsilon", epsilon)


@mutant("dp_counts_of_the_first_client", caught_by=[_H, "-k", "counts"])
def _dp_counts_of_the_first_client() -> None:
    """The published counts are the first client's (its steps: its size), with no noise."""
    from soma.strategies import dp_fedavg

    difference, counts_of = dp_fedavg.difference, dp_fedavg.counts_of
    first: dict = {}

    def remembering(start, weights, client):
        delta, counts = difference(start, weights, client)
        if client is not None:
            first.setdefault("counts", counts)
        return delta, counts

    def theirs(start):
        return first.pop("counts", None) or counts_of(start)

    _replace(dp_fedavg, "difference", remembering)
    _replace(dp_fedavg, "counts_of", theirs)
