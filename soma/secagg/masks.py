"""Masks: a 32-byte seed stretched into as many ring elements as an export has values.

The generator (PRG) is AES-256-CTR keyed by the seed, counter from zero, encrypting zeros:
the keystream, read as little-endian ring elements (uint64 or uint32, so every element is
uniform in the ring). Each seed is used for one stream only: a self-mask seed b_u is drawn
fresh per session, and a pairwise seed s_uv comes out of HKDF with the session in its `info`.

A pairwise mask is added by one client of the pair and subtracted by the other, so it
cancels in the sum: client u adds `pairwise_sign(u, v) * PRG(s_uv)`, +1 when u < v and -1
when u > v. Whoever removes the masks of a client d that dropped out subtracts, for each
contributor u, `pairwise_sign(u, d) * PRG(s_ud)`: what u added.

`add` works in place on a flat accumulator, a chunk of the stream at a time, so a mask never
costs a second copy of the model.
"""

from __future__ import annotations

import numpy as np

from soma.secagg import crypto
from soma.secagg.errors import SecAggError

CHUNK_ELEMENTS = 1 << 18  # 2 MB of uint64 stream at a time


def pairwise_sign(mine: int, other: int) -> int:
    """+1 if `mine` adds the pair's mask, -1 if it subtracts it (the other one adds it)."""
    if mine == other:
        raise SecAggError(f"client {mine} has no pairwise mask with itself")
    return 1 if mine < other else -1


def expand(seed: bytes, count: int, dtype: type[np.unsignedinteger]) -> np.ndarray:
    """PRG(seed): `count` ring elements of `dtype`."""
    out = np.zeros(count, dtype=dtype)
    add(out, seed, 1)
    return out


def add(acc: np.ndarray, seed: bytes, sign: int) -> None:
    """acc += sign * PRG(seed), element by element, mod 2**bits of acc's dtype (in place)."""
    if acc.ndim != 1 or not acc.flags.c_contiguous or acc.dtype.kind != "u":
        raise SecAggError("a mask is added to a flat, contiguous array of ring elements")
    if sign not in (1, -1):
        raise SecAggError(f"a mask's sign is +1 or -1, not {sign!r}")
    stream = crypto.keystream(seed)
    width = acc.dtype.itemsize
    little = acc.dtype.newbyteorder("<")  # the same stream on every machine
    zeros = bytes(min(len(acc), CHUNK_ELEMENTS) * width)
    for start in range(0, len(acc), CHUNK_ELEMENTS):
        part = acc[start : start + CHUNK_ELEMENTS]
        mask = np.frombuffer(stream.update(zeros[: len(part) * width]), dtype=little)
        if sign > 0:
            np.add(part, mask, out=part)
        else:
            np.subtract(part, mask, out=part)
