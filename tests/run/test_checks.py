"""Mistakes caught before the first training job, each naming the config key to change.

The Snakefile checks at parse time what needs no torch (the schema; the task's option names
when the task module declares them; a quorum the sample cannot meet); the `start` job checks
the rest (the task imports and takes its options, the partition for this many clients, the
metric) before any client trains.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import NO_BASELINES, TINY, snakemake

from soma import workflow
from soma.run import checked
from soma.tasks import (
    OptionsRefused,
    TaskError,
    TaskNotFound,
    check_option_names,
    declared_options,
    digits,
    load_task,
)


def trained_nothing(workdir: Path, run: str) -> bool:
    """No train job ran (nor any other job past the start): no round receipt, no round log."""
    return (
        not (workdir / "results" / run / "round").exists()
        and not (workdir / "logs" / run / "round").exists()
    )


def refused(workdir: Path, *config: str, files=(TINY, NO_BASELINES)) -> str:
    """The output of a run that must fail; what it said."""
    result = snakemake(workdir, "--cores", "1", "--config", *config, config=files)
    assert result.returncode != 0, result.stdout[-3000:]
    return result.stdout


# --- parse time: no torch -----------------------------------------------------------------------


def test_the_digits_task_declares_exactly_the_options_it_takes() -> None:
    fields = tuple(f.name for f in dataclasses.fields(digits.DigitsTask) if f.init)
    assert digits.OPTIONS == fields
    assert declared_options("soma.tasks.digits") == fields


def test_declared_options_are_read_without_importing_torch() -> None:
    """What the Snakefile does at parse time: soma.tasks and the check, and no torch."""
    code = (
        "import sys\n"
        "from soma.tasks import check_option_names, declared_options\n"
        "assert declared_options('soma.tasks.digits')\n"
        "check_option_names('soma.tasks.digits', {'epochs': 1})\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_receipts_layout_is_read_without_importing_torch() -> None:
    """The rules spell every receipt's path through soma.workflow.receipts, which the
    Snakefile imports at parse time: neither it nor its package imports torch."""
    code = (
        "import sys\n"
        "from soma.workflow import receipts\n"
        "assert receipts.batch_path('r', '{round}', 1) == 'results/r/round/{round}/batch/1.json'\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_declared_options_never_run_the_module_nor_its_packages(tmp_path) -> None:
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('the package ran')\n")
    (package / "mytask.py").write_text(
        "raise RuntimeError('the module ran')\nOPTIONS = ('epochs', 'lr')\n"
    )
    (tmp_path / "plain.py").write_text("def make(**options): ...\n")
    where = [str(tmp_path)]
    assert declared_options("mypkg.mytask", where) == ("epochs", "lr")
    assert declared_options("plain", where) is None  # declares nothing: nothing checked
    assert declared_options("nosuch.task", where) is None  # left to the start job
    check_option_names("plain", {"anything": 1}, where)
    check_option_names("mypkg.mytask", {"lr": 0.1}, where)
    with pytest.raises(OptionsRefused, match=r"config key `task_options`.*'epochz'.*epochs, lr"):
        check_option_names("mypkg.mytask", {"epochz": 2}, where)


@pytest.mark.slow
def test_a_misspelt_option_is_refused_at_parse_time_naming_the_key(tmp_path) -> None:
    out = refused(tmp_path, 'task_options={"soma.tasks.digits": {"epochz": 2}}')
    assert "config key `task_options`" in out and "'epochz'" in out, out[-3000:]
    assert not (tmp_path / "results").exists() and not (tmp_path / "store").exists()


@pytest.mark.slow
def test_a_quorum_the_sample_cannot_meet_is_refused_at_parse_time(tmp_path) -> None:
    out = refused(tmp_path, "participation=2", "quorum=3")
    said = "quorum must be a count between 1 and 2, not '3' (an integer)"
    assert "`quorum`" in out and said in out, out[-3000:]
    assert not (tmp_path / "results").exists() and not (tmp_path / "store").exists()


# --- the start job: before any client trains ----------------------------------------------------


@pytest.mark.workflow
def test_too_few_clients_for_the_default_partition_fail_the_start_job(tmp_path) -> None:
    """The default run (10 clients holding 2 digits each) with 3 clients leaves 4 digits
    to nobody: refused by the start job, naming both keys, before any train job."""
    result = snakemake(tmp_path, "--cores", "1", "--config", "rounds=2", "clients=3", config=None)
    assert result.returncode != 0
    said = "config keys `clients`/`task_options`"
    assert said in result.stdout, result.stdout[-3000:]
    assert "3 clients holding 2 digits each cover 6 of the 10 digits" in result.stdout
    log = (tmp_path / "logs" / "digits" / "start.log").read_text()
    assert said in log and "Traceback" in log
    assert trained_nothing(tmp_path, "digits")
    assert not (tmp_path / "results" / "digits" / "alone").exists(), "no baseline either"


@pytest.mark.slow
def test_a_metric_the_task_does_not_return_fails_before_any_train_job(tmp_path) -> None:
    out = refused(tmp_path, "metric=acc")
    assert "config key `metric`: the task's evaluate() returns accuracy, loss; not 'acc'" in out
    assert trained_nothing(tmp_path, "tiny")


@pytest.mark.slow
def test_a_wrong_task_or_option_value_fails_before_any_train_job(tmp_path) -> None:
    # a task no module has: at parse time, before any job (soma.config.lookup)
    out = refused(tmp_path / "nosuch", "task=nosuch.task")
    assert "config key `task`: no module 'nosuch.task' can be imported here" in out, out[-3000:]
    assert not (tmp_path / "nosuch" / "logs").exists()
    assert trained_nothing(tmp_path / "nosuch", "tiny")
    for n, (override, said) in enumerate(
        [
            (
                'task_options={"soma.tasks.digits": {"epochs": 0}}',
                "config key `task_options` (under 'soma.tasks.digits')",
            ),
            (
                'task_options={"soma.tasks.digits": {"partition": "byhand"}}',
                "config key `task_options` (under 'soma.tasks.digits')",
            ),
        ]
    ):
        workdir = tmp_path / str(n)
        out = refused(workdir, override)
        assert said in out, (override, out[-3000:])
        assert said in (workdir / "logs" / "tiny" / "start.log").read_text()
        assert trained_nothing(workdir, "tiny"), override


# --- the start job's checks, one at a time ------------------------------------------------------


def config(**changes) -> dict:
    import yaml

    base = yaml.safe_load(TINY.read_text())
    return {**base, "strategy": "fedavg", "strategy_options": {}, **changes}


def test_each_refusal_of_the_start_checks_names_its_key() -> None:
    from soma.config.spec import RunSpec

    def deep(**changes):
        return checked.checked(RunSpec.from_config(config(**changes)))

    with pytest.raises(workflow.ConfigRefused, match=r"^config key `task`: "):
        deep(task="nosuch")
    with pytest.raises(workflow.ConfigRefused, match=r"^config key `task_options` "):
        deep(task_options={"soma.tasks.digits": {"lr": -1}})
    deep()
    with pytest.raises(workflow.ConfigRefused, match=r"^config keys `strategy`/`strategy_opt"):
        deep(
            strategy="soma.strategies.fedadam",
            strategy_options={"soma.strategies.fedadam": {"bogus": 1}},
        )
    with pytest.raises(workflow.ConfigRefused, match=r"^config keys `clients`/`task_options`"):
        deep(clients=1)
    with pytest.raises(workflow.ConfigRefused, match=r"^config key `metric`: .* accuracy, loss"):
        workflow.checked_metrics(config(metric="f1"), {"accuracy": 0.5, "loss": 1.0})
    assert workflow.checked_metrics(config(), {"accuracy": float("nan")}) == {"accuracy": None}


def test_load_task_tells_a_missing_task_from_refused_options(tmp_path, monkeypatch) -> None:
    """Which key to name: `task` when the path names no task, `task_options` when its
    make() refuses them."""
    (tmp_path / "halfdone.py").write_text("def make(**options):\n    return object()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TaskNotFound, match="cannot be imported"):
        load_task("nosuch.task")
    with pytest.raises(TaskNotFound, match="no make"):
        load_task("json")
    with pytest.raises(TaskNotFound, match="lacks nodes"):
        load_task("halfdone")
    with pytest.raises(OptionsRefused, match="epochz"):
        load_task("soma.tasks.digits", {"epochz": 1})
    for options in ({"epochs": 0}, {"device": "nowhere"}):  # the task's own refusals
        with pytest.raises(TaskError) as refusal:
            load_task("soma.tasks.digits", options)
        assert not isinstance(refusal.value, TaskNotFound), options


def test_the_digits_partition_is_checked_for_the_client_count() -> None:
    task = digits.DigitsTask()
    with pytest.raises(TaskError, match="raise labels_per_client to 4 or clients to 5"):
        task.check(3)
    task.check(5)  # 5 clients x 2 digits cover the 10
    digits.DigitsTask(partition="iid").check(3)
    with pytest.raises(TaskError, match="more than the 1347 examples"):
        digits.DigitsTask(partition="iid").check(2000)
