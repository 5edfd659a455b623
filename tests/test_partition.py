"""soma.partition: every scheme covers each example exactly once, deterministically, none empty."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soma.partition import SCHEMES, PartitionError, check, partition

# Ten classes of uneven sizes, shuffled: like the digits' training labels, but cheap.
LABELS = np.random.default_rng(7).permutation(np.repeat(np.arange(10), np.arange(20, 120, 10)))

CASES = [
    ("iid", {}),
    ("dirichlet", {"alpha": 0.05}),
    ("dirichlet", {"alpha": 0.5}),
    ("dirichlet", {"alpha": 1000.0}),
    ("quantity", {"alpha": 0.5}),
    ("labels_per_client", {"labels_per_client": 1}),
    ("labels_per_client", {"labels_per_client": 2}),
    ("labels_per_client", {"labels_per_client": 3}),
    ("labels_per_client", {"labels_per_client": 10}),
]


def assert_disjoint_cover(parts: list[np.ndarray], n: int) -> None:
    everything = np.concatenate(parts)
    assert len(everything) == n, "some example is missing or held twice"
    assert np.array_equal(np.sort(everything), np.arange(n))
    for part in parts:
        assert len(part) > 0, "a client is empty"
        assert part.dtype == np.int64
        assert np.all(np.diff(part) > 0), "a client's rows are not sorted and distinct"


def _feasible(scheme: str, params: dict, clients: int) -> bool:
    """labels_per_client refuses too few holders of a label, or more than its examples."""
    if scheme != "labels_per_client":
        return True
    holders = clients * params["labels_per_client"]
    return holders >= 10 and -(-holders // 10) <= 20


@pytest.mark.parametrize(
    ("scheme", "params", "clients"),
    [(s, p, c) for s, p in CASES for c in (1, 3, 10, 37) if _feasible(s, p, c)],
)
def test_every_example_is_held_by_exactly_one_client(scheme, params, clients):
    parts = partition(LABELS, clients, scheme, seed=3, **params)
    assert len(parts) == clients
    assert_disjoint_cover(parts, len(LABELS))


@pytest.mark.parametrize(("scheme", "params"), CASES)
def test_the_same_seed_gives_the_same_partition(scheme, params):
    first = partition(LABELS, 10, scheme, seed=11, **params)
    again = partition(LABELS.copy(), 10, scheme, seed=11, **params)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    other = partition(LABELS, 10, scheme, seed=12, **params)
    assert any(not np.array_equal(a, b) for a, b in zip(first, other, strict=True))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 10])
def test_labels_per_client_gives_each_client_exactly_n_labels(n):
    clients = 10
    parts = partition(LABELS, clients, "labels_per_client", labels_per_client=n, seed=5)
    held = [set(LABELS[part].tolist()) for part in parts]
    assert all(len(labels) == n for labels in held)
    assert set().union(*held) == set(range(10))
    # Ten clients x n labels: every label is held by exactly n clients, in equal shares.
    for label in range(10):
        holders = [k for k in range(clients) if label in held[k]]
        assert len(holders) == n
        counts = [int(np.sum(LABELS[parts[k]] == label)) for k in holders]
        assert max(counts) - min(counts) <= 1


def test_ten_clients_with_two_labels_each_cover_every_digit_twice():
    parts = partition(LABELS, 10, "labels_per_client", labels_per_client=2, seed=0)
    holders = np.zeros(10, dtype=int)
    for part in parts:
        holders[np.unique(LABELS[part])] += 1
    assert holders.tolist() == [2] * 10


def class_shares(parts: list[np.ndarray]) -> np.ndarray:
    """clients x classes: each client's fraction of its examples in each class."""
    counts = np.array([np.bincount(LABELS[part], minlength=10) for part in parts])
    return counts / counts.sum(axis=1, keepdims=True)


def distance_from_overall(parts: list[np.ndarray]) -> float:
    """The mean over clients of the total variation between its classes and everyone's."""
    overall = np.bincount(LABELS, minlength=10) / len(LABELS)
    return float(np.mean(0.5 * np.abs(class_shares(parts) - overall).sum(axis=1)))


def test_dirichlet_with_small_alpha_is_skewed_and_with_large_alpha_near_iid():
    skewed = class_shares(partition(LABELS, 10, "dirichlet", alpha=0.05, seed=1))
    assert np.mean(skewed.max(axis=1)) > 0.6, "alpha=0.05 should give dominant classes"
    assert np.mean(np.sum(skewed > 0, axis=1)) < 5, "alpha=0.05 should leave classes out"
    assert distance_from_overall(partition(LABELS, 10, "dirichlet", alpha=0.05, seed=1)) > 0.5
    even = partition(LABELS, 10, "dirichlet", alpha=1000.0, seed=1)
    assert np.all(class_shares(even) > 0)
    iid = partition(LABELS, 10, "iid", seed=1)
    assert distance_from_overall(even) < 0.1
    assert distance_from_overall(iid) < 0.2


def test_iid_sizes_differ_by_at_most_one():
    sizes = [len(p) for p in partition(LABELS, 7, "iid", seed=0)]
    assert max(sizes) - min(sizes) <= 1


