"""Secure aggregation's refusals and pieces (soma/secagg): exports that cannot be summed are
refused before anything is written, naming client, node and key; the ring's overflow bound
and quantization; the session and the secrets; pairwise and self masks, the mask generator,
shares bound to their slot; soma imports without `cryptography`. The sum itself, the store's
scans and real processes are in tests/secagg/test_secagg.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from secagg_worker import export_of, size_of

from soma.secagg import (
    DEADLINE,
    BadInput,
    FixedPoint,
    SecAggError,
    Session,
    advertise,
    check_input,
    crypto,
    masks,
    secure_sum,
)
from soma.store import Store
from soma.timing import LEASE

HERE = Path(__file__).resolve().parents[1]
PREFIX = "run/round/0/secagg"
N = 5

# --- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change,match",
    [
        (
            lambda e: e["out"]["bias"].__setitem__(2, float("nan")),
            "client 1, node 'out' key 'bias'.*nan is not a finite",
        ),
        (
            lambda e: e["hidden"]["weight"].__setitem__((0, 0), float("inf")),
            "node 'hidden' key 'weight'.*inf is not",
        ),
        (
            lambda e: e["hidden"]["bias"].__setitem__(0, 1e12),
            "node 'hidden' key 'bias'.*above the overflow bound",
        ),
        (
            lambda e: e["out"].__setitem__("count", torch.tensor(3)),
            "node 'out' key 'count' is torch.int64",
        ),
    ],
)
def test_exports_that_cannot_be_summed_are_refused_by_name_before_anything_is_written(
    tmp_path, change, match
) -> None:
    export = export_of(1)
    change(export)
    with pytest.raises(BadInput, match=match):
        secure_sum(
            Store(tmp_path),
            PREFIX,
            export,
            size_of(1),
            mine=1,
            members=range(N),
            threshold=3,
            deadline=DEADLINE,
            lease=LEASE,
        )
    assert Store(tmp_path).bound() == []


def test_the_overflow_bound_is_the_ring_shared_among_the_members() -> None:
    fixed = FixedPoint(precision_bits=24, ring_bits=64)
    assert fixed.limit(5) == (2**63 - 1) // 5
    assert fixed.max_value(100) == pytest.approx(2**39 / 100)
    session = Session(PREFIX, tuple(range(N)), 3)
    export = export_of(0)
    with torch.no_grad():
        export["out"]["bias"][0] = fixed.max_value(N) / 2  # fine alone, too much times the size
    with pytest.raises(BadInput, match=r"client 0, node 'out' key 'bias' \(times its size 30\)"):
        check_input(session, 0, export, 30)
    with pytest.raises(BadInput, match="client 0's size"):
        check_input(session, 0, export_of(0), fixed.max_value(N) * 2)
    with pytest.raises(BadInput, match="client 0's size is -1"):
        check_input(session, 0, export_of(0), -1)


def test_sums_at_the_bound_never_wrap_and_come_back_exact() -> None:
    for ring in (32, 64):
        fixed = FixedPoint(precision_bits=8, ring_bits=ring)
        n = 7
        most = fixed.max_value(n)
        for sign in (1, -1):
            parts = [fixed.encode(np.array([sign * most, 0.5, -0.25]), n, "x") for _ in range(n)]
            total = parts[0].copy()
            for p in parts[1:]:
                total += p
            assert fixed.decode(total).tolist() == [sign * most * n, 3.5, -1.75]
        with pytest.raises(BadInput, match="above the overflow bound"):
            fixed.encode(np.array([most + 1]), n, "x")


def test_quantization_rounds_to_the_nearest_step() -> None:
    fixed = FixedPoint(precision_bits=4)
    values = np.array([0.03, -0.03, 1.0 / 3, -7.96875])
    back = fixed.decode(fixed.encode(values, 2, "x"))
    assert np.abs(back - values).max() <= fixed.error(1)
    # 0.03 * 16 = 0.48 -> 0; 16/3 = 5.33 -> 5; -127.5 is a tie, rounded to the even -128
    assert back.tolist() == [0.0, 0.0, 0.3125, -8.0]


def test_the_session_is_checked_and_a_client_with_another_is_refused(tmp_path) -> None:
    with pytest.raises(SecAggError, match="threshold 1 must be an integer in 2..5"):
        Session(PREFIX, tuple(range(5)), 1)
    with pytest.raises(SecAggError, match="at least 2 members"):
        Session(PREFIX, (0,), 1)
    with pytest.raises(SecAggError, match="sorted and distinct"):
        Session(PREFIX, (1, 0), 2)
    with pytest.raises(SecAggError, match="ring_bits 16"):
        Session(PREFIX, (0, 1), 2, ring_bits=16)
    store = Store(tmp_path)
    advertise(store, Session(PREFIX, tuple(range(5)), 3), 0)
    with pytest.raises(
        SecAggError, match="client 1 was given another session.*threshold 3 there, 4 here"
    ):
        advertise(store, Session(PREFIX, tuple(range(5)), 4), 1)
    with pytest.raises(SecAggError, match="client 7 is not one of its members"):
        advertise(store, Session(PREFIX, tuple(range(5)), 3), 7)
    with pytest.raises(SecAggError, match="keys.*already written"):
        advertise(store, Session(PREFIX, tuple(range(5)), 3), 0)  # a rerun draws new keys


def test_secrets_stay_in_memory(tmp_path) -> None:
    import pickle

    secrets = advertise(Store(tmp_path), Session(PREFIX, (0, 1), 2), 0)
    assert "Secrets(client 0" in repr(secrets) and secrets._b.hex() not in repr(secrets)
    with pytest.raises(TypeError, match="never pickled"):
        pickle.dumps(secrets)


# --- the pieces --------------------------------------------------------------------------------


def test_pairwise_masks_cancel_and_self_masks_do_not() -> None:
    seeds = {(a, b): os.urandom(32) for a in range(4) for b in range(a + 1, 4)}
    total = np.zeros(1000, dtype=np.uint64)
    for u in range(4):
        for v in range(4):
            if u != v:
                masks.add(total, seeds[min(u, v), max(u, v)], masks.pairwise_sign(u, v))
    assert not total.any()
    one = masks.expand(b"\x01" * 32, 1000, np.uint64)
    assert one.any() and (one == masks.expand(b"\x01" * 32, 1000, np.uint64)).all()
    assert (one != masks.expand(b"\x02" * 32, 1000, np.uint64)).mean() > 0.99
    # chunked or not, the same stream
    long = masks.expand(b"\x03" * 32, masks.CHUNK_ELEMENTS + 5, np.uint64)
    assert (long[:1000] == masks.expand(b"\x03" * 32, 1000, np.uint64)).all()


def test_the_mask_generator_is_aes_ctr_of_zeros() -> None:
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    seed = bytes(range(32))
    stream = Cipher(algorithms.AES(seed), modes.CTR(bytes(16))).encryptor().update(bytes(64))
    assert masks.expand(seed, 8, np.uint64).tobytes() == stream
    assert masks.expand(seed, 16, np.uint32).tobytes() == stream


def test_a_share_does_not_decrypt_for_another_slot_or_changed() -> None:
    key = os.urandom(32)
    sealed = crypto.seal(key, b"share", b"from 1 to 2")
    assert crypto.open_(key, sealed, b"from 1 to 2") == b"share"
    assert crypto.open_(key, sealed, b"from 1 to 3") is None
    assert crypto.open_(key, sealed[:-1] + bytes([sealed[-1] ^ 1]), b"from 1 to 2") is None
    assert crypto.open_(os.urandom(32), sealed, b"from 1 to 2") is None


@pytest.mark.slow
def test_soma_and_soma_secagg_import_without_cryptography(tmp_path) -> None:
    code = (
        "import sys\n"
        "sys.modules['cryptography'] = None\n"
        "import soma, soma.secagg\n"
        "from soma.secagg import Session, advertise, MissingCryptography, shamir\n"
        "from soma.store import Store\n"
        "assert shamir.combine(shamir.split(5, [1, 2], 2), 2) == 5\n"
        "try:\n"
        f"    advertise(Store({str(tmp_path)!r}), Session('p', (0, 1), 2), 0)\n"
        "except MissingCryptography as e:\n"
        "    print(e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(HERE.parent)),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'soma[privacy]'" in done.stdout
