"""Plain two-operand products run as one matmul (``pytapp.direct``), against numpy.einsum.

``matmul_pair`` on Hypothesis-drawn plain products (batch, row, column and summed labels in
any order, extents 0 to 4, every native datatype, C-contiguous, permuted and strided operands)
gives numpy.einsum's result in float64/complex128 (exactly: the data are small integers), as a
C-contiguous array of the operands' dtype; it declines (``None``) long dots and every product not
plain. Through :func:`pytapp.einsum` and :func:`pytapp.tensordot` the first ``PLAN_AFTER``
calls of one product run the matmul without planning and the next call plans it; every call
returns the oracle's values in numpy's types (an einsum to 0-d: a NumPy scalar; tensordot: a
0-d array); a backend other than auto or blas (``PYTAPP_BACKEND=reference`` too) never runs the
matmul.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pytapp
from pytapp import TappError, direct, numpy_api
from pytapp.analysis.subscripts import Equation, parse_subscripts
from pytapp.direct import DIRECT_MAX_FLOPS, LONG_DOT, PLAN_AFTER, MatmulPair, matmul_pair

DTYPES = (np.float32, np.float64, np.complex64, np.complex128)
LAYOUTS = ("c", "permuted", "strided", "reversed")

_settings = settings(max_examples=150, deadline=None, database=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                            HealthCheck.function_scoped_fixture])


def _wide(dtype: Any) -> Any:
    return np.complex128 if np.dtype(dtype).kind == "c" else np.float64


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Small integers (and Gaussian integers): every product and sum is exact in float32."""
    x = rng.integers(-3, 4, shape).astype(dtype)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.integers(-3, 4, shape)
    return x.astype(dtype)


def _lay_out(values: np.ndarray, how: str, perm: tuple[int, ...]) -> np.ndarray:
    """``values`` in memory laid out as ``how`` says (the same shape and elements)."""
    if how == "c" or values.ndim == 0:
        return values.copy()
    if how == "permuted":  # stored in another order of its axes
        return np.ascontiguousarray(values.transpose(perm)).transpose(np.argsort(perm))
    big = np.full(tuple(2 * e + 1 for e in values.shape), 99, dtype=values.dtype)
    view = big[(slice(1, None, 2),) * values.ndim]  # every other element, padded
    if how == "reversed":  # and the last axis walked backwards
        view = view[..., ::-1]
    view[...] = values
    return view


@dataclass
class Plain:
    """A plain product: its equation, its operands, and numpy.einsum's wide result."""

    equation: str
    a: np.ndarray
    b: np.ndarray
    want: Any


@st.composite
def plain_products(draw: st.DrawFn) -> Plain:
    names = draw(st.permutations("abcdefgh"))
    counts = [draw(st.integers(0, 2)) for _ in range(4)]
    start = [sum(counts[:i]) for i in range(4)]
    batch, rows, cols, summed = (list(names[s:s + c]) for s, c in zip(start, counts, strict=True))
    used = batch + rows + cols + summed
    extent = {x: draw(st.integers(1, 4)) for x in used}
    zero = draw(st.sampled_from([None, None, None, *used]))  # an empty product now and then
    if zero is not None:
        extent[zero] = 0
    ta = "".join(draw(st.permutations(batch + rows + summed)))
    tb = "".join(draw(st.permutations(batch + summed + cols)))
    out = "".join(draw(st.permutations(batch + rows + cols)))
    dtype = draw(st.sampled_from(DTYPES))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    operands = []
    for term in (ta, tb):
        values = _values(rng, tuple(extent[x] for x in term), dtype)
        how = draw(st.sampled_from(LAYOUTS))
        perm = tuple(draw(st.permutations(range(len(term)))))
        operands.append(_lay_out(values, how, perm))
    a, b = operands
    equation = f"{ta},{tb}->{out}"
    want = np.einsum(equation, a.astype(_wide(dtype)), b.astype(_wide(dtype)))
    return Plain(equation, a, b, want)


def _pair(equation: str, a: np.ndarray, b: np.ndarray) -> MatmulPair | None:
    return matmul_pair(parse_subscripts(equation, [a.ndim, b.ndim]), a, b)


