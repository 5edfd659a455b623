"""Broken variants of the store's durability (registered into tests/mutants.py's MUTANTS)."""

from __future__ import annotations

from mutants import _replace, mutant

_DURABILITY = "tests/store/test_durability.py"


@mutant("group_binds_before_blobs_are_durable", caught_by=[_DURABILITY, "-k", "group_commit"])
def _group_binds_before_blobs_are_durable() -> None:
    """A group commit binds its names first and makes the blobs durable after: a crash in
    between leaves names reaching blobs that never reached the disk."""
    import soma.store.folder.commit

    def _commit(self, queued):
        for name, tmp in queued:
            self._rename_onto(name, tmp)
        self._sync()

    _replace(soma.store.folder.commit.GroupCommit, "_commit", _commit)


@mutant("scratch_on_a_shared_store", caught_by=[_DURABILITY, "-k", "refused_on_a_store_that_says"])
def _scratch_on_a_shared_store() -> None:
    """Scratch durability is taken on a store that says it is shared."""
    import soma.store.folder.commit

    original = soma.store.folder.commit._check_durability

    def _check_durability(folder, durability, shared):
        original(folder, "durable" if durability == "scratch" else durability, shared)

    _replace(soma.store.folder.commit, "_check_durability", _check_durability)
