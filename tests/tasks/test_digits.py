"""soma.tasks.digits: the workflow's default task answers the protocol, deterministically."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from soma import fedavg
from soma.config.participation import ParticipationError, sampled
from soma.errors import SomaError
from soma.nodes import export, load
from soma.partition import PartitionError
from soma.round.once import RoundError
from soma.tasks import Task, TaskError, digits, load_task
from soma.training import training_seed

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the benchmarks' federation (soma.simulate) and faulty task

from benchmarks import faulty, federation  # noqa: E402

torch.set_num_threads(1)
simulate = federation.simulate

SMALL = {"partition": "labels_per_client", "labels_per_client": 2, "epochs": 1}


@pytest.fixture(scope="module")
def task() -> digits.DigitsTask:
    return load_task("soma.tasks.digits", SMALL)


def same_weights(a, b) -> bool:
    a, b = export(a), export(b)
    return a.keys() == b.keys() and all(
        a[n].keys() == b[n].keys() and all(torch.equal(a[n][k], b[n][k]) for k in a[n]) for n in a
    )


def test_the_task_answers_the_protocol(task):
    assert isinstance(task, Task)
    assert callable(task.everything)
    nodes = task.nodes(0)
    assert list(nodes) == ["out"]
    data = task.shard(0, 10)
    metrics = task.train(nodes, data, seed=0)
    assert set(metrics) == {"loss", "steps"} and math.isfinite(metrics["loss"])
    json.dumps(metrics)
    result = task.evaluate(nodes)
    assert set(result) == {"accuracy", "loss"}
    assert 0 <= result["accuracy"] <= 1 and math.isfinite(result["loss"])
    mlp = load_task("soma.tasks.digits", {"model": "mlp", "hidden": 8}).nodes(0)
    assert list(mlp) == ["hidden", "act", "out"]
    assert set(export(mlp)) == {"hidden", "out"}


def test_the_defaults_are_json_scalars():
    for f in dataclasses.fields(digits.DigitsTask):
        if f.init:
            assert isinstance(f.default, (str, int, float)), f.name
    defaults = {f.name: f.default for f in dataclasses.fields(digits.DigitsTask) if f.init}
    assert load_task("soma.tasks.digits", json.loads(json.dumps(defaults))) is not None


def test_the_data_is_scikit_learns_digits():
    from sklearn.datasets import load_digits

    inputs, labels = load_digits(return_X_y=True)
    ours_inputs, ours_labels = digits._read_digits()
    assert np.array_equal(inputs, ours_inputs) and np.array_equal(labels, ours_labels)


def test_the_test_split_is_fixed_stratified_and_disjoint_from_every_shard(task):
    train, test = digits.split_rows(0, 0.25)
    again_train, again_test = digits.split_rows(0, 0.25)
    assert np.array_equal(train, again_train) and np.array_equal(test, again_test)
    assert len(np.intersect1d(train, test)) == 0 and len(train) + len(test) == 1797
    labels = digits._read_digits()[1]
    per_class = np.bincount(labels[test], minlength=10) / np.bincount(labels, minlength=10)
    assert np.all(np.abs(per_class - 0.25) < 0.01)
    rows = np.concatenate([train[task.indices(k, 10)] for k in range(10)])
    assert np.array_equal(np.sort(rows), train), "the shards are not a cover of the training set"
    assert len(np.intersect1d(rows, test)) == 0
    # ... and the tensors handed out are those rows less each client's validation rows
    # (held out for federated evaluation): shards of the everything() tensors.
    everything = task.everything()
    for k in (0, 9):
        inputs, targets = task.shard(k, 10)
        index = torch.as_tensor(task.held_out(k, 10)[0])
        assert torch.equal(inputs, everything[0][index])
        assert torch.equal(targets, everything[1][index])
    assert task.size(everything) == len(train)
    held = sum(len(task.held_out(k, 10)[1]) for k in range(10))
    assert sum(task.size(task.shard(k, 10)) for k in range(10)) == len(train) - held


def test_scaling_is_fitted_on_the_training_set_only():
    train_x, _, test_x, _ = digits._split(0, 0.25, "standard")
    assert np.abs(train_x.mean(axis=0)).max() < 1e-9
    assert np.abs(test_x.mean(axis=0)).max() > 0.01
    unit = digits._split(0, 0.25, "unit")
    assert unit[0].min() == 0 and unit[0].max() == 1


def test_shards_depend_on_clients_and_partition_options_only():
    a = load_task("soma.tasks.digits", {"lr": 0.3, "epochs": 3})
    b = load_task("soma.tasks.digits", {"model": "mlp"})
    for k in range(10):
        assert np.array_equal(a.indices(k, 10), b.indices(k, 10))
        assert torch.equal(a.shard(k, 10)[0], b.shard(k, 10)[0])
    other = load_task("soma.tasks.digits", {"partition_seed": 1})
    assert not np.array_equal(a.indices(0, 10), other.indices(0, 10))
    iid = load_task("soma.tasks.digits", {"partition": "iid"})
    assert len(np.unique(iid.shard(0, 10)[1])) == 10
    assert len(np.unique(a.shard(0, 10)[1])) == 2


def test_training_is_deterministic(task):
    data = task.shard(3, 10)
    first, again, other = task.nodes(7), task.nodes(7), task.nodes(7)
    assert same_weights(first, again)
    task.train(first, data, seed=1)
    task.train(again, data, seed=1)
    task.train(other, data, seed=2)
    assert same_weights(first, again)
    assert not same_weights(first, other)
    assert not same_weights(task.nodes(7), task.nodes(8))


def test_nodes_leave_the_global_random_state_alone(task):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    task.nodes(5)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize(("model", "momentum"), [("softmax", 0.9), ("mlp", 0.9), ("mlp", 0.0)])
def test_local_training_is_torch_sgd_bit_for_bit(model, momentum):
    task = digits.make(model=model, hidden=8, momentum=momentum, epochs=2)
    data = task.shard(1, 10)
    ours, theirs = task.nodes(3), task.nodes(3)
    task.train(ours, data, seed=4)
    parameters = [p for node in theirs.values() for p in node.parameters()]
    optimizer = torch.optim.SGD(parameters, lr=task.lr, momentum=momentum)
    shuffle = torch.Generator().manual_seed(4)
    for _ in range(task.epochs):
        order = torch.randperm(len(data[0]), generator=shuffle)
        for start in range(0, len(data[0]), task.batch_size):
            batch = order[start : start + task.batch_size]
            optimizer.zero_grad()
            logits = data[0][batch]
            for node in theirs.values():
                logits = node(logits)
            nn.functional.cross_entropy(logits, data[1][batch]).backward()
            optimizer.step()
    assert same_weights(ours, theirs)


def test_a_few_rounds_of_fedavg_beat_training_alone_by_far():
    task = digits.make(**SMALL)
    result = simulate(task, 10, 4, seed=0, every=2)
    federated = result["federated"][-1]["accuracy"]
    # Measured: federated 0.93, alone 0.23 (two digits each), centralized 0.96 (the
    # baselines trained as the workflow's jobs train them, seeded by training_seed).
    assert [row["round"] for row in result["federated"]] == [2, 4]
    assert federated > 0.8
    assert result["alone"] < 0.4
    assert federated > result["alone"] + 0.4
    assert result["centralized"] > 0.9
    # simulate's rounds are the protocol's steps: replay round 0 by hand.
    nodes = task.nodes(0)
    start = export(nodes)
    exports, sizes = [], []
    for k in range(10):
        load(nodes, start)
        data = task.shard(k, 10)
        task.train(nodes, data, seed=training_seed(0, 0, k))
        exports.append(export(nodes))
        sizes.append(task.size(data))
    load(nodes, fedavg(exports, sizes))
    first = simulate(task, 10, 1, seed=0, baselines=False)["federated"][0]
    assert task.evaluate(nodes) == {k: first[k] for k in ("accuracy", "loss")}


def test_the_baselines_are_the_workflows_alone_and_centralized_jobs(tmp_path):
    from soma.store import Store
    from soma.workflow import _baseline

    task = digits.make(**SMALL)
    config = {"store": str(tmp_path), "rounds": 2, "seed": 3}
    start = Store(tmp_path).put_value(export(task.nodes(3)))
    for client, data, ours in [
        (4, task.shard(4, 10), digits.alone(task, 4, 10, 2, seed=3)),
        (0, task.everything(), digits.centralized(task, 2, seed=3)),
    ]:
        theirs = _baseline(config, task, data, start, client, "baseline")
        assert theirs[-1]["metrics"]["accuracy"] == ours
    assert digits.alone(task, 4, 10, 2, seed=3) != digits.alone(task, 4, 10, 2, seed=4)


def soma_simulate(*args: str) -> str:
    """The digest of the last average of `soma simulate` (its own process) with `args`."""
    done = subprocess.run(
        [sys.executable, "-m", "soma.cli", "simulate", "--task", "soma.tasks.digits", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr
    rounds = [json.loads(line) for line in done.stdout.splitlines() if '"round"' in line]
    return rounds[-1]["weights"]


@pytest.mark.slow
def test_the_digits_federation_is_soma_simulate_bit_for_bit():
    task = digits.make(**SMALL)
    options = ["--option", "partition=labels_per_client", "--option", "labels_per_client=2"]
    options += ["--option", "epochs=1", "--clients", "10", "--rounds", "2", "--seed", "3"]
    both = ["--strategy", "fedavgm", "--strategy-option", "momentum=0.5"]
    both += ["--participation", "0.5"]
    fedavgm = {"strategy": "fedavgm", "strategy_options": {"momentum": 0.5}}
    for given, keywords in [([], {}), (both, {**fedavgm, "participation": 0.5})]:
        result = simulate(task, 10, 2, seed=3, baselines=False, **keywords)
        assert result["digest"] == soma_simulate(*options, *given), given
    # ... which the seeds make: another seed trains other bits.
    other = simulate(task, 10, 2, seed=4, baselines=False)["digest"]
    assert other != simulate(task, 10, 2, seed=3, baselines=False)["digest"]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"partition": "shards"}, "partition='shards' is unknown"),
        ({"alpha": 0}, "alpha"),
        ({"alpha": -0.5}, "alpha"),
        ({"labels_per_client": 11}, "labels_per_client=11"),
        ({"labels_per_client": 0}, "labels_per_client"),
        ({"model": "cnn"}, "model='cnn' is unknown"),
        ({"hidden": 0}, "hidden"),
        ({"lr": 0}, "lr"),
        ({"lr": "0.1"}, "lr"),
        ({"momentum": 1.0}, "momentum"),
        ({"epochs": 0}, "epochs"),
        ({"epochs": 1.5}, "epochs"),
        ({"epochs": True}, "epochs"),
        ({"batch_size": "16"}, "batch_size"),
        ({"split_seed": -1}, "split_seed"),
        ({"partition_seed": None}, "partition_seed"),
        ({"test_fraction": 1}, "test_fraction"),
        ({"test_fraction": 0.0}, "test_fraction"),
        ({"scale": "minmax"}, "scale='minmax' is unknown"),
        ({"learning_rate": 0.1}, "learning_rate"),
    ],
)
def test_bad_options_are_refused_by_name(options, named):
    with pytest.raises(TaskError, match=named):
        load_task("soma.tasks.digits", options)


def test_bad_shards_are_refused(task):
    with pytest.raises(TaskError, match="client 10 is not one of the 10 clients"):
        task.shard(10, 10)
    with pytest.raises(TaskError, match="clients"):
        task.shard(0, 0)
    with pytest.raises(PartitionError, match="labels_per_client"):
        task.shard(0, 4)  # 4 clients x 2 digits cannot hold all 10


# -- the federation through the strategy seam ------------------------------------------------


def fedavg_by_hand(task: digits.DigitsTask, clients: int, rounds: int) -> list:
    """FedAvg by hand: soma.fedavg of the clients' exports weighted by their sizes, each
    client seeded by training_seed; the global weights and their evaluation after each round."""
    nodes = task.nodes(0)
    average = export(nodes)
    after = []
    for r in range(rounds):
        exports, sizes = [], []
        for k in range(clients):
            load(nodes, average)
            data = task.shard(k, clients)
            task.train(nodes, data, seed=training_seed(0, r, k))
            exports.append(export(nodes))
            sizes.append(task.size(data))
        average = fedavg(exports, sizes)
        load(nodes, average)
        after.append((average, task.evaluate(nodes)))
    return after


def same_export(a, b) -> bool:
    return a.keys() == b.keys() and all(
        a[n].keys() == b[n].keys() and all(torch.equal(a[n][k], b[n][k]) for k in a[n]) for n in a
    )


@pytest.fixture(scope="module")
def by_hand(task):
    return fedavg_by_hand(task, 10, 2)


def test_simulate_with_fedavg_is_soma_fedavg_bit_for_bit(task, by_hand):
    result = simulate(task, 10, 2, seed=0, baselines=False, strategy="fedavg")
    assert [row["round"] for row in result["federated"]] == [1, 2]
    for row, (_, evaluated) in zip(result["federated"], by_hand, strict=True):
        assert {k: row[k] for k in ("accuracy", "loss")} == evaluated
    assert same_export(result["weights"], by_hand[-1][0])
    assert result["strategy"] == "fedavg" and result["attack"] is None


@pytest.mark.parametrize(
    ("strategy", "options"),
    [("fedavgm", {"momentum": 0.0}), ("fedprox", {"mu": 0.0}), ("scaffold", {})],
)
def test_strategies_that_reduce_to_fedavg_give_its_weights(task, by_hand, strategy, options):
    # FedAvgM without momentum steps by the whole mean; FedProx with mu 0 trains through the
    # objective with nothing added; SCAFFOLD's first round has c = c_i = 0 (its weights are
    # FedAvg's at server_lr 1, and its correction only starts once the clients have a c_i).
    rounds = 1 if strategy == "scaffold" else 2
    result = simulate(
        task, 10, rounds, baselines=False, strategy=strategy, strategy_options=options
    )
    assert same_export(result["weights"], by_hand[rounds - 1][0])


def test_another_strategy_runs_and_learns_differently(task, by_hand):
    momentum = simulate(task, 10, 2, baselines=False, strategy="fedavgm")
    # Round 1 is FedAvg's (the buffer starts at 0); round 2 steps by the momentum too.
    assert momentum["federated"][0]["accuracy"] == by_hand[0][1]["accuracy"]
    assert momentum["federated"][1]["loss"] != by_hand[1][1]["loss"]
    assert momentum["federated"][1]["accuracy"] != by_hand[1][1]["accuracy"]
    assert momentum["federated"][1]["accuracy"] > 0.8
    # SCAFFOLD's clients keep their own c_i between rounds: round 2 is no longer FedAvg's.
    scaffold = simulate(task, 10, 2, baselines=False, strategy="scaffold")
    assert not same_export(scaffold["weights"], by_hand[1][0])
    assert scaffold["federated"][1]["accuracy"] > 0.8


def test_the_attack_is_what_client_0_sends():
    weights = {"bn": {"w": torch.tensor([1.0, -2.0]), "count": torch.tensor(7)}}
    scaled = faulty.attacked(weights, ("scale", 100.0))
    flipped = faulty.attacked(weights, ("sign_flip", 10.0))
    assert torch.equal(scaled["bn"]["w"], torch.tensor([100.0, -200.0]))
    assert torch.equal(flipped["bn"]["w"], torch.tensor([-10.0, 20.0]))
    assert scaled["bn"]["count"].item() == 7 and flipped["bn"]["count"].item() == 7
    assert torch.equal(weights["bn"]["w"], torch.tensor([1.0, -2.0]))  # left alone
    for bad in [("nan", 1.0), ("scale",), ("scale", float("inf")), ("scale", True), "scale"]:
        with pytest.raises(TaskError, match="attack"):
            faulty.check_attack(bad)


def test_one_byzantine_client_ruins_fedavg_and_not_the_median(task, by_hand):
    attack = ("sign_flip", 10.0)
    ruined = simulate(task, 10, 2, baselines=False, attack=attack)
    held = simulate(task, 10, 2, baselines=False, strategy="median", attack=attack)
    # Measured: FedAvg 0.18 after 2 rounds (0.92 without the attack), the median 0.65.
    assert ruined["federated"][-1]["accuracy"] < 0.4 < by_hand[1][1]["accuracy"]
    assert held["federated"][-1]["accuracy"] > 0.5


def test_simulate_refuses_an_unknown_strategy(task):
    with pytest.raises(SomaError, match="nope"):
        simulate(task, 10, 1, baselines=False, strategy="nope")
    with pytest.raises(SomaError, match="momentum"):
        simulate(task, 10, 1, baselines=False, strategy="fedavgm", strategy_options={"momentum": 1})


# -- partial participation, dropouts and quorum ---------------------------------------------


def recorded(task: digits.DigitsTask, monkeypatch: pytest.MonkeyPatch, clients: int = 10) -> list:
    """Wrap the digits' train (of every DigitsTask: soma.simulate makes its own) to record
    every call: the round and the client (decoded from the seed training_seed(0, round,
    client) and the shard), the weights it started from, its objective, and what the
    objective's finish() returned."""
    shards = [task.shard(k, clients) for k in range(clients)]
    original = digits.DigitsTask.train
    calls: list[dict] = []

    def train(self, nodes, data, *, seed, objective=None):
        client = next(k for k, s in enumerate(shards) if torch.equal(s[0], data[0]))
        round_, rest = divmod(seed - training_seed(0, 0, client), training_seed(0, 1, 0))
        assert rest == 0 and seed == training_seed(0, round_, client)
        call = {"round": round_, "client": client, "start": export(nodes)}
        call["objective"] = objective
        calls.append(call)
        if objective is not None:
            finish = objective.finish

            def finishing(trained):
                call["finished"] = finish(trained)
                return call["finished"]

            objective.finish = finishing
        return original(self, nodes, data, seed=seed, objective=objective)

    monkeypatch.setattr(digits.DigitsTask, "train", train)
    return calls


