"""Long sums are at least as accurate as numpy's (issue 24).

A sum added one term after the other loses accuracy in proportion to its length; the
reference backend adds long sums pairwise, and tblis cuts them into blocks whose results it
adds pairwise. The oracle is exact: every term is an integer times a power of two, and every
product of A and B is exact (B holds powers of two, times 1, -1, i or -i when complex), so the
exact sum is an integer sum, rounded once. Two kinds of data: "skewed" puts one term of 1 first
and then many terms of half an ulp of 1 to one ulp, each of which rounds the running sum up
when added to it in order (where summing in order loses most); "uniform" draws every bit of
the terms at random from [0, 1). Each backend's relative error must be at most twice
numpy.einsum's on the same data (or twice the unit roundoff, where numpy's is smaller than one
rounding of the exact sum).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import pytapp
from pytapp import Datatype, Handle, TensorInfo, TensorProduct

BACKENDS = [name for name in ("reference", "tblis", "blas", "auto")
            if pytapp.available_backends().get(name, (False, ""))[0]]
#: Terms per sum: the reference loops in Python (slow by design); tblis splits beyond
#: SPLIT_OVER terms and blas cuts dots into 2**14: a length that is not a multiple of the
#: block exercises the last block.
LENGTH = {"reference": (1 << 12) + 3, "tblis": (1 << 17) + 3, "blas": (1 << 17) + 3,
          "auto": (1 << 17) + 3}
DTYPES = [np.float64, np.float32, np.complex128]
CASES = {"dot": "i,i->", "rows": "ij,ij->i", "isolated": "ij,i->i"}
ROWS = 3
#: pytapp.backends.tblis.SPLIT_OVER: tblis splits sums longer than this.
SPLIT_OVER = 1 << 14


def _numerators(kind: str, shape: tuple[int, ...], dtype: Any, rng: np.random.Generator
                ) -> tuple[np.ndarray, int]:
    """Integers k and an exponent e: terms k * 2**-e along the last axis, exact in ``dtype``.

    ``uniform``: every bit random in [0, 1). ``skewed``: 1, then (32 + r) / 64 ulps of 1 with
    r in 1..31, which rounds up when added to a sum in [1, 2).
    """
    bits = np.finfo(dtype).nmant + 1
    if kind == "uniform":
        return rng.integers(0, 1 << bits, shape), bits
    e = bits - 1 + 6
    k = 32 + rng.integers(1, 32, shape)
    k[..., 0] = 1 << e
    return k, e


def _terms(kind: str, shape: tuple[int, ...], dtype: Any, rng: np.random.Generator
           ) -> tuple[np.ndarray, np.ndarray]:
    """Terms of ``dtype`` and their exact sums over the last axis (complex128, rounded once)."""
    parts = [_numerators(kind, shape, dtype, rng)]
    if np.issubdtype(dtype, np.complexfloating):
        parts.append(_numerators(kind, shape, dtype, rng))
    values, sums = [], []
    for k, e in parts:
        values.append(np.ldexp(k.astype(np.float64), -e))
        high, low = (k >> 30).sum(axis=-1), (k & ((1 << 30) - 1)).sum(axis=-1)
        sums.append([((int(h) << 30) + int(x)) / (1 << e) for h, x in
                     zip(high.ravel(), low.ravel(), strict=True)])
    terms = values[0] if len(values) == 1 else values[0] + 1j * values[1]
    exact = np.array(sums[0], dtype=np.complex128)
    if len(sums) == 2:
        exact.imag = sums[1]
    return terms.astype(dtype), exact.reshape(shape[:-1])


def _factors(shape: tuple[int, ...], dtype: Any, rng: np.random.Generator) -> np.ndarray:
    """Powers of two, times 1, -1, i or -i when complex: products with them are exact."""
    f = 2.0 ** rng.integers(-1, 2, shape)
    if np.issubdtype(dtype, np.complexfloating):
        f = f * np.array([1, -1, 1j, -1j])[rng.integers(0, 4, shape)]
    return f.astype(dtype)


def _case(case: str, n: int, dtype: Any, rng: np.random.Generator, kind: str = "skewed"
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return A, B and the exact result of ``CASES[case]`` with ``n`` terms per sum."""
    wide = np.complex128 if np.issubdtype(dtype, np.complexfloating) else np.float64
    if case == "isolated":  # the sum of a row of A, times an element of B (exactly)
        a, sums = _terms(kind, (ROWS, n), dtype, rng)
        b = _factors((ROWS,), dtype, rng)
        return a, b, sums * b.astype(np.complex128)
    shape = (n,) if case == "dot" else (ROWS, n)
    terms, sums = _terms(kind, shape, dtype, rng)
    b = _factors(shape, dtype, rng)
    a = (terms.astype(wide) / b.astype(wide)).astype(dtype)  # A * B is the terms, exactly
    return a, b, sums


