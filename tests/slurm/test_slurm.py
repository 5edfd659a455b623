"""soma on a real Slurm cluster: snakemake --executor slurm, the srun mode, and faults.

Needs the one-node cluster of tests/slurm (`bash tests/slurm/start.sh`); every test is marked
`slurm` and skips, with the reason, when it is not running. Each test works in its own tmp
directory with the store inside it, runs `snakemake -s <repo>/Snakefile --profile
profiles/slurm-test` (or sbatch), and kills what it started when it ends: every subprocess
runs in its own session under a hard timeout (Snakemake ignores SIGTERM while jobs run, so
its process group gets SIGKILL), and the test's Slurm jobs, all named with a prefix of the
test's own, are scancel'ed.

Timing: each Slurm job of the workflow costs ~10 s (two Snakemake start-ups inside the job,
then the plugin's status check), so the job chains here are kept short: the whole workflow
(2 rounds x 2 clients, no baselines: 10 jobs, 7 deep) once, and one to three jobs elsewhere.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from slurm.cluster import ACCOUNT, PARTITION, cluster_running, slurm_env

from soma.round import Input, holders, inputs_key, read_record, status
from soma.round.once import Place
from soma.store import Store

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
SNAKEFILE = ROOT / "Snakefile"
PROFILE = ROOT / "profiles" / "slurm-test"
ROUNDS_PROFILE = ROOT / "profiles" / "slurm-test-rounds"  # a round per submission
TINY = ROOT / "tests" / "fixtures" / "tiny.yaml"
FIXTURES = ROOT / "tests" / "fixtures"
HOLD_CLAIM = ROOT / "tests" / "slurm" / "hold_claim.py"
SRUN_SBATCH = ROOT / "workflow" / "sbatch" / "soma-srun.sbatch"
ALLOCATION_SBATCH = ROOT / "workflow" / "sbatch" / "snakemake-allocation.sbatch"
RUN = "tiny"
RESULTS = f"results/{RUN}"
AVERAGE_0 = f"{RESULTS}/round/0/average.json"
CLIENTS_0 = [f"{RESULTS}/round/0/client/{k}.json" for k in range(2)]
# What the whole workflow submits, per rule, for 2 rounds x 2 clients without baselines.
WORKFLOW_JOBS = {
    "start": 1,
    "train": 4,
    "average": 2,
    "evaluate": 2,
    "summary": 1,
    "model": 1,
    "best": 1,
}
# Hard timeouts (seconds): generous for a loaded 2-core machine, finite for CI.
WHOLE_WORKFLOW = 900
FEW_JOBS = 420
ALIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED"}

T = TypeVar("T")


# --- running things, and cleaning up after them -------------------------------------------


@dataclass
class Result:
    returncode: int
    output: str  # stdout and stderr, interleaved
    command: list[str]

    def tail(self, chars: int = 4000) -> str:
        return f"$ {' '.join(self.command)}\n(exit {self.returncode})\n{self.output[-chars:]}"


@dataclass
class Job:
    id: str
    name: str
    comment: str
    state: str


class Slurm:
    """What one test starts: processes (each its own session) and Slurm jobs (by name prefix)."""

    def __init__(self, tag: str) -> None:
        tag = re.sub(r"[^A-Za-z0-9-]", "-", tag)[:24].strip("-")
        self.prefix = f"somatest-{tag}-{uuid.uuid4().hex[:6]}"
        self.running: list[subprocess.Popen] = []
        self.logs = 0

    def start(self, command: list[str], *, cwd: Path, env: dict | None = None):
        self.logs += 1
        log = cwd / f"command-{self.logs}.log"
        with open(log, "w") as out:
            process = subprocess.Popen(
                [str(c) for c in command],
                cwd=cwd,
                env=env or slurm_env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        process.log = log  # type: ignore[attr-defined]
        process.command = [str(c) for c in command]  # type: ignore[attr-defined]
        self.running.append(process)
        return process

    def finish(self, process, timeout: float) -> Result:
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(process)
            result = Result(-9, process.log.read_text(errors="replace"), process.command)
            pytest.fail(f"timed out after {timeout:g}s and killed:\n{result.tail()}")
        return Result(process.returncode, process.log.read_text(errors="replace"), process.command)

    def run(self, command: list, *, cwd: Path, timeout: float, env: dict | None = None) -> Result:
        return self.finish(self.start(command, cwd=cwd, env=env), timeout)

    def jobs(self) -> list[Job]:
        """This test's jobs that squeue still knows (any state), by their name's prefix."""
        out = subprocess.run(
            ["squeue", "-h", "-t", "all", "-o", "%i|%j|%k|%T"],
            env=slurm_env(),
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        jobs = [Job(*line.split("|", 3)) for line in out.splitlines() if line.count("|") >= 3]
        return [j for j in jobs if j.name.startswith(self.prefix)]

    def cleanup(self) -> None:
        for process in self.running:
            _kill(process)
        try:
            live = [j.id for j in self.jobs() if j.state in ALIVE]
        except (subprocess.SubprocessError, OSError):
            live = []
        if live:
            subprocess.run(["scancel", *live], env=slurm_env(), timeout=30, check=False)


def _kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=30)


def wait_for(what: str, check: Callable[[], T], timeout: float, every: float = 0.5) -> T:
    """check()'s first truthy answer, polled; fails the test naming `what` after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        answer = check()
        if answer:
            return answer
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout:g}s for {what}")
        time.sleep(every)


