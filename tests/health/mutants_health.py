"""Broken variants of a store's health (soma.health: verify, repair, gc, advice) and of the
store's part of it; registered into tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant

# --- a store's health (soma/health/*.py, and the store's part of it) -----------------------------


@mutant(
    "gc_ignores_the_grace",
    caught_by=["tests/health/test_health.py", "-k", "gc_keeps_what or refreshes_an_old_blob"],
)
def _gc_ignores_the_grace() -> None:
    """Every unreachable blob is old enough: a writer's blobs go before its bind."""
    import soma.health.collecting

    _replace(soma.health.collecting, "_untouched", lambda mtime, cutoff: True)


@mutant(
    "gc_follows_only_tensor_blobs",
    caught_by=["tests/health/test_health.py", "-k", "gc_keeps_what"],
)
def _gc_follows_only_tensor_blobs() -> None:
    """A record's digests written as text (an average's weights and state) are not followed:
    gc deletes what names reach."""
    import soma.health.reach

    real = soma.health.reach.references

    def tensors_only(tree, loose):
        return (ref for ref in real(tree, loose) if ref[3])

    _replace(soma.health.reach, "references", tensors_only)


@mutant(
    "gc_removes_without_the_recheck",
    caught_by=[
        "tests/health/test_health.py",
        "tests/run/test_reliability.py",
        "-k",
        "put_between_gcs_listing or put_old_unreachable_blobs_again",
    ],
)
def _gc_removes_without_the_recheck() -> None:
    """gc deletes what it listed as old even when a put refreshed it since."""
    import os

    import soma.health.collecting

    def collect(store, digest, cutoff):
        path = store.blob_path(digest)
        try:
            size = path.stat().st_size
            os.unlink(path)
        except FileNotFoundError:
            return None
        return size

    _replace(soma.health.collecting, "_collect", collect)


@mutant(
    "gc_removes_live_temporaries",
    caught_by=["tests/health/test_health.py", "-k", "temporaries_of_writers"],
)
def _gc_removes_live_temporaries() -> None:
    """Every writer is taken for gone: a live writer's temporary is removed under it."""
    import soma.health.collecting

    _replace(soma.health.collecting, "_writer_gone", lambda store, temporary: True)


@mutant(
    "put_never_refreshes",
    caught_by=[
        "tests/health/test_health.py",
        "tests/run/test_reliability.py",
        "-k",
        "refreshes_an_old_blob or put_old_unreachable_blobs_again",
    ],
)
def _put_never_refreshes() -> None:
    """A put of a blob already there leaves its mtime: gc's grace never starts again."""
    import os

    import soma.store.folder
    import soma.store.folder.pipeline

    real = soma.store.folder.FolderStore._existing_blob

    def unrefreshed(self, digest, size):
        path = self.blob_path(digest)
        try:
            before = os.stat(path)
        except FileNotFoundError:
            return real(self, digest, size)
        found = real(self, digest, size)
        if found == soma.store.folder.pipeline._SOUND:
            os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        return found

    _replace(soma.store.folder.FolderStore, "_existing_blob", unrefreshed)


@mutant(
    "keep_trusts_a_corrupt_blob",
    caught_by=["tests/health/test_health.py", "-k", "repairs_a_corrupt_blob or rerun_repairs"],
)
def _keep_trusts_a_corrupt_blob() -> None:
    """A blob already there is taken as it is, whatever its size or mark (the old put)."""
    import soma.store.folder
    import soma.store.folder.pipeline as pipeline

    def trusted(self, digest, size):
        return pipeline._SOUND if self.blob_path(digest).exists() else pipeline._MISSING

    _replace(soma.store.folder.FolderStore, "_existing_blob", trusted)


@mutant(
    "verify_skips_hashing",
    caught_by=["tests/health/test_health.py", "-k", "damaged_blob_is_reported or commands_exit"],
)
def _verify_skips_hashing() -> None:
    """verify takes a tensor blob's name for its hash (it only checks that it is there)."""
    import soma.health.verifying

    _replace(
        soma.health.verifying,
        "_hash_blob",
        lambda store, digest, on_chunk: digest if store.has(digest) else None,
    )


# --- the store layout and the round's records (soma/round/layout.py, soma/round/records.py) ---


@mutant(
    "advice_looks_for_an_unfanned_started_marker",
    caught_by=["tests/health/test_health.py", "-k", "1001_client_round"],
)
def _advice_looks_for_an_unfanned_started_marker() -> None:
    """The advice looks for a train job's marker at `started/<k>` whatever the client count
    (the bug of 1,001-client rounds): it stops naming the Snakemake target."""
    import soma.health.advice
    from soma.round import layout

    def unfanned(self, run, r, meeting, k):
        if meeting is None:
            return False
        name = layout.started(layout.meeting(run, r, meeting), k, 1)
        return self.store.resolve(name) is not None

    _replace(soma.health.advice.Advisor, "_started", unfanned)
