"""How the compiled executor walks memory: merged loop labels, plain complex loops, TTGT's GEMMs
straight into D, and the layout of broadcast results.

Every value is compared with numpy.einsum in float64/complex128 on the same data (exact
integers where the products are exact), never with pytapp's own output.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import pytapp
from pytapp import Handle, TensorInfo, TensorProduct
from pytapp.analysis.program import _coalesce
from pytapp.datatypes import ElementOp
from pytapp.kernels import program

compiled_only = pytest.mark.skipif(not program.available(),
                                   reason="the compiled extension pytapp._cexec was not built")


def _ints(shape: tuple[int, ...], dtype: type, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.integers(-4, 5, shape).astype(np.float64)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.integers(-4, 5, shape)
    return x.astype(dtype)


def _product(a: np.ndarray, la: str, b: np.ndarray, lb: str, d: np.ndarray, ld: str,
             **ops: ElementOp) -> TensorProduct:
    return TensorProduct(Handle("blas"), TensorInfo.from_array(a), la, TensorInfo.from_array(b),
                         lb, None, None, TensorInfo.from_array(d), ld, **ops)


@pytest.mark.parametrize(("nout", "extents", "strides", "want"), [
    # D's c, then e b g contiguous in B and D, absent from A: c and one label of 6144
    (4, [32, 256, 12, 2], [[4, 0, 0, 0], [0, 96, 8, 4], [0, 0, 0, 0], [24576, 96, 8, 4]],
     (2, [32, 6144], [[4, 0], [0, 4], [0, 0], [24576, 4]])),
    # a transposed operand keeps its labels apart; the summed labels merge among themselves
    (2, [3, 4, 5, 6], [[0, 0, 48, 8], [4, 12, 0, 0], [0, 0, 0, 0], [4, 12, 0, 0]],
     (2, [3, 4, 30], [[0, 0, 8], [4, 12, 0], [0, 0, 0], [4, 12, 0]])),
    # labels of extent 1 are dropped (one of D's is kept where D has only those; summed ones
    # of extent 1 sum one term: none is kept)
    (3, [1, 5, 1, 1], [[0, 8, 0, 0], [0, 8, 0, 0], [0, 0, 0, 0], [40, 8, 8, 0]],
     (1, [5], [[8], [8], [0], [8]])),
    (1, [1, 1, 1], [[8, 8, 8], [0, 16, 16], [0, 0, 0], [8, 0, 0]],
     (1, [1], [[8], [0], [0], [8]])),
    # a label outer in D but inner in A (strides that do not nest) stays separate
    (2, [4, 3], [[8, 32], [0, 0], [0, 0], [24, 8]], (2, [4, 3], [[8, 32], [0, 0], [0, 0],
                                                                  [24, 8]])),
])
def test_coalesce_merges_only_labels_every_operand_steps_over_as_one(
        nout: int, extents: list[int], strides: list[list[int]],
        want: tuple[int, list[int], list[list[int]]]) -> None:
    assert _coalesce(nout, extents, strides) == want


@compiled_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize(("la", "sa", "lb", "sb", "ld"), [
    ("c", (32,), "ebg", (16, 6, 2), "cebg"),  # an outer product: D's inner labels merge
    ("ebg", (16, 6, 2), "c", (32,), "ebgc"),  # ... where they are the smaller operand's
    ("ab", (12, 10), "ab", (12, 10), "ab"),  # a Hadamard product over one merged label
    ("abk", (6, 5, 7), "kab", (7, 6, 5), "ab"),  # a sum over k, read against D's order
    ("ijkl", (3, 4, 5, 6), "kl", (5, 6), "ij"),  # a sum over k and l merged
    ("fgc", (16, 1, 8), "bg", (1, 1), "bfc"),  # a sum of one term: elementwise, not a GEMM
])
def test_loop_nests_over_merged_labels_match_numpy(dtype: type, la: str, sa: tuple[int, ...],
                                                   lb: str, sb: tuple[int, ...],
                                                   ld: str) -> None:
    a, b = _ints(sa, dtype, 1), _ints(sb, dtype, 2)
    sizes = dict(zip(la + lb, sa + sb, strict=True))
    d = np.full([sizes[x] for x in ld], np.nan, dtype=dtype)
    plan = _product(a, la, b, lb, d, ld)
    status = plan.execute(1, a, b, 0, None, d)
    assert status.algorithm.startswith("compiled: loop nest"), status.algorithm
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    want = np.einsum(f"{la},{lb}->{ld}", a.astype(wide), b.astype(wide))
    np.testing.assert_array_equal(d.astype(wide), want)


@compiled_only
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize(("la", "sa", "lb", "sb", "ld"), [
    ("de", (20, 6), "c", (7,), "cde"),  # B constant along the run: folded into alpha
    ("c", (7,), "de", (20, 6), "cde"),  # A constant along the run
    ("de", (20, 6), "de", (20, 6), "de"),  # both along it
    ("c", (7,), "d", (20,), "dc"),  # a run of 7 over A, B constant
])
@pytest.mark.parametrize("conj", list(itertools.product((False, True), repeat=3)),
                         ids=lambda c: "".join("c" if x else "-" for x in c))
def test_plain_complex_loops_apply_alpha_and_every_conjugation(
        dtype: type, la: str, sa: tuple[int, ...], lb: str, sb: tuple[int, ...], ld: str,
        conj: tuple[bool, bool, bool]) -> None:
    a, b = _ints(sa, dtype, 3), _ints(sb, dtype, 4)
    sizes = dict(zip(la + lb, sa + sb, strict=True))
    d = np.full([sizes[x] for x in ld], np.nan, dtype=dtype)
    op = {True: ElementOp.CONJUGATE, False: ElementOp.IDENTITY}
    plan = _product(a, la, b, lb, d, ld, op_a=op[conj[0]], op_b=op[conj[1]], op_d=op[conj[2]])
    alpha = 2 - 3j
    status = plan.execute(alpha, a, b, 0, None, d)
    assert status.algorithm.startswith("compiled: loop nest"), status.algorithm
    x = np.conj(a) if conj[0] else a
    y = np.conj(b) if conj[1] else b
    want = alpha * np.einsum(f"{la},{lb}->{ld}", x.astype(np.complex128),
                             y.astype(np.complex128))
    if conj[2]:
        want = np.conj(want)
    np.testing.assert_array_equal(d.astype(np.complex128), want)


@pytest.mark.parametrize(("eq", "shapes", "memory_order"), [
    ("ik,jk->ijk", [(30, 64), (20, 64)], "jik"),  # the smaller's own labels outside a run
    ("g,ch->hcg", [(200,), (32, 3)], "chg"),  # of the larger's that holds 128 elements
    ("ab,c->abc", [(50, 400), (5,)], "acb"),  # ... inside its outer labels
    ("de,c->dce", [(200, 24), (7,)], "cde"),  # rows of 24: the whole larger operand
    ("ij,j->ij", [(40, 30), (30,)], "ij"),  # nothing of the smaller's own
])
def test_a_final_broadcast_product_writes_long_runs_of_the_larger_operand(
        eq: str, shapes: list[tuple[int, ...]], memory_order: str) -> None:
    ops = [_ints(s, np.float64, k + 5) for k, s in enumerate(shapes)]
    want = np.einsum(eq, *ops)
    expr = pytapp.einsum_expression(eq, *shapes)
    out = eq.split("->")[1]
    for _ in range(3):
        got = expr(*ops)
        np.testing.assert_array_equal(got, want)
        assert got.transpose([out.index(ch) for ch in memory_order]).flags.c_contiguous


@compiled_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("with_c", [False, True])
def test_ttgt_writes_d_directly_where_it_lies_as_the_gemms_result(dtype: type,
                                                                  with_c: bool) -> None:
    # bdfg,egbc->dfec: A and B packed (the summed b, g apart in both), T = [df][ec] is D's order
    a, b = _ints((2, 12, 8, 2), dtype, 6), _ints((9, 2, 2, 3), dtype, 7)
    c = _ints((12, 8, 9, 3), dtype, 8)
    d = np.full((12, 8, 9, 3), np.nan, dtype=dtype)
    infos = [TensorInfo.from_array(x) for x in (a, b, c, d)]
    plan = TensorProduct(Handle("blas"), infos[0], "bdfg", infos[1], "egbc", infos[2], "dfec",
                         infos[3], "dfec")
    assert "compiled: ttgt" in plan.algorithm and "gemm into D" in plan.algorithm
    alpha, beta = (2, -1) if np.dtype(dtype).kind == "f" else (2 - 1j, 1 + 2j)
    status = plan.execute(alpha, a, b, beta if with_c else 0, c if with_c else None, d)
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    want = alpha * np.einsum("bdfg,egbc->dfec", a.astype(wide), b.astype(wide))
    if with_c:
        want += beta * c.astype(wide)
    np.testing.assert_array_equal(d.astype(wide), want)
    packed = (a.size + b.size) * a.itemsize
    # without C no temporary is made: only the packed operands are allocated
    assert status.bytes_allocated == packed + (d.nbytes if with_c else 0), status


@compiled_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize(("la", "sa", "lb", "sb", "ld", "rows"), [
    ("kab", (6, 5, 40), "kab", (6, 5, 40), "ab", True),  # both operands along D's rows
    ("kab", (6, 5, 40), "ka", (6, 5), "ab", True),  # B constant along them
    ("ka", (6, 5), "kab", (6, 5, 40), "ab", True),  # A constant along them
    ("kab", (300, 2, 9), "kab", (300, 2, 9), "ab", True),  # blocks of 256 summed elements
    ("dcab", (4, 6, 3, 20), "adbc", (3, 4, 20, 6), "dbc", False),  # rows of 6: by element
    ("kjab", (3, 2, 5, 16), "bajk", (16, 5, 2, 3), "ab", False),  # B strides along the rows
])
@pytest.mark.parametrize("with_c", [False, True])
def test_batched_dots_summed_row_by_row_match_numpy(dtype: type, la: str, sa: tuple[int, ...],
                                                    lb: str, sb: tuple[int, ...], ld: str,
                                                    rows: bool, with_c: bool) -> None:
    a, b = _ints(sa, dtype, 9), _ints(sb, dtype, 10)
    sizes = dict(zip(la + lb, sa + sb, strict=True))
    shape = [sizes[x] for x in ld]
    c = _ints(tuple(shape), dtype, 11)
    d = np.full(shape, np.nan, dtype=dtype)
    cplx = np.dtype(dtype).kind == "c"
    op = ElementOp.CONJUGATE if cplx else ElementOp.IDENTITY
    infos = [TensorInfo.from_array(x) for x in (a, b, c, d)]
    plan = TensorProduct(Handle("blas"), infos[0], la, infos[1], lb, infos[2], ld, infos[3], ld,
                         op_a=op)
    alpha, beta = (3 + 1j, 2 - 1j) if cplx else (3, 2)
    status = plan.execute(alpha, a, b, beta if with_c else 0, c if with_c else None, d)
    assert status.algorithm.startswith("compiled: loop nest"), status.algorithm
    assert ("row by row" in status.algorithm) == rows, status.algorithm
    wide = np.complex128 if cplx else np.float64
    x = np.conj(a) if cplx else a
    want = alpha * np.einsum(f"{la},{lb}->{ld}", x.astype(wide), b.astype(wide))
    if with_c:
        want += beta * c.astype(wide)
    np.testing.assert_array_equal(d.astype(wide), want)


@compiled_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("conj_b", [False, True])
@pytest.mark.parametrize(("c", "route"), [(12, "ttgt"), (3, "rows")])
def test_ttgt_packs_operands_whose_fastest_label_moves_outermost(dtype: type, conj_b: bool,
                                                                 c: int, route: str) -> None:
    # bcge,gabe->eca: e, B's fastest label, is the GEMMs' batch label (packed outermost); with
    # c of 3 those GEMMs would be 20x3x16: the rows along e (in A, B and D) are summed instead
    a, b = _ints((16, c, 4, 24), dtype, 12), _ints((4, 20, 16, 24), dtype, 13)
    d = np.full((24, c, 20), np.nan, dtype=dtype)
    cplx = np.dtype(dtype).kind == "c"
    op = ElementOp.CONJUGATE if conj_b and cplx else ElementOp.IDENTITY
    plan = _product(a, "bcge", b, "gabe", d, "eca", op_b=op)
    if route == "ttgt":
        assert "compiled: ttgt" in plan.algorithm and "packs A, B" in plan.algorithm
    else:
        assert "summed row by row" in plan.algorithm, plan.algorithm
    plan.execute(1, a, b, 0, None, d)
    wide = np.complex128 if cplx else np.float64
    y = np.conj(b) if op is ElementOp.CONJUGATE else b
    want = np.einsum("bcge,gabe->eca", a.astype(wide), y.astype(wide))
    np.testing.assert_array_equal(d.astype(wide), want)


def _run_checked(equation: str, a: np.ndarray, b: np.ndarray, c: np.ndarray | None,
                 d: np.ndarray, route: str, conj_b: bool = False) -> None:
    """Plan ``equation`` on blas with C (or none), check its route names ``route``, run it
    with a (complex) alpha and beta, and compare D with numpy.einsum in float64/complex128."""
    (la, lb), ld = equation.split("->")[0].split(","), equation.split("->")[1]
    cplx = np.dtype(d.dtype).kind == "c"
    alpha, beta = (2 - 1j, 1 + 2j) if cplx else (2.0, -3.0)
    op_b = ElementOp.CONJUGATE if conj_b and cplx else ElementOp.IDENTITY
    infos = [TensorInfo.from_array(x) for x in (a, b, d)]
    plan = TensorProduct(Handle("blas"), infos[0], la, infos[1], lb,
                         None if c is None else TensorInfo.from_array(c),
                         None if c is None else ld, infos[2], ld, op_b=op_b)
    assert route in plan.algorithm, plan.algorithm
    plan.execute(alpha, a, b, 0 if c is None else beta, c, d)
    wide = np.complex128 if cplx else np.float64
    y = np.conj(b) if op_b is ElementOp.CONJUGATE else b
    want = alpha * np.einsum(equation, a.astype(wide), y.astype(wide))
    if c is not None:
        want += beta * c.astype(wide)
    np.testing.assert_array_equal(d.astype(wide), want)


@compiled_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("with_c", [False, True])
def test_gemv_like_sums_rows_along_a_label_strided_in_d(dtype: type, with_c: bool) -> None:
    # dacb,cd->ba: b runs along A's memory but strides through D (by a's extent of 3); the
    # nest takes b innermost and writes each row of D once, strided, C read the same way
    a, b = _ints((16, 3, 64, 16), dtype, 21), _ints((64, 16), dtype, 22)
    d = np.full((16, 3), np.nan, dtype=dtype)
    c = _ints((3, 16), dtype, 23).T if with_c else None  # C in its own (transposed) layout
    _run_checked("dacb,cd->ba", a, b, c, d, "summed row by row")


def _operands(equation: str, shapes: tuple[tuple[int, ...], ...], dtype: type,
              seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A and B of ``shapes`` (exact integers; seeds ``seed`` and ``seed + 1``), D all NaN."""
    a, b = _ints(shapes[0], dtype, seed), _ints(shapes[1], dtype, seed + 1)
    sizes = dict(zip(equation.split("->")[0].replace(",", ""), (*shapes[0], *shapes[1]),
                     strict=True))
    return a, b, np.full([sizes[x] for x in equation.split("->")[1]], np.nan, dtype=dtype)


