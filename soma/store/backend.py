"""Where a store keeps its blobs and names other than a folder: the backend protocol.

What a backend owes and what BackendStore builds on it, with the guarantees, is
docs/explanation/backend.md ("A store elsewhere: the backend protocol").
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, BinaryIO, Protocol

from soma.files import DURABLE
from soma.lazy import OnUse
from soma.store.errors import (
    BadBlob,
    BadDigest,
    BadStore,
    CorruptBlob,
    CorruptName,
    OversizedBlob,
    UnknownDigest,
)
from soma.store.hashing import check_digest
from soma.store.keeping import BucketKeeping
from soma.store.names import check_name
from soma.store.opening import Store
from soma.store.opening import scheme_of as scheme_of  # where it always was
from soma.store.read_cache import Recent, Shared

if TYPE_CHECKING:
    import torch

    from soma.store import tensorfile
else:  # torch only where a blob holds tensors (soma.lazy.OnUse)
    torch = OnUse("torch", globals())
    tensorfile = OnUse("soma.store.tensorfile", globals())

# Seconds after a put during which its blob is taken to be there without asking (a bind or
# claim of it makes no HEAD): far below gc's floor (soma.health), which only removes blobs
# older than 120 s by the server's clock.
JUST_PUT = 30.0


# A tensor blob this large read from a sized backend (a bucket) is received into memory the
# cache and its readers share (`Shared`: one fd each, so not for small blobs).
SHARED_FROM = 8 << 20


class Backend(Protocol):
    """The primitives a store needs from where it keeps things (see the module docs)."""

    url: str

    def put_blob(
        self, digest: str, chunks: Iterable[memoryview], size: int, replace: bool = False
    ) -> None: ...

    def has_blob(self, digest: str) -> bool: ...

    def read_blob(self, digest: str, limit: int | None = None) -> Iterator[bytes] | None: ...

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
BACKENDS = {"s3": "soma.store.s3.backend:S3Backend"}


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


class _Body:
    """A blob's bytes as a backend hands them out: hashed as they are taken, counted, and
    never pulled from the backend further than asked (one chunk at most past it).

    A backend whose read says its `size` before any byte arrives and can `fill` a buffer
    (soma.store.s3.reads) is read straight into the caller's one buffer, hashed in order
    as its pieces arrive (`into`); any other, chunk by chunk."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._chunk: bytes | bytearray | memoryview = b""  # the one `_held` is the rest of
        self._held = memoryview(b"")
        self.hash = hashlib.sha256()
        self.taken = 0
        fill = getattr(chunks, "fill", None)
        size = getattr(chunks, "size", None)
        self._fill = fill if isinstance(size, int) else None
        self.size: int | None = size if self._fill is not None else None  # at most this many

    def _hold(self) -> bool:
        """A chunk not yet taken is held; False at the end of the body."""
        while not self._held:
            chunk = next(self._chunks, None)
            if chunk is None:
                return False
            self._chunk, self._held = chunk, memoryview(chunk).cast("B")
        return True

    def into(self, view: memoryview) -> int:
        """Fill `view` with the next bytes, hashing them; how many (fewer: the body ended)."""
        if self._fill is not None:  # straight into `view`, hashed in order as it arrives
            hashed = 0
            for there in self._fill(view):
                self.hash.update(view[hashed:there])
                hashed = there
            self.taken += hashed
            return hashed
        done = 0
        while done < len(view) and self._hold():
            n = min(len(view) - done, len(self._held))
            view[done : done + n] = self._held[:n]
            self.hash.update(self._held[:n])
            self._held = self._held[n:]
            done += n
        self.taken += done
        return done

    def take(self, n: int) -> bytearray:
        """The next `n` bytes, hashed (fewer: the body ended)."""
        buffer = bytearray(n)
        got = self.into(memoryview(buffer))
        del buffer[got:]
        return buffer

    def whole(self, bound: int | None) -> bytes | None:
        """The rest, hashed, as one bytes object; None when it is more than `bound` bytes
        in all (said by its size before any arrives, else as soon as they do). A sized body
        is received into the bytes object itself (a BytesIO's own buffer, which `getvalue`
        hands over without a copy); chunks are joined (one copy)."""
        if self.size is None:
            parts = self.parts(bound)
            return None if parts is None else b"".join(parts)
        if bound is not None and self.size > bound:
            return None
        made = io.BytesIO(bytes(self.size - self.taken))  # calloc: pages touched by the read
        with made.getbuffer() as view:
            got = self.into(view)
        data = made.getvalue()
        return data if got == len(data) else data[:got]

    def parts(self, bound: int | None) -> list[bytes] | None:
        """The rest as it came, hashed; None as soon as more than `bound` bytes would
        have been taken in all (the rest is not pulled)."""
        parts = []
        while self._hold():
            if bound is not None and self.taken + len(self._held) > bound:
                return None
            whole = type(self._chunk) is bytes and len(self._chunk) == len(self._held)
            part = self._chunk if whole else bytes(self._held)  # no copy of a whole chunk
            self.hash.update(part)
            self.taken += len(part)
            self._held = memoryview(b"")
            parts.append(part)
        return parts

    def skim(self, bound: int | None) -> bool:
        """Hash the rest without keeping it; False as soon as more than `bound` bytes would
        have been taken in all."""
        if self.size is not None:
            if bound is not None and self.size > bound:
                return False
            scratch = memoryview(bytearray(min(1 << 20, self.size)))
            while self.taken < self.size and self.into(scratch):
                pass
            return True
        while self._hold():
            if bound is not None and self.taken + len(self._held) > bound:
                return False
            self.hash.update(self._held)
            self.taken += len(self._held)
            self._held = memoryview(b"")
        return True

    def ended(self) -> bool:
        if self.size is not None:
            return self.taken >= self.size
        return not self._hold()

    def close(self) -> None:
        """Tell the backend no more is wanted (a generator's close, a response's)."""
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()


