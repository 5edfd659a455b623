"""Broken variants of the folder store's thread economy (soma.store.folder.pipeline): a thread per
small blob read, as before issue 34. Registered into tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant

_SMALL = "tests/store/test_threads.py::test_a_small_model_is_kept_and_read_back_without_a_thread"


@mutant("small_blobs_read_side_by_side", caught_by=[_SMALL])
def _small_blobs_read_side_by_side() -> None:
    """Every blob counts as large: a pool of threads for a small model's blobs."""
    from soma.store.folder import pipeline

    _replace(pipeline.Pipeline, "_blob_size", lambda self, digest: 1 << 40)


@mutant("small_blob_hashed_beside", caught_by=[_SMALL])
def _small_blob_hashed_beside() -> None:
    """A thread hashes beside the read of a blob of one chunk (written or read small)."""
    import threading

    from soma.store.folder import pipeline

    pipeline._Inline = pipeline._Beside
    real = pipeline._read_small

    def read_small(f, size, h):
        done = []
        thread = threading.Thread(target=lambda: done.append(real(f, size, h)))
        thread.start()
        thread.join()
        return done[0]

    pipeline._read_small = read_small
