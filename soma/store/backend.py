"""Where a store keeps its blobs and names other than a folder: the backend protocol.

The folder store (`soma.store.Store` on a path or a `file://` URL) is the reference and keeps
its own primitives: its guarantees (durability passes, group commits, link(2) claims,
no-follow opens, writing beside the hash) are woven into them, and moving them behind an
interface would change bits that are tested as they are. Any other place is a `Backend`: the
operations below and nothing else, and `BackendStore` builds the store's public API
(the one the rest of soma uses: put/get, bind/claim/resolve/bound, keep/recall, ...) on them,
with the guarantees that do not depend on where the bytes are made here, once:

- every blob read is verified against its digest before anything uses it (`CorruptBlob`);
- `bind` and `claim` refuse a digest the store does not have (`UnknownDigest`);
- names are checked by `soma.store.names` as on a folder.

What differs from a folder: a bucket's keys do not nest, so a name and a folder of names
(`a/b` and `a/b/c`) are not refused there (`NameConflict` on a folder; soma's layout never
makes one); there is no `tmp/` and no attic (an upload is invisible until complete); `group`
and `sync` have nothing to do (a write is durable when the backend returns); a lazy recall
reads the blob into memory (no file to map).

What a backend must guarantee (a third one implements exactly this):

- `put_blob(digest, chunks, size, replace)`: afterwards blob `digest` is readable whole, or
  was already there; nothing partial is ever readable under the digest, whatever kills the
  writer. `replace`: what is there is corrupt, and these bytes (which hash to the digest)
  go over it whole.
- `read_blob(digest)`: its bytes as chunks, or None when it is not there (verified above).
- `bind(name, digest)`: the name points at the digest, replacing, atomically.
- `claim(name, digest)`: create-if-absent: among any number of concurrent claims of one
  name, exactly one returns True and the name then holds that claim's digest.
- `resolve(name)`: the text the name holds (a digest and a newline), or None.
- `resolve_tagged(name)`: the same and its tag, an opaque version that changes whenever
  the name's content does (S3: the ETag, the MD5 of what was put), or None.
- `swap(name, tag, digest)`: compare-and-swap: the name now holds the digest if its tag
  was still `tag` (None: if the name was absent), atomically among any number of
  concurrent swaps; the new tag, or None when refused (S3: `PutObject` with `If-Match`).
  Soma swaps only contents it never wrote before (a lease's renewal counts), so a tag that
  is a hash of the content is as good as a version.
- `names(prefix)`, and `blobs()` (each key under blobs/, `ab/<digest>` when the store
  wrote it, with its size and mtime): what is there, for listing, verify and gc.
- `delete_name(name)` / `delete_blob(digest)` (its size, None if it was not there): for
  `forget`, repair and gc.
- For gc beside live writers (soma.health), by the backend's own clock: `now()`;
  `collect_blob(digest, cutoff)`: remove the blob unless a put refreshed it after `cutoff`
  (a put of a blob already there must refresh it, and the two must not race: its size, or
  None when it stays); `settle_attic()`: put back what a killed gc left half removed;
  `forget_markers(cutoff)`: drop what refreshes left that no gc needs any more;
  `abandoned_uploads(cutoff, dry_run)`: abort uploads untouched since `cutoff` (aborted,
  kept).

The folder store has no `swap`: a holder of a claim there is proven gone by its pid or its
Slurm job (soma.round.holders). A store with `swap` is one where nobody can prove that (a
bucket shared across sites): a claim there comes with a lease its holder renews by
compare-and-swap (soma.round.lease).

Backends are found by URL scheme in one place, `BACKENDS` (`s3://` is soma.store.s3).
"""

from __future__ import annotations

import hashlib
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import BinaryIO, Protocol

import torch

from soma.files import DURABLE
from soma.store import tensorfile
from soma.store.errors import BadDigest, BadStore, CorruptBlob, CorruptName, UnknownDigest
from soma.store.names import check_name
from soma.store.pipeline import check_digest
from soma.store.values import Values

# Seconds after a put during which its blob is taken to be there without asking (a bind or
# claim of it makes no HEAD): far below gc's floor (soma.health), which only removes blobs
# older than 120 s by the server's clock.
JUST_PUT = 30.0


