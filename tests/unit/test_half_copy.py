"""float16 <-> float32 conversion with F16C: bit for bit NumPy's, any strides, or refused."""

from __future__ import annotations

import numpy as np
import pytest

from pytapp.kernels import program

needs = pytest.mark.skipif(
    not program.half_copy(np.empty(1, np.float16), np.ones(1, np.float32)),
    reason="no compiled extension or no F16C on this CPU")

SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, 65504, 65519.99, 65520, 1e6, -1e6, 6.1e-5,
                     6.0e-5, 5.96e-8, 2.98e-8, 2.99e-8, 1e-9, 1 + 2**-11, 1 + 3 * 2**-11,
                     -(1 + 2**-11)], np.float32)


@needs
def test_down_is_numpys_rounding_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([SPECIALS, (rng.standard_normal(1001) * 10.0 ** rng.integers(
        -9, 6, 1001)).astype(np.float32)])
    got = np.empty(x.shape, np.float16)
    assert program.half_copy(got, x)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


@needs
def test_up_is_exact_for_every_half() -> None:
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    got = np.empty(every.shape, np.float32)
    assert program.half_copy(got, every)
    want = every.astype(np.float32)
    finite = ~np.isnan(want)
    assert np.array_equal(got[finite], want[finite]) and np.isnan(got[~finite]).all()


@needs
@pytest.mark.parametrize("perm", [(0, 1, 2), (2, 1, 0), (1, 0, 2), (0, 2, 1)])
@pytest.mark.parametrize("up", [True, False])
def test_any_strides(perm: tuple[int, ...], up: bool) -> None:
    rng = np.random.default_rng(1)
    shape = (5, 3, 70)
    src_type, dst_type = (np.float16, np.float32) if up else (np.float32, np.float16)
    big = (rng.standard_normal((7, 6, 150)) * 30).astype(src_type)
    src = big[1:6, ::2, 3:143:2]  # padded and strided
    dst = np.full(tuple(shape[i] for i in perm), np.nan, dst_type).transpose(np.argsort(perm))
    dst = dst[::-1]  # negative strides too
    assert program.half_copy(dst, src)
    assert np.array_equal(dst, src.astype(dst_type))


def test_refused_where_it_does_not_apply() -> None:
    x32, x16 = np.ones((4, 4), np.float32), np.ones((4, 4), np.float16)
    assert not program.half_copy(np.empty((4, 4)), x32)  # float64: not a half conversion
    assert not program.half_copy(np.empty((4, 4), np.float16), x16)  # no conversion at all
    assert not program.half_copy(np.empty((4, 5), np.float16), x32)  # another shape
    frozen = np.zeros((4, 4), np.float16)
    frozen.flags.writeable = False
    assert not program.half_copy(frozen, x32)
    assert (frozen == 0).all()
    swapped = np.zeros((4, 4), np.dtype(np.float16).newbyteorder())
    assert not program.half_copy(swapped, x32) and (swapped == 0).all()
    buf = np.zeros(64, np.float32)
    assert not program.half_copy(buf[:16].view(np.float16)[:16], buf[4:20])  # overlapping
