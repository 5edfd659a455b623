"""The seams a user builds on: the strategy base class and its hooks, the registry of
built-ins against the workflow's schema and config, the task protocol and its example."""

from __future__ import annotations

import textwrap

import pytest
import torch

import soma
from soma.strategies import (
    Strategy,
    StrategyError,
    at_round,
    has_own,
    hook,
    load_strategy,
    needs_previous,
    objective_of,
    privacy_of,
    takes_mean,
    uniform,
)
from soma.timing import LEASE

torch.set_num_threads(1)


def net(value: float) -> dict:
    return {"fc": {"w": torch.tensor([value])}}


# --- the base class: every hook declared, with its default --------------------------------------


class OnlyAggregate:
    """A strategy that does not subclass Strategy (duck typing): aggregate alone."""

    def aggregate(self, previous, updates, state, *, clients):
        return soma.fedavg([u.weights for u in updates]), None


def test_a_plain_object_gets_the_bases_defaults_for_every_hook() -> None:
    plain = OnlyAggregate()
    assert not needs_previous(plain) and not uniform(plain) and not takes_mean(plain)
    assert objective_of(plain, start=net(0), state=None, mine=None) is None
    assert hook(plain, "check")([], clients=1) is None
    assert not has_own(plain, "check_state") and not has_own(plain, "privacy_spent")
    assert privacy_of("plain", plain, lambda: pytest.fail("state read for nothing")) is None
    with pytest.raises(AttributeError):
        hook(plain, "needs_previus")  # a hook nobody declared is an error, not a default


def test_each_built_in_subclasses_the_base_and_declares_what_it_has() -> None:
    from soma.strategies import BUILTIN

    for name in BUILTIN:
        options = {"mode": "distributed", "clients_per_round": 2} if name == "dp_fedavg" else {}
        assert isinstance(load_strategy(name, options), Strategy), name
    assert takes_mean(load_strategy("fedadam")) and needs_previous(load_strategy("fedadam"))
    assert not takes_mean(load_strategy("median")) and not needs_previous(load_strategy("median"))
    distributed = load_strategy("dp_fedavg", {"mode": "distributed", "clients_per_round": 2})
    assert uniform(distributed) and takes_mean(distributed)
    assert has_own(load_strategy("dp_fedavg"), "privacy_spent")
    assert not has_own(load_strategy("fedavg"), "privacy_spent")


MYDP = '''
"""A user's own accounting strategy: FedAvg that says it spent 0.5 epsilon a round."""
from soma.aggregate import fedavg
from soma.strategies import Strategy


class Counting(Strategy):
    def __init__(self, answer="good"):
        self.answer = answer

    def aggregate(self, previous, updates, state, *, clients):
        done = 0 if state is None else state["rounds"]
        return fedavg([u.weights for u in updates]), {"rounds": done + 1}

    def privacy_spent(self, state):
        if self.answer == "bad":
            return {"epsilon": "a lot"}
        return {"epsilon": 0.5 * state["rounds"], "delta": 1e-6, "round": state["rounds"]}


def make(answer="good"):
    return Counting(answer)
'''


def test_a_users_own_strategy_reports_its_privacy_in_soma_status(tmp_path, monkeypatch) -> None:
    from soma.round import Meeting, average_round, contribute, status

    (tmp_path / "mydp.py").write_text(textwrap.dedent(MYDP))
    monkeypatch.syspath_prepend(str(tmp_path))
    store = soma.Store(tmp_path / "store")
    start, state = store.put_value(net(0)), None
    for r in range(2):
        meeting = Meeting("mine", r, 1, start=start, state=state, strategy="mydp")
        contribute(store, meeting, net(r + 1), mine=0, size=1)
        record = store.recall_digest(average_round(store, meeting, deadline=5, lease=LEASE))
        start, state = record["weights"], record["state"]
    assert [row["privacy"] for row in status(store, "mine")] == [None, None], "never imported"
    spent = [row["privacy"] for row in status(store, "mine", trusted={"mydp"})]
    assert spent == [
        {"epsilon": 0.5, "delta": 1e-6, "round": 1},
        {"epsilon": 1.0, "delta": 1e-6, "round": 2},
    ]
    bad = load_strategy("mydp", {"answer": "bad"})
    with pytest.raises(StrategyError, match=r"strategy 'mydp': privacy_spent\(\) returned"):
        privacy_of("mydp", bad, lambda: {"rounds": 1})


