"""A first hour's trips that are not a refusal (those are tests/config/test_parse_time.py's
and tests/workflow/test_catalogue_layout.py's): what `soma simulate` without `--store` says of its
model, which no store kept."""

from __future__ import annotations

import logging

import soma


def test_a_simulation_without_a_store_says_where_its_model_went(caplog, tmp_path) -> None:
    with caplog.at_level(logging.INFO, logger="soma.simulate"):
        soma.simulate(
            "soma.tasks.control", clients=2, rounds=1, task_options={"examples": 16}, run="demo"
        )
    said = [r.getMessage() for r in caplog.records if r.name == "soma.simulate"]
    assert said == [
        "no store given: run 'demo' was kept in a temporary store, now removed, and its model "
        "with it; give --store DIR to keep it (then soma export --store DIR --run demo -o "
        "model.safetensors)"
    ]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="soma.simulate"):
        soma.simulate(
            "soma.tasks.control", clients=2, rounds=1, task_options={"examples": 16},
            store=tmp_path / "store",
        )  # fmt: skip
    assert not [r for r in caplog.records if r.name == "soma.simulate"], "a store keeps it"
