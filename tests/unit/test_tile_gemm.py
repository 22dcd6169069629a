"""The compiled executor's register-tiled real GEMMs (``_tilegemm.c``) against numpy.einsum.

Every case runs a GEMM on views through the blas backend with alpha (and beta with C), on
small-integer data (every sum exact in F32 and F64), once on the tiles and once on the BLAS;
both must equal numpy.einsum in float64. ``tile_count`` tells whether the tiles ran: the shapes
cover every tile height and panel width, masked columns, short sums and long ones
(cut in blocks), operands read transposed, a transposed B copied into rows,
padded rows, and the shares over the BLAS's pool by rows and by columns.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from pytapp import Handle, TensorInfo, TensorProduct
from pytapp.kernels import program

tiles_run = pytest.mark.skipif(
    not (program.available() and program.blas_available() and program.use_tiles(True)),
    reason="no compiled executor, or a CPU without AVX-512F: the BLAS runs every GEMM")


@pytest.fixture(autouse=True)
def _tiles_back_on() -> Iterator[None]:
    yield
    program.use_tiles(True)


def _ints(shape: tuple[int, ...], dtype: type, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-4, 5, shape).astype(dtype)


def _padded(x: np.ndarray, pad: int) -> np.ndarray:
    """``x`` as a view of a larger array whose rows are ``pad`` elements longer."""
    wide = np.full((x.shape[0], x.shape[1] + pad), np.nan, dtype=x.dtype)
    wide[:, :x.shape[1]] = x
    return wide[:, :x.shape[1]]


def _run(equation: str, m: int, n: int, k: int, dtype: type, with_c: bool,
         pad: int = 0) -> int:
    """Run ``equation`` (A, B of 2 labels each, D ``ij``) on the blas backend with the tiles
    on and off, check both against numpy.einsum; return the tiles' count of the first run."""
    (la, lb), ld = equation.split("->")[0].split(","), equation.split("->")[1]
    dims = {"i": m, "j": n, "k": k}
    a = _padded(_ints(tuple(dims[c] for c in la), dtype, 1), pad)
    b = _padded(_ints(tuple(dims[c] for c in lb), dtype, 2), pad)
    c = _padded(_ints((m, n), dtype, 3), pad) if with_c else None
    alpha, beta = 2.0, -3.0
    want = alpha * np.einsum(equation, a.astype(np.float64), b.astype(np.float64))
    if c is not None:
        want += beta * c.astype(np.float64)
    counts = []
    for on in (True, False):
        program.use_tiles(on)
        d = _padded(np.full((m, n), np.nan, dtype=dtype), pad)
        plan = TensorProduct(Handle("blas"), TensorInfo.from_array(a), la,
                             TensorInfo.from_array(b), lb,
                             None if c is None else TensorInfo.from_array(c),
                             None if c is None else ld, TensorInfo.from_array(d), ld)
        assert "gemm on strided views" in plan.algorithm, plan.algorithm
        before = program.tile_count()
        plan.execute(alpha, a, b, 0.0 if c is None else beta, c, d)
        counts.append(program.tile_count() - before)
        np.testing.assert_array_equal(d.astype(np.float64), want)
        assert d.base is None or np.isnan(d.base[:, n:]).all()  # nothing written past a row
    assert counts[1] == 0  # switched off: the BLAS ran it
    return counts[0]