def sacct_states(job_ids: list[str]) -> dict[str, str]:
    """The allocation state of each job, as accounting has it (e.g. COMPLETED, CANCELLED)."""
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", ",".join(job_ids), "-o", "JobID,State"],
        env=slurm_env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    states = {}
    for line in out.splitlines():
        if "|" in line:
            job, state = line.split("|", 1)
            states[job] = state.split()[0] if state.split() else ""
    return states


def completed(jobs: dict[str, str]) -> None:
    """Wait until accounting has every one of these jobs, each COMPLETED."""
    wait_for(
        f"sacct to show jobs {', '.join(jobs)} completed",
        lambda: sacct_states(list(jobs)) == dict.fromkeys(jobs, "COMPLETED"),
        timeout=60,
    )


def ended(job_id: str, timeout: float = 60) -> str:
    """Wait until accounting says the job ended; its final state."""
    return wait_for(
        f"job {job_id} to end in sacct",
        lambda: (s := sacct_states([job_id]).get(job_id)) and s not in ALIVE and s,
        timeout,
    )


# --- the workflow ---------------------------------------------------------------------------


def write_config(workdir: Path, **overrides: Any) -> Path:
    """tiny.yaml (2 rounds x 2 clients of digits) without baselines, the store in `workdir`."""
    config = yaml.safe_load(TINY.read_text())
    config.update(run=RUN, rounds=2, clients=2, threads=1, store=str(workdir / "store"))
    config["baselines"] = {"alone": False, "centralized": False}
    config.update(overrides)
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=True))
    return path


def snakemake(
    workdir: Path, *args: str, slurm: Slurm | None = None, profile: Path = PROFILE
) -> list[str]:
    """A snakemake command in `workdir`: under Slurm with the test profile, else local."""
    command = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE)]
    command += ["--configfile", str(workdir / "config.yaml")]
    if slurm is not None:
        executor = yaml.safe_load((profile / "config.yaml").read_text())["executor"]
        command += ["--profile", str(profile), f"--{executor}-jobname-prefix", slurm.prefix]
    else:
        command += ["--cores", "2"]
    return command + list(args)


def submitted(output: str) -> dict[str, str]:
    """Slurm job id -> its Slurm log, for each job snakemake said it submitted."""
    found = re.findall(r"submitted with SLURM jobid (\d+) \(log: (\S+?)\)", output)
    return dict(found)


def rule_of(slurm_log: str) -> str:
    """The rule of a job, from where the plugin put its Slurm log (slurm_logs/rule_<rule>/...)."""
    return next(p.removeprefix("rule_") for p in Path(slurm_log).parts if p.startswith("rule_"))


def receipts(workdir: Path) -> dict[str, bytes]:
    results = workdir / "results"
    return {
        str(p.relative_to(workdir)): p.read_bytes()
        for p in sorted(results.rglob("*"))
        if p.is_file() and p.suffix in (".json", ".tsv")
    }


def place_of_round(workdir: Path, round: int) -> Place:
    """Where a round's averaging is claimed: its meeting and the digest of what its client
    receipts name."""
    inputs, meetings = [], set()
    for k in range(2):
        given = json.loads((workdir / RESULTS / f"round/{round}/client/{k}.json").read_text())
        inputs.append(Input(given["client"], given["weights"], given["size"], given["extra"]))
        meetings.add(given["meeting"])
    (meeting,) = meetings
    return Place(f"{RUN}/round/{round}/{meeting}/inputs/{inputs_key(meeting, inputs)}")


def averagings(store: Store, prefix: str) -> list[str]:
    return [n for n in store.bound(prefix) if "/computed/" in n]


@pytest.fixture(scope="module")
def cluster() -> str:
    up, why = cluster_running()
    if not up:
        pytest.skip(why)
    return why


@pytest.fixture
def slurm(cluster, request):
    session = Slurm(request.node.name.removeprefix("test_"))
    yield session
    session.cleanup()


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

    # Every job went through Slurm: sacct has each one, named with this run's id, completed.
    run_id = re.search(r"SLURM run ID: (\S+)", by_slurm.output)
    assert run_id and run_id.group(1).startswith("somatest-"), by_slurm.tail()
    jobs = submitted(by_slurm.output)
    assert len(jobs) == sum(WORKFLOW_JOBS.values()), by_slurm.tail()
    completed(jobs)
    names = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", ",".join(jobs), "-o", "JobName"],
        env=slurm_env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.split()
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


# --- 3. the srun mode -------------------------------------------------------------------------


