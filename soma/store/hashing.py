"""A blob's digest: what one is (`check_digest`), and the sha256 of a stream, a file or a
tensor blob's layout, CHUNK bytes at a time, on the CPUs this process may use.

Why a module of its own: every kind of store (soma.store.folder, soma.store.backend), the
values (soma.store.values) and soma.health name and check blobs by digest the same way; the
folder store's hash-and-write machinery (soma.store.folder.pipeline) is its own.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO

from soma.store.errors import BadDigest

if TYPE_CHECKING:
    from soma.store import tensorfile

CHUNK = 16 << 20  # bytes handed to the hash and to write(2) at a time
_DIGEST = re.compile("[0-9a-f]{64}")  # checked ~40 times a contribution: no set built


def cpus() -> int:
    """The CPUs this process may run on (a Slurm task's cgroup/affinity, not the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def hash_stream(f: BinaryIO, on_chunk: Callable[[int], None] | None = None) -> str:
    """The sha256 of an open file from where it is, streamed 1 MB at a time (hashlib and
    readinto release the GIL, so files hash side by side in threads at disk speed);
    `on_chunk(bytes)` after each chunk."""
    h = hashlib.sha256()
    view = memoryview(bytearray(1 << 20))
    try:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        pass
    while got := f.readinto(view):
        h.update(view[:got])
        if on_chunk is not None:
            on_chunk(got)
    return h.hexdigest()


def hash_file(path: str | os.PathLike[str]) -> str:
    """The sha256 of the file at `path`."""
    with open(path, "rb", buffering=0) as f:
        return hash_stream(f)


def check_digest(digest: object) -> str:
    if not isinstance(digest, str) or _DIGEST.fullmatch(digest) is None:
        raise BadDigest(f"not a digest (64 lowercase hex characters): {digest!r}")
    return digest


def hash_plan(plan: tensorfile.TensorPlan) -> str:
    """The sha256 of the blob `plan` lays out, without writing it."""
    h = hashlib.sha256()
    for chunk in plan.chunks():
        h.update(chunk)
    return h.hexdigest()