def _relative_error(got: Any, exact: np.ndarray) -> float:
    got = np.asarray(got).astype(np.complex128)
    return float(np.max(np.abs(got - exact) / np.abs(exact)))


def _check(backend: str, expr: str, a: np.ndarray, b: np.ndarray, exact: np.ndarray) -> None:
    """Assert the backend's error is at most twice numpy.einsum's.

    Where numpy's error is below the unit roundoff u (one rounding of the exact sum, eps/2),
    twice u is allowed: a correctly rounded result may be off by u, and numpy's can be luckily
    closer.
    """
    got = pytapp.contract(expr, a, b, backend=backend)
    err = _relative_error(got, exact)
    numpy_err = _relative_error(np.einsum(expr, a, b), exact)
    unit = float(np.finfo(a.dtype).eps) / 2
    assert err <= 2 * max(numpy_err, unit), (
        f"{backend} {expr} {a.dtype}: {err:.2e}, numpy.einsum {numpy_err:.2e}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("case", sorted(CASES))
def test_long_sum_is_as_accurate_as_numpy(backend: str, dtype: Any, case: str) -> None:
    expr = CASES[case]
    a, b, exact = _case(case, LENGTH[backend], dtype, np.random.default_rng(24))
    _check(backend, expr, a, b, exact)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
def test_long_dot_of_random_values(backend: str, dtype: Any) -> None:
    """A full dot of uniform random values (10**6 for tblis), as numpy.einsum to an ulp."""
    n = LENGTH[backend] if backend == "reference" else 10**6
    a, b, exact = _case("dot", n, dtype, np.random.default_rng(6), "uniform")
    _check(backend, CASES["dot"], a, b, exact)


def test_reference_long_sums_are_pairwise_like_numpy_sum() -> None:
    """The reference is at least as accurate as numpy.sum (pairwise) on the same terms."""
    a, exact = _terms("skewed", (ROWS, LENGTH["reference"]), np.float32,
                      np.random.default_rng(7))
    err = _relative_error(pytapp.contract("ij,i->i", a, np.ones(ROWS, np.float32),
                                          backend="reference"), exact)
    assert err <= max(_relative_error(np.sum(a, axis=1), exact), float(np.finfo("f4").eps) / 2)


def test_reference_contracted_and_isolated_sums_agree_bitwise() -> None:
    """One summation order for both loops, whatever the rows per vectorised step."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 1000)) * np.exp(rng.uniform(-20, 20, (2, 1000)))
    ones = np.ones((2, 1000))
    iso = pytapp.contract("ij,i->i", a, np.ones(2), backend="reference")
    dot = pytapp.contract("ij,ij->i", a, ones, backend="reference")
    np.testing.assert_array_equal(iso, dot)
    assert iso[0] == pytapp.contract("j,j->", a[0], ones[0], backend="reference")


def _tblis_algorithm(n: int) -> str:
    info = TensorInfo(Datatype.F64, (n,))
    plan = TensorProduct(Handle("tblis"), info, "i", info, "i", None, None,
                         TensorInfo(Datatype.F64, ()), "")
    return plan.algorithm


def _tblis_splits(expr: str, a: Any, b: Any, d: Any) -> bool:
    """Whether tblis plans ``expr`` on these arrays in blocks."""
    (la, lb), ld = (x.split(",") for x in expr.split("->"))
    info = TensorInfo.from_array
    plan = TensorProduct(Handle("tblis"), info(a), la, info(b), lb, None, None, info(d), ld[0])
    return " blocks of " in plan.algorithm


@pytest.mark.skipif("tblis" not in BACKENDS, reason="pytblis is not installed")
def test_tblis_splits_only_long_sums() -> None:
    from pytapp.backends import tblis

    assert tblis.SPLIT_OVER == SPLIT_OVER
    assert "blocks" not in _tblis_algorithm(SPLIT_OVER)
    assert "in 4 blocks" in _tblis_algorithm(SPLIT_OVER + 1)
    assert "in 9 blocks of 14564" in _tblis_algorithm(LENGTH["tblis"])


def _tblis_split_cases(rng: np.random.Generator) -> list[tuple[str, Any, Any, dict[str, Any]]]:
    """Products whose long sum tblis splits: every kind of summed label, layouts and options."""
    n = SPLIT_OVER + 4099
    big = rng.standard_normal((4, 2 * n))
    p2 = rng.standard_normal((n, 3, 2))
    z = (rng.standard_normal((3, n, 2)) + 1j * rng.standard_normal((3, n, 2))).astype(np.complex64)
    w = (rng.standard_normal((n, 2)) + 1j * rng.standard_normal((n, 2))).astype(np.complex64)
    c = (rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3))).astype(np.complex64)
    in_place = np.arange(8.0)[::2]
    return [
        ("ik,k->i", big[:, ::2], big[0, ::-2], {}),  # strided and negative strides
        ("ik,k->i", big[:, ::2], big[0, ::-2], {"alpha": -0.5, "beta": 2.0,
                                               "c": np.arange(4.0)}),
        ("ik,k->i", big[:, 1::2], big[1, ::2], {"beta": -1.0, "c": in_place, "out": in_place}),
        ("ij,i->i", big, rng.standard_normal(4), {}),  # isolated in A
        ("i,ij->i", rng.standard_normal(4), big, {}),  # isolated in B
        ("kab,kb->a", p2, p2[:, 0], {}),  # P of 2 labels
        ("akb,kb->ba", z, w, {"alpha": 0.3 - 0.2j, "beta": 0.5 + 1j, "c": c,
                              "op_a": 1, "op_c": 1, "op_d": 1}),
        ("akb,kb->ba", z, w, {"op_b": 1}),
    ]


@pytest.mark.skipif("tblis" not in BACKENDS, reason="pytblis is not installed")
def test_tblis_split_products_are_correct() -> None:
    rng = np.random.default_rng(11)
    for expr, a, b, options in _tblis_split_cases(rng):
        opts = dict(options)
        c = opts.pop("c", None)
        c_before = None if c is None else np.array(c)
        got = pytapp.contract(expr, a, b, c, backend="tblis", **opts)
        assert _tblis_splits(expr, a, b, got), expr
        if "out" in opts:
            assert got is opts.pop("out")
        ops = {k: opts.pop(k, 0) for k in ("op_a", "op_b", "op_c", "op_d")}
        alpha, beta = opts.pop("alpha", 1.0), opts.pop("beta", 1.0)
        c = c_before

        def conj(x: Any, flag: int) -> Any:
            return np.conj(x) if flag else x

        a64, b64 = np.asarray(a, np.complex128), np.asarray(b, np.complex128)
        want = alpha * np.einsum(expr, conj(a64, ops["op_a"]), conj(b64, ops["op_b"]))
        if c is not None:
            want = want + beta * conj(np.asarray(c, np.complex128), ops["op_c"])
        want = conj(want, ops["op_d"])
        tol = 1e-4 if np.asarray(a).dtype == np.complex64 else 1e-10
        scale = np.abs(a64).max() * np.abs(b64).max() * np.sqrt(a64.size)
        np.testing.assert_allclose(got, want if np.iscomplexobj(got) else want.real,
                                   atol=tol * scale, err_msg=expr)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
def test_long_sums_down_columns_are_as_accurate_as_numpy(dtype: Any) -> None:
    """Sums down 16 columns, each term a row apart: the compiled loop nest adds rows in blocks.

    numpy.einsum adds the rows one after the other; the blocked sums must be at least as
    accurate (and the product must run as that loop nest, or the test tests something else).
    """
    rows, cols = (1 << 14) + 3, 16
    a, b, exact = _case("rows", rows, dtype, np.random.default_rng(25))
    a, b = (np.ascontiguousarray(np.tile(x, (cols // ROWS + 1, 1))[:cols].T) for x in (a, b))
    exact = np.tile(exact, cols // ROWS + 1)[:cols]
    infos = [TensorInfo.from_array(x) for x in (a, b)]
    d = np.empty(cols, dtype=dtype)
    plan = TensorProduct(Handle("blas"), infos[0], "ji", infos[1], "ji", None, None,
                         TensorInfo.from_array(d), "i")
    status = plan.execute(1, a, b, 0, None, d)
    assert "summed row by row" in status.algorithm, status.algorithm
    err = _relative_error(d, exact)
    numpy_err = _relative_error(np.einsum("ji,ji->i", a, b), exact)
    assert err <= 2 * max(numpy_err, float(np.finfo(dtype).eps) / 2), (err, numpy_err)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("rows", [0, ROWS])
def test_long_strided_sums_are_as_accurate_as_numpy(dtype: Any, rows: int) -> None:
    """Long sums that stride through B (stored column-major): the compiled loop nest sums each
    element of D in blocks whose sums it adds up, never one running sum of every term.

    numpy.einsum adds the terms in A's memory order; the blocked sums must be at least as
    accurate (and the product must run as that loop nest, or the test tests something else).
    """
    n1, n2 = 129, 131
    case = "rows" if rows else "dot"
    a, b, exact = _case(case, n1 * n2, dtype, np.random.default_rng(26))
    shape = (rows, n1, n2) if rows else (n1, n2)
    a = a.reshape(shape)
    b = np.asfortranarray(b.reshape(shape))  # same values, B's sums stride through memory
    la, ld = ("ijk", "i") if rows else ("jk", "")
    infos = [TensorInfo.from_array(x) for x in (a, b)]
    d = np.empty(shape[:1] if rows else (), dtype=dtype)
    plan = TensorProduct(Handle("blas"), infos[0], la, infos[1], la, None, None,
                         TensorInfo.from_array(d), ld)
    status = plan.execute(1, a, b, 0, None, d)
    assert "compiled: loop nest" in status.algorithm, status.algorithm
    err = _relative_error(d, exact)
    numpy_err = _relative_error(np.einsum(f"{la},{la}->{ld}", a, b), exact)
    assert err <= 2 * max(numpy_err, float(np.finfo(dtype).eps) / 2), (err, numpy_err)


@pytest.mark.parametrize(("equation", "shapes", "route"), [
    # free labels (c, d): one GEMM over the 4608-term sums, not the loop nest's runs of 2
    ("gcbf,fbgd->cd", [(96, 2, 24, 2), (2, 24, 96, 7)], "compiled: ttgt"),
    # a full dot whose sums run 2 terms at a time in A: blas's copy and dot
    ("abcd,dcba->", [(64, 48, 40, 2), (2, 40, 48, 64)], "dot"),
    # the same dot in runs of 64: the loop nest
    ("abcd,dcba->", [(2, 48, 40, 64), (64, 40, 48, 2)], "compiled: loop nest"),
])
def test_long_strided_sums_take_the_faster_route(equation: str, shapes: list[tuple[int, ...]],
                                                 route: str) -> None:
    rng = np.random.default_rng(27)
    a, b = (rng.integers(-4, 5, s).astype(np.float64) for s in shapes)
    (la, lb), ld = equation.split("->")[0].split(","), equation.split("->")[1]
    d = np.empty(tuple(dict(zip(la + lb, (*a.shape, *b.shape), strict=True))[ch] for ch in ld))
    plan = TensorProduct(Handle("blas"), TensorInfo.from_array(a), la, TensorInfo.from_array(b),
                         lb, None, None, TensorInfo.from_array(d), ld)
    status = plan.execute(1, a, b, 0, None, d)
    assert route in status.algorithm, status.algorithm
    np.testing.assert_array_equal(d, np.einsum(equation, a, b))
