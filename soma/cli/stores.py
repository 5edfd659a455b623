"""The store a reading command opens: only one that is already there (a mistyped path must
not leave an empty store behind)."""

from __future__ import annotations

from pathlib import Path

from soma.errors import SomaError


class NoStore(SomaError, ValueError):
    """A store path with no store at it: refused, never made (reading must leave no trace)."""


def existing_store(path: str):
    """The store at `path`, which must already be one: `Store()` makes what is missing, and
    a command that only reads must not leave an empty store behind a mistyped path."""
    from soma.store import Store, check_folder
    from soma.store.backend import scheme_of

    if scheme_of(path) not in (None, "file"):
        return Store(path)  # a bucket: opening one makes nothing
    folder = check_folder(path) if scheme_of(path) == "file" else Path(path)
    if not (folder / "names").is_dir() or not (folder / "blobs").is_dir():
        why = "" if folder.is_dir() else " (no such folder)"
        raise NoStore(f"no store at {path}{why}")
    return Store(folder)
