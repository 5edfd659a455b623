"""The workflow's config as the Snakefile reads it at parse time: the file beside the
workflow, a working directory's own, the command line's values read again, the schema.

One function a step, so that the Snakefile is declarations (the Snakemake workflow
catalogue's layout: `workflow/Snakefile`, `config/`, `.test/`). Pure Python, no torch: the
Snakefile imports it at parse time.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from soma.config import stores
from soma.config.configs import ConfigRefused, default_run, schema_refusal, typed
from soma.config.spec import RunSpec

# Where a deployment keeps its config, relative to the working directory: the catalogue's
# `config/config.yaml` (snakedeploy writes one there; `.test/config/config.yaml` is the tiny
# run `snakemake --directory .test` makes).
DEPLOYED = Path("config", "config.yaml")


def config_files(basedir: str | os.PathLike) -> list[Path]:
    """The config files a run starts from, in order, a later one merged over the one before:
    the repository's default (`config/config.yaml` beside `workflow/`), so that a run in
    another working directory (`snakemake -d DIR`) starts from it too; then the working
    directory's own `config/config.yaml`, where it has one that is another file (a deployed
    workflow's, `.test/`'s). `--configfile` and `--config` are merged over both by Snakemake."""
    default = Path(basedir).parent / DEPLOYED
    files = [default]
    if DEPLOYED.is_file() and not (default.exists() and DEPLOYED.samefile(default)):
        files.append(DEPLOYED)
    return files


def command_line(workflow: Any) -> list[str] | None:
    """The `key=text` texts typed on `--config`, or None in a module (a study's point), whose
    config Snakemake gives whole, made from the config read with them."""
    if getattr(workflow.modifier, "skip_configfile", False):
        return None
    return getattr(workflow.config_settings, "config_args", None)


def read_config(
    config: Mapping[str, Any], workflow: Any, schema: str | os.PathLike
) -> dict[str, Any]:
    """`config` as the run means it: each value typed on `--config` read again from its text
    as the same text in a config file reads (soma.config.configs), a run with no name named
    after its task, and checked by the schema, whose refusal names the key and shows the value
    quoted with its type (ConfigRefused, one line); and a store folder this process could not
    make or write, refused now, a dry run too, not by the `start` job a minute later."""
    out = typed(config, command_line(workflow))
    out["run"] = default_run(out)
    checked(out, workflow, schema)
    refusal = stores.unwritable_folder(out["store"])  # looked up now: its mutant
    if refusal is not None:
        raise ConfigRefused(f"config key `store`: {refusal}")
    return out


def checked(
    config: dict[str, Any], workflow: Any, schema: str | os.PathLike, point: str | None = None
) -> None:
    """The schema's check of `config` (its defaults filled in), refused in one line naming the
    config key (and a study's `point`); none under `--skip-validation`, as Snakemake's own."""
    if getattr(workflow.modifier, "skip_validation", False):
        return
    try:
        validate(config, str(schema))
    except WorkflowError as error:
        said = schema_refusal(error)
        if said is None:
            raise
        if point is not None:
            said = f"config key `study` (the point {point}): {said}"
        raise ConfigRefused(said) from None


def run_checked(config: Mapping[str, Any]) -> None:
    """A run's (not a study's) parse-time check: what the schema cannot say and needs no torch,
    refused naming the config keys (soma.config.spec, `RunSpec.check`: the task's option names
    where its module declares OPTIONS, a quorum the sample cannot meet, secure aggregation's
    threshold and what it excludes). The rest (the task imports, its partition for this many
    clients, the strategy fits, the metric) is checked by the `start` job, before any client
    trains. And the recursion a deep chain of rounds needs: Snakemake's DAG code recurses
    about a frame per job."""
    RunSpec.from_config(config).check()
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 50 * int(config["rounds"]) + 10_000))
