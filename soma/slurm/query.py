"""Asking Slurm: a partition's limits, the user's accounts, and `sbatch --test-only`.

Each command runs with a timeout; what a command says when it fails is kept, since Slurm's
own words are the ones a cluster's documentation and its admins use.
"""

from __future__ import annotations

import getpass
import shutil
import subprocess

from soma.slurm.limits import Partition, SlurmRefused, partition_of
from soma.slurm.queue import FORMAT

__all__ = ["accounting", "accounts", "partition", "queue", "test_only"]

TIMEOUT = 30
QUEUE_TIMEOUT = 10  # a waiting line asks the queue: a slow squeue must not hold the wait long


def _run(command: list[str], timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    if shutil.which(command[0]) is None:
        raise SlurmRefused(f"no `{command[0]}` here: is this a Slurm login node?")
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise SlurmRefused(f"`{' '.join(command)}` did not answer in {timeout:g} s") from None


def _said(done: subprocess.CompletedProcess[str]) -> str:
    text = (done.stderr.strip() or done.stdout.strip()).splitlines()
    return "; ".join(line.strip() for line in text if line.strip()) or f"exit {done.returncode}"


def partition(name: str | None) -> Partition:
    """The partition's limits (None: the cluster's default partition), refused naming it
    when Slurm does not know it."""
    shown = _run(["scontrol", "show", "partition", "-o"])
    if shown.returncode != 0:
        raise SlurmRefused(f"`scontrol show partition` failed: {_said(shown)}")
    nodes = _run(["sinfo", "-h", "-N", "-o", "%P|%n|%c|%m"])
    found = partition_of(name, shown.stdout, nodes.stdout if nodes.returncode == 0 else "")
    if found is None:
        known = [f.split("=", 1)[1] for f in shown.stdout.split() if f.startswith("PartitionName=")]
        said = f"partition {name} (slurm_partition)" if name else "no default partition"
        raise SlurmRefused(
            f"{said}: Slurm has no such partition here (it has: {', '.join(known) or 'none'})"
        )
    return found


def accounts() -> set[str] | None:
    """The accounts Slurm's accounting has for this user; None when it cannot say (no
    sacctmgr, no accounting, or no association listed): then no account is refused here."""
    if shutil.which("sacctmgr") is None:
        return None
    user = getpass.getuser()
    done = _run(["sacctmgr", "-n", "-P", "show", "assoc", f"user={user}", "format=account"])
    names = {line.strip() for line in done.stdout.splitlines() if line.strip()}
    return names if done.returncode == 0 and names else None


def test_only(args: list[str]) -> str | None:
    """Slurm's own refusal of `sbatch --test-only ARGS --wrap true` (the submission the
    plugin will make, tried without submitting), None when Slurm would take it."""
    done = _run(["sbatch", "--test-only", *args, "--wrap", "true"])
    if done.returncode == 0:
        return None
    return _said(done)


def queue() -> str:
    """This user's jobs, one array task a line, in soma.slurm.queue's FORMAT (`squeue --me
    -h -r -t all`: those that ended a few minutes ago too, so that a cancelled client's job
    is said cancelled, not absent); refused, in Slurm's words, when squeue fails."""
    done = _run(["squeue", "--me", "-h", "-r", "-t", "all", "-o", FORMAT], timeout=QUEUE_TIMEOUT)
    if done.returncode != 0:
        raise SlurmRefused(f"`squeue --me` failed: {_said(done)}")
    return done.stdout


def accounting(jobs: list[str], fields: str) -> str:
    """Slurm's accounting of `jobs` and their steps (`sacct -P -n -o FIELDS -j ...`);
    refused, in Slurm's words, when sacct fails."""
    done = _run(["sacct", "-P", "-n", "-o", fields, "-j", ",".join(jobs)])
    if done.returncode != 0:
        raise SlurmRefused(f"`sacct` failed: {_said(done)}")
    return done.stdout
