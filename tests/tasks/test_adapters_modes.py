"""The adapters task trains the same bits under the workflow, `soma client` and `soma
simulate`; the workflow's start job keeps the base once and names it in its receipts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("peft")

from soma.model import read_metadata  # noqa: E402
from soma.run.base import digest_of  # noqa: E402
from soma.tasks import load_task  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(Path(__file__).parent))

from test_adapters import tiny_base  # noqa: E402

TASK = "soma.tasks.adapters"
OPTIONS = {"base": "base.safetensors", "plays": "[macbeth]", "max_windows": 4, "test_windows": 20}
FLAGS = [f"--option={k}={v}" for k, v in OPTIONS.items()]


def env() -> dict[str, str]:
    import os

    environ = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    environ.pop("SLURM_PROCID", None)
    return environ


def last_weights(out: str) -> str:
    rounds = [json.loads(line) for line in out.splitlines() if '"round"' in line]
    return rounds[-1]["weights"]


@pytest.mark.workflow
def test_the_adapters_task_trains_the_same_bits_in_every_mode(tmp_path) -> None:
    tiny_base(tmp_path / "base.safetensors")
    given = {**OPTIONS, "base": str(tmp_path / "base.safetensors"), "plays": ["macbeth"]}
    digest = digest_of(load_task(TASK, given), 0)
    run = ["--rounds", "2", "--clients", "2", "--task", TASK, *FLAGS]
    command = [sys.executable, "-m", "soma.cli", "client", "--store", "store", "--run", "a"]
    processes = [
        subprocess.Popen(
            [*command, *run, "--mine", str(k)],
            cwd=tmp_path,
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(2)
    ]
    outs = []
    for process in processes:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err
        outs.append(out)
    by_client = {last_weights(out) for out in outs}
    assert len(by_client) == 1
    simulated = subprocess.run(
        [sys.executable, "-m", "soma.cli", "simulate", *run],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert simulated.returncode == 0, simulated.stderr
    assert {last_weights(simulated.stdout)} == by_client
    options = ", ".join(f"{k}: {v}" for k, v in OPTIONS.items())
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path)]
        + ["--configfile", str(FIXTURES / "tiny.yaml"), str(FIXTURES / "no-baselines.yaml")]
        + ["--cores", "1", "--config", "run=adapters", f"task={TASK}", "metric=accuracy"]
        + [f"task_options={{{TASK}: {{{options}}}}}"],
        env=env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    results = tmp_path / "results" / "adapters"
    average = json.loads((results / "round" / "1" / "average.json").read_text())
    assert {average["weights"]} == by_client
    # the base: named by the start job's receipt and run.json, every receipt after, the model
    assert json.loads((results / "run.json").read_text())["base"] == digest
    assert json.loads((results / "start.json").read_text())["base"] == digest
    assert average["base"] == digest
    assert read_metadata(results / "model.safetensors")["base"] == digest
