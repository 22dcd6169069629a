"""GEMMs shared out over the BLAS's own threads, each worker with a one-thread BLAS.

Thin GEMMs whose thick operand needs packing (``packed_gemm``: packed and multiplied in
blocks) and GEMMs summed over labels looped around them (``summed_gemm``: accumulated in D),
and the blas backend's routes through them. The oracle is NumPy's einsum in
float64/complex128 on exact small-integer data, so every result must be equal, not close.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from threadpoolctl import threadpool_info

import pytapp
from pytapp.backends import blas
from pytapp.backends import threads as threads_mod
from pytapp.kernels import program

pytestmark = pytest.mark.skipif(program._cexec is None or not program.blas_available(),
                                reason="the extension is not built or NumPy's CBLAS not found")

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def _ints(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    x = rng.integers(-3, 4, shape).astype(np.float64)
    if np.issubdtype(dtype, np.complexfloating):
        return (x + 1j * rng.integers(-3, 4, shape)).astype(dtype)
    return x.astype(dtype)


def _wide(x: np.ndarray) -> np.ndarray:
    return x.astype(np.complex128 if np.iscomplexobj(x) else np.float64)


@pytest.fixture
def python_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans made from here on run blas's Python plan, whose thin route these tests cover
    (the compiled executor packs such products whole)."""
    monkeypatch.setenv("PYTAPP_COMPILED", "0")
    pytapp.clear_plan_cache()


def _blas_threads() -> list[int]:
    return [int(i["num_threads"]) for i in threadpool_info() if i.get("user_api") == "blas"]


def _through_blas(equation: str, ext: dict[str, int], dtype: type,
                  caplog: pytest.LogCaptureFixture, route: str) -> None:
    """``equation`` on blas equals the oracle, and blas's DEBUG log names ``route``."""
    rng = np.random.default_rng(len(equation))
    ops = [_ints(rng, tuple(ext[ch] for ch in term), dtype)
           for term in equation.split("->")[0].split(",")]
    want = np.einsum(equation, *map(_wide, ops))
    with caplog.at_level(logging.DEBUG, logger="pytapp"):
        got = pytapp.einsum(equation, *ops, backend="blas")
    np.testing.assert_array_equal(_wide(np.asarray(got)), want)
    assert any(route in r.getMessage() for r in caplog.records)


