"""GEMV-like products streamed through their matrix operand (the executor's STREAM step).

A product whose one operand has no free labels (the vector V) and whose other (the matrix M)
interleaves D's labels with summed ones maps to no GEMV on views; the executor packs V as M
holds their labels (walking V once where it has labels of its own to sum) and streams M in its
memory order, adding into D, into each worker's own part of D, or into each worker's zeroed
temporary that the epilogue stores. Every case runs on small-integer data (every sum exact in
F32 and F64, so any order of summation gives the same numbers) with alpha and beta, and must
equal numpy.einsum in float64 or complex128 with the element operations applied by NumPy.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from pytapp import ElementOp, Handle, TensorInfo, TensorProduct
from pytapp.analysis.program import Step, StreamStep, lower
from pytapp.analysis.viewgemm import reducing_view_gemm
from pytapp.kernels import program

pytestmark = pytest.mark.skipif(not program.available(),
                                reason="the compiled extension pytapp._cexec was not built")

#: (equation, extents): each runs as a stream; together they take every way of sharing the
#: pass out (one thread, each worker its own part of D, each its own temporary), M as A and as
#: B, V packed or read in place, V walked to sum its own labels into the pack directly or
#: through a buffer it permutes, M's own summed labels, and every kind of innermost label. The
#: last two are smaller than the loop nest's bound but stream: V's own sums would multiply the
#: nest's work, and a long innermost run reads M in order.
CASES: dict[str, tuple[str, dict[str, int]]] = {
    "interleaved": ("mgzsb,bgmz->gs", {"g": 13, "s": 21, "b": 19, "m": 17, "z": 25}),
    "rows": ("abcde,bd->ace", {"a": 32, "b": 20, "c": 12, "d": 20, "e": 14}),
    "m_is_b": ("tbcv,mcvbu->um", {"m": 24, "c": 14, "v": 14, "b": 12, "u": 13, "t": 3}),
    "own_sums_a": ("ifgekd,dki->gf", {"i": 7, "f": 10, "g": 4, "e": 5, "k": 8, "d": 7}),
    "batch_inner": ("atihg,hag->tig", {"a": 10, "t": 25, "i": 24, "h": 18, "g": 21}),
    "walk_permuted": ("avqs,tqsv->a", {"a": 20, "v": 9, "q": 5, "s": 9, "t": 7}),
    "walk_direct": ("avqs,vqst->a", {"a": 20, "v": 9, "q": 5, "s": 9, "t": 7}),
    "one_thread": ("hcgkfj,echjk->gfj", {"h": 2, "c": 3, "g": 29, "k": 2, "f": 5, "j": 22,
                                          "e": 20}),
    "large_d_split": ("hjda,jdchk->chk", {"j": 2, "d": 2, "c": 29, "h": 38, "k": 36, "a": 29}),
    "own_sums_small": ("de,fd->e", {"d": 130, "e": 800, "f": 12}),
    "long_run_small": ("klcd,dc->lk", {"k": 13, "l": 15, "c": 20, "d": 26}),
    "spread": ("snqa,sa->qa", {"s": 16, "n": 24, "q": 64, "a": 3}),
    # a short batch label innermost inside a summed one: running sums per row
    "batch_under_sum": ("dmpkqu,qpum->ku", {"d": 8, "m": 6, "p": 3, "k": 9, "q": 11, "u": 7}),
    "batch_under_sum_into_d": ("kdmpqu,qpum->ku", {"k": 9, "d": 8, "m": 6, "p": 3, "q": 11,
                                                    "u": 17}),
    # a short batch run (w) inside a label of D's (p) along which M and D continue: one run of
    # M and D against V's run repeated; into T, and (k outermost) into D itself
    "repeated_run": ("sekfnpw,efsw->nwpk", {"s": 3, "e": 5, "k": 4, "f": 6, "n": 5, "p": 7,
                                            "w": 9}),
    "repeated_run_into_d": ("ksefnpw,efsw->knpw", {"k": 8, "s": 3, "e": 5, "f": 6, "n": 5,
                                                   "p": 7, "w": 9}),
    # GEMVs on views exist (dots of b, c) but read M across its lines, 36 apart: streamed
    "strided_dots": ("bcpy,bcy->p", {"b": 32, "c": 32, "p": 4, "y": 9}),
    # GEMVs on views exist (24 numbers of r each) but are too small to run, and the product
    # too large for the loop nest: streamed, q (M's outermost, D's innermost) shared out over
    # one T laid out as M holds D's labels
    "unrun_views": ("qeotr,eq->torq", {"q": 7, "e": 20, "o": 26, "t": 25, "r": 24}),
    # no label of D outermost in M, D too large for copies: t (runs of 792 numbers under it
    # in M) moved outermost and shared out
    "moved_outer": ("hmtfc,ht->tcfm", {"h": 9, "m": 21, "t": 20, "f": 36, "c": 22}),
    # d, a label of M's own, outside D's rows (y, s) of dots of 6 (a): M's block summed over d
    # first, per index of r, i and e, into each worker's T; then (i outermost) into one T
    "own_block_dots": ("riedysa,rae->ysi", {"r": 6, "i": 6, "e": 4, "d": 8, "y": 8, "s": 9,
                                            "a": 6}),
    "own_block_shared": ("iredysa,rae->ysi", {"r": 6, "i": 6, "e": 4, "d": 8, "y": 8, "s": 9,
                                              "a": 6}),
    # w, a label of M's own, outside dots (b) of rows of D (p): the block summed over w first
    "own_block_rows": ("uqwbp,buq->p", {"u": 12, "q": 5, "w": 30, "b": 9, "p": 8}),
}

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def _ints(shape: tuple[int, ...], dtype: Any, rng: np.random.Generator) -> np.ndarray:
    x = rng.integers(-3, 4, shape).astype(np.float64)
    if np.issubdtype(dtype, np.complexfloating):
        x = x + 1j * rng.integers(-3, 4, shape)
    return x.astype(dtype)


def _labels(equation: str) -> tuple[str, str, str]:
    ins, d = equation.split("->")
    a, b = ins.split(",")
    return a, b, d


def _stream_of(plan: TensorProduct) -> StreamStep:
    lowered = lower(plan.spec, gemm=program.blas_available())
    assert lowered is not None and lowered.kind is Step.STREAM and lowered.stream is not None
    assert "stream through" in plan.algorithm
    return lowered.stream


def _check(equation: str, ext: dict[str, int], dtype: Any, *, ops: str = "", with_c: bool = True,
           views: bool = False, c_is_d: bool = False, seed: int = 0) -> StreamStep:
    """Run ``equation`` through a plan and compare with numpy.einsum; return its stream.

    ``ops``: the operands (of ``ABCD``) conjugated. ``views``: A and B are reversed and padded
    views of larger arrays, D a padded view. ``c_is_d``: C is D itself.
    """
    rng = np.random.default_rng(seed)
    la, lb, ld = _labels(equation)
    a = _ints(tuple(ext[x] for x in la), dtype, rng)
    b = _ints(tuple(ext[x] for x in lb), dtype, rng)
    c = _ints(tuple(ext[x] for x in ld), dtype, rng)
    if views:
        big_a = np.zeros(tuple(2 * n + 1 for n in a.shape), dtype)
        big_a[tuple(slice(None, 2 * n, 2) for n in a.shape)] = a[(slice(None, None, -1),) * a.ndim]
        a = big_a[tuple(slice(2 * n - 2, None, -2) for n in a.shape)]
        big_b = np.zeros((*b.shape[:-1], b.shape[-1] + 3), dtype)
        big_b[..., :b.shape[-1]] = b
        b = big_b[..., :b.shape[-1]]
    d_full = np.full((*c.shape[:-1], c.shape[-1] + (2 if views else 0)), np.nan, dtype)
    d = d_full[..., :c.shape[-1]]
    if c_is_d:
        d[...] = c
    conj = {r: r in ops for r in "ABCD"}
    op = {f"op_{r.lower()}": ElementOp.CONJUGATE if conj[r] else ElementOp.IDENTITY
          for r in "ABCD"}
    alpha, beta = (0.75 - 0.5j, -0.5 + 0.25j) if np.iscomplexobj(a) else (0.75, -0.5)
    use_c = with_c or c_is_d
    c_in = d if c_is_d else c
    plan = TensorProduct(Handle("blas"), TensorInfo.from_array(a), la, TensorInfo.from_array(b),
                         lb, TensorInfo.from_array(c_in) if use_c else None, ld if use_c else None,
                         TensorInfo.from_array(d), ld, **op)
    stream = _stream_of(plan)
    wide = np.complex128 if np.iscomplexobj(a) else np.float64

    def f(x: np.ndarray, r: str) -> np.ndarray:
        x = x.astype(wide)
        return np.conj(x) if conj[r] else x

    expected = alpha * np.einsum(equation, f(a, "A"), f(b, "B"))
    if use_c:
        expected = expected + beta * f(c, "C")
    if conj["D"]:
        expected = np.conj(expected)
    plan.execute(alpha, a, b, beta if use_c else 0.0, c_in if use_c else None, d)
    np.testing.assert_array_equal(d.astype(wide), expected)
    if views:
        assert np.isnan(d_full[..., c.shape[-1]:]).all()  # the padding is not written
    return stream


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("name", list(CASES))
def test_stream_equals_numpy(name: str, dtype: Any) -> None:
    equation, ext = CASES[name]
    _check(equation, ext, dtype, with_c=False)
    _check(equation, ext, dtype, seed=1)


def test_cases_cover_every_way_of_running() -> None:
    """The cases take every mode, both operands as M, and each way of packing V."""
    seen = [_check(eq, ext, dtype) for eq, ext in CASES.values()
            for dtype in (np.float32, np.float64)]
    assert {s.mode for s in seen} == {0, 1, 2, 3}
    assert {s.swap for s in seen} == {False, True}
    assert any(s.bytes_v == 0 for s in seen) and any(s.bytes_v > 0 for s in seen)
    walks = [s for s in seen if s.v_sum[0]]
    assert {s.v_permute for s in walks} == {False, True}
    assert {s.v_mode for s in walks} >= {1, 2}


@pytest.mark.parametrize("ops", ["", "A", "B", "C", "D", "AB", "AD", "BCD", "ABCD"])
@pytest.mark.parametrize("name", ["interleaved", "m_is_b", "walk_permuted", "one_thread",
                                  "batch_under_sum", "batch_under_sum_into_d", "repeated_run",
                                  "repeated_run_into_d", "own_block_dots", "own_block_shared",
                                  "own_block_rows"])
def test_conjugations(name: str, ops: str) -> None:
    equation, ext = CASES[name]
    for dtype in (np.complex64, np.complex128):
        _check(equation, ext, dtype, ops=ops)


@pytest.mark.parametrize("name", ["interleaved", "rows", "m_is_b", "walk_permuted",
                                  "own_block_dots"])
def test_strided_views_and_c_in_d(name: str) -> None:
    equation, ext = CASES[name]
    for dtype in DTYPES:
        _check(equation, ext, dtype, views=True)
        _check(equation, ext, dtype, c_is_d=True, ops="C" if dtype is np.complex128 else "")


def test_status_reports_the_pack() -> None:
    equation, ext = CASES["interleaved"]
    la, lb, ld = _labels(equation)
    arrays = [np.ones(tuple(ext[x] for x in lab), np.float32) for lab in (la, lb, ld)]
    plan = TensorProduct(Handle("blas"), *(x for pair in zip(
        map(TensorInfo.from_array, arrays[:2]), (la, lb), strict=True) for x in pair),
        None, None, TensorInfo.from_array(arrays[2]), ld)
    stream = _stream_of(plan)
    status = plan.execute(1.0, arrays[0], arrays[1], 0.0, None, arrays[2])
    assert stream.bytes_v == ext["g"] * ext["m"] * ext["z"] * ext["b"] * 4
    assert status.bytes_copied == stream.bytes_v
    assert status.bytes_allocated >= stream.bytes_v + stream.bytes_t > stream.bytes_v
    np.testing.assert_array_equal(arrays[2], ext["m"] * ext["z"] * ext["b"])


def test_threads_share_one_plan() -> None:
    """16 threads run one plan on their own operands; each result is its own einsum."""
    equation, ext = CASES["interleaved"]
    la, lb, ld = _labels(equation)
    rng = np.random.default_rng(3)
    shape = {lab: tuple(ext[x] for x in lab) for lab in (la, lb, ld)}
    template = [np.zeros(shape[lab], np.float64) for lab in (la, lb, ld)]
    plan = TensorProduct(Handle("blas"), TensorInfo.from_array(template[0]), la,
                         TensorInfo.from_array(template[1]), lb, None, None,
                         TensorInfo.from_array(template[2]), ld)
    _stream_of(plan)
    work = [(_ints(shape[la], np.float64, rng), _ints(shape[lb], np.float64, rng))
            for _ in range(16)]
    results: list[np.ndarray | None] = [None] * 16

    def run(i: int) -> None:
        d = np.empty(shape[ld])
        for _ in range(5):
            plan.execute(1.0, *work[i], 0.0, None, d)
        results[i] = d

    threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (a, b), d in zip(work, results, strict=True):
        np.testing.assert_array_equal(d, np.einsum(equation, a, b))


def test_zero_alpha_reads_neither_operand() -> None:
    """alpha = 0 gives D = beta C without reading A (NaN there)."""
    equation, ext = CASES["interleaved"]
    la, lb, ld = _labels(equation)
    a = np.full(tuple(ext[x] for x in la), np.nan)
    b = np.ones(tuple(ext[x] for x in lb))
    c = np.arange(ext["g"] * ext["s"], dtype=np.float64).reshape(ext["g"], ext["s"])
    d = np.empty_like(c)
    plan = TensorProduct(Handle("blas"), TensorInfo.from_array(a), la, TensorInfo.from_array(b),
                         lb, TensorInfo.from_array(c), ld, TensorInfo.from_array(d), ld)
    _stream_of(plan)
    plan.execute(0.0, a, b, 2.0, c, d)
    np.testing.assert_array_equal(d, 2.0 * c)


def test_a_short_run_of_v_is_spread_over_the_labels_of_d_around_it() -> None:
    """V's run of 3 inside D's rows of 64 x 3: V is packed with copies along q, and the
    stream's innermost loop is the whole row (one loop of 192, not 64 of 3)."""
    equation, ext = CASES["spread"]
    stream = _check(equation, ext, np.float32)
    assert stream.extents[-1] == ext["q"] * ext["a"], stream
    assert stream.bytes_v == ext["s"] * ext["q"] * ext["a"] * 4, stream


