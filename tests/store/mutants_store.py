"""Broken variants of the store's claim and of the one atomic writer (soma.store,
soma.files); registered into tests/mutants.py's MUTANTS."""

from __future__ import annotations

import os

from mutants import _replace, mutant

# --- store (soma/store/folder/store.py) ---------------------------------------------------


@mutant(
    "claim_as_resolve_then_bind",
    caught_by=[
        "tests/store/test_store.py::test_race_eight_threads_for_one_name_exactly_one_wins_and_is_written_down",
        "tests/contract/test_backend.py::"
        "test_eight_processes_racing_for_one_name_exactly_one_wins_and_is_written_down[folder]",
    ],
)
def _claim_as_resolve_then_bind() -> None:
    """claim written out of resolve and bind: a race with a doc comment on it.

    The sleep models the real window between the two: on a shared folder it is a
    round trip for the lookup plus the bind's own temporary, write and fsync, which is
    milliseconds on NFS. Widened to 0.2 s here so that racers released together by the
    tests' start barrier all land in it on any machine, however loaded: the race tests
    then catch this mutant every time, not when the scheduler happens to oblige.
    """
    import time

    import soma.store.folder

    def claim(self, name: str, digest: str, *, at_commit: bool = False) -> bool:
        if self.resolve(name) is not None:
            return False
        time.sleep(0.2)
        self.bind(name, digest)
        return True

    _replace(soma.store.folder.FolderStore, "claim", claim)


@mutant(
    "plain_names_unchecked",
    caught_by=[
        "tests/store/test_store.py",
        "-k",
        "each_refused_name_is_refused_clearly and (hidden or long or empty)",
    ],
)
def _plain_names_unchecked() -> None:
    """The quick look at a name (printable ASCII) passes its segments unchecked: '..', an
    empty segment, a hidden one, one too long reach the filesystem."""
    import soma.store.names

    _replace(soma.store.names, "_plain", lambda name: name.isascii() and name.isprintable())


# --- one store type, torch only on a tensor (soma/store/opening.py, codecs.py) -------------


@mutant(
    "store_type_ignores_the_scheme",
    caught_by=["tests/store/test_store_type.py", "-k", "new_scheme or unknown_scheme"],
)
def _store_type_ignores_the_scheme() -> None:
    """`Store(location)` opens the folder store whatever the scheme: a bucket's URL becomes a
    folder named after it, and no backend is ever asked."""
    import soma.store.opening
    from soma.store.folder import FolderStore

    _replace(soma.store.opening, "implementation", lambda location: FolderStore)


@mutant(
    "values_import_torch_up_front",
    caught_by=["tests/store/test_store_torch_free.py", "-k", "imports_no_torch"],
)
def _values_import_torch_up_front() -> None:
    """Keeping or reading any value imports torch first, tensor or not (as every store did
    before issue 50): `soma status` and the other record readers pay ~1.6 s for it."""
    import soma.store.codecs

    real = soma.store.codecs.tensor_types

    def tensor_types() -> tuple[type, ...]:
        import torch  # noqa: F401  (the mutation: torch whether a tensor is met or not)

        return real()

    _replace(soma.store.codecs, "tensor_types", tensor_types)


# --- the one atomic writer (soma/files.py) --------------------------------------------------


@mutant(
    "write_atomic_writes_in_place",
    caught_by=["tests/store/test_files.py", "-k", "killed"],
)
def _write_atomic_writes_in_place() -> None:
    """The file is truncated and written under its final name: a writer killed half way
    leaves a partial file (or the new one where the old was wanted)."""
    import soma.files

    def in_place(path, data, *, mode=None):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666 if mode is None else mode)
        try:
            whole = isinstance(data, bytes | bytearray | memoryview)
            for chunk in [data] if whole else data:
                soma.files.write_all(fd, memoryview(chunk).cast("B"))
        finally:
            os.close(fd)

    _replace(soma.files, "write_atomic", in_place)


@mutant(
    "store_folder_looked_at_twice",
    caught_by=[
        "tests/store/test_store.py::"
        "test_eight_threads_opening_one_new_store_folder_together_each_open_it"
    ],
)
def _store_folder_looked_at_twice() -> None:
    """The check of a store's folder as it was: "a folder?", then "anything there?", two looks,
    so that a folder another opener made between them was in the way. The window widened to
    0.02 s, so that openers released together land in it on any machine."""
    import stat
    import time
    from pathlib import Path

    import soma.store.folder.safe_open as safe_open

    original = safe_open._mode

    def _mode(path: Path, follow: bool = True) -> int | None:
        if not follow:  # the store's own folders: as they are
            return original(path, follow)
        if path.is_dir():
            return stat.S_IFDIR
        time.sleep(0.02)
        there = path.exists() or path.is_symlink()
        return stat.S_IFREG if there else None  # whatever is there is in the way

    _replace(safe_open, "_mode", _mode)
