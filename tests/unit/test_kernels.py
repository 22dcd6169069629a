"""The compiled kernels against NumPy on every layout class: permuted, negative, zero, padded.

Each example builds operands as views with random permutations, reversed modes, padding
(every other element) and broadcast (zero-stride) modes, runs a kernel, and compares with the
same expression evaluated by NumPy in complex128/float64. Outputs are views too, inside a
canary-filled parent that must stay untouched outside the view.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pytapp
from pytapp import kernels

pytestmark = pytest.mark.skipif(not kernels.available(), reason="numba is not installed")

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    x = rng.uniform(-1, 1, shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.uniform(-1, 1, shape)
    return x.astype(dtype)


def _layout(rng: np.random.Generator, values: np.ndarray, pad: bool, flip: bool) -> np.ndarray:
    """``values`` stored under a random layout: permuted, padded, reversed modes."""
    perm = rng.permutation(values.ndim)
    shape = tuple(values.shape[i] for i in perm)
    parent = np.empty(tuple(2 * e if pad else e for e in shape), values.dtype)
    view = parent[tuple(slice(None, None, 2) if pad else slice(None) for _ in shape)] if (
        shape) else parent[...]
    if flip and shape:
        view = view[tuple(slice(None, None, -1) if rng.random() < 0.5 else slice(None)
                          for _ in shape)]
    out = view.transpose(np.argsort(perm))
    out[...] = values
    return out


@st.composite
def problems(draw: st.DrawFn) -> dict[str, Any]:
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.integers(1, 5)) for _ in range(ndim))
    nsum = draw(st.integers(1, 3))
    summed = tuple(draw(st.integers(1, 5)) for _ in range(nsum))
    return {"shape": shape, "summed": summed, "dtype": draw(st.sampled_from(DTYPES)),
            "seed": draw(st.integers(0, 2**31)), "pad": draw(st.booleans()),
            "flip": draw(st.booleans()), "has_y": draw(st.booleans()),
            "has_c": draw(st.booleans()), "broadcast": draw(st.booleans()),
            "conj": draw(st.tuples(*[st.booleans()] * 4)), "alpha": draw(st.sampled_from(
                [1.0, -0.5, 2.0])), "beta": draw(st.sampled_from([0.0, 1.0, 0.75])),
            "path": draw(st.sampled_from(["numpy", "compiled", "stream"]))}


@contextmanager
def _path(path: str | bool) -> Iterator[None]:
    """Which implementation runs: ``numpy`` (what small operands take), ``compiled`` (the
    kernels' regular loops), or ``stream`` (reductions walking x in its memory order)."""
    saved = kernels.SMALL_WORK, kernels.STREAM_MAX_OUT
    compiled = path in ("compiled", "stream", True)
    kernels.SMALL_WORK = 0 if compiled else 1 << 62
    kernels.STREAM_MAX_OUT = 1 << 62 if path == "stream" else 0
    try:
        yield
    finally:
        kernels.SMALL_WORK, kernels.STREAM_MAX_OUT = saved


def _op(x: np.ndarray, flag: bool) -> np.ndarray:
    return np.conj(x) if flag else x


def _tol(dtype: Any) -> float:
    return 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-12


@settings(max_examples=150, deadline=None, derandomize=True)
@given(problems())
def test_fused_elementwise(p: dict[str, Any]) -> None:
    rng = np.random.default_rng(p["seed"])
    shape, dtype = p["shape"], p["dtype"]
    xv = _values(rng, shape, dtype)
    x = _layout(rng, xv, p["pad"], p["flip"])
    yv = _values(rng, shape, dtype)
    y = _layout(rng, yv, p["pad"], p["flip"]) if p["has_y"] else None
    if y is not None and p["broadcast"] and shape:  # a zero-stride mode in y
        axis = int(rng.integers(len(shape)))
        y = np.broadcast_to(np.take(y, [0], axis=axis), shape)
        yv = np.asarray(y).copy()
    cv = _values(rng, shape, dtype)
    c = _layout(rng, cv, p["pad"], p["flip"]) if p["has_c"] else None
    out = _layout(rng, np.zeros(shape, dtype), False, p["flip"])
    cx, cy, cc, co = p["conj"] if np.dtype(dtype).kind == "c" else (False,) * 4
    with _path(p["path"]):
        kernels.fused(out, x, y, c, alpha=p["alpha"], beta=p["beta"], conj_x=cx, conj_y=cy,
                      conj_c=cc, conj_out=co)
    want = p["alpha"] * _op(xv.astype(np.complex128), cx)
    if y is not None:
        want = want * _op(yv.astype(np.complex128), cy)
    if c is not None:
        want = want + p["beta"] * _op(cv.astype(np.complex128), cc)
    want = _op(want, co)
    np.testing.assert_allclose(np.asarray(out).astype(np.complex128), want,
                               rtol=_tol(dtype), atol=_tol(dtype))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(problems())
def test_fused_reduce(p: dict[str, Any]) -> None:
    rng = np.random.default_rng(p["seed"])
    shape, summed, dtype = p["shape"], p["summed"], p["dtype"]
    full = shape + summed
    xv = _values(rng, full, dtype)
    x = _layout(rng, xv, p["pad"], p["flip"])
    yv = _values(rng, full, dtype)
    y = _layout(rng, yv, p["pad"], p["flip"]) if p["has_y"] else None
    if y is not None and p["broadcast"]:  # GEMV-like: y does not vary along the kept modes
        y = np.broadcast_to(y[(0,) * len(shape)], full)
        yv = np.asarray(y).copy()
    cv = _values(rng, shape, dtype)
    c = _layout(rng, cv, p["pad"], p["flip"]) if p["has_c"] else None
    out = _layout(rng, np.zeros(shape, dtype), False, p["flip"])
    cx, cy, cc, co = p["conj"] if np.dtype(dtype).kind == "c" else (False,) * 4
    with _path(p["path"]):
        kernels.reduce(out, x, y, c, alpha=p["alpha"], beta=p["beta"], conj_x=cx, conj_y=cy,
                       conj_c=cc, conj_out=co)
    prod = _op(xv.astype(np.complex128), cx)
    if y is not None:
        prod = prod * _op(yv.astype(np.complex128), cy)
    want = p["alpha"] * prod.sum(axis=tuple(range(len(shape), len(full))))
    if c is not None:
        want = want + p["beta"] * _op(cv.astype(np.complex128), cc)
    want = _op(want, co)
    n = int(np.prod(summed))
    np.testing.assert_allclose(np.asarray(out).astype(np.complex128), want,
                               rtol=_tol(dtype) * n, atol=_tol(dtype) * n)


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
def test_in_place_epilogue(compiled: bool, dtype: Any) -> None:
    """``out = op(alpha out + beta op(c))`` with ``x is out``: what a GEMM's epilogue does."""
    rng = np.random.default_rng(3)
    parent = _values(rng, (5, 8), dtype)
    out = parent[::-1, ::2]  # reversed and padded
    before = out.astype(np.complex128)
    c = _values(rng, (4, 5), dtype).T
    conj = np.dtype(dtype).kind == "c"
    with _path(compiled):
        kernels.fused(out, out, None, c, alpha=-0.5, beta=2.0, conj_c=conj, conj_out=conj)
    want = _op(-0.5 * before + 2.0 * _op(c.astype(np.complex128), conj), conj)
    np.testing.assert_allclose(out.astype(np.complex128), want, rtol=_tol(dtype),
                               atol=_tol(dtype))
    assert np.all(parent[:, 1::2] == _values(np.random.default_rng(3), (5, 8), dtype)[:, 1::2])


@pytest.mark.parametrize("compiled", [True, False])
def test_epilogue_with_c_as_out(compiled: bool) -> None:
    """``out = alpha out + beta out``: C is D itself (in-place accumulation)."""
    rng = np.random.default_rng(4)
    out = rng.random((7, 9))
    before = out.copy()
    with _path(compiled):
        kernels.fused(out, out, None, out, alpha=2.0, beta=0.5)
    np.testing.assert_allclose(out, 2.5 * before, rtol=1e-15)


@pytest.mark.parametrize("compiled", [True, False])
def test_outputs_touch_only_their_elements(compiled: bool) -> None:
    rng = np.random.default_rng(1)
    parent = np.full((6, 8), 5.0)
    out = parent[1:5:2, 1:7:2].T  # padded, transposed: 6 of 48 elements
    x = rng.random((3, 2))
    with _path(compiled):
        kernels.fused(out, x, alpha=3.0)
    np.testing.assert_allclose(out, 3 * x)
    mask = np.ones_like(parent, dtype=bool)
    mask[1:5:2, 1:7:2] = False
    assert np.all(parent[mask] == 5.0)


def test_products_without_numba_take_numpy_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "_available", False)
    pytapp.clear_plan_cache()  # plans decide their route at creation
    rng = np.random.default_rng(2)
    for expr, shapes in [("abcd,dcba->abcd", [(3, 4, 5, 2), (2, 5, 4, 3)]),
                         ("abcd,c->abd", [(2, 3, 4, 5), (4,)]),
                         ("ijql,kq->ijkl", [(3, 4, 2, 5), (6, 2)])]:
        a, b = rng.random(shapes[0]), rng.random(shapes[1])
        got = pytapp.contract(expr, a, b, backend="blas")
        np.testing.assert_allclose(got, np.einsum(expr, a, b), rtol=1e-12)
    pytapp.clear_plan_cache()


