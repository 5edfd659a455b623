"""Helpers for tests that need the single-node Slurm cluster of tests/slurm.

Start it with ``bash tests/slurm/start.sh``; tests call :func:`cluster_running`
and skip with its reason when it is not up, and pass :func:`slurm_env` to
subprocesses that run Slurm commands (``sbatch``, ``snakemake --executor slurm``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

STATE_DIR = Path(os.environ.get("SOMA_SLURM_STATE", "/tmp/soma-slurm"))
SLURM_CONF = STATE_DIR / "etc" / "slurm.conf"
PARTITION = os.environ.get("SOMA_SLURM_PARTITION", "debug")
ACCOUNT = os.environ.get("SOMA_SLURM_ACCOUNT", "soma")
_HINT = "start it with: bash tests/slurm/start.sh"


def slurm_env() -> dict[str, str]:
    """os.environ plus what Slurm commands need to find the test cluster."""
    env = dict(os.environ)
    if SLURM_CONF.is_file():
        env["SLURM_CONF"] = str(SLURM_CONF)
    return env


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, env=slurm_env(), capture_output=True, text=True, timeout=20, check=False
    )


def _first_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def cluster_running() -> tuple[bool, str]:
    """(True, description) when sinfo and sacct answer and a node is up,
    else (False, reason) -- the reason is meant for ``pytest.skip(reason)``."""
    for tool in ("sinfo", "sacct", "sbatch"):
        if shutil.which(tool) is None:
            return False, f"Slurm test cluster: '{tool}' not installed; {_HINT}"
    if not SLURM_CONF.is_file():
        return False, f"Slurm test cluster: no {SLURM_CONF}; {_HINT}"
    try:
        info = _run("sinfo", "-h", "-p", PARTITION, "-o", "%n %T")
        if info.returncode != 0:
            why = _first_line(info.stderr) or f"exit {info.returncode}"
            return False, f"Slurm test cluster: sinfo failed ({why}); {_HINT}"
        nodes = [ln.split() for ln in info.stdout.splitlines() if ln.strip()]
        if not nodes:
            return False, f"Slurm test cluster: partition '{PARTITION}' has no nodes; {_HINT}"
        # exact states only: a suffix such as '*' (not responding) means not usable
        up = [n for n, state in nodes if state in {"idle", "mixed", "allocated", "completing"}]
        if not up:
            states = ", ".join(f"{n}={s}" for n, s in nodes)
            return False, f"Slurm test cluster: no node up ({states}); {_HINT}"
        acct = _run("sacct", "-n", "-X", "-S", "now-1hours", "-o", "JobID")
        if acct.returncode != 0:
            why = _first_line(acct.stderr) or f"exit {acct.returncode}"
            return False, f"Slurm test cluster: sacct failed ({why}); {_HINT}"
    except subprocess.TimeoutExpired as e:
        return False, f"Slurm test cluster: '{e.cmd[0]}' timed out; {_HINT}"
    return True, f"Slurm test cluster up: partition {PARTITION}, nodes {', '.join(up)}"


if __name__ == "__main__":
    ok, why = cluster_running()
    print(why)
    raise SystemExit(0 if ok else 1)