def test_half_participation_trains_the_sampled_five_from_the_latest_weights(monkeypatch):
    task = digits.make(**SMALL)
    after_two = simulate(task, 10, 2, baselines=False, participation=0.5)["weights"]
    calls = recorded(task, monkeypatch)
    result = simulate(task, 10, 3, baselines=False, participation=0.5)
    assert len(calls) == 3 * 5
    for r in range(3):
        trained = [c["client"] for c in calls if c["round"] == r]
        assert trained == sampled(0, r, 10, 0.5) == result["participants"][r]
        assert len(trained) == 5
    # Every round's clients start from the latest global weights, whatever they last trained:
    # client 5 is sampled in rounds 0 and 2, and sits round 1 out.
    assert 5 in sampled(0, 0, 10, 0.5) and 5 not in sampled(0, 1, 10, 0.5)
    assert 5 in sampled(0, 2, 10, 0.5)
    start = export(task.nodes(0))
    for call in calls:
        if call["round"] == 0:
            assert same_export(call["start"], start)
        if call["round"] == 2:
            assert same_export(call["start"], after_two)
    assert result["federated"][-1]["accuracy"] > 0.7


def test_sizes_weigh_only_those_who_took_part():
    task = digits.make(**SMALL)
    result = simulate(task, 10, 1, baselines=False, participation=0.5)
    came = sampled(0, 0, 10, 0.5)
    nodes = task.nodes(0)
    start = export(nodes)
    exports, sizes = [], []
    for k in came:
        load(nodes, start)
        data = task.shard(k, 10)
        task.train(nodes, data, seed=training_seed(0, 0, k))
        exports.append(export(nodes))
        sizes.append(task.size(data))
    assert len(set(sizes)) > 1, "equal sizes would not tell a weighted mean from an unweighted one"
    assert same_export(result["weights"], fedavg(exports, sizes))
    assert not same_export(result["weights"], fedavg(exports))