@tiles_run
@pytest.mark.parametrize("with_c", [False, True])
@pytest.mark.parametrize(("equation", "m", "n", "k", "dtype", "pad"), [
    ("ik,kj->ij", 25, 16, 70, np.float32, 0),     # one whole vector, tiles of 12 rows: 9, 8, 8
    ("ik,kj->ij", 13, 40, 20, np.float32, 3),     # 3 vectors, the last masked; a short sum
    ("ki,kj->ij", 1024, 64, 64, np.float32, 0),   # A read transposed; rows shared out
    ("ik,kj->ij", 65, 200, 273, np.float32, 1),   # panels 4, 3, 3, 3; columns shared out
    ("ki,kj->ij", 280, 34, 200, np.float64, 0),   # panels 3 and 2, the last masked
    ("ik,kj->ij", 7, 8, 300, np.float64, 2),      # one whole F64 vector, 7 rows
    ("ik,kj->ij", 100, 24, 18, np.float64, 0),    # 3 vectors of F64, tiles of 7 rows
    ("ik,jk->ij", 200, 48, 30, np.float32, 5),    # B transposed, copied into rows
    ("ki,jk->ij", 64, 96, 100, np.float64, 0),    # both transposed, B copied
    ("ik,kj->ij", 2, 64, 64, np.float32, 0),      # two rows
    ("ik,kj->ij", 64, 128, 1300, np.float32, 0),  # a long sum in blocks (512, 512, 276)
    ("ki,jk->ij", 96, 40, 1100, np.float64, 1),   # the same, B copied
])
def test_tiled_gemms_match_numpy(equation: str, m: int, n: int, k: int, dtype: type, pad: int,
                                 with_c: bool) -> None:
    assert _run(equation, m, n, k, dtype, with_c, pad) == 1


@tiles_run
@pytest.mark.parametrize(("equation", "m", "n", "k", "dtype"), [
    ("ik,kj->ij", 64, 5, 32, np.float32),      # 5 of 16 lanes would work
    ("ik,kj->ij", 64, 13, 32, np.float32),     # a single masked vector
    ("ik,kj->ij", 64, 200, 2048, np.float32),  # a B of 1.6 MB, too wide to cut its sum
    ("ik,jk->ij", 200, 128, 8200, np.float32),  # a transposed B too large to copy
    ("ik,jk->ij", 16, 64, 32, np.float64),     # a transposed B for too few rows to copy it
])
def test_gemms_the_tiles_leave_to_the_blas(equation: str, m: int, n: int, k: int,
                                           dtype: type) -> None:
    assert _run(equation, m, n, k, dtype, with_c=True) == 0


def test_use_tiles_reports_what_runs() -> None:
    assert program.use_tiles(False) is False
    assert program.use_tiles(True) in (True, False)


@pytest.mark.skipif(not (program.available() and program.blas_available()),
                    reason="the compiled extension pytapp._cexec was not built")
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize(("batch", "rows"), [(8, 150), (3, 300)])
@pytest.mark.parametrize("with_c", [False, True])
def test_large_batches_of_gemms_shared_out_by_the_executor(dtype: type, batch: int, rows: int,
                                                           with_c: bool) -> None:
    # 2^22 flops or more: 8 GEMMs shared out whole, 3 by rows of D (tiles or BLAS, on one
    # thread each); D's rows padded, C a transposed view
    rng = np.random.default_rng(batch)
    a = rng.integers(-4, 5, (batch, rows, 64)).astype(dtype)
    b = rng.integers(-4, 5, (batch, 64, 48)).astype(dtype)
    if np.dtype(dtype).kind == "c":
        b = b + 1j * rng.integers(-4, 5, b.shape).astype(dtype)
    c = rng.integers(-4, 5, (batch, 48, rows)).astype(dtype).transpose(0, 2, 1) if with_c else None
    d = np.full((batch, rows, 50), np.nan, dtype=dtype)[:, :, :48]
    plan = TensorProduct(Handle("blas"), TensorInfo.from_array(a), "bik",
                         TensorInfo.from_array(b), "bkj",
                         None if c is None else TensorInfo.from_array(c),
                         None if c is None else "bij", TensorInfo.from_array(d), "bij")
    assert plan.algorithm.startswith(f"compiled: {batch} gemms on strided views"), plan.algorithm
    alpha, beta = 2.0, -3.0
    plan.execute(alpha, a, b, 0.0 if c is None else beta, c, d)
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    want = alpha * np.einsum("bik,bkj->bij", a.astype(wide), b.astype(wide))
    if c is not None:
        want += beta * c.astype(wide)
    np.testing.assert_array_equal(d.astype(wide), want)
    assert np.isnan(d.base[:, :, 48:]).all()
