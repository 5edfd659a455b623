"""Broken variants of the fedopt strategies (registered into tests/mutants.py's MUTANTS).

Each patches soma.strategies._fedopt, which the four strategies look up at call time."""

from __future__ import annotations

from mutants import _replace, mutant

_TESTS = "tests/strategies/test_strategies_fedopt.py"
_ALL = ("fedavgm", "fedadam", "fedyogi", "fedadagrad")


def _by_hand(*names: str) -> list[str]:
    return [f"{_TESTS}::test_{name}_by_hand" for name in names]


@mutant("fedopt_forgets_momentum", caught_by=_by_hand(*_ALL))
def _fedopt_forgets_momentum() -> None:
    """The first moment is this round's delta alone: the server has no memory."""
    from soma.strategies import _fedopt

    _replace(_fedopt, "heavy_ball", lambda m, delta, momentum: delta.clone())
    _replace(_fedopt, "first_moment", lambda m, delta, beta1: delta * (1 - beta1))


@mutant("fedopt_yogi_as_adam", caught_by=_by_hand("fedyogi"))
def _fedopt_yogi_as_adam() -> None:
    """Yogi's additive, sign-led v replaced by Adam's exponential average."""
    from soma.strategies import _fedopt

    _replace(_fedopt, "yogi_second_moment", _fedopt.adam_second_moment)


@mutant("fedopt_adagrad_forgets_the_sum", caught_by=_by_hand("fedadagrad"))
def _fedopt_adagrad_forgets_the_sum() -> None:
    """Adagrad's v is the last delta^2, not the sum of them all."""
    from soma.strategies import _fedopt

    _replace(_fedopt, "adagrad_second_moment", lambda v, delta: delta.square())


@mutant("fedopt_ignores_server_lr", caught_by=_by_hand(*_ALL))
def _fedopt_ignores_server_lr() -> None:
    """Every step is taken at server_lr 1, whatever the option says."""
    from soma.strategies import _fedopt

    momentum_step, adaptive_step = _fedopt.momentum_step, _fedopt.adaptive_step

    def momentum(previous, mean, m, *, server_lr, momentum):
        return momentum_step(previous, mean, m, server_lr=1.0, momentum=momentum)

    def adaptive(previous, mean, m, v, *, rule, server_lr, beta1, beta2, tau):
        return adaptive_step(
            previous, mean, m, v, rule=rule, server_lr=1.0, beta1=beta1, beta2=beta2, tau=tau
        )

    _replace(_fedopt, "momentum_step", momentum)
    _replace(_fedopt, "adaptive_step", adaptive)


@mutant("fedopt_starts_v_at_zero", caught_by=_by_hand("fedadam", "fedyogi", "fedadagrad"))
def _fedopt_starts_v_at_zero() -> None:
    """v starts at 0, not at the paper's tau^2."""
    from soma.strategies import _fedopt

    fresh_state = _fedopt.fresh_state
    _replace(
        _fedopt,
        "fresh_state",
        lambda previous, moments, tau, v0="tau2": fresh_state(previous, moments, 0.0, v0),
    )


@mutant(
    "fedopt_steps_the_counts",
    caught_by=[f"{_TESTS}::test_integer_counts_take_the_means_value_and_are_never_stepped"],
)
def _fedopt_steps_the_counts() -> None:
    """Integer counts (num_batches_tracked) go through the optimizer like weights."""
    from soma.strategies import _fedopt

    def everything(export):
        for node, keys in export.items():
            for key in keys:
                yield node, key

    _replace(_fedopt, "floats", everything)


@mutant(
    "fedopt_computes_half_in_half",
    caught_by=[
        f"{_TESTS}::test_half_precision_is_stepped_in_float32_and_comes_back_in_its_own_dtype"
    ],
)
def _fedopt_computes_half_in_half() -> None:
    """float16 and bfloat16 are stepped, and their moments kept, in their own precision."""
    from soma.strategies import _fedopt

    _replace(_fedopt, "working_dtype", lambda dtype: dtype)


@mutant(
    "fedopt_takes_any_state",
    caught_by=[
        f"{_TESTS}::test_a_state_missing_a_key_or_with_one_too_many_is_refused_naming_it",
        f"{_TESTS}::test_another_strategys_state_is_refused",
    ],
)
def _fedopt_takes_any_state() -> None:
    """A stale state (another network's, another strategy's) is used as it is."""
    from soma.strategies import _fedopt

    _replace(_fedopt, "check_state", lambda strategy, moments, state, previous: None)


@mutant(
    "fedopt_takes_any_decay",
    caught_by=[f"{_TESTS}::test_a_bad_option_is_refused_naming_the_option_and_the_value"],
)
def _fedopt_takes_any_decay() -> None:
    """beta1, beta2 and momentum are taken as given, 1.5 and "0.9" included."""
    from soma.strategies import _fedopt

    _replace(_fedopt, "fraction", lambda strategy, option, value: value)


@mutant(
    "fedopt_ignores_v0",
    caught_by=[
        f"{_TESTS}::test_flowers_fedyogi_by_hand_v_from_zero",
        f"{_TESTS}::test_flowers_fedadagrad_by_hand_no_first_moment_and_v_from_zero",
    ],
)
def _fedopt_ignores_v0() -> None:
    """v always starts at tau^2, whatever `v0` says."""
    from soma.strategies import _fedopt

    fresh_state = _fedopt.fresh_state
    _replace(
        _fedopt,
        "fresh_state",
        lambda previous, moments, tau, v0="tau2": fresh_state(previous, moments, tau),
    )


@mutant(
    "fedadam_corrects_as_adam_not_flower",
    caught_by=[
        f"{_TESTS}::test_flowers_fedadam_by_hand_v_from_zero_and_its_bias_corrected_rate",
        f"{_TESTS}::test_bias_correction_follows_the_round_not_the_count_of_steps",
    ],
)
def _fedadam_corrects_as_adam_not_flower() -> None:
    """Adam's own correction (exponent t, Flower's is t + 1): another run than Flower's."""
    import math

    from soma.strategies import _fedopt

    def rate(self):
        if not self.bias_correction:
            return self.server_lr
        t = self.round + 1
        return self.server_lr * math.sqrt(1 - self.beta2**t) / (1 - self.beta1**t)

    _replace(_fedopt.ServerOptimizer, "rate", rate)


@mutant(
    "fedadam_corrects_by_a_count_from_zero",
    caught_by=[f"{_TESTS}::test_bias_correction_follows_the_round_not_the_count_of_steps"],
)
def _fedadam_corrects_by_a_count_from_zero() -> None:
    """The round is not bound: every strategy is corrected as if in round 0."""
    from soma.strategies import _fedopt

    _replace(_fedopt.ServerOptimizer, "for_round", lambda self, *, round, seed: self)
    real = _fedopt.ServerOptimizer.rate

    def rate(self):
        return real(
            self if self.round is not None else __import__("dataclasses").replace(self, round=0)
        )

    _replace(_fedopt.ServerOptimizer, "rate", rate)


@mutant(
    "scaffold_server_mean_ignored",
    caught_by=[f"{_TESTS}::test_scaffold_server_mean_weighted_by_default_uniform_as_the_paper"],
)
def _scaffold_server_mean_ignored() -> None:
    """SCAFFOLD weighs by size whatever `server_mean` says."""
    from soma.strategies import scaffold

    make = scaffold.make
    _replace(scaffold, "make", lambda server_lr=1.0, *, server_mean="weighted": make(server_lr))
