"""Sums, sum-of-products loops and products split across threads, against NumPy on exact data."""

from __future__ import annotations

import numpy as np
import pytest

import pytapp
from pytapp.backends.threads import parallel_einsum, parallel_multiply, parallel_sum


def _ints(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(-8, 9, shape).astype(np.float64)  # sums of these are exact


@pytest.mark.parametrize(("shape", "axes"), [
    ((40, 30, 20), (1,)),  # a kept axis long enough: slabs of the result
    ((40, 30, 20), (0, 2)),
    ((3, 500), (1,)),  # kept axes too short: the summed axis is cut, partial sums added
    ((700,), (0,)),
    ((50, 60), (0, 1)),  # everything summed
])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_parallel_sum_matches_numpy(shape: tuple[int, ...], axes: tuple[int, ...],
                                    threads: int) -> None:
    rng = np.random.default_rng(4)
    x = _ints(rng, (2 * shape[0], *shape[1:]))[::2]  # a strided view
    got = parallel_sum(x, axes, np.float64, threads=threads, min_bytes=0)
    np.testing.assert_array_equal(got, np.sum(x, axis=axes))


@pytest.mark.parametrize(("eq", "shapes"), [
    ("ij,ij->i", [(1000, 8), (1000, 8)]),  # row-wise dots
    ("kbcd,kd->bc", [(6, 20, 30, 10), (6, 10)]),  # a GEMV-like sum
    ("ij,j->i", [(3, 50), (50,)]),  # the output too short to split
    ("abc,ac->ba", [(40, 3, 7), (40, 7)]),
])
@pytest.mark.parametrize("threads", [1, 2, 4])
def test_parallel_einsum_matches_numpy(eq: str, shapes: list[tuple[int, ...]],
                                       threads: int) -> None:
    rng = np.random.default_rng(6)
    a, b = (_ints(rng, s) for s in shapes)
    want = np.einsum(eq, a, b)
    ins, out_labels = eq.split("->")
    la, lb = ins.split(",")
    index = {ch: i for i, ch in enumerate(sorted(set(la + lb)))}
    parent = np.full((*want.shape[:-1], 2 * want.shape[-1]), 7.0)
    out = parent[..., ::2]  # a strided view: only its elements are written
    parallel_einsum(out, a, [index[c] for c in la], b, [index[c] for c in lb],
                    [index[c] for c in out_labels], threads=threads, min_bytes=0)
    np.testing.assert_array_equal(out, want)
    assert (parent[..., 1::2] == 7.0).all()


@pytest.mark.parametrize(("eq", "shapes"), [
    ("ij,ij->i", [(200_000, 8), (200_000, 8)]),  # large enough to be split
    ("ij,jk->k", [(20_000, 40), (40, 5)]),  # i (longer than a kernel sum) summed alone first
])
def test_blas_products_with_split_reductions(eq: str, shapes: list[tuple[int, ...]],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """blas's own routes (the compiled executor's programs left out) split these sums."""
    from pytapp import product
    from pytapp.backends import threads

    monkeypatch.setattr(product, "compile_product", lambda spec, status: None)
    split = []
    run_parts = threads._run_parts
    monkeypatch.setattr(threads, "_run_parts",
                        lambda *args: (split.append(args[1]), run_parts(*args))[1])
    rng = np.random.default_rng(8)
    ops = [_ints(rng, s) for s in shapes]
    out = np.empty(np.einsum(eq, *ops).shape)
    for _ in range(2):
        out[...] = np.nan
        pytapp.contract(eq, *ops, out=out, backend="blas")
        np.testing.assert_array_equal(out, np.einsum(eq, *ops))
    if threads.default_threads() > 1:
        assert split, "the sum ran on one thread"


@pytest.mark.parametrize(("a_shape", "b_shape"), [
    ((300, 1), (1, 200)),  # an outer product: a repeats along out's rows (einsum's loop)
    ((300, 200), (300, 1)),  # rows scaled
    ((300, 200), (1, 200)),  # columns scaled
    ((30, 1, 16), (1, 40, 16)),  # a Khatri-Rao product
    ((300, 200), (300, 200)),  # a Hadamard product (the ufunc)
])
@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
@pytest.mark.parametrize("threads", [1, 2])
def test_parallel_multiply_matches_numpy(a_shape: tuple[int, ...], b_shape: tuple[int, ...],
                                         dtype: type, threads: int) -> None:
    rng = np.random.default_rng(12)
    a = _ints(rng, a_shape).astype(dtype)
    b = _ints(rng, b_shape).astype(dtype)
    want = a * b
    parent = np.full((2 * want.shape[0], *want.shape[1:]), 7, dtype=dtype)
    out = parent[::2]
    parallel_multiply(a, b, out, threads=threads, min_bytes=0)
    np.testing.assert_array_equal(out, want)
    assert (parent[1::2] == 7).all()
    transposed = np.empty(want.shape[::-1], dtype=dtype).T  # out's fastest axis is its first
    parallel_multiply(a, b, transposed, threads=threads, min_bytes=0)
    np.testing.assert_array_equal(transposed, want)
