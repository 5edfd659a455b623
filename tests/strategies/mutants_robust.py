"""Broken variants of the robust strategies (registered into tests/mutants.py's MUTANTS)."""

from __future__ import annotations

from mutants import _replace, mutant

_TESTS = "tests/strategies/test_strategies_robust.py"


def _catchers(*names: str) -> list[str]:
    return [f"{_TESTS}::{name}" for name in names]


# --- median (soma/strategies/median.py) ----------------------------------------------------


@mutant(
    "median_is_mean",
    caught_by=_catchers(
        "test_median_of_three_clients_is_the_middle_value_of_each_coordinate_whatever_the_sizes"
    ),
)
def _median_is_mean() -> None:
    import soma.strategies.median

    _replace(soma.strategies.median, "median", lambda stacked: stacked.mean(dim=0))


@mutant(
    "median_takes_the_lower",
    caught_by=_catchers(
        "test_median_of_four_clients_is_the_mean_of_the_two_middle_values_as_numpy"
    ),
)
def _median_takes_the_lower() -> None:
    """torch.median's answer for an even count: the lower of the two middle values."""
    import soma.strategies.median

    _replace(soma.strategies.median, "median", lambda stacked: stacked.median(dim=0).values)


# --- trimmed mean (soma/strategies/trimmed_mean.py) --------------------------------------------


@mutant(
    "trimmed_mean_trims_nothing",
    caught_by=_catchers("test_trimmed_mean_with_beta_0_2_of_five_clients_drops_one_on_each_side"),
)
def _trimmed_mean_trims_nothing() -> None:
    import soma.strategies.trimmed_mean

    _replace(soma.strategies.trimmed_mean, "trimmed", lambda n, beta: 0)


@mutant(
    "trimmed_mean_reads_beta_as_binary",
    caught_by=_catchers("test_trimmed_mean_reads_beta_as_the_decimal_written"),
)
def _trimmed_mean_reads_beta_as_binary() -> None:
    """floor(beta * n) in floats: 0.29 of 100 clients trims 28."""
    import math

    import soma.strategies.trimmed_mean

    _replace(soma.strategies.trimmed_mean, "trimmed", lambda n, beta: math.floor(beta * n))


# --- Krum (soma/strategies/krum.py) --------------------------------------------------------


@mutant(
    "krum_ignores_scores", caught_by=_catchers("test_krum_keeps_the_client_with_the_lowest_score")
)
def _krum_ignores_scores() -> None:
    """Keeps the first m clients, whoever they are."""
    import soma.strategies.krum

    _replace(soma.strategies.krum, "chosen", lambda scores, clients, m: list(range(m)))


@mutant(
    "krum_counts_every_neighbour",
    caught_by=_catchers("test_krum_keeps_the_client_with_the_lowest_score"),
)
def _krum_counts_every_neighbour() -> None:
    """Scores sum the distances to all n - 1 others, not to the n - f - 2 nearest."""
    import soma.strategies.krum

    _replace(
        soma.strategies.krum,
        "scores",
        lambda squared, f: [float(row.sum()) for row in squared],
    )


@mutant(
    "krum_mean_ignores_sizes",
    caught_by=_catchers("test_multi_krum_averages_the_kept_clients_weighted_by_their_sizes"),
)
def _krum_mean_ignores_sizes() -> None:
    import soma.strategies.krum
    from soma.strategies import Update

    real = soma.strategies.krum.weighted_mean
    _replace(
        soma.strategies.krum,
        "weighted_mean",
        lambda updates: real(Update(u.client, None, u.weights) for u in updates),
    )


@mutant(
    "krum_allows_any_round",
    caught_by=_catchers("test_krum_refuses_a_round_smaller_than_2f_plus_3"),
)
def _krum_allows_any_round() -> None:
    import soma.strategies.krum

    _replace(soma.strategies.krum, "check_count", lambda n, f, m: None)


# --- the walk over keys (soma/strategies/_columns.py) ------------------------------------------


@mutant(
    "columns_accepts_any_shape",
    caught_by=[
        f"{_TESTS}::test_updates_that_are_not_the_same_network_are_refused_naming_node_key_shapes_clients"
    ],
)
def _columns_accepts_any_shape() -> None:
    """(2, 3) and (3, 2) have as many numbers: stacked flat, they would go through."""
    import soma.strategies._columns

    _replace(soma.strategies._columns, "check_same_network", lambda rows: None)


