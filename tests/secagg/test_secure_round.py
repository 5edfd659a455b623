"""Secure aggregation in a run: `soma client --secure-aggregation T` (soma.secagg.round)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import communicated, correlated, soma_processes
from helpers import snakemake as run_snakemake
from helpers import soma_clients as workflow_clients

from soma.nodes import export, load
from soma.round import status
from soma.run.simulate import simulate
from soma.secagg.quantize import FixedPoint
from soma.store import Store
from soma.strategies import load_strategy, train_locally
from soma.tasks import load_task
from soma.training import training_seed

torch.set_num_threads(1)
HERE = Path(__file__).parents[1]
OPTIONS = ["--option", "examples=32"]


def soma_clients(store: Path, groups: list[str], *flags: str, rounds: int = 2) -> list[list[dict]]:
    args = ["client", "--store", str(store), "--run", "sec", "--rounds", str(rounds)]
    # a deadline that outlasts the store's patience and a fault note's grace (soma.timing)
    args += ["--clients", "4", "--deadline", "150", *OPTIONS, "--evaluate", "none", *flags]
    return soma_processes(args, groups)


def weights_of(store: Path, digest: str) -> dict:
    return Store(store).recall_digest(digest)


def trained_exports(store: Store, start: str) -> dict[int, dict]:
    """Each client's round-0 export, trained again here as its process trained it."""
    task = load_task("soma.tasks.control", {"examples": 32})
    strategy = load_strategy("fedavg")
    out = {}
    for k in range(4):
        nodes = task.nodes(0)
        load(nodes, store.recall_digest(start))
        train_locally(
            strategy, task, nodes, task.shard(k, 4), seed=training_seed(0, 0, k), state=None,
            mine=None,
        )  # fmt: skip
        out[k] = export(nodes)
    return out


@pytest.fixture(scope="module")
def secure_run(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("secure")
    secure = soma_clients(base / "secure", ["0-1", "2-3"], "--secure-aggregation", "3")
    return {"base": base, "secure": secure}


@pytest.fixture(scope="module")
def runs(secure_run) -> dict:
    """The secure run and the plain one it is compared with (a test that reads only the
    secure store, e.g. a mutant's catcher, does not wait for the plain run). The plain run's
    four clients in one process: the bits of a process each (tests/round/test_scale.py)."""
    plain = soma_clients(secure_run["base"] / "plain", ["0-3"])
    return {**secure_run, "plain": plain}


@pytest.mark.slow
def test_the_secure_average_is_fedavg_within_the_quantization_bound(runs) -> None:
    base = runs["base"]
    for r in range(2):
        (plain,) = {line[r]["weights"] for line in runs["plain"]}
        (secure,) = {line[r]["weights"] for line in runs["secure"]}
        a, b = weights_of(base / "plain", plain), weights_of(base / "secure", secure)
        for node in a:
            for key in a[node]:
                # round 0 within the fixed point's step; round 1 started from other bits
                torch.testing.assert_close(b[node][key], a[node][key], atol=1e-5, rtol=1e-4)
    rows = status(Store(base / "secure"), "sec")
    record = Store(base / "secure").recall_digest(rows[0]["average"])
    assert record["secure"]["threshold"] == 3
    assert record["inputs"] == [{"client": k, "secure": True} for k in range(4)]
    assert rows[0]["written"] == [0, 1, 2, 3], "status sees who took part"


def test_no_blob_in_a_secure_runs_store_is_or_correlates_with_a_clients_export(
    secure_run,
) -> None:
    store = Store(secure_run["base"] / "secure")
    record = store.recall_digest(status(store, "sec")[0]["average"])
    exports = trained_exports(store, record["start"])
    published = {
        row["average"] and store.recall_digest(row["average"])["secure"]["sum"]
        for row in status(store, "sec")
    }
    fixed, compared = FixedPoint(), 0
    for path in sorted((store.directory / "blobs").rglob("*")):
        if not path.is_file() or path.name in published:
            continue
        try:
            tensors = store.get_tensors(path.name)
        except Exception:  # noqa: BLE001 - a JSON record, not tensors
            continue
        for tensor in tensors.values():
            array = tensor.numpy().reshape(-1)
            array = fixed.decode(array) if array.dtype == fixed.dtype else array.astype(float)
            for k, theirs in exports.items():
                for node, keys in theirs.items():
                    for key, t in keys.items():
                        target = t.double().numpy().reshape(-1)
                        if array.size != target.size:
                            continue
                        compared += 1
                        where = f"blob {path.name} and client {k}'s {node}.{key}"
                        assert not np.allclose(array, target, atol=1e-6, rtol=0), where
                        if tensor.dtype == torch.uint64:
                            r = correlated(array, target)
                            assert r is None, f"{where}: r = {r:.3f}"
    assert compared > 50, "the scan compared what it was meant to"


@pytest.mark.slow
def test_a_strategy_that_needs_every_update_is_refused_with_secure_aggregation(tmp_path) -> None:
    command = [sys.executable, "-m", "soma.cli", "client", "--store", str(tmp_path / "s")]
    command += ["--run", "r", "--rounds", "1", "--clients", "4", "--mine", "0"]
    command += ["--secure-aggregation", "3", "--strategy", "median"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("soma: --strategy/--secure-aggregation: strategy 'median'")
    assert "needs every client's update" in done.stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
def test_a_client_that_drops_out_after_sharing_is_unmasked_without_it(tmp_path) -> None:
    task = ["--task", "diverging", "--option", "bad_client=1"]
    command = [sys.executable, str(HERE / "round_worker.py"), "client", "--store", str(tmp_path)]
    command += ["--run", "sec", "--rounds", "1", "--clients", "4", "--deadline", "600"]
    command += [*OPTIONS, *task, "--evaluate", "none", "--secure-aggregation", "3"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE / "fixtures"), *sys.path]))
    running = [
        subprocess.Popen(
            [*command, "--mine", mine], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env,
        )
        for mine in ("0-1", "2-3")
    ]  # fmt: skip
    outputs = communicated(running, 300, fail_fast=True)
    for p, (_, err) in zip(running, outputs, strict=True):
        assert p.returncode == 0, err
    assert "client 1 drops out of round 0" in outputs[0][1]
    (row,) = status(Store(tmp_path), "sec")
    record = Store(tmp_path).recall_digest(row["average"])
    assert [i["client"] for i in record["inputs"]] == [0, 2, 3]
    assert record["left_out"] == [{"client": 1, "why": "dropped out after sharing its keys"}]


