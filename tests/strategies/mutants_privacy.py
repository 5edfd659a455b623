"""Broken variants of differential privacy (registered into tests/mutants.py's MUTANTS)."""

from __future__ import annotations

from mutants import _replace, mutant

_PRIVACY = ["tests/strategies/test_privacy.py"]


@mutant("dp_no_clipping", caught_by=_PRIVACY)
def _dp_no_clipping() -> None:
    """Every update goes into the sum as it is: one client can move the mean by anything."""
    import soma.privacy

    norm = soma.privacy.l2_norm

    def clip(update, bound):
        return {node: dict(keys) for node, keys in update.items()}, norm(update)

    _replace(soma.privacy, "clip", clip)


@mutant("dp_noise_ignores_the_bound", caught_by=_PRIVACY)
def _dp_noise_ignores_the_bound() -> None:
    """The noise is z / m whatever the clip: too little noise for a clip above 1."""
    import soma.privacy

    _replace(
        soma.privacy,
        "noise_std",
        lambda bound, multiplier, clients_sampled: multiplier / clients_sampled,
    )


@mutant("dp_noise_ignores_the_clients", caught_by=_PRIVACY)
def _dp_noise_ignores_the_clients() -> None:
    """The noise on the mean is z C, as if it were on the sum: m times too much."""
    import soma.privacy

    _replace(
        soma.privacy, "noise_std", lambda bound, multiplier, clients_sampled: multiplier * bound
    )


@mutant("dp_shares_not_split", caught_by=_PRIVACY)
def _dp_shares_not_split() -> None:
    """Each distributed client adds the whole z C: the sum's noise is sqrt(m) times too much."""
    import soma.privacy

    _replace(
        soma.privacy, "share_std", lambda bound, multiplier, clients_sampled: multiplier * bound
    )


@mutant("dp_accountant_spends_nothing", caught_by=_PRIVACY)
def _dp_accountant_spends_nothing() -> None:
    """Nothing is ever spent: the reported epsilon is 0 and no budget ever stops a run."""
    import soma.privacy

    _replace(soma.privacy, "epsilon_of", lambda history, delta, *, accountant="rdp": 0.0)


@mutant(
    "privacy_reported_by_nobody",
    caught_by=[
        "tests/test_seams.py",
        "tests/strategies/test_privacy.py",
        "-k",
        "privacy_spent or own",
    ],
)
def _privacy_reported_by_nobody() -> None:
    """No strategy is asked for the privacy it spent: `soma status` shows no epsilon."""
    import soma.strategies._base as base

    _replace(base, "has_own", lambda strategy, name: False)
