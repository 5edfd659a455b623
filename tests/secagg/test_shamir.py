"""Shamir secret sharing (soma/secagg/shamir.py): known vectors, round trips, refusals."""

from __future__ import annotations

import itertools
import random

import pytest

from soma.secagg import shamir
from soma.secagg.errors import InconsistentShares, NotEnoughShares, SecAggError

# Wikipedia, "Shamir's secret sharing", the worked example over GF(1613):
# f(x) = 1234 + 166 x + 94 x^2, threshold 3, six shares.
WIKI_PRIME = 1613
WIKI_COEFFICIENTS = [1234, 166, 94]
WIKI_SHARES = {1: 1494, 2: 329, 3: 965, 4: 176, 5: 1188, 6: 775}


def test_the_worked_example_by_hand_over_gf7() -> None:
    """f(x) = 3 + 2x over GF(7): f(1) = 5, f(2) = 7 = 0, f(3) = 9 = 2. From (1, 5) and (2, 0):
    l1(0) = (0-2)/(1-2) = 2, l2(0) = (0-1)/(2-1) = -1 = 6, so f(0) = 2*5 + 6*0 = 10 = 3."""
    assert [shamir.evaluate([3, 2], x, 7) for x in (1, 2, 3)] == [5, 0, 2]
    assert shamir.lagrange([1, 2], 0, 7) == [2, 6]
    assert shamir.combine({1: 5, 2: 0}, 2, prime=7) == 3
    assert shamir.combine({2: 0, 3: 2}, 2, prime=7) == 3
    assert shamir.combine({1: 5, 2: 0, 3: 2}, 2, prime=7) == 3


def test_the_wikipedia_vector_shares_and_every_three_of_them_give_the_secret() -> None:
    shares = {x: shamir.evaluate(WIKI_COEFFICIENTS, x, WIKI_PRIME) for x in range(1, 7)}
    assert shares == WIKI_SHARES
    for chosen in itertools.combinations(WIKI_SHARES.items(), 3):
        assert shamir.combine(chosen, 3, prime=WIKI_PRIME) == 1234
    assert shamir.combine(WIKI_SHARES, 3, prime=WIKI_PRIME) == 1234  # all six, all checked


def test_split_with_given_coefficients_is_the_known_polynomial() -> None:
    """`split` draws the coefficients after the secret: the same draws give Wikipedia's shares."""
    draws = iter(WIKI_COEFFICIENTS[1:])
    shares = shamir.split(1234, range(1, 7), 3, prime=WIKI_PRIME, randbelow=lambda p: next(draws))
    assert shares == WIKI_SHARES


def test_a_known_vector_in_the_521_bit_field() -> None:
    """f(x) = s + x + x^2 with s = 2**256 - 1 (the largest 32-byte secret), so f(1..3) are
    s + 2, s + 6 and s + 12: no reduction, checkable by hand."""
    s = 2**256 - 1
    draws = iter([1, 1])
    shares = shamir.split(s, [1, 2, 3], 3, randbelow=lambda p: next(draws))
    assert shares == {1: s + 2, 2: s + 6, 3: s + 12}
    assert shamir.combine(shares, 3) == s
    assert shamir.to_bytes(shamir.combine(shares, 3)) == b"\xff" * 32
    assert shamir.PRIME == 2**521 - 1


@pytest.mark.parametrize("threshold,count", [(1, 1), (2, 2), (2, 5), (3, 5), (5, 5), (51, 100)])
def test_random_round_trips_from_any_threshold_of_the_shares(threshold: int, count: int) -> None:
    rng = random.Random(threshold * 1000 + count)
    for _ in range(5):
        secret = shamir.from_bytes(rng.randbytes(32))
        xs = rng.sample(range(1, 10_000), count)
        shares = shamir.split(secret, xs, threshold)
        chosen = rng.sample(sorted(shares.items()), threshold)
        assert shamir.combine(chosen, threshold) == secret
        assert shamir.combine(shares, threshold) == secret


def test_fewer_shares_than_the_threshold_are_refused_saying_how_many() -> None:
    shares = shamir.split(42, [1, 2, 3, 4, 5], 3)
    with pytest.raises(NotEnoughShares, match="2 shares, 3 needed") as caught:
        shamir.combine(list(shares.items())[:2], 3)
    assert (caught.value.have, caught.value.need) == (2, 3)


def test_below_the_threshold_the_shares_fit_every_secret() -> None:
    """t - 1 shares say nothing: for every candidate secret there is a polynomial of degree
    t - 1 through them (over GF(7), each of the 7 secrets, with the two shares fixed)."""
    shares = {1: 5, 2: 0}  # two shares of a threshold-3 sharing
    for secret in range(7):
        fits = [
            (a, b)
            for a in range(7)
            for b in range(7)
            if all(shamir.evaluate([secret, a, b], x, 7) == y for x, y in shares.items())
        ]
        assert len(fits) == 1


def test_a_changed_share_is_caught_when_there_are_more_than_the_threshold() -> None:
    shares = dict(WIKI_SHARES)
    shares[5] = (shares[5] + 1) % WIKI_PRIME
    with pytest.raises(InconsistentShares, match="x = 5"):
        shamir.combine(shares, 3, prime=WIKI_PRIME)


def test_bad_shares_are_refused() -> None:
    with pytest.raises(SecAggError, match="two shares for x = 2"):
        shamir.combine([(2, 1), (2, 1), (3, 1)], 2, prime=7)
    with pytest.raises(SecAggError, match="0 is the secret"):
        shamir.combine([(0, 1), (1, 1)], 2, prime=7)
    with pytest.raises(SecAggError, match="0 is the secret"):
        shamir.split(1, [0, 1], 2, prime=7)
    with pytest.raises(SecAggError, match="more than the 2 shares"):
        shamir.split(1, [1, 2], 3, prime=7)
    with pytest.raises(SecAggError, match="secret must be an integer"):
        shamir.split(7, [1, 2], 2, prime=7)


def test_secrets_as_bytes_round_trip_and_a_too_large_value_is_no_secret() -> None:
    raw = bytes(range(32))
    assert shamir.to_bytes(shamir.from_bytes(raw)) == raw
    assert shamir.to_bytes(shamir.from_bytes(bytes(32))) == bytes(32)  # leading zeros kept
    with pytest.raises(InconsistentShares, match="not a 32-byte secret"):
        shamir.to_bytes(2**256)
    with pytest.raises(SecAggError):
        shamir.from_bytes(b"short")
