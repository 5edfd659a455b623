"""The `device` option: where the built-in tasks and TrainingRun train (soma.device).

On CPU (the default, and `auto` without a GPU) every weight is what it was before the option
existed, bit for bit; exports are CPU copies whatever the device; a device that is not one,
or a GPU this machine does not have, is refused naming the option. The CUDA tests run where
there is a GPU and are skipped, saying so, where there is none.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from torch import nn

import soma
from soma import device as devices
from soma.device import DeviceError, resolve_device, task_device
from soma.store import Store
from soma.strategies import load_strategy, objective_of
from soma.tasks import TaskError, digits, load_task
from soma.tasks import teacher as control
from soma.training import TrainingRun

torch.set_num_threads(1)

NO_GPU = not torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(NO_GPU, reason="no CUDA GPU on this machine (torch sees none)")
TASKS = ("soma.tasks.digits", "soma.tasks.control")


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[n].keys() == b[n].keys() and all(torch.equal(a[n][k], b[n][k]) for k in a[n]) for n in a
    )


def close(a: dict, b: dict) -> bool:
    """A GPU does not compute the same bits as a CPU: the same learning, to float precision."""
    return a.keys() == b.keys() and all(
        torch.allclose(a[n][k], b[n][k], rtol=1e-3, atol=1e-4) for n in a for k in a[n]
    )


class ParametersOnly:
    """A node that is not a torch module: soma cannot move it."""

    def __init__(self, device: str = "cpu") -> None:
        self.weight = nn.Parameter(torch.ones(2, 2, device=device))

    def parameters(self):
        return iter([self.weight])


# --- Reading the option ------------------------------------------------------------------


def test_cpu_is_cpu_and_auto_is_cpu_without_a_gpu(monkeypatch) -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(devices, "gpus", lambda: 0)
    assert resolve_device("auto") == torch.device("cpu")


def test_cuda_is_the_first_visible_gpu_and_auto_takes_it_when_there_is_one(monkeypatch) -> None:
    monkeypatch.setattr(devices, "gpus", lambda: 2)
    assert resolve_device("auto") == torch.device("cuda", 0)
    assert resolve_device("cuda") == torch.device("cuda", 0)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)


@pytest.mark.parametrize(
    "text",
    ["tpu", "gpu", "CUDA", "Cpu", " cpu", "", "cuda:", "cuda:-1", "cuda:x", "cuda0", "meta", "mps"],
)
def test_an_unknown_device_is_refused_naming_the_option_and_the_choices(text) -> None:
    with pytest.raises(DeviceError, match=rf"^device={text!r} is unknown; choose cpu, cuda"):
        resolve_device(text)


@pytest.mark.parametrize("value", [None, 0, 1.0, True, ["cpu"]])
def test_a_device_that_is_not_text_is_refused(value) -> None:
    with pytest.raises(DeviceError, match=r"^device=.* must be text"):
        resolve_device(value)


def test_a_gpu_this_machine_does_not_have_is_refused_saying_how_many_it_has(monkeypatch) -> None:
    monkeypatch.setattr(devices, "gpus", lambda: 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    with pytest.raises(
        DeviceError, match=r"^task option device='cuda:3': this machine has 1 GPU \("
    ) as refused:
        resolve_device("cuda:3", option="task option device")
    assert "CUDA_VISIBLE_DEVICES='3'" in str(refused.value)  # what Slurm gave the job
    monkeypatch.setattr(devices, "gpus", lambda: 2)
    with pytest.raises(DeviceError, match="has 2 GPUs"):
        resolve_device("cuda:2")
    monkeypatch.setattr(devices, "gpus", lambda: 0)
    for text in ("cuda", "cuda:0"):
        with pytest.raises(DeviceError, match=rf"device={text!r}: this machine has no GPU"):
            resolve_device(text)


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU: cuda is not refused here")
@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("text", ["cuda", "cuda:0", "cuda:3"])
def test_a_task_refuses_cuda_on_a_machine_without_a_gpu_when_it_is_made(task, text) -> None:
    name = task.rsplit(".", 1)[1]
    with pytest.raises(
        TaskError, match=rf"{name} task option device={text!r}: this machine has no GPU"
    ):
        load_task(task, {"device": text})


@pytest.mark.parametrize("task", TASKS)
def test_a_task_refuses_an_unknown_device_as_it_refuses_any_option(task) -> None:
    name = task.rsplit(".", 1)[1]
    with pytest.raises(TaskError, match=rf"{name} task option device='tpu' is unknown"):
        load_task(task, {"device": "tpu"})
    with pytest.raises(TaskError, match="^digits task option device=None must be text"):
        task_device("digits", None)
    with pytest.raises(DeviceError):  # a task's refusal, and a device refusal too
        importlib.import_module(task).make(device=0)


def test_the_default_is_cpu() -> None:
    assert digits.DigitsTask().device == "cpu"
    assert load_task("soma.tasks.control").device == "cpu"


# --- The CPU path: bit for bit what it was -----------------------------------------------


def by_hand(task: digits.DigitsTask, data, seed: int) -> dict:
    """The task's local training written out with torch.optim.SGD, without soma's device code
    (the same loop as tests/tasks/test_digits.py's bit-for-bit test)."""
    nodes = task.nodes(3)
    parameters = [p for node in nodes.values() for p in node.parameters()]
    optimizer = torch.optim.SGD(parameters, lr=task.lr, momentum=task.momentum)
    shuffle = torch.Generator().manual_seed(seed)
    for _ in range(task.epochs):
        order = torch.randperm(len(data[0]), generator=shuffle)
        for start in range(0, len(data[0]), task.batch_size):
            batch = order[start : start + task.batch_size]
            optimizer.zero_grad()
            logits = data[0][batch]
            for node in nodes.values():
                logits = node(logits)
            nn.functional.cross_entropy(logits, data[1][batch]).backward()
            optimizer.step()
    return nodes


@pytest.mark.parametrize("device", ["cpu", "auto", None])
def test_digits_on_cpu_and_auto_train_and_evaluate_bit_for_bit_as_before(
    device, monkeypatch
) -> None:
    monkeypatch.setattr(devices, "gpus", lambda: 0)  # auto is cpu here, GPU or not
    options = {"model": "mlp", "hidden": 8, "epochs": 2}
    task = digits.make(**options) if device is None else digits.make(**options, device=device)
    data = task.shard(2, 10)
    ours = task.nodes(3)
    task.train(ours, data, seed=4)
    theirs = by_hand(task, data, seed=4)
    assert same(soma.export(ours), soma.export(theirs))
    inputs, labels = task._test
    with torch.no_grad():
        for node in theirs.values():
            node.train(False)
            inputs = node(inputs)
    expected = {
        "accuracy": float((inputs.argmax(dim=1) == labels).double().mean()),
        "loss": float(nn.functional.cross_entropy(inputs, labels)),
    }
    assert task.evaluate(ours) == expected


def test_control_on_cpu_and_auto_is_the_control_as_before(monkeypatch) -> None:
    monkeypatch.setattr(devices, "gpus", lambda: 0)  # auto is cpu here, GPU or not
    default = load_task("soma.tasks.control")
    results = []
    for options in ({}, {"device": "cpu"}, {"device": "auto"}):
        task = load_task("soma.tasks.control", options)
        nodes = task.nodes(0)
        task.train(nodes, default.shard(1, 3), seed=5)
        results.append((soma.export(nodes), task.evaluate(nodes)))
    plain = control.student_nodes(0)
    TrainingRun(
        plain, loss=nn.functional.mse_loss, lr=0.05, momentum=0.9, batch_size=32, seed=5
    ).fit(default.shard(1, 3))
    for weights, metrics in results:
        assert same(weights, soma.export(plain)) and metrics == results[0][1]


def test_training_on_cpu_moves_nothing_and_keeps_the_callers_tensors() -> None:
    torch.manual_seed(0)
    nodes = {"a": nn.Linear(3, 2), "b": nn.BatchNorm1d(2)}
    parameters = [p for node in nodes.values() for p in node.parameters()]
    before = {
        (n, k): t.data_ptr() for n, node in nodes.items() for k, t in node.state_dict().items()
    }
    inputs, targets = torch.randn(8, 3), torch.randn(8, 2)
    for device in (None, "cpu", torch.device("cpu")):
        run = TrainingRun(nodes, loss=nn.functional.mse_loss, device=device)
        assert run.device == torch.device("cpu")
        assert run.on_device(inputs) is inputs  # not even a copy
        run.fit((inputs, targets))
    after = {
        (n, k): t.data_ptr() for n, node in nodes.items() for k, t in node.state_dict().items()
    }
    assert after == before  # trained in place, never moved or replaced
    assert all(
        a is b
        for a, b in zip(
            parameters, (p for n in nodes.values() for p in n.parameters()), strict=True
        )
    )


def test_nodes_on_several_devices_leave_the_data_where_it_is() -> None:
    nodes = {"here": nn.Linear(2, 2), "nowhere": ParametersOnly(device="meta")}
    assert devices.where(nodes) is None
    assert devices.where({"act": nn.ReLU()}) is None  # no tensors: nowhere in particular
    run = TrainingRun(nodes, loss=nn.functional.mse_loss)
    inputs = torch.ones(1, 2)
    assert run.device is None and run.on_device(inputs) is inputs


def test_a_node_soma_cannot_move_is_refused_naming_it_before_anything_moved() -> None:
    nodes = {"linear": nn.Linear(2, 2), "plain": ParametersOnly(device="meta")}
    with pytest.raises(DeviceError, match="node 'plain' is a ParametersOnly, not a torch module"):
        TrainingRun(nodes, loss=nn.functional.mse_loss, device="cpu")
    TrainingRun({"plain": ParametersOnly()}, loss=nn.functional.mse_loss, device="cpu")  # there
    with pytest.raises(DeviceError, match="^TrainingRun device='tpu' is unknown"):
        TrainingRun({"linear": nn.Linear(2, 2)}, loss=nn.functional.mse_loss, device="tpu")


@pytest.mark.parametrize(
    ("strategy", "options"), [("fedprox", {"mu": 0.5}), ("scaffold", {})], ids=str
)
def test_an_objective_handed_cpu_copies_trains_bit_for_bit_as_on_the_live_ones(
    strategy, options, monkeypatch
) -> None:
    """Off CPU an objective is handed CPU copies (adjust_on_cpu); forced here on CPU, the
    copies must change nothing: the same weights and the same client state, bit for bit."""
    task = digits.make(model="mlp", hidden=8, labels_per_client=3)
    start = soma.export(task.nodes(0))
    # SCAFFOLD with a nonzero server variate, so that its correction changes the gradients
    server = {
        "c": {n: {k: torch.full_like(t, 0.01) for k, t in ks.items()} for n, ks in start.items()}
    }
    state = server if strategy == "scaffold" else None

    def one_round() -> tuple:
        nodes = task.nodes(0)
        objective = objective_of(
            load_strategy(strategy, options), start=start, state=state, mine=None
        )
        task.train(nodes, task.shard(1, 4), seed=7, objective=objective)
        return soma.export(nodes), objective.finish(soma.export(nodes))

    (weights, (extra, own)) = one_round()
    copied: list[int] = []
    real = soma.training.adjust_on_cpu
    monkeypatch.setattr(soma.training, "off_cpu", lambda parameters: True)
    monkeypatch.setattr(
        soma.training, "adjust_on_cpu", lambda *args: copied.append(1) or real(*args)
    )
    (weights_copied, (extra_copied, own_copied)) = one_round()
    assert copied  # the copies were used ...
    assert same(weights, weights_copied)  # ... and the weights are the same bits
    if strategy == "scaffold":  # and so is the control variate the client keeps and sends
        assert same(extra, extra_copied) and same(own["c"], own_copied["c"])
    else:
        assert (extra, own) == (extra_copied, own_copied) == (None, None)


# --- Exports land on CPU, as copies; loads land where the nodes are ----------------------


class Transposed(nn.Module):
    """A module whose state_dict hands out a non-contiguous tensor (a transposed view)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.arange(12.0).reshape(3, 4).t())


def test_an_export_on_cpu_is_a_copy_with_the_content_and_format_of_before(tmp_path) -> None:
    torch.manual_seed(0)
    nodes = {"linear": nn.Linear(4, 3), "norm": nn.BatchNorm1d(3), "odd": Transposed()}
    nodes["norm"](torch.randn(5, 3))
    exported = soma.export(nodes)
    before = {  # what export did before the device option: detach().clone()
        n: {k: t.detach().clone() for k, t in node.state_dict().items()}
        for n, node in nodes.items()
    }
    assert same(exported, before)
    for node_id, node in nodes.items():
        for key, live in node.state_dict().items():
            ours, theirs = exported[node_id][key], before[node_id][key]
            assert ours.device == torch.device("cpu")
            assert (ours.dtype, ours.shape, ours.stride()) == (
                theirs.dtype,
                theirs.shape,
                theirs.stride(),
            )
            assert type(ours) is torch.Tensor and not ours.requires_grad
            assert ours.untyped_storage().data_ptr() != live.untyped_storage().data_ptr()
    assert not exported["odd"]["table"].is_contiguous()  # the view's layout, copied
    store = Store(tmp_path / "store")
    assert store.put_value(exported) == store.put_value(before)  # the same bytes in the store
    with torch.no_grad():
        nodes["linear"].weight.add_(1.0)
        nodes["odd"].table.add_(1.0)
    assert same(exported, before)  # a snapshot: the nodes went on, the export did not


def test_an_export_of_a_parameters_only_node_is_a_copy_too() -> None:
    node = ParametersOnly()
    exported = soma.export({"plain": node})
    assert torch.equal(exported["plain"]["0"], node.weight)
    exported["plain"]["0"].add_(1.0)
    assert torch.equal(node.weight, torch.ones(2, 2))


def test_meta_tensors_are_left_alone() -> None:
    exported = soma.export({"plain": ParametersOnly(device="meta")})
    assert exported["plain"]["0"].device == torch.device("meta")  # no data to bring to CPU


def test_a_load_copies_into_the_nodes_and_shares_nothing_with_the_state() -> None:
    torch.manual_seed(0)
    source, target = nn.Linear(3, 2), nn.Linear(3, 2)
    state = soma.export({"n": source})
    weight = target.weight
    soma.load({"n": target}, state)
    assert target.weight is weight  # the same parameter, its values replaced
    assert torch.equal(target.weight, source.weight)
    state["n"]["weight"].add_(1.0)
    assert torch.equal(target.weight, source.weight)


# --- On a GPU, where there is one ----------------------------------------------------------


@needs_gpu
def test_cuda_and_auto_are_the_first_gpu() -> None:
    assert resolve_device("cuda") == resolve_device("auto") == torch.device("cuda", 0)
    with pytest.raises(DeviceError, match=f"this machine has {torch.cuda.device_count()} GPU"):
        resolve_device(f"cuda:{torch.cuda.device_count()}")


@needs_gpu
@pytest.mark.parametrize("task", TASKS)
def test_a_task_on_the_gpu_trains_there_exports_to_cpu_and_learns_what_cpu_learns(task) -> None:
    on_cpu, on_gpu = load_task(task, {"device": "cpu"}), load_task(task, {"device": "cuda"})
    data = on_cpu.shard(1, 10)
    cpu_nodes, gpu_nodes = on_cpu.nodes(0), on_gpu.nodes(0)
    on_cpu.train(cpu_nodes, data, seed=3)
    on_gpu.train(gpu_nodes, data, seed=3)
    assert devices.where(gpu_nodes) == torch.device("cuda", 0)  # trained in place, there
    exported = soma.export(gpu_nodes)
    assert all(t.device.type == "cpu" for keys in exported.values() for t in keys.values())
    assert close(exported, soma.export(cpu_nodes))
    gpu_metrics, cpu_metrics = on_gpu.evaluate(gpu_nodes), on_cpu.evaluate(cpu_nodes)
    assert gpu_metrics.keys() == cpu_metrics.keys()
    for name, value in gpu_metrics.items():
        assert value == pytest.approx(cpu_metrics[name], rel=1e-3, abs=1e-2)


@needs_gpu
def test_a_cpu_export_loads_into_nodes_on_the_gpu_and_stays_there() -> None:
    torch.manual_seed(0)
    source, target = nn.Linear(3, 2), nn.Linear(3, 2).to("cuda")
    soma.load({"n": target}, soma.export({"n": source}))
    assert target.weight.device.type == "cuda"
    assert torch.equal(target.weight.cpu(), source.weight)


@needs_gpu
def test_a_run_left_on_its_nodes_device_brings_cpu_data_to_them() -> None:
    nodes = {"n": nn.Linear(3, 2).to("cuda")}
    run = TrainingRun(nodes, loss=nn.functional.mse_loss)
    assert run.device == torch.device("cuda", 0)
    run.fit((torch.randn(8, 3), torch.randn(8, 2)))
    assert float(run.evaluate((torch.randn(4, 3), torch.randn(4, 2)))) >= 0


@needs_gpu
@pytest.mark.parametrize(
    ("strategy", "options"), [("fedprox", {"mu": 0.5}), ("scaffold", {})], ids=str
)
def test_a_client_side_strategy_trains_on_the_gpu_against_cpu_exports(strategy, options) -> None:
    results = []
    for device in ("cpu", "cuda"):
        task = digits.make(model="mlp", hidden=8, labels_per_client=3, device=device)
        nodes = task.nodes(0)
        objective = objective_of(
            load_strategy(strategy, options), start=soma.export(nodes), state=None, mine=None
        )
        task.train(nodes, task.shard(1, 4), seed=7, objective=objective)
        results.append(soma.export(nodes))
    assert close(*results)


# --- a GPU of its own per job, in a step that shares its GPUs (issue 53) ----------------------


def step_environment(gpus: str) -> dict[str, str]:
    """A job's environment in a round's step of soma-slurm that holds `gpus`."""
    return {devices.SLOTS_ENV: "1", "CUDA_VISIBLE_DEVICES": gpus, "SLURM_JOB_ID": "7"}


def test_each_job_of_a_step_that_shares_its_gpus_takes_a_different_one(tmp_path):
    """Three train jobs side by side in a step holding GPUs 4, 5 and 6 (as Slurm numbers
    them): each narrows its CUDA_VISIBLE_DEVICES to a GPU none of the others holds; one that
    ends lets its GPU go (the kernel drops its lock), and the next job takes it."""
    env = step_environment("4,5,6")
    taken = [devices.gpu_slot(env, tmp_path) for _ in range(3)]
    assert all(t is not None for t in taken)
    assert sorted(gpu for gpu, _ in taken) == ["4", "5", "6"]  # type: ignore[misc]
    gpu, handle = taken[1]  # type: ignore[misc]
    handle.close()  # the job ended
    again = devices.gpu_slot(env, tmp_path)
    assert again is not None and again[0] == gpu
    for t in (*taken, again):
        t[1].close()  # type: ignore[index]


def test_no_slot_outside_a_shared_step_or_with_one_gpu(tmp_path):
    """Without the executor's mark (a job per submission: Slurm already gave it its own GPU),
    or with one GPU visible, nothing is taken and CUDA_VISIBLE_DEVICES is left as it is."""
    assert devices.gpu_slot({"CUDA_VISIBLE_DEVICES": "0,1"}, tmp_path) is None
    assert devices.gpu_slot(step_environment("3"), tmp_path) is None
    assert devices.gpu_slot(step_environment(""), tmp_path) is None
    assert list(tmp_path.iterdir()) == []
