"""Broken variants of the store's self-defence (issue 20): registered into tests/mutants.py."""

from __future__ import annotations

import os

from mutants import _replace, mutant

_GUARD = "tests/store/test_store_guard.py"


@mutant("gc_without_floor", caught_by=[_GUARD, "-k", "floor"])
def _gc_without_floor() -> None:
    """The library's gc takes any min_age again: `gc(store, min_age=0)` eats live data."""
    import soma.health
    import soma.health.collecting

    soma.health.MIN_AGE = soma.health.collecting.MIN_AGE = 0.0


@mutant("store_follows_symlinks", caught_by=[_GUARD, "-k", "blob_that_is_a_symlink"])
def _store_follows_symlinks() -> None:
    """Blobs, names and folders of names are opened following symbolic links: a read goes
    through a planted link and marks the file outside the store it finds there."""
    import soma.store.folder.safe_open

    soma.store.folder.safe_open._NO_FOLLOW = os.O_NONBLOCK | os.O_CLOEXEC
    soma.store.folder.safe_open._FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


@mutant("health_ignores_symlinks", caught_by=[_GUARD, "-k", "names_of_a_run_behind"])
def _health_ignores_symlinks() -> None:
    """verify and gc look for no symbolic link: `names/<run>` a link hides the run's names,
    verify says clean and gc collects the live run's blobs."""
    import soma.health.reach

    _replace(soma.health.reach, "symlinks", lambda store: [])


@mutant("held_blob_folder_follows_links", caught_by=[_GUARD, "-k", "reading_many_blobs"])
def _held_blob_folder_follows_links() -> None:
    """A fan-out folder held for many reads is opened by its path, following a link planted
    there: the blobs of a planted folder are read from outside the store."""
    import soma.store.folder.held_folders

    def _open_in(folder, segments, what):
        return os.open(folder.joinpath(*segments), os.O_RDONLY | os.O_DIRECTORY)

    _replace(soma.store.folder.held_folders, "_open_in", _open_in)


@mutant("beneath_follows_links", caught_by=[_GUARD, "-k", "fan_out_folder_or_a_name_file"])
def _beneath_follows_links() -> None:
    """The one-call open of a name or a blob (soma.store.folder.openat2) walks through links on
    its way: a fan-out folder planted as a link is read through, a name file behind one too."""
    import soma.store.folder.safe_open

    def open_beneath(folder_fd, path, flags):
        return os.open(path, flags & ~os.O_NOFOLLOW, dir_fd=folder_fd)

    _replace(soma.store.folder.safe_open, "open_beneath", open_beneath)