ROUNDED = '''
"""A user's strategy whose result says which round and seed it was bound to."""
import torch
from soma.strategies import Strategy


class Rounded(Strategy):
    def __init__(self, round=None, seed=None):
        self.round, self.seed = round, seed

    def for_round(self, *, round, seed):
        return Rounded(round, seed)

    def aggregate(self, previous, updates, state, *, clients):
        list(updates)
        return {"fc": {"w": torch.tensor([float(self.round), float(self.seed or -1)])}}, None


def make():
    return Rounded()
'''


def test_the_round_binds_the_strategy_to_its_round_and_the_runs_seed(tmp_path, monkeypatch) -> None:
    from soma.round import Meeting, average_round, contribute

    (tmp_path / "rounded.py").write_text(textwrap.dedent(ROUNDED))
    monkeypatch.syspath_prepend(str(tmp_path))
    store = soma.Store(tmp_path / "store")
    for r, config, wanted in [(0, {"seed": 11}, [0.0, 11.0]), (3, {}, [3.0, -1.0])]:
        meeting = Meeting("mine", r, 1, strategy="rounded", config=config)
        contribute(store, meeting, net(1.0), mine=0, size=1)
        record = store.recall_digest(average_round(store, meeting, deadline=5, lease=LEASE))
        assert store.recall_digest(record["weights"])["fc"]["w"].tolist() == wanted
    plain = OnlyAggregate()
    assert at_round(plain, round=1, seed=2) is plain  # without its own: the strategy itself


# --- the registry of built-ins, the schema and the capability lists -----------------------------


def disagreements(schema: dict) -> list[str]:
    """Where the workflow's schema and the registry of built-ins (soma.strategies.BUILTIN)
    disagree: a name in one and not the other (the `strategy` enum, the `strategy_options`
    blocks), or a block whose options are not the names its make() takes."""
    import copy
    import inspect

    from soma.strategies import BUILTIN, module_of

    schema = copy.deepcopy(schema)
    found = []
    registry = set(BUILTIN)
    enum = set(next(a["enum"] for a in schema["properties"]["strategy"]["anyOf"] if "enum" in a))
    blocks = schema["properties"]["strategy_options"]["properties"]
    for what, names in (("the strategy enum", enum), ("the strategy_options blocks", set(blocks))):
        found += [f"{n}: a built-in missing from {what}" for n in sorted(registry - names)]
        found += [f"{n}: in {what} but not a built-in" for n in sorted(names - registry)]
    for name in sorted(registry & set(blocks)):
        block = blocks[name]
        if "$ref" in block:
            block = schema["$defs"][block["$ref"].rsplit("/", 1)[1]]
        make = __import__(module_of(name), fromlist=["make"]).make
        taken = set(inspect.signature(make).parameters)
        allowed = set(block.get("properties", {}))
        if allowed != taken or block.get("additionalProperties", True):
            found.append(
                f"{name}: its block allows {sorted(allowed)} (and refuses the rest: "
                f"{block.get('additionalProperties') is False}), make() takes {sorted(taken)}"
            )
    return found


def schema() -> dict:
    import yaml

    root = __import__("pathlib").Path(__file__).resolve().parent.parent
    return yaml.safe_load((root / "workflow" / "schemas" / "config.schema.yaml").read_text())


def test_the_registry_of_built_ins_and_the_workflows_schema_agree() -> None:
    assert disagreements(schema()) == []


def test_the_comparison_tells_a_strategy_missing_from_the_schema() -> None:
    """The test above can fail: a schema without krum's block, or without it in the enum,
    or with a block that forgets an option, is reported by name."""
    without_block = schema()
    del without_block["properties"]["strategy_options"]["properties"]["krum"]
    assert disagreements(without_block) == [
        "krum: a built-in missing from the strategy_options blocks"
    ]
    without_name = schema()
    for alternative in without_name["properties"]["strategy"]["anyOf"]:
        if "enum" in alternative:
            alternative["enum"].remove("krum")
    assert disagreements(without_name) == ["krum: a built-in missing from the strategy enum"]
    short = schema()
    del short["properties"]["strategy_options"]["properties"]["krum"]["properties"]["m"]
    assert [d.split(":")[0] for d in disagreements(short)] == ["krum"]
    extra = schema()
    extra["properties"]["strategy_options"]["properties"]["fedbogus"] = {"type": "object"}
    assert disagreements(extra) == ["fedbogus: in the strategy_options blocks but not a built-in"]


