"""Broken variants of soma.tasks.synthetic (registered into tests/mutants.py's MUTANTS)."""

from __future__ import annotations

from mutants import _replace, mutant

_T = "tests/tasks/test_synthetic.py::"


@mutant(
    "synthetic_not_seeded",
    caught_by=[_T + "test_the_same_seed_generates_the_same_bits_and_another_seed_others"],
)
def _synthetic_not_seeded() -> None:
    """The devices are drawn from fresh entropy, not from data_seed."""
    import numpy as np

    import soma.tasks.synthetic as mod

    def _stream(data_seed, which):
        return np.random.default_rng()

    _replace(mod, "_stream", _stream)


@mutant("synthetic_beta_ignored", caught_by=[_T + "test_the_inputs_follow_the_formula"])
def _synthetic_beta_ignored() -> None:
    """Every device's input mean is drawn around 0, whatever beta says."""
    import soma.tasks.synthetic as mod

    original = mod._device

    def _device(k, n, *, alpha, beta, iid, data_seed):
        return original(k, n, alpha=alpha, beta=0.0, iid=iid, data_seed=data_seed)

    _replace(mod, "_device", _device)


@mutant(
    "synthetic_iid_is_heterogeneous",
    caught_by=[_T + "test_the_iid_variant_labels_every_device_with_one_model"],
)
def _synthetic_iid_is_heterogeneous() -> None:
    """iid: true draws a model per device, as Synthetic(0, 0) does."""
    import soma.tasks.synthetic as mod

    original = mod._device

    def _device(k, n, *, alpha, beta, iid, data_seed):
        return original(k, n, alpha=alpha, beta=beta, iid=False, data_seed=data_seed)

    _replace(mod, "_device", _device)
