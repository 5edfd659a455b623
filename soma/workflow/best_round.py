"""The workflow's `best` job: the run's best round by federated validation, as a model file.
(Named best_round, not best, so that `soma.workflow.best` stays the job's function.)"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from soma.config.spec import RunSpec
from soma.model import export_best
from soma.workflow.common import LOG, shown_value
from soma.workflow.receipts import read_receipt


def best(config: Mapping[str, Any], evaluations: Sequence[str], output: str) -> None:
    """The run's best round as a model file (rule `best`): the round whose federated
    validation `metric` is best (soma.model.export_best), among the weights its evaluation
    receipts name; never chosen by the central test metric."""
    weights = {}
    for path in evaluations:
        given = read_receipt(path)
        weights[given["round"]] = given["weights"]
    store = RunSpec.config_store(config)
    made = export_best(store, config["run"], output, config["metric"], weights=weights)
    LOG.info(
        "best round %d (federated validation %s %s): weights %s written to %s",
        made["round"],
        config["metric"],
        shown_value(made["best"]["validation"]),
        made["weights"],
        output,
    )
