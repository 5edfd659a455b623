"""The workflow's `best` and `model` jobs: the run's model files. `best`: its best round by
federated validation; `model`: its last round's average. With the config's `roster:` both
write only weights whose average record (and, for `best`, federated evaluation record) a
roster member signed (soma.exported): a store writer without a key cannot make either job
write a round of their own. (Named best_round, not best, so that `soma.workflow.best` stays
the job's function.)"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from soma.config.spec import RunSpec
from soma.exported import export_best_checked, signed_weights
from soma.model import export_receipt
from soma.workflow.common import LOG, shown_value, spec_of
from soma.workflow.receipts import read_receipt


def best(config: Mapping[str, Any], evaluations: Sequence[str], output: str) -> None:
    """The run's best round as a model file (rule `best`): the round whose federated
    validation `metric` is best (soma.exported.export_best_checked), among the weights its
    evaluation receipts name; never chosen by the central test metric."""
    weights = {}
    for path in evaluations:
        given = read_receipt(path)
        weights[given["round"]] = given["weights"]
    store = RunSpec.config_store(config)
    signing = spec_of(config).signing
    made = export_best_checked(
        store,
        config["run"],
        output,
        config["metric"],
        signing=signing,
        weights=weights,
        vouched=config["task"],  # this job's own config's task: it may be made to describe it
    )
    for why in made["ignored"]:
        LOG.warning("ignored (unsigned/forged): %s", why)
    LOG.info(
        "best round %d (federated validation %s %s): weights %s written to %s",
        made["round"],
        config["metric"],
        shown_value(made["best"]["validation"]),
        made["weights"],
        output,
    )


def model(config: Mapping[str, Any], receipt: str, output: str) -> dict[str, Any]:
    """The last round's average as a model file (rule `model`): the weights its average
    receipt names, once a roster member's signed average record of that round names them."""
    given = read_receipt(receipt)
    store = RunSpec.config_store(config)
    signed_weights(store, spec_of(config).signing, given["run"], given["round"], given["weights"])
    return export_receipt(config["store"], receipt, output, vouched=config["task"])