@compiled_only
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize(("d_extent", "with_c"), [(3, False), (2, True), (3, True)])
def test_short_rows_where_no_gemm_or_gemv_maps_the_product(dtype: type, d_extent: int,
                                                           with_c: bool) -> None:
    # bacd,bc->ad: the rows along d (3 or 2) run along A, B is constant along them and sums
    # along its memory; no GEMV of 3 rows is worth its call
    a, b = _ints((12, 16, 128, d_extent), dtype, 31), _ints((12, 128), dtype, 32)
    d = np.full((16, d_extent), np.nan, dtype=dtype)
    c = _ints((d_extent, 16), dtype, 33).T if with_c else None
    _run_checked("bacd,bc->ad", a, b, c, d, "summed row by row")


@compiled_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("with_c", [False, True])
def test_ttgt_packs_and_store_shared_out_over_threads(dtype: type, with_c: bool) -> None:
    # ijab,kjcb->ikac: A and the GEMM's temporary (m x 64, m = 16 a) are 256 KB or more, so
    # the pack and the store into D (with C) are split over the pool along their first label
    va = 64 if np.dtype(dtype).itemsize == 4 else 32
    a, b = _ints((16, 4, va, 16), dtype, 41), _ints((8, 4, 8, 16), dtype, 42)
    d = np.full((16, 8, va, 8), np.nan, dtype=dtype)
    c = _ints((16, va, 8, 8), dtype, 43).transpose(0, 2, 1, 3) if with_c else None
    _run_checked("ijab,kjcb->ikac", a, b, c, d, "packs A, B;", conj_b=True)


