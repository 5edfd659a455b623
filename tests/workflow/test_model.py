"""The trained model as one plain file: written by the workflow's rule `model` and by
`soma export`, loaded by plain PyTorch with `torch.nn.ModuleDict(...).load_state_dict`."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import safetensors.torch
import torch
import yaml
from helpers import TINY, refused, soma, soma_processes

from soma.model import ModelError, load_model, read_metadata, save_model
from soma.round import status
from soma.store import Store
from soma.tasks import load_task

torch.set_num_threads(1)


def same(a: dict, b: dict) -> bool:
    """Two exports hold the same nodes, keys, dtypes and values."""
    return list(a) == list(b) and all(
        list(a[n]) == list(b[n])
        and all(a[n][k].dtype == b[n][k].dtype and torch.equal(a[n][k], b[n][k]) for k in a[n])
        for n in a
    )


def flat(export: dict) -> dict[str, torch.Tensor]:
    return {f"{n}.{k}": t for n, keys in export.items() for k, t in keys.items()}


def export(store: Path, run: str, out: Path, *flags: str) -> subprocess.CompletedProcess:
    return soma("export", "--store", str(store), "--run", run, *flags, "-o", str(out))


# --- the workflow ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workflow_run(tiny_run) -> Path:
    """A tiny run (2 clients, 2 rounds; its baselines too), shared read-only: the session's
    (tests/tiny_run.py), test_workflow's and test_progress's."""
    return tiny_run[0]


def tiny_task():
    config = yaml.safe_load(TINY.read_text())
    return load_task(config["task"], config["task_options"][config["task"]])


def receipt(workdir: Path, name: str) -> dict:
    return json.loads((workdir / "results" / "tiny" / name).read_text())


def test_the_workflow_leaves_a_model_plain_pytorch_loads_as_good_as_the_last_evaluation(
    workflow_run,
) -> None:
    path = workflow_run / "results" / "tiny" / "model.safetensors"
    assert (workflow_run / "logs" / "tiny" / "model.log").exists()
    task = tiny_task()
    nodes = torch.nn.ModuleDict(task.nodes(0))
    nodes.load_state_dict(safetensors.torch.load_file(path))  # strict: every key, no other
    evaluation = receipt(workflow_run, "round/1/evaluation.json")
    assert task.evaluate(dict(nodes)) == evaluation["metrics"]
    average = receipt(workflow_run, "round/1/average.json")
    assert average["weights"] == evaluation["weights"]
    metadata = read_metadata(path)
    assert {k: metadata[k] for k in ("run", "round", "weights", "strategy")} == {
        "run": "tiny",
        "round": "1",
        "weights": average["weights"],
        "strategy": "fedavg",
    }
    assert same(load_model(path), Store(workflow_run / "store").recall_digest(average["weights"]))


def test_soma_export_of_round_0_is_the_round_0_average_and_of_the_last_is_the_workflows_model(
    workflow_run, tmp_path
) -> None:
    store = workflow_run / "store"
    ok_ = export(store, "tiny", tmp_path / "round0.safetensors", "--round", "0")
    assert ok_.returncode == 0, ok_.stderr
    weights = receipt(workflow_run, "round/0/average.json")["weights"]
    averaged = Store(store).recall_digest(weights)
    assert same(load_model(tmp_path / "round0.safetensors"), averaged)
    loaded = safetensors.torch.load_file(tmp_path / "round0.safetensors")
    assert loaded.keys() == flat(averaged).keys()
    assert all(torch.equal(loaded[k], t) for k, t in flat(averaged).items())
    # the last round by default: the very bytes the workflow wrote
    assert export(store, "tiny", tmp_path / "last.safetensors").returncode == 0
    model = workflow_run / "results" / "tiny" / "model.safetensors"
    assert (tmp_path / "last.safetensors").read_bytes() == model.read_bytes()


def test_soma_status_shows_each_rounds_evaluation_the_workflow_kept(workflow_run) -> None:
    """The contract with the evaluate job: `{run}/evaluation/{weights}` holds the metrics."""
    done = soma("status", "--store", str(workflow_run / "store"), "--run", "tiny")
    assert done.returncode == 0, done.stderr
    for r, line in enumerate(done.stdout.splitlines()):
        accuracy = receipt(workflow_run, f"round/{r}/evaluation.json")["metrics"]["accuracy"]
        assert line.startswith(f"round {r:>4}:") and f"accuracy {accuracy:.4g}" in line, line


# --- a store written by `soma client` ----------------------------------------------------------


def soma_clients(store: Path, run: str, *flags: str, clients: int = 2, rounds: int = 2) -> list:
    """`soma client` processes of the control task as srun would start them; their lines."""
    args = ["client", "--store", str(store), "--run", run, "--rounds", str(rounds)]
    args += ["--clients", str(clients), "--task", "soma.tasks.control", "--option", "examples=32"]
    clients_ = [str(k) for k in range(clients)]
    return soma_processes([*args, *flags], clients_, timeout=300, every_line=True)


@pytest.fixture(scope="module")
def client_store(tmp_path_factory) -> tuple[Path, list]:
    """Run `ctl` of the control task: 2 clients, 2 rounds, by `soma client` processes."""
    store = tmp_path_factory.mktemp("clients") / "store"
    return store, soma_clients(store, "ctl")


@pytest.mark.slow
def test_soma_export_reads_a_store_soma_client_wrote(client_store, tmp_path) -> None:
    store, outputs = client_store
    rows = status(Store(store), "ctl")
    assert [row["round"] for row in rows] == [0, 1]
    assert export(store, "ctl", tmp_path / "r0.safetensors", "--round", "0").returncode == 0
    weights = Store(store).recall_digest(rows[0]["average"])["weights"]
    assert same(load_model(tmp_path / "r0.safetensors"), Store(store).recall_digest(weights))
    # the last round by default, as good as what every client evaluated at the end
    done = export(store, "ctl", tmp_path / "last.safetensors")
    assert done.returncode == 0, done.stderr
    assert rows[1]["average"] in done.stdout
    task = load_task("soma.tasks.control", {"examples": 32})
    nodes = torch.nn.ModuleDict(task.nodes(0))
    nodes.load_state_dict(safetensors.torch.load_file(tmp_path / "last.safetensors"))
    assert task.evaluate(dict(nodes)) == outputs[0][-1]["evaluation"]


@pytest.mark.slow
def test_what_export_cannot_do_is_refused_in_one_line_naming_the_culprit(
    client_store, tmp_path
) -> None:
    store, _ = client_store
    Store(store).bind("other/round/0/x/about", Store(store).put_value({"clients": 1}))
    out = tmp_path / "model.safetensors"
    line = refused(export(store, "nope", out))
    assert "'nope'" in line and "'ctl'" in line and "'other'" in line
    line = refused(export(store, "ctl", out, "--round", "7"))
    assert "no round 7" in line and "0..1" in line
    line = refused(export(store, "ctl", tmp_path / "missing" / "model.safetensors"))
    assert "no folder" in line and str(tmp_path / "missing") in line
    assert not (tmp_path / "missing").exists()
    line = refused(export(tmp_path / "nostore", "ctl", out))
    assert "no store at" in line and str(tmp_path / "nostore") in line
    assert not (tmp_path / "nostore").exists()
    line = refused(export(store, "ctl", out, "--average", "zz"))
    assert "no average" in line and "'zz'" in line
    assert not out.exists() and os.listdir(tmp_path) == []


@pytest.mark.slow
def test_a_round_with_two_averages_is_refused_listing_them_and_one_is_chosen_by_digest(
    tmp_path,
) -> None:
    store = tmp_path / "store"
    for seed in ("0", "1"):  # one run name, two seeds: two meetings of round 0
        soma_clients(store, "twice", "--seed", seed, clients=1, rounds=1)
    rows = status(Store(store), "twice")
    averages = sorted(row["average"] for row in rows)
    assert len(averages) == 2 and all(averages)
    out = tmp_path / "model.safetensors"
    for flags in ((), ("--round", "0")):
        line = refused(export(store, "twice", out, *flags))
        assert "2 averages" in line and "--average" in line
        assert all(a in line for a in averages)
        assert "(round 0, seed 0," in line and "(round 0, seed 1," in line, "what tells them apart"
    assert not out.exists()
    chosen = averages[1]
    done = export(store, "twice", out, "--average", chosen[:10])
    assert done.returncode == 0, done.stderr
    weights = Store(store).recall_digest(chosen)["weights"]
    assert same(load_model(out), Store(store).recall_digest(weights))
    assert read_metadata(out)["weights"] == weights
    line = refused(export(store, "twice", out, "--round", "0", "--average", ""))
    assert "2 averages" in line and "start with ''" in line


# --- the file itself ---------------------------------------------------------------------------


def weights() -> dict:
    g = torch.Generator().manual_seed(0)
    return {
        "hidden": {"weight": torch.randn(4, 3, generator=g), "bias": torch.randn(4, generator=g)},
        "norm": {"num_batches_tracked": torch.tensor(7), "running_mean": torch.zeros(4)},
        "half": {"w": torch.randn(2, 2, generator=g).half()},
    }


def test_a_model_file_round_trips_exactly_and_is_the_same_bytes_each_time(tmp_path) -> None:
    export_ = {**weights(), "a.b": {"c": torch.ones(2)}, "z": {"x.y": torch.arange(3)}}
    first, second = tmp_path / "1.safetensors", tmp_path / "2.safetensors"
    save_model(export_, first, {"run": "r", "round": 3, "weights": "ab" * 32})
    save_model(export_, second, {"run": "r", "round": 3, "weights": "ab" * 32})
    assert first.read_bytes() == second.read_bytes()
    assert same(load_model(first), export_)  # nodes and keys with dots, in their order
    assert json.loads(read_metadata(first)["tensors"])[-2:] == [["a.b", "c"], ["z", "x.y"]]
    assert read_metadata(first)["round"] == "3"
    assert safetensors.torch.load_file(first).keys() == flat(export_).keys()


def test_two_pairs_that_make_one_name_are_refused_naming_both(tmp_path) -> None:
    path = tmp_path / "model.safetensors"
    clash = {"a.b": {"c": torch.ones(1)}, "a": {"b.c": torch.zeros(1)}}
    with pytest.raises(ModelError, match=r"node 'a\.b' key 'c' and node 'a' key 'b\.c'"):
        save_model(clash, path, {})
    with pytest.raises(ModelError, match="'tensors' is soma's own"):
        save_model(weights(), path, {"tensors": "mine"})
    assert os.listdir(tmp_path) == []


def test_a_failing_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch) -> None:
    import soma.files

    path = tmp_path / "model.safetensors"
    save_model(weights(), path, {"round": 0})
    old = path.read_bytes()

    def full(fd: int, chunk) -> None:
        os.write(fd, bytes(chunk)[:10])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(soma.files, "write_all", full)
    changed = {**weights(), "extra": {"w": torch.ones(100)}}
    with pytest.raises(ModelError, match="No space"):
        save_model(changed, path, {"round": 1})
    assert path.read_bytes() == old and os.listdir(tmp_path) == ["model.safetensors"]
    with pytest.raises(ModelError, match="No space"):
        save_model(changed, tmp_path / "new.safetensors", {"round": 1})
    assert os.listdir(tmp_path) == ["model.safetensors"]


KILLED_WRITER = """
import sys, time, torch
import soma.files, soma.model
write = soma.files.write_all
def slowly(fd, chunk):
    write(fd, chunk)
    print("wrote", flush=True)
    time.sleep(600)
soma.files.write_all = slowly
soma.model.save_model({"n": {"w": torch.ones(1000)}}, sys.argv[1], {"round": 1})
"""


@pytest.mark.slow
def test_a_writer_killed_mid_write_leaves_the_old_file_under_the_final_name(tmp_path) -> None:
    path = tmp_path / "model.safetensors"
    save_model(weights(), path, {"round": 0})
    old = path.read_bytes()
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout.readline() == "wrote\n"
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
    assert path.read_bytes() == old
    assert same(load_model(path), weights())
    left = [name for name in os.listdir(tmp_path) if name != "model.safetensors"]
    assert len(left) == 1 and left[0].startswith(".model.safetensors.")  # a temporary only
