"""Broken variants of what every backend owes (tests/contract/), registered into
tests/mutants.py's MUTANTS: each breaks one backend, so that the contract run against that
backend is what catches it."""

from __future__ import annotations

from mutants import _replace, mutant

_CONTRACT = "tests/contract/test_backend.py"


@mutant("bucket_claim_as_resolve_then_bind", caught_by=[_CONTRACT, "-k", "racing and s3"])
def _bucket_claim_as_resolve_then_bind() -> None:
    """A bucket's claim written as a lookup then an unconditional put: the 8 racers of the
    contract all find the name free (the sleep widens the window as on the folder's mutant)."""
    import time

    import soma.store.backend as backend

    def claim(self, name: str, digest: str, *, at_commit: bool = False) -> bool:
        if self.resolve(name) is not None:
            return False
        time.sleep(0.2)
        self.bind(name, digest)
        return True

    _replace(backend.BackendStore, "claim", claim)
