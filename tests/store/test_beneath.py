"""The one-call open below a store folder (soma.store.folder.openat2): one openat2 where the kernel
has it, and the walk, folder by folder, everywhere else; the two answer alike."""

from __future__ import annotations

import os

import pytest

import soma.store.folder.openat2 as beneath
from soma.store import Store, SymlinkInStore


def _has_openat2() -> bool:
    """Whether this kernel opens with openat2 (a probe: one without it turns it off)."""
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        found = beneath.open_beneath(fd, ".", os.O_RDONLY | os.O_DIRECTORY)
    finally:
        os.close(fd)
    if found is not None:
        os.close(found)
    return found is not None


HAS_OPENAT2 = _has_openat2()


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "name").write_text("x")
    (tmp_path / "a" / "file").write_text("y")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "name").write_text("z")
    os.symlink(tmp_path / "outside", tmp_path / "a" / "link")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


@pytest.mark.skipif(not HAS_OPENAT2, reason="no openat2 in this kernel: the walk is used")
def test_openat2_opens_the_whole_way_and_refuses_a_link_anywhere_on_it(folder) -> None:
    fd = beneath.open_beneath(folder, "a/b/name", os.O_RDONLY)
    assert fd is not None and os.read(fd, 8) == b"x"
    os.close(fd)
    with pytest.raises(FileNotFoundError):
        beneath.open_beneath(folder, "a/missing/name", os.O_RDONLY)
    # a link on the way, the last part a link, a file where a folder is: the walk decides
    assert beneath.open_beneath(folder, "a/link/name", os.O_RDONLY) is None
    assert beneath.open_beneath(folder, "a/link", os.O_RDONLY | os.O_DIRECTORY) is None
    assert beneath.open_beneath(folder, "a/file/name", os.O_RDONLY) is None
    assert beneath.open_beneath(folder, "../outside/name", os.O_RDONLY) is None
    assert beneath._call is not None  # none of that turned the shortcut off


@pytest.mark.parametrize("kernel", ["openat2", "walk only"])
def test_a_store_answers_alike_with_and_without_openat2(tmp_path, monkeypatch, kernel) -> None:
    """A store's names and blobs read, and a planted link refused naming it, whichever way
    its folders are opened."""
    if kernel == "walk only":
        monkeypatch.setattr(beneath, "_call", None)
    elif not HAS_OPENAT2:
        pytest.skip("no openat2 in this kernel")
    store = Store(tmp_path / "store")
    digest = store.put(b"some bytes")
    store.bind("run/round/0/client/0", digest)
    reader = Store(tmp_path / "store")  # reads from the files (soma.store.folder.write_cache)
    assert reader.get(digest) == b"some bytes"
    assert reader.resolve("run/round/0/client/0") == digest
    assert reader.resolve("run/round/0/client/1") is None
    assert reader.resolve("run/round/1/client/0") is None
    folder = store.directory / "names" / "run" / "round"
    os.rename(folder, tmp_path / "moved")
    os.symlink(tmp_path / "moved", folder)
    with pytest.raises(SymlinkInStore, match=f"{folder} is a symbolic link"):
        reader.resolve("run/round/0/client/0")
    with pytest.raises(SymlinkInStore, match=f"{folder} is a symbolic link"):
        store.bind("run/round/0/client/1", digest)
    assert sorted(os.listdir(tmp_path / "moved" / "0" / "client")) == ["0"]