@pytest.mark.parametrize(("equation", "shapes", "written"), [
    # A's labels first would read both operands transposed (d runs fastest in A, ba in B)
    ("bad,cba->cd", [(12, 4, 200), (256, 12, 4)], "cd"),
    ("bad,cba->dc", [(12, 4, 200), (256, 12, 4)], "cd"),
    # A's labels first reads both as they lie: kept
    ("dab,abc->cd", [(200, 12, 4), (12, 4, 256)], "dc"),
])
def test_a_free_result_takes_the_orientation_whose_gemm_reads_operands_as_they_lie(
        equation: str, shapes: list[tuple[int, ...]], written: str) -> None:
    expr = pytapp.einsum_expression(equation, *shapes)
    assert expr.network.steps[-1].out_labels == written
    ops = [_ints(s, np.float32, k + 51) for k, s in enumerate(shapes)]
    got = expr(*ops)
    want = np.einsum(equation, *(x.astype(np.float64) for x in ops))
    np.testing.assert_array_equal(got.astype(np.float64), want)


def test_an_elementwise_step_keeps_its_larger_operands_fastest_label_innermost() -> None:
    shapes = [(8, 64), (8, 50, 64, 96), (64, 3, 8, 96)]
    expr = pytapp.einsum_expression("gb,gabe,bcge->cea", *shapes, optimize=[(0, 1), (0, 1)])
    first = expr.network.steps[0]
    assert first.b_labels == "gabe" or first.a_labels == "gabe"
    assert first.out_labels.endswith("e"), first  # not the reader's order, which ends in g
    ops = [_ints(s, np.float64, k + 14) for k, s in enumerate(shapes)]
    np.testing.assert_array_equal(expr(*ops), np.einsum("gb,gabe,bcge->cea", *ops))


