"""What a run's Slurm submissions asked against what they used, per rule, with the profile
values that would fit (`soma slurm usage`, soma.cli.slurm).

The submissions are found where the Slurm plugin keeps their logs, one folder per rule or
group (`.snakemake/slurm_logs/rule_<rule>/.../<job>.log`, `group_<group>/.../<job>.log`:
profiles/slurm keeps them, `soma-slurm-keep-successful-logs`), so a run's own jobs are
reported and no one else's. What each asked and used is Slurm's accounting (`sacct -P`): the
job's line says what it asked (ReqMem, Timelimit, ReqCPUS, ReqTRES) and how long it ran; its
steps say what they used (MaxRSS: the largest of one step's tasks; TotalCPU). Pure text work
here (`parse_sacct`, `report`), tested with sacct's text; soma.slurm.query-like calls run it.
"""

from __future__ import annotations

import math
import re
import subprocess
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from soma.slurm.limits import SlurmRefused

__all__ = ["FIELDS", "Used", "jobs_in", "parse_sacct", "report", "sacct", "seconds", "size_mb"]

FIELDS = "JobID,State,ReqCPUS,ReqMem,Timelimit,Elapsed,TotalCPU,MaxRSS,ReqTRES,TRESUsageInMax"
# Head room of a suggestion over the most a rule used: memory x1.5 (+ 200 MB for a start
# that reads more than the largest job seen), time x2 (queues and nodes differ), whole units.
MEM_HEADROOM, MEM_FLOOR_MB, TIME_HEADROOM = 1.5, 200, 2.0
# What the report says of memory no step was sampled for: Slurm samples a step's memory every
# JobAcctGatherFrequency seconds (30 by default), and a shorter job may have no sample.
UNSAMPLED = "memory not sampled (the job was shorter than Slurm's JobAcctGatherFrequency)"
_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def size_mb(text: str) -> float | None:
    """sacct's sizes in MB: `123456K`, `12M`, `1.50G`, `8000Mn` (per node), `2000Mc` (per
    CPU: as sacct printed it), a bare number in bytes; None when empty."""
    found = re.fullmatch(r"([0-9.]+)([KMGT]?)[nc]?", text.strip())
    if not found:
        return None
    number, unit = float(found.group(1)), found.group(2)
    return number * _UNITS[unit] if unit else number / (1024 * 1024)  # no unit: bytes


