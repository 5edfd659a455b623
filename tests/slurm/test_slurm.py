"""soma on a real Slurm cluster: the workflow under `snakemake --executor`, a round per
submission, and one round rerun.

Needs the one-node cluster of tests/slurm (`bash tests/slurm/start.sh`); every test is marked
`slurm` and skips, with the reason, when it is not running (tests/slurm/harness.py: how each
test runs things and cleans up after them).
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest
from slurm.harness import (
    AVERAGE_0,
    CLIENTS_0,
    FEW_JOBS,
    RESULTS,
    ROUNDS_PROFILE,
    RUN,
    WHOLE_WORKFLOW,
    WORKFLOW_JOBS,
    Slurm,
    averagings,
    completed,
    place_of_round,
    receipts,
    rule_of,
    slurm_output,
    snakemake,
    submitted,
    write_config,
)

from soma.round import read_record
from soma.store import Store

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def workflow_runs(cluster, tmp_path_factory):
    """The whole workflow under Slurm, and, meanwhile, the same config run locally."""
    session = Slurm("workflow")
    under_slurm = tmp_path_factory.mktemp("under-slurm")
    local = tmp_path_factory.mktemp("local")
    write_config(under_slurm)
    write_config(local)
    try:
        started = time.monotonic()
        beside = session.start(snakemake(local), cwd=local)
        by_slurm = session.run(
            snakemake(under_slurm, slurm=session), cwd=under_slurm, timeout=WHOLE_WORKFLOW
        )
        seconds = time.monotonic() - started
        locally = session.finish(beside, timeout=WHOLE_WORKFLOW)
        yield {
            "slurm": under_slurm,
            "local": local,
            "by_slurm": by_slurm,
            "locally": locally,
            "seconds": seconds,
        }
    finally:
        session.cleanup()


# --- 1. snakemake --executor slurm ------------------------------------------------------------


def test_the_workflow_under_slurm_gives_the_receipts_of_a_local_run(workflow_runs) -> None:
    by_slurm, locally = workflow_runs["by_slurm"], workflow_runs["locally"]
    assert locally.returncode == 0, locally.tail()
    assert by_slurm.returncode == 0, by_slurm.tail()
    under_slurm, local = workflow_runs["slurm"], workflow_runs["local"]

    # The averages are bit-identical, and so is every other receipt of the run.
    for r in range(2):
        receipt = (under_slurm / RESULTS / f"round/{r}/average.json").read_bytes()
        assert receipt == (local / RESULTS / f"round/{r}/average.json").read_bytes()
        weights = json.loads(receipt)["weights"]
        assert re.fullmatch(r"[0-9a-f]{64}", weights)
        store = Store(under_slurm / "store")
        published = store.resolve(place_of_round(under_slurm, r).published)
        assert read_record(store, published)["weights"] == weights
        assert len(averagings(store, f"{RUN}/round/{r}/")) == 1
    assert receipts(under_slurm) == receipts(local)
    assert len(receipts(under_slurm)) == 11  # run, start, 4 clients, 2 averages, 2 evaluations, tsv
    # what each round cost (issue 56): core-hours from sacct under Slurm, CPU seconds alone here
    table = [
        x.split("\t") for x in (under_slurm / RESULTS / "summary.tsv").read_text().splitlines()
    ]
    header = table[0]
    assert {"cpu_s", "core_hours", "core_hours_cumulative", "queue_wait_s"} <= set(header)
    assert all(row[header.index("core_hours")] not in ("", "nan") for row in table[2:])
    assert "core_hours" not in (local / RESULTS / "summary.tsv").read_text()  # no Slurm

    # Every job went through Slurm: sacct has each one, named with this run's id, completed.
    run_id = re.search(r"SLURM run ID: (\S+)", by_slurm.output)
    assert run_id and run_id.group(1).startswith("somatest-"), by_slurm.tail()
    jobs = submitted(by_slurm.output)
    assert len(jobs) == sum(WORKFLOW_JOBS.values()), by_slurm.tail()
    completed(jobs)
    names = slurm_output("sacct", "-X", "-n", "-P", "-j", ",".join(jobs), "-o", "JobName").split()
    assert set(names) == {run_id.group(1)}
    # ...and left its per-rule log where the plugin keeps them.
    logs = under_slurm / ".snakemake" / "slurm_logs"
    per_rule = {d.name: len(list(d.rglob("*.log"))) for d in logs.iterdir()}
    assert per_rule == {f"rule_{rule}": n for rule, n in WORKFLOW_JOBS.items()}
    for job, log in jobs.items():
        assert Path(log).name == f"{job}.log" and Path(log).is_file()
    for r, k in ((0, 0), (0, 1), (1, 0), (1, 1)):
        assert list((logs / "rule_train" / f"{r}_{k}").glob("*.log"))
    print(f"whole workflow under Slurm: {workflow_runs['seconds']:.0f}s")


# one job a round (clients_per_job 3: rule `round`) goes through the same grouping: it is
# run locally by test_scale, and here only a job per client, to keep the suite's time
@pytest.mark.parametrize("per_job", [1], ids=["a-job-per-client"])
def test_a_round_per_submission_gives_the_receipts_of_a_local_run(cluster, tmp_path, per_job):
    """profiles/slurm-test-rounds groups each round's jobs into one Slurm job: 3 rounds x 3
    clients are 3 submissions (the start in round 0's; a round's evaluation in the next
    round's, beside its training, the last with the summary, the model and the best round,
    no baseline being trained), and every receipt is the local run's, byte for byte."""
    session = Slurm(f"rounds-{per_job}")
    under_slurm, local = tmp_path / "slurm", tmp_path / "local"
    for workdir in (under_slurm, local):
        workdir.mkdir()
        write_config(workdir, clients=3, rounds=3, clients_per_job=per_job)
    try:  # the local run goes on beside the Slurm run, as in workflow_runs
        beside = session.start(snakemake(local), cwd=local)
        command = snakemake(under_slurm, slurm=session, profile=ROUNDS_PROFILE)
        by_slurm = session.run(command, cwd=under_slurm, timeout=WHOLE_WORKFLOW)
        locally = session.finish(beside, timeout=WHOLE_WORKFLOW)
    finally:
        session.cleanup()
    assert locally.returncode == 0, locally.tail()
    assert by_slurm.returncode == 0, by_slurm.tail()
    jobs = submitted(by_slurm.output)
    completed(jobs)
    folders = sorted(Path(log).parent.name for log in jobs.values())
    # the digits task evaluates on each client's own data: its best round too (rule `best`);
    # Snakemake names a group by its first five rules, sorted; round 0's evaluation is a part
    # of round 1's group apart from its jobs (the profile's group-components keep it in)
    if per_job == 1:
        rounds = [
            "group_round0_average_start_train",
            "group_round1_average_evaluate_train",
            "group_round2_average_best_evaluate_model_summary_...",
        ]
    else:  # a round is one job (rule `round`)
        rounds = [
            "group_round0_round_start",
            "group_round1_evaluate_round",
            "group_round2_best_evaluate_model_round_summary",
        ]
    assert folders == rounds, by_slurm.tail()
    assert receipts(under_slurm) == receipts(local)
    # run, start, best; an average and an evaluation a round; a client's receipt or a round's
    assert len(receipts(local)) == 3 + 2 * 3 + (3 * 3 if per_job == 1 else 3)