@compiled_only
@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
@pytest.mark.parametrize(("la", "sa", "lb", "sb", "ld", "loop"), [
    # a GEMV-like product no GEMV reads in place (A's matrices stride both ways): a loop nest
    ("abcd", (50, 16, 32, 3), "acd", (50, 32, 3), "adb", True),
    ("bkc", (8, 64, 300), "kc", (64, 300), "bc", True),
    # one where a GEMV per summed element reads A in place stays with blas's reduce route
    ("kij", (8, 4000, 16), "kj", (8, 16), "i", False),
])
def test_gemv_like_products_without_gemv_views_run_as_loop_nests(
        dtype: type, la: str, sa: tuple[int, ...], lb: str, sb: tuple[int, ...], ld: str,
        loop: bool) -> None:
    a, b = _ints(sa, dtype, 15), _ints(sb, dtype, 16)
    sizes = dict(zip(la + lb, sa + sb, strict=True))
    d = np.full([sizes[x] for x in ld], np.nan, dtype=dtype)
    plan = _product(a, la, b, lb, d, ld)
    status = plan.execute(1, a, b, 0, None, d)
    assert status.algorithm.startswith("compiled: loop nest") == loop, status.algorithm
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    np.testing.assert_array_equal(d.astype(wide),
                                  np.einsum(f"{la},{lb}->{ld}", a.astype(wide), b.astype(wide)))


@compiled_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("with_c", [False, True])
@pytest.mark.parametrize(("la", "sa", "lb", "sb", "ld"), [
    ("bacd", (4, 5, 6, 3), "d", (3,), "bacd"),  # rows of 3: two labels looped plainly
    ("ab", (7, 3), "b", (3,), "ab"),  # two labels in all
    ("a", (7,), "b", (3,), "ab"),  # an outer product of two vectors
    ("abc", (3, 4, 5), "acb", (3, 5, 4), "abc"),  # B strided along D's rows
])
def test_elementwise_loop_nests_with_short_rows_match_numpy(
        dtype: type, with_c: bool, la: str, sa: tuple[int, ...], lb: str,
        sb: tuple[int, ...], ld: str) -> None:
    a, b = _ints(sa, dtype, 17), _ints(sb, dtype, 18)
    sizes = dict(zip(la + lb, sa + sb, strict=True))
    shape = tuple(sizes[x] for x in ld)
    c = _ints(shape, dtype, 19)
    d = np.full(shape, np.nan, dtype=dtype)
    infos = [TensorInfo.from_array(x) for x in (a, b, c, d)]
    plan = TensorProduct(Handle("blas"), infos[0], la, infos[1], lb, infos[2], ld, infos[3], ld)
    cplx = np.dtype(dtype).kind == "c"
    alpha, beta = (2 + 1j, 1 - 2j) if cplx else (2, -3)
    status = plan.execute(alpha, a, b, beta if with_c else 0, c if with_c else None, d)
    assert status.algorithm.startswith("compiled: loop nest"), status.algorithm
    wide = np.complex128 if cplx else np.float64
    want = alpha * np.einsum(f"{la},{lb}->{ld}", a.astype(wide), b.astype(wide))
    if with_c:
        want += beta * c.astype(wide)
    np.testing.assert_array_equal(d.astype(wide), want)


@compiled_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize(("equation", "shapes"), [
    # f, A's isolated innermost label, summed along 70 contiguous terms (8 partial sums in
    # real types, a tail of 6), then e, a second isolated label, adds its terms to the same
    ("nuif,mn->mui", ((8, 20, 30, 70), (16, 8))),
    ("nueif,mn->mui", ((8, 20, 2, 30, 67), (16, 8))),
    # f summed across the whole of A, whose other labels lie as the pack writes them: one row
    ("fpwdm,oqp->mwoqd", ((3, 24, 6, 9, 16), (5, 6, 24))),
    # s (41: 5 partial sums' steps and a tail of 1) summed per element of [d][i][p][t], the
    # elements walked in A's order (d, the pack's first label, is A's second fastest)
    ("iptds,dl->lipt", ((6, 5, 3, 7, 41), (7, 20))),
    # runs of 17 (partial sums and a tail) and 15 (one sum) at the edge of PACK_LANES_RUN
    ("kfsyx,srk->yrf", ((5, 3, 4, 6, 17), (4, 30, 5))),
    ("kfsyx,srk->yrf", ((5, 3, 4, 6, 15), (4, 30, 5))),
])
def test_packs_that_sum_long_runs_and_merged_rows_match_numpy(dtype: type, equation: str,
                                                              shapes: tuple[tuple[int, ...],
                                                                            ...]) -> None:
    a, b, d = _operands(equation, shapes, dtype, 31)
    c = _ints(d.shape, dtype, 33)
    _run_checked(equation, a, b, c, d, "packs A")
    _run_checked(equation, a, b, None, d, "packs A", conj_b=True)


