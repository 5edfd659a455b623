"""The crypto the phases apply: the pairwise key agreements, a share's encoding and binding,
and adding and taking off the masks.

Kept apart from the phases so that each step is one function, looked up here at call time
(`masking.add_self_mask(...)`): tests/secagg/mutants_secagg.py breaks them one at a time.
The shares' encryption itself is soma.secagg.crypto's `seal` and `open_`, called as such.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from soma.secagg import crypto, masks, shamir
from soma.secagg.session import Secrets, Session


def share_key(private: Any, peer: bytes, session: Session, a: int, b: int) -> bytes:
    info = crypto.label("share-key", session.prefix, min(a, b), max(a, b))
    return crypto.agree(private, peer, info, whose=f"client {b}")


def pair_seed(private: Any, peer: bytes, session: Session, a: int, b: int) -> bytes:
    info = crypto.label("mask", session.prefix, min(a, b), max(a, b))
    return crypto.agree(private, peer, info, whose=f"client {b}")


def share_binding(session: Session, sender: int, recipient: int) -> bytes:
    return crypto.label("share", session.prefix, sender, recipient)


SHARE_BYTES = (shamir.PRIME.bit_length() + 7) // 8  # 66: one field element


def share_bytes(value: int) -> bytes:
    return value.to_bytes(SHARE_BYTES, "big")


def add_self_mask(flat: np.ndarray, secrets: Secrets) -> None:
    masks.add(flat, secrets._b, 1)


def add_pairwise_masks(
    flat: np.ndarray, secrets: Secrets, keys: Mapping[int, dict], sharers: Iterable[int]
) -> None:
    for v in sharers:
        if v != secrets.mine:
            seed = pair_seed(secrets._s, keys[v]["s"], secrets.session, secrets.mine, v)
            masks.add(flat, seed, masks.pairwise_sign(secrets.mine, v))


def remove_self_masks(acc: np.ndarray, seeds: Iterable[bytes]) -> None:
    for seed in seeds:
        masks.add(acc, seed, -1)


def remove_dropped_masks(
    acc: np.ndarray,
    session: Session,
    dropped: Mapping[int, Any],
    keys: Mapping[int, dict],
    contributors: Iterable[int],
) -> None:
    """Take off what each contributor u added for its pair with each dropped client d."""
    contributors = list(contributors)
    for d, private in dropped.items():
        for u in contributors:
            seed = pair_seed(private, keys[u]["s"], session, d, u)
            masks.add(acc, seed, -masks.pairwise_sign(u, d))