# ------------------------------------------------------------------------------ matmul_pair
@_settings
@given(plain_products())
def test_plain_products_match_numpy(p: Plain) -> None:
    pair = _pair(p.equation, p.a, p.b)
    assert pair is not None, p.equation
    got = pair(p.a, p.b)
    assert type(got) is np.ndarray and got.dtype == p.a.dtype
    assert got.shape == p.want.shape
    np.testing.assert_array_equal(got.astype(p.want.dtype), p.want, err_msg=p.equation)
    again = pair(p.a.copy(), p.b.copy())  # a pair serves every operand of its shapes
    np.testing.assert_array_equal(again, got)


@_settings
@given(plain_products())
def test_plain_products_through_einsum(p: Plain) -> None:
    """The public call, whether it runs the matmul or plans: numpy's values and types."""
    got = pytapp.einsum(p.equation, p.a, p.b)
    if p.want.ndim == 0:
        assert type(got) is p.a.dtype.type
    else:
        assert type(got) is np.ndarray and got.dtype == p.a.dtype
    np.testing.assert_array_equal(np.asarray(got).astype(p.want.dtype), p.want,
                                  err_msg=p.equation)


@pytest.mark.parametrize(("equation", "shapes", "dtypes"), [
    ("iij,jk->ik", [(3, 3, 4), (4, 2)], "dd"),  # a diagonal
    ("ij,jkk->ik", [(3, 4), (4, 2, 2)], "dd"),
    ("ij,jk->k", [(3, 4), (4, 2)], "dd"),  # i summed in A only
    ("ij,jk->i", [(3, 4), (4, 2)], "dd"),  # k summed in B only
    ("ij,jk->ik", [(3, 1), (4, 2)], "dd"),  # size-1 broadcasting of a summed label
    ("bij,bjk->bik", [(1, 3, 4), (5, 4, 2)], "dd"),  # ... of a batch label
    ("...ij,...jk->...ik", [(2, 3, 4), (1, 4, 2)], "dd"),
    ("ij,jk->ik", [(3, 4), (4, 2)], "fd"),  # mixed datatypes
    ("ij,jk->ik", [(3, 4), (4, 2)], "FD"),
    ("ij,jk->ik", [(3, 4), (4, 2)], "dD"),
    ("ij,jk->ik", [(3, 4), (4, 2)], "ll"),  # not native
    ("ij,jk->ik", [(3, 4), (4, 2)], "ee"),
    ("ij,jk->ik", [(3, 4), (4, 2)], "??"),
    ("ij,jk->ik", [(256, 129), (129, 256)], "dd"),  # more than DIRECT_MAX_FLOPS
    ("bij,bjk->bik", [(4, 128, 128), (4, 128, 129)], "ff"),
])
def test_products_that_are_not_plain_are_declined(equation: str, shapes: list[tuple[int, ...]],
                                                  dtypes: str) -> None:
    a, b = (np.zeros(s, dtype=t) for s, t in zip(shapes, dtypes, strict=True))
    assert _pair(equation, a, b) is None


def test_the_flop_limit_is_inclusive() -> None:
    assert DIRECT_MAX_FLOPS == 2 * 256 * 256 * 128
    a, b = np.ones((256, 128)), np.ones((128, 256))
    pair = _pair("ij,jk->ik", a, b)
    assert pair is not None
    np.testing.assert_array_equal(pair(a, b), np.full((256, 256), 128.0))
    assert _pair("ij,jk->ik", np.ones((256, 129)), np.ones((129, 256))) is None
    # no summed label: 2 m n flops, however large the operands' product of extents
    assert _pair("i,j->ij", np.ones(4096), np.ones(2048)) is not None
    assert _pair("i,j->ij", np.ones(4096), np.ones(2049)) is None


