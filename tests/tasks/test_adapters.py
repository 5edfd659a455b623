"""soma.tasks.adapters: federated fine-tuning of LoRA adapters, the pretrained base kept once
in the store, named by digest in the run's identity, and written whole into the model file."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("peft")

from helpers import communicated

import soma  # noqa: E402
from soma.model import export_average, load_model, read_metadata  # noqa: E402
from soma.nodes import export, load  # noqa: E402
from soma.run import base as bases  # noqa: E402
from soma.store import Store  # noqa: E402
from soma.store.values import value_digest  # noqa: E402
from soma.tasks import TaskError, adapters, load_task  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TASK = "soma.tasks.adapters"
PLAYS = ["macbeth"]
SMALL = {"plays": PLAYS, "max_windows": 4, "batch_size": 4, "test_windows": 20}

torch.set_num_threads(1)


def tiny_base(path: Path, seed: int = 0) -> Path:
    """A base small enough for a test: pretrained on a few windows of one comedy."""
    model = adapters.pretrain(
        ["as-you-like-it"], window=8, dim=8, hidden=16, epochs=1, max_windows=40, seed=seed
    )
    return adapters.save_base(model, path)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return tiny_base(tmp_path_factory.mktemp("base") / "base.safetensors")


def options(base: Path, **more) -> dict:
    return {"base": str(base), **SMALL, **more}


def nbytes(exported) -> int:
    return sum(t.numel() * t.element_size() for keys in exported.values() for t in keys.values())


def abouts(store: Store, run: str) -> list[dict]:
    """Every meeting's `about` record of `run` (soma.round.layout)."""
    found = []
    for name in store.bound(f"{run}/"):
        if name.endswith("/about"):
            found.append(store.recall(name))
    return found


def client_exports(store: Store, run: str) -> list[dict]:
    """What every client sent, round after round: the exports its records name."""
    sent = []
    for name in store.bound(f"{run}/"):
        if "/client/" in name and not name.endswith("/started"):
            record = store.recall(name)
            if isinstance(record, dict) and "weights" in record:
                sent.append(store.recall_digest(record["weights"]))
    return sent


# --- the guarantees ----------------------------------------------------------------------------


def test_only_adapter_tensors_are_sent_and_the_base_is_in_the_store_once(base, tmp_path) -> None:
    soma.simulate(TASK, clients=2, rounds=2, task_options=options(base), store=tmp_path, run="r")
    store = Store(tmp_path)
    task = load_task(TASK, options(base))
    sent = client_exports(store, "r")
    assert len(sent) == 4  # 2 clients, 2 rounds
    full = nbytes(task.base(0))
    for exported in sent:
        assert set(exported) == {f"base_model.model.{n}" for n in ("q", "k", "v", "out")}
        assert all(set(keys) == {"lora_A.weight", "lora_B.weight"} for keys in exported.values())
        assert nbytes(exported) < full / 4  # far below the model's
    # the base: in the store, under the digest the run's identity names, once
    digest = value_digest(task.base(0))
    assert {a["config"]["base"] for a in abouts(store, "r")} == {digest}
    kept = store.recall_digest(digest)
    assert {n: set(k) for n, k in kept.items()} == {n: set(k) for n, k in task.base(0).items()}
    blobs = sorted(p.name for p in (tmp_path / "blobs").rglob("*") if p.is_file())
    assert bases.keep(_spec("r", base), store, task).base == digest  # put again: nothing written
    assert sorted(p.name for p in (tmp_path / "blobs").rglob("*") if p.is_file()) == blobs


def _spec(run: str, base: Path):
    from soma.config.spec import RunSpec

    return RunSpec(run=run, task=TASK, clients=2, rounds=2, task_options=options(base))


def test_the_base_is_bound_into_the_identity_and_the_model_file(base, tmp_path) -> None:
    soma.simulate(TASK, clients=2, rounds=1, task_options=options(base), store=tmp_path, run="r")
    store, task = Store(tmp_path), load_task(TASK, options(base))
    digest = value_digest(task.base(0))
    path = tmp_path / "model.safetensors"
    export_average(store, "r", path)
    assert read_metadata(path)["base"] == digest
    whole = load_model(path)
    for node, keys in task.base(0).items():
        for key, tensor in keys.items():
            assert torch.equal(whole[node][key], tensor)
    # without the base in the identity, the same run on another base would meet these clients
    spec = _spec("r", base)
    assert spec.identity().get("base") is None
    assert bases.keep(spec, store, task).identity()["base"] == digest


