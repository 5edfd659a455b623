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
  twice under `<prefix>probe/`, then puts it with a wrong `If-Match`, and refuses the bucket
  (BadStore) unless the second create and that put are refused.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Iterator
from email.utils import parsedate_to_datetime

from soma.store.errors import BadStore, StoreError
from soma.store.pipeline import REFRESH_AFTER

try:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError
except ImportError as _absent:  # an optional extra: the scheme says what to install
    raise ImportError("boto3 is needed for s3:// stores", name="boto3") from _absent

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


# what a request can raise: the server's answer, or no answer (no endpoint, no credentials)
_ERRORS = (ClientError, BotoCoreError)


def _code(error: Exception) -> str:
    return str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))


def _status(error: Exception) -> int:
    return int(getattr(error, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


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
        self.client = boto3.client("s3")
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

    # --- blobs -----------------------------------------------------------------------

    def has_blob(self, digest: str) -> bool:
        """One HEAD (a second, of the attic, when it misses: see the module docs)."""
        return self._head(self._blob_key(digest)) is not None or (
            self._head(self._attic_key(digest)) is not None
        )

    def _head(self, key: str) -> dict | None:
        """The HEAD of `key`, or None when it is not there."""
        try:
            return self.client.head_object(Bucket=self.bucket, Key=key)
        except _ERRORS as error:
            if _missing(error):
                return None
            raise self._failed("HEAD", key, error) from None

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
            try:
                marked = self.client.put_object(
                    Bucket=self.bucket, Key=self._marker_key(digest), Body=token.encode()
                )
                copied = self.client.copy_object(
                    Bucket=self.bucket,
                    Key=key,
                    CopySource={"Bucket": self.bucket, "Key": key},
                    MetadataDirective="REPLACE",
                    Metadata={"refreshed": token},
                )
            except _ERRORS as error:
                if _missing(error):
                    return False
                raise self._failed("refresh of", key, error) from None
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
                if self._create(key, body) or self._kept(digest):  # there: refreshed if old
                    return
            raise StoreError(f"PUT of s3://{self.bucket}/{key}: there and gone three times")
        if not replace and self._kept(digest):
            return
        if size >= MULTIPART_FROM:
            self._put_in_parts(key, chunks, replace)
        elif replace:
            self._put(key, b"".join(bytes(c) for c in chunks))
        else:
            self._create(key, b"".join(bytes(c) for c in chunks))  # lost: the same bytes

    def _put_in_parts(self, key: str, chunks: Iterable[memoryview], replace: bool) -> None:
        upload = self.client.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"]
        parts: list[dict[str, object]] = []
        try:
            for number, body in enumerate(_regroup(chunks, PART), start=1):
                etag = self.client.upload_part(
                    Bucket=self.bucket, Key=key, UploadId=upload, PartNumber=number, Body=body
                )["ETag"]
                parts.append({"ETag": etag, "PartNumber": number})
            condition = {} if replace else {"IfNoneMatch": "*"}
            self.client.complete_multipart_upload(
                Bucket=self.bucket,
                Key=key,
                UploadId=upload,
                MultipartUpload={"Parts": parts},
                **condition,
            )
        except _ERRORS as error:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload)
            if not (_lost(error) or _busy(error)):
                raise self._failed("multipart PUT", key, error) from None
        except BaseException:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload)
            raise

    def read_blob(self, digest: str) -> Iterator[bytes] | None:
        """The blob's bytes in chunks, or None when it is not there (not yet verified)."""
        for key in (self._blob_key(digest), self._attic_key(digest)):  # see the docs
            try:
                body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
            except _ERRORS as error:
                if _missing(error):
                    continue
                raise self._failed("GET", key, error) from None
            return body.iter_chunks(READ_CHUNK)
        return None

    def blobs(self) -> Iterator[tuple[str, int, float]]:
        """Every key under blobs/ (a digest, unless somebody else wrote it), its size and
        mtime."""
        top = f"{self.prefix}blobs/"
        for item in self._listed(top):
            yield item["Key"][len(top) :], int(item["Size"]), item["LastModified"].timestamp()

    def delete_blob(self, digest: str) -> int | None:
        """Delete blob `digest`; its size, or None when it was not there."""
        key = self._blob_key(digest)
        try:
            size = int(self.client.head_object(Bucket=self.bucket, Key=key)["ContentLength"])
        except _ERRORS as error:
            if _missing(error):
                return None
            raise self._failed("HEAD", key, error) from None
        self.client.delete_object(Bucket=self.bucket, Key=key)
        return size

    # --- names -----------------------------------------------------------------------

    def bind(self, name: str, digest: str) -> None:
        """An unconditional PUT: replaces the name whole."""
        self._put(self._name_key(name), f"{digest}\n".encode())

    def _put(self, key: str, body: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body)
        except _ERRORS as error:
            raise self._failed("PUT", key, error) from None

    def claim(self, name: str, digest: str) -> bool:
        """PUT with If-None-Match: *: True when it created the name, False on 412."""
        if not self._conditional_checked:
            self._check_conditional()
        return self._create(self._name_key(name), f"{digest}\n".encode())

    def swap(self, name: str, tag: str | None, digest: str) -> str | None:
        """PUT with If-Match: <tag> (If-None-Match: * for None): the new ETag, None on 412."""
        if not self._conditional_checked:
            self._check_conditional()
        condition = {"IfNoneMatch": "*"} if tag is None else {"IfMatch": tag}
        return self._put_when(self._name_key(name), f"{digest}\n".encode(), **condition)

    def resolve_tagged(self, name: str) -> tuple[bytes, str] | None:
        """What the name holds and its ETag, or None."""
        key = self._name_key(name)
        try:
            got = self.client.get_object(Bucket=self.bucket, Key=key, Range="bytes=0-127")
        except _ERRORS as error:
            if _missing(error):
                return None
            raise self._failed("GET", key, error) from None
        return got["Body"].read(), str(got["ETag"])

    def _check_conditional(self) -> None:
        """BadStore unless the server refuses a second create of one key, and a PUT whose
        If-Match names an ETag the key does not have (see the docs)."""
        key = f"{self.prefix}probe/{secrets.token_hex(8)}"
        try:
            first, second = self._create(key, b"1"), self._create(key, b"2")
            stale = self._put_when(key, b"3", IfMatch='"00000000000000000000000000000000"')
        finally:
            self.client.delete_object(Bucket=self.bucket, Key=key)
        if not first or second or stale is not None:
            header = "If-Match" if first and not second else "If-None-Match"
            raise BadStore(
                f"the S3 server of {self.url} ignores {header} (a conditional write of "
                f"s3://{self.bucket}/{key} was not refused): claims and leases there would not "
                "be exclusive; use a server that supports conditional writes"
            )
        self._conditional_checked = True

    def _create(self, key: str, body: bytes) -> bool:
        """Create-if-absent: PUT with If-None-Match: *; False on 412."""
        return self._put_when(key, body, IfNoneMatch="*") is not None

    def _put_when(self, key: str, body: bytes, **condition: str) -> str | None:
        """A conditional PUT (If-None-Match or If-Match): the new ETag, or None when the
        condition failed (412, or If-Match of a key not there); 409 retried."""
        for attempt in range(_CONFLICT_RETRIES):
            try:
                put = self.client.put_object(Bucket=self.bucket, Key=key, Body=body, **condition)
                return str(put["ETag"])
            except _ERRORS as error:
                if _lost(error) or ("IfMatch" in condition and _missing(error)):
                    return None
                if not _busy(error) or attempt == _CONFLICT_RETRIES - 1:
                    raise self._failed("conditional PUT", key, error) from None
                time.sleep(0.01 * (attempt + 1))
        return None  # not reached

    def resolve(self, name: str) -> bytes | None:
        """What the name holds (at most 128 bytes read), or None."""
        key = self._name_key(name)
        try:
            return self.client.get_object(Bucket=self.bucket, Key=key, Range="bytes=0-127")[
                "Body"
            ].read()
        except _ERRORS as error:
            if _missing(error):
                return None
            raise self._failed("GET", key, error) from None

    def names(self, prefix: str) -> Iterator[str]:
        """Every name starting with `prefix` (one LIST per 1000)."""
        top = f"{self.prefix}names/"
        for key in self._keys(top + prefix):
            yield key[len(top) :]

    def delete_name(self, name: str) -> bool:
        if self.resolve(name) is None:
            return False
        self.client.delete_object(Bucket=self.bucket, Key=self._name_key(name))
        return True

    def _keys(self, prefix: str) -> Iterator[str]:
        for item in self._listed(prefix):
            yield item["Key"]

    def _listed(self, prefix: str) -> Iterator[dict]:
        pages = self.client.get_paginator("list_objects_v2")
        try:
            for page in pages.paginate(Bucket=self.bucket, Prefix=prefix):
                yield from page.get("Contents", [])
        except _ERRORS as error:
            raise self._failed("LIST", prefix, error) from None

    # --- gc (soma.health): by the server's clock, beside live writers (see the docs) --------

    def now(self) -> float:
        """The server's time (the Date of one HEAD of the bucket), for gc's cutoff."""
        try:
            return _date(self.client.head_bucket(Bucket=self.bucket))
        except _ERRORS as error:
            raise self._failed("HEAD", "", error) from None

    def collect_blob(self, digest: str, cutoff: float) -> int | None:
        """Remove blob `digest` unless a put refreshed it after `cutoff` (server time),
        through the attic (see the module docs); its size, or None when it stays (or was
        not there)."""
        key, attic = self._blob_key(digest), self._attic_key(digest)
        head = self._head(key)
        if head is None or head["LastModified"].timestamp() >= cutoff:
            return None
        source = {"Bucket": self.bucket, "Key": key}
        try:
            self.client.copy_object(Bucket=self.bucket, Key=attic, CopySource=source)
        except _ERRORS as error:
            if _missing(error):
                return None
            raise self._failed("copy to the attic of", key, error) from None
        self.client.delete_object(Bucket=self.bucket, Key=key)
        marker = self._head(self._marker_key(digest))
        looked = _date(marker) if marker is not None else self.now()
        refreshed = marker is not None and marker["LastModified"].timestamp() >= cutoff
        if refreshed or looked - _date(head) > WINDOW:  # a put may believe it is there
            self._back(digest)
            return None
        self.client.delete_object(Bucket=self.bucket, Key=attic)
        return int(head["ContentLength"])

    def _back(self, digest: str) -> None:
        """Copy blob `digest` back from the attic, then drop the attic's copy."""
        attic = self._attic_key(digest)
        try:
            self.client.copy_object(
                Bucket=self.bucket,
                Key=self._blob_key(digest),
                CopySource={"Bucket": self.bucket, "Key": attic},
            )
        except _ERRORS as error:
            if _missing(error):
                return  # another gc put it back (settle_attic) this instant
            raise self._failed("copy back from the attic of", attic, error) from None
        self.client.delete_object(Bucket=self.bucket, Key=attic)

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
                self.client.delete_object(Bucket=self.bucket, Key=item["Key"])
        return done

    def forget_markers(self, cutoff: float) -> None:
        """Delete the refresh markers written before `cutoff` (If-Match: one rewritten
        since the listing stays)."""
        for item in self._listed(f"{self.prefix}refreshed/"):
            if item["LastModified"].timestamp() < cutoff:
                try:
                    self.client.delete_object(
                        Bucket=self.bucket, Key=item["Key"], IfMatch=item["ETag"]
                    )
                except _ERRORS as error:
                    if not (_lost(error) or _missing(error)):
                        raise self._failed("DELETE", item["Key"], error) from None

    def abandoned_uploads(self, cutoff: float, dry_run: bool = False) -> tuple[int, int]:
        """Abort the multipart uploads under the prefix not written since `cutoff` (their
        last part, or their start; server time: killed writers'); how many were (`dry_run`:
        would be) aborted, and how many are kept (maybe live)."""
        aborted = kept = 0
        pages = self.client.get_paginator("list_multipart_uploads")
        try:
            uploads = [
                u
                for page in pages.paginate(Bucket=self.bucket, Prefix=self.prefix)
                for u in page.get("Uploads", [])
            ]
        except _ERRORS as error:
            raise self._failed("LIST uploads", self.prefix, error) from None
        for upload in uploads:
            key, upload_id = upload["Key"], upload["UploadId"]
            try:  # its last part is when it was last written (no part: when it began)
                parts = self.client.list_parts(Bucket=self.bucket, Key=key, UploadId=upload_id).get(
                    "Parts", []
                )
            except _ERRORS as error:
                if _missing(error):
                    continue  # completed or aborted meanwhile
                raise self._failed("LIST parts", key, error) from None
            times = [p["LastModified"].timestamp() for p in parts]
            touched = max(times) if times else upload["Initiated"].timestamp()
            if touched >= cutoff:
                kept += 1
                continue
            if not dry_run:
                try:
                    self.client.abort_multipart_upload(
                        Bucket=self.bucket, Key=key, UploadId=upload_id
                    )
                except _ERRORS as error:
                    if not _missing(error):
                        raise self._failed("abort of upload", key, error) from None
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
