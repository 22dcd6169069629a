"""numpy's einsum tests (sums, views, broadcasting, singleton broadcasting) on every backend
and every TAPP datatype, against numpy.einsum in float64/complex128."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from einsum_cases import NUMPY_BROADCAST, NUMPY_SUMS, NUMPY_VIEWS, OPT_EINSUM, TORCH, Case
from einsum_oracle import DTYPES, make_operands

import pytapp


def supported(backend: str) -> set[str]:
    """The datatypes (NumPy names) a backend states it supports (the C test library takes
    F64 and C64 only, which it says when a product is created)."""
    if backend.startswith("clib:"):
        return {"float64", "complex128"}
    caps = pytapp.Handle(backend).backend.capabilities
    return {dt.numpy_dtype.name for dt in caps.datatypes}


ALL = NUMPY_SUMS + NUMPY_VIEWS + NUMPY_BROADCAST + OPT_EINSUM + TORCH


@pytest.mark.parametrize("case", ALL, ids=[f"{i}:{c[0]}" for i, c in enumerate(ALL)])
def test_every_case_every_datatype(case: Case, any_backend: str,
                                   check: Callable[..., None]) -> None:
    backend = any_backend
    equation, shapes = case
    rng = np.random.default_rng(len(equation))
    has = supported(backend)
    for name, (dtype, bound) in DTYPES.items():
        if name not in has:
            continue
        if backend == "reference" and name in ("float16", "bfloat16") and len(shapes) > 3:
            continue  # the literal loop nest is slow; its precision is tested elsewhere
        ops = make_operands(shapes, dtype, rng)
        got = pytapp.einsum(equation, *ops, backend=backend)
        if all(s is None for s in shapes):
            assert np.asarray(got).dtype in (np.float64, np.complex128)
        else:
            assert np.asarray(got).dtype == np.result_type(*[np.asarray(x) for x in ops]) or \
                name == "bfloat16", (name, np.asarray(got).dtype)
        check(got, equation, ops, bound)


@pytest.mark.parametrize("optimize", [False, True, "greedy", "optimal", "dp", "branch-2",
                                      "auto", "auto-hq", ("greedy", 0), ("optimal", 0)])
def test_optimizers_give_the_same_result(optimize: object, check: Callable[..., None]) -> None:
    rng = np.random.default_rng(7)
    for equation, shapes in OPT_EINSUM + NUMPY_BROADCAST:
        if optimize in ("optimal", ("optimal", 0)) and len(shapes) > 5:
            continue  # exhaustive search over 7 operands takes seconds each
        ops = make_operands(shapes, np.float64, rng)
        check(pytapp.einsum(equation, *ops, optimize=optimize), equation, ops, 1e-12)


def test_sublist_form(check: Callable[..., None]) -> None:
    rng = np.random.default_rng(3)
    a, b, c = (rng.uniform(-1, 1, s) for s in [(2, 3, 4), (4, 5), (3,)])
    calls = [
        [a, [0, 1, 2], b, [2, 3]],
        [a, [0, 1, 2], b, [2, 3], [3, 0]],
        [a, [Ellipsis, 2], b, [2, 3], [Ellipsis, 3]],
        [a, [0, 1, 2], c, [1], [0, 2]],
        [a, [0, 1, 2], b, [2, 3], c, [1], [0, 3]],
        [np.eye(3), [0, 0]],
        [a, [0, 1, 51], b, [51, 25]],
    ]
    for call in calls:
        check(pytapp.einsum(*call), None, call, 1e-12)


def test_python_and_numpy_scalars() -> None:
    a = np.arange(1.0, 5.0)
    assert pytapp.einsum(",i->", 3, a) == 30.0
    assert pytapp.einsum("i,->i", a, np.float32(2)).tolist() == [2.0, 4.0, 6.0, 8.0]
    assert pytapp.einsum(",,->", 5, 5.0, 2.0j) == 50j
    assert pytapp.einsum("..., ...", 3.0, 4.0) == 12.0
    assert pytapp.einsum("ab,->", [[5, 5], [2.0, 1]], True) == 13.0
    assert pytapp.einsum("->", 1.5, optimize=[]) == 1.5


def test_result_datatype_follows_numpy() -> None:
    f32, f64 = np.ones(3, np.float32), np.ones(3)
    c64 = np.ones(3, np.complex64)
    assert pytapp.einsum("i,i->i", f32, f32).dtype == np.float32
    assert pytapp.einsum("i,i->i", f32, f64).dtype == np.float64
    assert pytapp.einsum("i,i->i", c64, f64).dtype == np.complex128
    assert pytapp.einsum("i,i->i", np.arange(3), f32).dtype == np.float64
    assert pytapp.einsum("i,i->i", f32, f32, dtype=np.float64).dtype == np.float64


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.uint16, np.bool_, np.longdouble,
                                   np.clongdouble, object])
def test_datatypes_tapp_lacks_run_exactly_through_numpy(dtype: type) -> None:
    rng = np.random.default_rng(4)
    a = rng.integers(0, 3, (3, 4)).astype(dtype)
    b = rng.integers(0, 3, (4, 5)).astype(dtype)
    got = pytapp.einsum("ij,jk->ik", a, b)
    assert got.dtype == np.dtype(dtype)
    exact = [[sum(int(a[i, j]) * int(b[j, k]) for j in range(4)) for k in range(5)]
             for i in range(3)]
    assert (np.asarray(got, dtype=np.int64) == np.asarray(exact, dtype=np.int64)).all() or \
        dtype is np.bool_
    np.testing.assert_array_equal(got, np.einsum("ij,jk->ik", a, b))


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.uint16, np.bool_])
def test_contract_keeps_tapp_datatypes(dtype: type) -> None:
    a = np.ones(3, dtype=dtype)
    with pytest.raises(pytapp.OperandMismatchError) as err:
        pytapp.contract("i,i->i", a, a)
    assert err.value.code == 20 and "float64" in str(err.value)


def test_out_argument() -> None:
    a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    out = np.full((2, 4), np.nan)
    assert pytapp.einsum("ij,jk", a, b, out=out) is out
    np.testing.assert_allclose(out, a @ b)
    out32 = np.zeros((2, 4), np.float32)
    pytapp.einsum("ij,jk", a, b, out=out32, casting="same_kind")
    np.testing.assert_allclose(out32, a @ b)
    with pytest.raises(TypeError) as err:  # numpy's default casting="safe" forbids it
        pytapp.einsum("ij,jk", a, b, out=out32)
    assert isinstance(err.value, pytapp.TappError) and err.value.code == 20
    strided = np.zeros((4, 8))[::2, ::2]
    pytapp.einsum("ij,jk", a, b, out=strided)
    np.testing.assert_allclose(strided, a @ b)


def test_non_contiguous_and_offset_views(check: Callable[..., None]) -> None:
    rng = np.random.default_rng(11)
    a = rng.uniform(-1, 1, (9, 8, 7))
    for equation, ops in [("ij,jk->ik", [a[::2, 1, ::3], a[1, ::3, 2:5]]),
                          ("...,...", [a[1:, 0, 0], a[:-1, 0, 0]]),
                          ("i,i", [a[1:, 0, 0], a[:-1, 0, 0]]),
                          ("ijk->kji", [a.transpose(2, 0, 1)[::-1]]),
                          ("...ft,mf->...mt", [np.asfortranarray(a[:2, :3, :5]), a[:4, :3, 0]])]:
        check(pytapp.einsum(equation, *ops), equation, ops, 1e-12)


@pytest.mark.parametrize("equation, shapes, code", [
    ("ij,jk->ik", [(2, 3), (4, 5)], 1),
    ("ij->k", [(2, 3)], 4),
    ("ij->ii", [(2, 3)], 13),
    ("ij,jk", [(2, 3)], 13),
    ("ijk", [(2, 3)], 13),
    ("i.j", [(2, 3)], 13),
    ("i->->i", [(2,)], 13),
    ("i$", [(2, 3)], 13),
    ("...i->i", [(2, 3)], 13),
    ("i...i...", [(2, 3, 2)], 13),
])
def test_malformed_calls(equation: str, shapes: list[tuple[int, ...]], code: int) -> None:
    with pytest.raises(pytapp.TappError) as err:
        pytapp.einsum(equation, *[np.ones(s) for s in shapes])
    assert err.value.code == code, str(err.value)


def test_spaces_are_ignored() -> None:
    a, b = np.ones((2, 3)), np.ones((3, 2))
    np.testing.assert_allclose(pytapp.einsum(" ij , jk -> ik ", a, b), a @ b)


def test_paths(check: Callable[..., None]) -> None:
    rng = np.random.default_rng(5)
    eq = "acdf,jbje,gihb,hfac,gfac,gifabc,hfac"
    from einsum_cases import shapes_for
    ops = [rng.uniform(-1, 1, s) for s in shapes_for(eq)]
    path, info = pytapp.einsum_path(eq, *ops, optimize="greedy")
    assert path[0] == "einsum_path" and len(path) == 7
    assert "Complete contraction" in str(info) and len(info.steps) == 6
    assert info.naive_flops > sum(info.flops)
    np_path, _ = np.einsum_path(eq, *ops, optimize="greedy")
    for given in (path, np_path, path[1:]):
        check(pytapp.einsum(eq, *ops, optimize=given), eq, ops, 1e-12)
    with pytest.raises(pytapp.UnsupportedError):
        pytapp.einsum(eq, *ops, optimize=[(0, 1)])
    with pytest.raises(pytapp.UnsupportedError):
        pytapp.einsum(eq, *ops, optimize=[(0, 9)] * 6)
    with pytest.raises(pytapp.UnsupportedError):
        pytapp.einsum(eq, *ops, optimize="no-such-optimizer")


def test_memory_limit_caps_intermediates() -> None:
    ops = [np.ones((6, 6)), np.ones((6, 6)), np.ones((6, 6))]
    _, free = pytapp.einsum_path("ab,cd,ef->abcdef", *ops, optimize="greedy")
    _, capped = pytapp.einsum_path("ab,cd,ef->abcdef", *ops, optimize="greedy",
                                   memory_limit=36)
    assert free.path != capped.path and capped.path == [(0, 1, 2)]
