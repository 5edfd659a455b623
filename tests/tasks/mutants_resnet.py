"""Broken variants of soma.tasks.resnet (registered into tests/mutants.py's MUTANTS)."""

from __future__ import annotations

from mutants import _replace, mutant

_T = "tests/tasks/test_resnet.py::"


@mutant(
    "resnet_not_seeded",
    caught_by=[_T + "test_a_client_s_images_are_drawn_from_the_seed_alone"],
)
def _resnet_not_seeded() -> None:
    """A client's images are drawn from fresh entropy, not from data_seed."""
    import numpy as np

    import soma.tasks.resnet as mod

    def _stream(data_seed, which):
        return np.random.default_rng()

    _replace(mod, "_stream", _stream)


@mutant(
    "resnet_precision_ignored",
    caught_by=[_T + "test_bf16_trains_under_autocast_and_differs_from_fp32"],
)
def _resnet_precision_ignored() -> None:
    """precision bf16 trains at fp32: autocast is never entered."""
    import contextlib

    import soma.tasks.resnet as mod

    def _autocast(self, device):
        return contextlib.nullcontext()

    _replace(mod.ResNetTask, "_autocast", _autocast)
