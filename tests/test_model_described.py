"""A model file says what the model is and what its inputs must be made of (soma.model:
`described`, the task's optional `preprocessing()`), so that it is used outside soma as it was
trained: examples/use_model.py, with torch and safetensors alone, scores the digits test set
exactly as the run's own evaluation did, where raw pixels score far less."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import soma
from soma.model import described, export_average, read_metadata
from soma.round.records import read_average
from soma.store import Store
from soma.tasks import load_task
from soma.tasks.digits import _read_digits, split_rows

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "use_model.py"

torch.set_num_threads(1)


def use_model():
    """examples/use_model.py as a module."""
    spec = importlib.util.spec_from_file_location("use_model", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory) -> tuple[Path, float]:
    """The workflow's default run (the digits task, 10 clients, 10 rounds: 0.95 test accuracy)
    kept in a store; the model file `soma export` writes of it, and the test accuracy the
    run's evaluation gave it."""
    folder = tmp_path_factory.mktemp("digits")
    done = soma.simulate(
        "soma.tasks.digits", clients=10, rounds=10, store=folder / "store", run="d"
    )
    path = folder / "model.safetensors"
    export_average(Store(folder / "store"), "d", path)
    return path, done.evaluation["accuracy"]


def test_the_model_file_says_its_task_nodes_and_preprocessing(digits_run) -> None:
    path, _ = digits_run
    metadata = read_metadata(path)
    assert metadata["task"] == "soma.tasks.digits"
    assert json.loads(metadata["task_options"]) == {}  # the task's defaults, as the run had them
    assert json.loads(metadata["nodes"]) == {
        "out": "Linear(in_features=64, out_features=10, bias=True)"
    }
    task = load_task("soma.tasks.digits", {})
    assert {f"preprocessing.{k}": v for k, v in task.preprocessing().items()} == {
        k: v for k, v in metadata.items() if k.startswith("preprocessing.")
    }
    assert metadata["preprocessing.formula"].startswith("(x / 16 - mean) / std")
    mean, std = (json.loads(metadata[f"preprocessing.{k}"]) for k in ("mean", "std"))
    assert len(mean) == len(std) == 64 and min(std) == 0.1  # the floor, on a blank border pixel


def test_the_example_scores_the_test_set_as_the_run_did_and_raw_pixels_do_not(
    digits_run,
) -> None:
    path, evaluated = digits_run
    pixels, labels = _read_digits()
    test = split_rows()[1]
    example = use_model()
    assert example.score(str(path), pixels[test], labels[test]) == evaluated
    raw = example.score(str(path), pixels[test], labels[test], raw=True)
    assert raw < evaluated - 0.05, (raw, evaluated)


def test_the_example_imports_nothing_of_soma() -> None:
    tree = ast.parse(EXAMPLE.read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module)])
    }
    assert imported == {"json", "sys", "numpy", "torch", "safetensors", "sklearn"}, imported


@pytest.mark.slow
def test_the_example_runs_as_the_readme_says(digits_run) -> None:
    path, _ = digits_run
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), str(path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    said = re.fullmatch(r"accuracy on the 1797 digits: (\S+) \(raw pixels: (\S+)\)\n", done.stdout)
    assert said is not None, done.stdout
    prepared, raw = float(said[1]), float(said[2])
    assert prepared > 0.95 and raw < 0.9, done.stdout


def test_a_task_the_store_names_is_not_imported_unless_vouched_for(tmp_path, monkeypatch) -> None:
    """Reading a store runs no code of its choosing: `soma export` describes a task of soma's
    own, but a task module the store merely names is not imported (its name and options are
    written); the workflow's jobs vouch for their config's task, which they import anyway."""
    (tmp_path / "noisy_task.py").write_text(
        "from pathlib import Path\n"
        "Path(__file__).with_name('imported').touch()\n"
        "from soma.tasks.control import make\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    soma.simulate(
        "noisy_task",
        clients=2,
        rounds=1,
        task_options={"examples": 32},
        store=tmp_path / "store",
        run="n",
    )
    sys.modules.pop("noisy_task", None)
    (tmp_path / "imported").unlink()
    store = Store(tmp_path / "store")
    export_average(store, "n", tmp_path / "m.safetensors")
    metadata = read_metadata(tmp_path / "m.safetensors")
    assert not (tmp_path / "imported").exists(), "the store's task was imported"
    assert metadata["task"] == "noisy_task" and json.loads(metadata["task_options"]) == {
        "examples": 32
    }
    assert "nodes" not in metadata
    (digest,) = soma.model.averages(store, "n")[0]
    vouched = described(store, read_average(store, digest), vouched="noisy_task")
    assert (tmp_path / "imported").exists() and "nodes" in vouched


def test_an_about_record_that_is_not_its_meetings_describes_nothing(digits_run, tmp_path) -> None:
    """What the file says of the task is read from the average's meeting, checked to hash to
    the meeting's key: a rebound `about` record says nothing."""
    path, _ = digits_run
    store = Store(path.parent / "store")
    (digest,) = soma.model.averages(store, "d")[9]
    record = read_average(store, digest)
    assert described(store, record)["task"] == "soma.tasks.digits"
    from soma.round import layout

    name = layout.about(layout.meeting("d", 9, record.meeting))
    real = store.resolve(name)
    forged = dict(store.recall_digest(real))
    forged["config"] = {**forged["config"], "task": "soma.tasks.control"}
    try:
        store.keep(name, forged)
        assert described(store, record) == {}
    finally:
        store.bind(name, real)


def test_the_workflows_model_files_say_their_task_and_preprocessing(tiny_run) -> None:
    """The workflow's `model` and `best` jobs describe their config's task (which they vouch
    for), and the example scores the tiny run's model as its last evaluation did."""
    workdir = tiny_run[0]
    results = workdir / "results" / "tiny"
    for name in ("model.safetensors", "best.safetensors"):
        metadata = read_metadata(results / name)
        assert metadata["task"] == "soma.tasks.digits", name
        assert json.loads(metadata["nodes"]) == {
            "out": "Linear(in_features=64, out_features=10, bias=True)"
        }
        assert metadata["preprocessing.formula"].startswith("(x / 16 - mean) / std"), name
    pixels, labels = _read_digits()
    test = split_rows()[1]
    evaluation = json.loads((results / "round" / "1" / "evaluation.json").read_text())
    scored = use_model().score(str(results / "model.safetensors"), pixels[test], labels[test])
    assert scored == evaluation["metrics"]["accuracy"]
