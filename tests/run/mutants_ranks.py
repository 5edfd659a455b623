"""Broken variants of soma.ranks (registered into tests/mutants.py's MUTANTS)."""

from __future__ import annotations

from mutants import _replace, mutant

_T = "tests/run/test_torchrun.py::"


@mutant(
    "ranks_share_whole_batch",
    caught_by=[_T + "test_the_ranks_shares_of_a_batch_are_fixed_disjoint_and_cover_it"],
)
def _ranks_share_whole_batch() -> None:
    """Every rank trains on the whole batch: the ranks' gradients then count it twice."""
    import soma.ranks as mod

    def share(n, rank, size):
        return slice(0, n)

    _replace(mod, "share", share)
