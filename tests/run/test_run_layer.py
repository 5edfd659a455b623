"""The run layer (soma.run): one option rule, one check, one client step, one loop, so that
the same run trains the same bits under the workflow, `soma client` and `soma simulate`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import last_weights, same_bits_in_every_mode
from helpers import soma_env as env

from soma.config import options

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"

# The options as text, the way a user types them; typed_task refuses any other type.
TYPED = {"lr": "1e-1", "halve": "yes", "epochs": "007"}
FLAGS = [f"--option={k}={v}" for k, v in TYPED.items()]


def soma(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "soma.cli", *args],
        cwd=cwd,
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


def run_args(*extra: str) -> list[str]:
    return ["--rounds", "2", "--clients", "2", "--task", "typed_task", *FLAGS, *extra]


def test_a_value_typed_as_text_reads_as_yaml_with_json_numbers() -> None:
    value = options.value
    assert value("1e-1") == 0.1 and value("1E5") == 1e5 and value("-2e3") == -2000.0
    assert value("yes") is True and value("off") is False and value("007") == 7
    assert value("mlp") == "mlp" and value("") is None and value("[1, 2]") == [1, 2]
    assert value("a: b: c") == "a: b: c"  # not YAML: kept as text


@pytest.mark.workflow
def test_the_same_text_trains_the_same_bits_in_the_workflow_soma_client_and_simulate(
    tmp_path,
) -> None:
    """The options handed over as text: by `--option` to soma client and simulate, and by
    Snakemake's `--config` to the workflow."""
    options = ", ".join(f"{k}: {v}" for k, v in TYPED.items())
    workflow = ["task=typed_task", "metric=loss", f"task_options={{typed_task: {{{options}}}}}"]
    same_bits_in_every_mode(tmp_path, run_args(), workflow, name="typed")


@pytest.mark.slow
def test_the_library_simulates_the_same_bits_as_soma_simulate(tmp_path, monkeypatch) -> None:
    import soma as library

    monkeypatch.syspath_prepend(str(FIXTURES))
    simulated = soma("simulate", *run_args(), "--store", "kept", cwd=tmp_path)
    assert simulated.returncode == 0, simulated.stderr
    assert (tmp_path / "kept" / "blobs").is_dir()  # a store given is kept
    done = library.simulate("typed_task", clients=2, rounds=2, task_options=TYPED)
    assert done.weights == last_weights(simulated.stdout)


@pytest.mark.parametrize("command", ["client", "simulate"])
def test_a_tree_with_a_strategy_that_needs_every_update_is_refused_with_nothing_written(
    tmp_path, command, capsys
) -> None:
    from soma.cli import main

    store = tmp_path / "store"
    mine = ["--mine", "0"] if command == "client" else []
    given = ["--store", str(store), "--run", "r", "--rounds", "1", "--clients", "2", *mine]
    given += ["--deadline", "2"]  # were it not refused, client 0 would not wait for client 1
    assert main([command, *given, "--tree", "2", "--strategy", "median"]) == 1
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("soma: --strategy/--tree: "), err
    assert "median" in lines[0] and out == ""
    assert not store.exists()


def test_a_client_that_cannot_take_part_leaves_saying_why_and_stops_a_round_that_needs_it(
    tmp_path,
) -> None:
    from soma.round import Meeting, read_record
    from soma.run.step import CannotTakePart, leave
    from soma.store import Store

    store = Store(tmp_path)
    needed = Meeting("r", 0, 3)
    with pytest.raises(CannotTakePart, match=r"^client 1 cannot take part in round 0 .*: failed"):
        leave(store, needed, 1, "failed: it broke")
    with pytest.raises(CannotTakePart, match=r"quorum below 3 \(e\.g\. --quorum 2, or --config"):
        leave(store, needed, 1, "failed: it broke")  # the way to go on without it
    assert read_record(store, store.resolve(needed.client(1)))["dropped"] == "failed: it broke"
    spared = Meeting("r", 0, 3, quorum=2)
    assert leave(store, spared, 1, "failed: it broke").dropped == "failed: it broke"
    assert read_record(store, store.resolve(spared.client(1)))["dropped"] == "failed: it broke"


@pytest.mark.parametrize("secure", [None, 2], ids=["plain", "secure"])
def test_the_store_s_damage_is_never_a_drop_out_in_either_step(tmp_path, secure) -> None:
    """One drop-out rule (soma.run.step.failed) for the plain and the secure step: a start
    missing from the store is the store's damage, raised naming what repairs it; a task
    that fails is the client's drop-out."""
    from soma.nodes import export
    from soma.round import Meeting
    from soma.run.step import Hosted, StoreDamaged, plain
    from soma.run.step import secure as secure_step
    from soma.store import Store
    from soma.strategies import load_strategy
    from soma.tasks import load_task

    store, task = Store(tmp_path), load_task("soma.tasks.control", {"examples": 8})
    step = plain if secure is None else secure_step
    nodes, data = task.nodes(0), task.shard(0, 3)
    hosted = Hosted(0, data, task.size(data))
    config = {"task": "soma.tasks.control", "options": {"examples": 8}, "seed": 0}
    lost = Meeting("r", 0, 3, start="ab" * 32, quorum=2, secure=secure, config=config)
    with pytest.raises(StoreDamaged, match=r"client 0 cannot train .*soma repair"):
        step(store, lost, task, load_strategy("fedavg"), nodes, hosted)
    assert store.resolve(lost.client(0)) is None  # no drop-out recorded

    class Broken:
        def train(self, nodes, data, *, seed):
            raise RuntimeError("it broke")

    start = store.put_value(export(nodes))
    there = Meeting("r", 1, 3, start=start, quorum=2, secure=secure, config=config)
    if secure is not None:  # a secure client leaves by withdrawing from its session
        from soma.secagg import advertise
        from soma.secagg.round import session_of

        advertise(store, session_of(there), 0)
    done = step(store, there, Broken(), load_strategy("fedavg"), nodes, hosted)
    assert done.dropped == "failed: RuntimeError: it broke"


