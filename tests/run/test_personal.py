"""Personal nodes (soma.run.personal) and what a task's train() is told (soma.tasks.Context):
never sent, never averaged, kept as the client's own state and loaded back the next round it
trains; the same bits under soma.simulate and the workflow; refused where they cannot work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from soma.config.configs import ConfigRefused
from soma.config.spec import BadArgument, RunSpec
from soma.round.once import read_record
from soma.run import checked
from soma.run.simulate import simulate
from soma.store import Store

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture(autouse=True)
def fixtures_importable(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))


def out_sum(weights) -> float:
    return float(weights["out"]["weight"].double().sum())


def test_personal_nodes_stay_with_each_client_and_come_back_the_next_round(tmp_path) -> None:
    done = simulate("told_task", clients=2, rounds=3, personal=["out"], store=tmp_path / "s")
    store = Store(tmp_path / "s")
    start = float(__import__("told_task").make().nodes(0)["out"].weight.detach().double().sum())
    last: dict[int, float] = {}
    for r, rnd in enumerate(done.rounds):
        assert "out" not in store.recall_digest(rnd.record["weights"])  # never averaged
        assert "hidden" in store.recall_digest(rnd.record["weights"])
        for entry in rnd.record["inputs"]:
            k = entry["client"]
            assert set(store.recall_digest(entry["weights"])) == {"hidden"}  # never sent
            own = store.recall_digest(read_record(store, entry["record"])["own"])
            metrics = rnd.metrics[k]
            # trained from its own personal weights of the round before (its start at first)
            assert metrics["out_before"] == pytest.approx(last.get(k, start), abs=1e-9)
            assert (metrics["round"], metrics["rounds"], metrics["client"]) == (r, 3, k)
            assert metrics["clients"] == 2
            last[k] = out_sum(own["personal"])
    assert last[0] != last[1]  # each its own


def test_a_train_without_context_is_called_as_before(tmp_path) -> None:
    done = simulate("soma.tasks.control", clients=1, rounds=1, task_options={"examples": 32})
    assert "loss" in done.rounds[0].metrics[0] and "round" not in done.rounds[0].metrics[0]


def spec(**fields) -> RunSpec:
    base = {"run": "p", "task": "told_task", "clients": 2, "rounds": 1, "personal": ("out",)}
    return RunSpec(**{**base, **fields})


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"personal": ("head",)}, "'head' is not one of the task's nodes"),
        ({"personal": ("out", "hidden")}, "nothing would be left to average"),
        ({"strategy": "scaffold"}, "strategy 'scaffold'"),
        ({"strategy": "fedprox", "strategy_options": {"mu": 0.1}}, "strategy 'fedprox'"),
        ({"secure": 2}, "secure round keeps no client's state"),
        ({"personal": ("out", "out")}, "'out' is named twice"),
    ],
)
def test_personal_is_refused_where_it_cannot_work_naming_the_culprit(fields, named) -> None:
    with pytest.raises(ConfigRefused, match="config key.*`personal`") as refused:
        checked.checked(spec(**fields))
    assert named in str(refused.value)


def test_personal_on_the_command_line_is_refused_naming_the_option() -> None:
    with pytest.raises(BadArgument, match="--personal: node 'head'"):
        checked.checked(spec(personal=("head",), given="args"))


def test_a_personal_run_never_meets_a_shared_one() -> None:
    assert spec().meeting(0, "a", None).key != spec(personal=()).meeting(0, "a", None).key
    assert spec(personal=()).identity() == {"task": "told_task", "options": {}, "seed": 0}


@pytest.mark.workflow
def test_the_workflow_trains_the_same_bits_as_simulate(tmp_path) -> None:
    simulated = simulate("told_task", clients=2, rounds=2, personal=["out"], run="personal")
    workdir = tmp_path / "workflow"
    workdir.mkdir()
    environ = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{FIXTURES}", OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(workdir)]
        + ["--configfile", str(FIXTURES / "tiny.yaml"), str(FIXTURES / "no-baselines.yaml")]
        + ["--cores", "1", "results/personal/round/1/evaluation.json"]  # not summary, model
        + ["--config", "run=personal", "task=told_task", "metric=loss"]
        + ["personal=[out]"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    results = workdir / "results" / "personal" / "round" / "1"
    assert json.loads((results / "average.json").read_text())["weights"] == simulated.weights
    told = json.loads((results / "client" / "1.json").read_text())["metrics"]
    assert (told["round"], told["rounds"], told["client"], told["clients"]) == (1, 2, 1, 2)