def test_products_copying_large_permuted_operands_are_left_to_the_plan(
        counts: Counts, monkeypatch: pytest.MonkeyPatch) -> None:
    """The matmul copies an operand whose summed labels are not where the matmul reads them:
    beyond DIRECT_COPY_MAX bytes of such copies, the product is planned at once (its plan
    reads them in place); one that lies in the matmul's order copies nothing and runs it."""
    monkeypatch.setattr(direct, "DIRECT_COPY_MAX", 1000)
    a = _ints((5, 6, 7), 21)  # ckb: summed k between the rows c and b: (c b) x k is a copy
    b = _ints((6, 4), 22)
    want = np.einsum("ckb,kd->cbd", a, b)
    assert direct._copied(a, (0, 2, 1), (1, 35, 6)) == a.nbytes > 1000
    kcb = np.ascontiguousarray(a.transpose(1, 0, 2))  # k outermost: a transposed view
    assert direct._copied(kcb, (1, 2, 0), (1, 35, 6)) == 0
    assert _pair("ckb,kd->cbd", a, b) is None
    np.testing.assert_array_equal(pytapp.einsum("ckb,kd->cbd", a, b, backend="blas"), want)
    assert (counts.direct, counts.planned) == (0, 1)
    lying = np.ascontiguousarray(a.transpose(0, 2, 1))  # cbk: (c b) x k as it lies
    assert _pair("cbk,kd->cbd", lying, b) is not None
    np.testing.assert_array_equal(pytapp.einsum("cbk,kd->cbd", lying, b, backend="blas"), want)
    assert (counts.direct, counts.planned) == (1, 1)
    monkeypatch.setattr(direct, "DIRECT_COPY_MAX", a.nbytes)  # at the bound: still a matmul
    assert _pair("ckb,kd->cbd", a, b) is not None


def test_long_dots_are_left_to_the_plan() -> None:
    """A dot (one row, one column, per batch) longer than LONG_DOT is declined; a long sum
    with more rows or columns is a matmul."""
    n = LONG_DOT
    assert _pair("i,i->", np.ones(n), np.ones(n)) is not None
    assert _pair("i,i->", np.ones(n + 1), np.ones(n + 1)) is None
    assert _pair("bi,bi->b", np.ones((3, n + 1)), np.ones((3, n + 1))) is None
    assert _pair("ij,ij->", np.ones((2, n)), np.ones((2, n))) is None  # k = 2 n
    assert _pair("ri,i->r", np.ones((2, n + 1)), np.ones(n + 1)) is not None


def test_long_dots_through_einsum_are_planned(counts: Counts) -> None:
    x = _ints((LONG_DOT + 1,), 19)
    got = pytapp.einsum("i,i->", x, x)
    assert type(got) is np.float64 and got == np.dot(x, x)  # integers: exact
    assert (counts.direct, counts.planned) == (0, 1)


def test_equation_objects_and_equal_extents_of_every_class() -> None:
    """An Equation made directly; the same label set with its batch label first in B."""
    rng = np.random.default_rng(1)
    a, b = _values(rng, (2, 3, 4), np.float64), _values(rng, (4, 2, 5), np.float64)
    pair = matmul_pair(Equation(("bik", "kbj"), "jbi"), a, b)
    assert pair is not None
    np.testing.assert_array_equal(pair(a, b), np.einsum("bik,kbj->jbi", a, b))