@pytest.mark.parametrize("secure", [None, 2], ids=["plain", "secure"])
def test_a_store_error_fails_the_client_and_its_own_os_error_drops_it_out(
    tmp_path, secure, monkeypatch
) -> None:
    """Who failed is decided by what failed (soma.run.step.failed): the store refusing a
    read (EACCES, not retried) fails the client with StoreFault naming the store, leaving no
    drop-out and a fault note for its peers; the task's own OSError (its data file missing)
    is its drop-out, its reason the task's error."""
    import errno

    from soma.nodes import export
    from soma.round import Meeting, layout
    from soma.run.step import Hosted, StoreFault, plain
    from soma.run.step import secure as secure_step
    from soma.store import Store
    from soma.store.folder import FolderStore
    from soma.strategies import load_strategy
    from soma.tasks import load_task

    store, task = Store(tmp_path), load_task("soma.tasks.control", {"examples": 8})
    step = plain if secure is None else secure_step
    nodes, data = task.nodes(0), task.shard(0, 3)
    hosted = Hosted(0, data, task.size(data))
    config = {"task": "soma.tasks.control", "options": {"examples": 8}, "seed": 0}
    start = store.put_value(export(nodes))
    meeting = Meeting("r", 0, 3, start=start, quorum=2, secure=secure, config=config)
    if secure is not None:
        from soma.secagg import advertise
        from soma.secagg.round import session_of

        advertise(store, session_of(meeting), 0)
    real = FolderStore.recall_digest

    def refused(self, digest, *, lazy=False):
        if digest == start:
            raise PermissionError(errno.EACCES, "Permission denied", "blobs/" + digest)
        return real(self, digest, lazy=lazy)

    with monkeypatch.context() as planted:
        planted.setattr(FolderStore, "recall_digest", refused)
        with pytest.raises(StoreFault, match=r"client 0 cannot take part in round 0 .*the store "):
            step(store, meeting, task, load_strategy("fedavg"), nodes, hosted)
    assert store.resolve(meeting.client(0)) is None  # no drop-out recorded
    if secure is None:
        assert store.resolve(layout.fault(meeting.prefix, 0, 3)) is not None
    else:
        assert store.resolve(session_of(meeting).name("fault", 0)) is not None

    class Dataless:
        def train(self, nodes, data, *, seed):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", "shard.npz")

    done = step(store, meeting, Dataless(), load_strategy("fedavg"), nodes, hosted)
    assert done.dropped.startswith("failed: FileNotFoundError: "), done.dropped


@pytest.mark.slow
def test_a_simulation_without_a_store_leaves_no_folder(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    done = soma("simulate", "--rounds", "1", "--clients", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.iterdir()) == []


def test_help_shows_every_default() -> None:
    from soma.cli import parser

    commands = parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name, sub in commands.items():
        formatter = sub._get_formatter()
        for action in sub._actions:
            if action.required or not action.option_strings or action.nargs == 0:
                continue  # a flag (--json, --help) is off unless given
            shown = formatter._get_help_string(action)
            assert "default" in shown, f"soma {name} --help: {action.option_strings} {shown!r}"
    client = commands["client"].format_help()
    assert "(default: 3600.0)" in " ".join(client.split()), client


def test_the_same_options_typed_two_ways_are_one_run() -> None:
    from soma.config.identity import declared, digest

    def config(lr, halve):
        return {
            "task": "typed_task",
            "seed": 0,
            "clients": 2,
            "task_options": {"typed_task": {"lr": lr, "halve": halve}},
            "strategy": "fedavgm",
            "strategy_options": {"fedavgm": {"momentum": "9e-1"}},
        }

    text, values = declared(config("1e-1", "yes")), declared(config(0.1, True))
    assert text == values and digest(text) == digest(values)
    assert text["task_options"] == {"lr": 0.1, "halve": True}
    assert text["strategy_options"] == {"momentum": 0.9}
    assert digest(declared(config(0.2, True))) != digest(values)


def test_soma_simulate_takes_a_lease_and_every_claim_on_a_bucket_has_it(bucket) -> None:
    """`soma simulate --lease` reaches each round's averaging (RunSpec.timing), as `soma client
    --lease` and the config key `lease` do; a lease below a second is refused naming it."""
    from s3_bucket import BUCKET

    from soma.cli import main
    from soma.store import Store

    url = f"s3://{BUCKET}/simulate-lease"
    command = ["simulate", "--store", url, "--task", "soma.tasks.control", "--rounds", "2"]
    assert main([*command, "--clients", "2", "--lease", "9"]) == 0
    store = Store(url)
    leases = [name for name in store.bound("simulation/") if name.endswith("/lease")]
    assert len(leases) == 2, leases  # one averaging a round
    assert {store.recall(name)["seconds"] for name in leases} == {9.0}
    assert main([*command, "--clients", "2", "--lease", "0.5"]) == 1