class BackendStore(Store, BucketKeeping):
    """The store's public API on a `Backend` (see the module docs): what `Store(url)` is for
    a URL that is not a folder, opening the backend its scheme names (`open_backend`), or on
    a backend already made. Values (keep/recall) are the folder store's own code."""

    IMPLEMENTATION = True

    def __init__(
        self,
        backend: Backend | str,
        *,
        verify_existing: bool = False,
        durability: str = DURABLE,
        write_beside_hash: bool | None = None,
        shared: bool = False,
    ) -> None:
        self.backend = open_backend(backend) if isinstance(backend, str) else backend
        self.directory = self.backend.url  # where the store is, for messages
        self.durability = durability  # moot: a backend's write is durable when it returns
        self.verify_existing = verify_existing
        self._just_put: dict[str, tuple[float, int]] = {}  # digest -> when put, its size
        self._recent = Recent()

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
        self.backend.put_blob(digest, chunks, size, self._bad(digest, size))
        now = time.monotonic()
        if len(self._just_put) > 1024:  # a long-lived process: only the recent ones count
            self._just_put = {
                d: (t, n) for d, (t, n) in self._just_put.items() if now - t < JUST_PUT
            }
        self._just_put[digest] = (now, size)

    def _bad(self, digest: str, size: int) -> bool:
        """With `verify_existing` (what `soma repair` uses): whether blob `digest`, which is
        `size` bytes, is there with the wrong bytes, so that a put replaces it."""
        if not self.verify_existing:
            return False
        try:
            self._read(digest, fetch=True, size=size)  # what the bucket holds now
        except (UnknownDigest, CorruptBlob):
            return self.has(digest)
        return False

    def get(self, digest: str) -> bytes:
        """The bytes of blob `digest`, verified against it."""
        return self._read(digest)

    def _get_at_most(self, digest: str, limit: int) -> bytes:
        """The bytes of blob `digest`, verified; refused as soon as more than `limit` arrive."""
        return self._read(digest, limit=limit)

    def _chunks(self, digest: str, limit: int | None) -> _Body:
        """Blob `digest`'s bytes as the backend hands them out (`limit` passed down when
        there is one), or UnknownDigest."""
        check_digest(digest)
        if limit is None:
            chunks = self.backend.read_blob(digest)
        else:
            chunks = self.backend.read_blob(digest, limit=limit)
        if chunks is None:
            raise UnknownDigest(f"no blob {digest} in {self}")
        return _Body(chunks)

    def _size_put(self, digest: str) -> int | None:
        """The size of blob `digest` if this store put it in this process (exact: its bytes
        hash to the digest), else None."""
        found = self._just_put.get(digest)
        return None if found is None else found[1]

    def _verified(self, digest: str, body: _Body) -> None:
        """CorruptBlob naming the blob unless what was taken of `body` hashes to `digest`."""
        actual = body.hash.hexdigest()
        if actual != digest:
            raise CorruptBlob(self.blob_path(digest), digest, actual)

    def _read(
        self, digest: str, *, fetch: bool = False, size: int | None = None, limit: int | None = None
    ) -> bytes:
        """Blob `digest` verified: read here recently, or (`fetch`: always) fetched, hashed as
        it arrives and refused (`OversizedBlob`) as soon as it passes its known `size` (this
        process put it, or the caller knows it) or the caller's `limit`; else UnknownDigest
        or CorruptBlob naming it. Bytes, which are never changed, so the kept copy is shared."""
        recent = None if fetch else self._recent.get(check_digest(digest))
        if recent is not None:
            return recent.bytes() if isinstance(recent, Shared) else recent
        exact = size if size is not None else self._size_put(digest)
        bound = exact if exact is not None else limit
        body = self._chunks(digest, bound)
        try:
            data = body.whole(bound)
        finally:
            body.close()
        if data is None:
            assert bound is not None
            why = (
                f"it is {bound} bytes as this process put it"
                if exact is not None
                else f"no more is allowed here (a record is at most {bound})"
            )
            raise OversizedBlob(str(self.blob_path(digest)), digest, bound, why)
        self._verified(digest, body)
        self._recent.add(digest, data)  # the same bytes: never changed, so shared
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
        """Each tensor's dtype and shape in tensor blob `digest`, from its header alone
        (nothing verified: whatever reads the data verifies it): only the header's bytes
        are taken, so the data's length is checked by that read, not here."""
        where = self.blob_path(digest)
        body = self._chunks(digest, None)
        try:
            length = tensorfile.header_length(body.take(8), where)
            raw = body.take(length)
        finally:
            body.close()
        return tensorfile.describe_header(length, raw, where)

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

    def reading(self) -> contextlib.AbstractContextManager[None]:
        """What the folder store's `reading` is for: nothing here (no folders to hold)."""
        return contextlib.nullcontext()

    def resolve_many(self, names: Sequence[str]) -> list[str | None]:
        """What `resolve` says of each of `names`, in order (one read a name)."""
        return [self.resolve(name) for name in names]

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
        (`lazy`: the bytes are fetched whole all the same, but a large blob's land on a
        temporary file that is mapped, as a folder's blob is: see `_receive_tensor_file`)."""
        base = self._read_tensor_file(digest, lazy=lazy)
        where = self.blob_path(digest)
        entries = tensorfile.read_header(memoryview(base.numpy()), where)
        return tensorfile.tensors_from(base, entries, where)

    def _read_tensor_file(self, digest: str, *, lazy: bool = False) -> torch.Tensor:
        """Tensor blob `digest` verified, as one uint8 tensor of its own (the tensors made of
        it share it): read here recently (mapped copy-on-write, or copied), or received into
        one buffer of the size known for it (this process put it, its header declares it, or
        the backend says it first) and refused as soon as more arrives (see "Bounded reads"
        in the module docs)."""
        recent = self._recent.get(check_digest(digest))
        if isinstance(recent, Shared):
            return recent.tensor()
        if recent is not None:
            base = torch.empty(len(recent), dtype=torch.uint8)
            memoryview(base.numpy())[:] = recent
            return base
        exact = self._size_put(digest)
        body = self._chunks(digest, exact)
        try:
            base, shared = self._receive_tensor_file(digest, body, exact, lazy=lazy)
        finally:
            body.close()
        if shared is not None:
            self._recent.add(digest, shared)
            return base
        view = memoryview(base.numpy())
        if self._recent.wants(digest, len(view)):
            self._recent.add(digest, bytes(view))
        return base

    def _receive_tensor_file(
        self, digest: str, body: _Body, exact: int | None, *, lazy: bool = False
    ) -> tuple[torch.Tensor, Shared | None]:
        """The bytes of tensor blob `digest` from `body`, verified (see `_read_tensor_file`),
        and, when the recent-blob cache is to keep them, the `Shared` memory they were
        received into (the tensor is a copy-on-write mapping of it). A `lazy` read of a
        blob of SHARED_FROM bytes or more that the cache does not keep is received into a
        temporary file (`Shared.spooled`) and mapped the same way: its pages are the
        file's, not the process's memory, so an averaging folding inputs one at a time
        holds its mean and little else on a bucket as on a folder."""
        where = str(self.blob_path(digest))
        head, raw, why = bytearray(), bytearray(), f"it is {exact} bytes as this process put it"
        if exact is None:
            head = body.take(8)
            try:
                length = tensorfile.header_length(head, where)
                raw = body.take(length)
                exact = tensorfile.declared_size(length, raw, where)
                why = f"its safetensors header (not yet verified) declares {exact}"
            except BadBlob as refusal:  # no length stated: hash the rest, keep none of it
                body.skim(None)
                self._verified(digest, body)
                raise refusal from None
        if body.size is not None and body.size > exact:  # said before a byte of it arrives
            raise OversizedBlob(where, digest, exact, why)
        shared, spooled = None, False
        if body.size is not None and exact >= SHARED_FROM:
            if self._recent.wants(digest, exact):
                shared = Shared.make(exact)
            elif lazy:
                shared = Shared.spooled(exact)
                spooled = shared is not None
        base = _buffer(exact) if shared is None else None
        if base is None and shared is None:  # cannot be held here: the blob's own, or a lie?
            if not body.skim(exact):
                raise OversizedBlob(where, digest, exact, why)
            self._verified(digest, body)
            if body.taken < exact:  # verified: the header lies
                raise BadBlob(
                    f"blob {where} is not a valid safetensors file: its header declares "
                    f"{exact} bytes but it has {body.taken} (offsets past the end)"
                )
            raise MemoryError(f"blob {where} is {exact} bytes, more than this process can hold")
        view = memoryview(shared.writing if shared is not None else base.numpy())
        taken = len(head) + len(raw)
        view[: len(head)] = head
        view[len(head) : taken] = raw
        got = taken + body.into(view[taken:])
        if got == exact and not body.ended():
            raise OversizedBlob(where, digest, exact, why)
        self._verified(digest, body)
        if shared is None:
            return base[:got], None
        view.release()
        if spooled:  # nobody else's: nothing to seal, and not kept
            shared.written()
            return shared.tensor()[:got], None
        if got == exact and shared.seal():
            return shared.tensor(), shared
        return shared.tensor()[:got], None  # short (its header lies) or still written to

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
        if put is not None and time.monotonic() - put[0] < JUST_PUT:
            return
        if not self.has(digest):
            raise UnknownDigest(f"{context}no blob {digest} in {self}")


def _buffer(size: int) -> torch.Tensor | None:
    """An uninitialised uint8 tensor of `size` bytes, or None when it cannot be allocated."""
    try:
        return torch.empty(size, dtype=torch.uint8)
    except (RuntimeError, MemoryError, OverflowError, TypeError, ValueError):
        return None
