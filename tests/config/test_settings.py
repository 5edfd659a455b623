"""Each run setting is declared once (soma.config.settings), and everything that names a
setting is held to that declaration: RunSpec's fields, the config schema's blocks,
config/README.md's rows, the command line's options, soma.simulate's keywords, both of
RunSpec's constructors, and the run's identity. A setting added in one place and forgotten in
another fails here, naming the place."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from pathlib import Path

import pytest
import torch
import yaml

import soma
from soma.cli.parser import parser
from soma.config import identity
from soma.config.configs import ConfigRefused
from soma.config.settings import NOT_SETTINGS, SETTINGS
from soma.config.spec import RunSpec
from soma.timing import Timing

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
# The workflow's own keys: where it keeps its store and what its summary reports.
WORKFLOW_ONLY = {"store", "metric", "baselines", "study", "strategy_options"}
# Options that are not a setting of their own: how the process reports (--evaluate), the
# asynchronous setting's parts (--buffer's companions, read into one `asynchronous`), and
# `soma simulate --buffer`'s simulated clock and stop.
PROCESS_ONLY = {"-h", "--help", "--store", "--evaluate"}
PROCESS_ONLY |= {"--staleness", "--staleness-limit", "--server-lr"}
PROCESS_ONLY |= {"--straggling", "--queue", "--trace", "--until", "--target"}

# A value of each setting that changes the run, other than its default: each must change the
# run's meeting (every mode) and, where the workflow has it, the run's declared record.
CHANGED = {
    "clients": 5,
    "task": "soma.tasks.synthetic",
    "task_options": {"examples": 32},
    "strategy": "fedprox",
    "strategy_options": {"lr": 0.5},
    "seed": 1,
    "participation": 2,
    "quorum": 3,
    "drop_unstarted": True,
    "secure": 3,
    "tree": 2,
    "threads": 2,
    "personal": ("out",),
    "transfer": "bfloat16",
}


def _subparser(name: str):
    actions = parser()._subparsers._group_actions[0]  # argparse keeps subcommands here
    return actions.choices[name]


def _options(name: str) -> set[str]:
    return {o for action in _subparser(name)._actions for o in action.option_strings}


def test_every_field_of_the_run_and_of_its_waits_is_one_setting() -> None:
    fields = [s.field for s in SETTINGS]
    assert len(fields) == len(set(fields)), "a setting is declared twice"
    run = {f.name for f in dataclasses.fields(RunSpec)} - set(NOT_SETTINGS)
    assert {s.field for s in SETTINGS if s.of == "run"} == run
    waits = {f.name for f in dataclasses.fields(Timing)} - {"backoff"}  # how polls pace
    assert {s.field for s in SETTINGS if s.of == "timing"} == waits


def test_each_config_key_has_its_block_in_the_schema_and_each_block_a_setting() -> None:
    keys = {s.config.split(".")[0] for s in SETTINGS if s.config is not None}
    properties = set(SCHEMA["properties"])
    assert keys - properties == set(), "settings with no block in config.schema.yaml"
    extra = properties - keys - WORKFLOW_ONLY
    assert extra == set(), "schema blocks no setting declares (soma.config.settings)"


def test_each_config_key_has_its_row_in_the_config_readme() -> None:
    text = (ROOT / "config" / "README.md").read_text()
    missing = [s.config for s in SETTINGS if s.config and f"`{s.config.split('.')[0]}`" not in text]
    assert missing == [], "config keys config/README.md does not describe"


def test_each_default_the_config_readme_names_is_config_yamls() -> None:
    """A row's "(N by default" or "`v` (the default)" is the value config/config.yaml gives
    the key (the README once said clients_per_job 1 by default where the file said 5)."""
    text = (ROOT / "config" / "README.md").read_text()
    default = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    said = {}
    for key, row in re.findall(r"^\| `(\w+)` \|([^\n]*)", text, flags=re.M):
        found = re.search(r"\((\S+) by default|`([^`]+)` \(the default\)", row)
        if found and key in default:
            said[key] = found.group(1) or found.group(2)
    assert {"clients_per_job", "threads"} <= set(said)
    wrong = {k: (v, default[k]) for k, v in said.items() if yaml.safe_load(v) != default[k]}
    assert wrong == {}, "config/README.md's default, config.yaml's"


@pytest.mark.parametrize("command", ["client", "simulate"])
def test_each_option_is_on_the_command_line_and_each_option_a_setting(command: str) -> None:
    options = _options(command)
    wanted = {s.option for s in SETTINGS if s.option is not None}
    if command == "simulate":  # one process hosts every client
        wanted -= {"--mine", "--per-task"}
    assert wanted - options == set(), f"settings `soma {command}` does not take"
    assert options - wanted - PROCESS_ONLY == set(), "options no setting declares"


def test_each_keyword_is_soma_simulates_and_each_keyword_a_setting() -> None:
    keywords = set(inspect.signature(soma.simulate).parameters)
    wanted = {s.keyword for s in SETTINGS if s.keyword is not None}
    assert wanted - keywords == set(), "settings soma.simulate does not take"
    assert keywords - wanted - {"store", "after"} == set(), "keywords no setting declares"


@pytest.mark.parametrize("constructor", ["from_config", "from_args"])
def test_both_constructors_set_every_setting_they_can_be_given(constructor: str) -> None:
    """No default stands in for a setting a config or a command line gives: each is read."""
    source = inspect.getsource(getattr(RunSpec, constructor))
    given = "config" if constructor == "from_config" else "option"
    unread = [
        s.field
        for s in SETTINGS
        if s.of == "run" and getattr(s, given) is not None and f"{s.field}=" not in source
    ]
    assert unread == [], f"RunSpec.{constructor} leaves these settings at their defaults"


def _spec(**changed) -> RunSpec:
    return RunSpec(
        **{"run": "r", "task": "soma.tasks.control", "clients": 4, "rounds": 1, **changed}
    )


@pytest.fixture
def fixtures_importable(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "fixtures"))


@pytest.mark.parametrize("name", sorted(s.field for s in SETTINGS if s.changes_run))
def test_a_setting_that_changes_the_run_changes_its_meeting(name: str) -> None:
    assert name in CHANGED, f"give {name!r} a changed value in CHANGED"
    plain, changed = _spec().meeting(0, "s" * 64, None), _spec(**{name: CHANGED[name]})
    assert changed.meeting(0, "s" * 64, None).key != plain.key


@pytest.mark.parametrize(
    "name", sorted(s.field for s in SETTINGS if s.changes_run and s.config is not None)
)
def test_a_setting_that_changes_the_run_changes_its_declared_record(name: str) -> None:
    setting = next(s for s in SETTINGS if s.field == name)
    config = {
        "run": "r", "task": "soma.tasks.control", "clients": 4, "seed": 0, "threads": 1,
        "task_options": {}, "strategy": "fedavg", "strategy_options": {},
    }  # fmt: skip
    value = CHANGED[name]
    if name == "secure":
        value = {"threshold": value}
    elif name == "tree":
        value = {"fan_in": value}
    elif name in ("task_options", "strategy_options"):
        value = {config[name.split("_")[0]]: value}
    changed = {**config, setting.config: value}
    assert identity.record(changed)["digest"] != identity.record(config)["digest"]


def test_a_run_of_one_thread_keeps_the_meetings_it_always_had() -> None:
    assert "threads" not in _spec().identity()
    assert _spec(threads=2).identity()["threads"] == 2


def test_clients_train_on_the_run_s_threads_whatever_the_process_has(
    tmp_path, fixtures_importable
) -> None:
    """The count decides a CPU's sums: a run of 2 threads trains on 2 in a process of 1,
    and the process's own count is back after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        done = soma.simulate("threads_task", clients=2, rounds=1, threads=2, store=tmp_path / "s")
        assert {m["threads"] for m in done.rounds[0].metrics.values()} == {2}
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_a_workflow_run_started_again_on_other_threads_is_refused_naming_them(tmp_path) -> None:
    """(Under `soma client`, other threads are another meeting: its clients never meet the
    first run's, as for any setting that changes the run.)"""
    config = {
        "run": "r", "task": "soma.tasks.control", "clients": 4, "seed": 0, "threads": 1,
        "task_options": {}, "strategy": "fedavg", "strategy_options": {},
    }  # fmt: skip
    (tmp_path / identity.RECORD).write_text(json.dumps(identity.record(config)))
    identity.check_recorded(tmp_path, config)
    with pytest.raises(ConfigRefused, match=r"`threads` unset there, 2 here"):
        identity.check_recorded(tmp_path, {**config, "threads": 2})
