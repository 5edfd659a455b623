"""A blob's hash and its write: the pipeline from tensors to a sealed file, and its hash.

Why a module of its own: hashing and writing are the store's hot path (see "Large values"
in soma.store), with their own machinery (a hashing thread, the writeback hint, the
prediction of which blobs are new) that has nothing to do with names or folders. The folder
store (soma.store.folder) takes `Pipeline` for its put-many, write-beside-hash and verified
reads; what every store shares of hashing (`check_digest`, `hash_stream`, ...) is
soma.store.hashing. What the folder store provides to `Pipeline` is listed on the class.
"""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import os
import queue
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from soma.files import write_all
from soma.lazy import OnUse
from soma.store.folder import write_cache
from soma.store.hashing import CHUNK, hash_plan
from soma.store.hashing import cpus as _cpus

if TYPE_CHECKING:
    import torch

    from soma.store import tensorfile
else:  # torch only where a blob holds tensors (soma.lazy.OnUse)
    torch = OnUse("torch", globals())
    tensorfile = OnUse("soma.store.tensorfile", globals())

# With write_beside_hash, a tensor blob at least this large is written while it is hashed.
_SPECULATE_FROM = 4 << 20
# A lazy read maps a blob from this size on; a smaller one is read (a small model's blob
# took 350-550 us to map and verify, 220 us to read and verify: the averaging reads two per
# contribution), which holds no more memory than the mapped pages it would have touched.
MAP_FROM = 1 << 20


# Filesystems where a temporary that is truncated and removed before it is flushed never
# costs a disk write; on anything else (NFS, Lustre, GPFS, CIFS, FUSE...) dirty pages may
# reach the server early, so write_beside_hash does not apply there.
_LOCAL_FILESYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "tmpfs", "ramfs", "overlay"}
)


def _filesystem(path: Path) -> str:
    """The type of the filesystem `path` is on (Linux /proc/self/mountinfo; '' if unknown)."""
    try:
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split() for line in f]
    except OSError:  # pragma: no cover - not Linux
        return ""
    target, best, kind = os.path.realpath(path), -1, ""
    for fields in mounts:
        point = fields[4].encode().decode("unicode_escape")  # \040 is a space in mountinfo
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) > best and "-" in fields:
            best, kind = len(point), fields[fields.index("-") + 1]
    return kind


# What `_existing_blob` finds where a blob is about to be written.
_SOUND, _MISSING, _BAD = "sound", "missing", "bad"


class _Beside(threading.Thread):
    """Runs `fn` on each chunk fed to it, in its own thread, in order.

    hashlib and os.write/readinto release the GIL on large buffers, so the chunk's other
    use in the feeding thread runs at the same time. After an error it keeps draining
    (so the feeder never blocks) and `finish` raises it; `stop()` skips what is queued.
    """

    _END = object()

    def __init__(self, fn: Callable[[memoryview], object], depth: int = 8) -> None:
        super().__init__(daemon=True)
        self._fn = fn
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stopped = threading.Event()
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        while True:
            item = self._queue.get()
            if item is self._END:
                return
            if self.error is None and not self._stopped.is_set():
                try:
                    self._fn(item)
                except BaseException as exc:  # noqa: BLE001 - re-raised by finish()
                    self.error = exc

    def feed(self, chunk: memoryview) -> None:
        self._queue.put(chunk)

    def stop(self) -> None:
        self._stopped.set()

    def finish(self) -> None:
        self._queue.put(self._END)
        self.join()
        if self.error is not None:
            raise self.error


def _read_small(f: BinaryIO, size: int, h: hashlib._Hash) -> torch.Tensor:
    """A small file (`size` bytes, under MAP_FROM) as one uint8 tensor, read whole and
    hashed here into `h`: no thread, no chunks (a small model's blobs, ~4 a contribution,
    each a few microseconds of Python more on the chunked way)."""
    buffer = bytearray(size)
    start = 0
    with memoryview(buffer) as view:
        while start < size:
            got = f.readinto(view[start:])
            if not got:
                break
            start += got
        h.update(view[:start])
    base = torch.frombuffer(buffer, dtype=torch.uint8)
    return base if start == size else base[:start]


class _Inline:
    """`_Beside`'s interface, running `fn` in the feeding thread: for what is too small to
    overlap."""

    def __init__(self, fn: Callable[[memoryview], object]) -> None:
        self.feed = fn

    def finish(self) -> None:
        pass


