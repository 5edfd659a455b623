"""soma.tasks.resnet, the real-size task: a ResNet-18 whose size is a knob, on images drawn
from a seed; run here at width 4 on 8x8 images, where a client trains in a fraction of a
second on the CPU."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from helpers import soma

import soma as soma_api
from soma.model import load_model, save_model
from soma.nodes import export, load
from soma.tasks import Task, TaskError, declared_options, load_task, resnet

TASK = "soma.tasks.resnet"
TINY = {"width": 4, "image_size": 8, "examples": 24, "test_examples": 16, "batch_size": 8,
        "device": "cpu"}  # fmt: skip

torch.set_num_threads(1)


def same(a: dict, b: dict) -> bool:
    """Two exports hold the same nodes, keys and bits."""
    return a.keys() == b.keys() and all(
        a[n].keys() == b[n].keys() and all(torch.equal(a[n][k], b[n][k]) for k in a[n]) for n in a
    )


def trained(**options) -> dict:
    task = load_task(TASK, {**TINY, **options})
    nodes = task.nodes(0)
    task.train(nodes, task.shard(1, 2), seed=7)
    return export(nodes)


def test_the_options_are_declared_as_the_task_s_fields():
    fields = tuple(f.name for f in dataclasses.fields(resnet.ResNetTask) if f.init)
    assert resnet.OPTIONS == fields
    assert declared_options(TASK) == fields


def test_at_width_64_it_is_a_resnet_18_of_11_million_parameters():
    nodes = load_task(TASK, {"device": "cpu"}).nodes(0)
    assert list(nodes) == ["stem", "stage1", "stage2", "stage3", "stage4", "head"]
    assert resnet.parameter_count(nodes) == 11_173_962
    assert sum(len(stage) for name, stage in nodes.items() if name.startswith("stage")) == 8


def test_the_task_answers_the_protocol():
    task = load_task(TASK, TINY)
    assert isinstance(task, Task)
    nodes = task.nodes(0)
    inputs, labels = task.shard(0, 2)
    assert inputs.shape == (24, 3, 8, 8) and labels.shape == (24,) and task.size((inputs, labels))
    metrics = task.train(nodes, (inputs, labels), seed=0)
    assert metrics["steps"] == 3 and metrics["loss"] > 0
    assert set(task.evaluate(nodes)) == {"accuracy", "loss"}


def test_a_client_s_images_are_drawn_from_the_seed_alone():
    task = load_task(TASK, TINY)
    first, again = task.shard(1, 2), resnet.draw(3, 24, **_drawn(task))
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert torch.equal(task.shard(1, 2)[0], task.shard(1, 5)[0])  # not the client count
    assert not torch.equal(task.shard(0, 2)[0], first[0])
    other = load_task(TASK, {**TINY, "data_seed": 1}).shard(1, 2)
    assert not torch.equal(other[0], first[0])


def _drawn(task: resnet.ResNetTask) -> dict:
    return {"data_seed": task.data_seed, "classes": task.classes,
            "image_size": task.image_size, "noise": float(task.noise)}  # fmt: skip


def test_two_trainings_with_one_seed_give_the_same_bits_and_another_seed_others():
    assert same(trained(), trained())
    assert same(trained(precision="bf16"), trained(precision="bf16"))
    task = load_task(TASK, TINY)
    nodes = task.nodes(0)
    task.train(nodes, task.shard(1, 2), seed=8)
    assert not same(export(nodes), trained())


def test_bf16_trains_under_autocast_and_differs_from_fp32():
    assert not same(trained(precision="bf16"), trained())


def test_the_data_loader_shuffles_by_the_seed():
    data = load_task(TASK, TINY).shard(0, 2)
    order = [labels.tolist() for _, labels in resnet._loader(data, 8, 3)]
    assert order == [labels.tolist() for _, labels in resnet._loader(data, 8, 3)]
    assert order != [labels.tolist() for _, labels in resnet._loader(data, 8, 4)]
    assert sorted(sum(order, [])) == sorted(data[1].tolist())


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"precision": "fp8"}, "precision='fp8' is unknown"),
        ({"precision": "fp16", "device": "cpu"}, "precision=fp16 needs a GPU"),
        ({"width": 0}, "width must be an integer >= 1"),
        ({"image_size": 4}, "image_size must be an integer >= 8"),
        ({"device": "tpu"}, "device='tpu' is unknown"),
    ],
)
def test_options_it_cannot_serve_are_refused_by_name(options, named):
    with pytest.raises(TaskError, match=named.replace("(", r"\(").replace("[", r"\[")):
        load_task(TASK, {**TINY, **options})


def test_it_trains_under_soma_simulate_and_twice_gives_the_same_bits(tmp_path):
    runs = [soma_api.simulate(TASK, clients=2, rounds=2, task_options=TINY) for _ in range(2)]
    assert runs[0].weights == runs[1].weights
    assert [len(r.record["inputs"]) for r in runs[0].rounds] == [2, 2]
    assert set(runs[0].evaluation) == {"accuracy", "loss"}
    # its export loads back: a model file of the run's last weights, read into fresh nodes
    task = load_task(TASK, TINY)
    weights = export(runs[0].nodes)
    path = save_model(weights, tmp_path / "model.safetensors")
    nodes = task.nodes(1)
    load(nodes, load_model(path))
    assert same(export(nodes), weights)
    assert task.evaluate(nodes) == runs[0].evaluation


def test_soma_simulate_runs_it_by_its_import_path(tmp_path):
    options = [x for k, v in TINY.items() for x in ("--option", f"{k}={v}")]
    args = ["simulate", "--task", TASK, "--clients", "2", "--rounds", "1", *options]
    said = [soma(*args, "--store", str(tmp_path / f"store{i}"), cwd=tmp_path) for i in (0, 1)]
    lines = [[json.loads(x) for x in s.stdout.splitlines()] for s in said]
    assert all(s.returncode == 0 for s in said), said[0].stderr
    assert lines[0][-1]["evaluation"] == lines[1][-1]["evaluation"]
    assert lines[0][0]["weights"] == lines[1][0]["weights"]
