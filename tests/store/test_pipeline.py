"""The folder store's hash-and-write of large tensor blobs (soma.store.folder.pipeline): which blobs
it writes while it hashes them (predicted new), which it hashes first (kept lately), and that
a prediction, right or wrong, never changes what is kept."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from helpers import blob_files, temporaries

import soma.store
import soma.store.folder.pipeline
from soma.store import Store
from soma.store.folder import FolderStore


def speculations(monkeypatch: pytest.MonkeyPatch, cpus: int = 2) -> list[int]:
    """The large blobs written while hashed from now on (one entry each), on `cpus` CPUs and
    with nothing kept lately."""
    monkeypatch.setattr(soma.store.folder.pipeline, "_cpus", lambda: cpus)
    monkeypatch.setattr(soma.store.folder.pipeline, "_KEPT", {})
    speculated: list[int] = []
    real = FolderStore._speculate
    monkeypatch.setattr(
        FolderStore, "_speculate", lambda self, plan: speculated.append(1) or real(self, plan)
    )
    return speculated


@pytest.mark.parametrize(
    "beside, cpus, written_beside",
    [(False, 2, 0), (True, 1, 0), (True, 2, 5), (None, 2, 3)],
    ids=["hash-first", "beside-but-one-cpu", "written-beside-the-hash", "predicted"],
)
def test_an_export_is_kept_node_by_node_and_an_unchanged_node_costs_nothing(
    tmp_path: Path,
    beside: bool | None,
    cpus: int,
    written_beside: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Predicted (the default): a large blob is written while it is hashed unless a sample
    of its bytes was kept lately (the unchanged backbone, the second time)."""
    speculated = speculations(monkeypatch, cpus)
    store = Store(tmp_path / "store", write_beside_hash=beside)
    assert store._beside == (beside is not False)  # tmp_path is on a local filesystem
    g = torch.Generator().manual_seed(2)
    frozen = {"weight": torch.randn(1100, 1024, generator=g)}  # above the 4 MB threshold
    trained = {"weight": torch.randn(1100, 1024, generator=g), "bias": torch.zeros(3)}
    store.keep("run/round/0", {"export": {"backbone": frozen, "head": trained}, "size": 1})
    assert len(blob_files(store)) == 3  # two nodes and the record
    backbone = store.put_tensors(frozen)
    stamp = os.stat(store.blob_path(backbone)).st_mtime_ns
    trained["weight"] += 1
    store.keep("run/round/1", {"export": {"backbone": frozen, "head": trained}, "size": 1})
    assert len(blob_files(store)) == 5  # only the new head and a new record
    assert os.stat(store.blob_path(backbone)).st_mtime_ns == stamp
    assert temporaries(store) == []
    backbone_read = store.recall("run/round/1")["export"]["backbone"]
    assert torch.equal(frozen["weight"], backbone_read["weight"])
    assert len(speculated) == written_beside


def test_weights_that_all_moved_by_a_power_of_two_are_predicted_new(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every float in [4, 6) plus 1.0 keeps its lowest byte (only the high mantissa bits
    change): a sample of one byte per element would take the blob for one kept before, and
    hash it first then write it, twice the time of writing it while it is hashed."""
    speculated = speculations(monkeypatch)
    store = Store(tmp_path / "store")
    g = torch.Generator().manual_seed(3)
    weight = 4 + 2 * torch.rand(1100, 1024, generator=g)  # above the 4 MB threshold
    store.keep("a", {"export": {"layer": {"weight": weight}}, "size": 1})
    low = weight.view(torch.uint8).reshape(-1, 4)[:, 0].clone()
    weight += 1.0
    assert torch.equal(weight.view(torch.uint8).reshape(-1, 4)[:, 0], low), "the premise"
    store.keep("b", {"export": {"layer": {"weight": weight}}, "size": 1})
    assert len(speculated) == 2, "the moved weights were taken for weights kept before"
    assert torch.equal(store.recall("b")["export"]["layer"]["weight"], weight)
    assert temporaries(store) == []