@pytest.mark.slow
def test_a_different_base_meets_apart_refused_naming_both_digests(base, tmp_path) -> None:
    """Two sites, each with its own `base.safetensors` (the same option, other weights)."""
    sites = [tmp_path / "a", tmp_path / "b"]
    for site in sites:
        site.mkdir()
    (sites[0] / "base.safetensors").write_bytes(base.read_bytes())
    tiny_base(sites[1] / "base.safetensors", seed=1)
    digests = [
        bases.digest_of(load_task(TASK, options(site / "base.safetensors")), 0) for site in sites
    ]
    assert digests[0] != digests[1]
    command = [sys.executable, "-m", "soma.cli", "client", "--store", str(tmp_path / "store")]
    command += ["--run", "r", "--task", TASK, "--clients", "2", "--rounds", "1"]
    command += ["--deadline", "60", "--option=base=base.safetensors", "--option=plays=[macbeth]"]
    command += ["--option=max_windows=4", "--option=test_windows=20"]
    environ = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    clients = [
        subprocess.Popen(
            [*command, "--mine", str(k)],
            cwd=site,
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k, site in enumerate(sites)
    ]
    said = [err for _, err in communicated(clients, 300)]
    assert [c.returncode for c in clients] == [1, 1], said
    mine, theirs = (f"base {d[:12]}" for d in digests)
    assert f"client 1 joined with {theirs}; you have {mine}" in said[0], said[0]
    assert f"client 0 joined with {mine}; you have {theirs}" in said[1], said[1]


def test_a_job_whose_base_changed_since_the_start_is_refused_naming_both(base, tmp_path) -> None:
    other = tiny_base(tmp_path / "other.safetensors", seed=1)
    task = load_task(TASK, options(other))
    started = bases.digest_of(load_task(TASK, options(base)), 0)
    mine = bases.digest_of(task, 0)
    with pytest.raises(bases.BaseDiffers) as refused:
        bases.check(task, 0, "r", started)
    assert f"started on base {started}" in str(refused.value)
    assert f"has base {mine}" in str(refused.value)
    bases.check(load_task(TASK, options(base)), 0, "r", started)  # the same base: no refusal


def test_full_fine_tuning_exports_every_weight_and_has_no_base(base) -> None:
    task = load_task(TASK, options(base, train="full"))
    exported = export(task.nodes(0))
    state = adapters.CharModel(task.shape).state_dict()
    assert {f"{n}.{k}" for n, keys in exported.items() for k in keys} == set(state)
    assert task.base(0) is None


def test_freeze_a_sends_b_alone_and_the_average_of_the_products_is_exact(base) -> None:
    task = load_task(TASK, options(base, freeze_a=True, epochs=10, lr=0.05))
    nodes = task.nodes(0)
    assert all(set(keys) == {"lora_B.weight"} for keys in export(nodes).values())
    frozen = task.base(0)
    a = {n: frozen[n]["lora_A.weight"] for n in export(nodes)}
    trained = []
    for k in range(2):
        nodes = task.nodes(0)
        task.train(nodes, task.shard(k, 2), seed=k)
        trained.append(export(nodes))
        assert all(torch.equal(frozen[n]["lora_A.weight"], a[n]) for n in a)  # never trained
    for n in a:  # FFA-LoRA: (mean B_i) A is the mean of B_i A
        mean_b = (trained[0][n]["lora_B.weight"] + trained[1][n]["lora_B.weight"]) / 2
        products = [t[n]["lora_B.weight"] @ a[n] for t in trained]
        assert torch.allclose(mean_b @ a[n], (products[0] + products[1]) / 2, atol=1e-6)
    # FedIT (A and B averaged): the product of the averages is not the average of the products
    task = load_task(TASK, options(base, epochs=10, lr=0.05))
    both = []
    for k in range(2):
        nodes = task.nodes(0)
        task.train(nodes, task.shard(k, 2), seed=k)
        both.append(export(nodes)["base_model.model.q"])
    mean = {key: (both[0][key] + both[1][key]) / 2 for key in both[0]}
    product_of_means = mean["lora_B.weight"] @ mean["lora_A.weight"]
    mean_of_products = sum(b["lora_B.weight"] @ b["lora_A.weight"] for b in both) / 2
    apart = (product_of_means - mean_of_products).abs().max()
    assert apart > 0.1 * mean_of_products.abs().max()  # an error of the update's own size


def test_refused_clearly_without_peft(base, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "peft", None)  # as if not installed: import peft fails
    with pytest.raises(adapters.PeftMissing, match=r"needs peft.*pip install 'soma\[adapters\]'"):
        load_task(TASK, options(base))
    load_task(TASK, options(base, train="full"))  # full fine-tuning needs no peft


def test_options_are_refused_by_name(base, tmp_path) -> None:
    with pytest.raises(TaskError, match="option base is required"):
        load_task(TASK, {})
    with pytest.raises(TaskError, match="cannot be read"):
        load_task(TASK, {"base": str(tmp_path / "none.safetensors")})
    with pytest.raises(TaskError, match="'nope' not a layer of the model"):
        load_task(TASK, options(base, targets=["q", "nope"]))
    with pytest.raises(TaskError, match="train must be one of lora, full"):
        load_task(TASK, options(base, train="half"))
    with pytest.raises(TaskError, match="fewer than 99 clients"):
        load_task(TASK, options(base)).check(99)
    assert set(adapters.OPTIONS) == set(adapters.RENAMED) | {
        f.name for f in adapters.AdaptersTask.__dataclass_fields__.values()
    } - set(adapters.RENAMED.values())


# --- the example ---------------------------------------------------------------------------------


def _example():
    path = ROOT / "examples" / "federated_lora.py"
    spec = importlib.util.spec_from_file_location("federated_lora", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_s_model_file_loads_in_plain_peft_and_pytorch_and_predicts_as_soma(
    tmp_path, capsys
) -> None:
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict
    from safetensors.torch import load_file

    assert _example().main(["--tiny", "--folder", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "| federated adapters (FedIT: A and B averaged) |" in printed
    assert "| each client alone (its adapters, mean over clients) |" in printed
    path = tmp_path / "model.safetensors"
    metadata, state = read_metadata(path), load_file(str(path))
    shape = adapters.Shape(**json.loads(metadata["preprocessing.model"]))
    config = json.loads(metadata["preprocessing.lora_config"])
    own = {k: v for k, v in state.items() if not k.startswith("base_model.")}
    model = adapters.CharModel(shape)
    model.load_state_dict(own)  # the base, by the model's own names: strict
    peft_model = get_peft_model(model, LoraConfig(**config)).eval()
    loaded = set_peft_model_state_dict(
        peft_model, {k: v for k, v in state.items() if k.startswith("base_model.")}
    )
    assert not loaded.unexpected_keys
    plain = adapters.CharModel(shape)
    plain.load_state_dict(adapters.merged(state, config["lora_alpha"] / config["r"]))
    plain.eval()
    # soma's own nodes at the run's last average
    store = Store(tmp_path / "store-2")
    task = load_task(TASK, json.loads(metadata["task_options"]))
    nodes = task.nodes(0)
    load(nodes, store.recall_digest(metadata["weights"]))
    inputs = task.test_data[0]
    with torch.no_grad():
        ours = adapters.model_of(nodes).eval()(inputs)
        assert torch.allclose(peft_model(inputs), ours, atol=1e-4)
        assert torch.allclose(plain(inputs), ours, atol=1e-4)
    assert not torch.allclose(plain(inputs), adapters.model_of(task.nodes(0))(inputs), atol=1e-4)


def test_the_example_makes_a_base_alone(tmp_path) -> None:
    path = tmp_path / "base.safetensors"
    assert _example().main(["--tiny", "--pretrain-only", "-o", str(path)]) == 0
    shape, tensors = adapters.read_base(path)
    assert set(tensors) == set(adapters.CharModel(shape).state_dict())
