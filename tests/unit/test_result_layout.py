"""einsum's result layout: the last product writes its natural order, the result is a view.

As numpy.einsum with a path returns tensordot's transposed view, pytapp.einsum (order="K")
returns the last pairwise product's output (labels of both operands, then the first's, then
the second's, each in its operand's order) viewed in the requested order: no permuting copy.
order="C"/"F", out= and einsum_expression give the same values; every result is checked
against numpy.einsum on exact integer data.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import pytapp
from pytapp import numpy_api

CASES = [
    ("ij,jk->ki", [(3, 4), (4, 5)]),
    ("ijk,jkl->li", [(3, 4, 5), (4, 5, 2)]),
    ("bij,bjk->kbi", [(2, 3, 4), (2, 4, 5)]),
    ("ij,jk,kl->li", [(3, 4), (4, 5), (5, 2)]),
    ("ab,bc,cd,de->ea", [(2, 3), (3, 4), (4, 5), (5, 6)]),
    ("ijab,kjcb->ikac", [(3, 4, 2, 5), (6, 4, 3, 5)]),
]


def _ints(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-4, 5, shape).astype(np.float64)


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("_pairs", "_thin", "_chains", "_tensordot_calls"):
        monkeypatch.setattr(numpy_api, name, {})


@pytest.mark.parametrize(("eq", "shapes"), CASES, ids=[c[0] for c in CASES])
def test_repeated_calls_return_the_natural_layout_as_a_view(eq: str,
                                                            shapes: list[Any]) -> None:
    ops = [_ints(s, k) for k, s in enumerate(shapes)]
    want = np.einsum(eq, *ops)
    layouts = set()
    for _ in range(300):  # matmuls, the plan, its compiled chain: one layout throughout
        got = pytapp.einsum(eq, *ops)
        np.testing.assert_array_equal(got, want)
        layouts.add(got.strides)
    assert len(layouts) == 1, layouts
    # the memory holds a product's output order: some permutation of the result is C order
    order = np.argsort([-s for s in got.strides])
    assert np.ascontiguousarray(got.transpose(order)).strides == got.transpose(order).strides


@pytest.mark.parametrize(("eq", "shapes"), CASES, ids=[c[0] for c in CASES])
def test_orders_out_and_expressions_give_the_same_values(eq: str, shapes: list[Any]) -> None:
    ops = [_ints(s, k + 7) for k, s in enumerate(shapes)]
    want = np.einsum(eq, *ops)
    assert pytapp.einsum(eq, *ops, order="C").flags.c_contiguous
    assert pytapp.einsum(eq, *ops, order="F").flags.f_contiguous
    for order in ("C", "F", "A", "K"):
        np.testing.assert_array_equal(pytapp.einsum(eq, *ops, order=order), want)
    out = np.full(want.shape, np.nan)
    assert pytapp.einsum(eq, *ops, out=out) is out
    np.testing.assert_array_equal(out, want)
    expr = pytapp.einsum_expression(eq, *shapes)
    for _ in range(3):
        np.testing.assert_array_equal(expr(*ops), want)
    view_out = np.full(want.shape[::-1], np.nan).T  # out= in another layout
    expr(*ops, out=view_out)
    np.testing.assert_array_equal(view_out, want)


def test_an_elementwise_intermediate_is_laid_out_for_the_gemm_that_reads_it() -> None:
    """CP reconstruction: the outer product jr,kr is written as (j, k, r), so ir,jkr->ijk is
    one GEMM on views, no copy; values are numpy's."""
    n, r = 24, 6
    shapes = [(r,), (n, r), (n, r), (n, r)]
    ops = [_ints(s, k) for k, s in enumerate(shapes)]
    path = [(0, 1), (0, 1), (0, 1)]  # r*ir, then jr,kr, then the GEMM
    expr = pytapp.einsum_expression("r,ir,jr,kr->ijk", *shapes, optimize=path)
    steps = [str(s) for s in expr.network.steps]
    assert steps[1] == "jr,kr->jkr" and steps[2] == "ir,jkr->ijk", steps
    np.testing.assert_array_equal(expr(*ops), np.einsum("r,ir,jr,kr->ijk", *ops))
    algorithms = expr.info().algorithms
    assert "1 gemm on strided views" in algorithms[-1], algorithms


def test_a_summed_intermediate_takes_the_order_both_gemms_read_as_they_lie() -> None:
    """CCSD's klcd,cdij then abkl,(kl ij): the intermediate written (k, l, i, j) is the left
    GEMM's natural result and the right operand the second GEMM reads row-major, where
    (i, j, k, l) transposed both operands of the first GEMM and one of the second."""
    o, v = 3, 4
    shapes = [(o, o, v, v), (v, v, o, o), (v, v, o, o)]
    ops = [_ints(s, k) for k, s in enumerate(shapes)]
    expr = pytapp.einsum_expression("klcd,cdij,abkl->abij", *shapes, optimize=[(0, 1), (0, 1)])
    steps = [str(s) for s in expr.network.steps]
    assert steps == ["klcd,cdij->klij", "abkl,klij->abij"], steps
    np.testing.assert_array_equal(expr(*ops), np.einsum("klcd,cdij,abkl->abij", *ops))
    assert all("1 gemm on strided views" in a for a in expr.info().algorithms)


@pytest.mark.parametrize(("a", "b", "d", "count"), [
    ("ik", "kj", "ij", 0), ("ki", "kj", "ij", 2), ("ik", "jk", "ij", 1), ("ki", "jk", "ij", 3),
    ("ik", "kj", "ji", 3), ("bik", "bkj", "bij", 0), ("bki", "bkj", "bij", 2),
    ("ik", "k", "i", 0), ("ki", "k", "i", 2), ("ij", "jk", "ijk", 0),
])
def test_gemm_transposes_counts_operands_read_against_their_order(a: str, b: str, d: str,
                                                                  count: int) -> None:
    from pytapp.analysis.labels import gemm_transposes
    assert gemm_transposes(a, b, d) == count


@pytest.mark.parametrize(("eq", "shapes", "big"), [
    ("ij,j->ij", [(40, 30), (30,)], 0),  # a row scaled: A's order, not j first as a GEMM's
    ("j,ij->ij", [(30,), (40, 30)], 1),
    ("ijk,ik->ijk", [(5, 6, 7), (5, 7)], 0),
    ("ik,kji->kij", [(5, 7), (7, 6, 5)], 1),  # the larger operand is read in memory order
])
def test_a_final_product_that_sums_nothing_writes_the_larger_operands_order(
        eq: str, shapes: list[Any], big: int) -> None:
    ops = [_ints(s, k + 3) for k, s in enumerate(shapes)]
    want = np.einsum(eq, *ops)
    expr = pytapp.einsum_expression(eq, *shapes)  # planned (no pytapp.direct matmul first)
    for _ in range(3):
        got = expr(*ops)
        np.testing.assert_array_equal(got, want)
    labels = eq.split("->")[0].split(",")[big]
    out = eq.split("->")[1]
    # memory order of the result: the larger operand's labels, in that operand's order
    order = [out.index(ch) for ch in labels if ch in out]
    assert got.transpose(order).flags.c_contiguous
