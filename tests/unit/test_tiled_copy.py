"""The compiled tiled copy behind ``parallel_copyto``: exact on every permutation it takes,
and it declines (writing nothing) what it does not cover.

The oracle is NumPy's own ``copyto`` of the same views.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytapp.backends.threads import parallel_copyto
from pytapp.kernels import program

pytestmark = pytest.mark.skipif(program._cexec is None, reason="the extension is not built")


@st.composite
def permuted_views(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    """A source view (permuted, maybe sliced with steps, reversed or padded) and a fresh dst."""
    nd = draw(st.integers(2, 5))
    shape = tuple(draw(st.integers(1, 40)) for _ in range(nd))
    dtype = draw(st.sampled_from([np.float32, np.float64, np.complex64, np.int32, np.int64,
                                  np.uint16]))
    pad = draw(st.integers(1, 2))
    base = np.arange(int(np.prod(shape)) * pad ** nd, dtype=np.int64).reshape(
        tuple(e * pad for e in shape)).astype(dtype)
    src = base[tuple(slice(None, None, pad) for _ in shape)]
    if draw(st.booleans()):
        src = src[::-1]
    perm = draw(st.permutations(range(nd)))
    src = src.transpose(perm)
    return src, np.empty(src.shape, dtype)


@settings(max_examples=300, deadline=None)
@given(permuted_views())
def test_tiled_copy_equals_numpys_copy(case: tuple[np.ndarray, np.ndarray]) -> None:
    src, dst = case
    dst[...] = 0
    want = np.empty_like(dst)
    np.copyto(want, src)
    if program.tiled_copy(dst, src):
        np.testing.assert_array_equal(dst, want)
    else:
        assert not dst.any()  # declined: nothing written
    parallel_copyto(dst, src, threads=2, min_bytes=0)  # slabs on two threads, tiled or not
    np.testing.assert_array_equal(dst, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
def test_a_transpose_goes_through_the_tiles(dtype: type) -> None:
    x = (np.arange(3 * 300 * 40).reshape(3, 300, 40) % 251).astype(dtype)
    src = x.transpose(0, 2, 1)  # three 300 x 40 transposes: NumPy's runs of 300 elements
    dst = np.zeros(src.shape, dtype)
    assert program.tiled_copy(dst, src)
    np.testing.assert_array_equal(dst, src)


def test_declines_what_it_does_not_cover() -> None:
    w = np.arange(300.0 * 300).reshape(300, 300)
    assert program.tiled_copy(np.empty((300, 300)), w.T)  # the case declined below but one
    x = np.arange(64.0 * 64).reshape(64, 64)
    assert not program.tiled_copy(np.empty((300, 300)), w)  # no permutation: NumPy's memcpy
    assert not program.tiled_copy(np.empty((300, 300), np.complex128), w.T.astype(np.complex128))
    assert not program.tiled_copy(np.empty((300, 300), np.float32), w.T)  # a conversion
    assert not program.tiled_copy(np.empty((64, 3)), x[:3].T)  # 3 < 8 elements on one side
    # NumPy's runs of 64 elements: the lines they touch stay in L1, the tiles would not pay
    assert not program.tiled_copy(np.empty((64, 64)), x.T)
    over = np.arange(300.0 * 300).reshape(300, 300)
    assert not program.tiled_copy(over, over.T)  # onto its own source
    np.testing.assert_array_equal(over, w)
    assert not program.tiled_copy(np.empty((300, 300)), np.float64(2.0))  # a scalar broadcasts
    ro = np.empty((300, 300))
    ro.flags.writeable = False
    assert not program.tiled_copy(ro, w.T)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.int32])
@pytest.mark.parametrize("perm", [(3, 2, 1, 0), (1, 2, 3, 0), (2, 3, 0, 1)])
def test_whole_tiles_move_every_bit(dtype: type, perm: tuple[int, ...]) -> None:
    """Whole 16 x 16 tiles (moved through vector registers where the CPU has AVX2) and the
    partial ones at the edges: every element arrives bit for bit, NaN payloads included."""
    bits = np.random.default_rng(3).integers(0, 2**63, (35, 33, 40, 37), dtype=np.uint64)
    item = np.dtype(dtype).itemsize
    x = bits.view(np.uint32)[..., :37] if item == 4 else bits  # any bit pattern, NaNs too
    x = np.ascontiguousarray(x).view(dtype)
    src = x.transpose(perm)
    dst = np.zeros(src.shape, dtype)
    assert program.tiled_copy(dst, src)
    view = np.uint32 if item == 4 else np.uint64
    np.testing.assert_array_equal(dst.view(view), np.ascontiguousarray(src).view(view))


@pytest.mark.parametrize("dtype", [np.uint16, np.float32, np.float64, np.complex64])
@pytest.mark.parametrize("run", [1, 3, 4, 5, 11, 31])
def test_short_runs_along_one_axis_go_run_by_run(dtype: type, run: int) -> None:
    """Both sides run along the same axis for fewer than 512 bytes (kvpujbh's BF16 runs of 11):
    copied run by run in dst's order, every bit (NaN payloads too), the other axes permuted."""
    item = np.dtype(dtype).itemsize
    bits = np.random.default_rng(run).integers(0, 2**16, (9, 17, 6, run * item // 2),
                                               dtype=np.uint16)
    x = bits.view(dtype)  # any bit pattern, NaNs too
    src = x.transpose(2, 0, 1, 3)[:, ::-1]  # runs of `run` numbers; outer axes permuted, reversed
    dst = np.zeros(src.shape, dtype)
    assert program.tiled_copy(dst, src) == (run > 1)  # (runs of 1: the transpose rule, < 8)
    if run > 1:
        np.testing.assert_array_equal(dst.view(np.uint16),
                                      np.ascontiguousarray(src).view(np.uint16))


def test_long_runs_along_one_axis_are_left_to_numpy() -> None:
    x = np.arange(4.0 * 5 * 64).reshape(4, 5, 64)
    dst = np.zeros((5, 4, 64))
    assert not program.tiled_copy(dst, x.transpose(1, 0, 2))  # runs of 512 bytes
    assert not dst.any()
    assert program.tiled_copy(dst[..., :63], x.transpose(1, 0, 2)[..., :63])  # of 504
    np.testing.assert_array_equal(dst[..., :63], x.transpose(1, 0, 2)[..., :63])


@pytest.mark.parametrize("dtype", [np.uint16, np.float32])
def test_short_runs_go_through_tiles_where_numpy_would_fetch_each_source_line_again(
        dtype: type) -> None:
    # the source's unit axis (31) moved outermost, NumPy's runs of 32 elements: between two of
    # its steps along that axis NumPy's loop walks every other line of a source beyond the
    # caches (COPY_REUSE_BYTES), so it fetches each line 31 times; the tiles once
    x = (np.arange(35 * 21 * 32 * 19 * 31) % 65521).astype(dtype).reshape(35, 21, 32, 19, 31)
    assert x.nbytes > 8 << 20
    src = x.transpose(4, 0, 1, 3, 2)
    dst = np.zeros(src.shape, dtype)
    assert program.tiled_copy(dst, src)
    np.testing.assert_array_equal(dst, src)
    # the same layout of a source that stays in cache: NumPy's loop finds its lines again
    small = x[:4]
    assert small.nbytes <= 8 << 20
    assert not program.tiled_copy(np.zeros(small.transpose(4, 0, 1, 3, 2).shape, dtype),
                                  small.transpose(4, 0, 1, 3, 2))


@pytest.mark.parametrize("dtype", [np.uint16, np.float32, np.float64, np.complex128])
def test_partial_tiles_of_every_size_move_every_bit_and_nothing_else(dtype: type) -> None:
    """Edges of 1-15 rows by 1-15 numbers (moved through masked registers where the CPU has
    AVX-512, else one by one) beside whole tiles: each element arrives bit for bit and the
    numbers around D's window stay as they were."""
    item = np.dtype(dtype).itemsize
    rng = np.random.default_rng(item)
    for rows in (16 + 1, 16 + 7, 16 + 15, 2 * 16 + 9):
        for cols in (16 + 2, 16 + 8, 16 + 13, 16 * 3):
            # rows a page apart (where NumPy's short runs would miss the TLB: tiles)
            bits = rng.integers(0, 2**16, (3, rows, 2048 + cols * item // 2), dtype=np.uint16)
            src = bits.view(dtype)[:, :, :cols].transpose(0, 2, 1)  # any bits, NaNs too
            canvas = np.full(src.size + 40, 7, dtype)
            dst = canvas[17:17 + src.size].reshape(src.shape)
            assert program.tiled_copy(dst, src) == (item != 16)  # (NumPy's loop for 16 bytes)
            if item == 16:
                continue
            np.testing.assert_array_equal(dst.view(np.uint16),
                                          np.ascontiguousarray(src).view(np.uint16))
            assert (canvas[:17] == 7).all() and (canvas[17 + src.size:] == 7).all()


@pytest.mark.parametrize("dtype", [np.uint16, np.float32, np.float64])
def test_large_copies_with_partial_edges_are_exact(dtype: type) -> None:
    """From 8 MiB the whole tiles stream past the caches; the partial ones at D's edges are
    stored (masked), and a 16-bit copy (half lines per row) is never streamed."""
    x = (np.arange(1031 * 2059) % 65521).astype(dtype).reshape(1031, 2059)
    assert x.nbytes >= 4 << 20
    for big in (x, np.concatenate([x, x, x])):
        src = big.T
        canvas = np.zeros(src.size + 32, dtype)
        start = (-canvas.ctypes.data % 64) // canvas.itemsize  # D's lines aligned: streamed
        dst = canvas[start:start + src.size].reshape(src.shape)
        assert program.tiled_copy(dst, src)
        np.testing.assert_array_equal(dst, src)
        assert not canvas[:start].any() and not canvas[start + src.size:].any()
