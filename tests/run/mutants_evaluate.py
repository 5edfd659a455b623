"""Broken variants of federated evaluation (registered into tests/mutants.py's MUTANTS)."""

from __future__ import annotations

from mutants import _replace, mutant

_SPREAD = ["tests/run/test_evaluation.py", "-k", "weighted_by_evaluation_size"]


@mutant("federated_mean_ignores_sizes", caught_by=_SPREAD)
def _federated_mean_ignores_sizes() -> None:
    """Every client weighs the same in the round's mean, whatever its evaluation size."""
    import soma.run.evaluation

    real = soma.run.evaluation.spread

    def spread(values, sizes):
        return real(values, [1.0] * len(values))

    _replace(soma.run.evaluation, "spread", spread)


@mutant("federated_spread_is_weighted", caught_by=_SPREAD)
def _federated_spread_is_weighted() -> None:
    """The spread leaves out the clients that weigh nothing: the worst client is hidden."""
    import soma.run.evaluation

    real = soma.run.evaluation.spread

    def spread(values, sizes):
        kept = [(v, s) for v, s in zip(values, sizes, strict=True) if s > 0]
        return real([v for v, _ in kept], [s for _, s in kept])

    _replace(soma.run.evaluation, "spread", spread)
