"""The blas backend's kernels and size-dependent paths, each checked against numpy.einsum.

These are the Python plans' routes: the compiled executor, which would run many of these
small products itself, is switched off here (tests/unit/test_compiled.py covers it).
"""

from __future__ import annotations

import numpy as np
import pytest

import pytapp
from pytapp import kernels
from pytapp.analysis import viewgemm
from pytapp.backends import blas, threads


def _run(expr: str, a: np.ndarray, b: np.ndarray, d: np.ndarray, **kw: object) -> str:
    la, lb = expr.split("->")[0].split(",")
    ld = expr.split("->")[1]
    info = pytapp.TensorInfo.from_array
    plan = pytapp.TensorProduct(pytapp.Handle("blas"), info(a), la, info(b), lb, None, None,
                                info(d), ld, **kw)  # type: ignore[arg-type]
    plan.execute(1.0, a, b, 0.0, None, d)
    return plan.algorithm


def _ints(rng: np.random.Generator, labels: str, sizes: dict[str, int],
          dtype: type) -> np.ndarray:
    """Small integers over ``labels`` (exact in every datatype), complex where ``dtype`` is."""
    x = rng.integers(-4, 5, [sizes[ch] for ch in labels]).astype(dtype)
    if np.iscomplexobj(x):
        x = x + 1j * rng.integers(-4, 5, x.shape)
    return x


@pytest.fixture(autouse=True)
def _python_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTAPP_COMPILED", "0")


@pytest.fixture
def tiny_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the blocked-TTGT and multi-threaded paths trigger on small data."""
    monkeypatch.setattr(blas, "BLOCK_BYTES", 1 << 10)
    monkeypatch.setattr(blas, "MIN_BLOCK_ROWS", 1)
    monkeypatch.setattr(threads, "MIN_BYTES", 0)
    monkeypatch.setattr(blas, "SPLIT_MIN_FLOPS", 0)
    monkeypatch.setattr(blas, "SPLIT_MIN_TOTAL", 0)
    monkeypatch.setattr(blas, "split_pays", lambda: True)  # the mechanism, whatever this machine
    monkeypatch.setattr(kernels, "SMALL_WORK", 0)
    monkeypatch.setattr(blas, "SMALL_ELEMENTS", 0)


@pytest.mark.parametrize(
    "expr",
    ["bdai,kjcd->abcijk", "puldr,pULDR->uUlLdDrR", "akic,bjkc->abij", "abc,abc->abc",
     "ab,cd->acbd", "abcd,abcd->", "bnd,bnd->bn", "pjk,ip->ijk", "bhqd,bhkd->bhqk"],
)
@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
def test_kernels_match_einsum(expr: str, dtype: type, tiny_thresholds: None) -> None:
    rng = np.random.default_rng(5)
    sizes = {x: int(rng.integers(2, 5)) for x in set(expr) - set(",->")}
    la, lb = expr.split("->")[0].split(",")
    ld = expr.split("->")[1]
    a = rng.standard_normal([sizes[x] for x in la]).astype(dtype)
    b = rng.standard_normal([sizes[x] for x in lb]).astype(dtype)
    if np.iscomplexobj(a):
        a = a + 1j * rng.standard_normal(a.shape).astype(dtype)
    d = np.zeros([sizes[x] for x in ld], dtype=dtype)
    algorithm = _run(expr, a, b, d)
    want = np.einsum(expr, a.astype(np.complex128), b.astype(np.complex128))
    np.testing.assert_allclose(d, want, rtol=1e-5, atol=1e-5)
    assert algorithm


def test_blocked_ttgt_is_chosen_and_correct(tiny_thresholds: None) -> None:
    rng = np.random.default_rng(6)
    a = rng.standard_normal((5, 3, 4, 2))  # b d a i
    b = rng.standard_normal((2, 3, 4, 3))  # k j c d
    d = np.zeros((4, 5, 4, 2, 3, 2))      # a b c i j k
    algorithm = _run("bdai,kjcd->abcijk", a, b, d)
    assert "blocked" in algorithm
    np.testing.assert_allclose(d, np.einsum("bdai,kjcd->abcijk", a, b), rtol=1e-12)


def test_batch_split_across_threads(tiny_thresholds: None) -> None:
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((6, 5, 7, 4)), rng.standard_normal((6, 5, 4, 3))
    d = np.zeros((6, 5, 7, 3))
    algorithm = _run("hgik,hgkj->hgij", a, b, d)
    assert "batch split" in algorithm
    np.testing.assert_allclose(d, np.einsum("hgik,hgkj->hgij", a, b), rtol=1e-12)


def test_split_decision_is_measured_once_and_remembered(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's measurement decides, and wisdom keeps it for later processes."""
    from pytapp import wisdom

    monkeypatch.setenv("PYTAPP_WISDOM", "off")
    wisdom.forget()
    monkeypatch.setattr(blas, "_split_ratio", None)
    decided = blas.split_pays()
    entry = blas.split_entry()
    ratio = wisdom.lookup("overhead", entry)
    assert isinstance(ratio, float) and ratio > 0
    assert decided == (ratio <= blas.SPLIT_GAIN)
    wisdom.record("overhead", entry, 2.0)  # what a later process reads
    monkeypatch.setattr(blas, "_split_ratio", None)
    assert blas.split_pays() is False
    wisdom.forget()


