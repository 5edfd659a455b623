"""What a task author is given and told (issue 22, item 4): shards refused under min_size by
client and option, options under a name that is no task refused, `everything(clients)`,
and `--task mytask` found in the working folder as the workflow finds it."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from soma import cli
from soma.config.configs import ConfigRefused
from soma.config.spec import RunSpec
from soma.run import checked
from soma.workflow import told_clients

ROOT = Path(__file__).resolve().parents[2]


def config(**changes) -> dict:
    base = {"run": "r", "task": "soma.tasks.control", "clients": 2, "rounds": 1, "seed": 0}
    return {**base, **changes}


def test_a_one_example_shard_is_refused_naming_the_client_and_the_option() -> None:
    options = {"partition": "dirichlet", "alpha": 0.05}
    spec = RunSpec(run="r", task="soma.tasks.digits", clients=300, rounds=1, task_options=options)
    with pytest.raises(ConfigRefused, match=r"client \d+ would hold 1 example.*min_size=2"):
        checked.checked(spec)


def test_task_options_under_a_name_that_is_no_task_are_refused_not_ignored() -> None:
    typo = config(task_options={"soma.tasks.contrl": {"epochs": 2}})
    with pytest.raises(ConfigRefused, match="`task_options`: options under 'soma.tasks.contrl'"):
        RunSpec.from_config(typo).check()
    other = config(task_options={"soma.tasks.digits": {"epochs": 2}})  # another task's: kept
    RunSpec.from_config(other).check()


def test_everything_is_told_the_client_count_when_it_asks() -> None:
    assert told_clients(lambda clients: None, 7) == {"clients": 7}
    assert told_clients(lambda: None, 7) == {}


def test_soma_client_finds_a_task_in_the_working_folder(tmp_path, monkeypatch, capsys) -> None:
    shutil.copy(ROOT / "examples" / "mytask.py", tmp_path / "mytask_here.py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    argv = ["simulate", "--task", "mytask_here", "--clients", "2", "--rounds", "1"]
    assert cli.main(argv) == 0
    assert "loss" in json.loads(capsys.readouterr().out.splitlines()[-1])["evaluation"]


def test_a_task_found_nowhere_says_to_set_pythonpath(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert cli.main(["simulate", "--task", "nowhere_task", "--clients", "1", "--rounds", "1"])
    assert "PYTHONPATH" in capsys.readouterr().err
