"""Broken variants of the store on S3 (registered into tests/mutants.py's MUTANTS): each breaks
one guarantee (a claim's exclusivity, riding through faults, telling a lost answer from a bad
server, a bounded read) and keeps the rest working, so that only that guarantee's tests catch
it."""

from __future__ import annotations

from mutants import _replace, mutant

_S3 = "tests/store/test_store_s3.py"
_CONTRACT = "tests/contract/test_backend.py"  # what every backend owes, run on the bucket too


@mutant("s3_claim_by_unconditional_put", caught_by=[_CONTRACT, "-k", "claim and s3"])
def _s3_claim_by_unconditional_put() -> None:
    """A claim that PUTs without If-None-Match: every claimer is told it won, and the last
    one's digest is what the name holds."""
    try:
        import soma.store.s3.backend as s3
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
        import soma.store.s3.backend as s3
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
    an averaging that reads an input twice fetches its weights twice). An averaging folds
    the values its checks kept (soma.round.verified_values), so that alone no longer reads
    twice; the mutant keeps nothing either, so the second read is the bucket's to serve."""
    import soma.round.verified_values as kept
    import soma.store.read_cache as recent

    _replace(recent.Recent, "get", lambda self, digest: None)
    _replace(kept.VerifiedValues, "keep", lambda self, digest, value: None)


# --- riding through faults (tests/store/test_s3_faults.py) ----------------------------------

_FAULTS = "tests/store/test_s3_faults.py"


@mutant("s3_no_retry", caught_by=[_FAULTS, "-k", "six_503 or killed_mid_claim"])
def _s3_no_retry() -> None:
    """Every request tried once, as with boto3's retries off and no patience: a SlowDown or a
    server restarting fails the client."""
    try:
        import soma.store.s3.backend as s3
    except ImportError:
        return

    def _request(self, operation, key, call, failures=None):  # noqa: ANN001, ANN202
        return call()

    _replace(s3.S3Backend, "_request", _request)


@mutant("s3_probe_condemns_lost_answer", caught_by=[_FAULTS, "-k", "probe"])
def _s3_probe_condemns_lost_answer() -> None:
    """The probe of one key whose first create refused (its answer lost, the repeat's 412)
    condemns the server, as before: an operator is sent to replace a working one."""
    try:
        import soma.store.s3.backend as s3
    except ImportError:
        return

    def _check_conditional(self) -> None:  # noqa: ANN001
        key = f"{self.prefix}probe/{s3.secrets.token_hex(8)}"
        try:
            ignored = self._probe(key)
        finally:
            self._delete(key)
        if ignored is None or ignored:
            raise s3.BadStore(f"the S3 server of {self.url} ignores {ignored or 'If-None-Match'}")
        self._conditional_checked = True

    _replace(s3.S3Backend, "_check_conditional", _check_conditional)


@mutant("s3_lost_claim_answer_is_a_loss", caught_by=[_FAULTS, "-k", "claim_whose_answer"])
def _s3_lost_claim_answer_is_a_loss() -> None:
    """A claim repeated after a lost answer and refused is a loss even when the name holds
    its own write: the claimer that won is told it lost, and nobody averages the round."""
    try:
        import soma.store.s3.backend as s3
    except ImportError:
        return

    _replace(s3.S3Backend, "_ours", lambda self, key, body, token: None)


@mutant("s3_lost_answer_by_body_alone", caught_by=[_FAULTS, "-k", "same_digest"])
def _s3_lost_answer_by_body_alone() -> None:
    """A repeated, refused claim judged by the body alone: of two claimers of one digest,
    both are told they won."""
    try:
        import soma.store.s3.backend as s3
    except ImportError:
        return

    def _ours(self, key: str, body: bytes, token: str) -> str | None:  # noqa: ANN001
        found = self._small(key)
        return found[1] if found is not None and found[0] == body else None

    _replace(s3.S3Backend, "_ours", _ours)


@mutant("s3_read_past_the_limit", caught_by=[_FAULTS, "-k", "300_mb"])
def _s3_read_past_the_limit() -> None:
    """A blob read that takes no notice of the caller's limit: a substituted 300 MB body is
    fetched whole before the hash refuses it."""
    try:
        import soma.store.s3.backend as s3
    except ImportError:
        return

    real = s3.S3Backend.read_blob

    def read_blob(self, digest: str, limit: int | None = None):  # noqa: ANN001, ANN202
        return real(self, digest)

    _replace(s3.S3Backend, "read_blob", read_blob)


# --- a blob's read into one buffer (soma.store.s3.reads, soma.store.backend) -----------------


@mutant(
    "sized_read_unverified",
    caught_by=[_CONTRACT, "-k", "s3 and (flipped or large)"],
)
def _sized_read_unverified() -> None:
    """A read received straight into the store's buffer (every bucket read: its size known
    first) taken as it came, unhashed: a damaged range would be returned."""
    import soma.store.backend as backend

    real = backend.BackendStore._verified

    def _verified(self, digest, body):  # noqa: ANN001, ANN202
        if body.size is None:
            real(self, digest, body)

    _replace(backend.BackendStore, "_verified", _verified)


@mutant("recent_tensor_blob_writable", caught_by=[_S3, "-k", "stays_as_verified"])
def _recent_tensor_blob_writable() -> None:
    """The recent-blob cache's memory handed to readers as is (not copy-on-write, not
    sealed): a reader's writes into its tensors change what the next reader is given."""
    import torch

    import soma.store.read_cache as recent

    def seal(self):  # noqa: ANN001, ANN202
        return True

    def tensor(self):  # noqa: ANN001, ANN202
        import mmap

        return torch.frombuffer(mmap.mmap(self.fd, self.size), dtype=torch.uint8)

    _replace(recent.Shared, "seal", seal)
    _replace(recent.Shared, "tensor", tensor)


@mutant("bucket_lazy_reads_in_memory", caught_by=[_S3, "-k", "lazy_read_of_a_large"])
def _bucket_lazy_reads_in_memory() -> None:
    """A lazy read of a large blob from a bucket received into the process's memory, as an
    eager one is (no temporary file): an averaging of 1 GB exports holds each input too."""
    import soma.store.read_cache as recent

    def spooled(size):  # noqa: ANN001, ANN202
        return None

    _replace(recent.Shared, "spooled", staticmethod(spooled))


@mutant(
    "s3_parts_one_after_another",
    caught_by=[f"{_S3}::test_the_parts_of_a_large_blob_go_up_side_by_side"],
)
def _s3_parts_one_after_another() -> None:
    """A multipart upload's parts sent one at a time, each waiting for the last."""
    try:
        import soma.store.s3.backend as s3
    except ImportError:
        return

    def parts(self, key, upload_id, chunks):
        return [
            self._part(key, upload_id, number, body)
            for number, body in enumerate(s3._regroup(chunks, s3.PART), start=1)
        ]

    _replace(s3.S3Backend, "_parts", parts)
