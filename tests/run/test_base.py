"""soma.run.base: a task's frozen base kept once in the store, named by digest in the run's
identity and records, never sent with a round, written beside the trained nodes into the
model file (soma.model.with_base); a process whose base differs is refused naming both."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import soma
from soma.config.spec import RunSpec
from soma.model import ModelError, export_average, load_model, read_metadata, with_base
from soma.round import layout
from soma.run import base as bases
from soma.store import Store
from soma.store.values import value_digest
from soma.tasks import TaskError, load_task

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(autouse=True)
def fixtures_importable(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))


def spec(run: str = "r", **options) -> RunSpec:
    return RunSpec(run=run, task="based_task", clients=2, rounds=1, task_options=options)


def blobs(folder: Path) -> list[str]:
    return sorted(str(p) for p in (folder / "blobs").rglob("*") if p.is_file())


def test_the_base_is_kept_once_and_joins_the_identity_only_when_there_is_one(tmp_path) -> None:
    store, task = Store(tmp_path), load_task("based_task", {})
    kept = bases.keep(spec(), store, task)
    digest = value_digest(task.base(0))
    assert kept.base == digest and kept.identity()["base"] == digest
    before = blobs(tmp_path)
    assert bases.keep(spec(), store, task).base == digest
    assert blobs(tmp_path) == before  # the same bytes again: nothing written
    assert store.resolve(layout.starting("r", digest)) == digest  # reachable: gc keeps it
    assert "base" not in spec().identity()  # a run without a base keeps its meeting keys
    control = RunSpec(run="r", task="soma.tasks.control", clients=2, rounds=1)
    assert bases.keep(control, store, load_task("soma.tasks.control", {})) is control
    other = bases.keep(spec(value=2.0), store, load_task("based_task", {"value": 2.0}))
    assert other.meeting(0, None, None).key != kept.meeting(0, None, None).key


def test_a_run_names_its_base_in_every_meeting_never_sends_it_and_writes_it_in_the_model(
    tmp_path,
) -> None:
    soma.simulate("based_task", clients=2, rounds=2, store=tmp_path, run="r")
    store = Store(tmp_path)
    digest = value_digest(load_task("based_task", {}).base(0))
    abouts = [store.recall(n) for n in store.bound("r/") if n.endswith("/about")]
    assert len(abouts) == 2 and {a["config"]["base"] for a in abouts} == {digest}
    for name in store.bound("r/"):
        record = store.recall(name) if "/client/" in name else None
        if isinstance(record, dict) and "weights" in record:
            assert "frozen" not in store.recall_digest(record["weights"])
    path = tmp_path / "model.safetensors"
    export_average(store, "r", path)
    assert read_metadata(path)["base"] == digest
    assert torch.equal(load_model(path)["frozen"]["weight"], torch.ones(4, 3))


def test_a_process_whose_base_differs_is_refused_naming_both_digests() -> None:
    ones, twos = load_task("based_task", {}), load_task("based_task", {"value": 2.0})
    a, b = bases.digest_of(ones, 0), bases.digest_of(twos, 0)
    with pytest.raises(bases.BaseDiffers, match=f"started on base {a}.*has base {b}"):
        bases.check(twos, 0, "r", a)
    with pytest.raises(bases.BaseDiffers, match=f"started on base none.*has base {b}"):
        bases.check(twos, 0, "r", None)
    bases.check(ones, 0, "r", a)
    bases.check(load_task("soma.tasks.control", {}), 0, "r", None)


def test_a_base_that_is_no_export_is_refused() -> None:
    class Odd:
        def base(self, seed):
            return {"frozen": [1, 2]}

    with pytest.raises(TaskError, match=r"base\(0\) is not \{node: \{key: tensor\}\}"):
        bases.base_of(Odd(), 0)


def test_the_model_file_refuses_a_tensor_both_in_the_base_and_trained(tmp_path) -> None:
    store = Store(tmp_path)
    digest = store.put_value({"n": {"w": torch.zeros(2)}})
    whole = with_base(store, {"n": {"b": torch.ones(2)}}, {"base": digest})
    assert set(whole["n"]) == {"w", "b"}
    with pytest.raises(ModelError, match="node 'n' key 'w' is both in the run's base"):
        with_base(store, {"n": {"w": torch.ones(2)}}, {"base": digest})