# What this process kept lately, by a sample of its bytes: a prediction only (whether a
# large blob is likely new, so worth writing while it is hashed), never trusted for a
# digest. A blob is known by its header and ~256 bytes spread over each tensor (training
# changes nearly every weight; a node left as it was samples the same); at most
# _KEPT_AT_MOST of them, the oldest forgotten first.
_KEPT: dict[bytes, str] = {}
_KEPT_AT_MOST = 4096
_KEPT_LOCK = threading.Lock()


def _fingerprint(plan: tensorfile.TensorPlan) -> bytes | None:
    h = hashlib.blake2b(plan.header, digest_size=16)
    for t in plan.ordered:
        if t.device.type != "cpu" or not t.is_contiguous() or t.is_conj() or t.is_neg():
            return None  # sampling it would cost a copy: not predicted, written beside
        if t.numel():
            data = memoryview(t.detach().reshape(-1).view(torch.uint8).numpy())
            # an odd stride samples every byte of an element: an even one may see only each
            # float's lowest byte, which adding 1.0 to weights between 4 and 6 leaves as it was
            h.update(data[:: max(1, len(data) // 256) | 1].tobytes())
    return h.digest()


def _remember(seen: bytes | None, digest: str) -> str:
    if seen is not None:
        with _KEPT_LOCK:
            _KEPT.pop(seen, None)
            _KEPT[seen] = digest
            while len(_KEPT) > _KEPT_AT_MOST:
                _KEPT.pop(next(iter(_KEPT)))
    return digest


def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's sync_file_range(2) (Linux), or None where there is none."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_SYNC_FILE_RANGE = _sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2  # start writeback of the range's dirty pages; do not wait
# A new blob's pages are sent to the disk every this many bytes, while the next ones are
# still being copied, instead of all at the closing fsync (measured here: a 100 MB blob's
# write+fsync ~95 -> ~70 ms).
_WRITEBACK_EVERY = 4 << 20


class _Streamed:
    """Writes chunks to `fd` in order, starting the writeback of what is written as it goes
    (a hint only: durability is still the fsync's, and errors are still its own), so that
    the closing fsync waits for the last few megabytes, not for the whole blob. Measured
    here, a 1 GB blob written while it is hashed, medians of 7: 0.58 -> 1.33 and 0.69 ->
    1.14 GB/s in two runs, 0.91 -> 0.53 in a third (this VM's disk varies 3x by the minute)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.written, self.started = fd, 0, 0

    def __call__(self, chunk: memoryview) -> None:
        write_all(self.fd, chunk)
        self.written += len(chunk)
        if self.written - self.started >= _WRITEBACK_EVERY and _SYNC_FILE_RANGE is not None:
            _SYNC_FILE_RANGE(self.fd, self.started, self.written - self.started,
                             _SYNC_FILE_RANGE_WRITE)  # fmt: skip
            self.started = self.written


def _write_chunks(fd: int, chunks: Iterable[memoryview]) -> None:
    """Write `chunks` to `fd` in order, their writeback started as they go (`_Streamed`)."""
    write = _Streamed(fd)
    for chunk in chunks:
        write(chunk)


class Pipeline:
    """The folder store's hash-and-write of planned tensor blobs and its verified reads.

    A mixin of soma.store.folder.FolderStore, which provides `_existing_blob`, `_temp`,
    `_abandon`, `_install`, `_verify`, `get_tensors`, `blob_path`, `_written`, `_beside` and
    `_always_beside`.
    """

    def _put_plans(self, plans: list[tensorfile.TensorPlan]) -> list[str]:
        """`_put_plan` of each of `plans`, in order. With a second CPU, each blob is still
        hashed first and written only if new, but the next blobs are hashed (in a thread)
        while this one is written: the hash and write of one blob never overlap, those of
        two do; not for small blobs, which take less to hash than a thread to start."""
        small = sum(plan.nbytes for plan in plans) < _SPECULATE_FROM
        if len(plans) < 2 or small or self._beside or _cpus() < 2:
            return [self._put_plan(plan) for plan in plans]  # beside: each overlaps itself
        with ThreadPoolExecutor(1) as pool:
            hashes = [pool.submit(hash_plan, plan) for plan in plans]
            try:
                return [
                    self._write_new(plan, h.result()) for plan, h in zip(plans, hashes, strict=True)
                ]
            finally:
                for h in hashes:
                    h.cancel()

    def _write_new(self, plan: tensorfile.TensorPlan, digest: str) -> str:
        """Write the blob of `plan`, whose sha256 is `digest`, unless it is already there."""
        there = self._existing_blob(digest, plan.nbytes)
        if there == _SOUND:
            return digest
        fd, tmp = self._temp("blob")
        try:
            _write_chunks(fd, plan.chunks())
        except BaseException:
            self._abandon(fd, tmp)
            raise
        self._install(fd, tmp, digest, replace=there == _BAD)
        return digest

    def _put_plan(self, plan: tensorfile.TensorPlan) -> str:
        """Write a planned safetensors blob: hash and write side by side (large, and likely
        new), or hash first and write only if new (small, or these tensors kept before). A
        small one is laid out as one bytes, hashed and written by `put`, which keeps it for
        reads here (soma.store.folder.write_cache)."""
        if plan.nbytes <= write_cache.SMALL:
            return self.put(b"".join(plan.chunks()))
        if plan.nbytes < _SPECULATE_FROM or not self._beside or _cpus() < 2:
            return self._write_new(plan, hash_plan(plan))
        seen = _fingerprint(plan)
        if not self._always_beside and seen is not None and seen in _KEPT:
            return _remember(seen, self._write_new(plan, hash_plan(plan)))
        return _remember(seen, self._speculate(plan))

    def _speculate(self, plan: tensorfile.TensorPlan) -> str:
        """Write the blob of `plan` while it is hashed; dropped unflushed if it was there."""
        fd, tmp = self._temp("blob")
        writer = _Beside(_Streamed(fd))
        h = hashlib.sha256()
        try:
            for chunk in plan.chunks():
                writer.feed(chunk)
                h.update(chunk)
        except BaseException:
            writer.stop()
            try:
                writer.finish()
            finally:
                self._abandon(fd, tmp)
            raise
        digest = h.hexdigest()
        existing = self._existing_blob(digest, plan.nbytes)
        there = existing == _SOUND
        if there:
            writer.stop()  # what is still queued is never written
        try:
            writer.finish()
        except BaseException:
            self._abandon(fd, tmp)
            if there:
                return digest
            raise
        if there:
            self._abandon(fd, tmp)
        else:
            self._install(fd, tmp, digest, replace=existing == _BAD)
        return digest

    def _read_verified(self, path: str, f: BinaryIO, digest: str, lazy: bool) -> torch.Tensor:
        """The whole blob as one uint8 tensor, verified: a view of a copy-on-write mmap of
        the file (lazy, from MAP_FROM bytes on), or memory of its own read while the hash runs
        beside (eager; and lazy below MAP_FROM, where mapping costs more than reading: there
        read whole and hashed after, `_read_small`)."""
        h = hashlib.sha256()
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            base = torch.empty(0, dtype=torch.uint8)
        elif lazy and size >= MAP_FROM:
            mapped = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)
            mapped.madvise(mmap.MADV_SEQUENTIAL)
            with memoryview(mapped) as view:
                for start in range(0, size, CHUNK):
                    h.update(view[start : start + CHUNK])
            mapped.madvise(mmap.MADV_NORMAL)
            base = torch.frombuffer(mapped, dtype=torch.uint8)
        elif size < MAP_FROM:
            base = _read_small(f, size, h)
        else:
            base = torch.empty(size, dtype=torch.uint8)  # not zeroed: read fills it
            view = memoryview(base.numpy())
            # the hash beside the reads overlaps them from the second chunk on: one chunk
            # or less is hashed here, sparing a thread's start and hand-over per blob
            hasher = _Beside(h.update) if size > CHUNK else _Inline(h.update)
            start = 0
            try:
                while start < size:
                    got = f.readinto(view[start : start + CHUNK])
                    if not got:
                        break
                    hasher.feed(view[start : start + got])
                    start += got
            finally:
                hasher.finish()
            base = base[:start]
        self._verify(path, digest, h.hexdigest(), f.fileno())
        return base

    def _read_many(self, digests: list[str], lazy: bool) -> list[dict[str, torch.Tensor]]:
        """Several tensor blobs, verified side by side (sha256 is one core per blob) when
        one is large enough to pay for the threads; small ones one after another here (a
        pool's threads cost more to start than a small model's blobs to read)."""
        small = len(digests) < 2 or max(map(self._blob_size, digests)) < _SPECULATE_FROM
        workers = 1 if small else min(len(digests), _cpus(), 4)
        if workers <= 1:
            return [self.get_tensors(d, lazy=lazy) for d in digests]
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(lambda d: self.get_tensors(d, lazy=lazy), digests))

    def _blob_size(self, digest: str) -> int:
        """The size of blob `digest` on disk; 0 when it cannot be told (its read says why)."""
        kept = self._written.get(digest)
        if kept is not None:
            return len(kept)
        try:
            return os.stat(self._where(digest)).st_size
        except (OSError, ValueError):
            return 0
