"""A run's `transfer` precision (soma.transfer): every weight it keeps in the store is at that
precision, each average is worked in float32 from the stored exports, the precision is part of
the run's identity, and the workflow, `soma client` and `soma simulate` keep the same bits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import soma
from soma import transfer
from soma.arithmetic import working_dtype
from soma.config.spec import RunSpec
from soma.errors import SomaError
from soma.store import Store

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def floats(export: dict) -> list[torch.Tensor]:
    return [t for node in export.values() for t in node.values() if t.is_floating_point()]


def test_at_casts_the_wider_floats_and_nothing_else() -> None:
    export = {
        "a": {"w": torch.randn(3), "n": torch.tensor(4), "h": torch.randn(2).half()},
        "b": {"d": torch.randn(2, dtype=torch.float64)},
    }
    kept = transfer.at(export, "bfloat16")
    assert kept["a"]["w"].dtype == torch.bfloat16 and kept["b"]["d"].dtype == torch.bfloat16
    assert kept["a"]["n"] is export["a"]["n"]  # a count is a count
    assert kept["a"]["h"] is export["a"]["h"]  # float16 is no wider than bfloat16
    as_made = transfer.at(export, "float32")  # float64 stays float64: the model's own
    assert all(as_made[n][k] is export[n][k] for n in export for k in export[n])
    assert torch.equal(kept["a"]["w"], export["a"]["w"].bfloat16())


@pytest.mark.parametrize(
    ("source", "target", "fits"),
    [
        (torch.bfloat16, torch.float32, True),
        (torch.float16, torch.float32, True),
        (torch.float32, torch.float64, True),
        (torch.float32, torch.float32, True),
        (torch.float32, torch.bfloat16, False),
        (torch.float16, torch.bfloat16, False),
        (torch.bfloat16, torch.float16, False),
        (torch.float64, torch.float32, False),
        (torch.int64, torch.float32, False),
        (torch.float32, torch.int64, False),
    ],
)
def test_an_exact_widening_is_one_that_loses_nothing(source, target, fits) -> None:
    assert transfer.exact_widening(source, target) is fits


def test_a_bfloat16_export_loads_into_a_float32_model_exactly_and_never_the_reverse() -> None:
    nodes = {"lin": torch.nn.Linear(3, 2)}
    kept = transfer.at(soma.export({"lin": torch.nn.Linear(3, 2)}), "bfloat16")
    soma.load(nodes, kept)
    assert nodes["lin"].weight.dtype == torch.float32
    assert torch.equal(nodes["lin"].weight.detach(), kept["lin"]["weight"].float())
    narrow = {"lin": torch.nn.Linear(3, 2).bfloat16()}
    before = soma.export(narrow)
    with pytest.raises(soma.LoadError, match=r"'lin'.*'(weight|bias)'.*float32.*bfloat16"):
        soma.load(narrow, soma.export(nodes))
    after = floats(soma.export(narrow))
    assert all(torch.equal(a, b) for a, b in zip(floats(before), after, strict=True))


def test_every_weight_of_a_bfloat16_run_is_kept_at_bfloat16_and_averaged_in_float32(
    tmp_path,
) -> None:
    done = soma.simulate(
        "soma.tasks.control", clients=3, rounds=2, transfer="bfloat16", store=tmp_path / "s"
    )
    store = Store(tmp_path / "s")
    for kept in done.rounds:
        record = kept.record
        exports = [store.recall_digest(i["weights"]) for i in record["inputs"]]
        sizes = torch.tensor([float(i["size"]) for i in record["inputs"]])
        for value in (store.recall_digest(record["start"]), *exports):
            assert {t.dtype for t in floats(value)} == {torch.bfloat16}
        average = store.recall_digest(record["weights"])
        for node, weights in average.items():
            for key, tensor in weights.items():
                assert tensor.dtype == torch.bfloat16
                work = working_dtype(tensor.dtype)
                stacked = torch.stack([e[node][key].to(work) for e in exports])
                mean = (stacked * (sizes / sizes.sum()).view(-1, *[1] * tensor.dim())).sum(0)
                assert torch.allclose(tensor.float(), mean.bfloat16().float(), rtol=0, atol=0.02)


def test_the_precision_is_the_run_s_identity_and_float32_s_is_as_it_was() -> None:
    plain = RunSpec(run="r", task="soma.tasks.control", clients=2, rounds=1)
    half = RunSpec(run="r", task="soma.tasks.control", clients=2, rounds=1, transfer="bfloat16")
    assert "transfer" not in plain.identity()
    assert half.identity()["transfer"] == "bfloat16"
    assert plain.meeting(0, "s" * 64, None).key != half.meeting(0, "s" * 64, None).key


@pytest.mark.parametrize(
    ("given", "refusal"),
    [
        ({"transfer": "int8"}, "transfer.*one of float32, bfloat16, float16.*int8"),
        ({"transfer": "bfloat16", "secure": 2}, "transfer.*secure.*float32"),
        ({"transfer": "float16", "asynchronous": {"buffer": 2}}, "transfer.*asynchronous"),
    ],
)
def test_a_precision_that_cannot_be_kept_is_refused_naming_the_key(given, refusal) -> None:
    spec = RunSpec(run="r", task="soma.tasks.control", clients=3, rounds=1, **given)
    with pytest.raises(SomaError, match=refusal):
        spec.check()


@pytest.mark.workflow
def test_a_bfloat16_run_keeps_the_same_bits_in_the_workflow_and_soma_simulate(tmp_path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path)]
        + ["--configfile", str(FIXTURES / "tiny.yaml"), str(FIXTURES / "no-baselines.yaml")]
        + ["--cores", "2", "results/half/round/1/evaluation.json"]  # not the summary and model
        + ["--config", "run=half", "transfer=bfloat16", "clients_per_job=2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    average = tmp_path / "results" / "half" / "round" / "1" / "average.json"
    tiny = {"partition": "labels_per_client", "labels_per_client": 5, "model": "softmax",
            "epochs": 1}  # fmt: skip
    workflow = json.loads(average.read_text())["weights"]
    half = soma.simulate("soma.tasks.digits", clients=2, rounds=2, task_options=tiny,
                         transfer="bfloat16")  # fmt: skip
    full = soma.simulate("soma.tasks.digits", clients=2, rounds=2, task_options=tiny)
    assert workflow == half.weights != full.weights