def test_dirichlet_never_leaves_a_client_empty():
    # Tiny alpha and as many clients as examples: most draws leave clients empty.
    labels = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
    for seed in range(20):
        parts = partition(labels, 10, "dirichlet", alpha=0.01, seed=seed)
        assert_disjoint_cover(parts, len(labels))
        assert all(len(part) == 1 for part in parts)
    parts = partition(LABELS, 60, "dirichlet", alpha=0.01, seed=2)
    assert_disjoint_cover(parts, len(LABELS))


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"scheme": "shards"}, "partition 'shards' is unknown"),
        ({"scheme": "dirichlet", "alpha": 0}, "alpha"),
        ({"scheme": "dirichlet", "alpha": -1.0}, "alpha"),
        ({"scheme": "dirichlet", "alpha": float("nan")}, "alpha"),
        ({"scheme": "dirichlet", "alpha": "0.5"}, "alpha"),
        ({"scheme": "dirichlet", "alpha": True}, "alpha"),
        ({"scheme": "labels_per_client", "labels_per_client": 0}, "labels_per_client"),
        ({"scheme": "labels_per_client", "labels_per_client": 2.0}, "labels_per_client"),
        ({"scheme": "labels_per_client", "labels_per_client": 11}, "labels_per_client=11"),
        ({"scheme": "labels_per_client", "labels_per_client": 3, "clients": 3}, "clients"),
        ({"scheme": "iid", "clients": 0}, "clients"),
        ({"scheme": "iid", "clients": len(LABELS) + 1}, "clients"),
        ({"scheme": "iid", "clients": 2.5}, "clients"),
        ({"scheme": "iid", "seed": -1}, "seed"),
    ],
)
def test_bad_options_are_refused_by_name(kwargs, named):
    kwargs = {"clients": 10, **kwargs}
    with pytest.raises(PartitionError, match=named):
        partition(LABELS, **kwargs)


def test_options_are_checked_without_data():
    check("labels_per_client", labels_per_client=10, classes=10)
    with pytest.raises(PartitionError, match="labels_per_client=11"):
        check("labels_per_client", labels_per_client=11, classes=10)
    with pytest.raises(PartitionError, match="iid, dirichlet, labels_per_client, quantity"):
        check("IID")
    assert SCHEMES == ("iid", "dirichlet", "labels_per_client", "quantity")


@settings(max_examples=60, deadline=None)
@given(
    classes=st.integers(1, 10),
    examples=st.integers(1, 120),
    clients=st.integers(1, 40),
    scheme=st.sampled_from(SCHEMES),
    alpha=st.floats(0.01, 100.0),
    labels_per_client=st.integers(1, 10),
    seed=st.integers(0, 2**32),
    data_seed=st.integers(0, 1000),
)
def test_property_disjoint_cover(
    classes, examples, clients, scheme, alpha, labels_per_client, seed, data_seed
):
    labels = np.random.default_rng(data_seed).integers(0, classes, size=examples)
    present = len(np.unique(labels))
    try:
        parts = partition(
            labels,
            clients,
            scheme,
            alpha=alpha,
            labels_per_client=labels_per_client,
            seed=seed,
        )
    except PartitionError as error:
        # Refused only when the request cannot be met, and saying why.
        message = str(error)
        counts = np.bincount(labels)[np.unique(labels)]
        reasons = []
        if clients > examples:
            reasons.append("examples: some would be empty")
        if scheme == "labels_per_client":
            if labels_per_client > present:
                reasons.append(f"more than the {present} classes")
            elif clients * labels_per_client < present:
                reasons.append("would belong to no client")
            elif counts.min() < -(-clients * labels_per_client // present):
                reasons.append("too many clients")
        assert reasons, f"refused a request that can be met: {message}"
        assert any(reason in message for reason in reasons), message
        return
    assert len(parts) == clients
    assert_disjoint_cover(parts, examples)
    if scheme == "labels_per_client":
        assert all(len(np.unique(labels[part])) == labels_per_client for part in parts)


def test_quantity_skew_gives_unequal_sizes_with_labels_spread_alike():
    skewed = sorted(len(p) for p in partition(LABELS, 10, "quantity", alpha=0.5, seed=1))
    even = sorted(len(p) for p in partition(LABELS, 10, "quantity", alpha=1000.0, seed=1))
    assert skewed[-1] > 4 * skewed[0] and even[-1] < 1.3 * even[0]
    parts = partition(LABELS, 10, "quantity", alpha=0.5, seed=1)
    assert distance_from_overall(parts) < distance_from_overall(
        partition(LABELS, 10, "dirichlet", alpha=0.5, seed=1)
    )


def test_a_client_below_min_size_is_refused_naming_it_and_the_option():
    labels = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
    refused = r"client \d+ would hold 1 example, fewer than min_size=2"
    with pytest.raises(PartitionError, match=refused):
        partition(labels, 10, "dirichlet", alpha=0.01, seed=0, min_size=2)
    with pytest.raises(PartitionError, match="min_size must be"):
        partition(labels, 2, "iid", min_size=0)
    assert all(len(p) >= 5 for p in partition(labels, 2, "iid", min_size=5))
