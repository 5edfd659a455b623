"""The adapters task trains the same bits under the workflow, `soma client` and `soma
simulate`; the workflow's start job keeps the base once and names it in its receipts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import same_bits_in_every_mode

pytest.importorskip("peft")

from soma.model import read_metadata  # noqa: E402
from soma.run.base import digest_of  # noqa: E402
from soma.tasks import load_task  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))

from test_adapters import tiny_base  # noqa: E402

TASK = "soma.tasks.adapters"
OPTIONS = {"base": "base.safetensors", "plays": "[macbeth]", "max_windows": 4, "test_windows": 20}
FLAGS = [f"--option={k}={v}" for k, v in OPTIONS.items()]


@pytest.mark.workflow
def test_the_adapters_task_trains_the_same_bits_in_every_mode(tmp_path) -> None:
    tiny_base(tmp_path / "base.safetensors")
    given = {**OPTIONS, "base": str(tmp_path / "base.safetensors"), "plays": ["macbeth"]}
    digest = digest_of(load_task(TASK, given), 0)
    run = ["--rounds", "2", "--clients", "2", "--task", TASK, *FLAGS]
    options = ", ".join(f"{k}: {v}" for k, v in OPTIONS.items())
    workflow = [f"task={TASK}", "metric=accuracy", f"task_options={{{TASK}: {{{options}}}}}"]
    # both clients in one train job a round: every job imports peft, and a batch trains the
    # bits of a job per client (tests/round/test_scale.py)
    workflow.append("clients_per_job=2")
    # the workflow where the base is, as the clients: `base` is a path relative to it
    _, results = same_bits_in_every_mode(
        tmp_path, run, workflow, name="adapters", workdir=tmp_path, target="model.safetensors"
    )
    average = json.loads((results / "round" / "1" / "average.json").read_text())
    # the base: named by the start job's receipt and run.json, every receipt after, the model
    assert json.loads((results / "run.json").read_text())["base"] == digest
    assert json.loads((results / "start.json").read_text())["base"] == digest
    assert average["base"] == digest
    assert read_metadata(results / "model.safetensors")["base"] == digest
