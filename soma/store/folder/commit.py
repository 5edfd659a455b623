"""When what the folder store wrote becomes durable: its passes, and the group commit.

Why a module of its own: the order of fsync passes against the names placed is the
store's crash guarantee (soma.files lists what each fsync protects): a name is placed
only between two passes, and a group commit (`group`) places many between the same two.
`_check_durability` refuses, before anything is made, a durability that is not one. The
folder store (soma.store.folder.FolderStore) takes `GroupCommit` as a mixin; it provides
`durability`, `_whole`, `_unsynced`, `_unsynced_lock`, `_queued`, `_grouping`,
`_rename_onto`, `_link_onto` and `resolve`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from soma.files import DURABILITIES, DURABLE, SCRATCH, SHARED_MARKER, make_durable
from soma.store.errors import BadStore, NameConflict, StoreError


class GroupCommit:
    """What was written since the last pass, the passes, and the group commit."""

    @contextmanager
    def group(self) -> Iterator[None]:
        """A group commit: binds in this thread wait for the end of the block, where every
        blob written and every name's temporary are made durable in one pass, then every
        name is bound, then the names are made durable in a second pass (soma.files).
        What a process hosting several clients does with a round's contributions: a crash
        never leaves a name reaching a blob that is not durable. The block's binds are
        committed even when it raises (what was kept is whole). Nested: the outer commits."""
        if self._queued is not None:
            yield
            return
        self._queued, self._grouping = [], threading.get_ident()
        try:
            yield
        finally:
            queued, self._queued, self._grouping = self._queued, None, None
            self._commit(queued)

    def sync(self) -> None:
        """Make everything this store wrote durable now (nothing to do in scratch mode): for
        a digest about to be handed over outside the store (binds and claims do it)."""
        self._sync()

    def _unsynced_file(self, path: str | os.PathLike[str]) -> None:
        if self.durability == DURABLE:
            with self._unsynced_lock:
                self._unsynced[0].append(os.fspath(path))

    def _unsynced_folder(self, folder: str | os.PathLike[str]) -> None:
        if self.durability == DURABLE:
            with self._unsynced_lock:
                self._unsynced[1].append(os.fspath(folder))

    def _sync(self) -> None:
        """One pass over what was written since the last (soma.files.make_durable)."""
        with self._unsynced_lock:
            files, folders = self._unsynced
            self._unsynced = ([], [])
        if files or folders:
            make_durable(files, folders, self._whole)

    def _commit(self, queued: list[tuple[str, str]]) -> None:
        """A group's end: one pass (blobs and temporaries), the names, a second pass. A name
        refused (NameConflict) is raised once the others are bound."""
        self._sync()
        failed: BaseException | None = None
        for name, tmp, claimed in queued:
            try:
                if claimed is None:
                    self._rename_onto(name, tmp)
                elif not self._link_onto(name, tmp) and self.resolve(name) != claimed:
                    raise NameConflict(
                        f"{name!r} was claimed by another writer while this one's group was "
                        f"being written: it holds {self.resolve(name)}, not {claimed}"
                    )
            except StoreError as error:
                failed = failed or error
        self._sync()
        if failed is not None:
            raise failed


def _check_durability(folder: Path, durability: object, shared: bool) -> None:
    """Refuse, before anything is made, a durability that is not one, and scratch on a store
    that says it is shared (its `SHARED_MARKER` file, or `shared=True`)."""
    if durability not in DURABILITIES:
        raise BadStore(
            f"durability {durability!r} is not one of {', '.join(DURABILITIES)} (store {folder})"
        )
    marker = folder / SHARED_MARKER
    if durability == SCRATCH and (shared or marker.exists()):
        said = "shared=True" if shared else f"its marker {marker}"
        raise BadStore(
            f"store {folder} says it is shared ({said}): durability 'scratch' (no fsync, a "
            "crash loses the round) is refused on it; use 'durable', or a store of your own"
        )