def test_a_secure_round_per_submission_gives_the_receipts_of_a_local_run(cluster, tmp_path):
    """Secure aggregation (1 round x 3 clients, threshold 2) under profiles/slurm-test-rounds:
    its phases (keys, share, train, reveal) are in their round's group, so a round is one
    submission (the last with the summary and the model), and every receipt is the local
    run's, byte for byte."""
    session = Slurm("secure-rounds")
    under_slurm, local = tmp_path / "slurm", tmp_path / "local"
    for workdir in (under_slurm, local):
        workdir.mkdir()
        secure = {"threshold": 2, "secrets": str(workdir / "secrets/{client}")}  # not shared
        write_config(workdir, clients=3, rounds=1, secure_aggregation=secure)
    try:  # the local run goes on beside the Slurm run, as in workflow_runs
        beside = session.start(snakemake(local), cwd=local)
        command = snakemake(under_slurm, slurm=session, profile=ROUNDS_PROFILE)
        by_slurm = session.run(command, cwd=under_slurm, timeout=WHOLE_WORKFLOW)
        locally = session.finish(beside, timeout=WHOLE_WORKFLOW)
    finally:
        session.cleanup()
    assert locally.returncode == 0, locally.tail()
    assert by_slurm.returncode == 0, by_slurm.tail()
    jobs = submitted(by_slurm.output)
    completed(jobs)
    folders = sorted(Path(log).parent.name for log in jobs.values())
    # one submission, the round's, with the summary and the model (Snakemake names a group by
    # its first five rules, sorted)
    assert folders == ["group_round0_average_evaluate_keys_model_reveal_..."], by_slurm.tail()
    assert receipts(under_slurm) == receipts(local)
    phases = [p.split("/")[4] for p in receipts(local) if p.count("/") == 5]
    assert sorted(phases) == sorted(["keys", "share", "client", "reveal"] * 3), phases


# --- 2. rerunning one round under Slurm -------------------------------------------------------


def test_rerunning_round_0_under_slurm_changes_no_receipt(workflow_runs, tmp_path, slurm) -> None:
    assert workflow_runs["by_slurm"].returncode == 0, workflow_runs["by_slurm"].tail()
    workdir = tmp_path / "rerun"
    shutil.copytree(workflow_runs["slurm"], workdir, symlinks=True)
    write_config(workdir)  # the same config, the copy's own store
    shutil.rmtree(workdir / ".snakemake" / "slurm_logs")
    before = receipts(workdir)

    forced = [*CLIENTS_0, AVERAGE_0]
    rerun = slurm.run(
        snakemake(workdir, "--forcerun", *forced, "--until", AVERAGE_0, slurm=slurm),
        cwd=workdir,
        timeout=FEW_JOBS,
    )
    assert rerun.returncode == 0, rerun.tail()
    jobs = submitted(rerun.output)
    assert sorted(rule_of(log) for log in jobs.values()) == ["average", "train", "train"], (
        rerun.tail()
    )
    completed(jobs)
    for path in forced:
        assert (workdir / path).stat().st_mtime > (workflow_runs["slurm"] / path).stat().st_mtime
    assert receipts(workdir) == before, "a rerun of round 0 changed a receipt"
    store = Store(workdir / "store")
    assert len(averagings(store, f"{RUN}/round/0/")) == 1, "the rerun averaged again"

    dry = slurm.run(snakemake(workdir, "-n"), cwd=workdir, timeout=120)
    assert dry.returncode == 0, dry.tail()
    assert "Nothing to be done" in dry.output, dry.tail()
