"""A folder store this process may not write, said in one line naming the store (read-only
mounts, permissions): at open and at any write, never retried (soma.store.folder)."""

from __future__ import annotations

import errno
import os
import pwd
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from soma.store.errors import BadStore, StoreError, UnwritableStore

# What a file system says to a process that may not write there (EROFS, EPERM; EACCES for a
# read too): no retry changes it, and it is the user's to fix (the mount, the permissions),
# so it is said in one line naming the store (`refusal`), whenever it is met.
REFUSED_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def refusal(directory: Path, error: OSError) -> UnwritableStore:
    """The refusal of store `directory`, which this process may not write (`error`, one of
    REFUSED_ERRNOS, or a folder it cannot make): the store, the path refused, the way out."""
    where = error.filename if error.filename not in (None, "") else directory
    if error.errno == errno.EROFS:
        at = "" if Path(where) == directory else f" (writing {where})"
        return UnwritableStore(
            f"store {directory} is on a read-only file system{at}: mount it read-write, or "
            "give a store folder on a writable one"
        )
    return UnwritableStore(
        f"store {directory}: {_user()} may not write {where} ({error.strerror or error}): "
        "give that user write permission there (see `ls -ld` of it and of each folder above "
        "it), or give a store folder it can write"
    )


def _user() -> str:
    """This process's user, as a refusal names it."""
    uid = os.geteuid()
    try:
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


@contextmanager
def refusing(directory: Path) -> Iterator[None]:
    """Inside: an OSError of REFUSED_ERRNOS raised as `refusal` (one line, naming the
    store), whichever request met it; any other error goes through untouched."""
    try:
        yield
    except OSError as error:
        if isinstance(error, StoreError) or error.errno not in REFUSED_ERRNOS:
            raise
        raise refusal(directory, error) from error


def read_only(folder: Path) -> bool:
    """Whether `folder` is on a file system mounted read-only (statvfs's ST_RDONLY)."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def make_folders(directory: Path, folders: tuple[Path, ...]) -> None:
    """Make store `directory`'s folders, a refusal said in one line naming the store."""
    for folder in folders:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # check_folder found nothing in the way
            if error.errno in REFUSED_ERRNOS:
                raise refusal(directory, error) from None
            why = error.strerror or error
            raise BadStore(f"store folder {folder} cannot be made: {why}") from None


def check_folders(directory: Path, folders: tuple[Path, ...]) -> None:
    """`UnwritableStore` unless this process may write every one of `folders`."""
    for folder in folders:
        if not os.access(folder, os.W_OK | os.X_OK):
            code = errno.EROFS if read_only(folder) else errno.EACCES
            raise refusal(directory, OSError(code, os.strerror(code), str(folder)))
