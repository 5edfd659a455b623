"""Broken variants of what a folder store keeps of the small blobs it wrote
(soma.store.folder.write_cache). Registered into tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant

_TESTS = "tests/store/test_written.py"


@mutant("written_keeps_callers_buffer", caught_by=[_TESTS, "-k", "as_it_was_hashed"])
def _written_keeps_callers_buffer() -> None:
    """The caller's buffer itself kept, not the bytes hashed: changed after the put, a read
    returns what no digest names."""
    from soma.store.folder import FolderStore

    real = FolderStore.put

    def put(self, data):
        digest = real(self, data)
        self._written._kept[digest] = data
        return digest

    _replace(FolderStore, "put", put)


@mutant("written_tensors_share_the_kept_bytes", caught_by=[_TESTS, "-k", "whatever_happens"])
def _written_tensors_share_the_kept_bytes() -> None:
    """A reader's tensors made over the memory kept, not a copy: a reader that writes to
    them changes what every later read returns."""
    import torch

    from soma.store import tensorfile
    from soma.store.folder import FolderStore

    real = FolderStore.get_tensors

    def get_tensors(self, digest, *, lazy=False):
        kept = self._written.get(digest)
        if kept is None:
            return real(self, digest, lazy=lazy)
        if not isinstance(kept, bytearray):
            kept = self._written._kept[digest] = bytearray(kept)
        base = torch.frombuffer(kept, dtype=torch.uint8)
        where = self._where(digest)
        return tensorfile.tensors_from(base, tensorfile.read_header(memoryview(kept), where), where)

    _replace(FolderStore, "get_tensors", get_tensors)


@mutant("written_unbounded", caught_by=[_TESTS, "-k", "bounded"])
def _written_unbounded() -> None:
    """Every small blob written kept for good: a long run's memory grows without bound."""
    from soma.store.folder import write_cache as written

    def add(self, digest, data):
        if len(data) <= written.SMALL:
            self._kept[digest] = data

    _replace(written.Written, "add", add)