def test_full_participation_spelled_out_is_bit_identical(task, by_hand):
    for spelled in [
        {"participation": 1.0},
        {"participation": 10, "quorum": 1.0},
        {"dropouts": lambda r, chosen: [], "quorum": 10},
    ]:
        result = simulate(task, 10, 2, baselines=False, **spelled)
        assert same_export(result["weights"], by_hand[-1][0]), spelled
        assert result["participants"] == [list(range(10))] * 2


def test_a_round_below_its_quorum_is_refused_naming_the_missing(task, monkeypatch):
    def two_fail_in_round_1(r: int, chosen: list[int]) -> list[int]:
        return chosen[:2] if r == 1 else []

    calls = recorded(task, monkeypatch)
    with pytest.raises(RoundError, match=r"round 1 .*8 of 10 .*quorum of 9: client 0 .*client 1"):
        simulate(task, 10, 3, baselines=False, dropouts=two_fail_in_round_1, quorum=0.9)
    assert {c["round"] for c in calls} == {0, 1}, "round 2 trained after round 1 was refused"
    assert not [c for c in calls if c["round"] == 1 and c["client"] in (0, 1)]
    chosen = sampled(0, 0, 10, 0.5)
    first = rf"round 0 .*3 of 5 .*quorum of 4: client {chosen[0]} "
    with pytest.raises(RoundError, match=first):
        simulate(
            task, 10, 1, baselines=False, participation=0.5, dropouts=lambda r, s: s[:2], quorum=4
        )
    # No quorum: everyone sampled must come, so one failure is enough, and says so at once.
    with pytest.raises(RoundError, match=r"client 0 cannot take part in round 0 .*fails on"):
        simulate(task, 10, 1, baselines=False, dropouts=federation.drop_one_per_round)


