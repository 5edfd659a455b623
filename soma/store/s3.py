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
- gc (soma.health) beside live writers, judged by the SERVER's clock (the `Date` of its
  answers against an object's `LastModified`: sites' clocks differ, the server's is one).
  A put of a blob already there older than `REFRESH_AFTER` refreshes it: it first puts a
  marker `<prefix>refreshed/<digest>` (a random body), then copies the blob onto itself
  (CopyObject, new metadata: the server sets a new LastModified; the ETag stays, so no
  conditional delete can see it, which is why the marker exists: checked on SeaweedFS,
  whose DeleteObject honours If-Match but ignores If-Match-Last-Modified-Time and
  If-Unmodified-Since; AWS takes the former only on directory buckets), and redoes both unless
  they were at most `WINDOW` seconds apart by the server's Dates; a copy that finds no blob
  uploads it. gc removes a blob as a folder's gc does, through an attic: one HEAD (still
  older than the cutoff?), a server-side copy to `<prefix>attic/<digest>`, the delete,
  then a look at the marker; the blob is copied back if a marker younger than the cutoff
  is there, or if those requests spanned more than `WINDOW` seconds (server time), and
  only then is the attic copy deleted. Writer (marker, then blob) and gc (blob, then
  marker) each write before they look, so one of them sees the other: the writer's copy
  finds no blob (it uploads), or gc finds the marker (it puts the blob back). A marker is
  deleted only once older than a gc's cutoff (If-Match its ETag: one rewritten meanwhile
  stays), i.e. at least 2 x `REFRESH_AFTER` after it was written, later than any gc that
  could need it looks (both windows are at most `WINDOW`). Reads and `has_blob` that miss a
  blob look in the attic, so the instant a blob spends there is invisible. A gc killed
  midway leaves attic copies: the next gc puts back the blobs still missing.
  Multipart uploads not written since the cutoff (their last part, else their start) were
  abandoned by killed writers (a live one adds a part every few seconds): gc aborts them.
  CopyObject copies at most 5 GB in one request: a larger blob is not refreshed (it ages
  from its upload; the grace is its margin).
- A server that ignores `If-None-Match` or `If-Match` (some S3-compatible ones do, silently)
  would let every claimer win: before its first claim or swap, a store creates a probe key
  (a fresh random one) twice under `<prefix>probe/`, then puts it with a wrong `If-Match`,
  and refuses the bucket (BadStore) unless the second create and that put are refused. A
  first create refused is no verdict: nobody else knows that key, so it was this store's own
  create repeated after its answer was lost; it probes again with a new key (`PROBES` times).
- Every request rides through transient faults (a 503 SlowDown storm, a server restarting,
  a proxy's 5xx, a connection refused or cut): it is repeated with the store's patience
  (soma.store.patience: SOMA_STORE_PATIENCE, 120 s by default), then StoreUnavailable names
  it. boto3's own retries are off (one attempt each), so that soma knows when a request was
  repeated, and its timeouts are at most the patience (at least `TIMEOUT_FLOOR`), so that a
  server that stopped answering is given up on about when the patience says. Retrying is
  safe: every request is idempotent or conditional. A conditional PUT (claim, swap) repeated
  after a transient failure and then refused (412) may have been written by its own first
  attempt, whose answer was lost: the key is read back, and it was this call's when it holds
  exactly the body this call sent and the random token it sent with it (user metadata
  `x-amz-meta-soma-put`): claim True, swap its ETag; else somebody else's. The token tells
  apart two claimers of one digest (several processes claim one name with one digest, e.g.
  a run's starting weights, and a process may claim a name twice): by body alone both could
  be told they won. A first attempt's 412 is a plain loss, as always. A blob's create needs
  no read-back: any bytes under its digest are as good.
- A blob read yields at most the object's Content-Length (the server's answer; a body that
  ends short is refused naming the key), and when the caller bounds it (`read_blob(limit=...)`:
  soma.store.backend refuses more) at most `limit + 1` bytes are read: a substituted huge body
  costs no more than that. A read cut midway resumes where it stopped (a ranged GET, If-Match
  the ETag: the rest of the same object or a refusal).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from email.utils import parsedate_to_datetime
from functools import partial
from typing import Any, TypeVar

from soma.store.errors import BadStore, StoreError, StoreUnavailable
from soma.store.patience import Patience
from soma.store.pipeline import REFRESH_AFTER

try:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        ConnectionError,
        HTTPClientError,
        IncompleteReadError,
        SSLError,
    )