def test_srun_mode_four_tasks_in_one_sbatch_average_each_round_once(cluster, tmp_path, slurm):
    store = tmp_path / "store"
    env = slurm_env()
    env.update(STORE=str(store), RUN="ctl", ROUNDS="2", OPTIONS="examples=64", DEADLINE="240")
    env["SOMA_THREADS"] = "1"
    if shutil.which("soma") is None:
        env["SOMA"] = f"{sys.executable} -m soma.cli"
    out = tmp_path / "srun-%j.out"
    sbatch = ["sbatch", "--wait", "--parsable", "--overcommit", "-p", PARTITION, "-A", ACCOUNT]
    sbatch += ["-J", slurm.prefix, "-t", "10", "--mem-per-cpu=2000", "-o", str(out)]
    sbatch.append(str(SRUN_SBATCH))
    batch = slurm.run(sbatch, cwd=tmp_path, timeout=FEW_JOBS, env=env)
    job = re.search(r"^(\d+)", batch.output, re.M)
    assert job, batch.tail()
    job = job.group(1)
    printed = (tmp_path / f"srun-{job}.out").read_text()
    assert batch.returncode == 0, batch.tail() + printed

    lines = [json.loads(line) for line in printed.splitlines() if line.startswith("{")]
    per_round = [line for line in lines if "round" in line]
    assert sorted((x["client"], x["round"]) for x in per_round) == [
        (k, r) for k in range(4) for r in range(2)
    ], printed
    final = Store(store)
    meetings = status(final, "ctl")
    assert [m["round"] for m in meetings] == [0, 1], "one meeting a round"
    for r in range(2):
        digests = {x["average"] for x in per_round if x["round"] == r}
        assert digests == {meetings[r]["average"]}, printed
    assert len({json.dumps(x["evaluation"]) for x in lines if "done" in x}) == 1
    averaged = averagings(final, "ctl/round/")
    assert len(averaged) == 2, averaged
    assert {n.split("/")[2] for n in averaged} == {"0", "1"}, "one averaging per round"

    shown = slurm.run(
        [sys.executable, "-m", "soma.cli", "status", "--store", store, "--run", "ctl"]
        + ["--clients", "4", "--json"],
        cwd=tmp_path,
        timeout=60,
    )
    assert shown.returncode == 0, shown.tail()
    rows = json.loads(shown.output)
    assert [row["round"] for row in rows] == [0, 1]
    for row in rows:
        assert row["written"] == [0, 1, 2, 3] and row["missing"] == []
        assert row["average"] == meetings[row["round"]]["average"] is not None
        assert row["averagings"] == 1

    # One batch job whose srun step ran four tasks.
    steps = subprocess.run(
        ["sacct", "-n", "-P", "-j", job, "-o", "JobID,NTasks,State"],
        env=slurm_env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert f"{job}.0|4|COMPLETED" in steps.split(), steps


# --- 3b. a whole run in one allocation: the shipped sbatch scripts ------------------------


def sbatch_wait(slurm: Slurm, workdir: Path, script: Path, env: dict, *flags: str) -> str:
    """Submit `script` with sbatch --wait from `workdir`; what the job printed (fails the test,
    showing it, unless the job completed)."""
    sbatch = ["sbatch", "--wait", "--parsable", "-p", PARTITION, "-A", ACCOUNT, "-J", slurm.prefix]
    sbatch += ["-t", "10", "-o", str(workdir / "job-%j.out"), *flags, str(script)]
    batch = slurm.run(sbatch, cwd=workdir, timeout=WHOLE_WORKFLOW, env=env)
    job = re.search(r"^(\d+)", batch.output, re.M)
    assert job, batch.tail()
    printed = (workdir / f"job-{job.group(1)}.out").read_text(errors="replace")
    assert batch.returncode == 0, batch.tail() + printed[-4000:]
    assert ended(job.group(1)) == "COMPLETED", printed[-4000:]
    return printed


def test_the_allocation_script_runs_the_workflow_inside_one_job_as_a_local_run_does(
    cluster, tmp_path, slurm
) -> None:
    """workflow/sbatch/snakemake-allocation.sbatch (2 rounds x 4 clients): snakemake --cores
    <the job's CPUs> inside one Slurm job gives every receipt of a local run, byte for byte."""
    inside, local = tmp_path / "allocation", tmp_path / "local"
    for workdir in (inside, local):
        workdir.mkdir()
        write_config(workdir, clients=4)
    beside = slurm.start(snakemake(local), cwd=local)
    env = slurm_env()
    env.update(CONFIG=str(inside / "config.yaml"), SNAKEFILE=str(SNAKEFILE))
    env["SNAKEMAKE"] = f"{sys.executable} -m snakemake"
    printed = sbatch_wait(slurm, inside, ALLOCATION_SBATCH, env, "-c", "2", "--mem-per-cpu=1500")
    locally = slurm.finish(beside, timeout=WHOLE_WORKFLOW)
    assert locally.returncode == 0, locally.tail()
    assert "with 2 cores" in printed, printed[-4000:]
    assert receipts(inside) == receipts(local)
    assert len([p for p in receipts(local) if "/client/" in p]) == 8


def test_the_srun_script_hosts_four_clients_on_two_tasks_and_ends_with_simulates_weights(
    cluster, tmp_path, slurm
) -> None:
    """CLIENTS=4 over --ntasks=2 (2 rounds): each task hosts 2 clients (PER_TASK, worked out
    by the script), and the final weights are `soma simulate`'s for the same run."""
    store = tmp_path / "store"
    env = slurm_env()
    env.update(STORE=str(store), RUN="ctl", ROUNDS="2", OPTIONS="examples=64", DEADLINE="240")
    env.update(CLIENTS="4", SOMA_THREADS="1", SOMA=f"{sys.executable} -m soma.cli")
    printed = sbatch_wait(
        slurm, tmp_path, SRUN_SBATCH, env, "--ntasks=2", "--overcommit", "--mem-per-cpu=1500"
    )
    assert "4 clients (2 a task, 2 tasks)" in printed, printed[-4000:]
    lines = [json.loads(line) for line in printed.splitlines() if line.startswith("{")]
    rounds = [line for line in lines if "round" in line]
    assert sorted((tuple(x["clients"]), x["round"]) for x in rounds) == [
        ((0, 1), 0), ((0, 1), 1), ((2, 3), 0), ((2, 3), 1)
    ], printed  # fmt: skip
    final = {x["weights"] for x in rounds if x["round"] == 1}
    assert len(final) == 1, printed

    simulate = [sys.executable, "-m", "soma.cli", "simulate", "--run", "ctl", "--rounds", "2"]
    simulate += ["--clients", "4", "--task", "soma.tasks.control", "--option", "examples=64"]
    simulate += ["--seed", "0"]
    alone = slurm.run(simulate, cwd=tmp_path, timeout=FEW_JOBS)
    assert alone.returncode == 0, alone.tail()
    simulated = [json.loads(x) for x in alone.output.splitlines() if x.startswith("{")]
    assert {x["weights"] for x in simulated if x.get("round") == 1} == final, alone.tail()


# --- 4a. a client job cancelled with scancel ---------------------------------------------------


def cancel_client_1_while_it_sleeps(workdir: Path, run, slurm: Slurm) -> Job:
    """scancel round 0's client 1 train job once it is running and sleeping in train()."""
    log = workdir / f"logs/{RUN}/round/0/client/1.log"

    def sleeping_client_1() -> Job | None:
        assert run.poll() is None, slurm.finish(run, 0).tail()
        if not (log.is_file() and "sleeping" in log.read_text()):
            return None
        # The plugin comments each job with its rule and wildcard values (round, then client).
        jobs = [j for j in slurm.jobs() if j.comment == "rule_train_wildcards_0_1"]
        return next((j for j in jobs if j.state == "RUNNING"), None)

    job = wait_for("client 1's train job sleeping in train()", sleeping_client_1, FEW_JOBS / 2)
    subprocess.run(["scancel", job.id], env=slurm_env(), timeout=30, check=True)
    return job


def test_a_client_job_cancelled_with_scancel_fails_the_run_naming_that_client(
    cluster, tmp_path, slurm
) -> None:
    slow = {"slow_client": 1, "seconds": 600, "inner": "soma.tasks.control", "examples": 64}
    write_config(tmp_path, task="slow_task", task_options={"slow_task": slow}, metric="loss")
    env = slurm_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FIXTURES), env.get("PYTHONPATH")]))
    command = snakemake(tmp_path, AVERAGE_0, "--retries", "0", slurm=slurm)  # not the profile's
    run = slurm.start(command, cwd=tmp_path, env=env)
    job = cancel_client_1_while_it_sleeps(tmp_path, run, slurm)
    failed = slurm.finish(run, timeout=FEW_JOBS / 2)

    assert failed.returncode != 0, failed.tail()
    out = failed.output
    assert "Error in rule train" in out, failed.tail()
    error = out[out.index("Error in rule train") :]
    assert f"SLURM-job '{job.id}' failed, SLURM status is: 'CANCELLED'" in error, failed.tail()
    assert f"output: {CLIENTS_0[1]}" in error, failed.tail()
    assert f"log: logs/{RUN}/round/0/client/1.log" in error, failed.tail()
    assert f"rule_train/0_1/{job.id}.log" in error, failed.tail()  # the wildcards, by value
    # and the job Snakemake announced as that failed one was train with round=0, client=1
    snakemake_job = re.search(r"jobid: (\d+)", error).group(1)
    then = r"\n(?:    .*\n)*?    "  # on: any lines of the same job's block, then this field
    announced = re.search(rf"rule train:{then}jobid: {snakemake_job}{then}wildcards: (.*)", out)
    assert announced and announced.group(1) == "round=0, client=1", failed.tail()
    assert ended(job.id) == "CANCELLED"
    assert not (tmp_path / CLIENTS_0[1]).exists() and not (tmp_path / AVERAGE_0).exists()


