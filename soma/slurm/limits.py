"""What a Slurm partition allows, and the one limit a submission's request goes past, named.

Pure: the partition is read from the text of `scontrol show partition -o` and `sinfo -N`
(soma.slurm.query runs them), so the rules here are tested without a cluster. A request
refused by Slurm at submission time is worse than refused here: the plugin (2.8.0) drops
Slurm's message for a group's submission ("message: None"), and the user sees nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from soma.errors import SomaError

__all__ = ["Partition", "Request", "SlurmRefused", "minutes", "partition_of", "refusal"]


class SlurmRefused(SomaError, ValueError):
    """A submission the workflow would make goes past a limit of its partition, or Slurm
    refuses it: the message names the submission, the limit and the profile's key to change."""


@dataclass(frozen=True)
class Request:
    """What one submission asks Slurm for, as the plugin will ask it."""

    what: str  # "round 0's submission (group round0: start, 2 train, ...)", "rule alone"
    cpus: int  # --cpus-per-task
    mem_mb: int | None  # --mem
    minutes: int | None  # --time
    partition: str | None  # -p; None: the cluster's default partition
    account: str | None  # -A


@dataclass(frozen=True)
class Partition:
    """The limits of a partition that decide whether a one-node job fits it."""

    name: str
    cpus: int  # the most CPUs one job gets on one node (MaxCPUsPerNode if lower)
    mem_mb: int | None  # the most memory of one node (MaxMemPerNode if lower); None: unknown
    max_minutes: int | None  # MaxTime; None: UNLIMITED


def minutes(text: str) -> int | None:
    """Slurm's time text in whole minutes, rounded up: `UNLIMITED`/`INFINITE` is None;
    `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS` as `sbatch --time` reads them."""
    text = text.strip()
    if text.upper() in {"UNLIMITED", "INFINITE", "NONE"}:
        return None
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        parts += [0] * (3 - len(parts))
        hours, mins, secs = parts
    elif len(parts) == 1:  # MM
        hours, mins, secs = 0, parts[0], 0
    elif len(parts) == 2:  # MM:SS
        hours, (mins, secs) = 0, parts
    else:  # HH:MM:SS
        hours, mins, secs = parts
    total = (int(days or 0) * 24 + hours) * 60 + mins
    return total + (1 if secs else 0)


def _fields(line: str) -> dict[str, str]:
    return dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", line))


def partition_of(name: str | None, scontrol: str, sinfo: str) -> Partition | None:
    """The partition `name` (None: the default one) from `scontrol show partition -o` (one
    line a partition) and `sinfo -h -N -o "%P|%n|%c|%m"` (a line a node and partition);
    None when scontrol does not list it."""
    for line in scontrol.splitlines():
        fields = _fields(line)
        if not fields:
            continue
        if (name is None and fields.get("Default") == "YES") or fields.get("PartitionName") == name:
            break
    else:
        return None
    pname = fields["PartitionName"]
    cpus, mems = [], []
    for node in sinfo.splitlines():
        parts = node.strip().split("|")
        if len(parts) == 4 and parts[0].rstrip("*") == pname:
            cpus.append(int(parts[2]))
            mems.append(int(re.sub(r"\D.*", "", parts[3]) or 0))
    most_cpus = max(cpus, default=int(fields.get("TotalCPUs", "0") or 0))
    if fields.get("MaxCPUsPerNode", "UNLIMITED").isdigit():
        most_cpus = min(most_cpus, int(fields["MaxCPUsPerNode"]))
    most_mem = max(mems) if mems else None
    if fields.get("MaxMemPerNode", "UNLIMITED").isdigit():
        cap = int(fields["MaxMemPerNode"])
        most_mem = cap if most_mem is None else min(most_mem, cap)
    return Partition(pname, most_cpus, most_mem, minutes(fields.get("MaxTime", "UNLIMITED")))


def refusal(request: Request, partition: Partition, accounts: set[str] | None) -> str | None:
    """The first limit of `partition` that `request` goes past, said as what to change in the
    profile; None when it fits. `accounts`: the user's accounts in Slurm's accounting (None:
    not known, not checked)."""
    where = f"partition {partition.name}"
    if request.cpus > partition.cpus:
        return (
            f"{request.what} asks {request.cpus} CPUs (--cpus-per-task), but one node of "
            f"{where} has at most {partition.cpus} CPUs: lower the profile's `cores` and the "
            f"run's `threads` (and any `cpus_per_task`) to {partition.cpus} or fewer"
        )
    if request.mem_mb and partition.mem_mb and request.mem_mb > partition.mem_mb:
        return (
            f"{request.what} asks {request.mem_mb} MB of memory (--mem), but one node of {where} "
            f"has at most {partition.mem_mb} MB: lower `mem_mb` in the profile"
        )
    if request.minutes and partition.max_minutes and request.minutes > partition.max_minutes:
        grouped = (
            " (a round's submission asks the runtimes of the jobs it runs one after another "
            "added up: a higher `cores` runs more clients side by side; or fewer clients per "
            "round, or no `groups:`)"
            if "group" in request.what
            else ""
        )
        return (
            f"{request.what} asks {request.minutes} min (--time), more than {where}'s MaxTime "
            f"of {partition.max_minutes} min: lower `runtime` in the profile{grouped}"
        )
    if request.account and accounts and request.account not in accounts:
        return (
            f"{request.what} asks account {request.account} (slurm_account), which is not one "
            f"of yours in Slurm's accounting ({', '.join(sorted(accounts))})"
        )
    return None
