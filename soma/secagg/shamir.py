"""Shamir secret sharing over a prime field: `split` a secret into shares, `combine` them back.

A secret s is the constant term of a random polynomial f of degree t - 1 over GF(p); the
share for x (x != 0) is (x, f(x)). Any t shares give f(0) = s by Lagrange interpolation;
t - 1 shares say nothing about s (every secret is as likely). Pure Python integers.

The field: p = 2**521 - 1, the Mersenne prime M521, so that any 32-byte secret (an X25519
private key, a 256-bit mask seed) is one field element (`from_bytes`/`to_bytes`), and a
share is at most 66 bytes. Every function takes `prime=` for the tests' small known vectors.

`combine` refuses fewer shares than the threshold (`NotEnoughShares`: how many it has, how
many it needs), two shares for one x, and x = 0. Given more than t shares, it rebuilds f from
the first t and checks that every other share lies on it (`InconsistentShares` names the x
that does not): a share changed in transit, or mixed up with another secret's, is caught
instead of silently giving a wrong secret. `Combiner` does the same for many secrets shared
among the same x's (the Lagrange coefficients are computed once).

The coefficients are drawn with `secrets.randbelow` (the OS's CSPRNG); pass `randbelow=` to
make a test deterministic, never in use.
"""

from __future__ import annotations

import secrets as _secrets
from collections.abc import Callable, Iterable, Mapping, Sequence

from soma.secagg.errors import InconsistentShares, NotEnoughShares, SecAggError

PRIME = (1 << 521) - 1
SECRET_BYTES = 32

__all__ = [
    "PRIME",
    "SECRET_BYTES",
    "Combiner",
    "combine",
    "evaluate",
    "from_bytes",
    "lagrange",
    "split",
    "to_bytes",
]


def _check_prime(prime: int) -> None:
    if not isinstance(prime, int) or prime < 3:
        raise SecAggError(f"the field's prime must be an integer >= 3, not {prime!r}")


def _check_xs(xs: Sequence[int], prime: int) -> None:
    seen: set[int] = set()
    for x in xs:
        if isinstance(x, bool) or not isinstance(x, int) or not 0 < x < prime:
            raise SecAggError(f"share x {x!r} must be an integer in 1..prime-1 (0 is the secret)")
        if x in seen:
            raise SecAggError(f"two shares for x = {x}")
        seen.add(x)


def evaluate(coefficients: Sequence[int], x: int, prime: int = PRIME) -> int:
    """f(x) mod prime for f = coefficients[0] + coefficients[1] x + ... (Horner)."""
    value = 0
    for c in reversed(coefficients):
        value = (value * x + c) % prime
    return value


def split(
    secret: int,
    xs: Iterable[int],
    threshold: int,
    *,
    prime: int = PRIME,
    randbelow: Callable[[int], int] = _secrets.randbelow,
) -> dict[int, int]:
    """Shares of `secret` for each x in `xs`: {x: f(x)}; any `threshold` of them rebuild it."""
    _check_prime(prime)
    xs = list(xs)
    _check_xs(xs, prime)
    if isinstance(secret, bool) or not isinstance(secret, int) or not 0 <= secret < prime:
        raise SecAggError(f"a secret must be an integer in 0..prime-1, not {secret!r}")
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
        raise SecAggError(f"threshold {threshold!r} must be an integer >= 1")
    if threshold > len(xs):
        raise SecAggError(f"threshold {threshold} is more than the {len(xs)} shares asked for")
    coefficients = [secret] + [randbelow(prime) for _ in range(threshold - 1)]
    return {x: evaluate(coefficients, x, prime) for x in xs}


def lagrange(xs: Sequence[int], at: int, prime: int = PRIME) -> list[int]:
    """The Lagrange coefficients l_i(at) for the points xs: f(at) = sum l_i(at) f(xs[i])."""
    coefficients = []
    for i, xi in enumerate(xs):
        numerator, denominator = 1, 1
        for j, xj in enumerate(xs):
            if j != i:
                numerator = numerator * (at - xj) % prime
                denominator = denominator * (xi - xj) % prime
        coefficients.append(numerator * pow(denominator, -1, prime) % prime)
    return coefficients


