"""Broken variants of the fedopt strategies (registered into tests/mutants.py's MUTANTS).

Each patches soma.strategies._fedopt, which the four strategies look up at call time."""

from __future__ import annotations

from mutants import _replace, mutant

_TESTS = "tests/test_strategies_fedopt.py"
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
        lambda previous, moments, tau: fresh_state(previous, moments, 0.0),
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
