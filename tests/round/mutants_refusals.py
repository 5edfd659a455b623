"""Broken variants of issue 31's refusals (registered into tests/mutants.py's MUTANTS): under
a quorum a refused input is left out, decided alike by every process."""

from __future__ import annotations

from mutants import _replace, mutant

_REFUSED = "tests/round/test_refused_inputs.py"


@mutant("refused_input_is_fatal_again", caught_by=[_REFUSED, "-k", "nan_record_is_left_out"])
def _refused_input_is_fatal_again() -> None:
    """A refused input stops the round even under a quorum, as before issue 31: one record
    written by a buggy writer or a hostile roster member stops every honest client."""
    import soma.round.checks

    _replace(soma.round.checks, "leaves_refused_out", lambda meeting: False)
