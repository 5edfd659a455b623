"""What a folder store keeps of the small blobs it wrote lately: their bytes, in memory.

Why: a process that hosts many clients (`soma simulate`, `clients_per_job`) reads back
what it has just written: each client's records and its export's tensor blobs, once by the
round's checks and again by the next round's start. For a small model every such read is
an open, a stat, a read and a hash of a file of a few hundred bytes, ~30 us of system calls
and Python each (issue 34: ~4 a contribution, most of the averaging's cost at 1,000
clients). The bytes this process hashed when it wrote them are the blob (content
addressing: a digest names one content, so what is kept is never stale), so a read of them
here needs no file at all. Only this process's own writes are kept, and only small ones
(`SMALL`): a large blob is read at the disk's pace, where the page cache serves it as well,
and a model's worth of memory is not held for it. Another process, and this one after the
blob has left (oldest first, past `BUDGET` bytes), reads and verifies the file as always.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

SMALL = 64 << 10  # a blob of at most this many bytes is kept when written
BUDGET = 32 << 20  # bytes kept in all, the oldest dropped first


class Written:
    """Small blobs written lately by this store, by digest; the oldest dropped first."""

    def __init__(self, budget: int = BUDGET) -> None:
        self._kept: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._budget = budget
        self._lock = threading.Lock()  # a lease's renewing thread shares the store

    def add(self, digest: str, data: bytes) -> None:
        """Keep `data`, whose sha256 the caller computed from these very bytes as `digest`."""
        if len(data) > SMALL:
            return
        with self._lock:
            if digest in self._kept:
                self._kept.move_to_end(digest)
                return
            self._kept[digest] = data
            self._bytes += len(data)
            while self._bytes > self._budget:
                _, dropped = self._kept.popitem(last=False)
                self._bytes -= len(dropped)

    def get(self, digest: str) -> bytes | None:
        """The bytes of blob `digest` if this store wrote it lately, else None."""
        return self._kept.get(digest)
