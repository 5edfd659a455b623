"""gc on a bucket beside live writers, and the refresh of a blob put again that it rests on: the
housekeeping half of the bucket store (soma.store.s3.backend), a mixin of its S3Backend,
which provides the requests (`_asked`, `_do`, `_do_if_there`, `_delete`, `_request`, `_head`,
`_listed`), the keys (`_blob_key`, `_attic_key`, `_marker_key`) and `_failed`.

gc (soma.health) beside live writers, judged by the SERVER's clock (the `Date` of its
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
"""

from __future__ import annotations

import secrets
from typing import Any

from soma.store.errors import StoreError
from soma.store.keeping import REFRESH_AFTER
from soma.store.s3.requests import ERRORS, lost, missing, server_date

# The longest a refresh (marker, then copy) or a gc's removal (HEAD .. marker look) may span
# by the server's clock (its Dates have whole seconds): gc's floor, 2 x REFRESH_AFTER, is
# then longer than any such span plus the refresh's own REFRESH_AFTER (see the module docs).
WINDOW = REFRESH_AFTER - 2.0
COPY_LIMIT = 5 << 30  # CopyObject's largest object


class BucketHousekeeping:
    """gc's side of a bucket store, and a writer's refresh (see the module docs)."""

    bucket: str
    prefix: str
    client: Any

    def _kept(self, digest: str) -> bool:
        """Whether blob `digest` is there to stay: a blob older than REFRESH_AFTER (by the
        server's clock) is refreshed first (marker, then copy onto itself, within WINDOW:
        see the module docs). False: it is not there (or went while refreshed): upload it."""
        key = self._blob_key(digest)
        head = self._head(key)
        if head is None:
            return False
        if server_date(head) - head["LastModified"].timestamp() <= REFRESH_AFTER:
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
            if server_date(copied) - server_date(marked) <= WINDOW:
                return True
        raise StoreError(
            f"refresh of s3://{self.bucket}/{key}: its marker and its copy were more than "
            f"{WINDOW:g} s apart three times (by the server's clock); a gc could miss it"
        )

    def now(self) -> float:
        """The server's time (the Date of one HEAD of the bucket), for gc's cutoff."""
        return server_date(self._do("HEAD", "", self.client.head_bucket))

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
        looked = server_date(marker) if marker is not None else self.now()
        refreshed = marker is not None and marker["LastModified"].timestamp() >= cutoff
        if refreshed or looked - server_date(head) > WINDOW:  # a put may believe it is there
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
                delete = self._asked(self.client.delete_object, Key=key, IfMatch=item["ETag"])
                try:
                    self._request("DELETE", key, delete)
                except ERRORS as error:
                    if not (lost(error) or missing(error)):
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
