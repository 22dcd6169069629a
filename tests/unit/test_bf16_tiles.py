"""BF16 and F16 GEMMs on the AMX tiles (blas's route for such operands on CPUs that have them).

The tiles multiply BF16 pairs exactly and add in F32 (F16 numbers split exactly into two BF16
ones, four products per multiply-add); the epilogue runs in F32 and rounds once into D's
type. Every case runs on small-integer data whose sums are exact in F32, so the tiles' order
of summation cannot change a number: D must equal numpy.einsum in float64 on the same
numbers, rounded once into D's type by NumPy. Each case also runs with the tiles forbidden
(the F32 GEMM on converted copies), which must give the same D. On CPUs without AMX-BF16 only
that second half runs, and the tests that need the tiles are skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from pytapp import Handle, TensorInfo, TensorProduct, clear_plan_cache
from pytapp.backends import blas
from pytapp.kernels import program

BF16 = np.dtype(ml_dtypes.bfloat16)
TILES = program.bf16_tiles()
needs_tiles = pytest.mark.skipif(TILES != "amx", reason="this CPU has no AMX-BF16 tiles")

#: (equation, extents): plain and transposed operands, batches, D's fastest labels from B
#: (written as D^T = B^T A^T), sums longer than one chunk of k (1024), more columns than one
#: packed block of B, extents that fill no whole tile, and GEMVs (one side of 1: no tiles,
#: rows of A dotted four at a time, or its columns added into 256 rows' sums).
CASES: dict[str, tuple[str, dict[str, int]]] = {
    "dense_layer": ("tk,nk->tn", {"t": 70, "k": 48, "n": 40}),
    "row_major_b": ("ik,kj->ij", {"i": 33, "k": 65, "j": 47}),
    "transposed_a": ("ki,kj->ij", {"i": 37, "k": 70, "j": 29}),
    "d_transposed": ("ij,jk->ki", {"i": 50, "j": 70, "k": 30}),
    "attention": ("bhqd,bhkd->bhqk", {"b": 2, "h": 3, "q": 40, "k": 33, "d": 16}),
    "long_sum": ("ik,kj->ij", {"i": 20, "k": 2100, "j": 18}),
    "wide": ("ik,kj->ij", {"i": 17, "k": 3000, "j": 700}),
    "merged_labels": ("abc,cd->dba", {"a": 5, "b": 6, "c": 70, "d": 9}),
    "one_row": ("k,kj->j", {"k": 40, "j": 50}),
    "matvec": ("nk,k->n", {"n": 301, "k": 77}),
    "matvec_columns": ("kn,k->n", {"n": 530, "k": 45}),
    "batched_matvec": ("eoq,eq->oe", {"e": 3, "o": 43, "q": 290}),
    "vecmat_strided": ("k,nk->n", {"n": 20, "k": 33}),
    "tiny": ("ik,kj->ij", {"i": 1, "k": 1, "j": 1}),
    "sums_in_other_orders": ("ikl,lkj->ij", {"i": 21, "k": 6, "l": 11, "j": 19}),
    "a_copied": ("kil,klj->ij", {"i": 23, "k": 5, "l": 13, "j": 17}),
    # the vectors compute only the rows and columns that exist: 8 or 16 rows at a time, one
    # panel of 16 columns or two
    "few_rows_and_columns": ("ik,kj->ij", {"i": 10, "k": 40, "j": 13}),
    "rows_past_a_half": ("ik,kj->ij", {"i": 41, "k": 35, "j": 16}),
    "one_column_past_a_panel": ("ik,kj->ij", {"i": 25, "k": 33, "j": 17}),
}


def _data(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    return rng.integers(-8, 9, shape).astype(dtype)


def _shape(word: str, ext: dict[str, int]) -> tuple[int, ...]:
    return tuple(ext[x] for x in word)


@pytest.fixture(params=[True, "avx512_bf16", False], ids=["tiles", "bf16_vectors", "f32_gemm"])
def tiles(request: pytest.FixtureRequest) -> Iterator[bool]:
    """Run on the AMX tiles, on AVX512-BF16 vectors (the same kernels without the tiles, as on
    CPUs that lack them) and with both forbidden (the F32 GEMM), where the CPU has them."""
    if request.param is True and TILES != "amx":
        pytest.skip("this CPU has no AMX-BF16 tiles")
    if request.param == "avx512_bf16" and not TILES:
        pytest.skip("this CPU has no AVX512-BF16")
    got = program.bf16_tiles(request.param)
    clear_plan_cache()  # plans decide their route when built
    yield bool(got)
    program.bf16_tiles(True)
    clear_plan_cache()


def _run(eq: str, a: np.ndarray, b: np.ndarray, c: np.ndarray | None, d: np.ndarray,
         alpha: float, beta: float) -> Any:
    la, rest = eq.split(",")
    lb, ld = rest.split("->")
    with Handle(backend="blas") as h:
        cinfo = TensorInfo.from_array(d if c is None else c)
        plan = TensorProduct(h, TensorInfo.from_array(a), la, TensorInfo.from_array(b), lb,
                             cinfo, ld, TensorInfo.from_array(d), ld)
        return plan.execute(alpha, a, b, beta, c, d)


def _want(eq: str, a: np.ndarray, b: np.ndarray, c: np.ndarray | None, alpha: float,
          beta: float, dtype: Any) -> np.ndarray:
    exact = alpha * np.einsum(eq, a.astype(np.float64), b.astype(np.float64))
    if c is not None and beta != 0:
        exact = exact + beta * c.astype(np.float64)
    return np.asarray(exact).astype(dtype)


F16 = np.dtype(np.float16)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("d_type", [BF16, np.dtype(np.float32), F16],
                         ids=["d_bf16", "d_f32", "d_f16"])
@pytest.mark.parametrize("c_type", [None, BF16, np.dtype(np.float32), np.dtype(np.float64)],
                         ids=["no_c", "c_bf16", "c_f32", "c_f64"])
@pytest.mark.parametrize("in_type", ["bf16", "f16_wide_a", "f16_wide_b"])
def test_products_equal_numpy(name: str, d_type: Any, c_type: Any, in_type: str,
                              tiles: bool) -> None:
    eq, ext = CASES[name]
    rng = np.random.default_rng(abs(hash((name, str(d_type), str(c_type)))) % 2**32)
    la, rest = eq.split(",")
    lb, ld = rest.split("->")
    if in_type != "bf16":  # one side with 10 significant bits: its lo parts are not all zero
        wide = rng.integers(-1023, 1024, _shape(la if in_type == "f16_wide_a" else lb, ext))
        narrow = rng.integers(-4, 5, _shape(lb if in_type == "f16_wide_a" else la, ext))
        a, b = (wide, narrow) if in_type == "f16_wide_a" else (narrow, wide)
        a, b = a.astype(F16), b.astype(F16)
    else:
        a, b = _data(rng, _shape(la, ext), BF16), _data(rng, _shape(lb, ext), BF16)
    c = None if c_type is None else _data(rng, _shape(ld, ext), c_type)
    d = np.full(_shape(ld, ext), np.nan, d_type)
    beta = 0.0 if c is None else -2.0
    status = _run(eq, a, b, c, d, 0.5, beta)
    np.testing.assert_array_equal(d, _want(eq, a, b, c, 0.5, beta, d_type))
    # an F64 C makes F64 the compute type (SPEC: the widest), which the tiles do not sum in
    assert ("F32 sums" in status.algorithm) == (tiles and c_type != np.float64)


@pytest.mark.parametrize("name", ["dense_layer", "attention", "d_transposed"])
def test_c_is_d(name: str, tiles: bool) -> None:
    """In-place accumulation (C is D): the tiles write an F32 temporary, then the epilogue."""
    eq, ext = CASES[name]
    rng = np.random.default_rng(7)
    la, rest = eq.split(",")
    lb, ld = rest.split("->")
    a, b = _data(rng, _shape(la, ext), BF16), _data(rng, _shape(lb, ext), BF16)
    d = _data(rng, _shape(ld, ext), BF16)
    want = _want(eq, a, b, d, 0.75, 0.5, BF16)
    _run(eq, a, b, d, d, 0.75, 0.5)
    np.testing.assert_array_equal(d, want)


def test_strided_operands(tiles: bool) -> None:
    """Every operand a strided, offset view (no unit stride along the GEMM's rows)."""
    rng = np.random.default_rng(3)
    a = _data(rng, (90, 70), BF16)[::2, 3:]  # (45, 67)
    b = _data(rng, (80, 60), BF16)[5:72, ::3].T  # (20, 67), unit stride along neither
    c = _data(rng, (90, 50), np.float32)[::2, 1:21]
    d_buf = np.full((90, 60), np.nan, BF16)
    d = d_buf[::2, 10:30]
    _run("ik,jk->ij", a, b, c, d, 1.0, 1.0)
    np.testing.assert_array_equal(d, _want("ik,jk->ij", a, b, c, 1.0, 1.0, BF16))
    untouched = np.ones(d_buf.shape, bool)
    untouched[::2, 10:30] = False
    assert np.isnan(d_buf[untouched].astype(np.float32)).all()  # nothing written around D


def test_an_operand_whose_batch_runs_fastest_is_copied_in_batch_order(
        tiles: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """B's batch label k is its fastest (2 bytes apart): over 1 MiB, the tiles read a copy in
    batch order and the result is exact; a small B is read where it lies."""
    rng = np.random.default_rng(8)
    copies: list[tuple[int, ...]] = []
    real = blas.BlasPlan._copied

    def spy(x: np.ndarray, perm: tuple[int, ...], threads: int | None) -> np.ndarray:
        copies.append(x.shape)
        return real(x, perm, threads)

    monkeypatch.setattr(blas.BlasPlan, "_copied", staticmethod(spy))
    eq = "qtkp,tqegk->pgek"
    for ext, copied in (({"q": 15, "t": 16, "k": 20, "p": 10, "e": 22, "g": 63}, True),
                        ({"q": 3, "t": 4, "k": 6, "p": 10, "e": 5, "g": 7}, False)):
        la, rest = eq.split(",")
        lb, ld = rest.split("->")
        a, b = _data(rng, _shape(la, ext), BF16), _data(rng, _shape(lb, ext), BF16)
        d = np.full(_shape(ld, ext), np.nan, BF16)
        copies.clear()
        _run(eq, a, b, None, d, 1.0, 0.0)
        np.testing.assert_array_equal(d, _want(eq, a, b, None, 1.0, 0.0, BF16))
        assert (b.nbytes > blas.BATCH_INTERLEAVED_BYTES) == copied
        if tiles:
            assert (b.shape in copies) == copied  # (A is copied either way: its sums' order)


def test_beta_zero_ignores_nan_in_c(tiles: bool) -> None:
    rng = np.random.default_rng(4)
    a, b = _data(rng, (40, 50), BF16), _data(rng, (50, 30), BF16)
    c = np.full((40, 30), np.nan, BF16)
    d = np.empty((40, 30), BF16)
    _run("ik,kj->ij", a, b, c, d, 2.0, 0.0)
    np.testing.assert_array_equal(d, _want("ik,kj->ij", a, b, None, 2.0, 0.0, BF16))


def test_special_values(tiles: bool) -> None:
    """NaN and infinities go through the products and the rounding into BF16."""
    a = np.ones((32, 64), BF16)
    b = np.ones((64, 32), BF16)
    a[0, 0] = np.nan
    a[1, :] = np.inf
    b[:, 2] = -np.inf
    d = np.empty((32, 32), BF16)
    _run("ik,kj->ij", a, b, None, d, 1.0, 0.0)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(d.astype(np.float64), want)  # NaN where NumPy's, same infinities


def test_rounding_to_nearest_even() -> None:
    """D = alpha A B rounded once into BF16, ties to even (above 256 BF16 skips integers)."""
    rng = np.random.default_rng(5)
    a = rng.integers(0, 120, (48, 64)).astype(BF16)
    b = rng.integers(0, 120, (64, 40)).astype(BF16)
    d = np.empty((48, 40), BF16)
    _run("ik,kj->ij", a, b, None, d, 1.0, 0.0)
    exact = a.astype(np.float64) @ b.astype(np.float64)  # exact in F32 (< 2**24)
    np.testing.assert_array_equal(d, exact.astype(np.float32).astype(BF16))


@needs_tiles
def test_subnormal_inputs_leave_the_tiles() -> None:
    """The tiles read subnormal BF16 numbers as zero: such products take the F32 GEMM."""
    a = np.ones((40, 64), BF16)
    b = np.ones((64, 30), BF16)
    a[3, :] = 0
    a[3, 5] = np.float32(2.0**-130)  # subnormal in BF16 (and in F32)
    b[5, :] = np.float32(2.0**100)
    d = np.empty((40, 30), np.float32)
    status = _run("ik,kj->ij", a, b, None, d, 1.0, 0.0)
    np.testing.assert_array_equal(d, (a.astype(np.float64) @ b.astype(np.float64)).astype(
        np.float32))
    assert (d[3] == np.float32(2.0**-30)).all()  # the tiles would have given 0
    assert "AMX tiles" in status.algorithm  # the plan's route; this run fell back


@needs_tiles
def test_kernel_declines_what_it_does_not_take() -> None:
    a = np.ones((1, 4, 5), BF16)
    b = np.ones((1, 5, 3), BF16)
    assert program.bf16_gemm(a, b, np.empty((1, 4, 3), np.float64)) is None  # F64 D
    assert program.bf16_gemm(a, b, np.empty((1, 4, 4), np.float32)) is None  # wrong shape
    out = np.empty((1, 4, 3), np.float32)
    assert program.bf16_gemm(a, b, out) is not None
    np.testing.assert_array_equal(out, np.full((1, 4, 3), 5.0))


@pytest.mark.parametrize("eq", ["nk,k->n", "k,nk->n", "kn,k->n"])
def test_strided_matvec(eq: str, tiles: bool) -> None:
    """GEMVs on views with no unit stride: every path of the GEMV, numbers one at a time."""
    rng = np.random.default_rng(6)
    mat = _data(rng, (160, 150), BF16)[::2, ::3]  # (80, 50), strided both ways
    vec = _data(rng, (400,), BF16)[::4][:mat.shape[0] if eq == "kn,k->n" else mat.shape[1]]
    a, b = (vec, mat) if eq.startswith("k,") else (mat, vec)
    n = mat.shape[1] if eq == "kn,k->n" else mat.shape[0]
    c = _data(rng, (2 * n,), np.float32)[::2]
    d_buf = np.full(3 * n, np.nan, BF16)
    d = d_buf[::3]
    _run(eq, a, b, c, d, 0.5, 2.0)
    np.testing.assert_array_equal(d, _want(eq, a, b, c, 0.5, 2.0, BF16))
    assert np.isnan(d_buf[1::3].astype(np.float32)).all()  # nothing written between


def test_f16_infinities_leave_the_tiles(tiles: bool) -> None:
    """An F16 infinity would meet the other operand's lo part of 0 (a NaN): F32 GEMM then."""
    a = np.ones((40, 64), F16)
    b = np.full((64, 30), 3, F16)
    a[3, 5] = np.inf
    b[7, 2] = -np.inf
    d = np.empty((40, 30), F16)
    _run("ik,kj->ij", a, b, None, d, 1.0, 0.0)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(d.astype(np.float64), want)  # inf, -inf and NaN as NumPy


def test_threads_share_one_plan(tiles: bool, in_threads: Callable[..., None]) -> None:
    """16 threads executing one plan at once (each its own D) get the right numbers."""
    rng = np.random.default_rng(8)
    a = _data(rng, (96, 200), BF16)
    bs = [_data(rng, (120, 200), BF16) for _ in range(16)]
    ds = [np.empty((96, 120), BF16) for _ in range(16)]
    with Handle(backend="blas") as h:
        info = TensorInfo.from_array(ds[0])
        plan = TensorProduct(h, TensorInfo.from_array(a), "ik", TensorInfo.from_array(bs[0]),
                             "jk", info, "ij", info, "ij")

        def work(i: int) -> None:
            for _ in range(5):
                plan.execute(1.0, a, bs[i], 0.0, None, ds[i])

        in_threads(work)
    for b, d in zip(bs, ds, strict=True):
        np.testing.assert_array_equal(d, _want("ik,jk->ij", a, b, None, 1.0, 0.0, BF16))


#: Products shared out over many workers: whole batch elements, blocks of rows, of columns,
#: or a grid of both (each worker packs its block's rows of A and columns of B), GEMVs.
SHARED: dict[str, tuple[str, dict[str, int]]] = {
    "square": ("ik,kj->ij", {"i": 300, "k": 256, "j": 290}),
    "tall": ("ik,kj->ij", {"i": 1100, "k": 40, "j": 70}),
    "wide": ("ik,kj->ij", {"i": 40, "k": 600, "j": 1000}),
    "few_batches": ("bik,bkj->bij", {"b": 3, "i": 130, "k": 256, "j": 200}),
    "batches": ("bik,bjk->bij", {"b": 40, "i": 33, "k": 64, "j": 50}),
    "matvec": ("nk,k->n", {"n": 5000, "k": 300}),
}


@pytest.mark.parametrize("threads", [3, 6, 16])
@pytest.mark.parametrize("name", sorted(SHARED))
def test_products_shared_over_many_workers(name: str, threads: int, tiles: bool) -> None:
    """Products large enough to share out, on 3, 6 and 16 of the BLAS's threads (more than
    this machine may have cores): every cut of D gives the exact numbers."""
    from threadpoolctl import threadpool_limits

    eq, ext = SHARED[name]
    la, rest = eq.split(",")
    lb, ld = rest.split("->")
    rng = np.random.default_rng(threads)
    a, b = _data(rng, _shape(la, ext), BF16), _data(rng, _shape(lb, ext), BF16)
    c = _data(rng, _shape(ld, ext), np.float32)
    with threadpool_limits(threads, user_api="blas"):
        d = np.full(_shape(ld, ext), np.nan, np.float32)
        status = _run(eq, a, b, c, d, 2.0, -1.0)
    assert tiles is ("BF16 products" in status.algorithm), status.algorithm
    np.testing.assert_array_equal(d, _want(eq, a, b, c, 2.0, -1.0, np.float32))
