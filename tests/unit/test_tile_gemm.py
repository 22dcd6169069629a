"""The compiled executor's register-tiled real GEMMs (``_tilegemm.c``) against numpy.einsum.

Every case runs a GEMM on views through the blas backend with alpha (and beta with C), on
small-integer data (every sum exact in F32 and F64), once on the tiles and once on the BLAS;
both must equal numpy.einsum in float64. ``tile_count`` tells whether the tiles ran. Each set
of vectors the CPU has (AVX-512F, AVX2) runs its own shapes, which cover every tile height and
panel width, masked columns, short sums and long ones (cut in blocks), operands read
transposed, a transposed B copied into rows (by one thread, by all, or by each for its own
columns), padded rows, and the shares over the BLAS's pool by rows and by columns. Complex
tiles (AVX-512) run on Gaussian integers with complex alpha and beta, A and B conjugated or not.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from pytapp import ElementOp, Handle, TappError, TensorInfo, TensorProduct
from pytapp.kernels import program

compiled = pytest.mark.skipif(not (program.available() and program.blas_available()),
                              reason="the compiled extension pytapp._cexec was not built")


def _runs(isa: str) -> bool:
    runs = program.available() and program.blas_available() and program.use_tiles(isa) == isa
    program.use_tiles(True)
    return runs


#: The sets of vectors the tiles come in, and whether this CPU runs each.
ISAS = {isa: _runs(isa) for isa in ("avx512", "avx2")}


def _needs(isa: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(not ISAS[isa], reason=f"no compiled executor, or no {isa} here")


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


def _run(isa: str, equation: str, m: int, n: int, k: int, dtype: type, with_c: bool,
         pad: int = 0) -> int:
    """Run ``equation`` (A, B of 2 labels each, D ``ij``) on the blas backend with the tiles
    of ``isa`` and with none, check both against numpy.einsum; return the tiles' count of the
    first run."""
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
    for on in (isa, False):
        assert program.use_tiles(on) == (on or "")
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


#: Shapes the tiles take, by vectors: (equation, m, n, k, dtype, padding of rows).
TAKEN = {
    "avx512": [  # 16 F32 or 8 F64 lanes; tiles of 12, 8, 7, 6 rows by 1-4 vectors
        ("ik,kj->ij", 25, 16, 170, np.float32, 0),    # one whole vector, tiles of 9, 8, 8 rows
        ("ik,kj->ij", 13, 40, 130, np.float32, 3),    # 3 vectors, the last masked
        ("ik,kj->ij", 1100, 40, 24, np.float32, 0),   # a short sum over many rows
        ("ki,kj->ij", 1024, 64, 64, np.float32, 0),   # A read transposed; rows shared out
        # panels 4, 3, 3, 3; columns shared out; a B of 63 KiB, taken whatever the L2 cache
        ("ik,kj->ij", 65, 200, 81, np.float32, 1),
        ("ki,kj->ij", 280, 34, 200, np.float64, 0),   # panels 3 and 2, the last masked
        ("ik,kj->ij", 7, 8, 300, np.float64, 2),      # one whole F64 vector, 7 rows
        ("ik,kj->ij", 100, 24, 180, np.float64, 0),   # 3 vectors of F64, tiles of 7 rows
        ("ik,kj->ij", 100, 32, 200, np.float32, 0),   # two whole vectors, tiles of 8 rows
        ("ik,kj->ij", 64, 14, 300, np.float64, 1),    # two vectors, the last masked
        ("ik,jk->ij", 200, 48, 130, np.float32, 5),   # B transposed, copied into rows
        ("ik,jk->ij", 200, 48, 400, np.float32, 0),   # the same, copied by every worker
        ("ik,jk->ij", 70, 100, 300, np.float64, 0),   # each worker copies its own columns
        ("ki,jk->ij", 64, 96, 160, np.float64, 0),    # both transposed, B copied
        ("ki,jk->ij", 73, 8, 1663, np.float64, 0),    # one vector: short runs of rows shared
        ("ik,kj->ij", 2, 64, 200, np.float32, 0),     # two rows
        ("ik,kj->ij", 64, 128, 1300, np.float32, 0),  # a long sum in blocks (512, 512, 276)
        ("ki,jk->ij", 96, 40, 1100, np.float64, 1),   # the same, B copied
    ],
    "avx2": [  # 8 F32 or 4 F64 lanes; tiles of 12, 6, 4 rows by 1-3 vectors
        ("ik,kj->ij", 25, 8, 170, np.float32, 0),     # one whole vector, tiles of 9, 8, 8 rows
        ("ik,kj->ij", 13, 20, 130, np.float32, 3),    # 3 vectors, the last masked
        ("ik,kj->ij", 50, 30, 200, np.float32, 0),    # panels 2 and 2, tiles of 6 rows
        ("ik,kj->ij", 1100, 40, 24, np.float32, 0),   # a short sum over many rows
        ("ki,kj->ij", 1024, 64, 64, np.float32, 0),   # A read transposed; rows shared out
        ("ik,kj->ij", 65, 200, 81, np.float32, 1),    # columns shared out (B of 63 KiB)
        ("ki,kj->ij", 280, 18, 200, np.float64, 0),   # panels 3 and 2, the last masked
        ("ik,kj->ij", 7, 4, 300, np.float64, 2),      # one whole F64 vector, 7 rows
        ("ik,kj->ij", 50, 16, 200, np.float32, 0),    # two whole vectors, tiles of 6 rows
        ("ik,kj->ij", 30, 6, 300, np.float64, 1),     # two vectors, the last masked
        ("ik,jk->ij", 200, 24, 130, np.float32, 5),   # B transposed, copied into rows
        ("ik,jk->ij", 70, 100, 300, np.float64, 0),   # each worker copies its own columns
        ("ki,jk->ij", 96, 40, 1100, np.float64, 1),   # a long sum in blocks, B copied
        ("ik,kj->ij", 64, 128, 1300, np.float32, 0),  # a long sum in blocks (512, 512, 276)
    ],
}
#: Shapes every set of vectors leaves to the BLAS.
LEFT = [
    ("ik,kj->ij", 64, 5, 256, np.float32),     # 5 of 8 or 16 lanes would work
    ("ik,kj->ij", 64, 11, 256, np.float32),    # a single masked vector (or 11 of 16 lanes)
    ("ik,kj->ij", 64, 64, 32, np.float32),     # a short sum of a small product
    ("ik,kj->ij", 64, 200, 2048, np.float32),  # a B of 1.6 MB, too wide to cut its sum
    ("ik,jk->ij", 200, 128, 8200, np.float32),  # a transposed B too large to copy
    ("ik,jk->ij", 16, 64, 256, np.float64),    # a transposed B for too few rows to copy it
]


@pytest.mark.parametrize("with_c", [False, True])
@pytest.mark.parametrize(("isa", "equation", "m", "n", "k", "dtype", "pad"), [
    pytest.param(isa, *case, marks=_needs(isa)) for isa in ISAS for case in TAKEN[isa]])
def test_tiled_gemms_match_numpy(isa: str, equation: str, m: int, n: int, k: int, dtype: type,
                                 pad: int, with_c: bool) -> None:
    assert _run(isa, equation, m, n, k, dtype, with_c, pad) == 1


@pytest.mark.parametrize("isa", [pytest.param(isa, marks=_needs(isa)) for isa in ISAS])
@pytest.mark.parametrize(("equation", "m", "n", "k", "dtype"), LEFT)
def test_gemms_the_tiles_leave_to_the_blas(isa: str, equation: str, m: int, n: int, k: int,
                                           dtype: type) -> None:
    assert _run(isa, equation, m, n, k, dtype, with_c=True) == 0


def test_use_tiles_reports_what_runs() -> None:
    assert program.use_tiles(False) == ""
    assert program.use_tiles(True) in ("avx512", "avx2", "")
    assert program.use_tiles("avx2") in ("avx2", "")
    with pytest.raises(TappError, match="use_tiles takes"):
        program.use_tiles("sse")  # type: ignore[arg-type]


@compiled
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


#: Complex shapes the AVX-512 tiles take (4 C128 or 8 C64 lanes; tiles of 12, 6, 4 rows by
#: 1-3 vectors): (equation, m, n, k, dtype, A conjugated, B conjugated).
COMPLEX = [
    ("ik,kj->ij", 25, 4, 170, np.complex128, False, False),   # one whole vector, 9, 8, 8 rows
    ("ik,kj->ij", 30, 8, 40, np.complex128, False, False),    # two vectors, a short sum
    ("ki,kj->ij", 64, 11, 300, np.complex128, True, False),   # 3 vectors, the last masked; A^H
    ("ik,kj->ij", 50, 22, 130, np.complex64, False, False),   # 3 C64 vectors, the last masked
    ("ki,kj->ij", 1024, 16, 64, np.complex64, True, False),   # A^H; rows shared out
    ("ik,jk->ij", 100, 24, 150, np.complex128, False, True),  # B^H copied into rows
    ("ki,jk->ij", 70, 40, 300, np.complex64, True, True),     # both, columns shared out
    ("ik,kj->ij", 40, 12, 1100, np.complex128, False, False),  # a long sum in blocks
]


@pytest.mark.parametrize(("equation", "m", "n", "k", "dtype", "conj_a", "conj_b"), [
    pytest.param(*case, marks=_needs("avx512")) for case in COMPLEX])
def test_complex_tiles_match_numpy(equation: str, m: int, n: int, k: int, dtype: type,
                                   conj_a: bool, conj_b: bool) -> None:
    (la, lb), ld = equation.split("->")[0].split(","), equation.split("->")[1]
    dims = {"i": m, "j": n, "k": k}
    rng = np.random.default_rng(m)

    def gaussian_ints(labels: str) -> np.ndarray:
        shape = tuple(dims[ch] for ch in labels)
        return (rng.integers(-4, 5, shape) + 1j * rng.integers(-4, 5, shape)).astype(dtype)

    a, b, c = gaussian_ints(la), gaussian_ints(lb), gaussian_ints(ld)
    alpha, beta = 2 - 1j, 1 + 2j
    want = alpha * np.einsum(equation, np.conj(a) if conj_a else a,
                             np.conj(b) if conj_b else b) + beta * c.astype(np.complex128)
    ops = {"op_a": ElementOp.CONJUGATE if conj_a else ElementOp.IDENTITY,
           "op_b": ElementOp.CONJUGATE if conj_b else ElementOp.IDENTITY}
    counts = []
    for on in ("avx512", False):
        program.use_tiles(on)
        d = np.full((m, n), np.nan, dtype=dtype)
        plan = TensorProduct(Handle("blas"), TensorInfo.from_array(a), la,
                             TensorInfo.from_array(b), lb, TensorInfo.from_array(c), ld,
                             TensorInfo.from_array(d), ld, **ops)
        before = program.tile_count()
        plan.execute(alpha, a, b, beta, c, d)
        counts.append(program.tile_count() - before)
        np.testing.assert_array_equal(d.astype(np.complex128), want)
    assert counts == [1, 0]


@pytest.mark.skipif(not ISAS["avx2"], reason="no compiled executor, or no avx2 here")
def test_complex_gemms_are_left_to_the_blas_on_avx2() -> None:
    a = np.ones((64, 300), dtype=np.complex128) * (1 + 2j)
    b = np.ones((300, 16), dtype=np.complex128)
    d = np.empty((64, 16), dtype=np.complex128)
    plan = TensorProduct(Handle("blas"), TensorInfo.from_array(a), "ik", TensorInfo.from_array(b),
                         "kj", None, None, TensorInfo.from_array(d), "ij")
    program.use_tiles("avx2")
    before = program.tile_count()
    plan.execute(1, a, b, 0, None, d)
    assert program.tile_count() == before
    np.testing.assert_array_equal(d, np.full((64, 16), 300 + 600j))
