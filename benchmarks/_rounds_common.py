"""What benchmarks/rounds.py's sections share: the run's constants, and its children (the
measured processes), started together and reaped with their rusage and memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
ROUNDS = Path(__file__).resolve().with_name("rounds.py")  # the script every child runs
SNAKEFILE = REPO / "Snakefile"
CLIENTS = 10
DIGITS = "soma.tasks.digits"
CONTROL = "soma.tasks.control"
CONTROL_OPTIONS = {"examples": 8, "epochs": 1}
FAN_IN = 32
DAG_CLIENTS, DAG_ROUNDS = 1000, 10
MIB = 1024 * 1024
BASELINE_IMPORTS = (
    "import torch, soma, soma.cli, soma.round, soma.store, soma.round.tree, soma.tasks"
)


# --- Children: started together, reaped with their rusage ---------------------------------


class ChildFailed(RuntimeError):
    """A measured process exited non-zero; the message ends with its stderr."""


@dataclass
class Finished:
    name: str
    seconds: float  # from the common start until this process was reaped
    max_rss: int  # bytes (the kernel's ru_maxrss of this child)
    out: Path
    err: Path
    # with sampling: the largest of each /proc/<pid>/status field seen (bytes), e.g. RssAnon
    peaks: dict[str, int] = field(default_factory=dict)


def child_env() -> dict[str, str]:
    """One thread everywhere; this checkout's soma first on the path."""
    env = dict(os.environ)
    for name in ("SOMA_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


STATUS_FIELDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem")


def memory_status(pid: int | str = "self") -> dict[str, int]:
    """The memory fields of /proc/<pid>/status, in bytes ({} once the process is gone)."""
    found = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in STATUS_FIELDS or key == "VmHWM":
                    found[key] = int(value.split()[0]) * 1024  # "1234 kB"
    except (OSError, ValueError, IndexError):
        pass
    return found


def run_together(
    commands: dict[str, list[str]], folder: Path, sample_every: float | None = None
) -> tuple[float, list[Finished]]:
    """Start every command at once (cwd `folder`, output to files there), wait for all; the
    wall time until the last exits, and each one's exit time and max RSS (`os.wait4`).
    With `sample_every` (seconds), also each one's peak of /proc/<pid>/status's memory
    fields (`Finished.peaks`), read that often while it runs: a sampled peak, which can miss
    a spike shorter than the interval."""
    folder.mkdir(parents=True, exist_ok=True)
    env, started, handles = child_env(), {}, []
    tic = time.perf_counter()
    for name, argv in commands.items():
        out, err = folder / f"{name}.out", folder / f"{name}.err"
        handles += [open(out, "wb"), open(err, "wb")]
        proc = subprocess.Popen(argv, stdout=handles[-2], stderr=handles[-1], cwd=folder, env=env)
        started[proc.pid] = (name, proc, out, err)
    peaks: dict[int, dict[str, int]] = {pid: {} for pid in started}
    finished, failed = [], []

    def reap(pid: int, status: int, usage: Any) -> None:
        name, proc, out, err = started[pid]
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds, rss = time.perf_counter() - tic, usage.ru_maxrss * 1024
        finished.append(Finished(name, seconds, rss, out, err, peaks[pid]))
        if proc.returncode != 0:
            failed.append(f"{name} exited {proc.returncode}: {err.read_text()[-1500:].strip()}")

    running = set(started)
    while running:
        if sample_every is None:
            pid, status, usage = os.wait4(-1, 0)
            if pid in running:
                running.discard(pid)
                reap(pid, status, usage)
            continue
        for pid in sorted(running):
            for key, value in memory_status(pid).items():
                peaks[pid][key] = max(value, peaks[pid].get(key, 0))
            pid_, status, usage = os.wait4(pid, os.WNOHANG)
            if pid_ == pid:
                running.discard(pid)
                reap(pid, status, usage)
        if running:
            time.sleep(sample_every)
    wall = time.perf_counter() - tic
    for handle in handles:
        handle.close()
    if failed:
        raise ChildFailed("; ".join(failed))
    return wall, sorted(finished, key=lambda f: list(commands).index(f.name))


def last_json(path: Path) -> dict[str, Any]:
    lines = path.read_text().strip().splitlines()
    return json.loads(lines[-1]) if lines else {}


def me(job: dict[str, Any]) -> list[str]:
    """The command line of benchmarks/rounds.py as a child doing `job` (its `child`)."""
    return [sys.executable, str(ROUNDS), "--child", json.dumps(job)]


def soma_client(store: Path, rounds: int, clients: int, mine: str, task: str, *extra: str):
    options = CONTROL_OPTIONS if task == CONTROL else {}
    argv = ["client", "--store", str(store), "--run", "bench", "--rounds", str(rounds)]
    argv += ["--clients", str(clients), "--mine", mine, "--task", task, "--evaluate", "none"]
    for key, value in options.items():
        argv += ["--option", f"{key}={value}"]
    return [*argv, *extra]


# --- What the children and the rows share ---------------------------------------------------


def model_bytes(weights: dict) -> int:
    return sum(t.numel() * t.element_size() for node in weights.values() for t in node.values())


def mib(value: float | None) -> str:
    return "-" if value is None else f"{value / MIB:.0f}"


# --- The workflow's command line ------------------------------------------------------------


def snakemake(folder: Path, config: list[str], *flags: str) -> list[str]:
    argv = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "-d", str(folder)]
    return [*argv, *flags, "--cores", "2", "--config", *config, f"store={folder / 'store'}"]


# --- Targets --------------------------------------------------------------------------------


@dataclass
class Targets:
    lines: list[str] = field(default_factory=list)

    def say(self, what: str, met: bool | None, measured: str) -> None:
        verdict = "not measured" if met is None else ("met" if met else "NOT MET")
        self.lines.append(f"- {what}: {verdict} ({measured})")


# --- The parent ------------------------------------------------------------------------------


def attempt(row: dict[str, Any], measure, *args) -> dict[str, Any]:
    """`measure(*args)`, or `row` with the error when a child failed (the run goes on)."""
    try:
        made = measure(*args)
    except ChildFailed as error:
        made = {**row, "error": str(error)}
    label = made.get("row") or made.get("how") or f"clients_per_job={made.get('per_job')}"
    size = f"{made['clients']:,} clients, " if "clients" in made else ""
    took = f"{made['wall']:.1f} s" if "wall" in made else f"failed: {made['error'][:500]}"
    print(f"  {size}{label}: {took}", flush=True)
    return made
