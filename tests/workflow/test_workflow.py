"""The federated run as a Snakemake workflow: what users type, each tested for real."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import (  # noqa: F401
    HANG,
    NO_BASELINES,
    ROOT,
    SNAKEFILE,
    TINY,
    averaged_weights,
    averagings_per_round,
    communicated,
    ok,
    receipts,
    snakemake,
    snakemake_command,
    snakemake_process,
    soma_clients,
)

from soma.store import Store
from soma.workflow import report


@pytest.fixture(scope="module")
def finished(tiny_run) -> Path:
    """One complete tiny run (2 clients, 2 rounds, both baselines), shared read-only."""
    return tiny_run[0]  # the session's (tests/tiny_run.py), test_progress's and test_model's too


def copy_of(finished: Path, tmp_path: Path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(finished, target, symlinks=True)
    return target


def test_a_local_run_leaves_receipts_a_table_and_a_plot(finished) -> None:
    results = finished / "results" / "tiny"
    table = (results / "summary.tsv").read_text().splitlines()
    header = ["strategy", "round", "federated", "alone", "alone_best", "centralized"]
    # the digits task evaluates on each client's own data too (soma.run.evaluation)
    header += ["validation", *report.VALIDATION, "train_loss"]
    assert table[0].split("\t") == [
        *header,
        "cpu_s",
        "cpu_s_cumulative",
        "trained",
        "dropped",
        "why",
    ]
    rows = [dict(zip(table[0].split("\t"), line.split("\t"), strict=True)) for line in table[1:]]
    assert [r["round"] for r in rows] == ["start", "0", "1"]  # the starting weights, then 0..
    assert [(r["trained"], r["dropped"]) for r in rows] == [("", ""), ("2", "0"), ("2", "0")]
    assert float(rows[-1]["federated"]) > float(rows[-1]["alone"]) + 0.2
    assert float(rows[-1]["alone_best"]) >= float(rows[-1]["alone"])
    assert (results / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # the metric's
    assert "<table>" in (results / "summary.html").read_text()
    for rule in (
        "start",
        "round/0/client/0",
        "round/1/average",
        "round/1/evaluation",
        "summary",
        "alone/1",
        "centralized",
        "best",
    ):
        assert (finished / "logs" / "tiny" / f"{rule}.log").exists(), rule
    # every round's average is in the store, named by what the receipt says
    store = Store(finished / "store")
    for r in range(2):
        receipt = json.loads((results / "round" / str(r) / "average.json").read_text())
        assert store.recall_digest(receipt["weights"])  # the averaged weights themselves
        assert [i["client"] for i in receipt["inputs"]] == [0, 1]
    assert averagings_per_round(finished / "store", "tiny") == {0: 1, 1: 1}


def test_receipts_are_deterministic_json_with_no_time_and_no_paths(finished) -> None:
    for name, data in receipts(finished).items():
        text = data.decode()
        value = json.loads(text)
        assert text == json.dumps(value, sort_keys=True, indent=2) + "\n", name
        assert str(finished) not in text and "/tmp" not in text and "/work" not in text, name
        assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:", text), f"{name} has a timestamp"


@pytest.mark.workflow
def test_a_bad_config_is_refused_with_the_key_before_any_job_runs(tmp_path) -> None:
    for override, said in (
        ("rounds=0", "config key `rounds`: '0' (an integer) is less than the minimum of 1"),
        ("roundz=3", "config key `roundz` is unknown"),
        ("threads=many", "config key `threads`: 'many' (text) is not of type 'integer'"),
        ("run=../escape", "config key `run`: '../escape' (text) does not match"),
        ("strategy=nosuch", "config key `strategy`: 'nosuch' is neither a built-in strategy"),
        (
            'strategy_options={"fedadam": {"bogus": 1}}',
            "config key `strategy_options` (under 'fedadam'): 'bogus' is unknown",
        ),
    ):
        result = snakemake(tmp_path, "--cores", "1", "--config", override)
        assert result.returncode != 0, override
        assert said in result.stdout, (override, result.stdout[-2000:])
        assert not (tmp_path / "results").exists() and not (tmp_path / "store").exists()


def test_a_results_folder_of_another_config_stops_before_any_job_naming_the_keys(
    finished, tmp_path
) -> None:
    workdir = copy_of(finished, tmp_path)
    record = json.loads((workdir / "results/tiny/run.json").read_text())
    assert record["run"] == "tiny" and record["declared"]["strategy"] == "fedavg"
    assert record["declared"]["task_options"]["model"] == "softmax"
    # the same config, more rounds (they extend a run), or batched clients (the same bits)
    for same in ([], ["--config", "rounds=3"], ["--config", "clients_per_job=2"]):
        ok(snakemake(workdir, "-n", *same))
    for override, said in (
        ("strategy=fedadam", "`strategy` fedavg there, fedadam here"),
        (
            'task_options={"soma.tasks.digits": {"model": "mlp"}}',
            "`task_options.model` softmax there, mlp here",
        ),
    ):
        result = snakemake(workdir, "-n", "--config", override)
        assert result.returncode != 0, override
        assert said in result.stdout, (override, result.stdout[-2000:])
        assert "`--config run=NAME`" in result.stdout and "remove 'results/tiny'" in result.stdout
        # and what becomes of the store's rounds of that run (they stay, beside the new one's)
        assert "store 'store' keeps that run's rounds" in result.stdout
    assert json.loads((workdir / "results/tiny/run.json").read_text()) == record


@pytest.mark.workflow
def test_a_dry_run_shows_the_dag_of_rounds(tmp_path) -> None:
    plan = ok(snakemake(tmp_path, "-n", "--config", "rounds=3"))
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", plan, flags=re.MULTILINE))
    assert counts["train"] == "6" and counts["average"] == "3" and counts["evaluate"] == "3"
    dag = ok(snakemake(tmp_path, "--dag", "--config", "rounds=3"))
    assert "digraph" in dag and "round: 2" in dag and "client: 1" in dag
    rules = ok(snakemake(tmp_path, "--rulegraph"))
    assert "digraph" in rules and "average" in rules and "train" in rules
    assert not (tmp_path / "results").exists()


@pytest.mark.workflow
def test_reading_the_snakefile_imports_no_torch(tmp_path) -> None:
    """Snakemake reads the Snakefile at every start, each Slurm submission's included: torch's
    import (2 s on the test machine) belongs to the jobs that train, not to the parse."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    plan = ok(snakemake(tmp_path, "-n", env=env))
    imported = re.findall(r"^import time:.*\|\s*(\S+)$", plan, flags=re.MULTILINE)
    assert "soma.config.spec" in imported and "snakemake.workflow" in imported
    assert [name for name in imported if name.split(".")[0] == "torch"] == []


