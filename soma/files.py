"""Writing files so that a crash never leaves a partial one under its final name.

The primitives every atomic writer here shares (the store's blobs and names, the model
file, the workflow's receipts, the secure-aggregation secrets): make a new temporary that
nobody else has, write all of a buffer, and make a rename in a folder durable; and
`write_atomic`, the one writer of a whole file outside the store (the store keeps its
temporaries in its own `tmp/`, which gc knows, and links rather than renames blobs).

Modes are explicit: `mode=None` gives a file as any the user makes (0o666 less the umask: a
receipt is 0644 under umask 022); a secret asks for `0o600` on purpose, which no umask
widens.

What each fsync protects (issue 23). A process killed at any instant never needs one: its
writes are in the kernel's page cache, and the temporary-then-link/rename recipe alone keeps
a partial file from ever being under a final name. An fsync protects against the machine
going down (power, kernel panic) before the cache reached the disk. Before, a store wrote
about 24 a contribution (4 clients in one process, 2 rounds of the control task, averages
included; `benchmarks/fsyncs.py` counts them), one for each of:

1. a blob's bytes, before its link into `blobs/` (one per tensor blob and per record);
2. the blob's fan-out folder after the link (the link itself), one per blob;
3. `blobs/` after a fan-out folder was made (once per folder, but 256 of them);
4. a name's temporary (its digest), before its rename or link onto the name;
5. the name's folder after the rename (the name itself);
6. each folder of names made on the way to a name (the first client, the first round).

Only what a name could point at after a crash matters: a name must never be durable before
the blobs it reaches are (1, 2, 3 before 5), nor before its own temporary's bytes (4 before
5). Nothing else needs an order. So the store now writes blobs without an fsync and makes
everything written since the last time durable together, in one pass (`make_durable`), just
before a name is bound or claimed; and a group commit (`Store.group`, what a process hosting
several clients uses for a round's contributions) writes every client's blobs and name
temporaries, makes them all durable in one pass, then binds every name, then makes the
names durable in a second pass. A pass is one `syncfs(2)` of the store's filesystem where
that is exact (Linux >= 5.8 reports writeback errors through it; a filesystem in
`SYNCFS_FILESYSTEMS`) and the pass has more than `SYNCFS_ABOVE` files and folders, else an
fsync of each file and then of each folder once. What is left:
at most two passes per name bound or claimed alone, two per group (see README "What a crash
can cost").

A blob is linked into `blobs/` before its bytes are durable, so that this process and others
read it at once: a machine crash in between can leave a short blob under its digest, which no
name reaches; every read refuses it (`CorruptBlob`) and the next put of those bytes finds the
wrong size and replaces it.

`durability="scratch"` (DURABILITIES) makes no pass at all: for simulations on a scratch
folder, where a machine crash means rerunning the round. It is refused on a store that says
it is shared: one holding the file `SHARED_MARKER` (`Store(..., shared=True)` writes it).
"""

from __future__ import annotations

import ctypes
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


def fsync_folder(folder: str | os.PathLike[str]) -> None:
    """Make the names in `folder` (a rename, a link) durable, where the filesystem can."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as exc:  # some filesystems cannot fsync a folder; nothing to do then
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


DURABLE, SCRATCH = "durable", "scratch"
DURABILITIES = (DURABLE, SCRATCH)
# A store holding this file says it is shared (by users, runs, or a cluster's jobs): a crash
# there costs others their work, so scratch durability is refused on it.
SHARED_MARKER = "shared"
# Filesystems whose syncfs(2) makes every file and folder of this machine's on them durable
# (local journaling or copy-on-write ones, NFS, Lustre, GPFS); on anything else (FUSE...),
# each file and folder is fsynced instead.
SYNCFS_FILESYSTEMS = frozenset(
    {"ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "nfs", "nfs4", "lustre", "gpfs"}
)


def _libc_syncfs():
    """libc's syncfs(2) on Linux >= 5.8 (from which it reports writeback errors), or None."""
    try:
        major, minor = (int(x) for x in os.uname().release.split(".")[:2])
        if os.uname().sysname != "Linux" or (major, minor) < (5, 8):
            return None
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError, ValueError):  # pragma: no cover - not Linux
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_SYNCFS = _libc_syncfs()


def can_syncfs(filesystem: str) -> bool:
    """Whether one syncfs(2) is an exact pass on a filesystem of this type (see the module)."""
    return _SYNCFS is not None and filesystem in SYNCFS_FILESYSTEMS


def syncfs(folder: Path) -> None:
    """Make every file and folder of this machine's on `folder`'s filesystem durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _SYNCFS(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), str(folder))
    finally:
        os.close(fd)


def fsync_file(path: str | os.PathLike[str]) -> None:
    """Make the bytes of the file at `path` durable (one gone since is nobody's concern)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# A pass of more files and folders than this is one syncfs where it is exact: a syncfs also
# writes back what other processes left dirty on the filesystem, so a few fsyncs (a name, a
# value of one blob) stay fsyncs.
SYNCFS_ABOVE = 1


def make_durable(
    files: Iterable[str | os.PathLike[str]],
    folders: Iterable[str | os.PathLike[str]],
    whole: Path | None = None,
) -> None:
    """One pass that makes `files` (their bytes) and `folders` (their entries) durable: a
    syncfs of `whole`'s filesystem when given and there are more than SYNCFS_ABOVE things to
    do, else an fsync of each file, then of each folder once."""
    files, folders = list(dict.fromkeys(files)), list(dict.fromkeys(folders))
    if whole is not None and len(files) + len(folders) > SYNCFS_ABOVE:
        syncfs(whole)
        return
    for path in files:
        fsync_file(path)
    for folder in folders:
        fsync_folder(folder)