# ------------------------------------------------------------------------------ einsum, tensordot
@dataclass
class Counts:
    """Matmuls run by pytapp.direct, and expressions einsum asked for (plans)."""

    direct: int = 0
    planned: int = 0


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Counts:
    """Count matmuls and plannings, with einsum's and tensordot's caches empty.

    Planning follows the count of calls alone (PLANNING_SECONDS, the time rule, is tested on
    its own: how long calls take depends on the machine).
    """
    for name in ("_pairs", "_thin", "_chains", "_tensordot_calls"):
        monkeypatch.setattr(numpy_api, name, {})
    monkeypatch.setattr(direct, "PLANNING_SECONDS", float("inf"))
    seen = Counts()
    call = MatmulPair.__call__
    plan = numpy_api.cached_expression

    def counted_call(self: MatmulPair, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        seen.direct += 1
        return call(self, a, b)

    def counted_plan(*args: Any, **kwargs: Any) -> Any:
        seen.planned += 1
        return plan(*args, **kwargs)

    monkeypatch.setattr(MatmulPair, "__call__", counted_call)
    monkeypatch.setattr(numpy_api, "cached_expression", counted_plan)
    return seen


def _calls(counts: Counts, call: Callable[[], Any], check: Callable[[Any], None],
           n: int) -> list[tuple[int, int]]:
    """Make ``n`` calls, check each result; (matmuls, plannings) after each call."""
    after = []
    for _ in range(n):
        check(call())
        after.append((counts.direct, counts.planned))
    return after


def _ints(shape: tuple[int, ...], seed: int = 0, dtype: Any = np.float64) -> np.ndarray:
    return _values(np.random.default_rng(seed), shape, dtype)


@pytest.mark.parametrize("layout", ["c", "strided", "reversed", "permuted"])
def test_einsum_plans_after_plan_after_calls(counts: Counts, layout: str) -> None:
    """B, the smaller operand, in any layout: the result has one layout, the matmul's and the
    plan's alike (order="K" follows the largest operand, C-contiguous: the layout of
    numpy.einsum's tensordot view, (i, l) in memory), and B's layout has its own matmul, then
    its own plan."""
    a, b = _ints((3, 4, 5), 1), _ints((4, 5, 2), 2)
    b = _lay_out(b, layout, (2, 0, 1))
    want = np.einsum("ijk,jkl->li", a, b)

    def check(got: Any) -> None:
        assert type(got) is np.ndarray and got.dtype == np.float64
        assert got.T.flags.c_contiguous  # stored as (i, l)
        np.testing.assert_array_equal(got, want)

    after = _calls(counts, lambda: pytapp.einsum("ijk,jkl->li", a, b), check, PLAN_AFTER + 4)
    assert after[:PLAN_AFTER] == [(k + 1, 0) for k in range(PLAN_AFTER)]
    # planned on the next call, then served by the plan (its thin path: no planning again)
    assert after[PLAN_AFTER:] == [(PLAN_AFTER, 1)] * 4


def test_einsum_counts_each_layout_and_dtype(counts: Counts) -> None:
    """A layout's calls count for it alone: another layout or dtype starts afresh."""
    a, b = _ints((4, 6), 3), _ints((6, 3), 4)
    for _ in range(PLAN_AFTER - 1):
        pytapp.einsum("ij,jk->ik", a, b)
    strided = _lay_out(b, "strided", (0, 1))
    single = a.astype(np.float32), b.astype(np.float32)
    np.testing.assert_array_equal(pytapp.einsum("ij,jk->ik", a, strided), a @ b)
    got = pytapp.einsum("ij,jk->ik", *single)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, a @ b)
    assert (counts.direct, counts.planned) == (PLAN_AFTER + 1, 0)
    pytapp.einsum("ij,jk->ik", a, b)  # the first layout's last call before its plan
    assert (counts.direct, counts.planned) == (PLAN_AFTER + 2, 0)
    np.testing.assert_array_equal(pytapp.einsum("ij,jk->ik", a, b), a @ b)
    assert (counts.direct, counts.planned) == (PLAN_AFTER + 2, 1)


def test_einsum_result_follows_a_largest_operand_in_another_order(counts: Counts) -> None:
    """order="K": the largest operand stored transposed gives a result in its order, from
    the first call on (a matmul's C-order result would not do)."""
    a = _lay_out(_ints((3, 4, 5), 17), "permuted", (2, 1, 0))
    b = _ints((4, 5, 2), 18)
    want = np.einsum("ijk,jkl->li", a, b)

    def check(got: Any) -> None:
        assert got.flags.f_contiguous and not got.flags.c_contiguous
        np.testing.assert_array_equal(got, want)

    _calls(counts, lambda: pytapp.einsum("ijk,jkl->li", a, b), check, PLAN_AFTER + 2)
    assert counts.direct == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_einsum_to_a_scalar_is_numpys_type(counts: Counts, dtype: Any) -> None:
    a, b = _ints((3, 5), 5, dtype), _ints((5, 3), 6, dtype)
    want = np.einsum("ij,ji->", a.astype(_wide(dtype)), b.astype(_wide(dtype)))
    assert type(np.einsum("ij,ji->", a, b)) is np.dtype(dtype).type

    def check(got: Any) -> None:
        assert type(got) is np.dtype(dtype).type
        assert got == want

    after = _calls(counts, lambda: pytapp.einsum("ij,ji->", a, b), check, PLAN_AFTER + 2)
    assert after[PLAN_AFTER - 1] == (PLAN_AFTER, 0) and after[-1] == (PLAN_AFTER, 1)


def _tensordot_case() -> tuple[np.ndarray, np.ndarray, Any, np.ndarray]:
    a, b = _ints((3, 4, 5), 7), _ints((5, 4, 2), 8)
    axes = ([1, 2], [1, 0])
    return a, b, axes, np.tensordot(a, b, axes)


