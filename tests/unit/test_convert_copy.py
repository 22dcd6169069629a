"""``convert_copy``: dst = alpha x + beta c between F32, F16 and BF16, any layouts, or refused.

The oracle is NumPy's own arithmetic in F32 (``x * alpha``, then ``c * beta`` added, rounded
once by ``astype``): bit for bit, whatever the layouts, through the compiled tiles or not.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from pytapp.backends.threads import parallel_convert
from pytapp.kernels import program

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32 = np.dtype(np.float16), np.dtype(np.float32)

has_f16 = program.convert_copy(np.empty(1, F16), np.ones(1, F32))
built = program.convert_copy(np.empty(1, BF16), np.ones(1, F32))
needs = pytest.mark.skipif(not built, reason="no compiled extension")
HALVES = [pytest.param(BF16, id="bf16"),
          pytest.param(F16, id="f16", marks=pytest.mark.skipif(
              not has_f16, reason="no compiled extension or no F16C on this CPU"))]

SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, 65504, 65519.99, 65520, 1e6, -1e6, 6.1e-5,
                     6.0e-5, 5.96e-8, 2.98e-8, 2.99e-8, 1e-9, 1 + 2**-11, 1 + 3 * 2**-11,
                     -(1 + 2**-11), 1 + 2**-8, 1 + 3 * 2**-8, 3.3e38, -3.4e38, 1e-40, -1e-39,
                     1e-45], np.float32)


def _want(x: np.ndarray, c: np.ndarray | None, alpha: float, beta: float,
          dtype: Any) -> np.ndarray:
    total = x.astype(F32) * np.float32(alpha)
    if c is not None:
        total = c.astype(F32) * np.float32(beta) + total
    with np.errstate(over="ignore", invalid="ignore"):
        return total.astype(dtype)


def _bits_equal(got: np.ndarray, want: np.ndarray) -> None:
    nan = np.isnan(want.astype(F32))
    assert np.isnan(got.astype(F32))[nan].all()
    assert np.array_equal(got.view(np.uint16)[~nan], want.view(np.uint16)[~nan])


@pytest.mark.parametrize("dtype", HALVES)
def test_down_is_numpys_rounding_bit_for_bit(dtype: Any) -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([SPECIALS, np.array([np.nan, -np.nan], F32),
                        (rng.standard_normal(1001) * 10.0 ** rng.integers(-9, 6, 1001)).astype(
                            F32),
                        rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32).view(
                            F32)])  # every kind of bit pattern: NaNs with payloads too
    # NaNs whose rounding would carry into an infinity, last: in the vector loops' scalar tail
    tail = np.array([0x7F800001, 0xFF800001, 0x7FFFFFFF], np.uint32).view(F32)
    x = np.concatenate([x[:len(x) - len(x) % 8], tail])
    got = np.empty(x.shape, dtype)
    assert program.convert_copy(got, x)
    _bits_equal(got, _want(x, None, 1.0, 0.0, dtype))


@pytest.mark.parametrize("dtype", HALVES)
def test_up_is_exact_for_every_half(dtype: Any) -> None:
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype)
    got = np.empty(every.shape, F32)
    assert program.convert_copy(got, every)
    want = every.astype(F32)
    finite = ~np.isnan(want)
    assert np.array_equal(got[finite], want[finite]) and np.isnan(got[~finite]).all()


@pytest.mark.parametrize("perm", [(0, 1, 2), (2, 1, 0), (1, 0, 2), (0, 2, 1), (2, 0, 1)])
@pytest.mark.parametrize("up", [True, False])
@pytest.mark.parametrize("dtype", HALVES)
def test_any_strides(perm: tuple[int, ...], up: bool, dtype: Any) -> None:
    rng = np.random.default_rng(1)
    shape = (37, 3, 70)  # tiles of 16 with remainders along every axis
    src_type, dst_type = (dtype, F32) if up else (F32, dtype)
    big = (rng.standard_normal((40, 6, 150)) * 30).astype(src_type)
    src = big[1:38, ::2, 3:143:2]  # padded and strided
    dst = np.full(tuple(shape[i] for i in perm), np.nan, dst_type).transpose(np.argsort(perm))
    dst = dst[::-1]  # negative strides too
    assert program.convert_copy(dst, src)
    if up:
        np.testing.assert_array_equal(dst, src.astype(F32))
    else:
        _bits_equal(dst, src.astype(dst_type))


@pytest.mark.parametrize("c_type", [None, BF16, F16, F32], ids=["no_c", "c_bf16", "c_f16",
                                                              "c_f32"])
@pytest.mark.parametrize("layout", ["same", "transposed", "permuted", "repeated_x",
                                    "short_rows"])
@pytest.mark.parametrize("dtype", HALVES)
def test_scaled_sums_with_c(c_type: Any, layout: str, dtype: Any) -> None:
    """D = alpha x + beta c in F32, x F32 in D's layout or another (2-D tiles of 16 filled by
    the register transposes, the rest row by row), C in D's layout or its own; short_rows: D,
    x and C share their fastest axis (5 numbers: masked vectors), nothing else."""
    if c_type is F16 and not has_f16:
        pytest.skip("no F16C on this CPU")
    rng = np.random.default_rng(2)
    shape = (48, 5, 67)
    x = (rng.standard_normal(shape) * 100).astype(F32)
    if layout == "transposed":
        x = np.ascontiguousarray(x.transpose(2, 1, 0)).transpose(2, 1, 0)
    elif layout in ("permuted", "short_rows"):
        x = np.ascontiguousarray(x.transpose(0, 2, 1)).transpose(0, 2, 1)
    elif layout == "repeated_x":  # x broadcast along its middle axis (zero strides)
        x = np.broadcast_to(x[:, :1], shape)
    c = None if c_type is None else (rng.standard_normal(shape) * 50).astype(c_type)
    if c is not None and layout == "permuted":
        c = np.ascontiguousarray(c.transpose(2, 0, 1)).transpose(1, 2, 0)
    if c is not None and layout == "short_rows":  # C in D's layout
        c = np.ascontiguousarray(c.transpose(2, 0, 1)).transpose(1, 2, 0)
    d = np.full((67, 5, 48), np.nan, dtype).transpose(2, 1, 0)  # D's fastest axis: x's slowest
    if layout == "short_rows":
        d = np.full((67, 48, 5), np.nan, dtype).transpose(1, 2, 0)
    alpha, beta = 0.75, -1.5
    assert program.convert_copy(d, x, c, alpha, beta if c is not None else 0.0)
    _bits_equal(d, _want(x, c, alpha, beta if c is not None else 0.0, dtype))


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dtype", HALVES)
def test_parallel_convert_matches_numpy(threads: int, dtype: Any) -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((31, 10, 35, 21)) * 10).astype(F32)
    c = (rng.standard_normal((10, 21, 31, 35)) * 10).astype(dtype).transpose(2, 0, 3, 1)
    d = np.empty((10, 21, 31, 35), dtype).transpose(2, 0, 3, 1)
    parallel_convert(d, x, c, 2.0, 0.5, threads)
    _bits_equal(d, _want(x, c, 2.0, 0.5, dtype))


def test_parallel_convert_falls_back_to_numpy() -> None:
    """Where the compiled pass does not apply (a byte-swapped D), NumPy computes the same."""
    x = np.arange(60, dtype=F32).reshape(3, 4, 5)
    d = np.zeros((5, 4, 3), F16.newbyteorder()).transpose(2, 1, 0)
    c = np.ones((3, 4, 5), F32)
    parallel_convert(d, x, c, 0.5, 3.0, 2)
    np.testing.assert_array_equal(d, x * 0.5 + 3)


@needs
def test_refused_where_it_does_not_apply() -> None:
    x32, x16 = np.ones((4, 4), F32), np.ones((4, 4), BF16)
    assert not program.convert_copy(np.empty((4, 4)), x32)  # float64: not converted here
    assert not program.convert_copy(np.empty((4, 4), F32), x32)  # all F32: NumPy's own
    assert not program.convert_copy(np.empty((4, 4), BF16), x16)  # a plain copy
    assert not program.convert_copy(np.empty((4, 5), BF16), x32)  # another shape
    assert not program.convert_copy(np.empty((4, 4), BF16), x32, np.ones((4, 4)), 1.0, 1.0)
    frozen = np.zeros((4, 4), BF16)
    frozen.flags.writeable = False
    assert not program.convert_copy(frozen, x32)
    assert (frozen == 0).all()
    swapped = np.zeros((4, 4), F16.newbyteorder())
    assert not program.convert_copy(swapped, x32) and (swapped == 0).all()
    buf = np.zeros(64, F32)
    assert not program.convert_copy(buf[:16].view(F16)[:16], buf[4:20])  # overlapping
    d = np.zeros((4, 8), BF16)
    assert not program.convert_copy(d[:, :4], x32, d[:, 4:].T, 1.0, 1.0)  # c overlaps d


@needs
@pytest.mark.parametrize("dtype", HALVES)
def test_c_is_d(dtype: Any) -> None:
    """In-place accumulation: each number of C is read before the same number of D is written."""
    rng = np.random.default_rng(4)
    x = rng.integers(-50, 50, (40, 33)).astype(F32)
    d = rng.integers(-50, 50, (33, 40)).astype(dtype).T
    want = _want(x, d, 0.5, 2.0, dtype)
    assert program.convert_copy(d, x, d, 0.5, 2.0)
    np.testing.assert_array_equal(d, want)