# A bucket's blobs read in the last RECENT_FOR seconds, up to RECENT_BYTES in all, are kept in
# memory, verified (content-addressed: never stale). A round's averaging reads each client's
# export twice, checked before the claim and averaged after it: on a folder the page cache
# serves the second read, on a bucket it would be a second download.
RECENT_BYTES = 256 << 20
RECENT_FOR = 600.0


class _Recent:
    """Blobs read recently, oldest first; when full it admits nothing new until the oldest
    expire, so that a pass over more than fits (the averaging's second) still finds the
    first ones (dropping the oldest would leave that pass nothing)."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # a lease's renewing thread shares the store

    def get(self, digest: str) -> bytes | None:
        with self._lock:
            self._expire()
            found = self._kept.get(digest)
            return None if found is None else found[1]

    def add(self, digest: str, data: bytes) -> None:
        with self._lock:
            self._expire()
            if digest in self._kept or self._bytes + len(data) > RECENT_BYTES:
                return
            self._kept[digest] = (time.monotonic(), data)
            self._bytes += len(data)

    def _expire(self) -> None:
        now = time.monotonic()
        while self._kept:
            digest, (when, data) = next(iter(self._kept.items()))
            if now - when < RECENT_FOR:
                return
            del self._kept[digest]
            self._bytes -= len(data)


class Backend(Protocol):
    """The primitives a store needs from where it keeps things (see the module docs)."""

    url: str

    def put_blob(
        self, digest: str, chunks: Iterable[memoryview], size: int, replace: bool = False
    ) -> None: ...

    def has_blob(self, digest: str) -> bool: ...

    def read_blob(self, digest: str) -> Iterator[bytes] | None: ...

    def bind(self, name: str, digest: str) -> None: ...

    def claim(self, name: str, digest: str) -> bool: ...

    def resolve(self, name: str) -> bytes | None: ...

    def resolve_tagged(self, name: str) -> tuple[bytes, str] | None: ...

    def swap(self, name: str, tag: str | None, digest: str) -> str | None: ...

    def names(self, prefix: str) -> Iterator[str]: ...

    def blobs(self) -> Iterator[tuple[str, int, float]]: ...

    def delete_name(self, name: str) -> bool: ...

    def delete_blob(self, digest: str) -> int | None: ...

    def now(self) -> float: ...

    def collect_blob(self, digest: str, cutoff: float) -> int | None: ...

    def settle_attic(self) -> int: ...

    def forget_markers(self, cutoff: float) -> None: ...

    def abandoned_uploads(self, cutoff: float, dry_run: bool = False) -> tuple[int, int]: ...


# scheme -> "module:class" of its backend, imported only when a URL asks for it (boto3 is
# an optional extra: `pip install soma[s3]`)
BACKENDS = {"s3": "soma.store.s3:S3Backend"}


def scheme_of(location: object) -> str | None:
    """The URL scheme of a store location ("s3"), "file" for file://, None for a path."""
    text = str(location)
    head, sep, _ = text.partition("://")
    if not sep or not head.isalnum():
        return None
    return head.lower()


def open_backend(url: str) -> Backend:
    """The backend for `url`, by its scheme; BadStore naming the URL when none is known."""
    scheme = scheme_of(url)
    where = BACKENDS.get(scheme or "")
    if where is None:
        known = ", ".join(f"{s}://" for s in ["file", *BACKENDS])
        raise BadStore(f"store {url!r}: no backend for {scheme!r} URLs (known: {known}, a path)")
    module, _, cls = where.partition(":")
    try:
        backend_class = getattr(__import__(module, fromlist=[cls]), cls)
    except ImportError as exc:
        raise BadStore(
            f"store {url!r} needs {exc.name!r}, which is not installed: "
            f"pip install 'soma[{scheme}]'"
        ) from None
    return backend_class(url)