@compiled_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_packed_copies_merge_labels_that_run_as_one_after_ordering(dtype: type) -> None:
    # B's n and i lie next to each other in B and in its pack: one loop after the pack's
    # order is chosen; z, A's isolated label, is summed as A is packed
    a, b = _ints((4, 6, 13, 4, 7, 4, 9), dtype, 41), _ints((21, 6, 4, 7, 4), dtype, 42)
    d = np.full((21, 4, 13, 7), np.nan, dtype=dtype)
    _run_checked("pnmtuiz,aniut->apmu", a, b, _ints(d.shape, dtype, 43), d, "packs A, B")


@compiled_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize(("equation", "shapes"), [
    # c summed out of A (kecoz) into [z][o][k e]: z, the source's fastest label, is the pack's
    # first; rows of (o z) run on in the source right before c's terms (one row of 133), and
    # a pack of 272 KB or more (F64: 545 KB) is shared out along (k e), not along z
    ("kecoz,wezkr->wozr", ((16, 32, 5, 7, 19), (3, 32, 19, 16, 2))),
    ("wezkr,kecoz->wozr", ((3, 32, 19, 16, 2), (16, 32, 5, 7, 19))),
    # i summed out of A: rows of (x k), 1102 long, in chunks (F32: k's own rows are 76 bytes)
    ("lixk,klq->qx", ((3, 9, 58, 19), (19, 3, 5))),
    ("klq,lixk->qx", ((19, 3, 5), (3, 9, 58, 19))),
])
def test_packs_that_sum_rows_of_two_labels_and_cut_along_another_label(
        dtype: type, equation: str, shapes: tuple[tuple[int, ...], ...]) -> None:
    a, b, d = _operands(equation, shapes, dtype, 51)
    _run_checked(equation, a, b, _ints(d.shape, dtype, 53), d, "compiled: ttgt")
    _run_checked(equation, a, b, None, d, "compiled: ttgt", conj_b=True)


@compiled_only
@pytest.mark.parametrize("shape", [((1 << 15) - 1,), (1 << 15,), (40013,), (8, 32, 1024),
                                   (3, 7, 41, 97)])
@pytest.mark.parametrize("with_c", [False, True])
def test_a_whole_f64_dot_runs_compiled(shape: tuple[int, ...], with_c: bool) -> None:
    # a scalar D summing one contiguous run of A and B: the loop nest's dot, and from 2**15
    # terms on chunks of 2**13 shared out over the pool, added in order (the last chunk short)
    labels = "ijkl"[:len(shape)]
    a, b = _ints(shape, np.float64, 71), _ints(shape, np.float64, 72)
    c = np.array(5.0) if with_c else None
    _run_checked(f"{labels},{labels}->", a, b, c, np.array(np.nan), "compiled: loop nest")


@compiled_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("equation", ["vpsyuz,lauyrvs->lazru", "lauyrvs,vpsyuz->lazru"])
@pytest.mark.parametrize(("v", "s", "flip"), [(2, 10, False), (6, 120, False), (6, 120, True)])
def test_packs_that_sum_in_the_sources_order_then_permute(dtype: type, equation: str, v: int,
                                                          s: int, flip: bool) -> None:
    # p summed out of vpsyuz into [u][v s y][z]: z (3) too short for rows, while (s y u z)
    # runs on in the source; summed in the source's order in blocks, then permuted into the
    # pack. (2, 10): one block, one worker; (6, 120): the pack shared out along v, 95 KB per
    # v in F64 and C64, so blocks of one v (F32: two, each worker's last cut short); flip: v
    # and p read backwards (negative strides)
    extents = dict(zip("vpsyuzlar", (v, 3, s, 3, 11, 3, 2, 2, 3), strict=True))
    la, lb = equation.split("->")[0].split(",")
    a, b = (_ints(tuple(extents[x] for x in labels), dtype, seed)
            for labels, seed in ((la, 61), (lb, 62)))
    if flip:
        a, b = ((x[::-1, ::-1] if labels.startswith("vp") else x)
                for x, labels in ((a, la), (b, lb)))
    d = np.full([extents[x] for x in "lazru"], np.nan, dtype=dtype)
    _run_checked(equation, a, b, _ints(d.shape, dtype, 63), d, "compiled: ttgt")
    _run_checked(equation, a, b, None, d, "compiled: ttgt", conj_b=True)


@compiled_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize(("equation", "shapes", "route"), [
    # each GEMV on a view would read 60 rows of j (12 numbers) f * j numbers apart: one GEMV
    # over (f j) reads A in order, its result stored into D transposed
    ("ifj,i->jf", ((60, 40, 12), (60,)), "packs none"),
    ("i,ifj->jf", ((60,), (60, 40, 12)), "packs none"),
    # a batch (d) of GEMVs, the vector packed
    ("dqkb,bd->qdk", ((30, 20, 13, 30), (30, 30)), "packs B"),
    ("mpown,mp->nwo", ((12, 13, 10, 8, 9), (12, 13)), "packs none"),
])
def test_gemv_like_products_whose_views_scatter_run_as_one_gemv(
        dtype: type, equation: str, shapes: tuple[tuple[int, ...], ...], route: str) -> None:
    a, b, d = _operands(equation, shapes, dtype, 61)
    _run_checked(equation, a, b, _ints(d.shape, dtype, 63), d, "compiled: ttgt")
    _run_checked(equation, a, b, _ints(d.shape, dtype, 63), d, route)
    d[...] = np.nan
    _run_checked(equation, a, b, None, d, "compiled:", conj_b=True)  # B conjugated: packed


