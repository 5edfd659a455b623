"""A folder store written by other interpreters (tests/store_worker.py): two trainings from
one seed keep one blob, and a writer killed with SIGKILL mid-write leaves no partial file
under a final name."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import HANG, ROOT, TESTS, blob_files, same, temporaries

from soma.store import Store

torch.set_num_threads(1)

WORKER = TESTS / "store_worker.py"


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "store")


def run_worker(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        **kwargs,
    )


@pytest.fixture(scope="module")
def two_trainings(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, list[dict], Path]:
    """Two interpreters train the same net from the same seed, at the same time, and keep
    their exports under two names in one store; each also saves its export by hand."""
    folder = tmp_path_factory.mktemp("trained")
    store = Store(folder / "store")
    runs = [
        run_worker(
            "train", str(store.directory), f"cifar/round/0/client/{k}", "7", str(folder / f"{k}.st")
        )
        for k in range(2)
    ]
    reports = []
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        reports.append(json.loads(out))
    return store, reports, folder


@pytest.mark.slow
def test_a_training_run_written_by_another_interpreter_reads_back_the_same(
    two_trainings: tuple[Store, list[dict], Path],
) -> None:
    from safetensors.torch import load_file

    store, reports, folder = two_trainings
    assert store.resolve("cifar/round/0/client/0") == reports[0]["digest"]
    record = store.recall("cifar/round/0/client/0")
    assert record["size"] == 64 and sorted(record["export"]) == ["net"]
    assert sorted(record["export"]["net"]) == reports[0]["keys"]
    same(load_file(folder / "0.st"), record["export"]["net"])
    untrained = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    from soma.nodes import load

    load({"net": untrained}, record["export"])
    same(load_file(folder / "0.st"), {k: v for k, v in untrained.state_dict().items()})


def test_two_processes_writing_the_same_weights_wrote_one_blob(
    two_trainings: tuple[Store, list[dict], Path],
) -> None:
    store, reports, _ = two_trainings
    assert reports[0]["digest"] == reports[1]["digest"]
    assert store.bound() == ["cifar/round/0/client/0", "cifar/round/0/client/1"]
    assert len(blob_files(store)) == 2  # the node's tensors and the record, once each
    assert temporaries(store) == []


@pytest.mark.slow
def test_a_writer_killed_mid_write_leaves_no_partial_file_under_a_final_name(
    store: Store,
) -> None:
    writer = run_worker("write", str(store.directory))
    try:
        while writer.stdout.readline() != "writing 2\n":
            assert writer.poll() is None, writer.communicate()[1]
        deadline = time.monotonic() + HANG  # for a hang; the writer's death fails at once
        while time.monotonic() < deadline and writer.poll() is None:  # kill it mid-blob
            partial = [
                e
                for e in os.scandir(store.directory / "tmp")
                if e.name.endswith(".blob") and 0 < e.stat().st_size < 64 << 20
            ]
            if partial:
                writer.send_signal(signal.SIGKILL)
                break
        else:
            pytest.fail("never saw a blob being written")
    finally:
        writer.kill()
        writer.communicate()
    assert writer.returncode == -signal.SIGKILL
    assert temporaries(store), "the kill did not land mid-write"
    for path in blob_files(store):
        assert hashlib.sha256(path.read_bytes()).hexdigest() == path.name, f"{path} is partial"
    names = store.bound("kill/")
    assert names[:2] == ["kill/0", "kill/1"]
    for name in names:
        value = store.recall(name)
        assert value["weights"]["w"][0].item() == value["i"] == int(name.split("/")[1])
