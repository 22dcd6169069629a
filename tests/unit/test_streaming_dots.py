"""Real batches of dots whose sums run contiguous in both operands: a loop nest at any size,
each dot summed in vector registers.

Integer data keeps every sum exact in F32 and F64, so results equal numpy.einsum in float64.
"""

from __future__ import annotations

import numpy as np
import pytest

from pytapp import Handle, TensorInfo, TensorProduct
from pytapp.kernels import program

pytestmark = pytest.mark.skipif(not program.available(), reason="the extension is not built")

REAL = [np.float32, np.float64]


def _ints(shape: tuple[int, ...], dtype: type, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-8, 9, shape).astype(dtype)


def _run(equation: str, a: np.ndarray, b: np.ndarray, c: np.ndarray | None,
         alpha: float = 1.0, beta: float = 0.0) -> tuple[np.ndarray, str]:
    (la, lb), ld = equation.split("->")[0].split(","), equation.split("->")[1]
    extents = dict(zip(la, a.shape, strict=True))
    d = np.full([extents[x] for x in ld], np.nan, a.dtype)
    plan = TensorProduct(Handle("blas"), TensorInfo.from_array(a), la, TensorInfo.from_array(b),
                         lb, None if c is None else TensorInfo.from_array(c),
                         None if c is None else ld, TensorInfo.from_array(d), ld)
    plan.execute(alpha, a, b, beta, c, d)
    return d, plan.algorithm


def _want(equation: str, a: np.ndarray, b: np.ndarray, c: np.ndarray | None, alpha: float,
          beta: float) -> np.ndarray:
    out = alpha * np.einsum(equation, a.astype(np.float64), b.astype(np.float64))
    return out if c is None else out + beta * c.astype(np.float64)


@pytest.mark.parametrize("dtype", REAL)
@pytest.mark.parametrize(("equation", "shape"), [
    ("bnd,bnd->bn", (16, 40, 512)),      # one BLAS dot per element of D before
    ("nd,nd->n", (300, 96)),
    ("bnd,bnd->bn", (8, 1100, 72)),      # blas's multiply-reduce pass before (2M+ terms)
    ("bncd,bncd->bn", (6, 20, 9, 40)),   # two summed labels, one run of 360
    ("bnd,bnd->bn", (4, 30, 1000)),      # a run that is no multiple of the vector lanes
])
def test_streaming_dots_run_in_the_loop_nest_exactly(dtype: type, equation: str,
                                                     shape: tuple[int, ...]) -> None:
    a, b = _ints(shape, dtype, 1), _ints(shape, dtype, 2)
    d, algorithm = _run(equation, a, b, None)
    assert algorithm.startswith("compiled: loop nest"), algorithm
    np.testing.assert_array_equal(d.astype(np.float64), _want(equation, a, b, None, 1.0, 0.0))
    c = _ints(d.shape, dtype, 3)
    d, _ = _run(equation, a, b, c, alpha=2.0, beta=-3.0)
    np.testing.assert_array_equal(d.astype(np.float64), _want(equation, a, b, c, 2.0, -3.0))


@pytest.mark.parametrize("dtype", REAL)
@pytest.mark.parametrize(("equation", "shape", "route"), [
    ("bnd,bnd->nb", (64, 300, 120), "kernel"),          # D transposed: dots a page apart
    ("bnd,bnd->bn", (32, 64, 16), "compiled: loop"),    # runs of 16: the strided sums
])
def test_other_batched_dots_keep_their_routes(dtype: type, equation: str,
                                              shape: tuple[int, ...], route: str) -> None:
    a, b = _ints(shape, dtype, 4), _ints(shape, dtype, 5)
    d, algorithm = _run(equation, a, b, None)
    assert algorithm.startswith(route), algorithm
    np.testing.assert_array_equal(d.astype(np.float64), _want(equation, a, b, None, 1.0, 0.0))


@pytest.mark.parametrize("dtype", REAL)
def test_dots_of_strided_runs_still_sum_exactly(dtype: type) -> None:
    # every second number of the runs: not contiguous, the strided loop sums them
    a, b = _ints((8, 30, 400), dtype, 6), _ints((8, 30, 400), dtype, 7)
    d, _ = _run("bnd,bnd->bn", a[:, :, ::2], b[:, :, ::2], None)
    np.testing.assert_array_equal(d.astype(np.float64),
                                  _want("bnd,bnd->bn", a[:, :, ::2], b[:, :, ::2], None, 1.0, 0.0))


@pytest.mark.parametrize("dtype", REAL)
@pytest.mark.parametrize(("la", "shape"), [("", ()), ("i", (100,)), ("ij", (3, 80))])
def test_whole_dots_and_scalar_products_in_the_loop_nest(dtype: type, la: str,
                                                         shape: tuple[int, ...]) -> None:
    # D without labels: one dot (in vector lanes from 64 terms) or, with no label at all, one
    # product of two numbers
    a, b = _ints(shape, dtype, 8), _ints(shape, dtype, 9)
    d = np.full((), np.nan, dtype)
    plan = TensorProduct(Handle("blas"), TensorInfo.from_array(a), la, TensorInfo.from_array(b),
                         la, None, None, TensorInfo.from_array(d), "")
    assert plan.algorithm.startswith("compiled: loop nest"), plan.algorithm
    plan.execute(2.0, a, b, 0.0, None, d)
    assert float(d) == 2.0 * float(np.sum(a.astype(np.float64) * b.astype(np.float64)))