except ImportError as _absent:  # an optional extra: the scheme says what to install
    raise ImportError("boto3 is needed for s3:// stores", name="boto3") from _absent

T = TypeVar("T")
LOG = logging.getLogger("soma.store")

MULTIPART_FROM = 64 << 20  # a blob this large goes up in parts (S3's single PUT is <= 5 GB)
PART = 16 << 20  # each part but the last (S3: at least 5 MB, at most 10,000 parts)
READ_CHUNK = 1 << 20
# A blob smaller than this is sent at once with If-None-Match (one request when it is new:
# a client's weights always are); a larger one is asked for first (HEAD), not sent twice.
ASK_FIRST_FROM = 1 << 20
_CONFLICT_RETRIES = 50
# The longest a refresh (marker, then copy) or a gc's removal (HEAD .. marker look) may span
# by the server's clock (its Dates have whole seconds): gc's floor, 2 x REFRESH_AFTER, is
# then longer than any such span plus the refresh's own REFRESH_AFTER (see the module docs).
WINDOW = REFRESH_AFTER - 2.0
COPY_LIMIT = 5 << 30  # CopyObject's largest object
PROBES = 5  # fresh keys the probe tries before a server that refuses every create is an error
# boto3's connect and read timeouts: the patience, within [TIMEOUT_FLOOR, TIMEOUT_CAP] s (the
# cap is botocore's default; the floor leaves a slow but live server time to answer)
TIMEOUT_FLOOR = 5.0
TIMEOUT_CAP = 60.0
_TOKEN = "soma-put"  # user metadata of a claim or swap: which call wrote it (see the docs)
_PROBE_TAG = '"00000000000000000000000000000000"'  # an ETag no key has

# what a request can raise: the server's answer, or no answer (no endpoint, no credentials)
_ERRORS = (ClientError, BotoCoreError)
# the server's answers that may pass when asked again: throttled, overloaded, restarting
_TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "RequestTimeout",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequests",
        "InternalError",
        "ServiceUnavailable",
    }
)


def _code(error: Exception) -> str:
    return str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))