@compiled_only
@pytest.mark.parametrize(("equation", "shapes", "cache", "reused", "dtype"), [
    # B (4.5 MB F64) does not move along g: g innermost, each slice of B read once, where x
    # innermost read it once per g (16 slices of 280 KB between, past a cache of 1 MiB)
    *(("hgl,xfh->xlgf", [(258, 8, 7), (16, 136, 258)], 1 << 20, "b", t)
      for t in (np.float32, np.float64, np.complex64)),
    # summed over r (kept outermost, D's stride 0); B (24 MB) steps by a part of its rows
    # along z, by whole slices along m: z innermost
    ("rzql,rmidzl->zmqid", [(4, 16, 6, 25), (4, 20, 19, 5, 16, 25)], 8 << 20, "part",
     np.float64),
])
def test_batched_gemms_on_views_loop_in_the_order_that_fetches_fewest_lines(
        monkeypatch: pytest.MonkeyPatch, equation: str, shapes: list[tuple[int, ...]],
        cache: int, reused: str, dtype: type) -> None:
    from pytapp.analysis import program as lowering

    (la, lb), ld = equation.split("->")[0].split(","), equation.split("->")[1]
    alpha, beta = (2 - 1j, 1 + 2j) if np.dtype(dtype).kind == "c" else (2.0, -3.0)
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    steps = {}
    monkeypatch.setattr(lowering, "BATCH_ORDER_BYTES", cache)
    for name, margin in (("lowering", 0.0), ("fewest lines", lowering.BATCH_ORDER_MARGIN)):
        monkeypatch.setattr(lowering, "BATCH_ORDER_MARGIN", margin)
        lowering._lower.cache_clear()
        a, b, d = _operands(equation, (shapes[0], shapes[1]), dtype, 61)
        c = _ints(d.shape, dtype, 63)  # (summed GEMMs on views add into D where C lies as D)
        plan = TensorProduct(Handle("blas"), TensorInfo.from_array(a), la,
                             TensorInfo.from_array(b), lb, TensorInfo.from_array(c), ld,
                             TensorInfo.from_array(d), ld)
        assert "gemms on strided views" in plan.algorithm, plan.algorithm
        steps[name] = lowering.lower(plan.spec).gemm
        plan.execute(alpha, a, b, beta, c, d)
        want = alpha * np.einsum(equation, a.astype(wide), b.astype(wide)) + beta * c
        np.testing.assert_array_equal(d.astype(wide), want)
    lowering._lower.cache_clear()
    old, new = steps["lowering"], steps["fewest lines"]
    assert sorted(zip(old.batch_extents, old.batch_b, strict=True)) == sorted(
        zip(new.batch_extents, new.batch_b, strict=True))  # the same labels, reordered
    assert new.batch_d[:new.summed] == old.batch_d[:old.summed] == (0,) * old.summed
    if reused == "b":  # B stays where it was from one GEMM to the next
        assert old.batch_b[-1] != 0 and new.batch_b[-1] == 0
    else:  # B moves by less than a slice's run
        assert 0 < new.batch_b[-1] < old.batch_b[-1]


@compiled_only
def test_boxes_holding_a_whole_batch_take_fewer_rows_where_a_box_would_outgrow_its_bytes(
        ) -> None:
    """``xhfr,crx->hcfx``: D runs along the batch label x (its fastest), so each box of T holds
    every GEMM of the batch; 70 rows of each of 50 would make a box of 2.8 MB, so it takes one
    index of h (15 rows of each: 606 KB), where it had run as 75750 GEMVs on views. With k
    more than TILE_BATCH_K_ROWS times the rows left, the box is not cut (each GEMM packs its
    other operand again per box)."""
    from pytapp.analysis import program as lowering

    equation, shapes = "xhfr,crx->hcfx", ((50, 55, 15, 35), (101, 35, 50))
    a, b, d = _operands(equation, shapes, np.float64, 71)
    c = _ints(d.shape, np.float64, 73)
    _run_checked(equation, a, b, c, d, "the whole batch's")
    pack = lowering.lower(_product(a, "xhfr", b, "crx", d, "hcfx").spec).pack
    assert pack.block_gemms == 50 and pack.bytes_t <= lowering.TILE_BATCH_BYTES
    long_k = _product(np.zeros((50, 55, 15, 70)), "xhfr", np.zeros((101, 70, 50)), "crx", d,
                      "hcfx")
    low = lowering.lower(long_k.spec)
    assert low is None or low.pack is None or low.pack.block_gemms == 1, low


@compiled_only
def test_a_ttgt_of_gigaflops_storing_a_whole_t_larger_than_its_store_bound_runs_compiled(
        ) -> None:
    """``tpcgr,wxtpz->zgcwrx`` (F32): one GEMM of 10000 x 420 x 348 (2.9 GFlop, above
    TTGT_MAX_FLOPS) whose 16.8 MB T (above TTGT_STORE_MAX_BYTES) is stored into D, which
    interleaves A's free labels with B's. The executor packs and stores it (within
    TTGT_MAX_BYTES) where the backend's plan had run it over 25 slices."""
    from pytapp.analysis import program as lowering

    equation = "tpcgr,wxtpz->zgcwrx"
    shapes = ((6, 58, 10, 25, 40), (6, 7, 6, 58, 10))
    a, b, d = _operands(equation, shapes, np.float32, 81)
    c = _ints(d.shape, np.float32, 83)
    _run_checked(equation, a, b, c, d, "compiled: ttgt")
    low = lowering.lower(_product(a, "tpcgr", b, "wxtpz", d, "zgcwrx").spec)
    assert low.flops > lowering.TTGT_MAX_FLOPS
    assert lowering.TTGT_STORE_MAX_BYTES < low.pack.bytes_t <= lowering.TTGT_MAX_BYTES


