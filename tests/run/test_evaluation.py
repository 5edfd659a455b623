"""Federated evaluation (issue 22): each client judges the round's average on its own held-out
data; the mean weighted by evaluation size and the spread over clients, the same in every mode;
the best round by it as a model file; the per-round metrics as TensorBoard event files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import NO_BASELINES, ok, snakemake

from soma.config.participation import evaluating, sampled
from soma.model import export_best, read_metadata
from soma.round import layout, meetings, status
from soma.run import evaluation
from soma.run.simulate import simulate
from soma.store import Store
from soma.tasks import digits
from soma.tracking import read_scalars


def test_the_mean_is_weighted_by_evaluation_size_and_the_spread_is_over_clients() -> None:
    records = [
        {"metrics": {"accuracy": 1.0, "loss": 0.5}, "size": 30},
        {"metrics": {"accuracy": 0.5}, "size": 10},
        {"metrics": {"accuracy": 0.0, "note": "text"}, "size": 0},
    ]
    got = evaluation.aggregate(records)
    assert got["accuracy"]["mean"] == pytest.approx(35 / 40)  # the empty client weighs nothing
    assert got["accuracy"]["clients"] == 3  # but it is in the spread
    assert [got["accuracy"][s] for s in evaluation.SPREAD] == pytest.approx(
        [0.0, 0.1, 0.5, 0.9, 1.0]
    )
    assert got["loss"] == {**got["loss"], "mean": 0.5, "min": 0.5, "max": 0.5, "clients": 1}
    assert "note" not in got
    ordered = sorted(np.random.default_rng(0).random(7))
    assert evaluation.percentile(ordered, 10) == pytest.approx(np.percentile(ordered, 10))


def test_the_evaluation_sample_is_the_round_sample_or_a_draw_of_its_own() -> None:
    assert evaluating(0, 3, 10, 0.5) == sampled(0, 3, 10, 0.5)
    drawn = [evaluating(0, r, 10, 0.5, 3) for r in range(5)]
    assert all(len(d) == 3 for d in drawn) and len({tuple(d) for d in drawn}) > 1
    assert evaluating(0, 1, 10, None, 1.0) == list(range(10))


def test_digits_keeps_a_validation_split_of_each_shard_fixed_by_split_seed() -> None:
    task = digits.make(labels_per_client=5, epochs=1)
    for k in range(3):
        train, held = task.held_out(k, 3)
        assert len(held) == round(0.2 * len(task.indices(k, 3)))
        assert sorted([*train, *held]) == list(task.indices(k, 3)) and not set(train) & set(held)
        assert len(task.shard(k, 3)[0]) == len(train)
        again = digits.make(labels_per_client=5, epochs=1).held_out(k, 3)
        assert all(np.array_equal(a, b) for a, b in zip(again, (train, held), strict=True))
    other = digits.make(labels_per_client=5, epochs=1, split_seed=1).held_out(0, 3)[1]
    assert not np.array_equal(other, task.held_out(0, 3)[1])
    metrics, size = task.evaluate_local(task.nodes(0), 0, 3)
    assert size == len(task.held_out(0, 3)[1]) and set(metrics) == {"accuracy", "loss"}


ONLY_LOCAL = """
from soma.tasks.control import ControlTask


class OnlyLocal(ControlTask):
    evaluate = None  # no central test set: federated evaluation is all there is


def make(**options):
    return OnlyLocal(**options)
