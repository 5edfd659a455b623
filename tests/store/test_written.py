"""A folder store reads the small blobs it wrote lately from memory (soma.store.folder.write_cache):
the bytes it hashed when it wrote them, never a caller's buffer changed since, never more
than its budget; a large blob, and every other reader, read and verify the file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from soma.store import CorruptBlob, Store
from soma.store.folder import write_cache as written


def flip_a_byte(path: Path, at: int) -> None:
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(data)


def test_a_small_blob_is_read_by_its_writer_as_it_was_hashed_and_by_others_from_the_file(
    tmp_path: Path,
) -> None:
    """Its writer reads the bytes it hashed (the file damaged since is not read at all), even
    when the caller's buffer changed after the put; another reader verifies the file and
    refuses it: the limit README and soma.store state."""
    store = Store(tmp_path)
    buffer = bytearray(b"the weights of round 3" * 100)
    digest = store.put(buffer)
    buffer[:3] = b"XXX"  # the caller's buffer, changed after the put
    flip_a_byte(store.blob_path(digest), 1000)
    assert store.get(digest) == b"the weights of round 3" * 100
    with pytest.raises(CorruptBlob):
        Store(tmp_path).get(digest)


def test_a_small_value_is_recalled_by_its_writer_as_kept_whatever_happens_to_its_tensors(
    tmp_path: Path,
) -> None:
    """A small tensor blob is laid out once, hashed and kept as those bytes: its writer's
    recall is the value as it was kept, with tensors of its own (writable, not the memory
    kept), though the caller's tensor and the file both changed."""
    store = Store(tmp_path)
    w = torch.arange(16.0)
    store.keep("v", {"w": w})
    w.add_(1.0)  # the caller's tensor, changed after the keep
    blob = max((tmp_path / "blobs").glob("*/*"), key=lambda p: p.stat().st_size)  # the tensors
    flip_a_byte(blob, blob.stat().st_size - 3)
    first = store.recall("v")["w"]
    assert torch.equal(first, torch.arange(16.0))
    first.mul_(0.0)  # a reader's own tensors: the bytes kept stay as hashed
    assert torch.equal(store.recall("v", lazy=True)["w"], torch.arange(16.0))
    with pytest.raises(CorruptBlob):
        Store(tmp_path).recall("v")


def test_a_large_blob_is_read_from_its_file_by_its_writer_too(tmp_path: Path) -> None:
    store = Store(tmp_path)
    digest = store.put(b"x" * (written.SMALL + 1))
    flip_a_byte(store.blob_path(digest), 10)
    with pytest.raises(CorruptBlob):
        store.get(digest)


def test_what_is_kept_is_bounded_the_oldest_dropped_first() -> None:
    kept = written.Written(budget=3 * 1000)
    for i in range(5):
        kept.add(f"{i:064x}", bytes([i]) * 1000)
    assert [kept.get(f"{i:064x}") is not None for i in range(5)] == [False, False, True, True, True]
    kept.add(f"{2:064x}", bytes([2]) * 1000)  # written again: the newest now
    kept.add(f"{5:064x}", bytes([5]) * 1000)
    assert [kept.get(f"{i:064x}") is not None for i in range(2, 6)] == [True, False, True, True]
    kept.add(f"{6:064x}", b"y" * (written.SMALL + 1))  # too large to keep: nothing dropped
    assert kept.get(f"{6:064x}") is None and kept.get(f"{4:064x}") is not None
