"""Studies (soma.config.study): a config's grid expands into one run per point, checked at parse
time; one tiny study run through Snakemake, its table checked against its runs' own."""

from __future__ import annotations

import csv
import itertools
import json
import re
import statistics
from pathlib import Path

import pytest
import yaml
from helpers import ROOT, ok, snakemake

from soma.config.configs import ConfigRefused, schema_refusal
from soma.config.study import Point, Study, job_names, start_groups, study_of

STRATEGIES = ("fedavg", "fedadam")
DEFAULTS = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def config(**study) -> dict:
    found = dict(DEFAULTS, task="soma.tasks.control", clients=2, rounds=2, metric="loss",
                 clients_per_job=1)  # fmt: skip
    found["study"] = study
    return found


def test_a_grid_is_one_run_per_point_named_after_the_study_and_the_point():
    study = study_of(
        config(name="s", strategy=["fedavg", "scaffold"], seed=[0, 1], participation=[1.0, 0.5])
    )
    assert study is not None and study.keys == ("strategy", "seed", "participation")
    runs = [point.run for point in study.points]
    assert len(runs) == 8 and len(set(runs)) == 8
    assert runs[:3] == [
        "s_strategy-fedavg_seed-0_participation-1.0",
        "s_strategy-fedavg_seed-0_participation-0.5",
        "s_strategy-fedavg_seed-1_participation-1.0",
    ]
    last = study.points[-1]
    assert last.config["strategy"] == "scaffold" and last.config["seed"] == 1
    assert last.config["participation"] == 0.5 and last.config["run"] == last.run
    assert "study" not in last.config and last.config["clients"] == 2
    assert last.group() == (("strategy", "scaffold"), ("participation", "0.5"))
    # deterministic: the same config, the same names
    again = study_of(
        config(name="s", strategy=["fedavg", "scaffold"], seed=[0, 1], participation=[1.0, 0.5])
    )
    assert [p.run for p in again.points] == runs
    assert study_of(dict(DEFAULTS)) is None


def test_points_that_start_alike_share_one_start():
    study = study_of(config(name="s", strategy=["fedavg", "fedadam", "scaffold"], seed=[0, 1]))
    groups = start_groups(study)
    assert [[p.config["seed"] for p in group] for group in groups] == [[0, 0, 0], [1, 1, 1]]
    options = study_of(config(name="s", task_options=[{}, {"soma.tasks.control": {"lr": 0.1}}]))
    assert len(start_groups(options)) == 2
    assert [p.run for p in options.points] == ["s_task_options-0", "s_task_options-1"]


def test_a_points_jobs_are_named_by_the_point_uniquely_and_deterministically():
    grid = dict(strategy=["fedavg", "fedadam"], seed=[0, 1], participation=[1.0, 0.5])
    names = job_names(study_of(config(name="s", **grid)))
    assert names[:3] == ["fedavg_seed0_participation1_0", "fedavg_seed0_participation0_5",
                         "fedavg_seed1_participation1_0"]  # fmt: skip
    assert names == job_names(study_of(config(name="s", **grid)))
    assert len(set(names)) == len(names) and all(n.isidentifier() for n in names)
    options = study_of(config(name="s", task_options=[{}, {"soma.tasks.control": {"lr": 0.1}}]))
    assert job_names(options) == ["task_options0", "task_options1"]
    tasks = study_of(config(name="s", task=["soma.tasks.control", "soma.tasks.digits"]))
    assert job_names(tasks) == ["soma_tasks_control", "soma_tasks_digits"]


def test_job_names_that_would_clash_fall_back_to_the_points_place():
    assert job_names(study_of(config(name="s", seed=[1, 2]))) == ["seed1", "seed2"]
    clashing = study_of(config(name="s", participation=[0.5, 1.0]))
    points = tuple(
        Point(p.run, {"metric": text}, p.config)
        for p, text in zip(clashing.points, ["a.b", "a_b"], strict=True)
    )
    assert job_names(Study("s", ("metric",), points, None)) == ["point0", "point1"]
    studying = tuple(
        Point(p.run, {"metric": "study"}, p.config) for p in clashing.points[:1]
    )  # `study_summary` is the study's own rule
    assert job_names(Study("s", ("metric",), studying, None)) == ["point0"]


@pytest.mark.parametrize(
    "study, named",
    [
        ({"strategy": []}, "(under 'strategy')"),
        ({"strategy": "fedavg"}, "(under 'strategy')"),
        ({"stratgy": ["fedavg"]}, "'stratgy' is not a config key"),
        ({"run": ["a", "b"]}, "(under 'run')"),
        ({"store": ["a", "b"]}, "(under 'store')"),
        ({"seed": [0, 0]}, "given twice"),
        ({"name": "s"}, "names no config key"),
        ({"seed": [0], "target": {"metric": "loss"}}, "(under 'target')"),
        ({"clients": [2, 0]}, "(the point clients-0): config key `clients`"),
        ({"participation": [1.0, 5]}, "(the point participation-5): config keys"),
    ],
)
def test_a_grid_that_cannot_work_is_refused_naming_the_study_and_the_key(study, named):
    with pytest.raises(ConfigRefused, match=r"^config key `study`") as refused:
        study_of(config(**study))
    assert named in str(refused.value)


