"""A folder store's blobs opened from fan-out folders a thread holds open while it reads many.

Why a module of its own: a blob is opened folder by folder from the store's own, no link
followed (soma.store.folder.safe_open): `blobs/`, then `blobs/<ab>/`, then the file, three opens
(two where the kernel has openat2, soma.store.folder.openat2). A round's checks read ~4 blobs a
contribution, ~4,000 at 1,000 clients, from the same 256 fan-out folders; inside `holding()`
a thread opens each folder once and every blob in it from that opening. A folder held was
opened with no link followed, and a file in it is opened likewise, so nothing is ever read
through a link; a link planted as a fan-out folder meanwhile is met (refused,
`SymlinkInStore`) at the next read outside. The fds are the thread's own and closed when it
leaves, so no other thread can meet one closed under it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from soma.store.folder.safe_open import _open_at, _open_file, _open_in


class HeldFolders:
    """The fan-out folders of a store's `blobs` folder each thread holds open (`holding`)."""

    def __init__(self, blobs: Path) -> None:
        self._blobs = blobs
        self._local = threading.local()

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Inside, this thread's blob reads open each fan-out folder once (nested: the
        outermost holds them)."""
        if getattr(self._local, "fds", None) is not None:
            yield
            return
        self._local.fds = {}
        try:
            yield
        finally:
            fds, self._local.fds = self._local.fds, None
            for fd in fds.values():
                os.close(fd)

    def open(self, digest: str) -> BinaryIO:
        """Blob `digest` opened for reading as `_open_file` opens it, from its folder held
        open if this thread is `holding`."""
        where = [digest[:2], digest]
        fds: dict[str, int] | None = getattr(self._local, "fds", None)
        if fds is None:
            return _open_file(self._blobs, where, "blob")
        fd = fds.get(where[0])
        if fd is not None:
            try:
                return _open_at(fd, self._blobs, where, "blob")
            except FileNotFoundError:  # maybe not there, maybe the folder was replaced:
                os.close(fds.pop(where[0]))  # looked for from the store's folder again
        fd = fds[where[0]] = _open_in(self._blobs, where[:1], "folder of blobs")
        return _open_at(fd, self._blobs, where, "blob")
