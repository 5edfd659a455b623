"""What `snakemake -n` says of a finished run: Snakemake prints only "Nothing to be done",
where a user who asked for the dry run wanted the DAG of rounds. The workflow prints one line
more, on stderr (so that `--dag`'s dot on stdout stays whole), saying how to see it.

Whether this is a dry run is known only once Snakemake builds the DAG (it reads the Snakefile
before it is given its executor, `dryrun` among them), so the line is said from the input
function of the rule `all` (`workflow/rules/common.smk`, `all_targets`), once. Pure Python,
no torch."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

HINT = (
    "soma: every target of this run is already made, so a dry run has nothing to show; "
    "`snakemake -n -F` (--forceall) lists every job of its rounds, "
    "`snakemake --dag | dot -Tsvg > dag.svg` draws them"
)


def finished_hint(workflow: Any, targets: Iterable[str]) -> str | None:
    """The line to print when this is a dry run and every one of the run's `targets` exists
    (Snakemake will find nothing to do, unless an input changed); None otherwise."""
    settings = getattr(workflow, "dag_settings", None)
    if not _dry_run(workflow) or getattr(settings, "forceall", False):
        return None
    targets = list(targets)
    if targets and all(os.path.exists(path) for path in targets):
        return HINT
    return None


def _dry_run(workflow: Any) -> bool:
    """Whether Snakemake was asked for a dry run (-n); False where it cannot tell yet."""
    try:
        return bool(workflow.dryrun)
    except AttributeError:
        return False


_said: list[str] = []


def say_finished(workflow: Any, targets: Iterable[str]) -> None:
    """Print `finished_hint`'s line on stderr, once a process (an input function is called
    again as the DAG is built)."""
    hint = finished_hint(workflow, targets)
    if hint is not None and not _said:
        _said.append(hint)
        print(hint, file=sys.stderr, flush=True)
