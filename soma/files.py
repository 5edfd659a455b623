"""Writing files so that a crash never leaves a partial one under its final name.

The two primitives every atomic writer here shares (the store's blobs and names, the model
file): write all of a buffer, and make a rename in a folder durable.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


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