def test_gemvs_on_views_that_read_across_lines_give_way_to_the_stream() -> None:
    """The GEMVs on views of ``strided_dots`` are dots whose terms lie a row of M apart: the
    stream reads M in order instead (where the views read along M, they stay the plan's)."""
    equation, ext = CASES["strided_dots"]
    _check(equation, ext, np.float64)
    la, lb, ld = _labels(equation)
    rows = np.zeros(tuple(ext[x] for x in la)), np.zeros(tuple(ext[x] for x in lb))
    plan = TensorProduct(Handle("blas"), TensorInfo.from_array(rows[0]), la,
                         TensorInfo.from_array(rows[1]), lb, None, None,
                         TensorInfo.from_array(np.zeros(tuple(ext[x] for x in ld))), ld)
    views = reducing_view_gemm(plan.spec)
    assert views is not None and views.m * views.n == 1 and abs(views.a.strides[-1]) > 1


def test_a_label_of_d_under_which_m_runs_a_kilobyte_is_shared_out() -> None:
    """``moved_outer``: M's outermost label h is summed and D too large for each worker's own
    copy; t, a label of D under which M runs 792 numbers, goes outermost and is shared out
    (not one thread)."""
    equation, ext = CASES["moved_outer"]
    stream = _check(equation, ext, np.float32)
    assert stream.mode == 1 and stream.extents[0] == ext["t"], stream


