"""What every job of the workflow shares: the run its config describes (its spec, task,
strategy and meeting), metrics as a receipt and a log line hold them, and the job's log.

Its own module so that each job's module (starting, training, averaging, evaluating,
baselines, best_round, secure) reads the config the one way, and logs to the one logger
(`soma.workflow`), whose lines a user greps for whichever job wrote them.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from soma.config.configs import ConfigRefused
from soma.config.spec import RunSpec
from soma.round import Meeting, evaluation_name
from soma.store import Store
from soma.strategies import (
    Strategy,
    load_strategy,
)
from soma.tasks import Task, importable_here, load_task

LOG = logging.getLogger("soma.workflow")


def progress(message: str, *args: Any) -> None:
    """A line for the job's log that also shows in snakemake's own output while the run goes
    (see `logged`): what a user watches, one line per round."""
    LOG.info(message, *args, extra={"progress": True})


def spec_of(config: Mapping[str, Any]) -> RunSpec:
    """The run the config describes (soma.config.spec), as every job reads it: once a job, and
    handed on (its roster is read once, RunSpec.signing)."""
    return RunSpec.from_config(config)


def _importable_here() -> None:
    """A task module in the working directory is importable too (soma.tasks)."""
    importable_here()


def task_of(spec: RunSpec) -> Task:
    """The run's task, with its options (read as `soma.config.options` reads text)."""
    _importable_here()
    return load_task(spec.task, dict(spec.task_options))


def strategy_of(spec: RunSpec) -> Strategy:
    """The run's strategy, with its options."""
    return load_strategy(spec.strategy, dict(spec.strategy_options))


def meeting_of(spec: RunSpec, round: int, started: Mapping[str, Any]) -> Meeting:
    """Where round `round`'s clients meet: keyed by the receipt it started from and the run
    (and the task's base the start job kept, which every receipt after it names)."""
    from soma.run.base import named

    return named(spec, started.get("base")).meeting(round, started["weights"], started.get("state"))


def trained_meeting_of(
    spec: RunSpec, task: Task, round: int, started: Mapping[str, Any]
) -> Meeting:
    """`meeting_of` for a job that trains: its task's base checked first to be the one the
    run started on (soma.run.base.check: refused naming both digests)."""
    from soma.run.base import check

    check(task, spec.seed, spec.run, started.get("base"))
    return meeting_of(spec, round, started)


def json_numbers(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Metrics as JSON numbers; a NaN or infinite one (a diverging loss) as null, since a
    receipt is strict JSON."""

    def number(v: Any) -> Any:
        if isinstance(v, float):
            return float(v) if math.isfinite(v) else None
        return v

    return {k: number(v) for k, v in sorted(metrics.items())}


def checked_metrics(config: Mapping[str, Any], metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The metrics as JSON numbers, refused unless they hold the configured `metric`."""
    metric = config["metric"]
    if not isinstance(metrics, Mapping) or metric not in metrics:
        returned = ", ".join(sorted(map(str, metrics))) if isinstance(metrics, Mapping) else None
        raise ConfigRefused(
            f"config key `metric`: the task's evaluate() returns "
            f"{returned or 'no metrics'}; not {metric!r}"
        )
    return json_numbers(metrics)


def keep_evaluation(store: Store, run: str, weights: str, metrics: Mapping[str, Any]) -> str:
    """The metrics of `weights` in the store, named by the weights (for `soma status`).

    The name is a function of the weights, and evaluation is deterministic, so a rerun or
    another job evaluating the same weights binds the name to the very same record.
    """
    return store.keep(evaluation_name(run, weights), {"metrics": dict(metrics), "weights": weights})


def shown_value(value: Any) -> str:
    """A metric for a human: three decimals, or as it is (None: a NaN in the receipt)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "nan" if value is None else str(value)
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def shown(metrics: Mapping[str, Any]) -> str:
    """`accuracy 0.936, loss 0.210`: metrics for a log line."""
    return ", ".join(f"{k} {shown_value(v)}" for k, v in sorted(metrics.items())) or "nothing"


def nodes_at(task: Task, store: Store, config: Mapping[str, Any], weights: str) -> dict:
    from soma.nodes import load  # torch: only the jobs that train or evaluate need it

    nodes = task.nodes(config["seed"])
    # a personalized run's weights hold its shared nodes alone (soma.run.personal)
    load(nodes, store.recall_digest(weights), partial=bool(config.get("personal")))
    return nodes


def threads(job: Any) -> None:
    """Torch threads for this job: the run's `threads` (part of what the run is: the count
    decides a CPU's sums, soma.training.training_threads), not the threads Snakemake gave
    the job (a profile's `set-threads`, or fewer where `--cores` is lower), which only
    schedule it and size its Slurm request. A job given other threads says so once."""
    count = int(job.config.get("threads") or 1)
    given = int(job.threads)
    if given != count:
        LOG.warning(
            "this job was given %d thread(s) but the run's `threads` is %d, which it trains "
            "on: threads change a client's bits, so they are the run's; to use %d, set "
            "`threads: %d` in the config (a new run)",
            given,
            count,
            given,
            given,
        )
    import torch  # torch-free at import: the summary job, a table and a plot, needs none

    torch.set_num_threads(count)


class _Progress(logging.Filter):
    """Only the `progress` lines (see `progress`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return bool(getattr(record, "progress", False))


class logged:
    """A job's log: soma's logging to the job's Snakemake log file, tracebacks included.

    Every line goes to the log file; `progress` lines also go to the job's stderr, which
    Snakemake shows in its own output on the local executor (and Slurm in the job's output),
    so that a run says how it goes while it goes. What a task prints by itself (its own
    progress, a library's warnings) goes to the log file too: stdout and stderr are the
    file's while the job runs. A job that fails logs its traceback, then fails as before.
    """

    FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> logged:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.log = open(self.path, "w", encoding="utf-8", buffering=1)  # noqa: SIM115
        self.saved = sys.stdout, sys.stderr
        to_file = logging.StreamHandler(self.log)
        to_file.setFormatter(logging.Formatter(self.FORMAT))
        to_terminal = logging.StreamHandler(sys.stderr)
        to_terminal.addFilter(_Progress())
        self.handlers = [to_file, to_terminal]
        root = logging.getLogger("soma")
        self.level = root.level
        root.setLevel(logging.INFO)
        for handler in self.handlers:
            root.addHandler(handler)
        sys.stdout = sys.stderr = self.log
        self.tic = time.perf_counter()
        return self

    def __exit__(self, kind, error, trace) -> None:
        seconds = time.perf_counter() - self.tic
        if error is not None:
            LOG.error("failed after %.2f s: %s", seconds, error, exc_info=(kind, error, trace))
        else:
            LOG.info("done in %.2f s", seconds)
        sys.stdout, sys.stderr = self.saved
        root = logging.getLogger("soma")
        for handler in self.handlers:
            handler.flush()
            root.removeHandler(handler)
        root.setLevel(self.level)
        self.log.close()