def seconds(text: str) -> float | None:
    """sacct's durations in seconds: `[D-]HH:MM:SS`, `MM:SS`, `MM:SS.mmm`; None when empty
    or UNLIMITED."""
    text = text.strip()
    if not text or text.upper() in {"UNLIMITED", "INVALID", "PARTITION_LIMIT"}:
        return None
    days, _, rest = text.rpartition("-")
    parts = [float(part) for part in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    hours, minutes, secs = parts
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + secs


def _gpus(tres: str) -> int:
    found = re.search(r"gres/gpu(?::[^=,]+)?=(\d+)", tres)
    return int(found.group(1)) if found else 0


def _gpu_used(tres: str) -> str | None:
    found = re.search(r"gres/gpumem=([0-9.]+[KMGT]?)", tres)
    util = re.search(r"gres/gpuutil=(\d+)", tres)
    said = [
        f"{size_mb(found.group(1)):.0f} MB" if found else "",
        f"{util.group(1)}%" if util else "",
    ]
    return ", ".join(s for s in said if s) or None


@dataclass
class Used:
    """One submission: what it asked, and the most it used."""

    job: str
    state: str = ""
    cpus: int = 0
    mem_mb: float | None = None
    limit_s: float | None = None
    gpus: int = 0
    elapsed_s: float = 0.0
    cpu_s: float = 0.0
    rss_mb: float | None = None  # None: no step was sampled (shorter than Slurm's interval)
    gpu: str | None = None
    steps: list[str] = field(default_factory=list)


def sacct_rows(text: str, fields: str) -> Iterator[tuple[str, str, dict[str, str]]]:
    """Each line of `sacct -P -n -o <fields>` (jobs and their steps, `|`-separated) as its job
    id, its step ("" for the job's own line) and its values by field; a line of other fields
    (sacct's own warnings) is skipped."""
    names = fields.split(",")
    for line in text.splitlines():
        values = line.split("|")
        if len(values) == len(names):
            row = dict(zip(names, values, strict=True))
            job, _, step = row["JobID"].partition(".")
            yield job, step, row


def parse_sacct(text: str) -> dict[str, Used]:
    """`sacct -P -n -o FIELDS` (jobs and their steps, `|`-separated) per job id."""
    jobs: dict[str, Used] = {}
    for job, step, row in sacct_rows(text, FIELDS):
        used = jobs.setdefault(job, Used(job))
        if not step:
            used.state = row["State"].split()[0] if row["State"] else ""
            used.cpus = int(row["ReqCPUS"] or 0)
            used.mem_mb = size_mb(row["ReqMem"])
            used.limit_s = seconds(row["Timelimit"])
            used.gpus = _gpus(row["ReqTRES"])
            used.elapsed_s = seconds(row["Elapsed"]) or 0.0
            used.cpu_s = seconds(row["TotalCPU"]) or 0.0
        else:
            used.steps.append(step)
            rss = size_mb(row["MaxRSS"])
            if rss is not None:
                used.rss_mb = max(used.rss_mb or 0.0, rss)
            used.gpu = _gpu_used(row["TRESUsageInMax"]) or used.gpu
    return jobs


# The workflow's rules whose names hold a `_`, which the plugin's group folder names join with.
JOINED = ("train_batch", "study_summary", "study_start")


def _rules(joined: str) -> list[str]:
    """The rules of a group's folder name (`average_start_train_batch`), JOINED kept whole."""
    words, rules = joined.split("_"), []
    while words:
        pair = "_".join(words[:2])
        taken = 2 if pair in JOINED else 1
        rules.append("_".join(words[:taken]))
        words = words[taken:]
    return rules


def jobs_in(logs: Path) -> dict[str, str]:
    """The Slurm jobs whose logs are under `logs` (`.snakemake/slurm_logs`), each with what
    it ran: `rule <name>`, or `group <kind> (<its rules>)` (a round's: `round`, its number left
    out)."""
    found: dict[str, str] = {}
    for log in sorted(logs.rglob("*.log")):
        if not log.stem.isdigit():
            continue
        top = log.relative_to(logs).parts[0]
        if top.startswith("group_"):  # group_<group id>_<its rules>: round0_average_start_train
            group, _, rules = top.removeprefix("group_").partition("_")
            kind = re.sub(r"\d+$", "", group)
            found[log.stem] = f"group {kind} ({', '.join(_rules(rules))})" if rules else kind
        elif top.startswith("rule_"):
            found[log.stem] = "rule " + top.removeprefix("rule_")
    return found


def sacct(jobs: list[str]) -> str:
    """Slurm's accounting of `jobs` (and their steps), as parse_sacct reads it."""
    command = ["sacct", "-P", "-n", "-o", FIELDS, "-j", ",".join(jobs)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except FileNotFoundError:
        raise SlurmRefused("no `sacct` here: run `soma slurm usage` on the cluster") from None
    except subprocess.TimeoutExpired:
        raise SlurmRefused("`sacct` did not answer in 60 s") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise SlurmRefused(f"`sacct` failed: {'; '.join(said) or done.returncode}")
    return done.stdout


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} MB"


def _min(value: float | None) -> str:
    return "-" if value is None else f"{value / 60:.1f} min"


def report(kinds: dict[str, str], used: dict[str, Used]) -> list[str]:
    """Per rule (or group kind): submissions, asked (mem, time, CPUs, GPUs) against the most
    used (MaxRSS, elapsed, CPU busy share, GPU where Slurm measures it), and the profile
    values that would fit: `mem_mb` and `runtime` with head room, whole MB and minutes."""
    by_kind: dict[str, list[Used]] = defaultdict(list)
    for job, kind in kinds.items():
        if job in used:
            by_kind[kind].append(used[job])
    lines = []
    for kind, jobs in sorted(by_kind.items()):
        asked_mem = max((j.mem_mb or 0 for j in jobs), default=0) or None
        asked_time = max((j.limit_s or 0 for j in jobs), default=0) or None
        cpus = max(j.cpus for j in jobs)
        gpus = max(j.gpus for j in jobs)
        sampled = [j.rss_mb for j in jobs if j.rss_mb is not None]
        rss = max(sampled) if sampled else None
        elapsed = max(j.elapsed_s for j in jobs)
        busy = sum(j.cpu_s for j in jobs) / max(1e-9, sum(j.elapsed_s * j.cpus for j in jobs))
        states = sorted({j.state for j in jobs})
        mem = None if rss is None else math.ceil((rss * MEM_HEADROOM + MEM_FLOOR_MB) / 100) * 100
        minutes = max(1, math.ceil(elapsed * TIME_HEADROOM / 60))
        gpu = next((j.gpu for j in jobs if j.gpu), None)
        asked = f"{_mb(asked_mem)}, {_min(asked_time)}, {cpus} CPUs" + (
            f", {gpus} GPUs" if gpus else ""
        )
        memory = UNSAMPLED if rss is None else f"{_mb(rss)} (MaxRSS)"
        on_gpu = f", GPU {gpu}" if gpu else (", GPU not measured by Slurm here" if gpus else "")
        fits = f"runtime: {minutes}" if mem is None else f"mem_mb: {mem}, runtime: {minutes}"
        plural = "s" if len(jobs) > 1 else ""
        lines.append(
            f"{kind}: {len(jobs)} submission{plural} ({', '.join(states)}); asked {asked}; "
            f"used at most {memory}, {_min(elapsed)}, CPUs busy {busy:.0%}{on_gpu}; "
            f"suggest {fits}"
        )
    return lines