@pytest.mark.workflow
def test_a_thousand_rounds_build_their_dag(tmp_path) -> None:
    """A deep chain of rounds: each round's clients wait for the round before."""
    plan = ok(
        snakemake(
            tmp_path, "-n", "--config", "rounds=1000", config=[TINY, NO_BASELINES], timeout=900
        )
    )
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", plan, flags=re.MULTILINE))
    assert counts["train"] == "2000" and counts["average"] == "1000"


def rerunning_round_0(
    workdir: Path,
    run: str = "tiny",
    config: tuple[Path, ...] = (TINY,),
    env: dict | None = None,
    more: tuple[str, ...] = (),
) -> subprocess.CompletedProcess:
    """The README's rerun of one round: exactly round 0's client and average jobs."""
    base = f"results/{run}/round/0"
    return snakemake(
        workdir,
        "--cores",
        "2",
        *more,
        "--until",
        f"{base}/average.json",
        "--forcerun",
        f"{base}/average.json",
        f"{base}/client/0.json",
        f"{base}/client/1.json",
        config=config,
        env=env,
    )


def rerun_round_0(*args, **kwargs) -> str:
    """`rerunning_round_0`, which must succeed: its output."""
    return ok(rerunning_round_0(*args, **kwargs))


def test_rerunning_a_round_that_reproduces_its_weights_leaves_later_rounds_alone(
    finished, tmp_path
) -> None:
    workdir = copy_of(finished, tmp_path)
    before = receipts(workdir)
    logs = workdir / "logs" / "tiny" / "round"
    stamps = {p: p.stat().st_mtime_ns for p in logs.rglob("*.log")}
    time.sleep(0.01)
    rerun_round_0(workdir)
    rerun = {p for p, t in stamps.items() if p.stat().st_mtime_ns != t}
    assert rerun == {
        logs / "0" / "client" / "0.log",
        logs / "0" / "client" / "1.log",
        logs / "0" / "average.log",
    }, "exactly round 0's client and average jobs"
    assert receipts(workdir) == before
    assert "Nothing to be done" in ok(snakemake(workdir, "-n"))


