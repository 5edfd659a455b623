"""A folder store's name files read: one name, or many from one opening of their folder.

Why a module of its own: reading a name file is one job with its own refusals (a link on
the way, `SymlinkInStore`; a file that holds no digest, `CorruptName`) and its own NFS
recipe (a handle gone stale: looked up again), shared by the folder store's `resolve` and
`resolve_many` (soma.store.folder), where a round's ~1,000 client records are read from one
opening of their folder instead of one for each folder on each name's way.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from pathlib import Path

from soma.store.errors import BadDigest, CorruptName
from soma.store.folder.safe_open import _open_at, _open_file, _open_in
from soma.store.hashing import check_digest

_GONE = (FileNotFoundError, NotADirectoryError, IsADirectoryError)  # no such name: None


def read_name(names: Path, name: str) -> str | None:
    """The digest the name file of `name` under the folder `names` holds, or None."""
    for attempt in range(3):
        try:
            with _open_file(names, name.split("/"), "name file") as f:
                data = f.read(128)
            break
        except _GONE:
            return None
        except OSError as exc:  # a file replaced on another NFS client: look it up again
            if exc.errno != errno.ESTALE or attempt == 2:
                raise
    return _digest_in(names, name, data)


def read_names(names: Path, wanted: Sequence[str]) -> list[str | None]:
    """`read_name` of each of `wanted`, in order, each folder opened once for its names."""
    found: list[str | None] = [None] * len(wanted)
    folders: dict[tuple[str, ...], list[int]] = {}
    for i, name in enumerate(wanted):
        folders.setdefault(tuple(name.split("/")[:-1]), []).append(i)
    for folder, indices in folders.items():
        try:
            fd = _open_in(names, folder, "folder of name files")
        except (FileNotFoundError, NotADirectoryError):
            continue  # none of them bound
        try:
            for i in indices:
                found[i] = _read_at(fd, names, wanted[i])
        finally:
            os.close(fd)
    return found


def _read_at(fd: int, names: Path, name: str) -> str | None:
    """`read_name`, the file opened in its folder's `fd`."""
    try:
        with _open_at(fd, names, name.split("/"), "name file") as f:
            data = f.read(128)
    except _GONE:
        return None
    except OSError as exc:
        if exc.errno != errno.ESTALE:
            raise
        return read_name(names, name)  # a file replaced on another NFS client: looked up again
    return _digest_in(names, name, data)


def _digest_in(names: Path, name: str, data: bytes) -> str:
    """The digest the name file of `name` holds (`data`), or CorruptName naming the file
    (its path made only then: a Path costs ~4 us, ~1,000 names a round)."""
    text = data.decode("ascii", errors="replace").strip()
    try:
        return check_digest(text)
    except BadDigest:
        path = names / name
        raise CorruptName(f"name file {path} does not hold a digest: {data[:80]!r}") from None
