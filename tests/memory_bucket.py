"""A bucket's backend in memory (soma.store.backend.Backend's blobs and names), for the
rules that hold on any store with compare-and-swap, tested in one process: leases, claims
with a roster. Not a store users get: the real S3 server's tests (tests/s3_bucket.py) prove
the same rules against the server, and the backend contract suite proves the backend."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator


class MemoryBucket:
    """What a bucket's backend does with blobs and names, in memory: a name's tag is the hash
    of what it holds (an S3 ETag), so a record bound again has the tag it had before; a claim
    and a swap are atomic, as the server's conditional PUTs are (a lease renews in a thread)."""

    url = "memory://bucket"

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.names_: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def put_blob(self, digest, chunks, size, replace=False) -> None:  # noqa: ANN001
        self.blobs[digest] = b"".join(bytes(c) for c in chunks)

    def has_blob(self, digest: str) -> bool:
        return digest in self.blobs

    def read_blob(self, digest: str, limit: int | None = None) -> Iterator[bytes] | None:
        data = self.blobs.get(digest)
        return None if data is None else iter([data if limit is None else data[: limit + 1]])

    def bind(self, name: str, digest: str) -> None:
        self.names_[name] = f"{digest}\n".encode()

    def claim(self, name: str, digest: str) -> bool:
        with self._lock:
            if name in self.names_:
                return False
            self.bind(name, digest)
            return True

    def resolve(self, name: str) -> bytes | None:
        return self.names_.get(name)

    def resolve_tagged(self, name: str) -> tuple[bytes, str] | None:
        data = self.names_.get(name)
        return None if data is None else (data, hashlib.md5(data).hexdigest())

    def swap(self, name: str, tag: str | None, digest: str) -> str | None:
        """An S3 PUT with If-Match (If-None-Match where `tag` is None): the new tag, or None."""
        with self._lock:
            found = self.resolve_tagged(name)
            if (None if found is None else found[1]) != tag:
                return None
            self.bind(name, digest)
            return self.resolve_tagged(name)[1]

    def names(self, prefix: str) -> Iterator[str]:
        return iter(sorted(n for n in self.names_ if n.startswith(prefix)))

    def delete_name(self, name: str) -> bool:
        return self.names_.pop(name, None) is not None

    def now(self) -> float:
        return time.time()