@pytest.mark.workflow
def test_rerunning_a_round_that_would_change_its_weights_is_refused_naming_the_client(
    tmp_path,
) -> None:
    """A client's record in a round is claimed once (issue 20): a rerun whose task now
    trains other weights from the same start is refused loudly, and the round stands."""
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'tests' / 'fixtures'}")
    drifting = ROOT / "tests" / "fixtures" / "drifting.yaml"
    # up to round 1's average (read below): the summary and model are the tiny run's to make
    last = "results/drift/round/1/average.json"
    ok(snakemake(tmp_path, "--cores", "2", last, config=[TINY, drifting], env=env))
    before = receipts(tmp_path, "drift")
    refused = rerunning_round_0(
        tmp_path, "drift", (TINY, drifting), env=dict(env, SOMA_TEST_DRIFT="0.5")
    )
    assert refused.returncode != 0
    said = (
        refused.stdout
        + refused.stderr
        + "".join(p.read_text() for p in (tmp_path / "logs" / "drift").rglob("*.log"))
    )
    assert "client 0 already contributed to round 0 of run 'drift'" in said, said[-3000:]
    store = Store(tmp_path / "store")
    published = [n for n in store.bound("drift/round/0/") if n.endswith("/published")]
    assert len(published) == 1  # one averaging of round 0, as before
    assert receipts(tmp_path, "drift")["round/1/average.json"] == before["round/1/average.json"]


@pytest.mark.workflow
def test_a_killed_run_resumes_from_the_last_finished_round(tmp_path) -> None:
    # up to the last round's average: evaluations, summary and model are not what resumes
    last = "results/tiny/round/3/average.json"
    process = snakemake_process(
        tmp_path, "--cores", "1", last, "--config", "rounds=4", config=[TINY, NO_BASELINES]
    )
    first = tmp_path / "results" / "tiny" / "round" / "1" / "average.json"
    deadline = time.monotonic() + HANG  # a hang's bound: the run makes it or ends
    while not first.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
    process.kill()
    said, _ = process.communicate()
    assert first.exists(), said[-3000:]
    assert not (tmp_path / "results" / "tiny" / "round" / "3" / "average.json").exists()
    # round 0 finished; round 1's receipt may be there with its job unfinished (incomplete)
    round_0 = tmp_path / "results" / "tiny" / "round" / "0"
    done = [round_0 / "client" / "0.json", round_0 / "client" / "1.json", round_0 / "average.json"]
    kept = {p: p.stat().st_mtime_ns for p in done}
    ok(snakemake(tmp_path, "--unlock", config=[TINY, NO_BASELINES]))  # a SIGKILL leaves the lock
    out = ok(
        snakemake(
            tmp_path,
            "--cores",
            "2",
            "--rerun-incomplete",
            last,
            "--config",
            "rounds=4",
            config=[TINY, NO_BASELINES],
        )
    )
    assert "Finished jobid" in out
    assert len(kept) == 3  # round 0's two client receipts and its average
    assert all(p.stat().st_mtime_ns == t for p, t in kept.items()), "round 0 was not done again"
    assert (tmp_path / "results" / "tiny" / "round" / "3" / "average.json").exists()


def test_two_snakemakes_in_two_directories_sharing_one_store_average_each_round_once(
    finished, tmp_path
) -> None:
    store = tmp_path / "shared-store"
    runs = [tmp_path / "a", tmp_path / "b"]
    # every receipt (compared below), not the summary and model made from them
    made = [f"results/tiny/round/{r}/evaluation.json" for r in range(2)]
    processes = [
        snakemake_process(
            w, "--cores", "1", *made, "--config", f"store={store}", config=[TINY, NO_BASELINES]
        )  # no baselines: they only read the start from the store
        for w in runs
    ]
    for p, (out, _) in zip(processes, communicated(processes, 600), strict=True):
        assert p.returncode == 0, out[-3000:]
    assert averagings_per_round(store, "tiny") == {0: 1, 1: 1}
    assert receipts(runs[0]) == receipts(runs[1])
    # and a run with a store of its own got the very same bits (it has the baselines' too)
    federated = {p: r for p, r in receipts(finished).items() if not p.startswith(("alone", "cent"))}
    assert receipts(runs[0]) == federated


def test_a_report_with_the_plot_and_the_table(finished, tmp_path) -> None:
    workdir = copy_of(finished, tmp_path)
    ok(snakemake(workdir, "--report", "report.html"))
    html = (workdir / "report.html").read_text(errors="replace")
    assert "accuracy.png" in html and "summary.tsv" in html
    # the table shown as a table: Snakemake's report renders HTML, and offers a TSV as a download
    assert '"summary.html"' in html and "data:text/html" in html


