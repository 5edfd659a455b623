"""Broken variants of a client's side of a round (soma.round.client); registered into
tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant


@mutant(
    "rerun_release_written_before_its_refusal",
    caught_by=["tests/round/test_client.py", "-k", "fresh_noise"],
)
def _rerun_release_written_before_its_refusal() -> None:
    """The old order: a rerun's weights are put, and only the claim refuses them, so a second
    noisy release of one update stays in the store."""
    import soma.round.client

    _replace(
        soma.round.client,
        "_refuse_other_weights",
        lambda store, meeting, mine, export, size, extra, own: None,
    )
