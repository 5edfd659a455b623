"""Broken variants of the unwritable store's one-line refusal (issue 37): registered into
tests/mutants.py."""

from __future__ import annotations

import contextlib

from mutants import _replace, mutant

_UNWRITABLE = "tests/store/test_unwritable.py"


@mutant("unwritable_write_raw", caught_by=[_UNWRITABLE, "-k", "file_system_refuses"])
def _unwritable_write_raw() -> None:
    """A write the file system refuses (EROFS, EACCES) goes out as the bare OSError again: a
    traceback ending in `[Errno 30]` instead of one line naming the store."""
    import soma.store.folder.unwritable

    _replace(soma.store.folder.unwritable, "refusing", lambda directory: contextlib.nullcontext())


@mutant("unwritable_not_asked", caught_by=[_UNWRITABLE, "-k", "may_not_write_is_refused"])
def _unwritable_not_asked() -> None:
    """A run opens its store without asking whether it may write it: a read-only store is
    met at the first write, after the checks and the evaluation of the start."""
    from soma.store.folder import FolderStore

    _replace(FolderStore, "check_writable", lambda self: None)