@pytest.mark.workflow
def test_lint_and_format_are_clean() -> None:
    lint = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--lint"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert lint.returncode == 0 and "Lints for" not in lint.stdout + lint.stderr, lint.stdout
    snakefmt = shutil.which("snakefmt")
    assert snakefmt, "snakefmt is part of the test extra"
    fmt = subprocess.run(
        [snakefmt, "--check", "Snakefile", "workflow"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr
    ruff = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ruff.returncode == 0, ruff.stdout


@pytest.mark.workflow
def test_a_task_of_your_own_from_the_readme(tmp_path) -> None:
    readme = (ROOT / "docs" / "tutorials" / "own-task.md").read_text()
    code = readme.split("```python\n# mytask.py", 1)[1].split("```", 1)[0]
    (tmp_path / "mytask.py").write_text("# mytask.py" + code)
    command = readme.split("```\nsnakemake --cores 2 -s /path/to/soma/Snakefile", 1)[1]
    given = shlex.split(command.split("```")[0].replace("\\\n", " "))
    assert given[0] == "--config" and "task=mytask" in given, given
    # the page's command as it is, fewer rounds (both baselines on: the comparison)
    # the table and its plot (read below), not the model
    made = [f"results/mytask/{name}" for name in ("summary.tsv", "loss.png")]
    ok(snakemake(tmp_path, "--cores", "2", *made, *given, "rounds=3", config=None))
    table = (tmp_path / "results" / "mytask" / "summary.tsv").read_text().splitlines()
    rows = [line.split("\t") for line in table[1:]]
    federated, alone = float(rows[-1][2]), float(rows[-1][3])
    assert federated < alone, "the federation fits the union better than a client alone"
    assert (tmp_path / "results" / "mytask" / "loss.png").exists(), "the plot of the metric"


# --- strategies ---------------------------------------------------------------------------------


def test_soma_client_and_the_workflow_train_the_same_bits(finished, tmp_path) -> None:
    lines = soma_clients(tmp_path / "store", "tiny")
    by_clients = [{line["weights"] for line in per_round} for per_round in zip(*lines, strict=True)]
    assert by_clients == [{w} for w in averaged_weights(finished, "tiny")]


@pytest.mark.workflow
def test_scaffold_in_the_workflow_keeps_its_states_and_reruns_a_round_bit_for_bit(tmp_path) -> None:
    """SCAFFOLD has both states: the server's c (named by each average) and each client's c_i
    (named by its receipt); a forced rerun of round 0 continues from exactly the same ones,
    and `soma client` trains the same bits."""
    scaffold = ("--config", "strategy=scaffold", "run=scaffold")
    last = "results/scaffold/round/1/average.json"  # the rounds, read below
    ok(snakemake(tmp_path, "--cores", "2", last, *scaffold, config=[TINY, NO_BASELINES]))
    before = receipts(tmp_path, "scaffold")
    averages = [json.loads(before[f"round/{r}/average.json"]) for r in range(2)]
    assert all(a["strategy"] == "scaffold" and a["state"] for a in averages)
    client = json.loads(before["round/1/client/0.json"])
    assert client["extra"] and client["own"], "the client sent delta c_i and kept c_i"
    store = Store(tmp_path / "store")
    record = store.recall_digest(
        next(d for d in soma_status(tmp_path / "store", "scaffold") if d["round"] == 1)["average"]
    )
    assert record["state_before"] == averages[0]["state"], "round 1 stepped from round 0's c"
    rerun_round_0(tmp_path, "scaffold", (TINY, NO_BASELINES), more=scaffold)
    assert receipts(tmp_path, "scaffold") == before
    lines = soma_clients(tmp_path / "cli-store", "scaffold", "--strategy", "scaffold")
    by_clients = [{line["weights"] for line in per_round} for per_round in zip(*lines, strict=True)]
    assert by_clients == [{w} for w in averaged_weights(tmp_path, "scaffold")]


def soma_status(store: Path, run: str) -> list[dict]:
    from soma.round import status

    return status(Store(store), run)


@pytest.mark.workflow
def test_a_strategy_by_import_path_with_an_unknown_option_stops_at_the_start_job(tmp_path) -> None:
    result = snakemake(
        tmp_path,
        "--cores",
        "1",
        "--config",
        "strategy=soma.strategies.fedadam",
        'strategy_options={"soma.strategies.fedadam": {"bogus": 1}}',
        config=[TINY, NO_BASELINES],
    )
    assert result.returncode != 0
    log = (tmp_path / "logs" / "tiny" / "start.log").read_text()
    assert "bogus" in log and "soma.strategies.fedadam" in log
    assert not (tmp_path / "results" / "tiny" / "round").exists(), "no client trained"


def test_the_default_configs_strategy_options_are_each_modules_defaults() -> None:
    """config/config.yaml shows each built-in's options; they must be what make() defaults to,
    or the workflow and `soma client` would run two different strategies under one name."""
    import inspect

    import yaml

    from soma.strategies import BUILTIN, load_strategy, module_of

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    shown = config["strategy_options"]
    for name in BUILTIN:
        load_strategy(name, shown.get(name, {}))  # every option shown is accepted
        make = __import__(module_of(name), fromlist=["make"]).make
        defaults = {
            key: p.default
            for key, p in inspect.signature(make).parameters.items()
            if p.default is not inspect.Parameter.empty
        }
        assert shown.get(name, {}) == defaults, name
