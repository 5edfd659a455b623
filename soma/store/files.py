"""Writing files so that a crash never leaves a partial one under its final name.

The primitives every atomic writer here shares (the store's blobs and names, the model
file, the workflow's receipts, the secure-aggregation secrets): make a new temporary that
nobody else has, write all of a buffer, and make a rename in a folder durable; and
`write_atomic`, the one writer of a whole file outside the store (the store keeps its
temporaries in its own `tmp/`, which gc knows, and links rather than renames blobs).

Modes are explicit: `mode=None` gives a file as any the user makes (0o666 less the umask: a
receipt is 0644 under umask 022); a secret asks for `0o600` on purpose, which no umask
widens.
"""

from __future__ import annotations

import errno
import os
import secrets
from collections.abc import Iterable
from pathlib import Path

CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


def create_new(path: str | os.PathLike[str], mode: int | None = None) -> int:
    """Open a new file `path` for writing, refused if it exists (a temporary is nobody
    else's); `mode` None: as the umask says, else `mode` (which a umask can only narrow)."""
    return os.open(path, CREATE, 0o666 if mode is None else mode)


def write_atomic(
    path: str | os.PathLike[str],
    data: bytes | bytearray | memoryview | Iterable[memoryview],
    *,
    mode: int | None = None,
) -> Path:
    """Write the file `path` whole or not at all; the path written.

    A temporary beside `path` (`.<name>.<pid>.<random>.tmp`), write, fsync, rename over
    `path`, fsync of the folder: a crash at any instant leaves the old file or the whole new
    one under `path`, never a part (at worst a temporary beside it). `data` is bytes or
    chunks of them (a model file is streamed). The folder must exist. `mode`: see the module
    docs.
    """
    path = Path(path)
    folder = path.parent
    whole = isinstance(data, bytes | bytearray | memoryview)
    temporary = folder / f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp"
    fd = create_new(temporary, mode)
    try:
        try:
            for chunk in [data] if whole else data:
                write_all(fd, memoryview(chunk).cast("B"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    fsync_folder(folder)
    return path


def write_all(fd: int, data: memoryview) -> None:
    """os.write until every byte is written (a write may take only part of it)."""
    while len(data):
        written = os.write(fd, data)
        data = data[written:]


def fsync_folder(folder: Path) -> None:
    """Make the names in `folder` (a rename, a link) durable, where the filesystem can."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as exc:  # some filesystems cannot fsync a folder; nothing to do then
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)
