"""Permutes (one-operand products, SPEC 9) and TTGT's packs as tiled copies.

A compiled loop nest that only moves A into D (B the number 1, alpha 1, no C, nothing
conjugated) runs as one tiled copy straight into D; copies of 8 MiB or more store their tiles
with streaming stores where D's lines allow (AVX-512 CPUs). Every result is compared exactly
with NumPy's own copy of the same view, on integer data.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pytapp
from pytapp import Handle, TensorInfo, TensorProduct
from pytapp.kernels import program

pytestmark = pytest.mark.skipif(not program.available(), reason="the extension is not built")

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def _ints(shape: tuple[int, ...], dtype: type, seed: int, span: int = 1000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.integers(-span, span, shape).astype(np.float64)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.integers(-span, span, shape)
    return x.astype(dtype)


def _aligned(shape: tuple[int, ...], dtype: type, offset: int = 0) -> np.ndarray:
    """A C-ordered array whose first element lies ``offset`` elements past a 64-byte line."""
    item = np.dtype(dtype).itemsize
    n = int(np.prod(shape))
    raw = np.empty((n + offset) * item + 64, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset * item
    out = raw[start:start + n * item].view(dtype).reshape(shape)
    out[...] = np.nan
    return out


def _permute(src: np.ndarray, perm: tuple[int, ...], out: np.ndarray) -> np.ndarray:
    letters = "abcdefgh"[:src.ndim]
    pytapp.einsum(f"{letters}->{''.join(letters[p] for p in perm)}", src, out=out)
    return out


@st.composite
def permutes(draw: st.DrawFn) -> tuple[np.ndarray, tuple[int, ...], np.ndarray]:
    """A source view (sliced with steps, maybe reversed), a permutation, and an out view."""
    nd = draw(st.integers(2, 4))
    shape = tuple(draw(st.integers(1, 48)) for _ in range(nd))
    dtype = draw(st.sampled_from(DTYPES))
    pad = draw(st.integers(1, 2))
    base = _ints(tuple(e * pad for e in shape), dtype, draw(st.integers(0, 99)))
    src = base[tuple(slice(None, None, pad) for _ in shape)]
    if draw(st.booleans()):
        src = src[::-1]
    perm = tuple(draw(st.permutations(range(nd))))
    out_shape = tuple(shape[p] for p in perm)
    out = _aligned(out_shape, dtype, draw(st.integers(0, 3)))
    if draw(st.booleans()):  # D padded along its fastest label
        wide = _aligned((*out_shape[:-1], out_shape[-1] + 3), dtype)
        out = wide[..., :out_shape[-1]]
    return src, perm, out


@settings(max_examples=200, deadline=None)
@given(permutes())
def test_a_permute_equals_numpys_copy(case: tuple[np.ndarray, tuple[int, ...], np.ndarray],
                                      ) -> None:
    src, perm, out = case
    np.testing.assert_array_equal(_permute(src, perm, out), src.transpose(perm))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize(("shape", "perm"), [((144, 130, 120), (2, 1, 0)),
                                             ((1520, 1456), (1, 0)),
                                             ((40, 50, 48, 33), (3, 0, 2, 1))])
def test_large_permutes_stream_their_tiles_exactly(dtype: type, offset: int,
                                                   shape: tuple[int, ...],
                                                   perm: tuple[int, ...]) -> None:
    # 8 MiB or more: streamed where D's lines are whole (offset 0, rows of 64-byte multiples),
    # stored otherwise; edges of partial tiles on both sides (130, 1520, 33, 50)
    src = _ints(shape, dtype, 3)
    out = _aligned(tuple(shape[p] for p in perm), dtype, offset)
    assert out.nbytes >= 8 << 20
    np.testing.assert_array_equal(_permute(src, perm, out), src.transpose(perm))
    np.testing.assert_array_equal(_permute(src[::-1], perm, out), src[::-1].transpose(perm))


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_scaled_or_accumulated_permute_still_multiplies(dtype: type) -> None:
    # B another number, alpha other than 1, or C given: the elementwise nest, not a copy
    a = _ints((64, 48, 40), dtype, 5)
    c = _ints((40, 48, 64), dtype, 6)
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    want = a.astype(wide).transpose(2, 1, 0)
    for alpha, b_value, beta in [(1, 3, 0), (2, 1, 0), (1, 1, -1), (1, 1, 0)]:
        b = np.array(b_value, dtype)
        d = np.full((40, 48, 64), np.nan, dtype)
        plan = TensorProduct(Handle("blas"), TensorInfo.from_array(a), "ijk",
                             TensorInfo.from_array(b), "", TensorInfo.from_array(c), "kji",
                             TensorInfo.from_array(d), "kji")
        plan.execute(alpha, a, b, beta, c if beta else None, d)
        np.testing.assert_array_equal(d.astype(wide),
                                      alpha * b_value * want + beta * c.astype(wide))


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_conjugating_permute_conjugates(dtype: type) -> None:
    a = _ints((48, 40, 36), dtype, 7)
    b = np.array(1, dtype)
    d = np.full((36, 40, 48), np.nan, dtype)
    plan = TensorProduct(Handle("blas"), TensorInfo.from_array(a), "ijk",
                         TensorInfo.from_array(b), "", None, None, TensorInfo.from_array(d),
                         "kji", op_a=pytapp.ElementOp.CONJUGATE)
    plan.execute(1, a, b, 0, None, d)
    np.testing.assert_array_equal(d, np.conj(a).transpose(2, 1, 0))


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_large_ttgt_pack_that_transposes_is_exact(dtype: type) -> None:
    # bcge,gabe->eca: e, B's fastest label, becomes the GEMMs' batch label, outermost in B's
    # pack (a transposing copy of 10 MiB and more: streamed where the CPU has AVX-512)
    a = _ints((64, 12, 8, 64), dtype, 8, span=5)
    b = _ints((8, 80, 64, 64), dtype, 9, span=5)
    assert b.nbytes >= 8 << 20
    d = np.full((64, 12, 80), np.nan, dtype)
    plan = TensorProduct(Handle("blas"), TensorInfo.from_array(a), "bcge",
                         TensorInfo.from_array(b), "gabe", None, None,
                         TensorInfo.from_array(d), "eca")
    assert "compiled: ttgt" in plan.algorithm and "packs A, B" in plan.algorithm, \
        plan.algorithm
    plan.execute(1, a, b, 0, None, d)
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    np.testing.assert_array_equal(d.astype(wide),
                                  np.einsum("bcge,gabe->eca", a.astype(wide), b.astype(wide)))
