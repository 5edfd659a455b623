"""soma.arithmetic's machine-independent steps: what they compute, in process (the same bits
under every capability is tests/test_capabilities.py's, which starts processes)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from soma.arithmetic import add_scaled, lerp, mean_of_rows, row_sums_of_squares, sum_of_squares


def _floats(n: int, seed: int, dtype=np.float32) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(n).astype(dtype))


@pytest.mark.parametrize("n", [0, 1, 7, 40_000, 100_003])  # across and within chunks
def test_lerp_is_torchs_lerp_up_to_its_rounding(n):
    a, b = _floats(n, 1), _floats(n, 2)
    for w in (0.0, 0.1, 0.3, 0.5, 0.77, 1.0):
        got = lerp(a, b, w)
        torch.testing.assert_close(got, torch.lerp(a, b, w), rtol=1e-6, atol=1e-6)


def test_lerp_gives_its_ends_and_equal_inputs_exactly():
    a, b = _floats(5000, 1), _floats(5000, 2)
    assert torch.equal(lerp(a, b, 0.0), a)
    assert torch.equal(lerp(a, b, 1.0), b)  # the two-sided form: FedOpt at lr 1 is FedAvg
    assert torch.equal(lerp(a, a.clone(), 0.37), a)


def test_lerp_is_single_operations_in_the_order_written():
    """start + w (end - start) below 0.5, end - (1 - w)(end - start) from 0.5: each a single
    correctly rounded step, which numpy's float64 then rounded to float32 cannot be, so the
    reference is written with the same float32 steps."""
    a, b = _floats(70_000, 3), _floats(70_000, 4)
    d = b.numpy() - a.numpy()
    low = a.numpy() + d * np.float32(0.3)
    high = b.numpy() - d * np.float32(1.0 - 0.8)
    assert np.array_equal(lerp(a, b, 0.3).numpy(), low)
    assert np.array_equal(lerp(a, b, 0.8).numpy(), high)


def test_lerp_in_place_and_into_a_new_tensor_agree():
    a, b = _floats(50_000, 5), _floats(50_000, 6)
    fresh = lerp(a, b, 0.25)
    same = a.clone()
    assert lerp(same, b, 0.25, out=same) is same
    assert torch.equal(same, fresh)
    assert torch.equal(a, _floats(50_000, 5))  # a new tensor leaves the start alone


def test_lerp_of_half_precision_and_complex():
    a, b = _floats(300, 7), _floats(300, 8)
    half = lerp(a.bfloat16(), b.bfloat16(), 0.4)
    assert half.dtype == torch.bfloat16
    assert torch.equal(half, lerp(a.bfloat16().float(), b.bfloat16().float(), 0.4).bfloat16())
    za, zb = torch.complex(a, b), torch.complex(b, a)
    z = lerp(za, zb, 0.2)
    assert torch.equal(z.real, lerp(a, b, 0.2)) and torch.equal(z.imag, lerp(b, a, 0.2))


def test_lerp_refuses_to_write_into_a_strided_tensor():
    a = torch.zeros(4, 4)
    with pytest.raises(ValueError, match="contiguous"):
        lerp(a.T, a.T, 0.5, out=a.T)


def test_add_scaled_is_a_multiply_then_an_add():
    a, b = _floats(9000, 9), _floats(9000, 10)
    want = a.numpy() + b.numpy() * np.float32(0.3)
    assert np.array_equal(add_scaled(a.clone(), b, 0.3).numpy(), want)


def test_mean_of_rows_adds_rows_in_order_then_divides():
    rows = torch.stack([_floats(1000, s) for s in range(5)])
    want = rows[0].numpy().copy()
    for r in rows[1:]:
        want = want + r.numpy()
    assert np.array_equal(mean_of_rows(rows).numpy(), want / np.float32(5))


def test_sum_of_squares_is_the_sum_of_squares():
    parts = [_floats(n, n) for n in (0, 1, 4095, 4096, 4097, 300_001)]
    exact = math.fsum(float(x) ** 2 for t in parts for x in t.tolist())
    assert sum_of_squares(parts) == pytest.approx(exact, rel=1e-12)
    assert sum_of_squares([torch.complex(parts[2], parts[2])]) == pytest.approx(
        2 * sum_of_squares([parts[2]]), rel=1e-15
    )
    assert sum_of_squares([parts[3].bfloat16()]) == pytest.approx(
        sum_of_squares([parts[3].bfloat16().float()]), rel=0
    )


def test_row_sums_of_squares_per_row():
    rows = torch.stack([_floats(10_000, s).double() for s in range(3)])
    got = row_sums_of_squares(rows)
    assert got.dtype == torch.float64 and got.shape == (3,)
    for i in range(3):
        assert float(got[i]) == sum_of_squares([rows[i]])