def test_tensordot_runs_matmuls_first(counts: Counts) -> None:
    """The first call is numpy's own tensordot (no matmul of ours, no plan), the next
    PLAN_AFTER run the matmul; every call gives numpy's result; a plan is made at some later
    call."""
    a, b, axes, want = _tensordot_case()

    def check(got: Any) -> None:
        assert type(got) is np.ndarray and got.dtype == np.float64
        np.testing.assert_array_equal(got, want)

    after = _calls(counts, lambda: pytapp.tensordot(a, b, axes), check, 3 * PLAN_AFTER)
    assert after[:PLAN_AFTER + 1] == [(k, 0) for k in range(PLAN_AFTER + 1)]
    assert after[-1][1] == 1


def test_tensordot_plans_after_plan_after_calls(counts: Counts) -> None:
    a, b, axes, want = _tensordot_case()
    after = _calls(counts, lambda: pytapp.tensordot(a, b, axes),
                   lambda got: np.testing.assert_array_equal(got, want), PLAN_AFTER + 3)
    assert after[PLAN_AFTER + 1:] == [(PLAN_AFTER, 1)] * 2


@pytest.mark.parametrize(("sa", "sb", "axes", "why"), [
    ((3, 4), (4, 5), ([1], [1]), "paired extents differ"),
    ((3, 4), (4, 5), ([0, 0], [0, 1]), "a mode paired twice"),
    ((3, 4), (4, 5), ([2], [0]), "a mode out of range"),
])
def test_tensordot_first_call_errors_are_tapp_errors(counts: Counts, sa: tuple[int, ...],
                                                     sb: tuple[int, ...], axes: Any,
                                                     why: str) -> None:
    """What numpy's tensordot refuses on a first call is refused by pytapp's own checks, with
    its TAPP error (numpy's exception is not what reaches the caller)."""
    a, b = _ints(sa, 11), _ints(sb, 12)
    with pytest.raises(TappError):
        pytapp.tensordot(a, b, axes)
    assert (counts.direct, counts.planned) == (0, 0), why


@pytest.mark.parametrize("shape", [(1 << 15,), (2, 1 << 14)])
def test_tensordot_long_dot_is_planned_from_the_first_call(counts: Counts,
                                                          shape: tuple[int, ...]) -> None:
    """A full contraction longer than LONG_DOT is not numpy's dot even on its first call: the
    plan sums it in blocks (exact here: integer values)."""
    a, b = _ints(shape, 13), _ints(shape, 14)
    got = pytapp.tensordot(a, b, len(shape))
    assert counts.planned == 1 and counts.direct == 0
    assert got == np.sum(a.astype(object) * b.astype(object))


def test_tensordot_to_0d_is_an_array(counts: Counts) -> None:
    a, b = _ints((3, 4), 9), _ints((3, 4), 10)
    want = np.tensordot(a, b, 2)

    def check(got: Any) -> None:
        assert type(got) is np.ndarray and got.shape == () and got.dtype == np.float64
        assert got == want

    _calls(counts, lambda: pytapp.tensordot(a, b, 2), check, 3 * PLAN_AFTER)
    assert counts.direct >= PLAN_AFTER and counts.planned == 1


