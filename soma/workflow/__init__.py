"""What the workflow's jobs do; `workflow/scripts/*.py` are one call each into here.

One module a job: `starting` (start), `training` (train, train_batch), `averaging`
(average), `evaluating` (evaluate, its federated evaluation), `baselines` (alone,
centralized), `best_round` (best), `secure` (the jobs of secure aggregation's phases); what
they share in `common` (the config's spec, task, strategy and meeting; metrics; the job's
log), and the receipts' layout and their writing in `receipts` (see there for what a
receipt is). What the Snakefile itself does at parse time: `configuring` (the config read,
typed and checked, an unwritable store refused) and `dry_run` (a finished run's dry run says
how to see its DAG).

The names below are re-exported as they were when all of this was one module, so that the
scripts and every `from soma.workflow import ...` keep working. They are looked up when first
used, not imported here: the Snakefile imports `soma.workflow.receipts` at parse time, and
this package must import no torch for it. A mutant (tests/mutants.py) patches the defining
module (e.g. `soma.workflow.averaging.averaged`), where the jobs look it up.
"""

from __future__ import annotations

import importlib
from typing import Any

# Each re-exported name and the module under soma.workflow that defines it.
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(
        [
            "LOG",
            "progress",
            "spec_of",
            "_importable_here",
            "task_of",
            "strategy_of",
            "meeting_of",
            "json_numbers",
            "checked_metrics",
            "keep_evaluation",
            "shown_value",
            "shown",
            "nodes_at",
            "threads",
            "logged",
        ],
        "common",
    ),
    **dict.fromkeys(["write_receipt", "read_receipt", "clients_in"], "receipts"),
    **dict.fromkeys(["start", "start_group", "start_metrics"], "starting"),
    **dict.fromkeys(
        [
            "train",
            "train_batch",
            "_train_client",
            "_keeping_own",
            "_own_state",
            "_previous_attempt_died",
            "_drop_out",
        ],
        "training",
    ),
    **dict.fromkeys(["average", "averaged", "average_receipt"], "averaging"),
    **dict.fromkeys(["evaluate", "evaluate_federated"], "evaluating"),
    **dict.fromkeys(["alone", "centralized", "told_clients", "_baseline"], "baselines"),
    "best": "best_round",
    "ConfigRefused": "common",  # soma.config.configs's, as the jobs raise it
}

__all__ = sorted(name for name in _EXPORTS if not name.startswith("_"))


def __getattr__(name: str) -> Any:
    """A re-exported name from its module, or a submodule (`soma.workflow.report`)."""
    module = _EXPORTS.get(name)
    if module is not None:
        return getattr(importlib.import_module(f"{__name__}.{module}"), name)
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as error:
        if error.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