def _on_sixteen_threads(work: Callable[[], list[bool]]) -> None:
    """Run ``work`` on 16 threads at once: every check it returns holds, and the BLAS thread
    count is what it was before."""
    before = _blas_threads()
    results: list[list[bool]] = []
    pool = [threading.Thread(target=lambda: results.append(work())) for _ in range(16)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert len(results) == 16 and all(all(r) and r for r in results)
    assert _blas_threads() == before


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("threads", [1, 2, 5])
@pytest.mark.parametrize("block", [1, 3, 40])
@pytest.mark.parametrize("summed_first", [False, True])
def test_packed_gemm_is_exact(dtype: type, threads: int, block: int, summed_first: bool) -> None:
    rng = np.random.default_rng(block * 10 + threads)
    a = _ints(rng, (40, 6, 9, 5), dtype)  # rows (i, j, l), summed k: packed as (i, j, l, k)
    b = _ints(rng, (7, 9), dtype)  # (n, k): other = b.T, read transposed
    # or, summed first, as (k, i, j, l): blocks of i, each packed [k][rows]
    src = a.transpose(2, 0, 1, 3) if summed_first else a.transpose(0, 1, 3, 2)
    want = np.einsum("ijkl,nk->ijln", _wide(a), _wide(b)).reshape(40 * 6 * 5, 7)
    row_major = np.zeros((1200, 7), dtype)
    assert program.packed_gemm(row_major, src, b.T, 3, block, threads, summed_first)
    np.testing.assert_array_equal(_wide(row_major), want)
    col_major = np.zeros((7, 1200), dtype).T
    assert program.packed_gemm(col_major, src, np.ascontiguousarray(b.T), 3, block, threads,
                               summed_first)
    np.testing.assert_array_equal(_wide(col_major), want)


def test_packed_gemm_restores_the_blas_thread_count() -> None:
    before = _blas_threads()
    a = np.ones((64, 8, 3))
    d = np.empty((512, 4))
    assert program.packed_gemm(d, a, np.ones((3, 4)), 2, 1, 2)
    assert _blas_threads() == before
    np.testing.assert_array_equal(d, 3.0)


@pytest.mark.parametrize("case", ["dtype", "d strided", "other strided", "rows", "shape"])
def test_packed_gemm_declines_what_it_does_not_cover(case: str) -> None:
    a = np.ones((8, 4, 3))
    other = np.ones((3, 5))
    d = np.zeros((32, 5))
    rows = 2
    if case == "dtype":
        other = other.astype(np.float32)
    elif case == "d strided":
        d = np.zeros((32, 10))[:, ::2]
    elif case == "other strided":
        other = np.ones((3, 10))[:, ::2]
    elif case == "rows":
        rows = 3
    else:
        d = np.zeros((31, 5))
    assert not program.packed_gemm(d, a, other, rows, 2, 2)
    assert not d.any()  # nothing written


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("equation", [
    "abcj,ic->ijab",  # A packed, the thin B read transposed
    "ic,abcj->ijab",  # B packed (D^T = B^T A^T)
    "ac,ijcb->ijab",
    "ijcb,ac->ijab",
    "ajcb,ic->abij",
])
@pytest.mark.usefixtures("python_plans")
def test_thin_products_through_blas(dtype: type, equation: str,
                                    caplog: pytest.LogCaptureFixture) -> None:
    ext = dict(a=48, b=40, c=16, j=24, i=12)
    _through_blas(equation, ext, dtype, caplog, "thin GEMM")


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.usefixtures("python_plans")
def test_thin_product_with_alpha_beta_and_c(dtype: type,
                                            caplog: pytest.LogCaptureFixture) -> None:
    rng = np.random.default_rng(3)
    a = _ints(rng, (48, 40, 16, 24), dtype)
    b = _ints(rng, (12, 16), dtype)
    c = _ints(rng, (12, 24, 48, 40), dtype)
    d = np.zeros_like(c)
    want = 2 * np.einsum("abcj,ic->ijab", _wide(a), _wide(b)) - 3 * _wide(c)
    with caplog.at_level(logging.DEBUG, logger="pytapp"):
        pytapp.contract("abcj,ic->ijab", a, b, out=d, alpha=2, beta=-3, c=c, backend="blas")
    np.testing.assert_array_equal(_wide(d), want)
    assert any("thin GEMM" in r.getMessage() for r in caplog.records)


def test_a_thick_side_takes_the_whole_pack() -> None:
    assert blas.THIN_MAX < 576
    rng = np.random.default_rng(5)
    a, b = _ints(rng, (12, 12, 48, 48), np.float64), _ints(rng, (12, 12, 48, 48), np.float64)
    got = pytapp.einsum("ijab,jkbc->ikac", a, b, backend="blas")
    np.testing.assert_array_equal(got, np.einsum("ijab,jkbc->ikac", a, b))


def test_sixteen_threads_share_a_thin_plan() -> None:
    rng = np.random.default_rng(7)
    a, b = _ints(rng, (48, 40, 16, 24), np.float64), _ints(rng, (12, 16), np.float64)
    want = np.einsum("abcj,ic->ijab", a, b)
    expr = pytapp.einsum_expression("abcj,ic->ijab", a.shape, b.shape, backend="blas")
    _on_sixteen_threads(lambda: [np.array_equal(expr(a, b), want) for _ in range(12)])


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 40), st.integers(1, 24), st.integers(1, 9), st.integers(2, 12),
       st.integers(1, 4), st.sampled_from(DTYPES), st.booleans())
