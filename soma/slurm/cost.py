"""What Slurm jobs cost, from its accounting: per job, the core-hours and GPU-hours it was
allocated, the CPU time it used, its memory peak, how long it waited in the queue (Start -
Submit) and, where Slurm accounts it, the energy it consumed; and their sum over the jobs of a
round or a run ("0.95 accuracy for 12 core-hours, of which 40 % was queue wait").

Allocations on HPC systems are charged by what was allocated (a job holding 8 cores for an
hour is 8 core-hours, however busy they were), so the hours here are AllocCPUS and AllocTRES's
GPUs times Elapsed; the CPU time used (TotalCPU) is said beside them. Energy is
ConsumedEnergyRaw (joules), which Slurm fills only with an energy plugin
(AcctGatherEnergyType): 0 or empty is "not accounted", never "free". Pure text work
(`parse_costs`, `total`), tested with sacct's text; `sacct_costs` asks sacct through
soma.slurm.query's runner.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from soma.slurm import query
from soma.slurm.usage import sacct_rows, seconds, size_mb

__all__ = [
    "COST_FIELDS",
    "Cost",
    "Total",
    "by_round",
    "combined",
    "parse_costs",
    "sacct_costs",
    "said",
    "total",
    "total_of",
]

COST_FIELDS = (
    "JobID,State,Submit,Start,End,Elapsed,AllocCPUS,AllocTRES,TotalCPU,MaxRSS,ConsumedEnergyRaw"
)


@dataclass
class Cost:
    """One job (an array's task is one job): what it was allocated, used and waited."""

    job: str
    state: str = ""
    cpus: int = 0
    gpus: int = 0
    elapsed_s: float = 0.0
    cpu_used_s: float = 0.0
    queue_s: float | None = None  # None: not started (Start unknown)
    mem_peak_mb: float | None = None  # None: no step was sampled
    energy_j: float | None = None  # None: not accounted here

    @property
    def cpu_hours(self) -> float:
        """Core-hours allocated: the cores times how long the job held them."""
        return self.cpus * self.elapsed_s / 3600

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.elapsed_s / 3600


def _time(text: str) -> datetime.datetime | None:
    try:
        return datetime.datetime.fromisoformat(text.strip())
    except ValueError:  # Unknown, None, empty: not started (or not ended)
        return None


def _gpus(tres: str) -> int:
    found = re.search(r"gres/gpu(?::[^=,]+)?=(\d+)", tres)
    return int(found.group(1)) if found else 0


def _energy(text: str) -> float | None:
    text = text.strip()
    return float(text) if text.replace(".", "", 1).isdigit() and float(text) > 0 else None


def parse_costs(text: str) -> dict[str, Cost]:
    """`sacct -P -n -o COST_FIELDS` (jobs and their steps, `|`-separated) per job id: the
    job's line gives its allocation, times and energy; its steps, the memory peak (the
    largest MaxRSS) and, where the job's line has none, the energy they consumed."""
    costs: dict[str, Cost] = {}
    steps_energy: dict[str, float] = {}
    for job, step, row in sacct_rows(text, COST_FIELDS):
        cost = costs.setdefault(job, Cost(job))
        if not step:
            cost.state = row["State"].split()[0] if row["State"].split() else ""
            cost.cpus = int(row["AllocCPUS"] or 0)
            cost.gpus = _gpus(row["AllocTRES"])
            cost.elapsed_s = seconds(row["Elapsed"]) or 0.0
            cost.cpu_used_s = seconds(row["TotalCPU"]) or 0.0
            submit, start = _time(row["Submit"]), _time(row["Start"])
            cost.queue_s = None if submit is None or start is None else _waited(submit, start)
            cost.energy_j = _energy(row["ConsumedEnergyRaw"])
        else:
            rss = size_mb(row["MaxRSS"])
            if rss is not None:
                cost.mem_peak_mb = max(cost.mem_peak_mb or 0.0, rss)
            energy = _energy(row["ConsumedEnergyRaw"])
            if energy is not None:
                steps_energy[job] = steps_energy.get(job, 0.0) + energy
    for job, energy in steps_energy.items():
        if costs[job].energy_j is None:
            costs[job].energy_j = energy
    return costs


def _waited(submit: datetime.datetime, start: datetime.datetime) -> float:
    return max(0.0, (start - submit).total_seconds())


@dataclass
class Total:
    """The jobs of a round or a run, summed."""

    jobs: int = 0
    cpu_hours: float = 0.0
    gpu_hours: float = 0.0
    cpu_used_hours: float = 0.0
    queue_s: float = 0.0  # summed over the jobs that started
    elapsed_s: float = 0.0
    mem_peak_mb: float | None = None
    energy_j: float | None = None  # None when no job's energy is accounted
    unaccounted_energy: list[str] = field(default_factory=list)  # jobs without it

    @property
    def queue_share(self) -> float | None:
        """The part of the jobs' time from submission to end spent waiting in the queue."""
        whole = self.queue_s + self.elapsed_s
        return None if whole == 0 else self.queue_s / whole


def total(costs: Iterable[Cost]) -> Total:
    """The sum of `costs`; the energy of the jobs that have one, naming those that have not
    (a sum that hides a missing part would read as the whole)."""
    summed = Total()
    for cost in costs:
        summed.jobs += 1
        summed.cpu_hours += cost.cpu_hours
        summed.gpu_hours += cost.gpu_hours
        summed.cpu_used_hours += cost.cpu_used_s / 3600
        summed.elapsed_s += cost.elapsed_s
        summed.queue_s += cost.queue_s or 0.0
        if cost.mem_peak_mb is not None:
            summed.mem_peak_mb = max(summed.mem_peak_mb or 0.0, cost.mem_peak_mb)
        if cost.energy_j is None:
            summed.unaccounted_energy.append(cost.job)
        else:
            summed.energy_j = (summed.energy_j or 0.0) + cost.energy_j
    return summed


def combined(parts: Iterable[Total]) -> Total:
    """The sum of sums (a run's rounds, as `by_round` split them so that they add up): the
    hours, waits and energy added, the memory peak the largest, the jobs without energy all
    named once; `jobs` counts a job once per part it is in (a job that served two rounds
    twice)."""
    summed = Total()
    for part in parts:
        summed.jobs += part.jobs
        summed.cpu_hours += part.cpu_hours
        summed.gpu_hours += part.gpu_hours
        summed.cpu_used_hours += part.cpu_used_hours
        summed.queue_s += part.queue_s
        summed.elapsed_s += part.elapsed_s
        if part.mem_peak_mb is not None:
            summed.mem_peak_mb = max(summed.mem_peak_mb or 0.0, part.mem_peak_mb)
        if part.energy_j is not None:
            summed.energy_j = (summed.energy_j or 0.0) + part.energy_j
        summed.unaccounted_energy += [
            j for j in part.unaccounted_energy if j not in summed.unaccounted_energy
        ]
    return summed


def total_of(said: Mapping[str, object]) -> Total:
    """A Total from its dict (`soma status --json`'s `cost`: dataclasses.asdict and more)."""
    names = {f.name for f in dataclasses.fields(Total)}
    return Total(**{k: v for k, v in said.items() if k in names})  # type: ignore[arg-type]


def said(summed: Total) -> str:
    """`12.0 core-hours (3.1 used), 0 GPU-hours, memory peak 1536 MB, queue wait 40 % of the
    jobs' time, energy 2.0 kJ (2 jobs not accounted)`: one line, for a summary or a status."""
    share = summed.queue_share
    parts = [
        f"{_hours(summed.cpu_hours)} core-hours ({_hours(summed.cpu_used_hours)} used)",
        f"{_hours(summed.gpu_hours)} GPU-hours" if summed.gpu_hours else "0 GPU-hours",
        "memory peak "
        + ("not sampled" if summed.mem_peak_mb is None else f"{summed.mem_peak_mb:.0f} MB"),
        "queue wait " + ("-" if share is None else f"{100 * share:.0f} % of the jobs' time"),
    ]
    missing = len(summed.unaccounted_energy)
    if summed.energy_j is None:
        parts.append("energy not accounted")
    else:
        parts.append(
            f"energy {summed.energy_j / 1000:.1f} kJ"
            + (f" ({missing} job{'s' if missing > 1 else ''} not accounted)" if missing else "")
        )
    return ", ".join(parts)


def _hours(hours: float) -> str:
    """Hours to a tenth; below a tenth, two significant digits (a test run's 0.036
    core-hours is not 0.0)."""
    return f"{hours:.1f}" if hours == 0 or hours >= 0.095 else f"{hours:.2g}"


def sacct_costs(jobs: list[str]) -> dict[str, Cost]:
    """The jobs' costs as Slurm's accounting has them (refused, in Slurm's words, when sacct
    fails: soma.slurm.query)."""
    return parse_costs(query.accounting(jobs, COST_FIELDS))


K = TypeVar("K")


def by_round(jobs: Mapping[K, Collection[str]], costs: Mapping[str, Cost]) -> dict[K, Total]:
    """What each round cost (`jobs`: round -> the jobs its records name, in round order): a
    job that served several rounds (a `soma client` job, an array's task, runs them all) is
    split evenly among them, its queue wait counted in the first, so that the rounds' costs
    add up to the run's; a job Slurm's accounting does not know is left out. A round with
    none of its jobs known is not a key."""
    served: dict[str, list[K]] = {}
    for r, named in jobs.items():
        for job in sorted(set(named)):
            if job in costs:
                served.setdefault(job, []).append(r)
    parts: dict[K, list[Cost]] = {}
    for job, rounds in served.items():
        cost, share = costs[job], 1 / len(rounds)
        for i, r in enumerate(rounds):
            part = dataclasses.replace(
                cost,
                elapsed_s=cost.elapsed_s * share,
                cpu_used_s=cost.cpu_used_s * share,
                queue_s=cost.queue_s if i == 0 else (None if cost.queue_s is None else 0.0),
                energy_j=None if cost.energy_j is None else cost.energy_j * share,
            )
            parts.setdefault(r, []).append(part)
    return {r: total(parts[r]) for r in jobs if r in parts}