"""


def test_a_task_with_only_evaluate_local_runs_and_is_judged_by_its_clients(
    tmp_path, monkeypatch
) -> None:
    (tmp_path / "only_local.py").write_text(ONLY_LOCAL)
    monkeypatch.syspath_prepend(str(tmp_path))
    done = simulate("only_local", clients=3, rounds=2, task_options={"examples": 32})
    assert done.evaluation is None
    for r, round in enumerate(done.rounds):
        assert round.federated["round"] == r and round.federated["evaluated"] == [0, 1, 2]
        assert round.federated["size"] == 3 * 64
        assert round.federated["training"]["loss"]["clients"] == 3


def test_a_task_answering_evaluate_local_wrongly_is_refused_naming_the_client() -> None:
    class Wrong:
        def evaluate_local(self, nodes, client, clients):
            return {"loss": 1.0}

    with pytest.raises(evaluation.TaskError, match=r"evaluate_local\(nodes, 2, 3\)"):
        evaluation.local_metrics(Wrong(), {}, 2, 3)


@pytest.mark.workflow
def test_the_same_records_and_metrics_in_the_workflow_and_simulated(tmp_path) -> None:
    """One tiny control run (3 clients, 2 rounds, 2 evaluating a round) in the workflow with
    tracking on, and simulated: the same per-client and per-round records, byte for byte;
    the summary and status show them; best.safetensors is the best round by validation;
    the TensorBoard event files read back."""
    config = tmp_path / "fed.yaml"
    config.write_text(
        json.dumps(
            {"run": "fed", "task": "soma.tasks.control", "clients": 3, "rounds": 2,
             "metric": "loss", "evaluate_participation": 2, "tracking": True,
             "clients_per_job": 3, "task_options": {"soma.tasks.control": {"examples": 64}}}
        )
    )  # fmt: skip
    ok(snakemake(tmp_path / "wf", "--cores", "2", config=[NO_BASELINES, config]))
    flow = Store(tmp_path / "wf" / "store")
    simulated = simulate(
        "soma.tasks.control",
        clients=3,
        rounds=2,
        task_options={"examples": 64, "epochs": 1, "lr": 0.05},  # config.yaml's, as the workflow
        strategy_options={"norm_bound": None},
        evaluate_participation=2,
        run="fed",
        store=tmp_path / "sim",
        tracking=tmp_path / "simtb",
    )
    sim = Store(tmp_path / "sim")
    found = meetings(flow, "fed")
    assert found == meetings(sim, "fed") and len(found) == 2  # the same meetings: the same run
    for r, key in found:
        prefix = layout.meeting("fed", r, key)
        names = [layout.federated(prefix)]
        names += [layout.evaluated(prefix, k, 3) for k in evaluating(0, r, 3, None, 2)]
        assert [flow.resolve(n) for n in names] == [sim.resolve(n) for n in names]
        # each client's training metrics, in its record (whose `by` is the mode's own)
        clients = [flow.recall(layout.client(prefix, k, 3)) for k in range(3)]
        assert [r["metrics"] for r in clients] == [
            sim.recall(layout.client(prefix, k, 3))["metrics"] for k in range(3)
        ]
        assert None not in [flow.resolve(n) for n in names]
        assert simulated.rounds[r].federated == evaluation.federated_of(flow, "fed", r, key)
    results = tmp_path / "wf" / "results" / "fed"
    table = [line.split("\t") for line in (results / "summary.tsv").read_text().splitlines()]
    header = table[0]
    for column in ("validation", "validation_p10", "validation_p90", "train_loss"):
        assert column in header
    means = {r: simulated.rounds[r].federated["evaluation"]["loss"]["mean"] for r in (0, 1)}
    shown = {int(row[1]): float(row[header.index("validation")]) for row in table[2:]}
    assert shown == pytest.approx(means, abs=1e-4)
    rows = status(flow, "fed")
    assert [row["federated"]["evaluation"] for row in rows] == [
        simulated.rounds[r].federated["evaluation"] for r in (0, 1)
    ]
    best = min(means, key=means.get)
    assert read_metadata(results / "best.safetensors")["round"] == str(best)
    exported = export_best(sim, "fed", tmp_path / "best.safetensors", "loss")
    assert exported["round"] == best
    assert (tmp_path / "best.safetensors").read_bytes() == (
        results / "best.safetensors"
    ).read_bytes()
    events = read_scalars(str(results / "tensorboard"))
    assert [step for step, _ in events["validation/loss/mean"]] == [0, 1]
    assert [v for _, v in events["validation/loss/mean"]] == pytest.approx(list(means.values()))
    assert {"test/loss", "train/loss/mean", "validation/loss/p10"} <= set(events)
    assert (
        read_scalars(str(tmp_path / "simtb"))["validation/loss/mean"]
        == events["validation/loss/mean"]
    )


@pytest.mark.slow
def test_soma_export_best_and_nothing_tracked_unless_asked(tmp_path) -> None:
    store = tmp_path / "store"
    simulate("soma.tasks.control", clients=2, rounds=2, task_options={"examples": 32},
             run="c", store=store)  # fmt: skip
    command = [sys.executable, "-m", "soma.cli", "export", "--store", str(store), "--run", "c"]
    made = subprocess.run(
        [*command, "--best", "--metric", "loss", "-o", str(tmp_path / "m.safetensors")],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    assert "best federated validation loss" in made.stdout
    refused = subprocess.run(
        [*command, "--best", "--metric", "accuracy", "-o", str(tmp_path / "n.safetensors")],
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 1 and "metric 'accuracy'" in refused.stderr
    assert "have loss" in refused.stderr and not (tmp_path / "n.safetensors").exists()
    assert not list(Path(tmp_path).rglob("events.out.tfevents*"))