@compiled_only
@pytest.mark.parametrize(("dtype", "u"), [(np.float64, 26), (np.complex128, 13)])
def test_a_batch_whose_packs_exceed_the_scratch_bound_packs_its_thick_operand_in_blocks(
        dtype: type, u: int) -> None:
    """``asex,sreauf->uarxf``: 16 GEMMs (batch ``a``) of 12 x 4680 (2340 complex) x 144 whose
    whole packs and T (an 82 MiB B) exceed TTGT_MAX_BYTES while T (6.9 MB) is below
    TTGT_STORE_MAX_BYTES: a thin side of 12 (at most THIN_SCRATCH_MAX), so B is packed in
    blocks, each multiplied and stored while in cache, where the backend's plan had run it.
    With C, B conjugated, against numpy.einsum on exact integers."""
    from pytapp.analysis import program as lowering

    equation = "asex,sreauf->uarxf"
    ext = {"a": 16, "x": 12, "f": 36, "r": 5, "u": u, "e": 8, "s": 18}
    shapes = tuple(tuple(ext[x] for x in labels) for labels in ("asex", "sreauf"))
    a, b, d = _operands(equation, shapes, dtype, 91)
    c = _ints(d.shape, dtype, 93)
    _run_checked(equation, a, b, c, d, "in blocks of", conj_b=True)
    pack = lowering.lower(_product(a, "asex", b, "sreauf", d, "uarxf").spec).pack
    assert pack.bytes_a + pack.bytes_b + pack.bytes_t > lowering.TTGT_MAX_BYTES
    assert pack.blocked == 1 and pack.scratch_bytes(1) <= lowering.TTGT_MAX_BYTES


@compiled_only
def test_a_wide_batch_beyond_the_scratch_bound_is_packed_in_blocks_only_as_the_alternative(
        ) -> None:
    """``yxgjk,mgjxw->yxwmk`` (F64): 19 GEMMs of 1404 x 44 x 265, a 56.5 MB B; its packs and T
    exceed TTGT_MAX_BYTES. The lowering runs 7524 GEMMs on views (its thin side of 44 is above
    THIN_SCRATCH_MAX); the alternative an auto plan tries packs B in blocks holding every GEMM
    of the batch (at least 44 rows of each), and computes the product exactly."""
    from pytapp.analysis import program as lowering
    from pytapp.kernels.program import compile_alternative
    from pytapp.status import Status

    equation = "yxgjk,mgjxw->yxwmk"
    ext = {"x": 19, "y": 11, "k": 4, "m": 36, "w": 39, "g": 53, "j": 5}
    shapes = tuple(tuple(ext[x] for x in labels) for labels in ("yxgjk", "mgjxw"))
    a, b, d = _operands(equation, shapes, np.float64, 95)
    c = _ints(d.shape, np.float64, 97)
    spec = _product(a, "yxgjk", b, "mgjxw", d, "yxwmk").spec
    assert lowering.lower(spec).kind is lowering.Step.GEMM
    alt = lowering.alternative(spec)
    assert alt is not None and alt.pack is not None and alt.pack.block_gemms == 19
    assert alt.pack.block * alt.pack.block_unit >= 44
    run = compile_alternative(spec, Status())
    run(2.0, a, b, -3.0, c, d)
    want = 2.0 * np.einsum(equation, a, b, optimize=True) - 3.0 * c
    np.testing.assert_array_equal(d, want)


@compiled_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("alpha", [2.0, 0.0])
def test_beta_c_set_into_a_large_d_before_its_gemms_matches_numpy(dtype: type,
                                                                     alpha: float) -> None:
    """``pjk,ip->ijk``: one GEMM on views adding into D (512 KiB and more), D first set to
    beta op_C(C) from a C laid out otherwise (transposed), a step the workers share out; with
    alpha 0 that step is the whole product (A and B unread). The step profile sees it as a
    store and the GEMM as a GEMM. Against numpy.einsum on exact integers."""
    from pytapp.kernels.program import step_profile

    cplx = np.dtype(dtype).kind == "c"
    a, b = _ints((8, 64, 64), dtype, 101), _ints((64, 8), dtype, 102)
    c = np.ascontiguousarray(_ints((64, 64, 64), dtype, 103).transpose(2, 1, 0)).transpose(2, 1, 0)
    d = np.full((64, 64, 64), np.nan, dtype=dtype)
    op_c = ElementOp.CONJUGATE if cplx else ElementOp.IDENTITY
    plan = TensorProduct(Handle("blas"), TensorInfo.from_array(a), "pjk", TensorInfo.from_array(b),
                         "ip", TensorInfo.from_array(c), "ijk", TensorInfo.from_array(d), "ijk",
                         op_c=op_c)
    assert "gemm on strided views" in plan.algorithm, plan.algorithm
    beta = (1 - 2j) if cplx else -3.0
    with step_profile() as steps:
        plan.execute(alpha, a, b, beta, c, d)
    wide = np.complex128 if cplx else np.float64
    want = alpha * np.einsum("pjk,ip->ijk", a.astype(wide), b.astype(wide)) + beta * (
        np.conj(c) if cplx else c).astype(wide)
    np.testing.assert_array_equal(d.astype(wide), want)
    assert steps["store"] > 0.0
    assert (steps["gemm"] > 0.0) == (alpha != 0.0)


@compiled_only
def test_the_step_profile_times_each_step_only_inside_its_block() -> None:
    """A TTGT that packs both operands and stores T with C into D counts its packs, its GEMM
    and its store; a small loop nest counts as a loop; a profile around nothing stays at 0."""
    from pytapp.kernels.program import STEPS, step_profile

    equation, shapes = "abcd,dbe->ace", ((32, 32, 16, 24), (24, 32, 16))
    a, b, d = _operands(equation, shapes, np.float64, 111)
    c = _ints(d.shape, np.float64, 113)
    plan = TensorProduct(Handle("blas"), TensorInfo.from_array(a), "abcd",
                         TensorInfo.from_array(b), "dbe", TensorInfo.from_array(c), "ace",
                         TensorInfo.from_array(d), "ace")
    assert "packs A, B" in plan.algorithm and "stored into D" in plan.algorithm, plan.algorithm
    plan.execute(1.0, a, b, 2.0, c, d)
    with step_profile() as steps:
        plan.execute(1.0, a, b, 2.0, c, d)
    assert set(steps) == set(STEPS)
    assert steps["pack"] > 0.0 and steps["gemm"] > 0.0 and steps["store"] > 0.0
    assert steps["loop"] == steps["stream"] == steps["blocked"] == 0.0
    x, y, z = np.ones((3, 4)), np.ones((4, 2)), np.zeros((3, 2))
    small = _product(x, "ik", y, "kj", z, "ij")
    assert "loop nest" in small.algorithm, small.algorithm
    with step_profile() as steps:
        small.execute(1.0, x, y, 0.0, None, z)
    assert steps["loop"] > 0.0 and steps["gemm"] == 0.0
    with step_profile() as steps:
        pass
    assert all(t == 0.0 for t in steps.values())


