"""The folder store starts threads only where they pay (issue 34): the hash beside the reads
and writes of a large blob, blobs read side by side when one is large; a small model's
values are kept and read back in the calling thread, where a thread's start and hand-over
cost more than its bytes (they were ~5 % of a simulated round)."""

from __future__ import annotations

import threading

import pytest
import torch

from soma.store import Store


@pytest.fixture
def started(monkeypatch) -> list[str]:
    """The names of the threads started from here on."""
    names: list[str] = []
    original = threading.Thread.start

    def start(self) -> None:
        names.append(type(self).__name__)
        original(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    return names


def test_a_small_model_is_kept_and_read_back_without_a_thread(tmp_path, started) -> None:
    store = Store(tmp_path / "s")
    export = {f"node{n}": {"w": torch.randn(64, 10), "b": torch.randn(10)} for n in range(4)}
    digest = store.put_value(export)
    back = Store(tmp_path / "s").recall_digest(digest)  # another reader: from the files
    assert all(torch.equal(back[n]["w"], export[n]["w"]) for n in export)
    assert started == []


def test_large_blobs_are_still_read_side_by_side(tmp_path, monkeypatch, started) -> None:
    from soma.store.folder import pipeline

    monkeypatch.setattr(pipeline, "_cpus", lambda: 2)
    store = Store(tmp_path / "s")
    export = {f"node{n}": {"w": torch.randn(5 << 18)} for n in range(2)}  # 5 MiB each
    back = store.recall_digest(store.put_value(export))
    assert all(torch.equal(back[n]["w"], export[n]["w"]) for n in export)
    assert started, "two blobs of 5 MiB were read one after the other"
