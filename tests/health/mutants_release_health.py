"""Broken variants of what verify, repair and gc know of a distributed-DP release
(`<meeting>/release/<k>`: soma.health.advice, soma.health.rebuild, soma.health.collecting);
registered into tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant

_TESTS = "tests/health/test_release_health.py"


@mutant(
    "lost_release_rerun_for_the_same_bytes",
    caught_by=[_TESTS, "-k", "lost_release or never_landed"],
)
def _lost_release_rerun_for_the_same_bytes() -> None:
    """A release's lost weights are advised as any client export's: "rerun, it writes the
    same bytes", which fresh noise never does (the rerun stops with Contradicts)."""
    import soma.health.advice

    _replace(soma.health.advice.Advisor, "_release", lambda self, run, r, meeting, k: None)


@mutant("release_and_client_names_unrelated", caught_by=[_TESTS, "-k", "garbled"])
def _release_and_client_names_unrelated() -> None:
    """A garbled release name (or client name) is not bound again from the other: repair
    leaves it, gc stays blocked with no way out but a backup."""
    import soma.health.rebuild

    _replace(soma.health.rebuild, "_client_record", lambda store, graph, names, k: iter(()))
