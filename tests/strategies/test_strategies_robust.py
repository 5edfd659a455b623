"""The robust strategies: coordinate-wise median, trimmed mean, Krum and multi-Krum.

Every expected number is worked out by hand in the test (in a comment beside it), never by
the code under test.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import pytest
import torch

import soma
from soma.strategies import (
    Arrival,
    StrategyError,
    Update,
    _buckets,
    _columns,
    at_round,
    krum,
    load_strategy,
    median,
    trimmed_mean,
)
from soma.strategies.fedavg import weighted_mean

torch.set_num_threads(1)


def one_key(values: list[float], count: int = 0) -> dict:
    """An export with one float key (node 'layer', key 'w') and one integer count."""
    return {
        "layer": {
            "w": torch.tensor(values, dtype=torch.float32),
            "num_batches_tracked": torch.tensor(count),
        }
    }


def updates(
    rows: list[list[float]], sizes: list[float] | None = None, counts: list[int] | None = None
) -> list[Update]:
    sizes = sizes or [1.0] * len(rows)
    counts = counts or [0] * len(rows)
    return [
        Update(client=i, size=s, weights=one_key(v, c))
        for i, (v, s, c) in enumerate(zip(rows, sizes, counts, strict=True))
    ]


def aggregate(name: str, rows: Iterable[Update], **options) -> dict:
    strategy = load_strategy(name, options)
    weights, state = strategy.aggregate({}, rows, None, clients=10)
    assert state is None
    return weights


def arrivals(n: int) -> list[Arrival]:
    return [Arrival(client=i, size=1.0, extra=False) for i in range(n)]


# --- median ---------------------------------------------------------------------------------


def test_median_of_three_clients_is_the_middle_value_of_each_coordinate_whatever_the_sizes():
    rows = updates(
        [[1, 5, -2, 0], [3, 4, -1, 10], [2, 9, -3, -5]],
        sizes=[1, 1000, 1],  # a size-weighted anything would follow client 1
        counts=[7, 8, 9],
    )
    # sorted per coordinate: (1,2,3) (4,5,9) (-3,-2,-1) (-5,0,10)
    out = aggregate("median", rows)
    assert out["layer"]["w"].tolist() == [2, 5, -2, 0]
    assert out["layer"]["num_batches_tracked"].item() == 7  # the first update's count


def test_median_of_four_clients_is_the_mean_of_the_two_middle_values_as_numpy():
    rows = updates([[1, 0, 7], [4, 10, 8], [2, -6, 100], [8, 3, 9]])
    # sorted: (1,2,4,8) -> (2+4)/2 = 3; (-6,0,3,10) -> (0+3)/2 = 1.5; (7,8,9,100) -> 8.5
    # (torch.median would give the lower ones: 2, 0, 8; the mean would be 3.75, 1.75, 31)
    assert aggregate("median", rows)["layer"]["w"].tolist() == [3, 1.5, 8.5]


def test_median_keeps_half_precision_and_works_complex_numbers_part_by_part():
    rows = [
        Update(0, 1.0, {"n": {"h": torch.tensor([1.0, 8.0], dtype=torch.float16)}}),
        Update(1, 1.0, {"n": {"h": torch.tensor([3.0, 2.0], dtype=torch.float16)}}),
        Update(2, 1.0, {"n": {"h": torch.tensor([2.0, 4.0], dtype=torch.float16)}}),
    ]
    out = aggregate("median", rows)["n"]["h"]
    assert out.dtype == torch.float16 and out.tolist() == [2.0, 4.0]
    rows = [
        Update(0, 1.0, {"n": {"z": torch.tensor([1 + 9j])}}),
        Update(1, 1.0, {"n": {"z": torch.tensor([5 + 1j])}}),
        Update(2, 1.0, {"n": {"z": torch.tensor([3 + 4j])}}),
    ]
    # real parts (1,3,5) -> 3, imaginary parts (1,4,9) -> 4
    assert aggregate("median", rows)["n"]["z"].tolist() == [3 + 4j]


def test_a_client_sending_nan_is_an_extreme_for_the_median_not_a_poison():
    rows = updates([[1.0, 2.0], [float("nan"), float("nan")], [3.0, 6.0]])
    # sorted with NaN last: (1, 3, nan) -> 3; (2, 6, nan) -> 6
    assert aggregate("median", rows)["layer"]["w"].tolist() == [3.0, 6.0]


# --- trimmed mean ---------------------------------------------------------------------------


def test_trimmed_mean_with_beta_0_2_of_five_clients_drops_one_on_each_side():
    rows = updates(
        [[1, -10], [2, 0], [3, 1], [100, 5], [10, 50]],
        sizes=[1, 1, 1, 1, 1000],
        counts=[3, 1, 1, 1, 1],
    )
    # floor(0.2 * 5) = 1 dropped each side.
    # (1,2,3,10,100) -> (2+3+10)/3 = 5; (-10,0,1,5,50) -> (0+1+5)/3 = 2
    # (the median would be 3, 1; the plain mean 23.2, 9.2)
    out = aggregate("trimmed_mean", rows, beta=0.2)
    assert out["layer"]["w"].tolist() == [5, 2]
    assert out["layer"]["num_batches_tracked"].item() == 3


def test_trimmed_mean_reads_beta_as_the_decimal_written():
    # 0.29 * 100 is 28.999999999999996 in binary floats; 29 were meant
    assert trimmed_mean.trimmed(100, 0.29) == 29
    assert trimmed_mean.trimmed(5, 0.2) == 1
    assert trimmed_mean.trimmed(9, 0.1) == 0
    assert trimmed_mean.trimmed(10, 0.1) == 1


def test_trimmed_mean_refuses_a_round_of_which_nothing_would_remain():
    strategy = load_strategy("trimmed_mean", {"beta": 0.2})
    with pytest.raises(StrategyError, match=r"beta=0\.2.*n=0"):
        strategy.check([], clients=4)
    with pytest.raises(StrategyError, match=r"beta=0\.2.*n=0"):
        strategy.aggregate({}, iter([]), None, clients=4)
    strategy.check(arrivals(2), clients=4)  # floor(0.4) = 0 trimmed: both remain


@pytest.mark.parametrize(
    "beta", [0.5, 0.7, -0.1, float("nan"), "0.1", True, None], ids=lambda b: repr(b)
)
def test_trimmed_mean_refuses_a_beta_outside_0_to_one_half(beta):
    with pytest.raises(StrategyError) as refused:
        load_strategy("trimmed_mean", {"beta": beta})
    assert f"beta={beta!r}" in str(refused.value)


# --- Krum -----------------------------------------------------------------------------------

# Five clients in the plane, x in node "a", y in node "b" (so distances add up across keys):
#   client 0 (4,0)   client 1 (0,2)   client 2 (0,0)   client 3 (10,10)   client 4 (1,0)
# Squared distances:
#   d01 = 16+4 = 20   d02 = 16        d03 = 36+100 = 136   d04 = 9
#   d12 = 4           d13 = 100+64 = 164                   d14 = 1+4 = 5
#   d23 = 200         d24 = 1         d34 = 81+100 = 181
# With f = 1, each score sums the n - f - 2 = 2 nearest others:
#   client 0: (9, 16) -> 25    client 1: (4, 5) -> 9    client 2: (1, 4) -> 5
#   client 3: (136, 164) -> 300                         client 4: (1, 5) -> 6
# Krum keeps client 2; multi-Krum with m = 2 keeps clients 2 and 4.
# (Summing over all 4 others instead: 181, 193, 221, 681, 196: client 0 would win.)
PLANE = [(4, 0), (0, 2), (0, 0), (10, 10), (1, 0)]


def plane(sizes: list[float] | None = None) -> list[Update]:
    sizes = sizes or [1.0] * len(PLANE)
    return [
        Update(
            client=i,
            size=size,
            weights={
                "a": {"x": torch.tensor([float(x)]), "count": torch.tensor(100 + i)},
                "b": {"y": torch.tensor([float(y)])},
            },
        )
        for i, ((x, y), size) in enumerate(zip(PLANE, sizes, strict=True))
    ]


def point(export: dict) -> tuple[float, float]:
    return export["a"]["x"].item(), export["b"]["y"].item()


def test_krum_distances_are_summed_over_every_float_key_of_the_export():
    squared = krum.distances(plane())
    assert squared.dtype == torch.float64
    assert squared.tolist() == [
        [0, 20, 16, 136, 9],
        [20, 0, 4, 164, 5],
        [16, 4, 0, 200, 1],
        [136, 164, 200, 0, 181],
        [9, 5, 1, 181, 0],
    ]


def test_krum_keeps_the_client_with_the_lowest_score():
    out = aggregate("krum", plane(), f=1, m=1)
    assert point(out) == (0.0, 0.0)  # client 2
    assert out["a"]["count"].item() == 102  # the kept client's count


def test_multi_krum_averages_the_kept_clients_weighted_by_their_sizes():
    out = aggregate("krum", plane(sizes=[1, 1, 1, 1000, 3]), f=1, m=2)
    # clients 2 (0,0) size 1 and 4 (1,0) size 3: x = (0*1 + 1*3)/4 = 0.75, y = 0;
    # the Byzantine client 3 claims 1000 and is out all the same
    assert point(out) == (0.75, 0.0)
    assert out["a"]["count"].item() == 102  # the first kept update's count


def test_krum_breaks_a_tie_by_the_lower_client_id_whatever_the_order():
    # (0,0) and (1,0) and (0,1) with f=0: each sums its 1 nearest: 1, 1, 1 -> a three-way tie
    points = {5: (0.0, 0.0), 3: (1.0, 0.0), 9: (0.0, 1.0)}
    rows = [
        Update(c, 1.0, {"a": {"x": torch.tensor([x])}, "b": {"y": torch.tensor([y])}})
        for c, (x, y) in points.items()
    ]
    assert point(aggregate("krum", rows, f=0, m=1)) == (1.0, 0.0)  # client 3
    assert point(aggregate("krum", rows[::-1], f=0, m=1)) == (1.0, 0.0)


def test_krum_never_keeps_a_client_sending_nan():
    rows = plane()
    rows[2] = Update(
        2, 1.0, {k: {n: t.clone() for n, t in v.items()} for k, v in rows[2].weights.items()}
    )
    rows[2].weights["a"]["x"].fill_(float("nan"))
    # without client 2, the 2 nearest: client 0 (9, 20) -> 29, client 1 (5, 20) -> 25,
    # client 4 (5, 9) -> 14, client 3 (136, 164) -> 300: client 4 (1,0)
    assert point(aggregate("krum", rows, f=1, m=1)) == (1.0, 0.0)


def test_krum_refuses_a_round_smaller_than_2f_plus_3():
    strategy = load_strategy("krum", {"f": 1})
    strategy.check(arrivals(5), clients=5)
    with pytest.raises(StrategyError, match=r"f=1.*n=4"):
        strategy.check(arrivals(4), clients=5)
    with pytest.raises(StrategyError, match=r"f=1.*n=4"):
        strategy.aggregate({}, plane()[:4], None, clients=5)
    with pytest.raises(StrategyError, match=r"f=2.*n=5"):
        load_strategy("krum", {"f": 2}).check(arrivals(5), clients=5)


def test_krum_refuses_to_keep_more_than_n_minus_f():
    load_strategy("krum", {"f": 1, "m": 4}).check(arrivals(5), clients=5)
    with pytest.raises(StrategyError, match=r"m=5.*\[1, 4\].*n=5.*f=1"):
        load_strategy("krum", {"f": 1, "m": 5}).check(arrivals(5), clients=5)
    with pytest.raises(StrategyError, match=r"m=5"):
        load_strategy("krum", {"f": 1, "m": 5}).aggregate({}, plane(), None, clients=5)


@pytest.mark.parametrize(
    "options, named",
    [
        ({"f": -1}, "f=-1"),
        ({"f": 1.5}, "f=1.5"),
        ({"f": True}, "f=True"),
        ({"f": "1"}, "f='1'"),
        ({"m": 0}, "m=0"),
        ({"m": 2.0}, "m=2.0"),
        ({"m": -3}, "m=-3"),
    ],
)
def test_krum_refuses_bad_options_naming_them(options, named):
    with pytest.raises(StrategyError) as refused:
        load_strategy("krum", options)
    assert named in str(refused.value)


def test_unknown_options_are_refused_by_name():
    with pytest.raises(StrategyError, match="beta"):
        load_strategy("median", {"beta": 0.1})
    with pytest.raises(StrategyError, match="k"):
        load_strategy("krum", {"k": 1})


def test_krum_defaults_tolerate_one_byzantine_client_and_keep_one():
    strategy = load_strategy("krum")
    assert (strategy.f, strategy.m) == (1, 1)


# --- shared: the walk over keys ---------------------------------------------------------------


def test_load_strategy_finds_the_robust_strategies():
    assert isinstance(load_strategy("median"), median.Median)
    found = load_strategy("trimmed_mean", {"beta": 0.1})
    assert isinstance(found, trimmed_mean.TrimmedMean) and found.beta == 0.1
    found = load_strategy("krum", {"f": 1, "m": 2})
    assert isinstance(found, krum.Krum) and (found.f, found.m) == (1, 2)


@pytest.mark.parametrize("name", ["median", "trimmed_mean", "krum"])
def test_updates_that_are_not_the_same_network_are_refused_naming_node_key_shapes_clients(name):
    rows = [Update(c, 1.0, {"fc": {"weight": torch.zeros(2, 3)}}) for c in (10, 11, 12, 13, 14)]
    rows[3] = Update(13, 1.0, {"fc": {"weight": torch.zeros(3, 2)}})
    with pytest.raises(StrategyError) as refused:
        load_strategy(name, {"f": 0} if name == "krum" else {}).aggregate({}, rows, None, clients=5)
    message = str(refused.value)
    for part in ("'fc'", "'weight'", "(2, 3)", "(3, 2)", "client 10", "client 13"):
        assert part in message


def test_a_missing_key_or_node_is_refused_naming_it_and_the_clients():
    rows = [
        Update(c, 1.0, {"fc": {"weight": torch.zeros(2), "bias": torch.zeros(1)}})
        for c in (0, 1, 2)
    ]
    rows[2] = Update(2, 1.0, {"fc": {"weight": torch.zeros(2)}})
    with pytest.raises(StrategyError, match=r"'fc' key 'bias'.*client 0.*client 2"):
        load_strategy("median").aggregate({}, rows, None, clients=3)
    rows[2] = Update(2, 1.0, {"fc": rows[0].weights["fc"], "extra": {"w": torch.zeros(1)}})
    with pytest.raises(StrategyError, match=r"'extra'.*client 2"):
        load_strategy("median").aggregate({}, rows, None, clients=3)


def test_nothing_to_aggregate_is_refused():
    with pytest.raises(StrategyError, match="no client"):
        load_strategy("median").aggregate({}, iter([]), None, clients=3)


def test_counts_and_bools_keep_the_first_updates_value():
    rows = [
        Update(
            c,
            1.0,
            {
                "bn": {
                    "w": torch.tensor([float(c)]),
                    "n": torch.tensor(c + 5),
                    "on": torch.tensor(c == 0),
                }
            },
        )
        for c in range(5)
    ]
    for name in ("median", "trimmed_mean"):
        out = aggregate(name, rows)["bn"]
        assert out["n"].item() == 5 and out["n"].dtype == torch.int64
        assert out["on"].item() is True and out["on"].dtype == torch.bool
        assert out["w"].item() == 2.0  # (0,1,2,3,4): median 2, trimmed (1+2+3)/3 = 2


def test_results_never_alias_an_update():
    rows = updates([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    for name in ("median", "trimmed_mean"):
        out = aggregate(name, rows)["layer"]
        for key in ("w", "num_batches_tracked"):
            assert all(
                out[key].untyped_storage().data_ptr()
                != r.weights["layer"][key].untyped_storage().data_ptr()
                for r in rows
            )


def big_rows(n: int, numel: int) -> list[Update]:
    gen = torch.Generator().manual_seed(1)
    return [
        Update(
            c,
            float(c + 1),
            {
                "p": {
                    "w": torch.randn(numel, generator=gen) + c,
                    "b": torch.randn(3, generator=gen),
                },
                "q": {"w": torch.randn(7, 5, generator=gen)},
            },
        )
        for c in range(n)
    ]


def test_blocks_hold_at_most_block_numbers_across_the_clients(monkeypatch):
    monkeypatch.setattr(_columns, "BLOCK", 12)
    rows = big_rows(5, 23)
    seen = list(_columns.blocks(rows, "p", "w"))
    assert [where for where, _ in seen] == [
        slice(0, 2),
        *[slice(i, i + 2) for i in range(2, 22, 2)],
        slice(22, 23),
    ]
    assert all(stacked.numel() <= 12 and stacked.shape[0] == 5 for _, stacked in seen)


@pytest.mark.parametrize("name", ["median", "trimmed_mean", "krum"])
def test_small_blocks_give_the_same_result_as_one_block(name, monkeypatch):
    rows = big_rows(6, 1000)
    options = {"f": 1, "m": 2} if name == "krum" else {}
    whole = aggregate(name, rows, **options)
    monkeypatch.setattr(_columns, "BLOCK", 6 * 7)  # 7 numbers a client: keys cut unevenly
    cut = aggregate(name, rows, **options)
    for node, keys in whole.items():
        for key, tensor in keys.items():
            assert torch.equal(tensor, cut[node][key]), (node, key)


# --- robustness: one client sending garbage -------------------------------------------------


def honest_and_garbage(garbage, at: int) -> tuple[list[Update], dict]:
    """9 honest clients, a fixed vector plus noise of 0.01; one sends garbage of theirs."""
    gen = torch.Generator().manual_seed(7)
    truth = torch.randn(1000, generator=gen)  # |truth| ~ sqrt(1000) ~ 31.6
    honest = [truth + 0.01 * torch.randn(1000, generator=gen) for _ in range(9)]
    sent = honest[:at] + [garbage(honest[0].clone())] + honest[at:]

    def export(v: torch.Tensor) -> dict:
        return {
            "enc": {"weight": v[:600].reshape(20, 30).clone(), "bias": v[600:620].clone()},
            "head": {"weight": v[620:].clone(), "num_batches_tracked": torch.tensor(3)},
        }

    rows = [Update(c, 10.0, export(v)) for c, v in enumerate(sent)]
    return rows, export(torch.stack(honest).mean(0))


def distance(a: dict, b: dict) -> float:
    squared = sum(
        float((a[n][k].double() - b[n][k].double()).square().sum())
        for n in a
        for k in a[n]
        if a[n][k].is_floating_point()
    )
    return math.sqrt(squared)


GARBAGE = {
    "scaled by -100": lambda v: v * -100,
    "scaled by +1000": lambda v: v * 1000,
    "NaN": lambda v: v.fill_(float("nan")),
}
ROBUST = [
    ("median", {}),
    ("trimmed_mean", {"beta": 0.1}),
    ("krum", {"f": 1}),
    ("krum", {"f": 1, "m": 5}),
]


@pytest.mark.parametrize("at", [0, 4])
@pytest.mark.parametrize("garbage", sorted(GARBAGE))
def test_one_garbage_client_drags_fedavg_away_and_not_the_robust_ones(garbage, at):
    rows, honest_mean = honest_and_garbage(GARBAGE[garbage], at)
    # FedAvg: (9 honest + (-100 or 1000) x truth) / 10 is ~10 or ~100 truths away (~300 and
    # more), or NaN
    assert not distance(weighted_mean(rows), honest_mean) < 100
    # An honest client is 0.01 * sqrt(1000) ~ 0.3 from the honest mean, the robust ones less
    for name, options in ROBUST:
        got = distance(aggregate(name, rows, **options), honest_mean)
        assert got < 0.5, (name, options, got)


# --- with exports recalled lazily from the store --------------------------------------------


@pytest.mark.parametrize(
    "name, options", [("median", {}), ("trimmed_mean", {}), ("krum", {"f": 1, "m": 2})]
)
def test_exports_recalled_lazily_from_a_store_give_the_same_result(tmp_path, name, options):
    rows = big_rows(6, 500)
    store = soma.Store(tmp_path)
    digests = [store.put_value(row.weights) for row in rows]
    recalled = (
        Update(row.client, row.size, weights)
        for row, weights in zip(rows, store.recall_each_digest(digests, lazy=True), strict=True)
    )
    lazily = aggregate(name, recalled, **options)
    expected = aggregate(name, rows, **options)
    for node, keys in expected.items():
        for key, tensor in keys.items():
            assert torch.equal(tensor, lazily[node][key]), (node, key)
    # and the store's blobs were not written through
    for row, d in zip(rows, digests, strict=True):
        assert torch.equal(store.recall_digest(d)["p"]["w"], row.weights["p"]["w"])


# --- bucketing (option bucket of median, trimmed_mean, krum) ----------------------------------


def bound(name: str, round: int = 3, seed: int | None = 7, **options):
    """The strategy bound to a round and seed, as whoever aggregates binds it."""
    return at_round(load_strategy(name, options), round=round, seed=seed)


def test_the_shuffle_is_the_seed_and_the_rounds_and_nothing_else():
    one = _buckets.permutation(10, seed=7, round=3)
    assert sorted(one) == list(range(10))
    assert _buckets.permutation(10, seed=7, round=3) == one  # every host, every rerun
    others = {tuple(_buckets.permutation(10, seed=7, round=r)) for r in range(6)}
    assert len(others) == 6  # another round, another shuffle
    assert _buckets.permutation(10, seed=8, round=3) != one  # another run's seed
    assert _buckets.permutation(10, seed=None, round=3) == _buckets.permutation(10, seed=0, round=3)


def test_bucketed_median_by_hand_is_the_median_of_the_bucket_means():
    values = [0.0, 10.0, 20.0, 30.0, 100.0, -50.0]
    order = _buckets.permutation(6, seed=7, round=3)
    means = [(values[order[i]] + values[order[i + 1]]) / 2 for i in (0, 2, 4)]  # plain means
    out = bound("median", bucket=2).aggregate({}, updates([[v] for v in values]), None, clients=6)
    assert out[0]["layer"]["w"].tolist() == [sorted(means)[1]]


def test_bucketing_does_not_depend_on_the_order_the_clients_came_in():
    rows = updates([[float(v)] for v in [3, -1, 4, 1, -5, 9, 2]])
    for name, options in [("median", {}), ("trimmed_mean", {"beta": 0.25}), ("krum", {"f": 0})]:
        strategy = bound(name, bucket=2, **options)
        forward = strategy.aggregate({}, rows, None, clients=7)[0]
        backward = strategy.aggregate({}, rows[::-1], None, clients=7)[0]
        assert torch.equal(forward["layer"]["w"], backward["layer"]["w"]), name


def test_a_bucket_of_one_is_the_rule_without_bucketing_bit_for_bit():
    rows = big_rows(7, 300)
    for name, options in [("median", {}), ("trimmed_mean", {}), ("krum", {"f": 1, "m": 3})]:
        plain = aggregate(name, rows, **options)
        ones = bound(name, bucket=1, **options).aggregate({}, rows, None, clients=7)[0]
        assert all(torch.equal(plain[n][k], ones[n][k]) for n in plain for k in plain[n]), name


def test_bucketed_krum_by_hand_keeps_every_client_of_the_kept_bucket_weighted_by_size():
    # 6 clients, buckets of 2: 3 bucket means; f = 0 scores each by its 1 nearest other bucket
    values = [0.0, 1.0, 2.0, 3.0, 40.0, 60.0]
    sizes = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    order = _buckets.permutation(6, seed=7, round=3)
    buckets = [order[0:2], order[2:4], order[4:6]]
    means = [sum(values[i] for i in b) / 2 for b in buckets]
    nearest = [min((means[i] - means[j]) ** 2 for j in range(3) if j != i) for i in range(3)]
    kept = buckets[min(range(3), key=lambda i: (nearest[i], i))]
    wanted = sum(values[i] * sizes[i] for i in kept) / sum(sizes[i] for i in kept)
    rows = updates([[v] for v in values], sizes=sizes)
    out = bound("krum", bucket=2, f=0).aggregate({}, rows, None, clients=6)[0]
    assert out["layer"]["w"].tolist() == pytest.approx([wanted], rel=1e-6)


def test_bucketed_rules_count_buckets_in_their_checks():
    strategy = load_strategy("krum", {"f": 1, "bucket": 2})
    strategy.check(arrivals(10), clients=10)  # 5 buckets >= 2f + 3
    with pytest.raises(StrategyError, match="n=4"):
        strategy.check(arrivals(8), clients=8)  # 4 buckets


def test_bucketing_refuses_to_guess_the_round():
    with pytest.raises(StrategyError, match="at_round"):
        load_strategy("median", {"bucket": 2}).aggregate(
            {}, updates([[1.0], [2.0]]), None, clients=2
        )


@pytest.mark.parametrize("name", ["median", "trimmed_mean", "krum"])
@pytest.mark.parametrize("bucket", [0, 1.5, True, "2"])
def test_bucket_must_be_a_whole_number_of_clients(name, bucket):
    with pytest.raises(StrategyError, match="bucket"):
        load_strategy(name, {"bucket": bucket})


def test_one_sign_flipper_moves_the_median_by_a_rank_not_nothing():
    # 9 honest clients spread widely (non-IID), one sends -10x: the median moves by a rank
    honest = [[float(v)] for v in [-4, -3, -2, -1, 0, 1, 2, 3, 4]]
    rows = updates(honest + [[-10.0 * 4]])
    plain = aggregate("median", rows)["layer"]["w"].item()
    assert plain == -0.5  # between -1 and 0: shifted from the honest median 0 by half a rank


# --- centered clipping --------------------------------------------------------------------------


def two_d(x: float, y: float) -> dict:
    return {"a": {"w": torch.tensor([x, y], dtype=torch.float64), "n": torch.tensor(3)}}


def test_centered_clip_one_pass_by_hand():
    previous = two_d(0.0, 0.0)
    rows = [Update(0, 9.0, two_d(3.0, 4.0)), Update(1, 1.0, two_d(0.0, 1.0))]
    out, state = load_strategy("centered_clip", {"tau": 2.0}).aggregate(
        previous, iter(rows), None, clients=2
    )
    # (3, 4) has norm 5, clipped to 2: (1.2, 1.6); (0, 1) is within: unweighted mean
    assert out["a"]["w"].tolist() == pytest.approx([0.6, 1.3], rel=1e-12)
    assert state is None and out["a"]["n"].item() == 3


def test_centered_clip_two_passes_by_hand_recentre_on_the_first():
    previous = two_d(0.0, 0.0)
    rows = [Update(0, 1.0, two_d(3.0, 4.0)), Update(1, 1.0, two_d(0.0, 1.0))]
    out, _ = load_strategy("centered_clip", {"tau": 2.0, "iterations": 2}).aggregate(
        previous, rows, None, clients=2
    )
    v = (0.6, 1.3)
    a = (3.0 - v[0], 4.0 - v[1])  # norm sqrt(13.05) > 2: scaled by 2 / that
    b = (0.0 - v[0], 1.0 - v[1])  # norm sqrt(0.45) < 2: as it is
    s = 2.0 / math.sqrt(a[0] ** 2 + a[1] ** 2)
    wanted = [v[0] + (a[0] * s + b[0]) / 2, v[1] + (a[1] * s + b[1]) / 2]
    assert out["a"]["w"].tolist() == pytest.approx(wanted, rel=1e-12)


def test_centered_clip_bounds_a_garbage_client_and_drops_nan():
    previous = two_d(0.0, 0.0)
    honest = [Update(k, 1.0, two_d(0.1, 0.0)) for k in range(3)]
    for bad in (two_d(-1e6, 1e6), two_d(float("nan"), 0.0)):
        rows = [*honest, Update(3, 1.0, bad)]
        out, _ = load_strategy("centered_clip", {"tau": 1.0}).aggregate(
            previous, rows, None, clients=4
        )
        got = out["a"]["w"]
        assert torch.isfinite(got).all()
        # the honest 3 x 0.1 / 4, plus at most tau / 4 from the bad one
        assert float((got - torch.tensor([0.075, 0.0], dtype=torch.float64)).norm()) <= 0.25 + 1e-12


@pytest.mark.parametrize(
    "options", [{"tau": 0}, {"tau": float("nan")}, {"iterations": 0}, {"iterations": 1.5}]
)
def test_centered_clip_refuses_bad_options_by_name(options):
    with pytest.raises(StrategyError, match=next(iter(options))):
        load_strategy("centered_clip", options)


# --- the norm bound (option norm_bound of the mean strategies) -----------------------------------


def test_norm_bound_by_hand_clips_to_a_multiple_of_the_median_norm():
    previous = two_d(1.0, 1.0)
    rows = [
        Update(0, 1.0, two_d(2.0, 1.0)),  # update (1, 0): norm 1
        Update(1, 1.0, two_d(1.0, 3.0)),  # update (0, 2): norm 2, the median
        Update(2, 2.0, two_d(61.0, 81.0)),  # update (60, 80): norm 100 -> 1.5 x 2 = 3: (1.8, 2.4)
    ]
    out, _ = load_strategy("fedavg", {"norm_bound": 1.5}).aggregate(
        previous, iter(rows), None, clients=3
    )
    # size-weighted mean of (2, 1), (1, 3), (2.8, 3.4) x 2
    assert out["a"]["w"].tolist() == pytest.approx(
        [(2 + 1 + 5.6) / 4, (1 + 3 + 6.8) / 4], rel=1e-12
    )


def test_norm_bound_within_the_bound_is_the_strategy_bit_for_bit():
    previous = two_d(0.5, -0.5)
    rows = [Update(k, 1.0 + k, two_d(0.1 * k, 0.3 - k)) for k in range(5)]
    for name in ("fedavg", "fedadam", "fedavgm"):
        plain, s1 = load_strategy(name).aggregate(previous, iter(rows), None, clients=5)
        wide, s2 = load_strategy(name, {"norm_bound": 1e6}).aggregate(
            previous, iter(rows), None, clients=5
        )
        assert torch.equal(plain["a"]["w"], wide["a"]["w"]), name


def test_norm_bound_sends_the_start_for_an_update_that_is_not_finite():
    previous = two_d(1.0, 1.0)
    rows = [Update(0, 1.0, two_d(2.0, 1.0)), Update(1, 1.0, two_d(float("inf"), 1.0))]
    out, _ = load_strategy("fedavg", {"norm_bound": 1.0}).aggregate(
        previous, iter(rows), None, clients=2
    )
    assert out["a"]["w"].tolist() == [1.5, 1.0]  # mean of (2, 1) and the start (1, 1)


def test_norm_bound_needs_the_start_and_keeps_the_inner_strategys_hooks():
    from soma.strategies import has_client_side, needs_previous, takes_mean

    fedavg = load_strategy("fedavg", {"norm_bound": 2.0})
    assert needs_previous(fedavg) and not takes_mean(fedavg) and not has_client_side(fedavg)
    fedprox = load_strategy("fedprox", {"norm_bound": 2.0})
    assert has_client_side(fedprox)  # its proximal term is still there
    with pytest.raises(StrategyError, match="started from"):
        fedavg.aggregate(None, iter(updates([[1.0]])), None, clients=1)


def test_centered_clip_with_buckets_by_hand_clips_the_bucket_means():
    previous = two_d(0.0, 0.0)
    points = [(3.0, 4.0), (1.0, 0.0), (0.0, 1.0), (-8.0, 6.0)]
    rows = [Update(k, 1.0, two_d(*p)) for k, p in enumerate(points)]
    order = _buckets.permutation(4, seed=7, round=3)
    wanted = [0.0, 0.0]
    for bucket in (order[:2], order[2:]):
        mean = [sum(points[i][d] for i in bucket) / 2 for d in (0, 1)]
        scale = min(1.0, 1.5 / math.hypot(*mean))
        wanted = [w + m * scale / 2 for w, m in zip(wanted, mean, strict=True)]
    out, _ = bound("centered_clip", tau=1.5, bucket=2).aggregate(previous, rows, None, clients=4)
    assert out["a"]["w"].tolist() == pytest.approx(wanted, rel=1e-12)
