"""`soma slurm usage`: what a workflow run's Slurm submissions asked against what they used,
per rule, with profile values that fit (soma.slurm.usage)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from soma.slurm.limits import SlurmRefused

__all__ = ["add_command", "usage"]


def add_command(commands: Any) -> None:
    """`soma slurm usage [--logs .snakemake/slurm_logs] [--json]`."""
    top = commands.add_parser("slurm", help="a workflow run's Slurm submissions")
    actions = top.add_subparsers(dest="action", required=True)
    u = actions.add_parser(
        "usage",
        help="per rule: what its submissions asked (mem, time, CPUs, GPUs) and used (sacct), "
        "and the profile values that fit",
        description="Reads the Slurm jobs of a run from the Slurm plugin's logs (the profile "
        "keeps them: soma-slurm-keep-successful-logs) and their accounting from sacct; per "
        "rule, or per group of a round's submission: what was asked, the most used (MaxRSS, "
        "elapsed, how busy the CPUs were, the GPU where Slurm measures it) and `mem_mb` and "
        "`runtime` for the profile (x1.5 + 200 MB and x2 the most used).",
    )
    u.add_argument(
        "--logs",
        type=Path,
        default=Path(".snakemake/slurm_logs"),
        metavar="FOLDER",
        help="the Slurm plugin's logs of the run (in the folder Snakemake ran in)",
    )
    u.add_argument("--json", action="store_true", help="machine-readable output")
    u.set_defaults(func=usage, store=None)


def usage(args: argparse.Namespace) -> int:
    """Print the report (a line a rule), or refuse naming what is missing."""
    from soma.slurm.usage import jobs_in, parse_sacct, report, sacct

    if not args.logs.is_dir():
        raise SlurmRefused(
            f"no Slurm logs at {args.logs}: give the run's --logs (.snakemake/slurm_logs in the "
            "folder Snakemake ran in; the profile must keep them: "
            "soma-slurm-keep-successful-logs: true)"
        )
    kinds = jobs_in(args.logs)
    if not kinds:
        raise SlurmRefused(f"no Slurm job's log under {args.logs}")
    used = parse_sacct(sacct(sorted(kinds)))
    if args.json:
        rows = [{"job": j, "what": kinds[j], **vars(used[j])} for j in sorted(kinds) if j in used]
        print(json.dumps(rows))
    else:
        for line in report(kinds, used):
            print(line)
    return 0