# --- the workflow -----------------------------------------------------------------------------

ROOT = HERE.parent


def snakemake(workdir: Path, *config: str, umask: int = -1) -> None:
    """Run `sec` up to round 1's evaluation: its summary and model are the tiny run's to make."""
    target = "results/sec/round/1/evaluation.json"
    configs = [HERE / "fixtures/tiny.yaml", HERE / "fixtures/no-baselines.yaml"]
    arguments = ["--cores", "2", target, "--config", "clients=3", *config]
    done = run_snakemake(workdir, *arguments, config=configs, timeout=900, umask=umask)
    assert done.returncode == 0, done.stdout[-4000:]


@pytest.mark.workflow
def test_the_workflow_under_secure_aggregation_trains_fedavg_within_the_bound(tmp_path) -> None:
    # under umask 000: the secrets are 0700/0600 on purpose, the receipts as the umask says
    secure = f"secure_aggregation={{threshold: 2, secrets: '{tmp_path}/secrets/{{client}}'}}"
    snakemake(tmp_path / "secure", "run=sec", secure, umask=0)
    declared = json.loads((tmp_path / "secure/results/sec/run.json").read_text())["declared"]
    # the plain run of the same config, in this process: the workflow's plain bits are
    # simulate's (tests/run/test_run_layer.py), made here without a second snakemake's jobs
    plain_store = tmp_path / "plain" / "store"
    plain_run = simulate(
        declared["task"], clients=3, rounds=2, seed=declared["seed"], run="sec",
        task_options=declared["task_options"], strategy=declared["strategy"],
        strategy_options=declared["strategy_options"], store=plain_store,
    )  # fmt: skip
    assert len(plain_run.rounds) == 2
    for r, done in enumerate(plain_run.rounds):
        receipt = json.loads((tmp_path / f"secure/results/sec/round/{r}/average.json").read_text())
        plain = Store(plain_store).recall_digest(done.record["weights"])
        secure = Store(tmp_path / "secure" / "store").recall_digest(receipt["weights"])
        for node in plain:
            for key in plain[node]:
                torch.testing.assert_close(
                    secure[node][key], plain[node][key], atol=1e-5, rtol=1e-4
                )
        assert receipt["inputs"] == [{"client": k, "secure": True} for k in range(3)]
    folders = sorted((tmp_path / "secrets").iterdir())
    assert [p.name for p in folders] == ["0", "1", "2"], "a folder a client"
    assert {p.stat().st_mode & 0o777 for p in folders} == {0o700}
    assert [p for f in folders for p in f.iterdir()] == [], "deleted at each client's reveal"
    assert not (tmp_path / "secure/private").exists()
    start_log = (tmp_path / "secure/logs/sec/start.log").read_text()
    assert "protects the clients' exports from readers of the store only" in start_log
    receipts = (tmp_path / "secure/results/sec/round").rglob("*.json")
    assert {p.stat().st_mode & 0o777 for p in receipts} == {0o666}
    store = Store(tmp_path / "secure" / "store")
    for name in store.bound("sec/round/"):
        if "/client/" in name:
            assert "weights" not in store.recall(name), f"{name} holds a client's weights"
    # the same run under `soma client`, a process a client: its client records are the
    # workflow's, byte for byte (one schema, one writer: soma.secagg.round.keep_secure_record)
    same = [f"--option={k}={json.dumps(v)}" for k, v in declared["task_options"].items()]
    same += [
        f"--strategy-option={k}={json.dumps(v)}" for k, v in declared["strategy_options"].items()
    ]
    workflow_clients(tmp_path / "clients", "sec", "--secure-aggregation", "2", *same, clients=3)
    in_the_workflow = client_records(tmp_path / "secure" / "store")
    assert len(in_the_workflow) == 6  # 3 clients, 2 rounds
    assert client_records(tmp_path / "clients") == in_the_workflow


