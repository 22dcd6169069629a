"""``low_sum``: F16/BF16 (and F32) operands summed over some axes in F32, any layouts.

The oracle is NumPy's float64 sum of the same numbers: small integers, whose every partial
sum F32 holds exactly, so the two agree bit for bit whatever the order of the additions.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from pytapp.backends.threads import parallel_sum
from pytapp.kernels import program

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32 = np.dtype(np.float16), np.dtype(np.float32)

built = program.low_sum(np.empty((1,), F32), np.ones((1,), BF16), ())
has_f16 = program.low_sum(np.empty((1,), F32), np.ones((1,), F16), ())
needs = pytest.mark.skipif(not built, reason="no compiled extension")
TYPES = [pytest.param(BF16, id="bf16"), pytest.param(F32, id="f32"),
         pytest.param(F16, id="f16", marks=pytest.mark.skipif(
             not has_f16, reason="no compiled extension or no F16C on this CPU"))]


def _ints(shape: tuple[int, ...], dtype: Any, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-8, 9, shape).astype(dtype)


def _check(x: np.ndarray, axes: tuple[int, ...], out: np.ndarray | None = None) -> None:
    shape = tuple(1 if i in axes else e for i, e in enumerate(x.shape))
    out = np.full(shape, np.nan, F32) if out is None else out
    assert program.low_sum(out, x, axes)
    want = x.astype(np.float64).sum(axis=axes, keepdims=True)
    np.testing.assert_array_equal(out.astype(np.float64), want)


@needs
@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("axes", [(4,), (0,), (2,), (1, 3), (0, 4), (3, 4), (0, 1, 2, 3, 4), ()])
def test_sums_over_any_axes_match_numpy(dtype: Any, axes: tuple[int, ...]) -> None:
    """Innermost axis summed (dots, runs of 27 and 600), kept (rows), several of each, none."""
    x = _ints((5, 3, 7, 4, 27), dtype, 1)
    _check(x, axes)
    _check(_ints((3, 2, 2, 5, 600), dtype, 2), axes)


@needs
@pytest.mark.parametrize("dtype", TYPES)
def test_strided_reversed_and_permuted_operands_and_outputs(dtype: Any) -> None:
    """x read through negative, zero-padded and permuted strides; out written strided."""
    base = _ints((8, 9, 10, 11), dtype, 3)
    for x in (base[::-1, :, ::2], base.transpose(3, 1, 0, 2), base[:, ::3, 1:, ::-2]):
        for axes in ((0,), (3,), (1, 2), (0, 3)):
            _check(x, axes)
            shape = tuple(1 if i in axes else e for i, e in enumerate(x.shape))
            wide = np.full((*shape[:-1], 2 * shape[-1]), np.nan, F32)
            _check(x, axes, wide[..., ::2])  # out at a stride of two numbers


@needs
def test_refused_where_it_does_not_apply() -> None:
    """Wrong out type or shape, a read-only out, an F64 operand: False, out untouched."""
    x = _ints((4, 5), BF16, 4)
    for out, xs, axes in ((np.zeros((4, 1), np.float64), x, (1,)),
                          (np.zeros((4, 5), F32), x, (1,)),
                          (np.zeros((4, 1), F32), x.astype(np.float64), (1,))):
        before = out.copy()
        assert not program.low_sum(out, xs, axes)
        np.testing.assert_array_equal(out, before)
    ro = np.zeros((4, 1), F32)
    ro.flags.writeable = False
    assert not program.low_sum(ro, x, (1,))


@needs
@pytest.mark.parametrize("threads", [1, 2])
def test_parallel_sum_of_halves_sums_in_f32_exactly(threads: int) -> None:
    """``parallel_sum`` of a BF16 operand (slabs of a kept axis, or of a summed one with
    partial sums added) takes the compiled pass and matches the float64 sums."""
    x = _ints((64, 33, 40), BF16, 5)
    for axes in ((1,), (2,), (0, 1), (0, 1, 2)):
        got = parallel_sum(x, axes, np.float32, threads, min_bytes=0)
        assert got.dtype == F32
        np.testing.assert_array_equal(got, x.astype(np.float64).sum(axis=axes))