@pytest.mark.parametrize("name", ["own_block_dots", "own_block_shared", "own_block_rows"])
def test_labels_m_sums_on_its_own_outside_short_runs_are_summed_first(name: str) -> None:
    """A label of M's own (``d``, ``w``) outside short dots or rows: the stream sums M's block
    over it into a buffer first (``own``: the block's first label, after the one the workers
    share out), which its short runs then stream once (results checked by ``_check``)."""
    equation, ext = CASES[name]
    la, lb, ld = _labels(equation)
    own = next(x for x in la if x not in ld and x not in lb)
    for dtype in (np.float32, np.float64, np.complex64):
        stream = _check(equation, ext, dtype)
        first = stream.own
        assert first >= 1, stream
        kept = [e for e, sv, sd in zip(stream.extents[first:], stream.strides[1][first:],
                                       stream.strides[2][first:], strict=True) if sv or sd]
        assert stream.bytes_own == np.dtype(dtype).itemsize * int(np.prod(kept))
        assert ext[own] in stream.extents[first:-1]


def test_long_runs_under_labels_of_m_s_own_stream_as_they_are() -> None:
    """Dots of 520 under a label of M's own already stream at the rate of reading M: no
    block is summed first."""
    stream = _check("kxlcd,dc->lk", {"k": 13, "x": 6, "l": 6, "c": 20, "d": 26}, np.float32)
    assert stream.own == 0 and stream.bytes_own == 0, stream