def test_threads_do_not_change_results(tiny_thresholds: None) -> None:
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((6, 7, 8)), rng.standard_normal((6, 7, 8))
    info = pytapp.TensorInfo.from_array
    h = pytapp.Handle("blas")
    plan = pytapp.TensorProduct(h, info(a), "abc", info(b), "abc", None, None, info(a), "abc")
    out1, out2 = np.zeros_like(a), np.zeros_like(a)
    plan.execute(1.0, a, b, 0.0, None, out1, h.create_executor(threads=1))
    plan.execute(1.0, a, b, 0.0, None, out2, h.create_executor(threads=2))
    np.testing.assert_array_equal(out1, out2)
    np.testing.assert_array_equal(out1, a * b)


def test_repeated_gemm_executions_stay_exact() -> None:
    """The second and later runs of a GEMM plan take blas's short path; every run must
    still honour new data, alpha, C and conjugation exactly like the first."""
    import pytapp

    rng = np.random.default_rng(21)
    a = rng.integers(-3, 4, (6, 5, 4)).astype(np.complex128)
    b = rng.integers(-3, 4, (5, 4, 7)).astype(np.complex128)
    c = rng.integers(-3, 4, (6, 7)).astype(np.complex128)
    d = np.zeros((6, 7), dtype=np.complex128)
    info = pytapp.TensorInfo.from_array
    with pytapp.Handle("blas") as h:
        plan = pytapp.TensorProduct(h, info(a), "ikl", info(b), "klj", info(c), "ij", info(d),
                                    "ij")
        for alpha, beta, scale in [(1, 0, 1), (1, 0, 2), (2, 0, 1), (1, 1, 3), (1, 0, -1)]:
            x, y = a * scale, b + scale
            plan.execute(alpha, x, y, beta, c, d)
            want = alpha * np.einsum("ikl,klj->ij", x, y) + beta * c
            assert np.array_equal(d, want)
        assert plan._backend_plan()._recipe is not None  # the short path was taken
        conj = pytapp.TensorProduct(h, info(a), "ikl", info(b), "klj", None, None, info(d),
                                    "ij", op_a=pytapp.ElementOp.CONJUGATE)
        for scale in (1, 2):
            conj.execute(1, a * scale, b, 0, None, d)
            assert np.array_equal(d, np.einsum("ikl,klj->ij", np.conj(a * scale), b))


def test_misaligned_operands_are_exact() -> None:
    """Arrays at an odd byte offset (as deserialized network buffers can be) go through an
    aligned copy for BLAS; results are exact either way."""
    import pytapp

    rng = np.random.default_rng(22)
    raw = np.zeros(8 * 400 + 3, dtype=np.uint8)
    a = raw[3:3 + 8 * 400].view(np.float64).reshape(20, 20)
    assert not a.flags.aligned
    a[...] = rng.integers(-4, 5, (20, 20))
    b = rng.integers(-4, 5, (20, 7)).astype(np.float64)
    for _ in range(3):
        got = pytapp.contract("ik,kj->ij", a, b, backend="blas")
        assert np.array_equal(got, np.asarray(a) @ b)
    v = rng.integers(-4, 5, 20).astype(np.float64)
    assert np.array_equal(pytapp.contract("ik,k->i", a, v, backend="blas"), a.copy() @ v)


