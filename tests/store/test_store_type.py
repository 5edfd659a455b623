"""One store type (issue 50, item 3): whatever the place, `Store(...)` gives a `Store`, with one
API; the implementation is picked by the location's scheme in one place (soma.store.opening),
and a backend for a new scheme is one `BACKENDS` entry. The contract suite (tests/contract)
runs every guarantee against each kind; this file holds the type itself."""

from __future__ import annotations

from pathlib import Path

import pytest

import soma.store.backend
from soma.store import Store
from soma.store.backend import BackendStore
from soma.store.errors import BadStore
from soma.store.folder import FolderStore


class ListedBackend:
    """A third backend, as small as one can be: blobs and names in dicts (reads and binds)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.blobs: dict[str, bytes] = {}
        self.named: dict[str, bytes] = {}

    def put_blob(self, digest, chunks, size, replace=False) -> None:
        self.blobs[digest] = b"".join(bytes(c) for c in chunks)

    def has_blob(self, digest: str) -> bool:
        return digest in self.blobs

    def read_blob(self, digest: str, limit: int | None = None):
        return None if digest not in self.blobs else iter([self.blobs[digest]])

    def bind(self, name: str, digest: str) -> None:
        self.named[name] = digest.encode()

    def resolve(self, name: str) -> bytes | None:
        return self.named.get(name)

    def names(self, prefix: str):
        return (name for name in self.named if name.startswith(prefix))


def test_a_path_and_a_file_url_open_the_folder_store_which_is_a_store(tmp_path: Path) -> None:
    for location in [tmp_path / "a", str(tmp_path / "a"), f"file://{tmp_path}/a"]:
        store = Store(location)
        assert isinstance(store, Store) and isinstance(store, FolderStore)
        assert (
            store.directory == tmp_path / "a" and repr(store) == f"Store({str(store.directory)!r})"
        )
    assert isinstance(FolderStore(tmp_path / "b"), Store)  # made by hand: the same type


def test_options_reach_the_implementation_once(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", durability="scratch", verify_existing=True)
    assert store.durability == "scratch" and store.verify_existing


def test_a_new_scheme_is_one_backends_entry_and_its_store_is_a_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(soma.store.backend.BACKENDS, "listed", f"{__name__}:ListedBackend")
    store = Store("listed://here/prefix")
    assert isinstance(store, Store) and isinstance(store, BackendStore)
    assert isinstance(store.backend, ListedBackend) and store.backend.url == "listed://here/prefix"
    digest = store.keep("a/b", {"round": 1, "clients": [0, 2]})
    assert store.resolve("a/b") == digest and store.recall("a/b") == {"round": 1, "clients": [0, 2]}
    assert store.bound("a/") == ["a/b"]
    assert isinstance(BackendStore(ListedBackend("listed://made")), Store)  # a backend made first


def test_an_unknown_scheme_is_refused_naming_the_url_and_the_known_ones() -> None:
    with pytest.raises(BadStore, match=r"'ftp://host/x'.*no backend for 'ftp'.*s3://"):
        Store("ftp://host/x")


def test_a_subclass_of_store_wraps_what_its_place_opens(tmp_path: Path) -> None:
    """`class X(Store)` (a test's store that waits inside `resolve`, say) works on whatever
    its location opens, as it did when Store was the folder store itself."""

    class Counting(Store):
        resolved = 0

        def resolve(self, name: str) -> str | None:
            self.resolved += 1
            return super().resolve(name)

    store = Counting(tmp_path / "s")
    assert isinstance(store, Counting) and isinstance(store, FolderStore)
    digest = store.keep("n", [1, 2])
    assert store.resolve("n") == digest and store.resolved == 1
    assert type(Counting(tmp_path / "t")) is type(store)  # one class per pair, made once