def client_records(folder: Path) -> dict[str, bytes]:
    """Each client record of run `sec` (`<run>/round/<r>/<meeting>/client/<k>`): its bytes."""
    store = Store(folder)
    client = re.compile(r"sec/round/\d+/[^/]+/client/\d+")
    return {
        n: store.get(store.resolve(n)) for n in store.bound("sec/round/") if client.fullmatch(n)
    }


@pytest.mark.workflow
def test_a_secure_workflow_with_a_strategy_that_needs_every_update_stops_at_the_start(
    tmp_path,
) -> None:
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(ROOT / "Snakefile"),
        "-d",
        str(tmp_path),
    ]
    command += ["--cores", "1", "--configfile", str(HERE / "fixtures/tiny.yaml")]
    command += [str(HERE / "fixtures/no-baselines.yaml"), "--config", "strategy=krum"]
    command += ["secure_aggregation={threshold: 2}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0
    log = (tmp_path / "logs/tiny/start.log").read_text()
    assert "config keys `strategy`/`secure_aggregation`: strategy 'krum' needs every" in log


def test_repair_rebuilds_a_secure_average_from_the_published_sum(secure_run) -> None:
    from soma import health

    store = Store(secure_run["base"] / "secure")
    record = store.recall_digest(status(store, "sec")[0]["average"])
    victim = store.blob_path(record["weights"])
    original = victim.read_bytes()
    victim.chmod(0o644)
    victim.unlink()
    report = health.repair(store)
    assert report.clean, report.lines()
    assert victim.read_bytes() == original


@pytest.mark.slow
def test_distributed_dp_inside_the_secure_sum_is_the_plain_distributed_run(tmp_path) -> None:
    """Each client clips and adds its share of the noise before masking: the averager sees
    only the noisy sum, which is the plain distributed run's mean within the fixed point."""
    dp = ["--strategy", "dp_fedavg", "--strategy-option", "mode=distributed"]
    dp += ["--strategy-option", "clients_per_round=4", "--strategy-option", "seed=7"]
    dp += ["--strategy-option", "noise=reproducible_not_private"]  # the same noise in both
    dp += ["--strategy-option", "noise_multiplier=0.5", "--strategy-option", "clip=0.5"]
    plain = soma_clients(tmp_path / "plain", ["0-3"], *dp)
    secure = soma_clients(tmp_path / "secure", ["0-1", "2-3"], *dp, "--secure-aggregation", "3")
    for r in range(2):
        a = weights_of(tmp_path / "plain", plain[0][r]["weights"])
        b = weights_of(tmp_path / "secure", secure[0][r]["weights"])
        for node in a:
            for key in a[node]:
                torch.testing.assert_close(b[node][key], a[node][key], atol=1e-5, rtol=1e-4)
    spent = [row["privacy"] for row in status(Store(tmp_path / "secure"), "sec")]
    assert [s["round"] for s in spent] == [1, 2] and spent[1]["epsilon"] == math.inf


@pytest.mark.slow
def test_adaptive_clipping_is_refused_with_secure_aggregation(tmp_path) -> None:
    command = [sys.executable, "-m", "soma.cli", "client", "--store", str(tmp_path / "s")]
    command += ["--run", "r", "--rounds", "1", "--clients", "4", "--mine", "0"]
    command += ["--secure-aggregation", "3", "--strategy", "dp_fedavg"]
    for option in ("mode=distributed", "clients_per_round=4", 'adaptive={"count_noise": 1}'):
        command += ["--strategy-option", option]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "needs every client's update" in done.stderr


def test_a_secure_round_on_a_bucket_claims_with_the_configured_lease(bucket) -> None:
    """Both claims of a secure round, the unmasking's and the averaging's, come with the lease
    the run was given (not soma.timing.LEASE), as a plain round's averaging does."""
    from s3_bucket import BUCKET

    import soma

    url = f"s3://{BUCKET}/secure-lease"
    soma.simulate(
        "soma.tasks.control", clients=3, rounds=1, secure_aggregation=2, store=url, lease=7
    )
    store = Store(url)
    leases = [name for name in store.bound("simulation/") if name.endswith("/lease")]
    places = {name.rsplit("/", 2)[0] for name in leases}
    assert len(places) >= 2, leases  # the unmasking and the averaging each claimed one
    assert {name: store.recall(name)["seconds"] for name in leases} == dict.fromkeys(leases, 7.0)
