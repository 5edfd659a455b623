"""Broken variants of participation: sampling (soma.config.participation) and the quorum
(soma.round); registered into tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant

# --- participation (soma/config/participation.py, the quorum in soma/round/quorum.py) ---


@mutant(
    "round_ignores_the_quorum",
    caught_by=["tests/run/test_participation.py", "-k", "below_the_quorum_the_deadline_names"],
)
def _round_ignores_the_quorum() -> None:
    """Whoever is there is averaged, however few: a round of one out of ten goes on."""
    import soma.round.quorum

    _replace(soma.round.quorum, "_enough", lambda came, needed: bool(came))


@mutant(
    "participation_ignores_sampling",
    caught_by=["tests/run/test_participation.py", "-k", "a_sample_is_drawn_from_the_seed"],
)
def _participation_ignores_sampling() -> None:
    """Everyone takes part in every round, whatever the participation says."""
    import soma.config.participation

    _replace(
        soma.config.participation,
        "sampled",
        lambda seed, round, clients, participation=None: list(range(clients)),
    )
