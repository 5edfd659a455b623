"""The store in an S3-compatible bucket: `Store("s3://bucket/prefix")` (`pip install soma[s3]`).

Endpoint, region and credentials come the standard AWS way, from boto3: `AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, `AWS_PROFILE`, the config and credentials files
(e.g. `addressing_style = path` there for a server on an address rather than a host name).

Layout, as on a folder (soma.store): `<prefix>/blobs/ab/<digest>` holds a blob's bytes,
`<prefix>/names/<name>` holds a digest and a newline. What each guarantee rests on:

- A claim is `PutObject` with `If-None-Match: *`: the server creates the key only if it does
  not exist, atomically; 412 means somebody else's claim is there (lost). A 409 (a
  concurrent conditional write in progress, AWS's answer) is retried until it is a win or
  a 412. Never resolve-then-put, never an unconditional put.
- A swap (compare-and-swap, for leases: soma.round.lease) is `PutObject` with `If-Match:
  <etag>` (`If-None-Match: *` when the name should be absent); 412 means somebody changed
  it first. Its tag is the ETag (a single-part object's MD5: soma never swaps in a content
  it wrote before, so it is as good as a version).
- A bind is a plain `PutObject`: an object is replaced whole, never seen half written.
- A blob is put with `If-None-Match: *` too (its bytes are its name: one already there is as
  good), after one HEAD so that a blob already there costs no upload. A blob of
  `MULTIPART_FROM` bytes or more is a multipart upload whose parts are invisible until
  `CompleteMultipartUpload`, itself conditional on `If-None-Match: *`; an upload that
  fails is aborted. So nothing partial is ever readable under a digest.
- Every read is verified against the digest by the store (soma.store.backend).
- Before its first request a store looks at its bucket (one HeadBucket; opening it makes
  no request): a bucket that is not there is refused by name, never read as an empty store
  (a key in a missing bucket answers 404, as a key not there), and a NoSuchBucket met later
  is said as such. A 403 there is no verdict (credentials for a prefix may not ask).
- gc beside live writers, by the server's clock, and the refresh of a blob put again that
  it rests on: soma.store.s3.gc.
- Every request rides through transient faults with the store's patience, and a lost answer
  to a conditional PUT is told from a loss: soma.store.s3.requests.
- A server that ignores `If-None-Match` or `If-Match` (some S3-compatible ones do, silently)
  would let every claimer win: before its first claim or swap, a store creates a probe key
  (a fresh random one) twice under `<prefix>probe/`, then puts it with a wrong `If-Match`,
  and refuses the bucket (BadStore) unless the second create and that put are refused. A
  first create refused is no verdict: nobody else knows that key, so it was this store's own
  create repeated after its answer was lost; it probes again with a new key (`PROBES` times).
- A blob read yields at most the object's Content-Length (the server's answer; a body that
  ends short is refused naming the key), and when the caller bounds it (`read_blob(limit=...)`:
  soma.store.backend refuses more) at most `limit + 1` bytes are read: a substituted huge body
  costs no more than that. A read cut midway resumes where it stopped (a ranged GET, If-Match
  the ETag: the rest of the same object or a refusal). A large blob is read by ranges side by
  side into the store's one buffer (soma.store.s3.reads), each If-Match the first answer's
  ETag, and hashed in order by the store as they arrive.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from soma.store.errors import BadStore, StoreError, StoreUnavailable
from soma.store.patience import Patience
from soma.store.s3 import reads
from soma.store.s3.gc import BucketHousekeeping
from soma.store.s3.requests import (
    ERRORS,
    busy,
    client_for,
    code_of,
    lost,
    missing,
    status_of,
    transient,
)

T = TypeVar("T")
LOG = logging.getLogger("soma.store")

MULTIPART_FROM = 64 << 20  # a blob this large goes up in parts (S3's single PUT is <= 5 GB)
PART = 8 << 20  # each part but the last (S3: at least 5 MB, at most 10,000 parts)
PARTS_AT_ONCE = 8  # parts of one upload in flight at once (boto3's TransferManager: 10)
# A blob smaller than this is sent at once with If-None-Match (one request when it is new:
# a client's weights always are); a larger one is asked for first (HEAD), not sent twice.
ASK_FIRST_FROM = 1 << 20
_CONFLICT_RETRIES = 50
PROBES = 5  # fresh keys the probe tries before a server that refuses every create is an error
_TOKEN = "soma-put"  # user metadata of a claim or swap: which call wrote it (see the docs)
_PROBE_TAG = '"00000000000000000000000000000000"'  # an ETag no key has


class S3Backend(BucketHousekeeping):
    """A soma.store.backend.Backend on an S3 bucket (see the module docs)."""

    def __init__(self, url: str) -> None:
        rest = url.split("://", 1)[1]
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise BadStore(f"store {url!r} names no bucket: s3://BUCKET/PREFIX")
        self.url = url
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.patience = Patience.from_environment()
        self.client = client_for(self.patience)
        self._conditional_checked = False
        self._bucket_seen: bool | None = None  # None: not asked yet (see _check_bucket)

    def __repr__(self) -> str:
        return f"S3Backend({self.url!r})"

    def _blob_key(self, digest: str) -> str:
        return f"{self.prefix}blobs/{digest[:2]}/{digest}"

    def _name_key(self, name: str) -> str:
        return f"{self.prefix}names/{name}"

    def _attic_key(self, digest: str) -> str:
        return f"{self.prefix}attic/{digest}"

    def _marker_key(self, digest: str) -> str:
        return f"{self.prefix}refreshed/{digest}"

    def _check_bucket(self, operation: str, key: str) -> None:
        """One HeadBucket before this store's first request (an opening makes none): a
        bucket that is not there is refused, naming it and where it was looked for, instead
        of being read as an empty store (a GET or HEAD of a key in a missing bucket is a 404,
        as a missing key's), or met at the first write as "AccessDenied" (SeaweedFS's
        answer without identities; with one, it makes the bucket: a mistyped name would be
        filled). Then whether the bucket was seen: a 403 is no verdict (credentials for a
        prefix may not ask about the bucket), nor is any other refusal (the requests that
        follow say it as before). Asked again only after StoreUnavailable, which names the
        request it came before (`operation` of `key`): the one its caller made."""
        try:
            self.patience.retrying(
                self._asked(self.client.head_bucket),
                transient=transient,
                what=lambda: f"{operation} of s3://{self.bucket}/{key}",
            )
            self._bucket_seen = True
        except ERRORS as error:
            if status_of(error) == 404 or code_of(error) == "NoSuchBucket":
                raise BadStore(self._no_bucket()) from None
            self._bucket_seen = False

    def _no_bucket(self) -> str:
        return (
            f"store {self.url}: bucket {self.bucket!r} does not exist at "
            f"{self.client.meta.endpoint_url}: make it first (`soma bucket serve --bucket "
            f"{self.bucket}` serves one on this machine; elsewhere `aws s3 mb s3://{self.bucket}` "
            "or your provider's console), or correct the store's URL or AWS_ENDPOINT_URL"
        )

    def _failed(self, what: str, key: str, error: Exception) -> StoreError:
        """The refusal of request `what` of `key`: a bucket gone is said as such, and an
        "AccessDenied" of a bucket not seen at the opening says it may not exist."""
        if code_of(error) == "NoSuchBucket":
            return BadStore(self._no_bucket())
        hint = ""
        if code_of(error) == "AccessDenied" or status_of(error) == 403:
            hint = f" (these credentials may not reach s3://{self.bucket}/{self.prefix}" + (
                ")" if self._bucket_seen else f", or bucket {self.bucket!r} may not exist)"
            )
        return StoreError(f"{what} s3://{self.bucket}/{key} failed: {error}{hint}")

    # --- requests: each one rides through transient faults (see the docs) ----------------

    def _request(
        self,
        operation: str,
        key: str,
        call: Callable[[], T],
        failures: list[BaseException] | None = None,
    ) -> T:
        """`call()`, one S3 request, repeated while it fails transiently for up to the store's
        patience, then StoreUnavailable naming it; any other error as raised. `failures`
        collects the transient ones (a conditional PUT's answer may have been lost). The
        store's first request is preceded by a look at the bucket (`_check_bucket`)."""
        if self._bucket_seen is None:
            self._check_bucket(operation, key)

        def counted(error: BaseException) -> bool:
            if not transient(error):
                return False
            if failures is not None:
                failures.append(error)
            return True

        return self.patience.retrying(
            call, transient=counted, what=lambda: f"{operation} of s3://{self.bucket}/{key}"
        )

    def _asked(self, method: Callable[..., dict], **params: Any) -> Callable[[], dict]:
        """`method` on this bucket with `params`: one request, to make (and maybe repeat)."""
        return partial(method, Bucket=self.bucket, **params)

    def _do(self, operation: str, key: str, method: Callable[..., dict], **params: Any) -> dict:
        """`method(Bucket=..., **params)` through `_request`; StoreError naming it when the
        server refuses."""
        try:
            return self._request(operation, key, self._asked(method, **params))
        except ERRORS as error:
            raise self._failed(operation, key, error) from None

    def _do_if_there(
        self, operation: str, key: str, method: Callable[..., dict], **params: Any
    ) -> dict | None:
        """`_do`, but None when the key (or upload) is not there."""
        try:
            return self._request(operation, key, self._asked(method, **params))
        except ERRORS as error:
            if missing(error):
                return None
            raise self._failed(operation, key, error) from None

    def _delete(self, key: str, **condition: str) -> None:
        """DELETE `key` (idempotent: repeated freely)."""
        self._do("DELETE", key, self.client.delete_object, Key=key, **condition)

    # --- blobs -----------------------------------------------------------------------

    def has_blob(self, digest: str) -> bool:
        """One HEAD (a second, of the attic, when it misses: see the module docs)."""
        return self._head(self._blob_key(digest)) is not None or (
            self._head(self._attic_key(digest)) is not None
        )

    def _head(self, key: str) -> dict | None:
        """The HEAD of `key`, or None when it is not there."""
        return self._do_if_there("HEAD", key, self.client.head_object, Key=key)

    def put_blob(
        self, digest: str, chunks: Iterable[memoryview], size: int, replace: bool = False
    ) -> None:
        """Create blob `digest` unless it is there (`replace`: over what is there, corrupt);
        never readable partial."""
        key = self._blob_key(digest)
        if not replace and size < ASK_FIRST_FROM:  # one request: created, or there already
            body = b"".join(bytes(c) for c in chunks)
            for _ in range(3):
                if self._create_blob(key, body) or self._kept(digest):  # there: refreshed if old
                    return
            raise StoreError(f"PUT of s3://{self.bucket}/{key}: there and gone three times")
        if not replace and self._kept(digest):
            return
        if size >= MULTIPART_FROM:
            self._put_in_parts(key, chunks, replace)
        elif replace:
            self._put(key, b"".join(bytes(c) for c in chunks))
        else:
            self._create_blob(key, b"".join(bytes(c) for c in chunks))  # lost: the same bytes

    def _create_blob(self, key: str, body: bytes) -> bool:
        """Create-if-absent (If-None-Match: *); False when there. No read-back after a lost
        answer (see the docs): whoever's bytes are under a digest, they are these."""
        return self._put_conditionally(key, body, {"IfNoneMatch": "*"})[0] is not None

    def _put_in_parts(self, key: str, chunks: Iterable[memoryview], replace: bool) -> None:
        upload = self._do("multipart PUT", key, self.client.create_multipart_upload, Key=key)
        upload_id = upload["UploadId"]
        failures: list[BaseException] = []
        try:
            parts = self._parts(key, upload_id, chunks)
            condition = {} if replace else {"IfNoneMatch": "*"}
            complete = self._asked(
                self.client.complete_multipart_upload,
                Key=key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
                **condition,
            )
            self._request("multipart PUT", key, complete, failures)
        except ERRORS as error:
            self._abort(key, upload_id)
            if lost(error) or busy(error):
                return
            if failures and missing(error) and self._head(key) is not None:
                return  # completed by an attempt whose answer was lost: the upload is gone
            raise self._failed("multipart PUT", key, error) from None
        except StoreUnavailable:
            self._abort(key, upload_id, patient=False)  # the server is out: gc aborts it
            raise
        except BaseException:
            self._abort(key, upload_id)
            raise

    def _parts(
        self, key: str, upload_id: str, chunks: Iterable[memoryview]
    ) -> list[dict[str, object]]:
        """Every part of an upload, PARTS_AT_ONCE of them in flight at once (one TCP stream
        is below what a server takes in; at most that many parts held in memory), in order.
        The first part that fails stops the others and raises."""
        done: list[dict[str, object]] = []
        in_flight: deque[Future] = deque()
        with ThreadPoolExecutor(PARTS_AT_ONCE, thread_name_prefix="soma-part") as pool:
            try:
                for number, body in enumerate(_regroup(chunks, PART), start=1):
                    if len(in_flight) >= PARTS_AT_ONCE:
                        done.append(in_flight.popleft().result())
                    in_flight.append(pool.submit(self._part, key, upload_id, number, body))
                while in_flight:
                    done.append(in_flight.popleft().result())
            finally:
                for part in in_flight:
                    part.cancel()
        return done

    def _part(self, key: str, upload_id: str, number: int, body: bytes) -> dict[str, object]:
        call = self._asked(
            self.client.upload_part, Key=key, UploadId=upload_id, PartNumber=number, Body=body
        )
        return {"ETag": self._request("PUT of a part of", key, call)["ETag"], "PartNumber": number}

    def _abort(self, key: str, upload_id: str, patient: bool = True) -> None:
        """Abort a failed multipart upload (`patient`: retried), best effort: one left over
        is a killed writer's to gc (see the docs), and the failure that led here is what
        the caller is told."""
        call = self._asked(self.client.abort_multipart_upload, Key=key, UploadId=upload_id)
        try:
            if patient:
                self._request("abort of upload", key, call)
            else:
                call()
        except (*ERRORS, StoreUnavailable) as error:
            if not missing(error):
                LOG.warning("abort of upload s3://%s/%s failed: %s", self.bucket, key, error)

    def read_blob(self, digest: str, limit: int | None = None) -> reads.Reading | None:
        """The blob's bytes, or None when it is not there (not yet verified): chunks, or
        straight into the caller's buffer, a large blob by ranges side by side
        (soma.store.s3.reads), its size known before any byte arrives.

        Never more than its Content-Length (a body that ends short is refused naming the key).
        `limit` (soma.store.backend's bounded reads: the caller refuses a blob of more than
        `limit` bytes): when the blob is larger, only its first `limit + 1` bytes are read
        and handed out, the extra one how the caller sees there was more."""
        most = reads.PARALLEL_FROM
        first = most if limit is None else min(most, limit + 1)
        for key in (self._blob_key(digest), self._attic_key(digest)):  # see the docs
            got = self._first_range(key, first)
            if got is not None:
                return reads.Reading(self, key, got, limit)
        return None

    def _first_range(self, key: str, first: int) -> dict | None:
        """A GET of the first `first` bytes of `key` (the whole of a small blob, and the size
        of any), or None when it is not there. An empty object has no byte to range over
        (416): it is asked for whole."""
        ask = self._asked(self.client.get_object, Key=key, Range=f"bytes=0-{first - 1}")
        try:
            return self._request("GET", key, ask)
        except ERRORS as error:
            if missing(error):
                return None
            if status_of(error) == 416 or code_of(error) == "InvalidRange":
                return self._do_if_there("GET", key, self.client.get_object, Key=key)
            raise self._failed("GET", key, error) from None

    def blobs(self) -> Iterator[tuple[str, int, float]]:
        """Every key under blobs/ (a digest, unless somebody else wrote it), its size and
        mtime."""
        top = f"{self.prefix}blobs/"
        for item in self._listed(top):
            yield item["Key"][len(top) :], int(item["Size"]), item["LastModified"].timestamp()

    def delete_blob(self, digest: str) -> int | None:
        """Delete blob `digest`; its size, or None when it was not there."""
        key = self._blob_key(digest)
        head = self._head(key)
        if head is None:
            return None
        self._delete(key)
        return int(head["ContentLength"])

    # --- names -----------------------------------------------------------------------

    def bind(self, name: str, digest: str) -> None:
        """An unconditional PUT: replaces the name whole."""
        self._put(self._name_key(name), f"{digest}\n".encode())

    def _put(self, key: str, body: bytes) -> None:
        self._do("PUT", key, self.client.put_object, Key=key, Body=body)

    def claim(self, name: str, digest: str) -> bool:
        """PUT with If-None-Match: *: True when it created the name, False on 412 (after a
        lost answer: unless the name holds what this call sent, see the docs)."""
        if not self._conditional_checked:
            self._check_conditional()
        return (
            self._put_when(self._name_key(name), f"{digest}\n".encode(), IfNoneMatch="*")
            is not None
        )

    def swap(self, name: str, tag: str | None, digest: str) -> str | None:
        """PUT with If-Match: <tag> (If-None-Match: * for None): the new ETag, None on 412."""
        if not self._conditional_checked:
            self._check_conditional()
        condition = {"IfNoneMatch": "*"} if tag is None else {"IfMatch": tag}
        return self._put_when(self._name_key(name), f"{digest}\n".encode(), **condition)

    def resolve_tagged(self, name: str) -> tuple[bytes, str] | None:
        """What the name holds and its ETag, or None."""
        found = self._small(self._name_key(name))
        return None if found is None else (found[0], found[1])

    def _small(self, key: str) -> tuple[bytes, str, dict[str, str]] | None:
        """The first 128 bytes of `key`, its ETag and user metadata (read within the
        retried request), or None when it is not there."""

        def get() -> tuple[bytes, str, dict[str, str]]:
            got = self.client.get_object(Bucket=self.bucket, Key=key, Range="bytes=0-127")
            try:
                return got["Body"].read(), str(got["ETag"]), dict(got.get("Metadata", {}))
            finally:
                got["Body"].close()

        try:
            return self._request("GET", key, get)
        except ERRORS as error:
            if missing(error):
                return None
            raise self._failed("GET", key, error) from None

    def _check_conditional(self) -> None:
        """BadStore unless the server refuses a second create of one key, and a PUT whose
        If-Match names an ETag the key does not have (see the docs). A first create refused
        is a lost answer, not a verdict: a new key is probed."""
        for _ in range(PROBES):
            key = f"{self.prefix}probe/{secrets.token_hex(8)}"
            try:
                ignored = self._probe(key)
            finally:
                self._delete(key)
            if ignored is not None:
                break
        else:
            raise StoreError(
                f"the S3 server of {self.url} refused {PROBES} times to create a fresh random "
                f"key under s3://{self.bucket}/{self.prefix}probe/ (412 to If-None-Match: *, "
                "repeated after a transient failure each time): its answers are being lost"
            )
        if ignored:
            raise BadStore(
                f"the S3 server of {self.url} ignores {ignored} (a conditional write of "
                f"s3://{self.bucket}/{key} was not refused): claims and leases there would not "
                "be exclusive; use a server that supports conditional writes"
            )
        self._conditional_checked = True

    def _probe(self, key: str) -> str | None:
        """The condition the server ignores on fresh key `key` ("" when neither), or None
        when its first create was refused (an answer lost: see the docs)."""
        if self._put_conditionally(key, b"1", {"IfNoneMatch": "*"})[0] is None:
            return None
        if self._put_conditionally(key, b"2", {"IfNoneMatch": "*"})[0] is not None:
            return "If-None-Match"
        if self._put_conditionally(key, b"3", {"IfMatch": _PROBE_TAG})[0] is not None:
            return "If-Match"
        return ""

    def _put_when(self, key: str, body: bytes, **condition: str) -> str | None:
        """A name's conditional PUT (If-None-Match or If-Match): the new ETag, or None when
        the condition failed; refused after a repeat, whatever `_ours` finds (see the docs)."""
        token = secrets.token_hex(16)
        tag, repeated = self._put_conditionally(key, body, condition, {_TOKEN: token})
        if tag is None and repeated:
            return self._ours(key, body, token)
        return tag

    def _ours(self, key: str, body: bytes, token: str) -> str | None:
        """After a conditional PUT repeated and then refused: `key`'s ETag if it holds this
        call's body and token (its first attempt wrote it, the answer was lost), else None."""
        found = self._small(key)
        if found is None:
            return None
        data, etag, metadata = found
        return etag if data == body and metadata.get(_TOKEN) == token else None

    def _put_conditionally(
        self,
        key: str,
        body: bytes,
        condition: dict[str, str],
        metadata: dict[str, str] | None = None,
    ) -> tuple[str | None, bool]:
        """A conditional PUT: the new ETag, or None when the condition failed (412, or
        If-Match of a key not there); and whether an attempt failed transiently (then a
        412 may be this call's own write). 409 retried."""
        failures: list[BaseException] = []
        put = self._asked(
            self.client.put_object,
            Key=key,
            Body=body,
            **condition,
            **({"Metadata": metadata} if metadata else {}),
        )
        for attempt in range(_CONFLICT_RETRIES):
            try:
                return str(self._request("conditional PUT", key, put, failures)["ETag"]), bool(
                    failures
                )
            except ERRORS as error:
                if lost(error) or ("IfMatch" in condition and missing(error)):
                    return None, bool(failures)
                if not busy(error) or attempt == _CONFLICT_RETRIES - 1:
                    raise self._failed("conditional PUT", key, error) from None
                time.sleep(0.01 * (attempt + 1))
        return None, bool(failures)  # not reached

    def resolve(self, name: str) -> bytes | None:
        """What the name holds (at most 128 bytes read), or None."""
        found = self._small(self._name_key(name))
        return None if found is None else found[0]

    def names(self, prefix: str) -> Iterator[str]:
        """Every name starting with `prefix` (one LIST per 1000)."""
        top = f"{self.prefix}names/"
        for key in self._keys(top + prefix):
            yield key[len(top) :]

    def delete_name(self, name: str) -> bool:
        if self.resolve(name) is None:
            return False
        self._delete(self._name_key(name))
        return True

    def _keys(self, prefix: str) -> Iterator[str]:
        for item in self._listed(prefix):
            yield item["Key"]

    def _listed(self, prefix: str) -> Iterator[dict]:
        """Every object under `prefix`, a LIST per 1000 (each retried on its own)."""
        after: dict[str, str] = {}
        while True:
            page = self._do("LIST", prefix, self.client.list_objects_v2, Prefix=prefix, **after)
            yield from page.get("Contents", [])
            if not page.get("IsTruncated"):
                return
            after = {"ContinuationToken": page["NextContinuationToken"]}


def _regroup(chunks: Iterable[memoryview], size: int) -> Iterator[bytes]:
    """`chunks` as pieces of `size` bytes (the last one shorter), each byte copied once: a
    piece within one chunk is sliced from it, one across chunks gathered."""
    buffer = bytearray()
    for chunk in chunks:
        view = memoryview(chunk).cast("B")
        if buffer:
            take = min(size - len(buffer), len(view))
            buffer += view[:take]
            view = view[take:]
            if len(buffer) == size:
                yield bytes(buffer)
                buffer = bytearray()
        while len(view) >= size:
            yield bytes(view[:size])
            view = view[size:]
        buffer += view
    if buffer:
        yield bytes(buffer)
