"""GEMMs on views the cost model cannot weigh against TTGT, tried on an auto plan's own calls.

Above VIEWS_TO_TTGT_MAX_FLOPS the lowering keeps GEMMs on views with both sides above 1
unpriced; ``alternative`` lowers the same product to TTGT, and an ``auto`` plan alternates the
two over the calls it makes (kernels.routes.RouteTrial), keeps the faster and records it in
the machine's wisdom. Every result is checked against numpy.einsum on exact integer data,
whichever route wrote it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from pytapp import Handle, TensorInfo, TensorProduct, wisdom
from pytapp.analysis import program
from pytapp.backends import auto
from pytapp.kernels import routes
from pytapp.kernels.program import available, blas_available

pytestmark = pytest.mark.skipif(not (available() and blas_available()),
                                reason="needs the compiled executor and its BLAS")

#: D's labels interleave A's free labels with B's: 22126 GEMMs of 12x8x26 on views.
EQ = ("vdmo", "own", "wdnvm")
EXTENTS = {"v": 37, "d": 13, "m": 12, "o": 26, "w": 46, "n": 8}


def _ints(labels: str, dtype: type, seed: int) -> np.ndarray:
    shape = tuple(EXTENTS[x] for x in labels)
    data = np.random.default_rng(seed).integers(-3, 4, shape)
    return (data + (1j * data[::-1] if np.issubdtype(dtype, np.complexfloating) else 0)
            ).astype(dtype)


@pytest.fixture(autouse=True)
def _own_wisdom(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTAPP_WISDOM", str(tmp_path / "wisdom.json"))
    monkeypatch.delenv("PYTAPP_AUTOTUNE", raising=False)
    wisdom.forget()


def _plan(backend: str, a: np.ndarray, b: np.ndarray, d: np.ndarray) -> TensorProduct:
    """Plan the product; an auto plan is pinned to blas (its routes are what these tests try).

    Without the pin, auto may time its backends after a few calls and, on a loaded machine,
    hand the product to torch, whose plans have no compiled routes to try.
    """
    la, lb, ld = EQ
    infos = [TensorInfo.from_array(x) for x in (a, b, d, d)]
    if backend == "auto":
        spec = TensorProduct(Handle("blas"), infos[0], la, infos[1], lb, infos[2], ld,
                             infos[3], ld).spec
        wisdom.record("product", auto._key(spec), {"choice": "blas"})
    return TensorProduct(Handle(backend), infos[0], la, infos[1], lb, infos[2], ld, infos[3], ld)


def _operands(dtype: type) -> tuple[np.ndarray, ...]:
    a, b, c = (_ints(x, dtype, seed) for seed, x in enumerate(EQ))
    exact = np.complex128 if np.issubdtype(dtype, np.complexfloating) else np.float64
    want = 2 * np.einsum(f"{EQ[0]},{EQ[1]}->{EQ[2]}", a.astype(exact), b.astype(exact)) - 3 * c
    return a, b, c, want


def test_the_lowering_offers_ttgt_only_where_views_go_unpriced() -> None:
    a, b, c, _ = _operands(np.float64)
    spec = _plan("blas", a, b, c).spec
    assert program.lower(spec).kind is program.Step.GEMM
    alt = program.alternative(spec)
    assert alt is not None and alt.kind is program.Step.TTGT
    assert program.alternative(spec, gemm=False) is None
    # below the size where views go unpriced, the model weighs them: nothing to try
    small = _plan("blas", a[:3, :3], b[:, :3], c[:3, :3, :, :3]).spec
    assert small.flops <= program.VIEWS_TO_TTGT_MAX_FLOPS
    assert program.alternative(small) is None
    # a plain matrix product runs one GEMM: no alternative either
    x = np.ones((300, 300))
    mm = TensorProduct(Handle("blas"), TensorInfo.from_array(x), "ik", TensorInfo.from_array(x),
                       "kj", TensorInfo.from_array(x), "ij", TensorInfo.from_array(x), "ij").spec
    assert program.alternative(mm) is None


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex64])
def test_auto_tries_both_routes_on_its_calls_and_keeps_the_faster(dtype: type) -> None:
    a, b, c, want = _operands(dtype)
    plan = _plan("auto", a, b, c)
    assert plan.compiled_program is None  # on trial: only execute counts its calls
    seen = set()
    for _ in range(40):
        d = np.full(c.shape, np.nan, dtype)
        status = plan.execute(2, a, b, -3, c, d)
        seen.add(status.algorithm)
        assert np.array_equal(d, want.astype(dtype))
        if plan.compiled_program is not None:
            break
    assert plan.compiled_program is not None, "the trial never settled"
    assert len(seen) == 2 and any("ttgt" in s for s in seen) and any("views" in s for s in seen)
    assert plan.algorithm in seen
    assert "routes tried on its calls (settled)" in plan.explain()
    known = wisdom.lookup(routes.SECTION, plan._plan.route_key)  # type: ignore[union-attr]
    assert known["algorithm"] == plan.algorithm and known["route"] in (0, 1)
    d = np.zeros_like(c)
    assert plan.execute(2, a, b, -3, c, d).algorithm == plan.algorithm
    assert np.array_equal(d, want.astype(dtype))


@pytest.mark.parametrize("route", [0, 1])
def test_a_recorded_route_runs_at_once(route: int) -> None:
    a, b, c, want = _operands(np.float64)
    key = _plan("auto", a, b, c)._plan.route_key  # type: ignore[union-attr]
    wisdom.record(routes.SECTION, key, {"route": route})
    plan = _plan("auto", a, b, c)
    assert plan.compiled_program is not None
    assert ("ttgt" in plan.algorithm) == (route == 1)
    d = np.zeros_like(c)
    status = plan.execute(2, a, b, -3, c, d)
    assert status.algorithm == plan.algorithm and np.array_equal(d, want)


def test_no_trial_where_the_plan_does_not_tune(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, c, _ = _operands(np.float64)
    assert _plan("blas", a, b, c).compiled_program is not None  # blas: the model's route
    monkeypatch.setenv("PYTAPP_AUTOTUNE", "0")
    plan = _plan("auto", a, b, c)
    assert plan.compiled_program is not None and "views" in plan.algorithm


def test_sixteen_threads_share_one_plan_on_trial() -> None:
    a, b, c, want = _operands(np.float64)
    plan = _plan("auto", a, b, c)
    errors: list[str] = []

    def work() -> None:
        for _ in range(3):
            d = np.full(c.shape, np.nan)
            plan.execute(2, a, b, -3, c, d)
            if not np.array_equal(d, want):
                errors.append("wrong result")

    threads = [threading.Thread(target=work) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert plan.compiled_program is not None  # 48 calls settle it


def test_no_trial_where_the_other_route_needs_more_memory_than_allowed() -> None:
    from pytapp.kernels.program import compile_product
    from pytapp.status import Status

    a, b, c, _ = _operands(np.float64)
    spec = _plan("blas", a, b, c).spec
    template = Status()
    views = compile_product(spec, template)
    assert template.bytes_allocated == 0  # GEMMs on views need no scratch
    tried, _ = routes.routes_for(spec, views, template, "k", Status)
    assert isinstance(tried, routes.RouteTrial)
    scratch = template.bytes_allocated  # the larger of the two: TTGT's
    assert scratch > 0
    template = Status()
    kept, kept_template = routes.routes_for(spec, views, template, "k", Status, scratch - 1)
    assert kept is views and kept_template is template and template.bytes_allocated == 0


def _settled(auto: TensorProduct, a: np.ndarray, b: np.ndarray, c: np.ndarray,
             want: np.ndarray) -> set[str]:
    """Run ``auto`` (D = 2 A B - 3 C) until its route trial settles, each result exact; return
    the algorithms that ran."""
    seen = set()
    for _ in range(40):
        d = np.full(c.shape, np.nan, c.dtype)
        seen.add(auto.execute(2, a, b, -3, c, d).algorithm)
        assert np.array_equal(d, want)
        if auto.compiled_program is not None:
            break
    assert auto.compiled_program is not None, "the trial never settled"
    return seen


def test_gemvs_on_views_in_long_rows_are_tried_against_one_gemv() -> None:
    """``ofqx,of->xq``: 21 GEMVs on views, each reading A in rows of 70 C64 numbers (560 bytes,
    above GEMV_SCATTER_RUN) apart, against one GEMV over A's free labels in order, its result
    stored into D; both exact on integers, whichever runs, and the trial settles."""
    ext = {"o": 40, "f": 40, "q": 21, "x": 70}
    rng = np.random.default_rng(5)

    def ints(labels: str) -> np.ndarray:
        shape = tuple(ext[x] for x in labels)
        return (rng.integers(-3, 4, shape) + 1j * rng.integers(-3, 4, shape)).astype(np.complex64)

    a, b, c = ints("ofqx"), ints("of"), ints("xq")
    want = (2 * np.einsum("ofqx,of->xq", a.astype(np.complex128), b.astype(np.complex128))
            - 3 * c).astype(np.complex64)

    def plan(backend: str) -> TensorProduct:
        return TensorProduct(Handle(backend), TensorInfo.from_array(a), "ofqx",
                             TensorInfo.from_array(b), "of", TensorInfo.from_array(c), "xq",
                             TensorInfo.from_array(c), "xq")

    spec = plan("blas").spec
    first = program.lower(spec)
    assert first.kind is program.Step.GEMM and "n=1," in first.description
    alt = program.alternative(spec)
    assert alt is not None and alt.kind is program.Step.TTGT and "packs none" in alt.description
    with pytest.MonkeyPatch.context() as mp:  # rows this long scatter no more: no alternative
        mp.setattr(program, "GEMV_SCATTER_RUN", 1 << 20)
        program._lower.cache_clear()
        assert program.lower(spec).kind is program.Step.TTGT
        assert program.alternative(spec) is None
    program._lower.cache_clear()
    seen = _settled(plan("auto"), a, b, c, want)
    assert any("ttgt" in s for s in seen) and any("views" in s for s in seen), seen


def _flip_case(equation: str, ext: dict[str, int], dtype: type, seed: int
               ) -> tuple[Callable[[str], TensorProduct], tuple[np.ndarray, ...], np.ndarray]:
    """A, B and C of ``equation`` on exact integers, a plan maker, and 2 A B - 3 C exactly."""
    rng = np.random.default_rng(seed)
    (la, lb), ld = equation.split("->")[0].split(","), equation.split("->")[1]

    def ints(labels: str) -> np.ndarray:
        shape = tuple(ext[x] for x in labels)
        data = rng.integers(-3, 4, shape)
        if np.issubdtype(dtype, np.complexfloating):
            return (data + 1j * rng.integers(-3, 4, shape)).astype(dtype)
        return data.astype(dtype)

    a, b, c = ints(la), ints(lb), ints(ld)
    wide = np.complex128 if np.issubdtype(dtype, np.complexfloating) else np.float64
    want = 2 * np.einsum(equation, a.astype(wide), b.astype(wide)) - 3 * c

    def plan(backend: str) -> TensorProduct:
        return TensorProduct(Handle(backend), TensorInfo.from_array(a), la,
                             TensorInfo.from_array(b), lb, TensorInfo.from_array(c), ld,
                             TensorInfo.from_array(c), ld)

    return plan, (a, b, c), want


def _settle(auto: TensorProduct, operands: tuple[np.ndarray, ...], want: np.ndarray
            ) -> set[str]:
    """Run ``auto`` until its trial settles, each result exact; return the algorithms seen."""
    a, b, c = operands
    seen = set()
    for _ in range(40):
        d = np.full(c.shape, np.nan, c.dtype)
        seen.add(auto.execute(2, a, b, -3, c, d).algorithm)
        np.testing.assert_array_equal(d, want)
        if auto.compiled_program is not None:
            return seen
    raise AssertionError(f"the trial never settled: {seen}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_a_large_ttgt_into_a_small_d_is_tried_the_other_way_round(dtype: type) -> None:
    """``wml,xmw->lx``: one thin GEMM of 16 x 128 x 4800 (A packed), D of 2048 numbers. TTGT
    follows D's layout (T = A B, D written in place where there is no C); the other
    orientation (T^T = B^T A^T, stored into D) is the alternative an auto plan tries; both
    exact on integers, whichever runs, and the trial settles."""
    plan, (a, b, c), want = _flip_case("wml,xmw->lx", {"w": 80, "m": 60, "l": 16, "x": 128},
                                       dtype, 7)
    spec = plan("blas").spec
    first, alt = program.lower(spec), program.alternative(spec)
    assert first.kind is program.Step.TTGT and alt is not None and alt.kind is program.Step.TTGT
    assert (alt.gemm.m, alt.gemm.n) == (first.gemm.n, first.gemm.m)
    assert alt.gemm.swap != first.gemm.swap
    with pytest.MonkeyPatch.context() as mp:  # a D this large against its operands: no trial
        mp.setattr(program, "TTGT_FLIP_D_SHARE", (a.size + b.size) // c.size + 1)
        program._lower.cache_clear()
        assert program.alternative(spec) is None
    program._lower.cache_clear()
    seen = _settle(plan("auto"), (a, b, c), want)
    assert any("D^T" in s for s in seen) and any("D^T" not in s for s in seen), seen


@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
def test_one_gemm_on_views_into_a_small_d_is_tried_the_other_way_round_into_t(
        dtype: type) -> None:
    """``opr,opl->rl``: one GEMM on views of 38 x 172 x 1800 writes D (1/58 of the operands'
    numbers) in place; the alternative an auto plan tries computes T^T = B^T A^T on the same
    views (nothing packed) and stores it into D. Exact on integers whichever runs; settles."""
    plan, operands, want = _flip_case("opr,opl->rl", {"o": 30, "p": 60, "r": 38, "l": 172},
                                      dtype, 11)
    spec = plan("blas").spec
    first, alt = program.lower(spec), program.alternative(spec)
    assert first.kind is program.Step.GEMM and "1 gemm on strided views" in first.description
    assert alt is not None and alt.kind is program.Step.TTGT and "packs none" in alt.description
    assert (alt.gemm.m, alt.gemm.n) == (first.gemm.n, first.gemm.m)
    seen = _settle(plan("auto"), operands, want)
    assert any("ttgt" in s for s in seen) and any("views" in s for s in seen), seen


def test_gemvs_on_views_are_tried_against_the_stream_through_the_matrix() -> None:
    """``axv,v->xa``: 320 GEMVs on views (each an 800 x 37 block of A into a column of D that
    strides), against one stream through A in order; both exact on integers, whichever runs,
    and the trial settles on one of them (auto tries routes above COMPILED_MAX_FLOPS). Below
    the stream's size (where the lowering's other choice is a loop nest, 1.8-2.8x slower than
    the GEMVs) nothing is tried."""
    ext = {"a": 320, "x": 800, "v": 37}
    rng = np.random.default_rng(11)
    a = rng.integers(-3, 4, (ext["a"], ext["x"], ext["v"])).astype(np.float32)
    b = rng.integers(-3, 4, ext["v"]).astype(np.float32)
    c = rng.integers(-3, 4, (ext["x"], ext["a"])).astype(np.float32)
    want = (2 * np.einsum("axv,v->xa", a.astype(np.float64), b.astype(np.float64)) - 3 * c
            ).astype(np.float32)

    def plan(backend: str, x: np.ndarray, z: np.ndarray) -> TensorProduct:
        return TensorProduct(Handle(backend), TensorInfo.from_array(x), "axv",
                             TensorInfo.from_array(b), "v", TensorInfo.from_array(z), "xa",
                             TensorInfo.from_array(z), "xa")

    spec = plan("blas", a, c).spec
    first = program.lower(spec)
    assert first.kind is program.Step.GEMM and "n=1," in first.description
    alt = program.alternative(spec)
    assert alt is not None and alt.kind is program.Step.STREAM
    small = plan("blas", a[:100, :200], c[:200, :100]).spec
    assert program.lower(small).kind is program.Step.GEMM and program.alternative(small) is None
    m, v = np.empty((2000, 4000)), np.empty(4000)  # one GEMV reads its matrix in order: no trial
    one = TensorProduct(Handle("blas"), TensorInfo.from_array(m), "gq", TensorInfo.from_array(v),
                        "q", TensorInfo.from_array(m[:, 0]), "g", TensorInfo.from_array(m[:, 0]),
                        "g").spec
    assert "1 gemm on strided views" in program.lower(one).description
    assert program.alternative(one) is None
    seen = _settled(plan("auto", a, c), a, b, c, want)
    assert any("stream" in s for s in seen) and any("views" in s for s in seen), seen
