"""Broken variants of a run's `transfer` precision (soma.transfer): weights kept at the
precision the run declares, and a load that only ever widens. Registered into
tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant

_TESTS = "tests/run/test_transfer.py"


@mutant(
    "transfer_kept_at_full_precision",
    caught_by=[
        f"{_TESTS}::test_every_weight_of_a_bfloat16_run_is_kept_at_bfloat16_and_averaged_in_float32"
    ],
)
def _transfer_kept_at_full_precision() -> None:
    """The run says bfloat16, its weights go into the store as the model made them."""
    from soma import transfer

    _replace(transfer, "at", lambda export, transfer: export)


@mutant(
    "load_narrows",
    caught_by=[
        f"{_TESTS}::test_a_bfloat16_export_loads_into_a_float32_model_exactly_and_never_the_reverse"
    ],
)
def _load_narrows() -> None:
    """Any float loads into any float: float32 weights silently rounded into a bfloat16 model."""
    from soma import nodes

    _replace(
        nodes,
        "exact_widening",
        lambda source, target: source.is_floating_point and target.is_floating_point,
    )
