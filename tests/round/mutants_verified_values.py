"""Broken variants of reusing what an averaging's checks read (registered into tests/mutants.py)."""

from __future__ import annotations

from mutants import _replace, mutant

_T = "tests/round/test_verified_values.py::"


@mutant(
    "kept_value_for_another_digest",
    caught_by=[
        _T + "test_a_kept_value_is_handed_back_only_for_the_digest_it_was_verified_against",
        _T + "test_a_checked_input_left_out_is_never_folded_in_place_of_another",
    ],
)
def _kept_value_for_another_digest() -> None:
    """The values kept are handed back in the order they were checked, whatever digest is
    asked for: right while every checked input is averaged, another's bytes, never verified
    against the digest its record names, once one is left out."""
    import soma.round.verified_values as mod

    def recall(self, store, digest):
        if self._values:
            first = next(iter(self._values))
            value, size = self._values.pop(first)
            self._left += size
            return value
        return store.recall_digest(digest, lazy=True)

    _replace(mod.VerifiedValues, "recall", recall)


@mutant(
    "inputs_read_twice",
    caught_by=[_T + "test_the_averaging_reads_each_inputs_weights_once_and_averages_the_same_bits"],
)
def _inputs_read_twice() -> None:
    """Nothing the checks read is kept: every input is read and verified again to be folded."""
    import soma.round.verified_values as mod

    def keep(self, digest, value):
        return None

    _replace(mod.VerifiedValues, "keep", keep)
