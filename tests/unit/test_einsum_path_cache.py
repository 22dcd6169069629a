"""A one-shot ``pytapp.einsum`` given an explicit path reuses its compiled expression."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import pytapp
from pytapp import numpy_api
from pytapp.expression import path_key


@pytest.mark.parametrize("path", [[(0, 1), (0, 2), (0, 1)], [[0, 1], [0, 2], [0, 1]],
                                  ["einsum_path", (0, 1), (0, 2), (0, 1)]])
def test_explicit_path_hits_the_one_shot_cache(path: list[Any],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    ops = [rng.standard_normal((3, 3, 3))] + [rng.standard_normal((5, 3)) for _ in range(3)]
    eq = "abc,ia,jb,kc->ijk"
    want = np.einsum(eq, *ops, optimize=["einsum_path", (0, 1), (0, 2), (0, 1)])
    np.testing.assert_allclose(pytapp.einsum(eq, *ops, optimize=path), want, rtol=1e-12)

    def no_planning(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a repeated call with the same path planned again")

    monkeypatch.setattr(numpy_api, "cached_expression", no_planning)
    again = pytapp.einsum(eq, *ops, optimize=list(path))  # an equal list, not the same one
    np.testing.assert_allclose(again, want, rtol=1e-12)


def test_path_key_keeps_other_arguments() -> None:
    assert path_key([(0, 1), [1, 0]]) == ((0, 1), (1, 0))
    optimizer = object()
    assert path_key(optimizer) is optimizer and path_key("greedy") == "greedy"
    assert path_key(True) is True and path_key(None) is None


def test_forget_calls_drops_one_shot_expressions_and_their_budgets() -> None:
    """A benchmark's "new run": the one-shot expression (and its tuning budget) is rebuilt."""
    from pytapp import expression
    from pytapp.numpy_api import forget_calls

    a = np.ones((3, 4))
    pytapp.einsum("ij,jk->ik", a, a.T, optimize=True)
    before = expression.cached_expression("ij,jk->ik", [a, a.T], True, None, None, None)
    forget_calls()
    after = expression.cached_expression("ij,jk->ik", [a, a.T], True, None, None, None)
    assert after is not before


