"""Mistakes a dry run can see, refused when the Snakefile is read, in one line naming the
config key: a task option of a type the task declares otherwise (soma.config.task_options),
a store folder this process cannot make or write (soma.config.stores.unwritable_folder); and
what the workflow reads at parse time besides (soma.workflow.configuring, dry_run). In
process; the dry runs themselves are tests/workflow/test_catalogue_layout.py's."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from soma.config.identity import check_recorded, record
from soma.config.spec import RunSpec
from soma.config.stores import unwritable_folder
from soma.errors import SomaError
from soma.tasks import TaskNotFound, declared_option_types, load_task
from soma.workflow import dry_run
from soma.workflow.configuring import DEPLOYED, config_files, read_config

ROOT = Path(__file__).resolve().parents[2]


def spec(**given) -> RunSpec:
    return RunSpec(**{"run": "r", "task": "soma.tasks.digits", "clients": 2, "rounds": 1, **given})


def test_the_digits_task_declares_its_option_types_read_without_running_it() -> None:
    types = declared_option_types("soma.tasks.digits")
    assert types["epochs"] == ("int", False) and types["lr"] == ("float", False)
    assert types["partition"] == ("str", False)
    assert declared_option_types("soma.tasks.shakespeare")["max_windows"] == ("int", True)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"epochs": "two"}, "option 'epochs' of task 'soma.tasks.digits' must be an integer, "
                            "not 'two' (text)"),
        ({"epochs": 2.5}, "must be an integer, not '2.5' (a number)"),
        ({"lr": True}, "option 'lr' of task 'soma.tasks.digits' must be a number, not 'true'"),
        ({"model": 3}, "option 'model' of task 'soma.tasks.digits' must be text, not '3'"),
    ],
)  # fmt: skip
def test_a_task_option_of_the_wrong_type_is_refused_naming_the_key(options, said) -> None:
    with pytest.raises(SomaError, match="^config key `task_options`: ") as refused:
        spec(task_options=options).check()
    assert said in str(refused.value) and "\n" not in str(refused.value)


def test_a_task_option_of_the_declared_type_passes() -> None:
    # an integer for a float, null where the field allows it, text read as YAML reads it
    spec(task_options={"lr": 1, "epochs": 3, "model": "mlp"}).check()
    spec(task="soma.tasks.shakespeare", task_options={"max_windows": None}).check()
    # on soma's command line, the refusal names the flag
    with pytest.raises(SomaError, match="^--option: option 'epochs'"):
        spec(task_options={"epochs": "two"}, given="args").check()


def test_a_store_that_cannot_be_made_or_written_is_said_in_one_line(tmp_path) -> None:
    assert unwritable_folder(tmp_path / "store") is None  # a new one, made where it can be
    assert unwritable_folder(tmp_path) is None  # one that is there
    assert unwritable_folder("s3://bucket/store") is None  # a bucket: its first request says
    said = unwritable_folder("/proc/x")
    assert said.startswith("store /proc/x cannot be made in /proc") and "\n" not in said
    (tmp_path / "file").write_text("")
    said = unwritable_folder(tmp_path / "file" / "store")
    assert said == f"store {tmp_path / 'file' / 'store'}: {tmp_path / 'file'} is not a folder; " + (
        "give a store folder"
    )
    assert sorted(os.listdir(tmp_path)) == ["file"], "the probe leaves nothing behind"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes where the permissions say no")
def test_a_folder_without_write_permission_is_said_naming_the_user(tmp_path) -> None:
    (tmp_path / "ro").mkdir(mode=0o555)
    said = unwritable_folder(tmp_path / "ro" / "store")
    assert said.startswith(f"store {tmp_path}/ro/store: user ") and "may not write" in said


def test_a_task_whose_own_import_fails_is_not_told_about_pythonpath(tmp_path, monkeypatch) -> None:
    (tmp_path / "ownimport_task.py").write_text("import nosuchlib_of_the_task\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TaskNotFound) as found:
        load_task("ownimport_task")
    said = str(found.value)
    assert "was found, and its own import failed: No module named 'nosuchlib_of_the_task'" in said
    assert "PYTHONPATH" not in said
    with pytest.raises(TaskNotFound, match="needs its folder on PYTHONPATH"):
        load_task("nosuch_module_anywhere")


def test_a_results_folder_of_another_config_says_what_becomes_of_the_stores_run(tmp_path) -> None:
    default = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config = {**default, "run": "tiny", "store": "store"}
    (tmp_path / "run.json").write_text(json.dumps(record(config)))
    with pytest.raises(SomaError) as refused:
        check_recorded(tmp_path, {**config, "seed": 1})
    said = str(refused.value)
    assert f"remove {str(tmp_path)!r} first" in said
    assert "store 'store' keeps that run's rounds" in said
    assert "`soma status --store store --run tiny`" in said


def test_a_working_folder_of_its_own_config_is_read_over_the_repositorys(
    tmp_path, monkeypatch
) -> None:
    """The catalogue's layout: a deployed workflow's (or .test/'s) config/config.yaml."""
    workflow = ROOT / "workflow"
    monkeypatch.chdir(tmp_path)
    assert config_files(workflow) == [workflow.parent / "config" / "config.yaml"]
    (tmp_path / "config").mkdir()
    (tmp_path / DEPLOYED).write_text("rounds: 2\n")
    assert config_files(workflow) == [workflow.parent / "config" / "config.yaml", DEPLOYED]
    monkeypatch.chdir(workflow.parent)  # the checkout itself: its file once
    assert config_files(workflow) == [workflow.parent / "config" / "config.yaml"]


def _workflow(dry: bool, forceall: bool = False) -> SimpleNamespace:
    return SimpleNamespace(dryrun=dry, dag_settings=SimpleNamespace(forceall=forceall))


def test_a_dry_run_of_a_finished_run_says_how_to_see_its_dag(tmp_path) -> None:
    made = tmp_path / "made"
    made.write_text("")
    hint = dry_run.finished_hint(_workflow(True), [str(made)])
    assert "snakemake -n -F" in hint and "--dag | dot -Tsvg > dag.svg" in hint
    assert dry_run.finished_hint(_workflow(False), [str(made)]) is None  # a run: no word
    assert dry_run.finished_hint(_workflow(True, forceall=True), [str(made)]) is None
    assert dry_run.finished_hint(_workflow(True), [str(made), str(tmp_path / "no")]) is None


def test_the_snakefiles_config_reader_refuses_an_unwritable_store(tmp_path) -> None:
    """soma.workflow.configuring.read_config, as the Snakefile calls it at parse time."""
    default = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    workflow = SimpleNamespace(
        modifier=SimpleNamespace(skip_configfile=False, skip_validation=False),
        config_settings=SimpleNamespace(config_args=["store=/proc/x"]),
    )
    schema = ROOT / "workflow" / "schemas" / "config.schema.yaml"
    with pytest.raises(SomaError, match="^config key `store`: store /proc/x cannot be made"):
        read_config({**default, "store": "/proc/x"}, workflow, schema)
    workflow.config_settings.config_args = [f"store={tmp_path / 's'}", "rounds=3"]
    read = read_config({**default, "store": str(tmp_path / "s"), "rounds": 3}, workflow, schema)
    assert read["store"] == str(tmp_path / "s") and read["run"] == "digits"
    assert not (tmp_path / "s").exists(), "a parse makes no store"