@compiled_only
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_a_batch_of_thin_gemms_with_a_few_mib_of_t_stores_each_block_while_in_cache(
        dtype: type) -> None:
    """``wydsq,dyo->swqod``: 6 GEMMs of 53240 x 5 x 34, a T of 6.4 MB (F32) or 12.8 MB (C64),
    at least THIN_BATCH_MIN_BYTES and below TTGT_STORE_MAX_BYTES, in blocks of at most
    THIN_BATCH_BLOCK_MAX: A is packed in blocks, each block's part of T stored into D while in
    cache, where the whole T had been written then read again. With C and B conjugated,
    against numpy.einsum on exact integers."""
    from pytapp.analysis import program as lowering

    equation = "wydsq,dyo->swqod"
    ext = {"d": 6, "s": 44, "q": 22, "w": 55, "o": 5, "y": 34}
    shapes = tuple(tuple(ext[x] for x in labels) for labels in ("wydsq", "dyo"))
    a, b, d = _operands(equation, shapes, dtype, 111)
    c = _ints(d.shape, dtype, 113)
    _run_checked(equation, a, b, c, d, "stored into D with the epilogue while in cache",
                 conj_b=True)
    pack = lowering.lower(_product(a, "wydsq", b, "dyo", d, "swqod").spec).pack
    t_bytes = 6 * 53240 * 5 * np.dtype(dtype).itemsize
    assert lowering.THIN_BATCH_MIN_BYTES <= t_bytes < lowering.TTGT_STORE_MAX_BYTES
    assert pack.blocked >= 0 and pack.block_bytes <= lowering.THIN_BATCH_BLOCK_MAX


@compiled_only
@pytest.mark.parametrize(("equation", "ext", "dtype", "blocked"), [
    # T of 4.3 MB, blocks of the whole batch of 5.3 MB: beyond THIN_BATCH_BLOCK_MAX
    ("crtjz,fzjt->frcz", {"z": 44, "c": 8, "r": 64, "f": 92, "j": 6, "t": 20}, np.float32, 0),
    # T of 3.5 MB: below THIN_BATCH_MIN_BYTES, at least THIN_BATCH_TRIED_BYTES
    ("mzver,mxlzeq->rxleqv", {"e": 8, "v": 8, "r": 12, "x": 9, "q": 9, "l": 7, "m": 14,
                              "z": 22}, np.float64, 1),
    # T of 1.1 MB into a D a 34th of the operands: the TTGT the other way round exists too
    # (_flipped); the blocked one is what the plan tries
    ("btqy,bcyqs->cyst", {"y": 16, "t": 22, "c": 15, "s": 50, "q": 44, "b": 19}, np.float32,
     1),
])
def test_a_batch_stores_its_whole_t_and_tries_it_block_by_block(
        equation: str, ext: dict[str, int], dtype: type, blocked: int) -> None:
    """A batch of thin GEMMs whose blocks would outgrow THIN_BATCH_BLOCK_MAX, or whose T is
    below THIN_BATCH_MIN_BYTES, stores its whole T; the alternative an auto plan tries packs
    the thick operand in blocks, each block's T stored while in cache, and computes the
    product exactly (with C)."""
    from pytapp.analysis import program as lowering
    from pytapp.kernels.program import compile_alternative
    from pytapp.status import Status

    (la, lb), ld = equation.split("->")[0].split(","), equation.split("->")[1]
    shapes = tuple(tuple(ext[x] for x in labels) for labels in (la, lb))
    a, b, d = _operands(equation, shapes, dtype, 115)
    c = _ints(d.shape, dtype, 117)
    spec = _product(a, la, b, lb, d, ld).spec
    first, alt = lowering.lower(spec), lowering.alternative(spec)
    assert first.kind is lowering.Step.TTGT and first.pack.blocked < 0
    assert alt is not None and alt.pack.blocked == blocked and alt.pack.block_store >= 0
    assert alt.gemm == first.gemm  # the same GEMMs, the same orientation
    run = compile_alternative(spec, Status())
    run(2.0, a, b, -3.0, c, d)
    want = 2.0 * np.einsum(equation, a, b, optimize=True) - 3.0 * c
    np.testing.assert_array_equal(d, want)


@compiled_only
def test_gemvs_re_reading_their_matrices_give_way_to_a_ttgt_packed_in_blocks() -> None:
    """``npldzt,dztjhp->jplnh`` (F64): 17280 GEMVs on views, A's 82 MB read as 432 matrices,
    40 times each; a TTGT packing all of A exceeds TTGT_MAX_BYTES, so A is packed in blocks
    (within the limits of an alternative), each block's GEMMs stored while in cache. With C,
    against numpy.einsum on exact integers."""
    from pytapp.analysis import program as lowering

    equation = "npldzt,dztjhp->jplnh"
    ext = {"p": 24, "n": 20, "l": 18, "h": 4, "j": 10, "z": 9, "t": 11, "d": 12}
    shapes = tuple(tuple(ext[x] for x in labels) for labels in ("npldzt", "dztjhp"))
    a, b, d = _operands(equation, shapes, np.float64, 121)
    c = _ints(d.shape, np.float64, 123)
    _run_checked(equation, a, b, c, d, "in blocks of")
    pack = lowering.lower(_product(a, "npldzt", b, "dztjhp", d, "jplnh").spec).pack
    assert pack.bytes_a + pack.bytes_b > lowering.TTGT_MAX_BYTES
    assert pack.blocked == 0 and pack.scratch_bytes(1) <= lowering.TTGT_MAX_BYTES
