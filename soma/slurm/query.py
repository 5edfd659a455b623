"""Asking Slurm: a partition's limits, the user's accounts, and `sbatch --test-only`.

Each command runs with a timeout; what a command says when it fails is kept, since Slurm's
own words are the ones a cluster's documentation and its admins use.
"""

from __future__ import annotations

import getpass
import shutil
import subprocess

from soma.slurm.limits import Partition, SlurmRefused, partition_of

__all__ = ["accounts", "partition", "test_only"]

TIMEOUT = 30


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    if shutil.which(command[0]) is None:
        raise SlurmRefused(f"no `{command[0]}` here: is this a Slurm login node?")
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        raise SlurmRefused(f"`{' '.join(command)}` did not answer in {TIMEOUT} s") from None


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
