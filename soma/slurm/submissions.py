"""Every Slurm submission a workflow run will make, checked before the first is made.

Called by the Snakefile's `onstart` (the main Snakemake process, after the DAG is built,
before any job is scheduled) when the executor is one of EXECUTORS. A submission is a job, or a
group of jobs (profiles/slurm: a round per submission); its request is taken from what
Snakemake computed for it and put into the very `sbatch` options the plugin
(snakemake-executor-plugin-slurm) will use, through the plugin's own function. Each distinct
request is checked against its partition (soma.slurm.limits: CPUs per node, memory,
MaxTime, the account), then tried with `sbatch --test-only`, whose refusal is quoted.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections import Counter
from typing import Any

from soma.slurm import limits, query
from soma.slurm.limits import Request, SlurmRefused

__all__ = ["EXECUTORS", "check", "check_or_exit", "gres_with_groups", "requests", "submissions"]

# Snakemake's executors that submit through snakemake-executor-plugin-slurm: its own, and
# soma's (snakemake_executor_plugin_soma_slurm: a submission's jobs run by the local executor).
EXECUTORS = ("slurm", "soma-slurm")


def _what(submission: Any) -> str:
    if not submission.is_group():
        return f"rule {submission.rule.name}'s submission"
    rules = Counter(job.rule.name for job in submission.jobs)
    listed = ", ".join(f"{n} {r}" if n > 1 else r for r, n in sorted(rules.items()))
    return f"group {submission.groupid}'s submission ({listed})"


def _options(submission: Any, settings: Any) -> list[str]:
    """The plugin's sbatch options for this submission, as it would submit it."""
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    resources = submission.resources
    account = resources.get("slurm_account")
    partition = resources.get("slurm_partition")
    params = {
        "run_uuid": "soma-check",
        "slurm_logfile": "/dev/null",
        "comment_str": "soma-check",
        "account": f"-A {shlex.quote(str(account))}" if account else "",
        "partition": f"-p {shlex.quote(str(partition))}" if partition else "",
        "workdir": None,
    }
    call = get_submit_command(submission, params, settings=settings) + set_gres_string(submission)
    options, words = [], iter(shlex.split(call)[1:])  # without `sbatch`
    for word in words:
        if word in {"--job-name", "--output", "--comment"}:
            next(words)  # names and logs: not what Slurm weighs
        elif word not in {"--parsable", "--export=ALL"}:
            options.append(word)
    return options


def _cpus(options: list[str]) -> int:
    found = re.search(r"--cpus-per-(?:task|gpu)[= ](\d+)", " ".join(options))
    return int(found.group(1)) if found else 1


def submissions(workflow: Any) -> list[tuple[Request, list[str]]]:
    """Every submission the run will make, in the DAG's order: its request and the sbatch
    options the plugin will give it. A request Snakemake cannot size yet is left to Slurm."""
    refused = gres_with_groups(workflow)
    if refused is not None:
        raise SlurmRefused(refused)
    dag = workflow.dag
    settings = getattr(workflow, "executor_settings", None)
    found: dict[int, Any] = {}
    for job in dag.needrun_jobs():
        submission = dag.get_job_group(job) or job
        if submission is job and getattr(job, "is_local", False):
            continue  # a localrule runs in the main process
        found.setdefault(id(submission), submission)
    out: list[tuple[Request, list[str]]] = []
    for submission in found.values():
        resources = submission.resources
        options = _options(submission, settings)
        request = Request(
            what=_what(submission),
            cpus=_cpus(options),
            mem_mb=_int(resources.get("mem_mb")),
            minutes=_int(resources.get("runtime")),
            partition=_text(resources.get("slurm_partition")),
            account=_text(resources.get("slurm_account")),
        )
        out.append((request, options))
    return out


def requests(workflow: Any) -> list[tuple[Request, list[str]]]:
    """Each distinct submission the run will make (its request and its sbatch options), the
    first of each kind named: the same options get the same answer from Slurm."""
    seen: set[tuple] = set()
    out: list[tuple[Request, list[str]]] = []
    for request, options in submissions(workflow):
        if tuple(options) not in seen:
            seen.add(tuple(options))
            out.append((request, options))
    return out


def gres_with_groups(workflow: Any) -> str | None:
    """The refusal of a profile that gives a rule of a group (`groups:`, a round per
    submission) its own `gres`: Snakemake cannot add text up, so the round's submission
    would fail to be formed ("Resource gres is a string but not all jobs in group require
    the same value") or ask one GPU for all its clients; None when there is none."""
    groups = getattr(workflow.group_settings, "overwrite_groups", None) or {}
    given = getattr(workflow.resource_settings, "overwrite_resources", None) or {}
    for rule, resources in given.items():
        gres = resources["gres"] if "gres" in resources else None  # (a Resource, or text)
        gres = getattr(gres, "raw", gres)
        if rule in groups and gres:
            return (
                f"rule {rule} asks gres={gres!r} (set-resources) and is in a "
                f"round's submission (groups: {rule}={groups[rule]}): Snakemake cannot add a "
                "round's GPUs up as text; ask `gpu: 1` instead (sbatch --gpus, one per job "
                "side by side), or delete `groups:` for a job per submission"
            )
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def check(workflow: Any) -> None:
    """Refuse (SlurmRefused) the run when one of its submissions goes past a limit of its
    partition or Slurm would refuse it; nothing is submitted before this returns."""
    found = requests(workflow)
    partitions: dict[str | None, Any] = {}
    mine = query.accounts() if any(r.account for r, _ in found) else None
    for request, _ in found:
        if request.partition not in partitions:
            partitions[request.partition] = query.partition(request.partition)
        said = limits.refusal(request, partitions[request.partition], mine)
        if said is not None:
            raise SlurmRefused(said)
    for request, options in found:
        said = query.test_only(options)
        if said is not None:
            raise SlurmRefused(
                f"Slurm refuses {request.what}: {said} (sbatch --test-only {shlex.join(options)})"
            )


def check_or_exit(workflow: Any) -> None:
    """`check`, its refusal said as soma's command line says one: a single `soma: ...` line
    on stderr, and the run ends (exit 1) before Snakemake submits anything."""
    try:
        check(workflow)
    except SlurmRefused as error:
        print(f"soma: {error}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
