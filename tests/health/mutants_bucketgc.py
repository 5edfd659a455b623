"""Broken variants of gc on a bucket (registered into tests/mutants.py's MUTANTS): each keeps
every put, read and listing working, so that only gc's guarantees can catch it."""

from __future__ import annotations

from mutants import _replace, mutant

_GC = "tests/health/test_gc_s3.py"


@mutant("bucket_gc_ignores_the_grace", caught_by=[_GC, "-k", "grace or put_again"])
def _bucket_gc_ignores_the_grace() -> None:
    """gc that removes every unreachable blob, however young: a blob just put (or put
    again) by a live writer, about to be named, goes."""
    try:
        import soma.store.s3.backend as s3
    except ImportError:  # no boto3: the catchers skip, and this mutant is reported not caught
        return
    import soma.health.collecting as collecting

    collect = s3.S3Backend.collect_blob

    def collect_blob(self, digest: str, cutoff: float) -> int | None:
        return collect(self, digest, float("inf"))

    _replace(s3.S3Backend, "collect_blob", collect_blob)
    _replace(collecting, "_untouched", lambda mtime, cutoff: True)


@mutant("bucket_put_does_not_refresh", caught_by=[_GC, "-k", "put_again or refresh_between"])
def _bucket_put_does_not_refresh() -> None:
    """A put that finds its blob there and leaves it as it is: no marker, no new
    LastModified, so gc removes a blob a live writer has just put and is about to name."""
    try:
        import soma.store.s3.backend as s3
    except ImportError:
        return

    def kept(self, digest: str) -> bool:
        return self._head(self._blob_key(digest)) is not None

    _replace(s3.S3Backend, "_kept", kept)
