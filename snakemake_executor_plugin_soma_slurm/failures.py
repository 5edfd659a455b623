"""Why a submission failed, in one line on the main log: Slurm's state and soma's own reason.

The Slurm plugin (2.8) reports a failed group's submission as Snakemake's "Error in group
round0" and "message: None" per rule: the reason is in the job's Slurm log (where the inner
Snakemake names the failed rule's log) or in that rule's log (soma.workflow.logged ends it
with "failed after N s: <the error>"). This reads both, so the user reads the cause where
they look first. Pure text work on the files: a log that cannot be read is passed over.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["reason_in_logs", "said_by_soma", "state_of"]

# What Slurm's state means for the profile, where the state itself is the reason.
STATES = {
    "TIMEOUT": "time limit: raise `runtime` in the profile for its rules (sbatch --time)",
    "OUT_OF_MEMORY": "out of memory: raise `mem_mb` in the profile for its rules (sbatch --mem)",
    "PREEMPTED": "preempted by Slurm: `retries` resubmits it",
    "NODE_FAIL": "its node failed: `retries` resubmits it",
}
# soma's reason in a job's log (soma.workflow.logged) or the Slurm log (the CLI's `soma: `).
_FAILED = re.compile(r"failed after [0-9.]+ s: (.+)$")
_SOMA = re.compile(r"^soma: (.+)$")
# The inner Snakemake's "Error in rule" block names the rule's log file.
_RULE_LOG = re.compile(r"^\s*log: (\S+)")
LONGEST = 400  # characters of a reason on the main log


def state_of(message: str | None) -> str | None:
    """Slurm's state in the plugin's message ("SLURM status is: 'TIMEOUT'")."""
    found = re.search(r"status is: '([A-Z_]+)", message or "")
    return found.group(1) if found else None


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def reason_in_logs(slurm_logs: list[str], workdir: Path | None = None) -> str | None:
    """soma's last one-line reason: in a rule's log the inner Snakemake named in the Slurm
    log, or a `soma: ` line of the Slurm log itself; None when neither says one."""
    found: str | None = None
    for slurm_log in slurm_logs:
        lines = _lines(Path(slurm_log))
        for line in lines:
            said = _SOMA.match(line.strip())
            if said:
                found = said.group(1)
        for line in lines:
            named = _RULE_LOG.match(line)
            if not named:
                continue
            rule_log = Path(named.group(1).rstrip(","))
            if workdir is not None and not rule_log.is_absolute():
                rule_log = workdir / rule_log
            for logged in _lines(rule_log):
                failed = _FAILED.search(logged)
                if failed:
                    found = failed.group(1)
    if found is None:
        return None
    return found if len(found) <= LONGEST else found[: LONGEST - 3] + "..."


def said_by_soma(
    jobid: object, message: str | None, slurm_logs: list[str], workdir: Path | None = None
) -> str | None:
    """The one line for the main log: `soma-slurm: Slurm job J ended STATE: <reason>`, the
    reason soma's own, else what the state means; None when there is neither."""
    state = state_of(message)
    reason = reason_in_logs(slurm_logs, workdir) or STATES.get(state or "")
    if reason is None and state is None:
        return None
    ended = f"ended {state}" if state else "failed"
    return f"soma-slurm: Slurm job {jobid} {ended}: {reason or 'see its log'}" + (
        f" ({', '.join(slurm_logs)})" if slurm_logs else ""
    )
