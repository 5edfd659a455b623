"""The store a process that runs a round opens (`open_store`): with the run's durability,
its refusals naming the setting, and a folder it may not write refused at once; and that
refusal asked of a config before anything runs (`unwritable_folder`, the Snakefile's parse).
Pure of torch until a store is opened (soma.store loads its folder store on first use)."""

from __future__ import annotations

import errno
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from soma.errors import SomaError
from soma.files import DURABLE
from soma.store.errors import BadStore, UnwritableStore
from soma.store.folder.unwritable import REFUSED_ERRNOS, check_folders, refusal

if TYPE_CHECKING:
    from soma.store import Store


def open_store(
    path: str | Path, durability: str, named: str, refused: Callable[[str], SomaError]
) -> Store:
    """The store at `path` with `durability`, for a process that runs a round: its refusal
    (scratch on a store that says it is shared) as `refused`, naming the setting (`named`);
    a folder this process may not write refused now, in one line (`UnwritableStore`), not
    at its first write."""
    from soma.store import Store

    try:
        store = Store(path, durability=durability)
    except BadStore as error:
        if durability == DURABLE:
            raise
        raise refused(f"{named}: {error}") from None
    store.check_writable()  # a folder's folders now; a bucket's credentials at its first request
    return store


def unwritable_folder(path: str | Path) -> str | None:
    """Why this process could not make or write the folder store at `path`, in one line, or
    None (a bucket, `s3://...`, is left to its first request). Asked by a dry run too, so that
    `snakemake -n --config store=/read/only` is refused at parse time rather than by the
    `start` job a minute later; nothing is left behind: a store that exists is asked
    (`os.access`, the mount's read-only flag), one that does not is probed in the nearest
    folder above it that exists, by making and removing a folder there (what making the
    store will do; root may write where `os.access` would say no)."""
    if "://" in str(path):
        return None
    store = Path(path).absolute()
    there = store
    while not there.exists() and there != there.parent:
        there = there.parent
    if not there.is_dir():
        return f"store {store}: {there} is not a folder; give a store folder"
    try:
        if there == store:
            check_folders(store, (store,))
        else:
            probe = Path(tempfile.mkdtemp(prefix=".soma-probe-", dir=there))
            probe.rmdir()
    except UnwritableStore as error:
        return str(error)
    except OSError as error:
        if error.errno in REFUSED_ERRNOS:
            # a read-only mount is the store's (as its open says it); a permission, the folder's
            named = store if error.errno == errno.EROFS else there
            return str(refusal(store, OSError(error.errno, error.strerror, str(named))))
        return (
            f"store {store} cannot be made in {there} ({error.strerror or error}): "
            "give a store folder on a file system this process can write"
        )
    return None