@pytest.mark.parametrize("how", ["environment", "argument", "tblis"])
def test_other_backends_never_run_the_matmul(counts: Counts, how: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    kwargs: dict[str, Any] = {}
    if how == "environment":
        monkeypatch.setenv("PYTAPP_BACKEND", "reference")
    elif how == "argument":
        kwargs["backend"] = "reference"
    else:
        if not pytapp.available_backends()["tblis"][0]:
            pytest.skip("tblis is not installed")
        kwargs["backend"] = "tblis"
    ran: list[str] = []
    execute = pytapp.TensorProduct.execute

    def recorded(self: pytapp.TensorProduct, *args: Any, **kw: Any) -> Any:
        status = execute(self, *args, **kw)
        ran.append(status.backend)
        return status

    monkeypatch.setattr(pytapp.TensorProduct, "execute", recorded)
    a, b = _ints((3, 4), 11), _ints((4, 5), 12)
    for _ in range(3):
        np.testing.assert_array_equal(pytapp.einsum("ij,jk->ki", a, b, **kwargs), (a @ b).T)
        np.testing.assert_array_equal(pytapp.tensordot(a, b, 1, **kwargs), a @ b)
    assert counts.direct == 0
    want = "reference" if how != "tblis" else "tblis"
    assert ran and ran[0] == want and set(ran) == {want}


def test_blas_backend_runs_the_matmul(counts: Counts) -> None:
    a, b = _ints((3, 4), 13), _ints((4, 5), 14)
    np.testing.assert_array_equal(pytapp.einsum("ij,jk->ik", a, b, backend="blas"), a @ b)
    np.testing.assert_array_equal(pytapp.tensordot(a, b, 1, backend="blas"), a @ b)
    assert (counts.direct, counts.planned) == (1, 0)  # tensordot's first call: numpy's own
    np.testing.assert_array_equal(pytapp.tensordot(a, b, 1, backend="blas"), a @ b)
    assert (counts.direct, counts.planned) == (2, 0)


def test_products_that_are_not_plain_are_planned_at_once(counts: Counts) -> None:
    a = _ints((3, 3, 4), 15)
    b = _ints((4, 2), 16)
    np.testing.assert_array_equal(pytapp.einsum("iij,jk->ik", a, b), np.einsum("iij,jk->ik", a, b))
    assert (counts.direct, counts.planned) == (0, 1)
    big_a, big_b = np.ones((256, 129)), np.ones((129, 256))
    # blas (which runs the matmul too): auto would plan its candidates, importing torch
    np.testing.assert_array_equal(pytapp.einsum("ij,jk->ik", big_a, big_b, backend="blas"),
                                  np.full((256, 256), 129.0))
    assert (counts.direct, counts.planned) == (0, 2)
    mixed = pytapp.einsum("ij,jk->ik", a[0].astype(np.float32), b)
    assert mixed.dtype == np.float64
    np.testing.assert_array_equal(mixed, a[0] @ b)
    assert counts.direct == 0


@pytest.mark.parametrize("front", ["einsum", "tensordot"])
def test_calls_that_took_planning_time_are_planned(counts: Counts, front: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a product's matmuls took PLANNING_SECONDS (here: any time at all), the next call
    plans it, whatever PLAN_AFTER says; results stay numpy's."""
    monkeypatch.setattr(direct, "PLANNING_SECONDS", 0.0)
    a, b = _ints((3, 4, 5), seed=11), _ints((5, 4, 2), seed=12)
    want = np.einsum("ijk,kjl->il", a, b)

    def call() -> Any:
        if front == "einsum":
            return pytapp.einsum("ijk,kjl->il", a, b)
        return pytapp.tensordot(a, b, ([1, 2], [1, 0]))

    after = _calls(counts, call, lambda got: np.testing.assert_array_equal(got, want), 4)
    if front == "tensordot":  # its first call is numpy's own tensordot, not timed
        assert after == [(0, 0), (1, 0), (1, 1), (1, 1)]
    else:
        assert after == [(1, 0), (1, 1), (1, 1), (1, 1)]


@pytest.mark.parametrize(("sa", "sb", "axes"), [
    ((2, 3, 4), (4, 3, 5), ([1, 2], [1, 0])), ((3, 4), (4, 5), ([1], [0])),
    ((2, 3), (3, 2), ([0, 1], [1, 0])), ((5,), (5,), ([0], [0])), ((2, 1, 3), (3, 4), ([2], [0])),
    ((2, 3, 4), (2, 5), ([0], [0])), ((3, 0, 2), (2, 4), ([2], [0]))])
def test_tensordot_pair_is_numpy_tensordot(sa: tuple[int, ...], sb: tuple[int, ...],
                                           axes: tuple[list[int], list[int]]) -> None:
    """The matmul built from paired modes: numpy.tensordot's values, shape and layout."""
    from pytapp.direct import tensordot_pair

    a, b = _ints(sa, 3), _ints(sb, 4)
    for x, y in ((a, b), (np.asfortranarray(a), b[::-1][::-1])):
        pair = tensordot_pair(x, y, *axes)
        assert pair is not None
        got, want = pair(x, y), np.tensordot(x, y, axes)
        assert got.shape == want.shape and got.flags.c_contiguous
        np.testing.assert_array_equal(got, want)
    assert tensordot_pair(a.astype(np.int64), b.astype(np.int64), *axes) is None
