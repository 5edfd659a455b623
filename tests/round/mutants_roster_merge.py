"""A broken `soma keys merge` (registered into tests/mutants.py's MUTANTS): the sites' rosters
merged without looking for a client with two keys or a key of two clients."""

from __future__ import annotations

from mutants import _replace, mutant


@mutant(
    "roster_merge_keeps_the_last_key",
    caught_by=["tests/round/test_roster_merge.py", "-k", "two_keys or two_clients"],
)
def _roster_merge_keeps_the_last_key() -> None:
    """Each file's clients over the last's: a client whose keys were made at two sites ends
    with one of them, silently, and the other site's records are refused mid-run."""
    import soma.round.signing as signing

    def merge_rosters(paths):
        merged: dict[int, str] = {}
        for path in paths:
            merged.update(signing.read_roster(path))
        return dict(sorted(merged.items()))

    _replace(signing, "merge_rosters", merge_rosters)