def test_with_a_quorum_a_cancelled_client_job_is_retried_drops_out_and_the_round_goes_on(
    cluster, tmp_path, slurm
) -> None:
    """scancel, as a preemption would: Snakemake retries the job (--retries 1); the retry
    finds its first attempt ended without a trace (sacct says CANCELLED) and drops out saying
    so; the round is averaged over the others, and its record says who was left out."""
    slow = {"slow_client": 1, "seconds": 600, "inner": "soma.tasks.control", "examples": 32}
    write_config(
        tmp_path,
        task="slow_task",
        task_options={"slow_task": slow},
        metric="loss",
        clients=3,
        quorum=2,
    )
    env = slurm_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FIXTURES), env.get("PYTHONPATH")]))
    command = snakemake(tmp_path, AVERAGE_0, "--retries", "1", slurm=slurm)
    run = slurm.start(command, cwd=tmp_path, env=env)
    job = cancel_client_1_while_it_sleeps(tmp_path, run, slurm)
    done = slurm.finish(run, timeout=FEW_JOBS)
    assert done.returncode == 0, done.tail()
    assert ended(job.id) == "CANCELLED"
    dropped = json.loads((tmp_path / RESULTS / "round/0/client/1.json").read_text())
    assert dropped["dropped"].startswith("died: its previous job")
    assert f"Slurm job {job.id}" in dropped["dropped"]
    average = json.loads((tmp_path / AVERAGE_0).read_text())
    assert [i["client"] for i in average["inputs"]] == [0, 2]
    assert average["left_out"] == [{"client": 1, "why": dropped["dropped"]}]