def test_misaligned_gemv_takes_the_reduce_kernel() -> None:
    import pytapp

    rng = np.random.default_rng(23)
    raw = np.zeros(8 * 3000 + 5, dtype=np.uint8)
    a = raw[5:5 + 8 * 3000].view(np.float64).reshape(100, 30)
    a[...] = rng.integers(-4, 5, (100, 30))
    v = rng.integers(-4, 5, 30).astype(np.float64)
    d = np.zeros(100)
    info = pytapp.TensorInfo.from_array
    with pytapp.Handle("blas") as h:
        plan = pytapp.TensorProduct(h, info(a.copy()), "ik", info(v), "k", None, None,
                                    info(d), "i")
        status = plan.execute(2.0, a, v, 0.0, None, d)
        assert "not aligned" in status.algorithm
        assert np.array_equal(d, 2 * (a.copy() @ v))


def test_copy_run_counts_the_innermost_merged_loop() -> None:
    x = np.zeros((4, 5, 6, 3))
    assert blas._copy_run(x.shape, x.strides) == 360  # contiguous: one loop
    t = x.transpose(2, 0, 1, 3)  # (c, a, b, j): j runs 3, then jumps
    assert blas._copy_run(t.shape, t.strides) == 3
    t = x.transpose(0, 1, 3, 2)  # (a, b, j, c): c runs 6 (strided), then jumps
    assert blas._copy_run(t.shape, t.strides) == 6
    assert blas._copy_run((1, 7, 1), (8, 8, 8)) == 7  # extent-1 modes do not break a run


