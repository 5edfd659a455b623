"""The store's folders, opened without ever following a symbolic link (one job: safety).

Why a module of its own: every path the folder store opens below its own folders goes
through here, so the rule "the store makes no link and follows none" (soma.store, "Health")
is kept in one place, and a test or a mutant can change the open flags in one place
(`_FOLDER`, `_NO_FOLLOW`: every caller looks them up here at call time). `check_folder` says
where a store can be before anything is made.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

from soma.store.errors import BadStore, SymlinkInStore
from soma.store.folder.openat2 import open_beneath
from soma.store.names import MAX_STORE_PATH_BYTES


def check_folder(directory: str | os.PathLike[str]) -> Path:
    """The absolute path of `directory` if a store can be there, made or not; else `BadStore`.

    Refused before anything is made: a path longer than `MAX_STORE_PATH_BYTES` (with a name
    of up to `MAX_NAME_BYTES` under it, a file's path would pass PATH_MAX), and anything but
    a folder where the store or one of its folders must be (a mistyped `--store` naming a
    file would otherwise fail half way with a bare OSError).
    """
    text = os.fspath(directory)
    if isinstance(text, str) and text.lower().startswith("file://"):  # file:///abs/path
        text = unquote(urlsplit(text).path)
    path = Path(os.path.abspath(text))
    size = len(os.fsencode(path))
    if size > MAX_STORE_PATH_BYTES:
        raise BadStore(
            f"store folder {str(path)[:60]!r}... is {size} bytes long; a store's path is at "
            f"most {MAX_STORE_PATH_BYTES}, so that the names under it stay under PATH_MAX"
        )
    culprit = _in_the_way(path)
    if culprit is not None:
        what = (
            "a symbolic link, which the store never follows (put the folder itself there)"
            if culprit.is_symlink()
            else "a file"
            if culprit.is_file()
            else "something other than a folder"
        )
        if culprit == path:
            raise BadStore(f"store folder {path} is {what}, not a folder")
        raise BadStore(f"store folder {path} cannot be a store: {culprit} is {what}")
    return path


def _in_the_way(path: Path) -> Path | None:
    """The first thing that is there and is not a folder, where the store needs one: its own
    folders (a symbolic link is not one), itself, or the nearest one above it that is there."""
    for folder in (path / "blobs", path / "names", path / "tmp", path / "attic"):
        mode = _mode(folder, follow=False)
        if mode is not None and not stat.S_ISDIR(mode):
            return folder
    for folder in (path, *path.parents):
        mode = _mode(folder)
        if mode is not None:
            return None if stat.S_ISDIR(mode) else folder
    return None


def _mode(path: Path, follow: bool = True) -> int | None:
    """What is at `path`, None where nothing is: with `follow`, a link followed (a link to a
    folder is a folder) and a dangling link as itself; without, a link as itself. One look
    each, never "not a folder" and then "there": clients started together make a new store's
    folders at the same moment, and a folder made by another between two looks was refused as
    "something other than a folder"."""
    # lstat after stat: a dangling link, or a folder made since the stat
    for look in (os.stat, os.lstat) if follow else (os.lstat,):
        try:
            return look(path).st_mode
        except OSError as error:
            if error.errno not in _NOTHING_THERE:
                raise
    return None


# What pathlib's is_dir and exists take for "nothing there" (anything else is raised)
_NOTHING_THERE = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EBADF)


# The store never follows a symbolic link it did not make (it makes none): a blob, a name
# file and a folder of names are opened with O_NOFOLLOW, folder by folder from one the store
# opened itself, so a link planted anywhere on the way is refused (`SymlinkInStore`), never
# read through, marked through, or listed through. A file is opened O_NONBLOCK: a FIFO
# planted where a file was is refused by what it is, not waited on.
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NO_FOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _a_link(error: OSError, name: str | os.PathLike[str], dir_fd: int | None) -> bool:
    """Whether a no-follow open of `name` in `dir_fd` failed because it is a symbolic link
    (ELOOP for a file; ENOTDIR for a folder, which a link to one is not)."""
    if error.errno == errno.ELOOP:
        return True
    if error.errno != errno.ENOTDIR:
        return False
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def symlink_refused(path: str | os.PathLike[str], what: str) -> SymlinkInStore:
    """The refusal of the symbolic link at `path` (a `what`: blob, name file, folder...)."""
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return SymlinkInStore(
        f"{what} {path} is a symbolic link{target}: the store makes none and follows none; "
        "remove the link (what it points at is not touched), or put the real file or folder "
        "in its place (`soma verify` lists every link in the store)"
    )


def _open_in(folder: Path, segments: Sequence[str], what: str) -> int:
    """`folder` (the store's own, checked when the store was opened) and then each of
    `segments` below it opened as a folder, none followed if it is a link: its fd (the
    caller closes it). FileNotFoundError or NotADirectoryError when one is not a folder.
    The way below `folder` is one openat2 where the kernel has it (soma.store.folder.openat2)."""
    if segments:
        inner = _beneath(folder, segments, _FOLDER)
        if inner is not None:
            return inner
    fd = _open_store_folder(folder)
    for i, segment in enumerate(segments):
        try:
            inner = os.open(segment, _FOLDER, dir_fd=fd)
        except OSError as error:
            link = _a_link(error, segment, fd)
            os.close(fd)
            if link:
                raise symlink_refused(folder.joinpath(*list(segments)[: i + 1]), what) from None
            raise
        os.close(fd)
        fd = inner
    return fd


def _beneath(folder: Path, segments: Sequence[str], flags: int) -> int | None:
    """`folder/segments...` opened in one openat2 from the store's own folder `folder`
    (soma.store.folder.openat2): its fd, FileNotFoundError, or None to walk instead."""
    fd = _open_store_folder(folder)
    try:
        return open_beneath(fd, "/".join(segments), flags)
    finally:
        os.close(fd)


def _open_store_folder(folder: Path) -> int:
    """The store's own folder `folder` opened, refused if it was made a link since."""
    try:
        return os.open(folder, _FOLDER)
    except OSError as error:  # made a link after the store was opened
        if _a_link(error, folder, None):
            raise symlink_refused(folder, "store folder") from None
        raise


def _is_folder(name: str, dir_fd: int) -> bool:
    """Whether `name` in `dir_fd` is a folder (never following a link)."""
    try:
        return stat.S_ISDIR(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def _open_file(folder: Path, segments: list[str], what: str) -> BinaryIO:
    """The file `folder/segments...` opened for reading (unbuffered), no part of the way
    below `folder` followed if it is a link (`SymlinkInStore`, naming it). One openat2
    from `folder` where the kernel has it (soma.store.folder.openat2); else, or when it fails for
    anything but a missing part, folder by folder, which names what is wrong."""
    found = _beneath(folder, segments, os.O_RDONLY | _NO_FOLLOW)
    if found is not None:
        try:
            return open(found, "rb", buffering=0)
        except BaseException:  # a folder where the file is: refused, and the fd not kept
            os.close(found)
            raise
    fd = _open_in(folder, segments[:-1], f"folder of {what}s")
    try:
        return _open_at(fd, folder, segments, what)
    finally:
        os.close(fd)


def _open_at(fd: int, folder: Path, segments: list[str], what: str) -> BinaryIO:
    """The file `segments[-1]` in the folder `fd` (opened by `_open_in(folder, segments[:-1],
    ...)`) opened for reading (unbuffered), never through a link (`SymlinkInStore`, naming
    `folder/segments...`): so that the files of one folder are opened from one opening of it."""
    try:
        return open(
            segments[-1],
            "rb",
            buffering=0,
            opener=lambda name, flags: os.open(name, flags | _NO_FOLLOW, dir_fd=fd),
        )
    except OSError as error:
        if _a_link(error, segments[-1], fd):
            raise symlink_refused(folder.joinpath(*segments), what) from None
        raise