@mutant(
    "columns_averages_the_counts",
    caught_by=_catchers("test_counts_and_bools_keep_the_first_updates_value"),
)
def _columns_averages_the_counts() -> None:
    """Every key is reduced, counts included (floats widened so the mean can run)."""
    import torch

    import soma.strategies._columns

    real = soma.strategies._columns.work_dtype

    def floats(export):
        return ((node_id, key) for node_id, keys in export.items() for key in keys)

    def work_dtype(dtype):
        return real(dtype) if dtype.is_floating_point or dtype.is_complex else torch.float64

    _replace(soma.strategies._columns, "floats", floats)
    _replace(soma.strategies._columns, "work_dtype", work_dtype)


@mutant(
    "columns_skips_the_last_block",
    caught_by=_catchers("test_small_blocks_give_the_same_result_as_one_block"),
)
def _columns_skips_the_last_block() -> None:
    import soma.strategies._columns

    real = soma.strategies._columns.blocks

    def blocks(rows, node_id, key, dtype=None):
        cut = list(real(rows, node_id, key, dtype))
        return iter(cut[:-1] if len(cut) > 1 else cut)

    _replace(soma.strategies._columns, "blocks", blocks)


# --- bucketing, centered clipping, the norm bound -------------------------------------------


@mutant(
    "bucketing_ignores_the_round",
    caught_by=_catchers("test_the_shuffle_is_the_seed_and_the_rounds_and_nothing_else"),
)
def _bucketing_ignores_the_round() -> None:
    """Every round draws the same buckets: an attacker shares one honest partner for good."""
    import soma.strategies._buckets

    real = soma.strategies._buckets.permutation
    _replace(
        soma.strategies._buckets,
        "permutation",
        lambda n, *, seed, round: real(n, seed=seed, round=0),
    )


@mutant(
    "bucketing_makes_buckets_of_one",
    caught_by=_catchers(
        "test_bucketed_median_by_hand_is_the_median_of_the_bucket_means",
        "test_bucketed_krum_by_hand_keeps_every_client_of_the_kept_bucket_weighted_by_size",
        "test_centered_clip_with_buckets_by_hand_clips_the_bucket_means",
    ),
)
def _bucketing_makes_buckets_of_one() -> None:
    """The shuffle is drawn and nothing is averaged: the rule sees the clients themselves."""
    import soma.strategies._buckets

    permutation = soma.strategies._buckets.permutation

    def groups(rows, s, *, seed, round, strategy):
        return [[i] for i in permutation(len(rows), seed=seed, round=round)]

    _replace(soma.strategies._buckets, "groups", groups)


@mutant(
    "bucketing_in_arrival_order",
    caught_by=_catchers("test_bucketing_does_not_depend_on_the_order_the_clients_came_in"),
)
def _bucketing_in_arrival_order() -> None:
    """The shuffle is applied to the clients in the order they came, not in client order."""
    import soma.strategies._buckets

    _replace(soma.strategies._buckets, "in_client_order", lambda rows: rows)


@mutant(
    "centered_clip_never_clips",
    caught_by=_catchers(
        "test_centered_clip_one_pass_by_hand",
        "test_centered_clip_bounds_a_garbage_client_and_drops_nan",
    ),
)
def _centered_clip_never_clips() -> None:
    """Every difference counts as norm 0: the unweighted mean, which one attacker drags away."""
    import soma.strategies.centered_clip

    _replace(soma.strategies.centered_clip, "norm", lambda flat: 0.0)


@mutant(
    "centered_clip_does_not_recentre",
    caught_by=_catchers("test_centered_clip_two_passes_by_hand_recentre_on_the_first"),
)
def _centered_clip_does_not_recentre() -> None:
    """Every pass clips around the previous global model: more passes change nothing."""
    import soma.strategies.centered_clip as cc

    real = cc.clip_pass
    start: dict = {}

    def clip_pass(center, rows, tau):
        if not start:
            start.update(center)
        return real(dict(start), rows, tau)

    _replace(cc, "clip_pass", clip_pass)


@mutant(
    "norm_bound_never_clips",
    caught_by=_catchers("test_norm_bound_by_hand_clips_to_a_multiple_of_the_median_norm"),
)
def _norm_bound_never_clips() -> None:
    import math

    import soma.strategies._norm_bound

    _replace(soma.strategies._norm_bound, "cap_of", lambda norms, bound: math.inf)


@mutant(
    "norm_bound_by_the_mean_norm",
    caught_by=_catchers("test_norm_bound_by_hand_clips_to_a_multiple_of_the_median_norm"),
)
def _norm_bound_by_the_mean_norm() -> None:
    """The bound follows the mean norm, which the attacker itself inflates."""
    import soma.strategies._norm_bound

    _replace(
        soma.strategies._norm_bound, "cap_of", lambda norms, bound: bound * sum(norms) / len(norms)
    )