class BackendStore(Values):
    """The store's public API on a `Backend` (see the module docs): what `Store(url)` is for
    a URL that is not a folder. Values (keep/recall) are the folder store's own code."""

    def __init__(
        self,
        backend: Backend,
        *,
        verify_existing: bool = False,
        durability: str = DURABLE,
        write_beside_hash: bool | None = None,
        shared: bool = False,
    ) -> None:
        self.backend = backend
        self.directory = backend.url  # where the store is, for messages
        self.durability = durability  # moot: a backend's write is durable when it returns
        self.verify_existing = verify_existing
        self._just_put: dict[str, float] = {}  # digest -> when this store last put it
        self._recent = _Recent()

    def __repr__(self) -> str:
        return f"Store({self.backend.url!r})"

    # --- bytes -----------------------------------------------------------------------

    def put(self, data: bytes | bytearray | memoryview) -> str:
        """Keep `data` as a blob; its sha256 hex digest (already there: nothing written)."""
        view = memoryview(data).cast("B")
        digest = hashlib.sha256(view).hexdigest()
        self._put_blob(digest, [view], len(view))
        return digest

    def _put_blob(self, digest: str, chunks: Iterable[memoryview], size: int) -> None:
        """Blob `digest` there, and known to be for the next JUST_PUT seconds."""
        self.backend.put_blob(digest, chunks, size, self._bad(digest))
        now = time.monotonic()
        if len(self._just_put) > 1024:  # a long-lived process: only the recent ones count
            self._just_put = {d: t for d, t in self._just_put.items() if now - t < JUST_PUT}
        self._just_put[digest] = now

    def _bad(self, digest: str) -> bool:
        """With `verify_existing` (what `soma repair` uses): whether blob `digest` is there
        with the wrong bytes, so that a put replaces it."""
        if not self.verify_existing:
            return False
        try:
            self._read(digest, fetch=True)  # what the bucket holds now
        except (UnknownDigest, CorruptBlob):
            return self.has(digest)
        return False

    def get(self, digest: str) -> bytes:
        """The bytes of blob `digest`, verified against it."""
        return bytes(self._read(digest))

    def _read(self, digest: str, *, fetch: bool = False) -> bytearray:
        """Blob `digest` verified: read here recently, or (`fetch`: always) fetched whole and
        hashed as it arrives; else UnknownDigest or CorruptBlob naming it."""
        recent = None if fetch else self._recent.get(check_digest(digest))
        if recent is not None:
            return bytearray(recent)  # a copy: what is kept is never handed out
        chunks = self.backend.read_blob(check_digest(digest))
        if chunks is None:
            raise UnknownDigest(f"no blob {digest} in {self}")
        h, data = hashlib.sha256(), bytearray()
        for chunk in chunks:
            h.update(chunk)
            data += chunk
        if h.hexdigest() != digest:
            raise CorruptBlob(self.blob_path(digest), digest, h.hexdigest())
        self._recent.add(digest, bytes(data))
        return data

    def has(self, digest: str) -> bool:
        """Whether blob `digest` is in the store."""
        return self.backend.has_blob(check_digest(digest))

    def blob_path(self, digest: str) -> str:
        """Where blob `digest` is (or would be), for messages."""
        return f"{self.backend.url.rstrip('/')}/blobs/{digest[:2]}/{check_digest(digest)}"

    def _open_blob(self, digest: str) -> tuple[str, BinaryIO]:
        """Blob `digest`'s bytes, not yet verified, in a local temporary file (for
        soma.health, which hashes and reads what it opens), or UnknownDigest."""
        chunks = self.backend.read_blob(check_digest(digest))
        if chunks is None:
            raise UnknownDigest(f"no blob {digest} in {self}")
        f = tempfile.TemporaryFile()
        try:
            for chunk in chunks:
                f.write(chunk)
            f.seek(0)
        except BaseException:
            f.close()
            raise
        return self.blob_path(digest), f

    def describe(self, digest: str) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
        """Each tensor's dtype and shape in tensor blob `digest`, from its header alone."""
        where, f = self._open_blob(digest)
        with f:
            return tensorfile.describe(f, where)

    # --- names -----------------------------------------------------------------------

    def bind(self, name: str, digest: str) -> None:
        """Point `name` at blob `digest`, replacing what it pointed at, atomically."""
        check_name(name)
        self._existing(digest, f"cannot bind {name!r}: ")
        self.backend.bind(name, digest)

    def claim(self, name: str, digest: str, *, at_commit: bool = False) -> bool:
        """Point `name` at `digest` if nobody has it: True if this call took it, else False.
        A backend's create-if-absent; `at_commit` claims at once (every write is durable)."""
        check_name(name)
        self._existing(digest, f"cannot claim {name!r}: ")
        return self.backend.claim(name, digest)

    @contextmanager
    def group(self) -> Iterator[None]:
        """Nothing to group: each write is durable when the backend returns."""
        yield

    def sync(self) -> None:
        """Nothing to do: each write is durable when the backend returns."""

    def forget(self, name: str) -> bool:
        """Remove `name`; True if it was there. Its blobs stay until a gc."""
        check_name(name)
        return self.backend.delete_name(name)

    def resolve(self, name: str) -> str | None:
        """The digest `name` points at, or None. One small read; never a blob."""
        check_name(name)
        data = self.backend.resolve(name)
        return None if data is None else self._digest_in(name, data)

    def _digest_in(self, name: str, data: bytes) -> str:
        """The digest a name's content holds, or CorruptName naming it."""
        try:
            return check_digest(data.decode("ascii", errors="replace").strip())
        except BadDigest:
            raise CorruptName(
                f"name {name!r} in {self} does not hold a digest: {data[:80]!r}"
            ) from None

    def resolve_tagged(self, name: str) -> tuple[str, str] | None:
        """The digest `name` points at and its tag (for `swap`), or None."""
        check_name(name)
        found = self.backend.resolve_tagged(name)
        return None if found is None else (self._digest_in(name, found[0]), found[1])

    def swap(self, name: str, tag: str | None, digest: str) -> str | None:
        """Point `name` at `digest` if its tag is still `tag` (None: if nobody has it):
        compare-and-swap, atomic. The new tag, or None when somebody changed it first."""
        check_name(name)
        self._existing(digest, f"cannot swap {name!r}: ")
        return self.backend.swap(name, tag, digest)

    def bound(self, prefix: str = "") -> list[str]:
        """The names starting with `prefix` (a plain text prefix), sorted."""
        return sorted(self.backend.names(prefix))

    def entries(self, folder: str) -> list[str]:
        """What is directly in the folder of names `folder`, names and folders alike."""
        folder = folder.rstrip("/") + "/"
        return sorted({n[len(folder) :].split("/", 1)[0] for n in self.backend.names(folder)})

    # --- tensors ---------------------------------------------------------------------

    def get_tensors(self, digest: str, *, lazy: bool = False) -> dict[str, torch.Tensor]:
        """The tensors of safetensors blob `digest`, verified, then checked before use
        (`lazy` is the same as eager here: the bytes are fetched whole)."""
        data = self._read(digest)
        empty = torch.empty(0, dtype=torch.uint8)
        base = torch.frombuffer(data, dtype=torch.uint8) if data else empty
        where = self.blob_path(digest)
        entries = tensorfile.read_header(memoryview(base.numpy()), where)
        return tensorfile.tensors_from(base, entries, where)

    def _put_plan(self, plan: tensorfile.TensorPlan) -> str:
        """Hash first, then send (a blob already there is not sent)."""
        h = hashlib.sha256()
        for chunk in plan.chunks():
            h.update(chunk)
        digest = h.hexdigest()
        self._put_blob(digest, plan.chunks(), plan.nbytes)
        return digest

    def _put_plans(self, plans: list[tensorfile.TensorPlan]) -> list[str]:
        return [self._put_plan(plan) for plan in plans]

    def _read_many(self, digests: list[str], lazy: bool) -> list[dict[str, torch.Tensor]]:
        return [self.get_tensors(d, lazy=lazy) for d in digests]

    def _existing(self, digest: str, context: str = "") -> None:
        """Refuse a digest the store does not have; one put here in the last JUST_PUT seconds
        it has without asking (new or refreshed then: younger than any gc's floor)."""
        put = self._just_put.get(digest)
        if put is not None and time.monotonic() - put < JUST_PUT:
            return
        if not self.has(digest):
            raise UnknownDigest(f"{context}no blob {digest} in {self}")
