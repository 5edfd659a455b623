"""Fixed point in a modular ring: what masks can be added to, and sums come back from exactly.

A value v becomes the integer round(v * 2**precision_bits) taken mod 2**ring_bits, an element
of Z/2^k (numpy uint64 for k = 64, uint32 for k = 32, whose + and - wrap around: the ring's
arithmetic for free, and well defined for unsigned integers). The sum of the elements mod 2^k
read back as a signed k-bit integer and divided by 2**precision_bits is the sum of the
rounded values, exactly, as long as the true sum stays inside (-2^(k-1), 2^(k-1)).

The overflow bound. With n parties each contributing at most `limit(n)` =
floor((2^(k-1) - 1) / n) in absolute value (after scaling and rounding), no sum of theirs can
leave the signed range, whatever the others contribute. Each party checks its own values
against it before anything is written (`encode`): a value with |v| * 2**precision_bits >
limit(n), a NaN or an infinity, is refused, naming where it is (the caller says: client, node,
key) and the largest |v| allowed (`max_value(n)`). n is the number of parties that *may*
contribute (a round's members), not those that will: the bound must hold before anyone knows
who drops out.

The precision. Each party's rounding is off by at most 2**-(precision_bits + 1) an element,
so a sum of n is within n * 2**-(precision_bits + 1) of the true sum of the (float64) values
(`error(n)`), plus float64's own rounding when the result is read back (a relative 2**-53).

Defaults: k = 64 and precision 24 bits (2**-24 ~ 6e-8, float32's own step near 1). Weighted
by sizes up to about a million examples, a weight of magnitude up to ~5000 fits for 100
parties: max_value(100) = 2**39 / 100 ~ 5.5e9 for size * weight. k = 32 halves the bytes of a
masked input but leaves 7 bits above a 24-bit precision: only for unweighted, small values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from soma.secagg.errors import BadInput, SecAggError

RINGS: dict[int, type[np.unsignedinteger]] = {32: np.uint32, 64: np.uint64}
_SIGNED = {32: np.int32, 64: np.int64}

DEFAULT_PRECISION_BITS = 24
DEFAULT_RING_BITS = 64


@dataclass(frozen=True)
class FixedPoint:
    """Values scaled by 2**precision_bits, in the ring of integers mod 2**ring_bits."""

    precision_bits: int = DEFAULT_PRECISION_BITS
    ring_bits: int = DEFAULT_RING_BITS

    def __post_init__(self) -> None:
        if self.ring_bits not in RINGS or isinstance(self.ring_bits, bool):
            raise SecAggError(f"ring_bits {self.ring_bits!r} must be one of {sorted(RINGS)}")
        p = self.precision_bits
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= self.ring_bits - 2:
            raise SecAggError(
                f"precision_bits {p!r} must be an integer in 0..{self.ring_bits - 2} "
                f"for a {self.ring_bits}-bit ring"
            )

    @property
    def dtype(self) -> type[np.unsignedinteger]:
        """The numpy dtype of one ring element."""
        return RINGS[self.ring_bits]

    @property
    def scale(self) -> float:
        return float(2**self.precision_bits)

    def limit(self, parties: int) -> int:
        """The largest |round(v * 2**precision_bits)| one of `parties` may contribute."""
        if isinstance(parties, bool) or not isinstance(parties, int) or parties < 1:
            raise SecAggError(f"parties {parties!r} must be an integer >= 1")
        limit = (2 ** (self.ring_bits - 1) - 1) // parties
        if limit < 1:
            raise SecAggError(
                f"a {self.ring_bits}-bit ring cannot hold a sum of {parties} parties' values"
            )
        return limit

    def max_value(self, parties: int) -> float:
        """The largest |v| one of `parties` may contribute (the overflow bound, as a value)."""
        return self.limit(parties) / self.scale

    def error(self, parties: int) -> float:
        """How far a sum of `parties` decoded values may be from the sum of the true values."""
        return parties * 2.0 ** -(self.precision_bits + 1)

    def encode(self, values: np.ndarray, parties: int, where: str) -> np.ndarray:
        """`values` (float64) as ring elements, refused if one of `parties` may not send them.

        `where` names them in a refusal (e.g. "client 3, node 'fc' key 'weight'").
        """
        values = np.asarray(values, dtype=np.float64)
        if values.size and not np.isfinite(values).all():
            bad = values.reshape(-1)[~np.isfinite(values.reshape(-1))][0]
            raise BadInput(f"{where}: {bad} is not a finite number; nothing can be summed with it")
        limit = self.limit(parties)
        scaled = values * self.scale  # exact: a power of two
        if values.size:
            largest = float(np.abs(scaled).max())
            if largest > limit:
                raise BadInput(
                    f"{where}: |{largest / self.scale:.6g}| is above the overflow bound "
                    f"{limit / self.scale:.6g} for {parties} parties in a {self.ring_bits}-bit "
                    f"ring at {self.precision_bits} bits of precision (|value| * 2**"
                    f"{self.precision_bits} * {parties} must stay below 2**{self.ring_bits - 1}"
                    "); scale it down, or use fewer bits of precision"
                )
        signed = np.rint(scaled).astype(_SIGNED[self.ring_bits])
        return signed.view(self.dtype)

    def decode(self, ring: np.ndarray) -> np.ndarray:
        """Ring elements read back as signed fixed point: float64 values."""
        ring = np.ascontiguousarray(ring, dtype=self.dtype)
        return ring.view(_SIGNED[self.ring_bits]).astype(np.float64) / self.scale
