"""Broken variants of the core arithmetic and refusals (soma.aggregate, soma.nodes,
soma.store.names); registered into tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant

# --- fedavg (soma/fedavg.py) -------------------------------------------------


_FEDAVG = "tests/test_federated.py::"
_SIZES = _FEDAVG + "test_sizes_is_what_it_weighs_by_and_ten_times_the_data_pulls_ten_times"


@mutant(
    "fedavg_returns_the_first",
    caught_by=[
        _SIZES,
        _FEDAVG + "test_three_clients_that_each_see_a_corner_read_the_union_better_than_one_alone",
    ],
)
def _fedavg_returns_the_first() -> None:
    """Nothing is folded in, an iterator's exports one at a time or a list's all at once."""
    import soma.aggregate

    _replace(soma.aggregate, "_fold", lambda mean, export, weight: None)
    _replace(soma.aggregate, "lerp_each", lambda start, folds: start.clone())


@mutant(
    "fedavg_ignores_sizes",
    caught_by=[_SIZES, _FEDAVG + "test_sizes_whose_sum_overflows_are_refused_not_weighed_as_zero"],
)
def _fedavg_ignores_sizes() -> None:
    import soma.aggregate

    real = soma.aggregate._size_of
    _replace(soma.aggregate, "_size_of", lambda size, index: real(size, index) and 1.0)


@mutant(
    "fedavg_averages_the_integers",
    caught_by=[_SIZES, _FEDAVG + "test_what_is_not_a_number_you_can_halve_is_not_halved"],
)
def _fedavg_averages_the_integers() -> None:
    import soma.aggregate

    _replace(soma.aggregate, "_averageable", lambda dtype: True)


# --- refusals (soma/nodes.py, soma/store/names.py, soma/aggregate.py) -----------------------------
# Each refusal comes before anything is changed; these let something through, or refuse late.


@mutant(
    "load_writes_as_it_goes",
    caught_by=["tests/test_refusals.py", "-k", "load or tied"],
)
def _load_writes_as_it_goes() -> None:
    """No check of what only shows when copying: a meta tensor raises half way through the
    copies (the nodes half loaded), and tied weights given two values take the last one."""
    import soma.nodes

    _replace(soma.nodes, "_refuse_what_cannot_be_copied", lambda copies: None)


@mutant(
    "load_lets_the_last_tie_win",
    caught_by=["tests/test_refusals.py", "-k", "tied or shared"],
)
def _load_lets_the_last_tie_win() -> None:
    """Tied weights given different values are taken as equal: the last key silently wins."""
    import soma.nodes

    _replace(soma.nodes, "_same_values", lambda a, b: True)


@mutant(
    "names_accept_control_characters",
    caught_by=["tests/test_refusals.py", "-k", "control_or_format_character"],
)
def _names_accept_control_characters() -> None:
    """A name may hold U+202E, U+200B, NUL...: `ls` shows another name than the one there."""
    import soma.store.names

    _replace(soma.store.names, "_hidden_character_problem", lambda text: None)


@mutant(
    "names_leave_the_length_to_the_filesystem",
    caught_by=["tests/test_refusals.py", "-k", "too_long_for_the_filesystem"],
)
def _names_leave_the_length_to_the_filesystem() -> None:
    """No limit on a name's or a segment's length: the kernel's bare ENAMETOOLONG says it."""
    import soma.store.names

    _replace(soma.store.names, "_length_problem", lambda text: None)
    _replace(soma.store.names, "_segment_length_problem", lambda segment: None)


@mutant(
    "fedavg_folds_any_tensor",
    caught_by=["tests/test_refusals.py", "-k", "cannot_fold"],
)
def _fedavg_folds_any_tensor() -> None:
    """A meta or sparse tensor goes into the mean: torch raises its own error half way."""
    import soma.aggregate

    _replace(soma.aggregate, "_unaverageable", lambda tensor: None)


# --- the same bits on every machine (soma/arithmetic.py) -------------------------------------
# torch's fused kernels round differently by CPU capability: each of these puts one back, and
# the arithmetic run under each capability the machine has must tell. The steps written out
# in this process come first where they tell too (-x stops there; on a CPU with no capability
# beyond default a fused kernel may round as the steps do, and the capabilities are skipped).


@mutant(
    "fedavg_folds_with_fused_lerp",
    caught_by=[
        "tests/test_federated.py::"
        "test_the_mean_is_its_single_rounded_steps_written_out_so_the_same_bits_anywhere",
        "tests/test_capabilities.py",
    ],
)
def _fedavg_folds_with_fused_lerp() -> None:
    import torch

    import soma.aggregate

    def lerp(start, end, weight, *, out=None):
        return torch.lerp(start, end, weight, out=out)

    _replace(soma.aggregate, "lerp", lerp)


@mutant(
    "fedavg_list_folds_one_sided",
    caught_by=["tests/test_federated.py", "-k", "bits_an_iterator"],
)
def _fedavg_list_folds_one_sided() -> None:
    """A list's mean folded as start + w (end - start) whatever w: the same mean in exact
    arithmetic, other bits than the two-sided form an iterator of the same list is folded by."""
    import torch

    import soma.aggregate

    def lerp_each(start, folds):
        out = start.to(torch.float64, copy=True)
        for end, weight in folds:
            out += weight * (end.to(torch.float64) - out)
        return out.to(start.dtype)

    _replace(soma.aggregate, "lerp_each", lerp_each)


@mutant(
    "server_step_adds_with_alpha",
    caught_by=[
        "tests/strategies/test_strategies_fedopt.py::"
        "test_fedavgms_momentum_step_is_a_multiply_then_an_add_so_the_same_bits_anywhere",
        "tests/test_capabilities.py::"
        "test_every_strategy_averages_to_the_same_bits_under_every_capability",
    ],
)
def _server_step_adds_with_alpha() -> None:
    import soma.strategies._fedopt

    def add_scaled(total, addend, scale):
        return total.add_(addend, alpha=scale)

    _replace(soma.strategies._fedopt, "add_scaled", add_scaled)
