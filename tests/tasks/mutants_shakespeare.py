"""Broken variants of the Shakespeare task (registered into tests/mutants.py's MUTANTS)."""

from __future__ import annotations

from mutants import _replace, mutant

_T = "tests/tasks/test_shakespeare.py::"


@mutant(
    "shakespeare_windows_cross_lines",
    caught_by=[_T + "test_a_client_is_a_role_its_windows_that_roles_text_in_order"],
)
def _shakespeare_windows_cross_lines() -> None:
    """The role's text windowed whole, padded once: a window reaches into earlier lines,
    which LEAF's line-by-line windowing never does."""
    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view

    import soma.tasks.shakespeare as mod
    from soma.tasks import plays

    def examples(text, length=plays.LENGTH):
        codes = np.array(plays.encode(plays.collapsed(text)), dtype=np.uint8)
        padded = np.concatenate([np.full(length, 1, dtype=np.uint8), codes])
        windows = sliding_window_view(padded, length)[: len(codes)]
        return np.ascontiguousarray(windows), codes

    _replace(mod, "examples", examples)


@mutant(
    "shakespeare_test_split_right_after_training",
    caught_by=[_T + "test_the_split_is_leafs_by_sample_with_its_79_window_gap"],
)
def _shakespeare_test_split_right_after_training() -> None:
    """The test split starts right after the training split (no 79-example gap)."""
    import soma.tasks.shakespeare as mod

    def split(self, n):
        train = max(1, int((1 - float(self.test_fraction)) * n))
        return train, train

    _replace(mod.ShakespeareTask, "split", split)


@mutant(
    "shakespeare_objective_dropped",
    caught_by=[_T + "test_training_hands_the_objective_every_step"],
)
def _shakespeare_objective_dropped() -> None:
    """train() never hands the strategy's objective (FedProx, SCAFFOLD) to its training."""
    import soma.tasks.shakespeare as mod

    original = mod.ShakespeareTask.train

    def train(self, nodes, data, *, seed, objective=None):
        return original(self, nodes, data, seed=seed, objective=None)

    _replace(mod.ShakespeareTask, "train", train)