# --- 4b. an averager killed holding the claim --------------------------------------------------


def test_an_averager_killed_holding_the_claim_is_taken_over_once_slurm_says_it_ended(
    cluster, tmp_path, slurm
) -> None:
    write_config(tmp_path)
    clients = slurm.run(snakemake(tmp_path, *CLIENTS_0), cwd=tmp_path, timeout=FEW_JOBS)
    assert clients.returncode == 0, clients.tail()
    store = Store(tmp_path / "store")
    place = place_of_round(tmp_path, 0)

    # A real Slurm job claims the round's averaging, then sleeps.
    hold = f"exec {sys.executable} {HOLD_CLAIM} {store.directory} {place.claimed}"
    sbatch = ["sbatch", "--parsable", "-p", PARTITION, "-A", ACCOUNT, "-J", f"{slurm.prefix}-hold"]
    sbatch += ["-t", "10", "--mem=500", "-o", str(tmp_path / "hold-%j.out"), "--wrap", hold]
    submit = slurm.run(sbatch, cwd=tmp_path, timeout=60)
    assert submit.returncode == 0, submit.tail()
    holder_job = submit.output.strip().split(";")[0]
    claim = wait_for(
        "the Slurm job's claim on the averaging",
        lambda: store.resolve(place.claimed),
        timeout=120,
    )
    holder = read_record(store, claim)
    assert holder["slurm_job"] == holder_job and holder["role"] == "averaging"
    assert not holders.gone(holder), "a running Slurm job is alive"

    # While it is alive, an average job waits for it, and past its deadline names it.
    alive = slurm.run(
        snakemake(tmp_path, AVERAGE_0, "--config", "average_deadline=3"),
        cwd=tmp_path,
        timeout=FEW_JOBS,
    )
    assert alive.returncode != 0, alive.tail()
    log = (tmp_path / f"logs/{RUN}/round/0/average.log").read_text()
    assert "AveragerDied" in log and "never published" in log, log
    assert f"Slurm job {holder_job}" in log, log
    assert store.bound(place.takeovers) == [] and store.resolve(place.published) is None

    # Dead: scancel it; once Slurm says it ended, the average job under Slurm takes over.
    subprocess.run(["scancel", holder_job], env=slurm_env(), timeout=30, check=True)
    assert ended(holder_job) == "CANCELLED"
    assert holders.gone(holder)
    taken = slurm.run(snakemake(tmp_path, AVERAGE_0, slurm=slurm), cwd=tmp_path, timeout=FEW_JOBS)
    assert taken.returncode == 0, taken.tail()
    (averager,) = submitted(taken.output)
    assert store.bound(place.takeovers) == [f"{place.takeovers}1"]
    published = store.resolve(place.published)
    assert published is not None
    assert len(averagings(store, f"{place.prefix}/")) == 1
    record = read_record(store, published)
    assert record["averaged_by"]["slurm_job"] == averager != holder_job
    receipt = (tmp_path / AVERAGE_0).read_bytes()
    assert json.loads(receipt)["weights"] == record["weights"]

    # And it never changes: a forced rerun of the average finds it published.
    again = slurm.run(
        snakemake(tmp_path, AVERAGE_0, "--forcerun", AVERAGE_0, slurm=slurm),
        cwd=tmp_path,
        timeout=FEW_JOBS,
    )
    assert again.returncode == 0, again.tail()
    assert len(submitted(again.output)) == 1, again.tail()
    assert (tmp_path / AVERAGE_0).read_bytes() == receipt
    assert store.resolve(place.published) == published
    assert len(averagings(store, f"{place.prefix}/")) == 1
    assert store.bound(place.takeovers) == [f"{place.takeovers}1"]