@pytest.mark.parametrize(("expr", "role", "c", "j"), [
    ("ic,abcj->ijab", "b", 13, 3),      # B row-major is (c, abj): runs of j's 3 elements
    ("abcj,ci->ijab", "a", 3, 13),      # A row-major is (abj, c): runs of c's 3 elements
    ("hic,habcj->hijab", "b", 13, 3),   # with a batch label
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_short_copy_runs_are_copied_columns_first(expr: str, role: str, c: int, j: int,
                                                  dtype: type,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """An operand copied for BLAS whose row-major copy runs a few elements per loop is
    copied columns first (the GEMM reads it transposed); results stay exact (integer data)."""
    flipped: list[tuple[int, ...]] = []
    choose = blas._copy_columns_first

    def spy(x: np.ndarray, nh: int, lead: int) -> tuple[int, ...] | None:
        order = choose(x, nh, lead)
        if order is not None:
            flipped.append(x.shape)
        return order

    monkeypatch.setattr(blas, "_copy_columns_first", spy)
    monkeypatch.setattr(blas, "SMALL_ELEMENTS", 0)  # not numpy.einsum's small-product route
    sizes = {"i": 2, "a": 4, "b": 5, "c": c, "j": j, "h": 2}
    rng = np.random.default_rng(11)
    la, lb = expr.split("->")[0].split(",")
    ld = expr.split("->")[1]
    a, b = _ints(rng, la, sizes, dtype), _ints(rng, lb, sizes, dtype)
    d = np.full([sizes[ch] for ch in ld], np.nan, dtype=dtype)
    _run(expr, a, b, d)
    wide = np.complex128 if np.iscomplexobj(a) else np.float64
    np.testing.assert_array_equal(d, np.einsum(expr, a.astype(wide), b.astype(wide)))
    big = b if role == "b" else a
    assert flipped and all(np.prod(s) == big.size for s in flipped), flipped


def test_long_strided_copy_runs_are_copied_columns_first_when_those_stream() -> None:
    """A ring term's B (kjcb packed as (jb, kc)) reads c's 40 elements 40 apart; columns
    first (kc, jb) reads b's at unit stride: that order is chosen, and only where it streams
    in loops as long (or long enough)."""
    b = np.zeros((3, 3, 40, 40))  # k j c b
    x = b.transpose(1, 3, 0, 2)  # j b k c: rows (j, b), columns (k, c)
    assert blas._copy_columns_first(x, 0, 2) == (2, 3, 0, 1)
    a = np.zeros((3, 3, 40, 40)).transpose(0, 2, 1, 3)  # ijab as (i a, j b): b streams
    assert blas._copy_columns_first(a, 0, 2) is None
    both = np.zeros((40, 3, 40, 3)).transpose(1, 0, 3, 2)  # neither order streams
    assert blas._copy_columns_first(both, 0, 2) is None
    short = np.zeros((6,) * 5).transpose(1, 2, 4, 3, 0)  # oipdj as (ipj, do): runs of 6
    assert blas._copy_columns_first(short, 0, 3) == (3, 4, 0, 1, 2)  # only (do, ipj) streams


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_ring_term_packed_columns_first_is_exact(dtype: type,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blas, "SMALL_ELEMENTS", 0)  # not numpy.einsum's small-product route
    rng = np.random.default_rng(5)
    sizes = {"i": 3, "j": 2, "k": 4, "a": 33, "b": 40, "c": 36}
    expr = "ijab,kjcb->ikac"
    a, b = _ints(rng, "ijab", sizes, dtype), _ints(rng, "kjcb", sizes, dtype)
    d = np.full([sizes[ch] for ch in "ikac"], np.nan, dtype=dtype)
    _run(expr, a, b, d)
    wide = np.complex128 if np.iscomplexobj(a) else np.float64
    np.testing.assert_array_equal(d, np.einsum(expr, a.astype(wide), b.astype(wide)))


@pytest.mark.parametrize(("expr", "loops"), [
    ("kbcd,kd->bc", 1),     # k and d do not fuse in A: loop over k, GEMVs over (bc) x d
    ("kacb,kc->ab", 1),     # c lies between a and b: loop over k and a
    ("kd,kbcd->bc", 1),     # the vector first
    ("hkbd,hkd->hb", 1),    # with a batch label
])
# (C32 operands are not the compute type of their products: they take TTGT, tested above)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("epilogue", ["plain", "alpha_beta", "c_is_d"])
def test_gemv_like_products_loop_over_summed_labels(expr: str, loops: int, dtype: type,
                                                    epilogue: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A GEMV-like product whose summed labels do not fuse runs as GEMVs on views over a
    looped summed label, summed into D afterwards; exact on integer data, with the epilogue."""
    monkeypatch.setattr(blas, "SMALL_ELEMENTS", 0)
    monkeypatch.setattr(viewgemm, "REDUCE_CALL_ELEMENTS", 4)
    monkeypatch.setattr(viewgemm, "REDUCE_TEMP_SHARE", 1.0)
    sizes = {"k": 3, "a": 10, "b": 9, "c": 8, "d": 6, "h": 8}  # D: at least KERNEL_MIN_ROWS
    rng = np.random.default_rng(31)
    la, lb = expr.split("->")[0].split(",")
    ld = expr.split("->")[1]
    a, b, c = (_ints(rng, labels, sizes, dtype) for labels in (la, lb, ld))
    wide = np.complex128 if np.iscomplexobj(a) else np.float64
    want = np.einsum(expr, a.astype(wide), b.astype(wide))
    info = pytapp.TensorInfo.from_array
    with pytapp.Handle("blas") as h:
        d = np.full([sizes[ch] for ch in ld], np.nan, dtype=dtype)
        if epilogue == "plain":
            plan = pytapp.TensorProduct(h, info(a), la, info(b), lb, None, None, info(d), ld)
            status = plan.execute(1.0, a, b, 0.0, None, d)
        elif epilogue == "alpha_beta":
            plan = pytapp.TensorProduct(h, info(a), la, info(b), lb, info(c), ld, info(d), ld)
            status = plan.execute(2.0, a, b, -3.0, c, d)
            want = 2 * want - 3 * c.astype(wide)
        else:  # C is D: D's old values enter the sum before the GEMVs overwrite anything
            d[...] = c
            plan = pytapp.TensorProduct(h, info(a), la, info(b), lb, info(d), ld, info(d), ld)
            status = plan.execute(2.0, a, b, -3.0, d, d)
            want = 2 * want - 3 * c.astype(wide)
    assert "summed after over k" in status.algorithm, status.algorithm
    np.testing.assert_array_equal(d, want)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_gemv_like_products_with_a_small_d_loop_over_summed_labels(dtype: type) -> None:
    """Below KERNEL_MIN_ROWS elements of D the GEMVs on views still run (no copy of A)."""
    rng = np.random.default_rng(33)
    sizes = {"a": 12, "e": 1, "d": 50, "g": 256}
    a, b = _ints(rng, "aedg", sizes, dtype), _ints(rng, "ag", sizes, dtype)
    c = _ints(rng, "ed", sizes, dtype)
    assert c.size < blas.KERNEL_MIN_ROWS
    info = pytapp.TensorInfo.from_array
    d = np.full(c.shape, np.nan, dtype=dtype)
    with pytapp.Handle("blas") as h:
        plan = pytapp.TensorProduct(h, info(a), "aedg", info(b), "ag", info(c), "ed", info(d),
                                    "ed")
        status = plan.execute(2.0, a, b, -3.0, c, d)
    assert "summed after over a" in status.algorithm, status.algorithm
    wide = np.complex128 if np.iscomplexobj(a) else np.float64
    want = 2 * np.einsum("aedg,ag->ed", a.astype(wide), b.astype(wide)) - 3 * c.astype(wide)
    np.testing.assert_array_equal(d, want)


def test_gemv_like_products_keep_the_kernel_for_tiny_calls() -> None:
    """GEMVs reading fewer than REDUCE_CALL_ELEMENTS elements each stay on the fused pass."""
    rng = np.random.default_rng(32)
    a = rng.integers(-4, 5, (3, 10, 7, 9)).astype(np.float64)  # kacb: 30 GEMVs of 7 x 9
    b = rng.integers(-4, 5, (3, 7)).astype(np.float64)
    d = np.zeros((10, 9))
    algorithm = _run("kacb,kc->ab", a, b, d)
    assert "summed after" not in algorithm
    np.testing.assert_array_equal(d, np.einsum("kacb,kc->ab", a, b))


def test_view_gemms_loop_over_summed_labels_only_when_they_do_not_fuse() -> None:
    from pytapp.analysis.spec import build_spec
    from pytapp.analysis.viewgemm import view_gemms

    f = pytapp.Datatype.F64

    def spec(a_strides: tuple[int, ...]) -> object:
        return build_spec(a=(f, (3, 4, 5, 6), a_strides, "kbcd", 0), b=(f, (3, 6), (6, 1), "kd", 0),
                          c=(f, (4, 5), (5, 1), "bc", 0), d=(f, (4, 5), (5, 1), "bc", 0), prec=-1)

    split = view_gemms(spec((120, 30, 6, 1)))  # type: ignore[arg-type]
    best = min(split, key=lambda g: g.calls)
    assert (best.batch, best.reduced, best.m, best.n, best.k) == (("k",), 1, 20, 1, 6)
    assert best.d.strides[0] == 0  # the summed loop does not move in D
    fused = view_gemms(spec((6, 90, 18, 1)))  # type: ignore[arg-type]  # (k, d) fuse: k*6 + d
    assert fused and all(g.reduced == 0 for g in fused)


@pytest.mark.parametrize("alpha", [1.0, 1.204])
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_a_scalar_product_with_a_converted_c(alpha: float, dtype: type) -> None:
    """0-d operands whose C is converted to the F64 compute type: the epilogue sums into the
    converted copy (a 0-d product's scaled result is a NumPy scalar, no ``out=``)."""
    from pytapp import ElementOp, Handle, Prectype, TensorInfo, TensorProduct

    a, b, c = (np.array(v, dtype=dtype) for v in (-3.0, 5.0, 7.0))
    d = np.array(11.0, dtype=dtype)
    info = TensorInfo.from_array(a)
    plan = TensorProduct(Handle("blas"), info, (), info, (), info, (), info, (),
                         op_c=ElementOp.CONJUGATE, prec=Prectype.F64F64_ACCUM_F64)
    plan.execute(alpha, a, b, -2.0, c, d)
    want = np.float64(alpha) * -15.0 - 2.0 * 7.0  # in F64, rounded once when stored
    assert d == np.asarray(want).astype(dtype)


@pytest.mark.parametrize(("expr", "summed"), [
    ("klcd,klad->ac", ("k", "l")),  # d fuses, k l do not fuse with it: GEMMs over (k, l)
    ("kcld,kald->ca", ("k",)),      # l and d fuse: the GEMMs loop over k alone
    ("hkcd,hkad->hac", ("k",)),     # with a batch label kept in D
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("epilogue", ["plain", "alpha_beta", "c_is_d", "conj_d", "d_columns",
                                      "conj_c"])
def test_gemms_looped_over_summed_labels(expr: str, summed: tuple[str, ...], dtype: type,
                                         epilogue: str, monkeypatch: pytest.MonkeyPatch,
                                         summed_route: object) -> None:
    """Contracted labels that do not fuse: GEMMs on views looped over some of them, summed
    into D by the summed-GEMM kernel (compiled without an executor, by the plan on 1, 2 or
    3 workers), exact on integer data."""
    monkeypatch.setenv("PYTAPP_COMPILED", "1")  # plans without an executor run compiled
    sizes = {"k": 3, "l": 4, "a": 7, "c": 6, "d": 5, "h": 2}
    rng = np.random.default_rng(33)
    la, lb = expr.split("->")[0].split(",")
    ld = expr.split("->")[1]
    a, b, c = (_ints(rng, labels, sizes, dtype).astype(dtype) for labels in (la, lb, ld))
    wide = np.complex128 if np.iscomplexobj(a) else np.float64
    want = np.einsum(expr, a.astype(wide), b.astype(wide))
    info = pytapp.TensorInfo.from_array
    shape = [sizes[ch] for ch in ld]
    d = np.full(shape, np.nan, dtype=dtype)
    if epilogue == "d_columns":
        d = np.full(shape[::-1], np.nan, dtype=dtype).T
    for workers in (None, 1, 2, 3):
        with pytapp.Handle("blas") as h:
            ex = None if workers is None else h.create_executor(threads=workers)
            if epilogue in ("plain", "d_columns"):
                plan = pytapp.TensorProduct(h, info(a), la, info(b), lb, None, None, info(d),
                                            ld)
                status = plan.execute(1.0, a, b, 0.0, None, d, ex)
                expected = want
            elif epilogue == "alpha_beta":
                plan = pytapp.TensorProduct(h, info(a), la, info(b), lb, info(c), ld,
                                            info(d), ld)
                status = plan.execute(2.0, a, b, -3.0, c, d, ex)
                expected = 2 * want - 3 * c.astype(wide)
            elif epilogue == "conj_c":
                plan = pytapp.TensorProduct(h, info(a), la, info(b), lb, info(c), ld,
                                            info(d), ld, op_c=pytapp.ElementOp.CONJUGATE)
                status = plan.execute(2.0, a, b, -3.0, c, d, ex)
                expected = 2 * want - 3 * np.conjugate(c.astype(wide))
            elif epilogue == "c_is_d":
                d[...] = c
                plan = pytapp.TensorProduct(h, info(a), la, info(b), lb, info(d), ld,
                                            info(d), ld)
                status = plan.execute(2.0, a, b, -3.0, d, d, ex)
                expected = 2 * want - 3 * c.astype(wide)
            else:
                plan = pytapp.TensorProduct(h, info(a), la, info(b), lb, None, None, info(d),
                                            ld, op_d=pytapp.ElementOp.CONJUGATE)
                status = plan.execute(1.0, a, b, 0.0, None, d, ex)
                expected = np.conjugate(want)
        shown = f"summed over {', '.join(summed)} in D" if workers is None else \
            f"summed after over {', '.join(summed)}"
        assert shown in status.algorithm, status.algorithm
        np.testing.assert_array_equal(d, expected)
        d[...] = np.nan


def test_summed_gemm_kernel_splits_the_sum_across_workers() -> None:
    """No kept batch and few rows of D: the workers share the summed GEMMs, each but the first
    into a partial D of its own, added after (every datatype, D in either order)."""
    from pytapp.kernels.program import summed_gemm, summed_gemm_available

    if not summed_gemm_available():
        pytest.skip("the compiled extension is not built")
    rng = np.random.default_rng(34)
    for dtype in (np.float32, np.float64, np.complex64, np.complex128):
        left = _ints(rng, "klad", {"k": 5, "l": 7, "a": 9, "d": 64}, dtype).astype(dtype)
        right = _ints(rng, "kldc", {"k": 5, "l": 7, "d": 64, "c": 11}, dtype).astype(dtype)
        wide = np.complex128 if np.iscomplexobj(left) else np.float64
        want = np.einsum("klad,kldc->ac", left.astype(wide), right.astype(wide))
        for order in ("C", "F"):
            for workers in (1, 2, 3, 8):
                d = np.full((9, 11), np.nan, dtype=dtype, order=order)
                assert summed_gemm(d, left, right, 2, workers)
                np.testing.assert_array_equal(d, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize(("expr", "sizes"), [
    ("klcd,klad->ac", {"k": 6, "l": 7, "a": 40, "c": 36, "d": 48}),  # few rows: the sum split
    ("hkcd,hkad->hac", {"h": 4, "k": 9, "a": 24, "c": 20, "d": 64}),  # the kept batch split
    ("kcld,kald->ca", {"k": 5, "l": 12, "a": 150, "c": 260, "d": 16}),  # D's rows split
])
def test_compiled_summed_gemms_on_every_split(expr: str, sizes: dict[str, int], dtype: type,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled executor's summed GEMMs (no executor: the BLAS's thread count, here 1, 2
    and 3) with alpha and beta on C = D, exact on integer data, in every way it splits."""
    from threadpoolctl import threadpool_limits

    from pytapp.analysis import cost, program, viewgemm

    monkeypatch.setenv("PYTAPP_COMPILED", "1")
    # copies priced out of reach: the route is taken in every datatype
    monkeypatch.setattr(viewgemm, "MachineModel", lambda: cost.MachineModel(bandwidth=1.0))
    viewgemm.summed_view_gemm.cache_clear()
    program._lower.cache_clear()
    rng = np.random.default_rng(35)
    la, lb = expr.split("->")[0].split(",")
    ld = expr.split("->")[1]
    a, b, c = (_ints(rng, labels, sizes, dtype).astype(dtype) for labels in (la, lb, ld))
    wide = np.complex128 if np.iscomplexobj(a) else np.float64
    want = 3 * np.einsum(expr, a.astype(wide), b.astype(wide)) - 2 * c.astype(wide)
    info = pytapp.TensorInfo.from_array
    try:
        for count in (1, 2, 3):
            with threadpool_limits(count, user_api="blas"), pytapp.Handle("blas") as h:
                d = c.copy()
                plan = pytapp.TensorProduct(h, info(a), la, info(b), lb, info(d), ld, info(d), ld)
                status = plan.execute(3.0, a, b, -2.0, d, d)
                assert status.algorithm.startswith("compiled:"), status.algorithm
                assert "in D" in status.algorithm, status.algorithm
                np.testing.assert_array_equal(d, want)
    finally:
        viewgemm.summed_view_gemm.cache_clear()
        program._lower.cache_clear()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_a_full_contraction_of_operands_in_different_orders_packs_one(dtype: type) -> None:
    """``dabc,cabd->``: B copied into A's order (once, through the threads' copy), one dot."""
    sizes = {"a": 20, "b": 10, "c": 16, "d": 12}
    rng = np.random.default_rng(33)
    a, b = _ints(rng, "dabc", sizes, dtype), _ints(rng, "cabd", sizes, dtype)
    d = np.full((), np.nan, dtype=dtype)
    info = pytapp.TensorInfo.from_array
    with pytapp.Handle("blas") as h:
        plan = pytapp.TensorProduct(h, info(a), "dabc", info(b), "cabd", None, None, info(d), "")
        status = plan.execute(1.0, a, b, 0.0, None, d)
    wide = np.complex128 if np.iscomplexobj(a) else np.float64
    np.testing.assert_array_equal(d, np.einsum("dabc,cabd->", a.astype(wide), b.astype(wide)))
    assert status.bytes_copied == b.nbytes, status


@pytest.mark.parametrize("split", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize(("expr", "sizes"), [
    ("iqmoc,oti->iqctm", {"i": 5, "q": 3, "m": 10, "o": 4, "c": 5, "t": 7}),  # D^T = B^T A^T
    ("bik,bkj->ijb", {"b": 7, "i": 12, "k": 5, "j": 9}),  # the batch label last in D
])
def test_batches_stored_in_groups_while_in_cache(
        expr: str, sizes: dict[str, int], dtype: type, split: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A batched GEMM whose temporary outgrows BLOCK_BYTES (made small here) runs in groups of
    batch elements, each stored into its slice of D with alpha, beta and C (split across
    threads or not), where its batch label steps through D by a page or more; where it steps
    by less (the batch label last in D), the whole temporary is stored at once. Exact on
    integer data, with C apart from D and C = D."""
    monkeypatch.setenv("PYTAPP_COMPILED", "0")
    pytapp.clear_plan_cache()
    monkeypatch.setattr(blas, "split_batch", lambda per_gemm, count: split)
    la, lb = expr.split("->")[0].split(",")
    ld = expr.split("->")[1]
    # one batch element's temporary: D's extents but the batch label's (A's first)
    per = np.dtype(dtype).itemsize * int(np.prod([sizes[x] for x in ld if x != la[0]]))
    monkeypatch.setattr(blas, "BLOCK_BYTES", per * 2)  # two batch elements per group
    rng = np.random.default_rng(40)
    a, b, c = (_ints(rng, labels, sizes, dtype) for labels in (la, lb, ld))
    wide = np.complex128 if np.iscomplexobj(a) else np.float64
    want = 3 * np.einsum(expr, a.astype(wide), b.astype(wide)) - 2 * c.astype(wide)
    info = pytapp.TensorInfo.from_array
    calls: list[int] = []
    real = blas.BlasPlan._store

    def counted(self: blas.BlasPlan, *args: object) -> None:
        calls.append(1)
        real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(blas.BlasPlan, "_store", counted)
    with pytapp.Handle("blas") as h:
        for c_is_d in (False, True):
            d = c.copy() if c_is_d else np.full_like(c, np.nan)
            plan = pytapp.TensorProduct(h, info(a), la, info(b), lb, info(c), ld, info(d), ld)
            assert "batched gemm" in plan.algorithm, plan.algorithm
            assert ("batch split" in plan.algorithm) is split
            calls.clear()
            plan.execute(3.0, a, b, -2.0, d if c_is_d else c, d)
            step = c.strides[ld.index(la[0])]  # the batch label's, in D
            assert (step >= blas.GROUP_MIN_STRIDE) == (ld[0] == la[0])
            # one store per group of two, or one of the whole temporary
            assert len(calls) == (-(-sizes[la[0]] // 2) if step >= blas.GROUP_MIN_STRIDE
                                  else 1)
            np.testing.assert_array_equal(d, want)


@pytest.mark.parametrize("prefers", ["wide", "tall"])
@pytest.mark.parametrize("blocked", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
def test_thin_temporaries_are_computed_as_the_machine_writes_them_faster(
        prefers: str, blocked: bool, dtype: type, monkeypatch: pytest.MonkeyPatch) -> None:
    """A thin GEMM into a temporary (D not written in place) lays the temporary out as this
    machine's BLAS writes faster, whole or in row blocks, and D gets the same numbers with C
    and alpha: the temporary's two orientations both run (the probe's answer is forced)."""
    ratio = 2.0 if prefers == "wide" else 0.5  # tall over wide
    monkeypatch.setattr(blas, "wide_is_faster",
                        lambda rows, cols, dt, k=None: None if max(rows, cols) < 4 * min(
                            rows, cols) else ratio > 1)
    monkeypatch.setattr(blas, "SMALL_ELEMENTS", 0)  # a GEMM, not numpy.einsum's small loop
    if blocked:  # row blocks of 40 rows (one n) by 7 columns
        monkeypatch.setattr(blas, "BLOCK_BYTES", 40 * 7 * 16)
        monkeypatch.setattr(blas, "MIN_BLOCK_ROWS", 1)
    rng = np.random.default_rng(3)
    sizes = {"a": 3, "g": 4, "n": 6, "t": 5, "z": 8, "q": 7}  # rows n t z (240), columns q
    a = _ints(rng, "agntz", sizes, dtype)
    b = _ints(rng, "aqg", sizes, dtype)
    c = _ints(rng, "nztq", sizes, dtype)
    d = np.full(c.shape, np.nan, dtype=dtype)
    info = pytapp.TensorInfo.from_array
    plan = pytapp.TensorProduct(pytapp.Handle("blas"), info(a), "agntz", info(b), "aqg",
                                info(c), "nztq", info(d), "nztq")
    assert ("blocked over 6 slices" in plan.algorithm) == blocked, plan.algorithm
    assert ("computed transposed" in plan.algorithm) == (prefers == "wide"), plan.algorithm
    plan.execute(2.0, a, b, -1.0, c, d)
    np.testing.assert_array_equal(d, 2 * np.einsum("agntz,aqg->nztq", a, b) - c)