@pytest.mark.parametrize("n", [64, 48, 40, 7])
@pytest.mark.parametrize("has_y", [True, False])
def test_long_inner_dimension_is_split_into_blocks(n: int, has_y: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Contiguous operands merge into one dimension, cut into blocks for the threads."""
    monkeypatch.setattr(kernels, "INNER_BLOCK", 8)
    monkeypatch.setattr(kernels, "SMALL_WORK", 0)
    monkeypatch.setattr(kernels, "SERIAL_BELOW", 0)
    rng = np.random.default_rng(n)
    x, y, c = (_values(rng, (n,), np.complex128) for _ in range(3))
    out = x.copy()
    kernels.fused(out, out, y if has_y else None, c, alpha=0.5, beta=-2.0,
                  conj_y=has_y, threads=2)
    want = 0.5 * x * (np.conj(y) if has_y else 1) - 2.0 * c
    np.testing.assert_allclose(out, want, rtol=1e-13)


@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
def test_streaming_reduce_on_two_threads(dtype: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Short inner runs: x walked in its memory order, each thread with its own accumulator."""
    monkeypatch.setattr(kernels, "SERIAL_BELOW", 0)
    rng = np.random.default_rng(8)
    xv = _values(rng, (6, 5, 300, 3), dtype)
    x = np.ascontiguousarray(xv.transpose(2, 3, 0, 1)).transpose(2, 3, 0, 1)  # 5 fastest
    yv = _values(rng, (300, 3), dtype)
    y = np.broadcast_to(yv, (6, 5, 300, 3))
    c = _values(rng, (6, 5), dtype)
    out = np.zeros((6, 5), dtype)
    conj = np.dtype(dtype).kind == "c"
    with _path("stream"):
        kernels.reduce(out, x, y, c, alpha=2.0, beta=-1.0, conj_x=conj, threads=2)
    want = 2.0 * np.einsum("abij,ij->ab", _op(xv.astype(np.complex128), conj), yv) - c
    np.testing.assert_allclose(out, want, rtol=_tol(dtype) * 30, atol=_tol(dtype) * 30)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("conj", [False, True])
@pytest.mark.parametrize(("shape", "perm"), [
    ((12, 48, 12, 48), (0, 2, 1, 3)),  # 48-element runs: NumPy's slabs
    ((40, 40, 40, 16), (2, 1, 0, 3)),  # 16-element runs: the threshold
    ((60, 60, 60, 2), (2, 1, 0, 3)),  # 2-element runs: the compiled kernel
])
def test_plain_permuting_copies_take_either_copy_loop(dtype: Any, conj: bool,
                                                      shape: tuple[int, ...],
                                                      perm: tuple[int, ...]) -> None:
    """fused(out, x) with nothing to multiply or add is a copy: NumPy's slabs when the runs
    both arrays hold contiguously are long, the kernel otherwise; either writes op(x) into
    out's view only."""
    rng = np.random.default_rng(9)
    x = _values(rng, shape, dtype).transpose(perm)
    parent = np.full((2 * x.shape[0], *x.shape[1:]), 7, dtype=dtype)
    out = parent[::2]  # padded along its outermost mode: the runs stay contiguous
    slabs = kernels._inner_run(out, x) >= kernels.NUMPY_RUN
    assert slabs == (shape[-1] >= 16)
    kernels.fused(out, x, conj_x=conj, threads=2)
    want = np.conj(x) if conj else x
    np.testing.assert_array_equal(out, want)
    assert (parent[1::2] == 7).all()


def test_copy_conjugates_a_zero_dimensional_operand() -> None:
    out = np.empty((), dtype=np.complex64)
    kernels.copy(out, np.array(1 + 2j, dtype=np.complex64), conj=True, threads=1)
    assert out == 1 - 2j


def test_conjugated_scalar_operand_on_an_executor() -> None:
    # ',qb->bZS' with A a conjugated 0-d operand: the Python route (an executor's thread count)
    # packed A with the 0-d copy, which dropped the conjugation (found by test_properties)
    from pytapp import Attr, ElementOp, Executor, Handle, TensorInfo, TensorProduct

    a = np.array(1 - 2j, dtype=np.complex64)
    b = np.array([[1 + 1j, 2 - 1j], [3 + 0j, -1 + 2j]], dtype=np.complex64)
    h = Handle("blas")
    h.set_attr(Attr.ALLOW_BROADCAST, True)
    d = np.zeros((2, 1, 2), dtype=np.complex64)
    plan = TensorProduct(h, TensorInfo.from_array(a), "", TensorInfo.from_array(b), "qb", None,
                         None, TensorInfo.from_array(d), "bZS", op_a=ElementOp.CONJUGATE)
    plan.execute(1, a, b, 0, None, d, executor=Executor(threads=1))
    want = np.conj(a.astype(np.complex128)) * b.astype(np.complex128).sum(0)
    np.testing.assert_array_equal(d.astype(np.complex128), np.broadcast_to(want[:, None, None],
                                                                           (2, 1, 2)))
