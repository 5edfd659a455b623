"""Broken variants of the store on S3 (registered into tests/mutants.py's MUTANTS): each keeps
every put and read working, so that only the claim's guarantee can catch it."""

from __future__ import annotations

from mutants import _replace, mutant

_S3 = "tests/store/test_store_s3.py"
_CONTRACT = "tests/contract/test_backend.py"  # what every backend owes, run on the bucket too


@mutant("s3_claim_by_unconditional_put", caught_by=[_CONTRACT, "-k", "claim and s3"])
def _s3_claim_by_unconditional_put() -> None:
    """A claim that PUTs without If-None-Match: every claimer is told it won, and the last
    one's digest is what the name holds."""
    try:
        import soma.store.s3 as s3
    except ImportError:  # no boto3: the catchers skip, and this mutant is reported not caught
        return

    def claim(self, name: str, digest: str) -> bool:
        self.bind(name, digest)
        return True

    _replace(s3.S3Backend, "claim", claim)


@mutant("s3_claim_by_resolve_then_put", caught_by=[_CONTRACT, "-k", "racing and s3"])
def _s3_claim_by_resolve_then_put() -> None:
    """A claim that looks first and then PUTs: right alone, wrong in a race."""
    try:
        import soma.store.s3 as s3
    except ImportError:
        return

    def claim(self, name: str, digest: str) -> bool:
        if self.resolve(name) is not None:
            return False
        self.bind(name, digest)
        return True

    _replace(s3.S3Backend, "claim", claim)


@mutant("bucket_forgets_what_it_read", caught_by=[_S3, "-k", "downloads_each"])
def _bucket_forgets_what_it_read() -> None:
    """A bucket store that keeps no recent blob: every read is a download again (right, but
    an averaging fetches each client's weights twice)."""
    import soma.store.backend as backend

    _replace(backend._Recent, "get", lambda self, digest: None)