def test_a_holder_whose_step_ended_in_a_running_allocation_is_gone(cluster, tmp_path, slurm):
    """An srun step of an allocation claims the averaging and is cancelled (scancel JOB.STEP)
    while the allocation runs on: a holder on another node of it, whose pid nobody here can
    check, is gone once Slurm says its step ended, so its claim can be taken over."""
    store = Store(tmp_path / "store")
    name = "run/round/0/m/inputs/x/averaging/claimed"
    hold = f"srun -n 1 {sys.executable} {HOLD_CLAIM} {store.directory} {name} & sleep 300; wait"
    sbatch = ["sbatch", "--parsable", "-p", PARTITION, "-A", ACCOUNT, "-J", f"{slurm.prefix}-hold"]
    sbatch += ["-t", "10", "--mem=500", "-o", str(tmp_path / "hold-%j.out"), "--wrap", hold]
    submit = slurm.run(sbatch, cwd=tmp_path, timeout=60)
    assert submit.returncode == 0, submit.tail()
    job = submit.output.strip().split(";")[0]
    claim = wait_for("the step's claim", lambda: store.resolve(name), timeout=120)
    holder = read_record(store, claim)
    assert (holder["slurm_job"], holder["slurm_step"]) == (job, "0"), holder
    assert f"Slurm job {job} step 0" in holders.describe(holder)
    elsewhere = {**holder, "host": "another-node-of-the-allocation"}
    assert not holders.gone(elsewhere), "its step runs"

    subprocess.run(["scancel", f"{job}.0"], env=slurm_env(), timeout=30, check=True)
    wait_for(
        f"step {job}.0 to end",
        lambda: holders.slurm_step_state(job, "0") not in (None, "RUNNING"),
        timeout=60,
    )
    assert holders.slurm_job_state(job) == "RUNNING", "the allocation runs on"
    assert holders.gone(elsewhere)


@pytest.mark.parametrize(
    ("sacct", "squeue_steps", "gone"),
    [
        ("7.3|RUNNING", "", False),
        ("7.3|CANCELLED by 0", "", True),
        ("7.3|COMPLETED", "", True),
        ("", "7.batch 7.3", False),  # accounting has no word: squeue lists the running steps
        ("", "7.batch", True),
        ("", "", False),  # nobody can tell: alive
    ],
)
def test_a_holders_step_is_asked_of_sacct_then_squeue(
    tmp_path, monkeypatch, sacct, squeue_steps, gone
) -> None:
    """Fake sacct and squeue (job 7 RUNNING): what gone() concludes about step 3 of it."""
    steps = "".join(f"echo {step}; " for step in squeue_steps.split())
    fakes = {
        "sacct": f"echo '{sacct}'" if sacct else "true",
        "squeue": f'case "$*" in *-s*) {steps}true;; *) echo RUNNING;; esac',
    }
    for command, body in fakes.items():
        script = tmp_path / command
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    holder = {"host": "another-node", "pid": 1, "slurm_job": "7", "slurm_step": "3"}
    assert holders.gone(holder) is gone
    assert holders.gone({**holder, "slurm_step": None}) is False


# --- the profiles -----------------------------------------------------------------------------


