"""What the Slurm tests share: running things on the test cluster and cleaning up after
them, and the workflow's commands, configs and receipts (tests/slurm/test_slurm*.py).

Each test works in its own tmp directory with the store inside it, runs `snakemake -s
<repo>/Snakefile --profile profiles/slurm-test` (or sbatch), and kills what it started when
it ends: every subprocess runs in its own session under a hard timeout (Snakemake ignores
SIGTERM while jobs run, so its process group gets SIGKILL), and the test's Slurm jobs, all
named with a prefix of the test's own, are scancel'ed.

Timing: each Slurm job of the workflow costs ~10 s (two Snakemake start-ups inside the job,
then the plugin's status check), so the job chains are kept short: the whole workflow (2
rounds x 2 clients, no baselines: 10 jobs, 7 deep) once, and one to three jobs elsewhere.
"""

from __future__ import annotations

import json
import os
import re
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
from slurm.cluster import slurm_env

from soma.round import Input, inputs_key
from soma.round.once import Place
from soma.store import Store

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
        out = slurm_output("squeue", "-h", "-t", "all", "-o", "%i|%j|%k|%T")
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


def slurm_output(*command: str) -> str:
    """What a Slurm command (squeue, sacct, scancel, ...) printed; an error if it failed."""
    return subprocess.run(
        command, env=slurm_env(), capture_output=True, text=True, timeout=30, check=True
    ).stdout


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
    out = slurm_output("sacct", "-X", "-n", "-P", "-j", ",".join(job_ids), "-o", "JobID,State")
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
        str(p.relative_to(workdir)): without_costs(p) if p.suffix == ".tsv" else p.read_bytes()
        for p in sorted(results.rglob("*"))
        if p.is_file() and p.suffix in (".json", ".tsv")
    }


def without_costs(path: Path) -> bytes:
    """A summary table without what each round cost (soma.workflow.report.COST), which
    differs from one run to the next; every other cell is the same bytes."""
    from soma.workflow.report import COST

    lines = [line.split("\t") for line in path.read_text().splitlines()]
    keep = [i for i, name in enumerate(lines[0]) if name not in COST]
    return ("\n".join("\t".join(line[i] for i in keep) for line in lines) + "\n").encode()


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
