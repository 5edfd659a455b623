"""What a store on a bucket keeps of the blobs it read lately: verified bytes in memory, so
that a round's averaging, which reads each export twice (checked before its claim, averaged
after), downloads each once (on a folder the page cache serves the second read).

A large tensor blob is kept as `Shared` memory (a sealed memfd) that each reader maps
copy-on-write: received once, copied never, and whatever a reader does to its tensors the
bytes kept stay the verified ones. Content addressing makes what is kept never stale.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING

from soma.lazy import OnUse

if TYPE_CHECKING:
    import torch
else:  # torch only where a blob holds tensors (soma.lazy.OnUse)
    torch = OnUse("torch", globals())


# A bucket's blobs read in the last RECENT_FOR seconds, up to RECENT_BYTES in all, are kept in
# memory, verified (content-addressed: never stale). A round's averaging reads each client's
# export twice, checked before the claim and averaged after it: on a folder the page cache
# serves the second read, on a bucket it would be a second download. What is kept is what
# was received (bytes, or a large tensor blob's `_Shared` memory), never a copy of it.
RECENT_BYTES = 256 << 20
RECENT_FOR = 600.0


class Recent:
    """Blobs read recently, oldest first; when full it admits nothing new until the oldest
    expire, so that a pass over more than fits (the averaging's second) still finds the
    first ones (dropping the oldest would leave that pass nothing)."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, tuple[float, bytes | Shared]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # a lease's renewing thread shares the store

    def get(self, digest: str) -> bytes | Shared | None:
        with self._lock:
            self._expire()
            found = self._kept.get(digest)
            return None if found is None else found[1]

    def wants(self, digest: str, size: int) -> bool:
        """Whether `add` would keep a blob of `size` bytes (before making its copy)."""
        with self._lock:
            self._expire()
            return digest not in self._kept and self._bytes + size <= RECENT_BYTES

    def add(self, digest: str, data: bytes | Shared) -> None:
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


class Shared:
    """A verified blob's bytes in memory of their own (a memfd, sealed against any write once
    filled), which the recent-blob cache keeps: each reader gets a private copy-on-write
    mapping of it, so a bucket's blob is received once and copied never (issue 34: the
    cache's copy of a 100 MB read was one of its four passes), and whatever a reader does to
    its tensors, the bytes kept stay the verified ones.

    Or (`spooled`) a lazy read's bytes on an unlinked temporary file, which nobody keeps:
    file-backed pages, as a folder's blob mapped lazily is, which the kernel may write out
    and drop where memfd pages are memory (issue 34: an averaging of 1 GB exports on a
    bucket held each input in memory)."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.size = fd, size
        weakref.finalize(self, os.close, fd)
        self.writing: mmap.mmap | None = mmap.mmap(fd, size)  # until sealed

    @classmethod
    def make(cls, size: int) -> Shared | None:
        """`size` bytes to fill through `writing`, or None where there is no memfd (or the
        memory cannot be had): the caller then reads into memory of its own, as before."""
        try:
            fd = os.memfd_create("soma-blob", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        except (AttributeError, OSError):  # pragma: no cover - not Linux
            return None
        try:
            os.ftruncate(fd, size)
            return cls(fd, size)
        except (OSError, ValueError, OverflowError):
            os.close(fd)
            return None

    @classmethod
    def spooled(cls, size: int) -> Shared | None:
        """`size` bytes to fill through `writing`, on an unlinked file of the temporary folder
        (TMPDIR, else /tmp: on a cluster, the node's scratch), its blocks reserved first (a
        full disk refuses here, not as a SIGBUS mid-read); None where that cannot be had (no
        O_TMPFILE there, no room): the caller then reads into memory of its own, as before."""
        try:
            fd = os.open(tempfile.gettempdir(), os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
        except (AttributeError, OSError):  # not Linux, or a filesystem without O_TMPFILE
            return None
        try:
            os.posix_fallocate(fd, 0, size)
            return cls(fd, size)
        except (OSError, ValueError, OverflowError):
            os.close(fd)
            return None

    def __len__(self) -> int:
        return self.size

    def written(self) -> None:
        """Filled: the writable mapping is let go (a view of it still held somewhere keeps
        it until that view goes)."""
        if self.writing is not None:
            with contextlib.suppress(BufferError):
                self.writing.close()
                self.writing = None

    def seal(self) -> bool:
        """No more writes, by anybody (F_SEAL_WRITE); False (not to be kept) when a view of
        `writing` is still held somewhere."""
        try:
            assert self.writing is not None
            self.writing.close()
            seals = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, seals)
        except (BufferError, OSError, AttributeError):
            return False
        self.writing = None
        return True

    def tensor(self) -> torch.Tensor:
        """The bytes as a uint8 tensor of the caller's own (copy-on-write: its writes are its)."""
        return torch.frombuffer(
            mmap.mmap(self.fd, self.size, access=mmap.ACCESS_COPY), dtype=torch.uint8
        )

    def bytes(self) -> bytes:
        """The bytes, copied (a `get` of a blob read as tensors here)."""
        return os.pread(self.fd, self.size, 0)
