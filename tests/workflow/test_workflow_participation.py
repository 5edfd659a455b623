"""Participation in the Snakemake workflow: who trains in which round, partial rounds, and
clients that fail, are refused or are killed (issue 10), on the local executor."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from helpers import HANG, NO_BASELINES, ROOT, TINY, ok, receipts, snakemake, snakemake_process

from soma.config.participation import sampled
from soma.round import status
from soma.store import Store

FIXTURES = ROOT / "tests" / "fixtures"
FIXTURE_ENV = dict(os.environ, PYTHONPATH=str(FIXTURES))


@pytest.mark.workflow
def test_a_dry_run_shows_only_the_sampled_clients_train(tmp_path) -> None:
    plan = ok(snakemake(tmp_path, "-n", "--config", "clients=10", "rounds=3", "participation=0.5"))
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", plan, flags=re.MULTILINE))
    assert counts["train"] == "15" and counts["average"] == "3"
    for r in range(3):
        planned = re.findall(rf"results/tiny/round/{r}/client/(\d+)\.json", plan)
        assert sorted({int(k) for k in planned}) == sampled(0, r, 10, 0.5)


@pytest.mark.workflow
def test_a_sampled_run_trains_the_same_bits_in_the_workflow_and_under_soma_client(
    tmp_path,
) -> None:
    from helpers import averaged_weights, soma_clients

    sampled_run = ("--config", "clients=4", "participation=2", "run=sampled")
    last = "results/sampled/round/1/average.json"  # the rounds, read below
    ok(snakemake(tmp_path, "--cores", "2", last, *sampled_run, config=[TINY, NO_BASELINES]))
    for r in range(2):
        average = json.loads((tmp_path / f"results/sampled/round/{r}/average.json").read_text())
        assert [i["client"] for i in average["inputs"]] == sampled(0, r, 4, 2)
    lines = soma_clients(tmp_path / "cli", "sampled", "--participation", "2", clients=4)
    by_clients = [{line["weights"] for line in per_round} for per_round in zip(*lines, strict=True)]
    assert by_clients == [{w} for w in averaged_weights(tmp_path, "sampled")]


def diverging_config(tmp_path: Path) -> Path:
    config = tmp_path / "diverging.yaml"
    options = {"inner": "soma.tasks.control", "examples": 32, "bad_client": 1}
    config.write_text(
        json.dumps(
            {
                "run": "div",
                "task": "diverging",
                "task_options": {"diverging": options},
                "clients": 3,
                "rounds": 2,
                "metric": "loss",
            }
        )
    )
    return config


@pytest.mark.workflow
def test_a_diverging_client_drops_out_and_the_quorum_goes_on(tmp_path) -> None:
    config = [TINY, NO_BASELINES, diverging_config(tmp_path)]
    table = "results/div/summary.tsv"  # read below; the model is the tiny run's to make
    ok(
        snakemake(
            tmp_path, "--cores", "2", table, "--config", "quorum=2", config=config, env=FIXTURE_ENV
        )
    )
    got = receipts(tmp_path, "div")
    for r in range(2):
        dropped = json.loads(got[f"round/{r}/client/1.json"])
        assert dropped["dropped"].startswith("refused: ") and "NaN" in dropped["dropped"]
        average = json.loads(got[f"round/{r}/average.json"])
        assert [i["client"] for i in average["inputs"]] == [0, 2]
        assert average["left_out"] == [{"client": 1, "why": dropped["dropped"]}]
    rows = status(Store(tmp_path / "store"), "div")
    assert all(Store(tmp_path / "store").recall_digest(row["average"])["left_out"] for row in rows)
    # who took part, shown: in the table, and the client that never trained named at the end
    table = (tmp_path / "results" / "div" / "summary.tsv").read_text().splitlines()
    assert [line.split("\t")[-3:] for line in table[2:]] == [["2", "1", "refused 1"]] * 2
    summary = (tmp_path / "logs" / "div" / "summary.log").read_text()
    assert "client 1 took part in none of the rounds" in summary and "NaN" in summary
    client = (tmp_path / "logs" / "div" / "round" / "0" / "client" / "1.log").read_text()
    assert "Traceback" in client, "the drop-out's traceback is in its log"


@pytest.mark.workflow
def test_without_a_quorum_a_diverging_client_fails_its_job_naming_the_key(tmp_path) -> None:
    config = [TINY, NO_BASELINES, diverging_config(tmp_path)]
    result = snakemake(tmp_path, "--cores", "2", config=config, env=FIXTURE_ENV)
    assert result.returncode != 0
    log = (tmp_path / "logs" / "div" / "round" / "0" / "client" / "1.log").read_text()
    assert "Refused" in log and "client 1: node" in log and "NaN" in log
    # the way to go on without it, in the config's words too
    assert "give a quorum below 3 (e.g. --quorum 2, or --config quorum=2 in the" in log
    assert not (tmp_path / "results" / "div" / "round" / "0" / "average.json").exists()


@pytest.mark.workflow
def test_a_killed_client_job_is_retried_and_drops_out_when_the_quorum_allows(tmp_path) -> None:
    """SIGKILL, as the OOM killer or a node failure would: no receipt, no record. Snakemake
    retries the job (--retries 1); the retry finds its earlier attempt gone without a trace,
    and drops out saying so; the round goes on with the others."""
    slow = {"slow_client": 1, "seconds": 600, "inner": "soma.tasks.control", "examples": 32}
    config = tmp_path / "slow.yaml"
    config.write_text(
        json.dumps({"run": "slow", "task": "slow_task", "task_options": {"slow_task": slow},
                    "clients": 3, "rounds": 1, "metric": "loss", "quorum": 2})
    )  # fmt: skip
    run = snakemake_process(
        tmp_path, "--cores", "3", "--retries", "1", config=[TINY, NO_BASELINES, config],
        env=FIXTURE_ENV,
    )  # fmt: skip
    log = tmp_path / "logs" / "slow" / "round" / "0" / "client" / "1.log"
    deadline = time.monotonic() + HANG  # a hang's bound: the job logs its pid, or the run ends
    pid = None
    try:
        while pid is None and time.monotonic() < deadline and run.poll() is None:
            found = re.search(r"\(pid (\d+)\)", log.read_text()) if log.exists() else None
            pid = int(found.group(1)) if found else None
            time.sleep(0.2)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            run.wait(timeout=HANG)
    finally:
        run.kill()  # ended by then, unless the test failed
        said, _ = run.communicate()
    assert pid is not None, said[-3000:]
    assert run.returncode == 0, said[-3000:]
    got = receipts(tmp_path, "slow")
    dropped = json.loads(got["round/0/client/1.json"])
    assert (
        dropped["dropped"].startswith("died: its previous job") and str(pid) in dropped["dropped"]
    )
    average = json.loads(got["round/0/average.json"])
    assert [i["client"] for i in average["inputs"]] == [0, 2]
    assert average["left_out"] == [{"client": 1, "why": dropped["dropped"]}]