@pytest.mark.parametrize(("eq", "shapes"), [
    ("ij,jk->ik", [(4, 5), (5, 3)]),  # a plain pair: pytapp.direct, then a plan
    ("r,ir->ir", [(48,), (128, 48)]),
    ("ij,jk,kl->il", [(6, 7), (7, 8), (8, 9)]),  # a network: its compiled chain
])
def test_out_hits_the_one_shot_cache_and_every_out_stays_right(
        eq: str, shapes: list[tuple[int, ...]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Repeated calls with out= of the result's shape and dtype take the thin path (one
    lookup, the result written into out); any other out still gets numpy's semantics."""
    for name in ("_thin", "_chains", "_pairs"):
        monkeypatch.setattr(numpy_api, name, {})
    rng = np.random.default_rng(3)
    ops = [rng.integers(-4, 5, s).astype(np.float64) for s in shapes]
    want = np.einsum(eq, *ops)
    out = np.full(want.shape, np.nan)
    for _ in range(4):
        out[...] = np.nan
        assert pytapp.einsum(eq, *ops, out=out) is out
        np.testing.assert_array_equal(out, want)
    assert numpy_api._thin, "an out= call keeps its expression for the thin path"
    calls = []
    monkeypatch.setattr(numpy_api, "_check_out", lambda *a: calls.append(a))  # general path
    again = np.full(want.shape, np.nan)
    assert pytapp.einsum(eq, *ops, out=again) is again
    np.testing.assert_array_equal(again, want)
    assert not calls, "the thin path served it"
    monkeypatch.undo()
    # another dtype (a safe cast), a read-only out, an out aliasing an input: the general path
    wide = np.empty(want.shape, dtype=np.complex128)
    assert pytapp.einsum(eq, *ops, out=wide) is wide
    np.testing.assert_array_equal(wide, want)
    frozen = np.empty(want.shape)
    frozen.flags.writeable = False
    with pytest.raises(pytapp.TappError) as err:
        pytapp.einsum(eq, *ops, out=frozen)
    assert err.value.code == 22
    a, b = (rng.integers(-4, 5, (5, 5)).astype(np.float64) for _ in range(2))
    square = np.einsum("ij,jk->ik", a, b)
    for _ in range(3):  # out is an operand itself: computed whole, then written
        first = a.copy()
        assert pytapp.einsum("ij,jk->ik", first, b, out=first) is first
        np.testing.assert_array_equal(first, square)


def _out_like(shape: tuple[int, ...], order: str) -> np.ndarray:
    if order == "strided":  # every other element of a larger array
        return np.full(tuple(2 * n for n in shape), np.nan)[tuple(slice(None, None, 2)
                                                                  for _ in shape)]
    return np.full(shape, np.nan, order="F" if order == "F" else "C")


@pytest.mark.parametrize("order", ["C", "F", "strided"])
@pytest.mark.parametrize(("eq", "shapes"), [
    ("pqr,pi,qj,rk->ijk", [(24, 24, 24), (24, 40), (24, 40), (24, 40)]),
    ("ij,jk,kl->li", [(300, 40), (40, 50), (50, 200)]),  # the last product's result transposed
    ("ij,jk->ik", [(200, 30), (30, 250)]),
])
def test_out_receives_repeated_results_without_a_result_sized_temporary(
        eq: str, shapes: list[tuple[int, ...]], order: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A repeated einsum call (and an expression's) with out= writes its last product into
    out itself, in out's layout, rather than computing a new result and copying it."""
    import gc
    import tracemalloc

    for name in ("_thin", "_chains", "_pairs"):
        monkeypatch.setattr(numpy_api, name, {})
    rng = np.random.default_rng(11)
    ops = [rng.integers(-3, 4, s).astype(np.float64) for s in shapes]
    want = np.einsum(eq, *ops)
    expr = pytapp.einsum_expression(eq, *shapes)
    out = _out_like(want.shape, order)
    calls = [lambda: pytapp.einsum(eq, *ops, out=out), lambda: expr(*ops, out=out)]
    for call in calls:
        for _ in range(4):  # planned, settled, compiled for out's layout
            assert call() is out
        # tracemalloc counts every thread's allocations (and finalizers the collector runs
        # mid-call): threads and garbage left by earlier tests can add to one call, never to
        # each of three, while a result-sized temporary shows in every call
        peaks = []
        for _ in range(3):
            out[...] = np.nan
            gc.collect()
            tracemalloc.start()
            try:
                assert call() is out
                peaks.append(tracemalloc.get_traced_memory()[1])
            finally:
                tracemalloc.stop()
            np.testing.assert_array_equal(out, want)
        assert min(peaks) < want.nbytes // 4, f"calls allocated {peaks} bytes"
    if order == "strided":  # the elements between out's stay untouched
        assert np.isnan(out.base[tuple(slice(1, None, 2) for _ in want.shape)]).all()


def test_out_that_is_an_operand_of_the_last_product_stays_right() -> None:
    """out aliasing an operand the last product reads: its compiled program leaves the step
    to the plan, which copies the operand first (as numpy.einsum's result)."""
    rng = np.random.default_rng(5)
    a, b, c = (rng.integers(-3, 4, (6, 6)).astype(np.float64) for _ in range(3))
    for _ in range(5):
        x = c.copy()
        want = np.einsum("ij,jk,kl->il", a, b, x)
        assert pytapp.einsum("ij,jk,kl->il", a, b, x, out=x) is x
        np.testing.assert_array_equal(x, want)


@pytest.mark.parametrize(("eq", "shapes", "kwargs"), [
    ("ij,jk->ik", [(3, 4), (4, 5)], {}),  # integers: numpy.einsum computes them
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)], {"optimize": "greedy"}),
    ("ij,jk->ik", [(3, 4), (4, 5)], {"dtype": np.int64}),
    ("ijk->kji", [(3, 4, 5)], {}),  # one operand permuted or viewed along its diagonal:
    ("ii->i", [(4, 4)], {}),  # numpy.einsum's views
    ("ii->", [(300, 300)], {}),  # one operand, few elements read: numpy.einsum's pass
    ("ijk->ik", [(4, 5, 6)], {}),
])
def test_calls_passed_to_numpy_repeat_without_the_general_path(
        eq: str, shapes: list[tuple[int, ...]], kwargs: dict[str, Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A call einsum hands to numpy.einsum is remembered: a repeated one goes straight
    there, with the same result (and, for one operand, the same view of its memory)."""
    for name in ("_thin", "_chains", "_pairs", "_numpy_calls"):
        monkeypatch.setattr(numpy_api, name, {})
    rng = np.random.default_rng(2)
    ints = len(shapes) > 1
    ops = [rng.integers(-5, 6, s) if ints else rng.standard_normal(s) for s in shapes]
    want = np.einsum(eq, *ops, **kwargs)
    first = pytapp.einsum(eq, *ops, **kwargs)
    calls = []
    monkeypatch.setattr(numpy_api, "_check_out", lambda *a: calls.append(a))  # general path
    again = pytapp.einsum(eq, *ops, **kwargs)
    assert not calls, "the repeated call took the general path"
    for got in (first, again):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        if not ints and got.ndim == len(set(eq.split("->")[0])):  # a view: its memory
            assert np.shares_memory(got, ops[0])
    other = [x + 1 for x in ops]  # other arrays of the same layouts: their own result
    np.testing.assert_array_equal(pytapp.einsum(eq, *other, **kwargs),
                                  np.einsum(eq, *other, **kwargs))