def test_a_new_built_in_is_its_module(tmp_path, monkeypatch) -> None:
    """The registry is the package's public modules (a module named `_...` is a helper): one
    more module is one more built-in."""
    import soma.strategies as strategies

    monkeypatch.setattr(strategies, "__path__", [*strategies.__path__, str(tmp_path)])
    (tmp_path / "fedplain.py").write_text("")
    (tmp_path / "_helper.py").write_text("")
    found = strategies._builtins()
    assert found["fedplain"] == "soma.strategies.fedplain" and "_helper" not in found
    assert set(found) - {"fedplain"} == set(strategies.BUILTIN)


def test_the_tree_and_secure_refusals_list_the_built_ins_that_step_from_the_mean() -> None:
    from soma.round import tree_refusal
    from soma.secagg.round import check_strategy
    from soma.strategies import BUILTIN, mean_strategies

    listed = tree_refusal("median").rsplit("(", 1)[1].split(")")[0].split(", ")
    assert listed == mean_strategies()
    assert {"fedavg", "fedavgm", "fedadam", "fedyogi", "fedadagrad", "fedprox"} == set(listed)
    for name in set(BUILTIN) - set(listed) - {"dp_fedavg"}:  # dp_fedavg: central by default
        assert not takes_mean(load_strategy(name)), name
    with pytest.raises(soma.errors.SomaError, match="secure aggregation.*fedavg, fedavgm"):
        check_strategy("krum", load_strategy("krum"))


# --- the task protocol and the examples to copy -------------------------------------------------

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def test_the_readmes_task_is_the_example_to_copy() -> None:
    readme = (ROOT / "docs" / "tutorials" / "own-task.md").read_text()
    code = "# mytask.py" + readme.split("```python\n# mytask.py", 1)[1].split("```", 1)[0]
    assert (EXAMPLES / "mytask.py").read_text() == code


def learn(tmp_path, task: str, strategy: str, rounds: int = 4) -> tuple[list[float], list]:
    """`soma client` hosting 4 clients of an example task: the test loss after each round,
    and the averaged weights of each round."""
    import os
    import re
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(EXAMPLES)])}
    command = [sys.executable, "-m", "soma.cli", "client", "--store", str(tmp_path / "store")]
    command += ["--run", "ex", "--rounds", str(rounds), "--clients", "4", "--mine", "0-3"]
    command += ["--task", task, "--strategy", strategy, "--evaluate", "one", "--deadline", "60"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    losses = [float(x) for x in re.findall(r"round \d+/\d+: loss (\S+)", done.stderr)]
    store = soma.Store(tmp_path / "store")
    lines = [__import__("json").loads(line) for line in done.stdout.splitlines()]
    weights = [store.recall_digest(line["weights"]) for line in lines if "weights" in line]
    return losses, weights


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "strategy"), [("mytask", "fedavg"), ("myloop", "fedprox"), ("myloop", "scaffold")]
)
def test_the_example_tasks_learn_the_true_weights(tmp_path, task, strategy) -> None:
    """Not only that they run: the test loss falls every round and the weights close in on
    the regression's truth. SCAFFOLD refuses a client whose loop never applied its objective
    (no corrected step), so its run says the custom loop hands it each step."""
    import sys

    sys.path.insert(0, str(EXAMPLES))
    try:
        truth = __import__("mytask").TRUE_WEIGHTS.flatten()
    finally:
        sys.path.remove(str(EXAMPLES))
    losses, weights = learn(tmp_path, task, strategy)
    assert len(losses) == 4 and losses == sorted(set(losses), reverse=True), losses
    errors = [float((w["fc"]["weight"].flatten() - truth).norm()) for w in weights]
    assert len(errors) == 4 and errors[-1] < errors[0] / 2, errors


@pytest.mark.slow
def test_task_error_is_beside_the_other_errors_and_device_needs_no_task() -> None:
    """No arrow runs back up from soma.device to soma.tasks: TaskError is in soma.errors
    (and still importable from soma.tasks, where every task imports it)."""
    import subprocess
    import sys

    from soma.errors import TaskError
    from soma.tasks import TaskError as AsBefore

    assert TaskError is AsBefore
    code = "import sys, soma.device; assert 'soma.tasks' not in sys.modules, 'soma.tasks'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