def test_the_profiles_name_the_workflows_rules_and_the_test_cluster(tmp_path) -> None:
    """Per-rule settings for a rule that no longer exists are silently ignored by Snakemake."""
    write_config(tmp_path)
    listed = subprocess.run(
        snakemake(tmp_path, "--list-rules"), cwd=tmp_path, capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr
    rules = {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}
    assert {"start", "train", "average", "evaluate", "alone", "centralized", "summary"} <= rules
    user = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    test = yaml.safe_load((PROFILE / "config.yaml").read_text())
    rounds = yaml.safe_load((ROUNDS_PROFILE / "config.yaml").read_text())
    # a round side by side; a job per submission, its end seen within a second
    assert user["executor"] == rounds["executor"] == test["executor"] == "soma-slurm"
    for profile in (user, test, rounds):
        assert profile["retries"] == 1
        assert set(profile.get("set-resources", {})) <= rules
        assert set(profile.get("set-threads", {})) <= rules
        # an executor's settings are spelled with its name: another's are silently ignored
        settings = {k for k in profile if k.startswith(("slurm-", "soma-slurm-"))}
        assert {k for k in settings if not k.startswith(profile["executor"] + "-")} == set()
        assert "serial" not in profile.get("default-resources", {})  # rounds run side by side
    assert {"train", "average"} <= set(user["set-resources"])
    assert "slurm_partition" not in user["default-resources"], "the user's to fill in"
    assert test["default-resources"]["slurm_partition"] == PARTITION
    assert test["default-resources"]["slurm_account"] == ACCOUNT
    assert test["soma-slurm-init-seconds-before-status-checks"] == 1
    assert rounds["soma-slurm-init-seconds-before-status-checks"] == 1


@pytest.mark.parametrize("profile", ["slurm", "slurm-test", "slurm-test-rounds"])
def test_every_shipped_profile_takes_a_secure_run(tmp_path, profile) -> None:
    """A dry run builds the DAG and its groups: a round's group that held train but not the
    secure phases before it (keys, share) was refused there ("depends on rule(s) keys,share
    from outside the group"), before any job ran."""
    write_config(tmp_path, clients=3, secure_aggregation={"threshold": 2})
    command = snakemake(tmp_path, "-n", "--profile", str(ROOT / "profiles" / profile))
    dry = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, (dry.stdout + dry.stderr)[-4000:]
    assert re.search(r"^keys\s+6$", dry.stdout, re.M), dry.stdout[-4000:]


# --- 5. asking for what runs; refusals before anything runs; the time limit -------------------


def profile_like(base: Path, folder: Path, **changes: Any) -> Path:
    """A copy of profile `base` in `folder`, with top-level keys changed (a None drops one)
    and `default-resources`/`set-resources` entries merged in."""
    profile = yaml.safe_load((base / "config.yaml").read_text())
    for key, value in changes.items():
        key = key.replace("_", "-")
        if value is None:
            profile.pop(key, None)
        elif key in ("default-resources", "set-resources") and key in profile:
            for name, given in value.items():
                merged = profile[key].get(name)
                profile[key][name] = {**merged, **given} if isinstance(merged, dict) else given
        else:
            profile[key] = value
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return folder


def with_fixtures() -> dict[str, str]:
    env = slurm_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FIXTURES), env.get("PYTHONPATH")]))
    return env


def test_the_shipped_profile_with_partition_and_account_is_refused_naming_the_cpu_limit(
    cluster, tmp_path, slurm
) -> None:
    """profiles/slurm with only its two lines filled in: on the test node (2 CPUs) round 0's
    submission (its 2 train jobs side by side at 4 threads each: 8 CPUs) cannot run, and the
    run is refused before any submission, one `soma:` line naming the CPU limit (plugin 2.8.0
    said only "message: None" for a group's refusal); on a node with 8 CPUs or more it runs."""
    shipped = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    filled = {"slurm_partition": PARTITION, "slurm_account": ACCOUNT}
    profile = profile_like(ROOT / "profiles" / "slurm", tmp_path / "profile",
                           default_resources=filled)  # fmt: skip
    write_config(tmp_path, rounds=1, clients_per_job=1)
    command = snakemake(tmp_path, AVERAGE_0, slurm=slurm, profile=profile)
    run = slurm.run(command, cwd=tmp_path, timeout=FEW_JOBS)
    if run.returncode == 0:  # a node that fits the profile's threads
        return
    assert not submitted(run.output) and not slurm.jobs(), run.tail()
    (said,) = [line for line in run.output.splitlines() if line.startswith("soma: ")]
    cpus = min(shipped["cores"], 2 * shipped["set-threads"]["train"])  # 2 clients at once
    assert f"asks {cpus} CPUs (--cpus-per-task)" in said, run.tail()
    assert f"partition {PARTITION} has at most" in said and "`set-threads`" in said, said
    assert "group round0's submission (average, start, 2 train)" in said, said


def test_a_submission_slurm_refuses_is_refused_before_any_with_slurms_message(
    cluster, tmp_path, slurm
) -> None:
    """A request only Slurm can judge (a node feature no node has): `sbatch --test-only`'s
    refusal, in Slurm's words, is the run's error, before anything is submitted."""
    profile = profile_like(ROUNDS_PROFILE, tmp_path / "profile",
                           set_resources={"train": {"constraint": "nosuch"}})  # fmt: skip
    write_config(tmp_path, rounds=1, clients_per_job=1)
    run = slurm.run(snakemake(tmp_path, slurm=slurm, profile=profile), cwd=tmp_path,
                    timeout=FEW_JOBS)  # fmt: skip
    assert run.returncode != 0 and not submitted(run.output), run.tail()
    (said,) = [line for line in run.output.splitlines() if line.startswith("soma: ")]
    assert said.startswith("soma: Slurm refuses group round0's submission"), said
    assert "Invalid feature specification" in said and "-C nosuch" in said, said


def time_limit_of(job: str) -> int:
    """A finished job's time limit in minutes, from accounting."""
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", job, "-o", "TimelimitRaw"],
        env=slurm_env(), capture_output=True, text=True, timeout=30, check=True,
    ).stdout.split()  # fmt: skip
    return int(out[0])


def sleep_of(workdir: Path, client: int) -> tuple[float, float]:
    """When round 0's client slept in train() (tests/fixtures/slow_task.py logs both ends)."""
    log = (workdir / f"logs/{RUN}/round/0/client/{client}.log").read_text()
    began = re.search(rf"client {client}: sleeping .* from ([0-9.]+)", log)
    woke = re.search(rf"client {client}: woke at ([0-9.]+)", log)
    assert began and woke, log
    return float(began[1]), float(woke[1])