def test_drop_one_per_round_with_quorum_0_8_runs(task):
    result = simulate(
        task, 10, 3, baselines=False, dropouts=federation.drop_one_per_round, quorum=0.8
    )
    assert result["participants"] == [[k for k in range(10) if k != r] for r in range(3)]
    assert result["federated"][-1]["accuracy"] > 0.8
    half = simulate(
        task,
        10,
        3,
        baselines=False,
        participation=0.5,
        dropouts=federation.drop_one_per_round,
        quorum=0.8,
    )
    for r, came in enumerate(half["participants"]):
        chosen = sampled(0, r, 10, 0.5)
        assert came == [k for k in chosen if k != chosen[r % 5]]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"participation": 0}, "participation must be a count .*, not '0' \\(an integer\\)"),
        ({"participation": 11}, "participation must be .*, not '11' \\(an integer\\)"),
        ({"participation": 1.5}, "participation must be .*, not '1.5' \\(a number\\)"),
        ({"participation": True}, "participation must be .*, not 'true' \\(a boolean\\)"),
        ({"participation": "half"}, "participation must be .*, not 'half' \\(text\\)"),
        ({"participation": 5, "quorum": 6}, "quorum must be .*, not '6' \\(an integer\\)"),
        ({"quorum": 0.0}, "quorum must be .*, not '0.0' \\(a number\\)"),
        ({"dropouts": [3]}, "dropouts must be None or a callable"),
        ({"participation": 0.5, "dropouts": lambda r, s: [1]}, "dropouts named client 1"),
        ({"dropouts": lambda r, s: ["0"]}, "dropouts named client '0'"),
    ],
)
def test_bad_participation_is_refused_by_name_before_training(task, monkeypatch, options, named):
    calls = recorded(task, monkeypatch)
    with pytest.raises(SomaError, match=named) as refused:
        simulate(task, 10, 2, baselines=False, **options)
    assert calls == []
    if "dropouts" in options:
        assert isinstance(refused.value, ParticipationError)


def test_scaffold_clients_keep_their_own_state_from_their_last_participation(monkeypatch):
    task = digits.make(**SMALL)
    calls = recorded(task, monkeypatch)
    simulate(task, 10, 3, baselines=False, strategy="scaffold", participation=0.5)
    by = {(c["round"], c["client"]): c for c in calls}
    # Client 5 trains in rounds 0 and 2: in round 2 it continues from its round-0 c_i.
    mine = by[0, 5]["finished"][1]["c"]
    assert any(t.abs().sum() > 0 for keys in mine.values() for t in keys.values())
    assert same_export(by[2, 5]["objective"].c_i, mine)
    # Client 1 is first sampled in round 2: its c_i starts at zero.
    assert not any(r < 2 for r, k in by if k == 1)
    assert all(
        torch.count_nonzero(t) == 0
        for keys in by[2, 1]["objective"].c_i.values()
        for t in keys.values()
    )
