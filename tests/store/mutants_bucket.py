"""Broken variants of the look at a store's bucket and of `soma bucket serve` (registered into
tests/mutants.py's MUTANTS): each breaks one guarantee, so that only its tests catch it."""

from __future__ import annotations

from mutants import _replace, mutant

_S3 = "tests/store/test_store_s3.py"
_SERVE = "tests/store/test_local_bucket.py"


@mutant(
    "bucket_never_looked_at",
    caught_by=[_S3, "-k", "missing_bucket_is_refused or bucket_that_is_not_there or asked"],
)
def _bucket_never_looked_at() -> None:
    """A store that takes its bucket on trust: a reader of a missing bucket sees an empty
    store (a GET of a key there is a 404), a writer a bare AccessDenied."""
    try:
        import soma.store.s3.backend as s3
    except ImportError:  # no boto3: the catchers skip, and this mutant is reported not caught
        return

    def check_bucket(self, operation: str, key: str) -> None:
        self._bucket_seen = True

    _replace(s3.S3Backend, "_check_bucket", check_bucket)


@mutant("bucket_gone_read_as_a_missing_key", caught_by=[_S3, "-k", "bucket_gone"])
def _bucket_gone_read_as_a_missing_key() -> None:
    """Every 404 a missing key, NoSuchBucket included: a bucket deleted under a run reads as
    an empty store."""
    try:
        import soma.store.s3.backend as s3
        import soma.store.s3.requests as requests
    except ImportError:
        return

    def missing(error: Exception) -> bool:
        return requests.status_of(error) == 404

    _replace(s3, "missing", missing)


@mutant(
    "serve_kills_the_server",
    # the first fails in seconds (its server's stop is a SIGKILL, exit -9), and -x ends the
    # run there; the recipe's two sites (minutes) catch it at their own stop
    caught_by=[
        "tests/store/test_local_bucket_private.py",
        f"{_SERVE}::test_two_sites_on_one_machine_run_from_a_clean_folder_to_the_bits_of_one_site",
    ],
)
def _serve_kills_the_server() -> None:
    """`soma bucket serve` that stops its server with SIGKILL: no clean stop."""
    import soma.store.s3.local_bucket as local_bucket

    def stop(self, within: float = local_bucket.STOP_WITHIN) -> int | None:
        self.kill()
        return None if self.process is None else self.process.returncode

    _replace(local_bucket.LocalBucket, "stop", stop)