class Combiner:
    """Rebuild secrets shared among the same x's: the coefficients once, then O(n) a secret.

    `xs` are the x's of the shares that will be handed to `secret`, in that order; fewer than
    `threshold` of them is refused at once (`NotEnoughShares`). `what` names them in errors.
    """

    def __init__(
        self, xs: Sequence[int], threshold: int, *, prime: int = PRIME, what: str = "a secret"
    ) -> None:
        _check_prime(prime)
        self.xs = list(xs)
        _check_xs(self.xs, prime)
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
            raise SecAggError(f"threshold {threshold!r} must be an integer >= 1")
        if len(self.xs) < threshold:
            raise NotEnoughShares(
                f"cannot rebuild {what}: {len(self.xs)} share{'s' if len(self.xs) != 1 else ''}, "
                f"{threshold} needed (the threshold)",
                have=len(self.xs),
                need=threshold,
            )
        self.prime, self.threshold, self.what = prime, threshold, what
        base = self.xs[:threshold]
        self._at_zero = lagrange(base, 0, prime)
        # each extra share must equal f(x) as the first `threshold` define it
        self._checks = [(x, lagrange(base, x, prime)) for x in self.xs[threshold:]]

    def secret(self, ys: Sequence[int], what: str | None = None) -> int:
        """f(0) from the shares' values `ys` (in the order of `xs`), every extra one checked."""
        what = what or self.what
        if len(ys) != len(self.xs):
            raise SecAggError(f"{what}: {len(ys)} share values for {len(self.xs)} x's")
        p = self.prime
        for y in ys:
            if isinstance(y, bool) or not isinstance(y, int) or not 0 <= y < p:
                raise SecAggError(f"{what}: a share value must be an integer in 0..prime-1")
        base = ys[: self.threshold]
        for index, (x, coefficients) in enumerate(self._checks, start=self.threshold):
            if sum(c * y for c, y in zip(coefficients, base, strict=True)) % p != ys[index]:
                raise InconsistentShares(
                    f"{what}: the share for x = {x} does not lie on the polynomial the first "
                    f"{self.threshold} shares define (changed, or another secret's)"
                )
        return sum(c * y for c, y in zip(self._at_zero, base, strict=True)) % p


def combine(
    shares: Mapping[int, int] | Iterable[tuple[int, int]],
    threshold: int,
    *,
    prime: int = PRIME,
    what: str = "a secret",
) -> int:
    """The secret from at least `threshold` shares ({x: y} or (x, y) pairs), all checked."""
    pairs = list(shares.items() if isinstance(shares, Mapping) else shares)
    combiner = Combiner([x for x, _ in pairs], threshold, prime=prime, what=what)
    return combiner.secret([y for _, y in pairs])


def from_bytes(secret: bytes) -> int:
    """A SECRET_BYTES-byte secret as a field element (big-endian)."""
    if not isinstance(secret, bytes | bytearray) or len(secret) != SECRET_BYTES:
        raise SecAggError(f"a secret is {SECRET_BYTES} bytes, not {secret!r:.40}")
    return int.from_bytes(secret, "big")


def to_bytes(value: int, what: str = "a secret") -> bytes:
    """The SECRET_BYTES-byte secret a field element stands for; refused if it is too large
    (the shares that gave it were not shares of such a secret)."""
    if not 0 <= value < 1 << (8 * SECRET_BYTES):
        raise InconsistentShares(
            f"{what}: the shares rebuild a value of {value.bit_length()} bits, "
            f"not a {SECRET_BYTES}-byte secret (they are not shares of one)"
        )
    return value.to_bytes(SECRET_BYTES, "big")