def test_the_schema_refuses_an_empty_list_naming_the_study():
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    given = dict(config(strategy=[]), run="s")
    with pytest.raises(WorkflowError) as error:
        validate(given, str(ROOT / "workflow" / "schemas" / "config.schema.yaml"))
    said = schema_refusal(error.value)
    assert said is not None and said.startswith("config key `study` (under 'strategy')")


def test_the_table_is_each_points_mean_and_std_over_its_seeds(tmp_path):
    from soma.workflow import write_receipt
    from soma.workflow.study import study_summary

    study = study_of(
        config(name="s", strategy=["fedavg", "fedadam"], seed=[0, 1, 2],
               target={"metric": "loss", "value": 1.0})
    )  # fmt: skip
    loss = {}  # run -> [start, round 0, round 1]
    for i, point in enumerate(study.points):
        loss[point.run] = [10.0 + i, 2.0 / (i + 1), 0.5 * i]
        base = tmp_path / point.run
        write_receipt(base / "start.json", {"metrics": {"loss": loss[point.run][0]}})
        for r in (0, 1):
            metrics = {"loss": loss[point.run][r + 1], "mse": 1.0}
            write_receipt(base / "round" / str(r) / "evaluation.json", {"metrics": metrics})
    table = study_summary(
        study, "loss", str(tmp_path / "s" / "summary.tsv"), str(tmp_path / "s" / "loss.png"),
        results=str(tmp_path),
    )  # fmt: skip
    assert len(table) == 6 and (tmp_path / "s" / "loss.png").stat().st_size > 0
    for row in table:
        runs = [p.run for p in study.points if p.config["strategy"] == row["strategy"]]
        at = 0 if row["round"] == "start" else int(row["round"]) + 1
        values = [loss[run][at] for run in runs]
        assert row["seeds"] == 3 and row["loss_mean"] == statistics.fmean(values)
        assert row["loss_std"] == pytest.approx(statistics.stdev(values), rel=1e-12)
        mse = (row.get("mse_mean"), row.get("mse_std"))
        assert mse == ((None, None) if at == 0 else (1.0, 0.0))
    # fedavg's mean loss is 1.22 after round 0, 0.5 after round 1; fedadam's 0.41 after round 0;
    # said once, on each point's last row
    reached = [(r["strategy"], r["round"], r["to_target"]) for r in table if "to_target" in r]
    assert reached == [("fedavg", 1, 2), ("fedadam", 1, 1)]
    written = rows(tmp_path / "s" / "summary.tsv")
    assert list(written[0]) == ["strategy", "round", "seeds", "loss_mean", "loss_std",
                                "mse_mean", "mse_std", "to_target"]  # fmt: skip


def rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f, delimiter="\t"))


@pytest.mark.workflow
def test_a_tiny_study_runs_in_one_dag_and_its_table_is_its_runs_over_seeds(tmp_path):
    study = {
        "task": "soma.tasks.control",
        "clients": 2,
        "rounds": 2,
        "clients_per_job": 2,
        "metric": "loss",
        "baselines": {"alone": False, "centralized": False},
        "study": {
            "name": "tiny",
            "strategy": list(STRATEGIES),
            "seed": [0, 1],
            "target": {"metric": "loss", "value": 1.0},
        },
    }
    given = tmp_path / "study.yaml"
    given.write_text(yaml.safe_dump(study, sort_keys=False))
    out = ok(snakemake(tmp_path, "--cores", "2", "results/tiny/summary.tsv", config=[given]))
    # one start job per seed (the strategies share it), none per point
    assert len(re.findall(r"Finished jobid: \d+ \(Rule: study_start_\d+\)", out)) == 2
    assert re.search(r"Rule: \w+_start\)", out) is None
    # each job named by its point
    for strategy, seed in itertools.product(STRATEGIES, (0, 1)):
        assert f"(Rule: {strategy}_seed{seed}_summary)" in out
    runs = {s: {seed: f"tiny_strategy-{s}_seed-{seed}" for seed in (0, 1)} for s in STRATEGIES}
    results = tmp_path / "results"
    for by_seed in runs.values():
        for seed, run in by_seed.items():
            other = runs["fedavg"][seed]
            start = json.loads((results / run / "start.json").read_text())["weights"]
            assert start == json.loads((results / other / "start.json").read_text())["weights"]
    table = rows(results / "tiny" / "summary.tsv")
    assert [(r["strategy"], r["round"]) for r in table] == [
        (s, r) for s in ("fedavg", "fedadam") for r in ("start", "0", "1")
    ]
    for row in table:
        own = [
            next(
                float(line["federated"])
                for line in rows(results / runs[row["strategy"]][seed] / "summary.tsv")
                if line["round"] == row["round"]
            )
            for seed in (0, 1)
        ]
        assert row["seeds"] == "2"
        assert float(row["loss_mean"]) == pytest.approx(statistics.fmean(own), abs=2e-4)
        assert float(row["loss_std"]) == pytest.approx(statistics.stdev(own), abs=2e-4)
    for strategy in ("fedavg", "fedadam"):
        mine = [r for r in table if r["strategy"] == strategy and r["round"] != "start"]
        reached = [int(r["round"]) + 1 for r in mine if float(r["loss_mean"]) <= 1.0]
        said = [r["to_target"] for r in mine]  # once, on the last row
        assert said == ["", str(reached[0]) if reached else ""]
    assert (results / "tiny" / "loss.png").stat().st_size > 0