def steps_of(job: str) -> list[str]:
    """The job steps Slurm's accounting lists for a job (batch and extern left out)."""
    out = subprocess.run(
        ["sacct", "-n", "-P", "-j", job, "-o", "JobID"],
        env=slurm_env(), capture_output=True, text=True, timeout=30, check=True,
    ).stdout.split()  # fmt: skip
    steps = [line.split(".", 1)[1] for line in out if "." in line]
    return [step for step in steps if step not in ("batch", "extern")]


def test_a_rounds_submission_runs_its_train_jobs_side_by_side_as_it_asked(
    cluster, tmp_path, slurm
) -> None:
    """profiles/slurm-test-rounds (executor soma-slurm): a round's submission runs its jobs
    with Snakemake's local executor, in one job step. Two train jobs of 2 min each, each
    sleeping 30 s, the other jobs 0 min, on the node's 2 CPUs: the submission asks 2 CPUs
    and 2 min (the trains side by side: one layer), and the two sleeps overlap in time, as
    the clients' logs show (the Slurm plugin's own executor ran them as two job steps in
    series and asked the sum of their runtimes). Overlap, not the job's elapsed time, is the
    proof: on a loaded machine the job's start-up alone may take tens of seconds."""
    quick = {"runtime": 0}
    profile = profile_like(
        ROUNDS_PROFILE,
        tmp_path / "profile",
        set_resources={"train": {"runtime": 2}, "start": quick, "average": quick},
    )
    slow = {"slow_client": -1, "seconds": 30, "inner": "soma.tasks.control", "examples": 32}
    write_config(tmp_path, rounds=1, task="slow_task", task_options={"slow_task": slow},
                 metric="loss", clients_per_job=1)  # fmt: skip
    command = snakemake(tmp_path, AVERAGE_0, slurm=slurm, profile=profile)
    run = slurm.run(command, cwd=tmp_path, env=with_fixtures(), timeout=FEW_JOBS)
    assert run.returncode == 0, run.tail()
    (job,) = submitted(run.output)
    completed({job: ""})
    limit = time_limit_of(job)
    assert limit == 2, limit  # 0 (start) + 2 (both trains, one layer) + 0 (average)
    (first, second) = (sleep_of(tmp_path, client) for client in (0, 1))
    assert first[0] < second[1] and second[0] < first[1], (first, second)  # side by side
    assert steps_of(job) == ["0"], steps_of(job)  # one step: no Snakemake step per job
    asked = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", job, "-o", "ReqCPUS"],
        env=slurm_env(), capture_output=True, text=True, timeout=30, check=True,
    ).stdout.split()  # fmt: skip
    assert asked == ["2"], asked
    average = json.loads((tmp_path / AVERAGE_0).read_text())
    assert [i["client"] for i in average["inputs"]] == [0, 1]


def test_a_client_signalled_before_its_time_limit_withdraws_and_the_quorum_goes_on(
    cluster, tmp_path, slurm
) -> None:
    """`--signal=URG@30` on a round's submission (profiles/slurm-test-rounds, soma-slurm: its
    one job step, run by the local executor) whose train jobs ask 2 min and its other jobs 0:
    Slurm signals it 30 to 90 s in (it may signal up to 60 s early), while it trains; client
    1, sleeping 300 s in train, drops out saying "time limit, raise `runtime`", the
    submission ends before its limit, not killed by it, and the round is averaged over client
    0 (quorum 1) at once, not at the deadline. (A job per submission, profiles/slurm-test, runs
    under the same executor: its step is signalled the same way.)"""
    quick = {"runtime": 0}
    profile = profile_like(
        ROUNDS_PROFILE,
        tmp_path / "profile",
        default_resources={"slurm_extra": "'--signal=URG@30'"},
        set_resources={"train": {"runtime": 2}, "start": quick, "average": quick},
    )
    slow = {"slow_client": 1, "seconds": 300, "inner": "soma.tasks.control", "examples": 32}
    write_config(tmp_path, rounds=1, task="slow_task", task_options={"slow_task": slow},
                 metric="loss", quorum=1, clients_per_job=1)  # fmt: skip
    command = snakemake(tmp_path, AVERAGE_0, slurm=slurm, profile=profile)
    run = slurm.run(command, cwd=tmp_path, env=with_fixtures(), timeout=FEW_JOBS)
    assert run.returncode == 0, run.tail()
    dropped = json.loads((tmp_path / RESULTS / "round/0/client/1.json").read_text())
    assert "time limit, raise `runtime`" in dropped["dropped"], dropped
    average = json.loads((tmp_path / AVERAGE_0).read_text())
    assert [i["client"] for i in average["inputs"]] == [0]
    assert average["left_out"] == [{"client": 1, "why": dropped["dropped"]}]
    (job,) = submitted(run.output)
    assert ended(job) == "COMPLETED"  # ended at the signal: a job killed at its limit is TIMEOUT