def _status(error: Exception) -> int:
    return int(getattr(error, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _transient(error: BaseException) -> bool:
    """Whether asking again may succeed: a 5xx (not 501, 505: what the server cannot do), 429
    or a throttling code; or no answer at all (connection refused, cut, timed out: the
    botocore HTTP errors, SSL's certificate refusals excepted). Never a credentials or
    parameter error: nothing changes those but the caller."""
    if isinstance(error, ClientError):
        return _status(error) in _TRANSIENT_STATUS or _code(error) in _TRANSIENT_CODES
    connection = isinstance(error, (ConnectionError, HTTPClientError, IncompleteReadError))
    return connection and not isinstance(error, SSLError)


def _lost(error: Exception) -> bool:
    """412: the key exists (If-None-Match: * refused the write)."""
    return _status(error) == 412 or _code(error) == "PreconditionFailed"


def _busy(error: Exception) -> bool:
    """409: another conditional write of the key is in progress; retry (AWS's advice)."""
    return _status(error) == 409 or _code(error) == "ConditionalRequestConflict"


def _missing(error: Exception) -> bool:
    return _status(error) == 404 or _code(error) in ("NoSuchKey", "404", "NotFound")


def _date(response: dict) -> float:
    """The server's time when it answered (its Date header), in seconds since the epoch."""
    return parsedate_to_datetime(response["ResponseMetadata"]["HTTPHeaders"]["date"]).timestamp()


def _client(patience: Patience) -> Any:
    """A boto3 S3 client that tries each request once (soma repeats it: see the docs), and
    waits for a connection or an answer about as long as the patience."""
    wait = min(TIMEOUT_CAP, max(TIMEOUT_FLOOR, patience.seconds))
    config = Config(
        retries={"total_max_attempts": 1, "mode": "standard"},  # 1: the first attempt only
        connect_timeout=wait,
        read_timeout=wait,
    )
    return boto3.client("s3", config=config)


class S3Backend:
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
        self.client = _client(self.patience)
        self._conditional_checked = False

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

    def _failed(self, what: str, key: str, error: Exception) -> StoreError:
        return StoreError(f"{what} s3://{self.bucket}/{key} failed: {error}")

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
        collects the transient ones (a conditional PUT's answer may have been lost)."""

        def transient(error: BaseException) -> bool:
            if not _transient(error):
                return False
            if failures is not None:
                failures.append(error)
            return True

        return self.patience.retrying(
            call, transient=transient, what=lambda: f"{operation} of s3://{self.bucket}/{key}"
        )

    def _do(self, operation: str, key: str, method: Callable[..., dict], **params: Any) -> dict:
        """`method(Bucket=..., **params)` through `_request`; StoreError naming it when the
        server refuses."""
        try:
            return self._request(operation, key, partial(method, Bucket=self.bucket, **params))
        except _ERRORS as error:
            raise self._failed(operation, key, error) from None

    def _do_if_there(
        self, operation: str, key: str, method: Callable[..., dict], **params: Any
    ) -> dict | None:
        """`_do`, but None when the key (or upload) is not there."""
        try:
            return self._request(operation, key, partial(method, Bucket=self.bucket, **params))
        except _ERRORS as error:
            if _missing(error):
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

    def _kept(self, digest: str) -> bool:
        """Whether blob `digest` is there to stay: a blob older than REFRESH_AFTER (by the
        server's clock) is refreshed first (marker, then copy onto itself, within WINDOW:
        see the module docs). False: it is not there (or went while refreshed): upload it."""
        key = self._blob_key(digest)
        head = self._head(key)
        if head is None:
            return False
        if _date(head) - head["LastModified"].timestamp() <= REFRESH_AFTER:
            return True
        if int(head["ContentLength"]) > COPY_LIMIT:
            return True  # not refreshed: see the module docs
        for _ in range(3):
            token = secrets.token_hex(8)
            marker = self._marker_key(digest)
            marked = self._do(
                "PUT", marker, self.client.put_object, Key=marker, Body=token.encode()
            )
            copied = self._do_if_there(
                "refresh (copy onto itself) of",
                key,
                self.client.copy_object,
                Key=key,
                CopySource={"Bucket": self.bucket, "Key": key},
                MetadataDirective="REPLACE",
                Metadata={"refreshed": token},
            )
            if copied is None:
                return False
            if _date(copied) - _date(marked) <= WINDOW:
                return True
        raise StoreError(
            f"refresh of s3://{self.bucket}/{key}: its marker and its copy were more than "
            f"{WINDOW:g} s apart three times (by the server's clock); a gc could miss it"
        )

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
        parts: list[dict[str, object]] = []
        failures: list[BaseException] = []
        try:
            for number, body in enumerate(_regroup(chunks, PART), start=1):
                etag = self._request(
                    "PUT of a part of",
                    key,
                    partial(
                        self.client.upload_part,
                        Bucket=self.bucket,
                        Key=key,
                        UploadId=upload_id,
                        PartNumber=number,
                        Body=body,
                    ),
                )["ETag"]
                parts.append({"ETag": etag, "PartNumber": number})
            condition = {} if replace else {"IfNoneMatch": "*"}
            self._request(
                "multipart PUT",
                key,
                partial(
                    self.client.complete_multipart_upload,
                    Bucket=self.bucket,
                    Key=key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                    **condition,
                ),
                failures,
            )
        except _ERRORS as error:
            self._abort(key, upload_id)
            if _lost(error) or _busy(error):
                return
            if failures and _missing(error) and self._head(key) is not None:
                return  # completed by an attempt whose answer was lost: the upload is gone
            raise self._failed("multipart PUT", key, error) from None
        except StoreUnavailable:
            self._abort(key, upload_id, patient=False)  # the server is out: gc aborts it
            raise
        except BaseException:
            self._abort(key, upload_id)
            raise

    def _abort(self, key: str, upload_id: str, patient: bool = True) -> None:
        """Abort a failed multipart upload (`patient`: retried), best effort: one left over
        is a killed writer's to gc (see the docs), and the failure that led here is what
        the caller is told."""
        call = partial(
            self.client.abort_multipart_upload, Bucket=self.bucket, Key=key, UploadId=upload_id
        )
        try:
            if patient:
                self._request("abort of upload", key, call)
            else:
                call()
        except (*_ERRORS, StoreUnavailable) as error:
            if not _missing(error):
                LOG.warning("abort of upload s3://%s/%s failed: %s", self.bucket, key, error)

    def read_blob(self, digest: str, limit: int | None = None) -> Iterator[bytes] | None:
        """The blob's bytes in chunks, or None when it is not there (not yet verified).

        Never more than its Content-Length (a body that ends short is refused naming the key).
        `limit` (soma.store.backend's bounded reads: the caller refuses a blob of more than
        `limit` bytes): when the Content-Length is larger, only its first `limit + 1` bytes
        are read and handed out, the extra one how the caller sees there was more."""
        for key in (self._blob_key(digest), self._attic_key(digest)):  # see the docs
            got = self._do_if_there("GET", key, self.client.get_object, Key=key)
            if got is None:
                continue
            size = int(got["ContentLength"])
            take = size if limit is None else min(size, limit + 1)
            return self._body(key, got, size, take)
        return None

    def _body(self, key: str, got: dict, size: int, take: int) -> Iterator[bytes]:
        """The first `take` of the `size` bytes of GET answer `got`'s body, and no more (the
        rest is never read), each chunk read through `_request`: a read cut midway resumes
        where it stopped (`_rest`)."""
        etag, done, body = str(got["ETag"]), 0, got["Body"]

        def next_chunk() -> bytes:
            nonlocal body
            if body is None:
                body = self._rest(key, etag, done, take)
            try:
                return body.read(min(READ_CHUNK, take - done))
            except BaseException:
                body.close()
                body = None
                raise

        try:
            while done < take:
                try:
                    chunk = self._request("GET", key, next_chunk)
                except _ERRORS as error:
                    raise self._failed("GET", key, error) from None
                if not chunk:
                    raise StoreError(
                        f"GET s3://{self.bucket}/{key}: its body ended after {done} of the "
                        f"{size} bytes of its Content-Length"
                    )
                done += len(chunk)
                yield chunk
        finally:
            if body is not None:
                body.close()  # what was not taken is not read: the connection is dropped

    def _rest(self, key: str, etag: str, done: int, take: int) -> Any:
        """The body of `key` from byte `done` to `take`, if it is still the object being read
        (If-Match its ETag: a 412 is a refusal) and it offers that many bytes."""
        got = self.client.get_object(
            Bucket=self.bucket, Key=key, Range=f"bytes={done}-{take - 1}", IfMatch=etag
        )
        if int(got["ContentLength"]) != take - done:
            got["Body"].close()
            raise StoreError(
                f"GET s3://{self.bucket}/{key}: resumed at byte {done}, the server offers "
                f"{got['ContentLength']} bytes where {take - done} were to come"
            )
        return got["Body"]

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
        except _ERRORS as error:
            if _missing(error):
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
        put = partial(
            self.client.put_object,
            Bucket=self.bucket,
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
            except _ERRORS as error:
                if _lost(error) or ("IfMatch" in condition and _missing(error)):
                    return None, bool(failures)
                if not _busy(error) or attempt == _CONFLICT_RETRIES - 1:
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

    # --- gc (soma.health): by the server's clock, beside live writers (see the docs) --------

    def now(self) -> float:
        """The server's time (the Date of one HEAD of the bucket), for gc's cutoff."""
        return _date(self._do("HEAD", "", self.client.head_bucket))

    def collect_blob(self, digest: str, cutoff: float) -> int | None:
        """Remove blob `digest` unless a put refreshed it after `cutoff` (server time),
        through the attic (see the module docs); its size, or None when it stays (or was
        not there)."""
        key, attic = self._blob_key(digest), self._attic_key(digest)
        head = self._head(key)
        if head is None or head["LastModified"].timestamp() >= cutoff:
            return None
        source = {"Bucket": self.bucket, "Key": key}
        copy = self.client.copy_object
        if (
            self._do_if_there("copy to the attic of", key, copy, Key=attic, CopySource=source)
            is None
        ):
            return None
        self._delete(key)
        marker = self._head(self._marker_key(digest))
        looked = _date(marker) if marker is not None else self.now()
        refreshed = marker is not None and marker["LastModified"].timestamp() >= cutoff
        if refreshed or looked - _date(head) > WINDOW:  # a put may believe it is there
            self._back(digest)
            return None
        self._delete(attic)
        return int(head["ContentLength"])

    def _back(self, digest: str) -> None:
        """Copy blob `digest` back from the attic, then drop the attic's copy."""
        attic = self._attic_key(digest)
        copied = self._do_if_there(
            "copy back from the attic of",
            attic,
            self.client.copy_object,
            Key=self._blob_key(digest),
            CopySource={"Bucket": self.bucket, "Key": attic},
        )
        if copied is None:
            return  # another gc put it back (settle_attic) this instant
        self._delete(attic)

    def settle_attic(self) -> int:
        """Put back every blob a killed gc left in the attic (it is judged again at the
        next gc); how many."""
        top = f"{self.prefix}attic/"
        done = 0
        for item in list(self._listed(top)):
            digest = item["Key"][len(top) :]
            if self._head(self._blob_key(digest)) is None:
                self._back(digest)
                done += 1
            else:
                self._delete(item["Key"])
        return done

    def forget_markers(self, cutoff: float) -> None:
        """Delete the refresh markers written before `cutoff` (If-Match: one rewritten
        since the listing stays)."""
        for item in self._listed(f"{self.prefix}refreshed/"):
            if item["LastModified"].timestamp() < cutoff:
                key = item["Key"]
                delete = partial(
                    self.client.delete_object, Bucket=self.bucket, Key=key, IfMatch=item["ETag"]
                )
                try:
                    self._request("DELETE", key, delete)
                except _ERRORS as error:
                    if not (_lost(error) or _missing(error)):
                        raise self._failed("DELETE", key, error) from None

    def _uploads(self) -> list[dict]:
        """The multipart uploads under the prefix, a LIST per 1000 (each retried)."""
        uploads: list[dict] = []
        after: dict[str, str] = {}
        while True:
            page = self._do(
                "LIST uploads",
                self.prefix,
                self.client.list_multipart_uploads,
                Prefix=self.prefix,
                **after,
            )
            uploads += page.get("Uploads", [])
            if not page.get("IsTruncated"):
                return uploads
            after = {
                "KeyMarker": page["NextKeyMarker"],
                "UploadIdMarker": page["NextUploadIdMarker"],
            }

    def abandoned_uploads(self, cutoff: float, dry_run: bool = False) -> tuple[int, int]:
        """Abort the multipart uploads under the prefix not written since `cutoff` (their
        last part, or their start; server time: killed writers'); how many were (`dry_run`:
        would be) aborted, and how many are kept (maybe live)."""
        aborted = kept = 0
        for upload in self._uploads():
            key, upload_id = upload["Key"], upload["UploadId"]
            # its last part is when it was last written (no part: when it began)
            listed = self._do_if_there(
                "LIST parts", key, self.client.list_parts, Key=key, UploadId=upload_id
            )
            if listed is None:
                continue  # completed or aborted meanwhile
            times = [p["LastModified"].timestamp() for p in listed.get("Parts", [])]
            touched = max(times) if times else upload["Initiated"].timestamp()
            if touched >= cutoff:
                kept += 1
                continue
            if not dry_run:
                self._do_if_there(
                    "abort of upload",
                    key,
                    self.client.abort_multipart_upload,
                    Key=key,
                    UploadId=upload_id,
                )
            aborted += 1
        return aborted, kept


def _regroup(chunks: Iterable[memoryview], size: int) -> Iterator[bytes]:
    """`chunks` as pieces of `size` bytes (the last one shorter)."""
    buffer = bytearray()
    for chunk in chunks:
        buffer += chunk
        while len(buffer) >= size:
            yield bytes(buffer[:size])
            del buffer[:size]
    if buffer:
        yield bytes(buffer)