def test_packed_gemm_on_random_shapes(first: int, mid: int, k: int, n: int, threads: int,
                                      dtype: type, reverse: bool) -> None:
    rng = np.random.default_rng(first * mid + k)
    a = _ints(rng, (first, k, mid), dtype)
    if reverse:
        a = a[::-1]
    other = _ints(rng, (k, n), dtype)
    d = np.zeros((first * mid, n), dtype)
    block = max(1, first // 3)
    assert program.packed_gemm(d, a.transpose(0, 2, 1), other, 2, block, threads)
    want = np.einsum("fkm,kn->fmn", _wide(a), _wide(other)).reshape(first * mid, n)
    np.testing.assert_array_equal(_wide(d), want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("threads", [1, 2, 5])
def test_summed_gemm_is_exact(dtype: type, threads: int) -> None:
    rng = np.random.default_rng(threads)
    left = _ints(rng, (3, 4, 5, 70, 6), dtype)  # summed (3, 4), kept 5, m 70, k 6
    right = _ints(rng, (3, 4, 5, 6, 2), dtype)
    want = np.einsum("stbmk,stbkn->bmn", _wide(left), _wide(right))
    d = np.zeros((5, 70, 2), dtype)
    assert program.summed_gemm(d, left, right, 2, threads)
    np.testing.assert_array_equal(_wide(d), want)
    col = np.zeros((5, 2, 70), dtype).transpose(0, 2, 1)  # D column-major: D^T = R^T L^T
    assert program.summed_gemm(col, left, right, 2, threads)
    np.testing.assert_array_equal(_wide(col), want)
    flat = np.zeros((70, 2), dtype)  # no kept batch axis: the workers share D's rows
    assert program.summed_gemm(flat, left[:, :, 0], right[:, :, 0], 2, threads)
    np.testing.assert_array_equal(_wide(flat), want[0])


def test_summed_gemm_reads_a_vector_of_stride_zero() -> None:
    x = np.arange(12 * 300 * 8, dtype=np.float64).reshape(12, 300, 8) % 7
    v = (np.arange(12 * 8, dtype=np.float64).reshape(12, 8) % 5)[:, :, None]  # stride 0 axis
    d = np.zeros((300, 1))
    assert program.summed_gemm(d, x, v, 1, 2)
    np.testing.assert_array_equal(d, np.einsum("kmd,kdn->mn", x, v))


@pytest.mark.parametrize("case", ["dtype", "summed", "d shape", "strided"])
def test_summed_gemm_declines_what_it_does_not_cover(case: str) -> None:
    left, right = np.ones((3, 80, 4)), np.ones((3, 4, 2))
    d = np.zeros((80, 2))
    summed = 1
    if case == "dtype":
        right = right.astype(np.float32)
    elif case == "summed":
        summed = 0
    elif case == "d shape":
        d = np.zeros((80, 3))
    else:
        left = np.ones((3, 80, 8))[:, :, ::2]
    assert not program.summed_gemm(d, left, right, summed, 2)
    assert not d.any()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("equation", ["kbcd,kd->bc", "kacb,kc->ab", "ibja,jb->ia",
                                      "akic,kc->ia"])
def test_summed_products_through_blas(dtype: type, equation: str,
                                      caplog: pytest.LogCaptureFixture) -> None:
    ext = dict(k=12, b=128, c=128, d=48, a=128, i=64, j=12, n=3)  # 2^24 flops or more
    _through_blas(equation, ext, dtype, caplog, "in D on")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch", [3, 8])
@pytest.mark.parametrize("threads", [1, 2])
def test_batched_gemms_shared_out(dtype: type, batch: int, threads: int) -> None:
    """A batch of 3 on two workers shares rows (balanced), a batch of 8 whole GEMMs."""
    rng = np.random.default_rng(batch)
    left, right = _ints(rng, (batch, 150, 7), dtype), _ints(rng, (batch, 7, 9), dtype)
    want = np.einsum("bmk,bkn->bmn", _wide(left), _wide(right))
    out = np.zeros((batch, 150, 9), dtype)
    assert program.summed_gemm(out, left, right, 0, threads)
    np.testing.assert_array_equal(_wide(out), want)
    out[...] = 0
    threads_mod.parallel_matmul(left[:1], right, out, threads)  # left broadcast over the batch
    np.testing.assert_array_equal(
        _wide(out), np.einsum("mk,bkn->bmn", _wide(left[0]), _wide(right)))


@pytest.mark.usefixtures("python_plans")  # the executor runs these: its split is tested apart
@pytest.mark.parametrize("equation", ["bhqd,bhkd->bhqk", "bhqk,bhkd->bhqd"])
def test_batched_products_split_on_the_pool(equation: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blas, "split_pays", lambda: True)  # the mechanism, whatever this machine
    rng = np.random.default_rng(11)
    ext = dict(b=2, h=8, q=96, k=96, d=64)
    ops = [_ints(rng, tuple(ext[ch] for ch in term), np.float64)
           for term in equation.split("->")[0].split(",")]
    expr = pytapp.einsum_expression(equation, *ops, backend="blas")
    assert "batch split across threads" in str(expr.info())
    before = _blas_threads()
    np.testing.assert_array_equal(expr(*ops), np.einsum(equation, *ops))
    assert _blas_threads() == before


def test_pool_map_runs_every_call_and_raises_the_first_error() -> None:
    before = _blas_threads()
    libs = [ctypes.CDLL(p) for p in program._numpy_blas_paths()]
    if not any(hasattr(lib, "gotoblas_pthread") for lib in libs) or min(before or [1]) < 2:
        pytest.skip("NumPy's BLAS has no pool of two threads to run on")
    seen: list[int] = []
    assert program.pool_map(seen.append, 2)
    assert sorted(seen) == [0, 1]

    def fail(i: int) -> None:
        raise ValueError(f"call {i}")

    with pytest.raises(ValueError, match="call"):
        program.pool_map(fail, 2)
    nested: list[bool] = []
    assert program.pool_map(lambda i: nested.append(program.pool_map(lambda j: None, 2)), 2)
    assert nested == [False, False]  # work handed out from inside runs where it is
    assert _blas_threads() == before


def test_sixteen_threads_copy_through_the_pool() -> None:
    src = (np.arange(48 * 48 * 48 * 12, dtype=np.float64) % 97).reshape(48, 48, 48, 12)
    want = np.ascontiguousarray(src.transpose(0, 1, 3, 2))

    def copies() -> list[bool]:
        seen = []
        for _ in range(6):
            dst = np.empty(want.shape)
            threads_mod.parallel_copyto(dst, src.transpose(0, 1, 3, 2), threads=2)
            seen.append(np.array_equal(dst, want))
        return seen

    _on_sixteen_threads(copies)


def test_sixteen_threads_share_a_compiled_summed_plan() -> None:
    """klcd,klad->ac at its real size takes the compiled summed GEMMs (split over the sum);
    16 threads executing one plan, with alpha and beta on C = D, all get numpy's values."""
    rng = np.random.default_rng(8)
    a, b = _ints(rng, (12, 12, 48, 48), np.float64), _ints(rng, (12, 12, 48, 48), np.float64)
    c = _ints(rng, (48, 48), np.float64)
    want = 2 * np.einsum("klcd,klad->ac", a, b) - 3 * c
    info = pytapp.TensorInfo.from_array
    with pytapp.Handle("blas") as h:
        d0 = np.empty_like(c)
        plan = pytapp.TensorProduct(h, info(a), "klcd", info(b), "klad", info(d0), "ac",
                                    info(d0), "ac")
        d0[...] = c
        shown = plan.execute(2.0, a, b, -3.0, d0, d0).algorithm
        assert shown.startswith("compiled:") and "summed over k, l in D" in shown, shown
        np.testing.assert_array_equal(d0, want)

        def work() -> list[bool]:
            checks = []
            for _ in range(8):
                d = c.copy()
                plan.execute(2.0, a, b, -3.0, d, d)
                checks.append(np.array_equal(d, want))
            return checks

        _on_sixteen_threads(work)
