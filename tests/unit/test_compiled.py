"""The compiled executor (``pytapp._cexec``) against the conformance kit's independent oracle.

Every route: the loop nest (any label class, diagonals, broadcast labels), GEMMs on strided
views (plain, transposed, swapped, batched, conjugated, with beta C, with C being D) and the TTGT
step (packed operands, GEMMs into a scratch, the store with the epilogue), on every datatype it
computes in, over the conformance generators and Hypothesis-drawn products with negative, zero
and padded strides, misaligned operands and flat storage. Operands it does not take (misaligned,
other layouts, views no allocation it can see bounds, torch tensors, overlaps) fall back to the
Python plan with the same result, and bad input raises the same TAPP error as without the executor,
leaving D untouched. Sixteen threads sharing one plan (per route), one einsum expression (its
compiled chain) and one-shot einsum get exact results."""

from __future__ import annotations

import array
import contextlib
import ctypes
import mmap
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pytapp
from pytapp import Handle, TensorInfo, TensorProduct
from pytapp.analysis import program as lowering
from pytapp.analysis.program import GEMM_MIN_MADDS, RELEASE_GIL_FLOPS
from pytapp.analysis.spec import build_spec
from pytapp.conformance import CASES, Instance, OperandData, check_result, expected_result
from pytapp.conformance.generators import make_operand, random_values
from pytapp.conformance.instance import Operands
from pytapp.conformance.runner import run_instance
from pytapp.conformance.strategies import products
from pytapp.datatypes import Datatype, ElementOp
from pytapp.kernels import program
from pytapp.precision import Prectype

pytestmark = pytest.mark.skipif(not program.available(),
                                reason="the compiled extension pytapp._cexec was not built")

NATIVE = (Datatype.F32, Datatype.F64, Datatype.C32, Datatype.C64)
COMPILED = "compiled:"
#: Conformance cases whose operands the executor must leave to the Python plan: as_strided
#: views (no allocation the executor can see bounds them) and D overlapping an input.
FALLBACK_CASES = {21: "as_strided input", 35: "D overlaps A or B"}
SEEDS = range(10)
EXAMPLES = 60

_settings = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                            HealthCheck.function_scoped_fixture])


# ------------------------------------------------------------------------------ helpers
@dataclass
class Run:
    """What one execute did: the plan's decision and the Status's algorithm."""

    planned: str
    ran: str


@dataclass
class Recorder:
    """Records every TensorProduct.execute while installed."""

    runs: list[Run] = field(default_factory=list)


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    rec = Recorder()
    original = TensorProduct.execute

    def execute(self: TensorProduct, *args: Any, **kwargs: Any) -> Any:
        status = original(self, *args, **kwargs)
        rec.runs.append(Run(self.algorithm, status.algorithm))
        return status

    monkeypatch.setattr(TensorProduct, "execute", execute)
    yield rec


@dataclass
class Drawn(Instance):
    """An instance whose ``flat`` roles are passed as one-dimensional storage."""

    flat: tuple[str, ...] = ()


def _data(inst: Instance, role: str) -> Any:
    """What execute gets for ``role``: the view, or its flat storage."""
    item = inst.items[0]
    if role == "C" and inst.c_is_d:
        role = "D"
    view = item.view(role)
    if view is not None and role in getattr(inst, "flat", ()):
        return view.reshape(-1)  # a row-major parent: element [0, ..., 0] first
    return view


def _takes(inst: Instance) -> bool:
    """Whether the executor takes these operands as they are: aligned, with the descriptor's
    shape and strides (flat storage of a 1-d row-major operand has them)."""
    return all(x is None or (x.flags.aligned and (x.shape, x.strides) == (v.shape, v.strides))
               for x, v in ((_data(inst, r), inst.items[0].view(r)) for r in "ABCD"))


def _plan(inst: Instance, backend: str = "blas") -> TensorProduct:
    item = inst.items[0]
    infos = {r: TensorInfo.from_array(np.asarray(item.need(r).view)) for r in "ABD"}
    c = item.c if item.c is not None and not inst.c_is_d else None
    c_info = TensorInfo.from_array(np.asarray(c.view)) if c is not None else None
    return TensorProduct(
        Handle(backend), infos["A"], inst.labels["A"], infos["B"], inst.labels["B"], c_info,
        inst.labels["C"] if c_info is not None else None, infos["D"], inst.labels["D"],
        op_a=inst.ops["A"], op_b=inst.ops["B"], op_c=inst.ops["C"], op_d=inst.ops["D"],
        prec=inst.prec, allow_broadcast=inst.allow_broadcast)


def _execute(inst: Instance, backend: str = "blas") -> tuple[TensorProduct, Any]:
    """Plan and run ``inst`` once; assert the result matches the kit's oracle."""
    item = inst.items[0]
    exp = expected_result(inst, item)
    plan = _plan(inst, backend)
    a, b, c, d = (_data(inst, r) for r in "ABCD")
    with np.errstate(all="ignore"):
        status = plan.execute(inst.alpha, a, b, inst.beta, c, d)
    ok, why = check_result(item.d.parent, exp)
    assert ok, f"{why}\n{inst.describe()}\n{status.algorithm}"
    return plan, status


def _zero_stride(rng: np.random.Generator, ext: Sequence[int], dt: Datatype) -> OperandData:
    """A view with stride 0 on one mode, over an owning parent the executor can see."""
    movable = [i for i, e in enumerate(ext) if e > 1]
    if not movable:
        return make_operand(rng, ext, dt, "row")
    m = movable[int(rng.integers(0, len(movable)))]
    parent = random_values(rng, [1 if i == m else e for i, e in enumerate(ext)], dt)
    strides = [0 if i == m else s for i, s in enumerate(parent.strides)]
    view = np.ndarray(tuple(ext), dtype=parent.dtype, buffer=parent, strides=tuple(strides))
    return OperandData(view, parent)


def _misaligned(data: OperandData) -> OperandData:
    """The operand's values in a contiguous array at an odd address."""
    view = np.asarray(data.view)
    raw = np.zeros(view.nbytes + 1, dtype=np.uint8)
    arr = raw[1:].view(view.dtype).reshape(view.shape)
    arr[...] = view
    return OperandData(arr, arr)


def _with_canaries(data: OperandData) -> OperandData:
    """NaN everywhere in the parent outside the view: an out-of-footprint read shows."""
    view = np.asarray(data.view)
    values = view.copy()
    data.parent[...] = np.nan
    if view.size:
        view[...] = values
    return data


def build(dt: Datatype, labels: dict[str, tuple[Hashable, ...]], extents: dict[Hashable, int],
          layouts: dict[str, str], *, seed: int = 0, alpha: complex | float = 1.0,
          beta: complex | float = 0.0, ops: str = "----", c_mode: str = "none",
          prec: Prectype = Prectype.DEFAULT) -> Instance:
    """One product with data: ``layouts`` per role (the kit's kinds, ``zero``, ``misaligned``
    or ``flat``: row-major, passed as one-dimensional storage); ``ops``
    marks conjugated operands with ``c`` (A, B, C, D); ``c_mode`` is ``none`` (no C),
    ``own`` (C has its own layout), ``d`` (C is D) or ``nan`` (a C full of NaN, with beta 0)."""
    rng = np.random.default_rng(seed)
    labels = {**labels, "C": labels["D"]}
    data: dict[str, OperandData] = {}
    for role in "ABCD":
        ext = [extents[x] for x in labels[role]]
        kind = layouts.get(role, "row")
        if kind == "zero":
            data[role] = _zero_stride(rng, ext, dt)
        elif kind in ("misaligned", "flat"):
            data[role] = make_operand(rng, ext, dt, "row")
        else:
            data[role] = make_operand(rng, ext, dt, kind)
        if kind == "misaligned":
            data[role] = _misaligned(data[role])
        if role in "AB":
            _with_canaries(data[role])
    if c_mode == "nan":
        data["C"].parent[...] = np.nan
    item = Operands(data["A"], data["B"], None if c_mode == "none" else data["C"], data["D"])
    if c_mode == "d":
        item.c = item.d
    return Drawn(
        flat=tuple(r for r, k in layouts.items() if k == "flat"), case=0, seed=seed,
        labels=labels, datatypes=dict.fromkeys("ABCD", dt), items=[item],
        ops={r: ElementOp.CONJUGATE if o == "c" else ElementOp.IDENTITY
             for r, o in zip("ABCD", ops, strict=True)},
        prec=prec, alpha=alpha, beta=beta, allow_broadcast=True, c_is_d=c_mode == "d")


# ------------------------------------------------------------------------------ 1. the kit
def test_conformance_generators_run_compiled_and_match_the_oracle(recorder: Recorder) -> None:
    """Every instance whose plan lowered runs compiled (except the kit's as_strided and
    overlapping operands); every datatype the executor computes in runs it; F16, BF16 and
    mixed datatypes never do; every verdict is a pass."""
    ran: Counter[str] = Counter()
    for number in sorted(CASES):
        for seed in SEEDS:
            inst = CASES[number].make(seed)
            recorder.runs.clear()
            outcome = run_instance(inst, "blas")
            # blas declines F16 accumulation (code 16) before anything runs
            assert outcome.verdict == "pass" or (
                outcome.verdict == "unsupported" and not recorder.runs), (
                f"case {number} seed {seed}: {outcome.message}")
            dts = {inst.datatypes[r] for r in "ABCD"}
            kind = dts.pop().name if len(dts) == 1 else "mixed"
            for run in recorder.runs:
                compiled = run.ran.startswith(COMPILED)
                lowered = run.planned.startswith(COMPILED)
                if number in FALLBACK_CASES:
                    assert not compiled, (number, FALLBACK_CASES[number], run)
                else:
                    assert compiled == lowered, (number, seed, inst.describe(), run)
                ran[kind] += compiled
                ran["total"] += 1
    for dt in NATIVE:
        assert ran[dt.name] > 0, (dt, ran)
    for kind in ("F16", "BF16", "mixed"):
        assert ran[kind] == 0, (kind, ran)


@_settings
@given(inst=products())
def test_kit_strategy_products_on_blas(recorder: Recorder, inst: Instance) -> None:
    """The kit's own strategy (every class, datatype, precision, special scalars, NaN canaries):
    a pass, and compiled exactly when the plan lowered and the operands are ones it takes."""
    recorder.runs.clear()
    with np.errstate(all="ignore"):
        outcome = run_instance(inst, "blas")
    assert outcome.verdict == "pass" or (outcome.verdict == "unsupported" and not recorder.runs), (
        f"{outcome.message}\n{outcome.description}")
    for run in recorder.runs:
        if run.ran.startswith(COMPILED):
            assert run.planned.startswith(COMPILED)
            assert len({inst.datatypes[r] for r in "ABD"}) == 1


# ------------------------------------------------------------------------------ 2. Hypothesis
_LAYOUTS = ("row", "perm", "sub", "sub_fewer", "neg", "mixed", "sub_neg", "sub_mixed")


@st.composite
def compiled_products(draw: st.DrawFn, gemm: bool, elementwise: bool = False) -> Instance:
    """Products of one native datatype with operands the executor takes as they are.

    Every label class (broadcast included), diagonals in A, B and D; ``gemm``: contracted and
    free labels sized so that a GEMM would have at least ``GEMM_MIN_MADDS`` multiply-adds,
    else extents 0-4; ``elementwise``: nothing summed (no contracted or isolated label of A
    or B).
    """
    dt = draw(st.sampled_from(NATIVE))
    counts = {c: draw(st.integers(1 if gemm else 0, 2)) for c in ("P", "FA", "FB")}
    counts["H"] = draw(st.integers(0, 2))
    for c in ("IA", "IB", "IC"):  # rarer with GEMMs: no GEMM reads them in place
        counts[c] = draw(st.sampled_from((0, 0, 0, 1) if gemm else (0, 1)))
    if elementwise:
        counts.update(P=0, IA=0, IB=0, H=draw(st.integers(1, 3)))
    names = iter("abcdefghijklmnopqrstuvwxyz")
    cls = {c: [next(names) for _ in range(n)] for c, n in counts.items()}
    extents: dict[Hashable, int] = {}
    for c, members in cls.items():
        for i, x in enumerate(members):
            if not gemm:
                extents[x] = draw(st.integers(0, 4))
            elif c not in ("P", "FA", "FB"):
                extents[x] = draw(st.integers(1, 3))
            elif len(members) == 1:
                extents[x] = draw(st.integers(round(GEMM_MIN_MADDS ** (1 / 3)), 16))
            else:
                extents[x] = draw(st.integers(1, 4) if i == 0 else st.integers(4, 8))

    def modes(*classes: str) -> list[Hashable]:
        if gemm and draw(st.integers(0, 3)):  # class by class: the matrices of a GEMM
            return [x for c in draw(st.permutations(classes)) for x in cls[c]]
        return draw(st.permutations([x for c in classes for x in cls[c]]))

    labels = {"A": modes("H", "P", "FA", "IA"), "B": modes("H", "P", "FB", "IB"),
              "D": modes("H", "FA", "FB", "IC")}
    for role in "ABD":
        if labels[role] and draw(st.integers(0, 3 if not gemm else 7)) == 0:  # a diagonal
            pos = draw(st.integers(0, len(labels[role])))
            labels[role].insert(pos, draw(st.sampled_from(labels[role])))
    # GEMMs read matrices with a unit stride: mostly such layouts when sized for them
    kinds = ("row", "row", "sub", "sub_fewer", "perm") if gemm else _LAYOUTS
    layouts = {r: draw(st.sampled_from(kinds + (("zero",) if r in "ABC" else ())))
               for r in "ABCD"}
    if draw(st.integers(0, 3)) == 0:  # operands the executor leaves to the Python plan
        layouts[draw(st.sampled_from("ABCD"))] = draw(st.sampled_from(("misaligned", "flat")))
    cplx = dt.is_complex
    real = st.sampled_from([1.0, -1.0, 0.5, 2]) | st.floats(-2, 2, allow_nan=False)
    scalar = st.builds(complex, real, real) if cplx else real
    alpha = draw(st.sampled_from([0.0]) | scalar)
    beta = draw(st.sampled_from([0.0]) | scalar)
    c_mode = (draw(st.sampled_from(["none", "nan"])) if beta == 0
              else draw(st.sampled_from(["own", "d"])))
    ops = "".join(draw(st.sampled_from("---c" if gemm else "-c")) for _ in range(4))
    precs = (Prectype.DEFAULT, Prectype.F32F32_ACCUM_F32 if dt.real is Datatype.F32
             else Prectype.F64F64_ACCUM_F64)
    return build(dt, {r: tuple(v) for r, v in labels.items()}, extents, layouts,
                 seed=draw(st.integers(0, 2**31)), alpha=alpha, beta=beta, ops=ops,
                 c_mode=c_mode, prec=draw(st.sampled_from(precs)))


def _check_compiled(inst: Instance) -> str:
    plan, status = _execute(inst)
    # Operands are owned, non-overlapping ndarrays: a plan that lowered runs compiled unless
    # one is misaligned or flat storage.
    lowered = plan.algorithm.startswith(COMPILED)
    assert status.algorithm.startswith(COMPILED) == (lowered and _takes(inst)), (
        plan.algorithm, status.algorithm)
    if status.algorithm.startswith(COMPILED):  # only the TTGT step, blocks of a loop nest
        scratch = (status.algorithm.startswith(f"{COMPILED} ttgt")  # and a stream's packs
                   or "packed in D's order" in status.algorithm  # allocate, within the plan's
                   or (status.algorithm.startswith(f"{COMPILED} stream")  # declared workspace
                       and "(packs none)" not in status.algorithm))
        assert status.bytes_allocated <= (plan.workspace_bytes if scratch else 0), status
        if "in blocks of" not in status.algorithm:  # (blocks reuse their buffers)
            assert status.bytes_copied <= status.bytes_allocated, status
    return str(status.algorithm)


@_settings
@given(inst=compiled_products(gemm=False))
def test_loop_nest_products(inst: Instance) -> None:
    _check_compiled(inst)


@_settings
@given(inst=compiled_products(gemm=True))
def test_gemm_sized_products(inst: Instance) -> None:
    _check_compiled(inst)


# Products that the lowering maps to each CBLAS argument combination (the matrices as stored:
# A (i,k) or (k,i), B (k,j) or (j,k), D (i,j) or (j,i)), batched, with two contracted labels;
# and two that no GEMM reads in place (the batch label innermost; a broadcast label), which the
# loop nest, TTGT or the Python plan runs, whichever the size and shape allow.
_GEMM_SHAPES = [
    ("ik", "kj", "ij", True), ("ki", "kj", "ij", True), ("ik", "jk", "ij", True),
    ("ki", "jk", "ij", True), ("ik", "kj", "ji", True), ("ki", "jk", "ji", True),
    ("bik", "bkj", "bij", True), ("bki", "bjk", "bji", True), ("ikl", "klj", "ij", True),
    ("ikb", "kjb", "ijb", False), ("ik", "kj", "jbi", False),
]
_EXT = {"i": 12, "j": 9, "k": 10, "l": 3, "b": 3}


@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", _GEMM_SHAPES, ids=lambda s: ",".join(s[:2]) + "->" + s[2])
def test_gemm_routes(dt: Datatype, shape: tuple[str, str, str, bool]) -> None:
    """GEMMs on the operands where they lie, with alpha, beta C (own layout, or C is D), C
    full of NaN under beta 0, op_A/op_B conjugation and op_D, against the oracle."""
    a, b, d, gemm = shape
    labels = {"A": tuple(a), "B": tuple(b), "D": tuple(d)}
    cplx = dt.is_complex
    alpha = complex(0.7, -1.3) if cplx else -0.7
    beta = complex(-0.4, 0.9) if cplx else 1.5
    hit = 0
    variants: list[tuple[str, complex | float, str]] = [
        ("none", 0.0, "----"), ("own", beta, "----"), ("d", beta, "----"), ("nan", 0.0, "----"),
        ("own", beta, "cc-c"), ("d", beta, "c-cc"), ("own", beta, "--c-"),
    ]
    for seed, (c_mode, bet, ops) in enumerate(variants):
        inst = build(dt, labels, _EXT, {"C": "perm"} if c_mode == "own" else {}, seed=seed,
                     alpha=alpha, beta=bet, ops=ops, c_mode=c_mode)
        algorithm = _check_compiled(inst)
        hit += "on strided views" in algorithm
    assert (hit > 0) == gemm, shape


# Batches of GEMMs on views adding beta C where C lies as D: each GEMM's block of D set from C
# just before the GEMM (D's blocks contiguous: bij; or rows apart: bji, transposed), small
# (one thread runs them) and large (shared out over the pool), C and D both padded alike.
_FUSED_SHAPES = [("bik", "bkj", "bij"), ("bki", "bjk", "bji"), ("kbi", "bkj", "jbi")]
_FUSED_EXT = [{"i": 12, "j": 9, "k": 10, "b": 3}, {"i": 64, "j": 48, "k": 48, "b": 16}]


@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", _FUSED_SHAPES, ids=lambda s: ",".join(s[:2]) + "->" + s[2])
@pytest.mark.parametrize("ext", _FUSED_EXT, ids=("small", "split"))
def test_gemm_batches_set_d_from_c_block_by_block(dt: Datatype, shape: tuple[str, str, str],
                                                  ext: dict[Hashable, int]) -> None:
    """beta op_C(C) with C conjugated or not, op_D, C and D contiguous or padded alike."""
    labels = dict(zip("ABD", (tuple(x) for x in shape), strict=True))
    cplx = dt.is_complex
    alpha = complex(0.7, -1.3) if cplx else -0.7
    beta = complex(-0.4, 0.9) if cplx else 1.5
    routes = [_check_compiled(build(dt, labels, ext, layouts, seed=seed, alpha=alpha, beta=beta,
                                    ops=ops, c_mode="own"))
              for seed, (ops, layouts) in enumerate([
                  ("----", {}), ("--c-", {}), ("--cc", {"C": "sub", "D": "sub"}),
                  ("---c", {"C": "sub", "D": "sub"})])]
    assert all("on strided views" in r for r in routes), routes


# GEMMs of one row or one column, which the executor runs as GEMVs: the vector as A or B,
# stored plain or transposed, batched, D a column of a strided parent; a conjugated vector
# (no GEMV conjugates its vector) stays a GEMM.
_GEMV_SHAPES = [("k", "kj", "j"), ("k", "jk", "j"), ("ik", "k", "i"), ("ki", "k", "i"),
                ("bk", "bkj", "bj"), ("bik", "bk", "bi"), ("bki", "bk", "ib"), ("kj", "k", "j")]
_GEMV_EXT = {"i": 40, "j": 36, "k": 34, "b": 3}


@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", _GEMV_SHAPES, ids=lambda s: ",".join(s[:2]) + "->" + s[2])
def test_gemv_routes(dt: Datatype, shape: tuple[str, str, str]) -> None:
    """One-row and one-column GEMMs: alpha, beta C (own layout, or C is D), C full of NaN
    under beta 0, conjugations of either operand and of D, padded and negative strides."""
    labels = dict(zip("ABD", (tuple(x) for x in shape), strict=True))
    cplx = dt.is_complex
    alpha = complex(0.7, -1.3) if cplx else -0.7
    beta = complex(-0.4, 0.9) if cplx else 1.5
    hit = 0
    for seed, (c_mode, bet, ops, layouts) in enumerate([
            ("none", 0.0, "----", {}), ("own", beta, "cc-c", {"C": "perm"}),
            ("d", beta, "c-cc", {"D": "sub"}), ("nan", 0.0, "-c--", {"A": "sub"}),
            ("own", beta, "--c-", {"B": "neg", "D": "sub_mixed"})]):
        inst = build(dt, labels, _GEMV_EXT, layouts, seed=seed, alpha=alpha, beta=bet,
                     ops=ops, c_mode=c_mode)
        hit += "on strided views" in _check_compiled(inst)
    assert hit > 0, shape


# Products above the loop nest's size that no GEMM reads in place: a diagonal, an isolated label
# of A or of B, a broadcast label, the batch label innermost (each GEMM >= GEMM_MIN_MADDS).
_TTGT_SHAPES = [("iik", "kj", "ij"), ("ikx", "kj", "ij"), ("ik", "kjx", "ij"),
                ("ik", "kj", "jbi"), ("ikb", "kjb", "ijb")]
_TTGT_EXT = {"i": 40, "j": 36, "k": 34, "b": 3, "x": 2}  # above LOOP_MAX_MADDS


@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", _TTGT_SHAPES, ids=lambda s: ",".join(s[:2]) + "->" + s[2])
def test_ttgt_routes(dt: Datatype, shape: tuple[str, str, str]) -> None:
    """Packed operands, GEMMs into a scratch, the store into D with the epilogue: permuted and
    padded layouts, beta C (own layout, or C is D), conjugations, op_D."""
    labels = dict(zip("ABD", (tuple(x) for x in shape), strict=True))
    cplx = dt.is_complex
    alpha = complex(0.7, -1.3) if cplx else -0.7
    beta = complex(-0.4, 0.9) if cplx else 1.5
    routes = []
    for seed, (c_mode, bet, ops, layouts) in enumerate([
            ("none", 0.0, "----", {"A": "perm"}), ("own", beta, "cc-c", {"B": "sub", "C": "neg"}),
            ("d", beta, "c-cc", {"D": "sub_mixed"}), ("nan", 0.0, "-c-c", {"A": "sub_neg"})]):
        inst = build(dt, labels, _TTGT_EXT, layouts, seed=seed, alpha=alpha, beta=bet, ops=ops,
                     c_mode=c_mode)
        routes.append(_check_compiled(inst).split(" [")[0])
    assert "compiled: ttgt" in routes, routes


def _variants(dt: Datatype, shape: tuple[str, str, str], extents: dict[Hashable, int],
              variants: list[tuple[str, str, dict[str, str]]]) -> list[str]:
    """Run ``A,B->D`` (``shape``) once per variant (C mode, conjugations, layouts), each
    checked against the oracle, with complex alpha and beta (beta 0 without a C to add);
    return the routes taken."""
    labels = dict(zip("ABD", (tuple(x) for x in shape), strict=True))
    cplx = dt.is_complex
    alpha = complex(0.7, -1.3) if cplx else -0.7
    beta = complex(-0.4, 0.9) if cplx else 1.5
    return [_check_compiled(build(dt, labels, extents, layouts, seed=seed, alpha=alpha,
                                  beta=beta if c_mode in ("own", "d") else 0.0, ops=ops,
                                  c_mode=c_mode))
            for seed, (c_mode, ops, layouts) in enumerate(variants)]


@contextlib.contextmanager
def _lowering(**values: Any) -> Iterator[None]:
    """The lowering's constants (or functions) set to ``values``, its cache cleared around."""
    with pytest.MonkeyPatch.context() as mp:
        for name, value in values.items():
            mp.setattr(lowering, name, value)
        lowering._lower.cache_clear()
        try:
            yield
        finally:
            lowering._lower.cache_clear()


def _thin_blocks(block_bytes: int = 1,
                 store_bytes: int = 1 << 62) -> contextlib.AbstractContextManager[None]:
    """Pack every thin TTGT GEMM's thick operand in blocks (tiny data): of one index, or with
    a large ``block_bytes`` of half the indices (the last block shorter where they are odd);
    with a small ``store_bytes``, each block's part of T stored into D by itself."""
    return _lowering(TTGT_BLOCK_MIN_BYTES=0, PACK_BLOCK_BYTES=block_bytes, THIN_REREAD=0,
                     TTGT_STORE_MAX_BYTES=store_bytes, THIN_BATCH_MIN_BYTES=store_bytes)


# Thin GEMMs (one side at most THIN_MAX) whose thick side is T's rows (A's free labels i, x),
# or its columns (B's j, y); D in either orientation (``D^T = B^T A^T`` where D's fastest
# label is A's); an isolated label of the thick operand summed while packing its blocks;
# batches of them (one batch label, D's fastest; two, not adjacent in D).
_THIN_SHAPES = [("ikx", "kj", "xij"), ("ixk", "kj", "jix"), ("ik", "kyjz", "iyj"),
                ("ik", "kjy", "yji"), ("bixk", "bkj", "xbij"), ("ikbc", "kyjcb", "byjic")]
_THIN_EXT = {"i": 4, "j": 5, "k": 34, "x": 9, "y": 7, "z": 2, "b": 3, "c": 2}


@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", _THIN_SHAPES, ids=lambda s: ",".join(s[:2]) + "->" + s[2])
def test_thin_ttgt_packs_its_thick_operand_in_blocks(dt: Datatype,
                                                     shape: tuple[str, str, str]) -> None:
    """Each block packed (conjugated, summing isolated labels) and multiplied into its rows or
    columns of T, or of D itself without C; each block of T then stored into D with the
    epilogue."""
    for block_bytes, store_bytes in ((1, 1 << 62), (1 << 40, 0), (1, 0)):
        with _thin_blocks(block_bytes, store_bytes):
            routes = _variants(dt, shape, _THIN_EXT, [
                ("none", "----", {}), ("none", "cc--", {"A": "perm", "B": "perm"}),
                ("own", "cc-c", {"B": "sub", "C": "neg"}), ("d", "c-cc", {"D": "sub_mixed"}),
                ("nan", "-c-c", {"A": "sub_neg"})])
        # (a batch of GEMMs is blocked only where each block's T is stored by itself)
        assert any("in blocks of" in r for r in routes) or ("b" in shape[0] and store_bytes), (
            routes)


# batches of thin GEMMs whose labels D's lines run along: a batch label D's fastest (the
# blocks' rows of T, or their columns where A is the thin side), or next to a short run of D;
# or the thick operand's (b its fastest, D's lines along its other labels)
_THIN_BATCH_SHAPES = [("bixk", "bkj", "xijb"), ("bkj", "bixk", "xijb"), ("ikbc", "kyjcb", "yjibc"),
                      ("kbix", "bjk", "ixbj"), ("xikb", "bkj", "bxij")]


@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", _THIN_BATCH_SHAPES,
                         ids=lambda s: ",".join(s[:2]) + "->" + s[2])
def test_thin_batch_runs_inside_each_block(dt: Datatype, shape: tuple[str, str, str]) -> None:
    """Where D's lines, or the thick operand's, run along the batch's labels, each block of
    the thick operand holds every GEMM of the batch (packed one after another, conjugated,
    isolated labels summed), each GEMM into its part of the worker's buffer, the block stored
    into D with the epilogue, or (D lying as T, without C) each GEMM into its part of D itself;
    blocks of one index and of half of them (``_thin_batch``'s doctests: blocks that would
    outgrow BLOCK_LEAN_BYTES, or write D a few numbers per line, so hold one GEMM each)."""
    ext = {"i": 4, "j": 3, "k": 6, "x": 5, "y": 2, "b": 3, "c": 2}
    cases = [("none", "----", {}), ("none", "cc--", {"A": "perm", "B": "perm"}),
             ("own", "cc-c", {"B": "sub", "C": "neg"}), ("d", "c-cc", {"D": "sub_mixed"}),
             ("nan", "-c-c", {"A": "sub_neg"})]
    for block_bytes in (1, 1 << 40):
        with _thin_blocks(block_bytes, store_bytes=0), _lowering(GEMM_MIN_MADDS=1):
            routes = _variants(dt, shape, ext, cases)
        assert any("in blocks of" in r and "the whole batch's" in r for r in routes), routes


@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
def test_thin_batch_blocks_are_cut_to_a_quarter_of_the_lean_bound(dt: Datatype) -> None:
    """Blocks of every GEMM that THIN_REREAD would make larger than BLOCK_LEAN_BYTES hold a
    quarter of it (here one index of the blocked label, 16 blocks), still run correctly."""
    ext = {"x": 16, "i": 4, "k": 6, "b": 3, "j": 3}
    per = 4 * 6 * 3 * dt.itemsize  # one index of x: i, k of each of the 3 GEMMs
    cases = [("none", "----", {}), ("own", "cc-c", {"B": "sub", "C": "neg"}),
             ("d", "c-cc", {"D": "sub_mixed"})]
    with _thin_blocks(1, store_bytes=0), _lowering(GEMM_MIN_MADDS=1, THIN_REREAD=1 << 30,
                                                   BLOCK_LEAN_BYTES=8 * per - 1):
        routes = _variants(dt, ("xikb", "bkj", "bxij"), ext, cases)
    assert all(f"in blocks of {lowering._bytes(per)}" in r for r in routes), routes


# thin GEMMs whose thick operand's outermost free label x is the one D's lines run along
# (D's fastest, or next to a run of 2 of j): the blocks are cut along y instead, so each
# writes D's lines whole; rows of T (A thick, D not swapped), its columns (B thick, or A
# under D^T = B^T A^T), one GEMM of a batch per block; k between x and y: packed
_THIN_PICK_SHAPES = [("xky", "kj", "yxj"), ("xky", "kj", "jyx"), ("ik", "xky", "iyx"),
                     ("bxky", "bkj", "byxj")]
_THIN_PICK_EXT = {"x": 17, "y": 5, "k": 6, "i": 4, "j": 2, "b": 3}


def _blocked_unit(dt: Datatype, shape: tuple[str, str, str]) -> int:
    """Rows (columns) of T per index of the label the lowering of ``shape`` (contiguous
    operands, C its own) packs its thick operand in blocks of; 0 where it packs no blocks."""
    def operand(labels: str) -> tuple[Datatype, tuple[int, ...], tuple[int, ...], str, int]:
        extents = tuple(_THIN_PICK_EXT[x] for x in labels)
        strides = tuple(int(np.prod(extents[i + 1:])) for i in range(len(extents)))
        return (dt, extents, strides, labels, 0)

    low = lowering.lower(build_spec(a=operand(shape[0]), b=operand(shape[1]),
                                    c=operand(shape[2]), d=operand(shape[2]),
                                    prec=Prectype.DEFAULT))
    assert low is not None and low.pack is not None, low
    return low.pack.block_unit if low.pack.blocked >= 0 else 0


@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", _THIN_PICK_SHAPES, ids=lambda s: ",".join(s[:2]) + "->" + s[2])
def test_thin_blocks_are_cut_along_a_label_d_lines_do_not_run_along(
        dt: Datatype, shape: tuple[str, str, str]) -> None:
    """Blocks of x would write D a number per line: they are cut along y (17 rows or columns
    of T per index, x's), each block's part of T stored into D with the epilogue, D right
    under every variant; not where T is stored whole (only the pack's reads count there), nor
    where blocks of y would read the thick operand in runs below TILE_SOURCE_RUN (5 per
    index of x: y's)."""
    cases = [("none", "----", {}), ("none", "cc--", {"A": "perm", "B": "perm"}),
             ("own", "cc-c", {"B": "sub", "C": "neg"}), ("d", "c-cc", {"D": "sub_mixed"}),
             ("nan", "-c-c", {"A": "sub_neg"})]
    with _thin_blocks(1, store_bytes=0), _lowering(GEMM_MIN_MADDS=1, TILE_SOURCE_RUN=1):
        assert _blocked_unit(dt, shape) == _THIN_PICK_EXT["x"]
        routes = _variants(dt, shape, _THIN_PICK_EXT, cases)
    assert any("in blocks of" in r and "stored into D" in r for r in routes), routes
    with _thin_blocks(1, store_bytes=0), _lowering(GEMM_MIN_MADDS=1):
        assert _blocked_unit(dt, shape) == _THIN_PICK_EXT["y"]
    if "b" not in shape[0]:  # (a batch's blocks are stored by themselves or not blocked)
        with _thin_blocks(1), _lowering(GEMM_MIN_MADDS=1, TILE_SOURCE_RUN=1):
            assert _blocked_unit(dt, shape) == _THIN_PICK_EXT["y"]


@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
def test_gemvs_on_views_across_lines_give_way_to_one_gemv_where_the_matrix_lies(
        dt: Datatype) -> None:
    """``fusp,pus->f``: its GEMVs on views are dots whose terms lie 8 apart (p, A's fastest),
    but A lies as one matrix (f outside u, s, p): B packed as A holds u, s, p, one GEMV reads A
    in place; D right under each variant, the conjugated ones too (complex A conjugated by
    itself cannot lie in place: it streams)."""
    ext = {"f": 6, "u": 32, "s": 32, "p": 8}
    cases = [("none", "----", {}), ("own", "----", {"C": "neg"}),
             ("d", "--c-", {"D": "sub_mixed"}), ("nan", "cc--", {}), ("own", "-c-c", {})]
    routes = _variants(dt, ("fusp", "pus", "f"), ext, cases)
    assert all(r.startswith("compiled: ttgt") and "(packs B;" in r for r in routes[:3]), routes


@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
def test_gemvs_on_views_that_stream_give_way_to_one_gemv_unless_its_columns_are_short(
        dt: Datatype) -> None:
    """``iabj,jb->ia``: GEMVs on views looped over b read A in runs of j (they stream), but A
    lies as one matrix of rows (i, a) over (b, j): B packed, one GEMV reads A along its summed
    labels; D right under each variant. ``ohpb,pho->b`` has one too, reading A in runs of its
    12 outputs (b innermost): it stays off that GEMV unless the bound is lifted."""
    ext = {"i": 8, "a": 16, "b": 32, "j": 12}
    cases = [("none", "----", {}), ("own", "----", {"C": "neg"}),
             ("d", "--c-", {"D": "sub_mixed"})]
    low = _contiguous_lowering(dt, ("iabj", "jb", "ia"), ext)
    assert low is not None and low.kind is lowering.Step.TTGT, low
    routes = _variants(dt, ("iabj", "jb", "ia"), ext, cases)  # (D mixed: other routes)
    assert all(r.startswith("compiled: ttgt") and "(packs B;" in r for r in routes[:2]), routes
    short = ("ohpb", "pho", "b")
    ext = {"o": 8, "h": 4, "p": 128, "b": 12}
    low = _contiguous_lowering(dt, short, ext)
    assert low is None or low.kind is not lowering.Step.TTGT, low
    with _lowering(GEMV_COLUMN_MIN_BYTES=0):
        low = _contiguous_lowering(dt, short, ext)
        assert low is not None and low.kind is lowering.Step.TTGT, low
    _variants(dt, short, ext, cases)


@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
def test_ttgt_reads_an_operand_in_place_gemm_by_gemm(dt: Datatype) -> None:
    """``mbij,jbin->bmn``: A holds each GEMM's matrix (m x ij) with b between its rows and
    columns (rows b*i*j apart, GEMMs i*j apart), as BLAS reads it: only B is packed (its i, j
    do not run as A's), where A was packed too; D right under each variant: C, D laid out
    otherwise, A's rows padded (sub) or reversed (sub_neg: packed then), conjugations."""
    shape, ext = ("mbij", "jbin", "bmn"), {"m": 30, "b": 5, "i": 4, "j": 3, "n": 7}
    low = _contiguous_lowering(dt, shape, ext)
    assert low is not None and low.pack is not None and low.pack.strided, low
    assert low.pack.bytes_a == 0 and low.pack.bytes_b > 0, low.pack
    with _lowering(IN_PLACE_ANY=False):
        old = _contiguous_lowering(dt, shape, ext)
        assert old is not None and old.pack is not None and old.pack.bytes_a > 0, old
    cases = [("none", "----", {}), ("own", "----", {"C": "neg"}), ("d", "--c-", {"D": "sub_mixed"}),
             ("own", "----", {"A": "sub"}), ("nan", "c---", {"A": "sub_neg"}),
             ("none", "-c-c", {"B": "perm"})]
    routes = _variants(dt, shape, ext, cases)  # (B permuted: GEMMs on views where it lies so)
    assert all(r.startswith("compiled: ttgt") for r in routes[:5]), routes
    assert "packs B;" in routes[0] and "packs B;" in routes[3], routes


def _contiguous_lowering(dt: Datatype, shape: tuple[str, str, str],
                         ext: dict[str, int]) -> lowering.Lowered | None:
    """The lowering of ``shape`` over contiguous operands of ``ext``, C its own."""
    def operand(labels: str) -> tuple[Datatype, tuple[int, ...], tuple[int, ...], str, int]:
        extents = tuple(ext[x] for x in labels)
        strides = tuple(int(np.prod(extents[i + 1:])) for i in range(len(extents)))
        return (dt, extents, strides, labels, 0)

    return lowering.lower(build_spec(a=operand(shape[0]), b=operand(shape[1]),
                                     c=operand(shape[2]), d=operand(shape[2]),
                                     prec=Prectype.DEFAULT))


def test_thousands_of_tiny_gemvs_give_way_to_blocks_that_read_short_runs() -> None:
    """``mhjq,jhct->jtmqc`` (F64, 820 MFlop) maps to 158760 GEMVs of 47 x 55 on views; TTGT
    packs A in blocks whose lead label j reads runs of 376 bytes, priced at TILE_SOURCE_RUN /
    376 times a copy's time, still far below the calls: TTGT. ``abt,tnjb->ajbn`` (C64), whose
    blocks would read runs of 8 bytes (one number), keeps its GEMVs on views."""
    ext = {"j": 9, "q": 47, "m": 42, "c": 35, "t": 12, "h": 55}
    low = _contiguous_lowering(Datatype.F64, ("mhjq", "jhct", "jtmqc"), ext)
    assert low is not None and low.kind is lowering.Step.TTGT and low.pack is not None, low
    runs = [abs(lead[1]) for lead in low.pack.block_lead]
    assert runs and min(runs) < lowering.TILE_SOURCE_RUN, low.pack
    ext = {"b": 24, "a": 24, "j": 93, "n": 122, "t": 56}
    low = _contiguous_lowering(Datatype.C32, ("abt", "tnjb", "ajbn"), ext)
    assert low is not None and "gemms on strided views" in low.description, low.description


@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
def test_blocks_whose_lead_reads_short_runs_match_numpy(dt: Datatype) -> None:
    """The TTGT of the test above at a small size (boxes made small): D right under each
    variant, the blocks' lead label reading A in runs of 12 numbers."""
    ext = {"j": 3, "q": 12, "m": 10, "c": 9, "t": 4, "h": 14}
    cases = [("none", "----", {}), ("own", "----", {"C": "neg"}), ("d", "--c-", {}),
             ("own", "cc--", {}), ("nan", "-c-c", {})]
    with _lowering(VIEWS_TO_TTGT_MAX_FLOPS=0, TILE_FROM_BYTES=0, TILE_T_BYTES=4096,
                   TILE_MIN_ROWS=2):
        low = _contiguous_lowering(dt, ("mhjq", "jhct", "jtmqc"), ext)
        assert low is not None and low.pack is not None and low.pack.block_lead, low
        routes = _variants(dt, ("mhjq", "jhct", "jtmqc"), ext, cases)
    assert all("in blocks of" in r for r in routes[:3]), routes


@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
def test_a_gemm_writing_d_runs_in_slabs_of_its_rows(dt: Datatype) -> None:
    """``fcr,fuy->uyrc``: T (512 x 400) lies as D; as 32 GEMMs of 16 of its rows, each slab of
    D set from C (lying as D, conjugated or not) just before its GEMM adds into it, or written
    by it without C; where C lies otherwise, or D does not lie as T, no slabs; D right under
    every variant."""
    ext = {"f": 12, "c": 16, "r": 25, "u": 32, "y": 16}
    cases = [("none", "----", {}), ("own", "----", {}), ("own", "--c-", {}),
             ("own", "cc--", {"B": "perm"}), ("own", "----", {"C": "neg"}),
             ("d", "----", {"D": "sub_mixed"})]
    with _lowering(SLAB_FROM_BYTES=0, SLAB_BYTES=16 * 400 * dt.itemsize):
        routes = _variants(dt, ("fcr", "fuy", "uyrc"), ext, cases)
    slabs = ["[h=32, m=16, n=400, k=12]" in r and "slabs of its rows" in r for r in routes]
    assert slabs[:3] == [True] * 3 and slabs[4:] == [False] * 2, routes


def test_thin_blocks_count_one_workers_scratch_not_the_thick_operand() -> None:
    """A thin product whose thick operand alone exceeds TTGT_MAX_BYTES lowers when its blocks
    are at most BLOCK_LEAN_BYTES (it is never packed whole), not when they are larger; each
    block's part of T is then stored by itself where T would reach TTGT_STORE_MAX_BYTES."""
    f64 = Datatype.F64
    ext = {"i": 64, "x": 32, "k": 40, "j": 6, "y": 2}  # (y: summed while packing)

    def operand(labels: str) -> tuple[Datatype, tuple[int, ...], tuple[int, ...], str, int]:
        shape = tuple(ext[x] for x in labels)
        strides = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
        return (f64, shape, strides, labels, 0)

    spec = build_spec(a=operand("ixky"), b=operand("kj"), c=operand("ixj"), d=operand("ixj"),
                      prec=Prectype.DEFAULT)
    thick = 64 * 32 * 40 * 8  # packed
    common = {"TTGT_BLOCK_MIN_BYTES": 0, "PACK_BLOCK_BYTES": 1, "THIN_REREAD": 0,
              "TTGT_MAX_BYTES": thick // 2}
    with _lowering(**common, BLOCK_LEAN_BYTES=1 << 30, TTGT_STORE_MAX_BYTES=0):
        lean = lowering.lower(spec)
    with _lowering(**common, BLOCK_LEAN_BYTES=1):
        whole = lowering.lower(spec)
    assert lean is not None and lean.pack is not None, lean
    assert lean.pack.blocked == 0 and lean.pack.block_store >= 0, lean.pack
    assert lean.pack.scratch_bytes(1) < thick // 2 < lean.pack.bytes_a
    assert whole is None


@_settings
@given(inst=compiled_products(gemm=True))
def test_gemm_sized_products_with_thin_blocks(inst: Instance) -> None:
    """The Hypothesis products again, every thin TTGT GEMM packing its thick side in blocks,
    each block's part of T stored into D by itself."""
    with _thin_blocks(store_bytes=0):
        _check_compiled(inst)


@_settings
@given(inst=compiled_products(gemm=True), t_bytes=st.sampled_from([1, 64, 1024]))
def test_gemm_sized_products_in_boxes(inst: Instance, t_bytes: int) -> None:
    """The Hypothesis products again, every TTGT GEMM's T computed in boxes stored into D one
    by one (a batch inside each box where its labels leave too few boxes)."""
    with _tiles(t_bytes), _lowering(TILE_GEMM_ROWS=1, GEMM_MIN_MADDS=1):
        _check_compiled(inst)


def _tiles(t_bytes: int) -> contextlib.AbstractContextManager[None]:
    """Compute every TTGT GEMM's T in boxes of rows or columns stored into D one by one (tiny
    data: boxes of about ``t_bytes``, at least one row; lead labels of any stride)."""
    return _lowering(TTGT_STORE_MAX_BYTES=0, TILE_FROM_BYTES=0, TILE_T_BYTES=t_bytes,
                     TILE_MIN_ROWS=1, TILE_LINE=0, TILE_SOURCE_RUN=0, TTGT_BLOCK_MIN_BYTES=1 << 62)


# GEMMs of any shape whose T is computed in boxes: its rows (A's u, l, d; D interleaves them
# with B's), its columns where it has more of them (B's U, L, D), rows of B's labels where D
# runs along A's (D^T = B^T A^T), a batch label (one index per box), an isolated label of the
# boxed operand summed while packing each box, and a box of the last label only.
_TILE_SHAPES = [("puld", "pULD", "uUlLdD"), ("pu", "pULD", "LuUD"), ("ulp", "pUL", "lULu"),
                ("bulp", "pUbL", "LubU"), ("ulxp", "pU", "uUl"), ("up", "pUL", "LuU")]
_TILE_EXT = {"p": 6, "u": 7, "l": 4, "d": 3, "U": 4, "L": 5, "D": 2, "b": 2, "x": 3}


@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", _TILE_SHAPES, ids=lambda s: ",".join(s[:2]) + "->" + s[2])
def test_ttgt_computes_t_in_boxes_stored_one_by_one(dt: Datatype,
                                                    shape: tuple[str, str, str]) -> None:
    """Each box packed (conjugated, summing isolated labels), multiplied into a worker's buffer
    and stored into D with the epilogue; boxes of one row (lead labels above the last one) and
    of a few rows (a range of a label, the last range shorter)."""
    for t_bytes in (1, 7 * 16 * 3):
        with _tiles(t_bytes):
            routes = _variants(dt, shape, _TILE_EXT, [
                ("none", "----", {}), ("none", "cc--", {"A": "perm", "B": "perm"}),
                ("own", "cc-c", {"B": "sub", "C": "neg"}), ("d", "c-cc", {"D": "sub_mixed"}),
                ("nan", "-c-c", {"A": "sub_neg"})])
        assert any("each block's gemm into a buffer" in r for r in routes), routes


# batches whose label D runs along (its fastest, or next to the boxed label) and whose GEMMs
# therefore run inside each box, the whole batch's rows of T stored together
_BATCH_BOX_SHAPES = [("bulp", "pUb", "lUub"), ("bulp", "bpU", "Uulb"), ("bxup", "pbU", "Uub"),
                     ("bcup", "pUcb", "Uucb")]


@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", _BATCH_BOX_SHAPES,
                         ids=lambda s: ",".join(s[:2]) + "->" + s[2])
def test_ttgt_runs_a_batch_inside_each_box(dt: Datatype, shape: tuple[str, str, str]) -> None:
    """Where the batch's labels cannot be a box's lead labels (D's lines run along them), each
    box holds every GEMM of the batch: their blocks packed one after another (conjugated,
    isolated labels summed), each GEMM into its part of the buffer, the box stored into D with
    the epilogue; boxes of one index and of a few (the last range shorter)."""
    ext = {"p": 6, "u": 7, "l": 4, "U": 5, "b": 3, "c": 2, "x": 3}
    item = dt.itemsize
    for t_bytes in (1, 3 * 5 * 3 * item):
        with _lowering(TTGT_STORE_MAX_BYTES=0, TILE_FROM_BYTES=0, TILE_T_BYTES=t_bytes,
                       TILE_MIN_ROWS=1, TILE_LINE=2 * item + 1, TILE_SOURCE_RUN=0,
                       TILE_BATCH_BYTES=1 << 20, TILE_GEMM_ROWS=1, GEMM_MIN_MADDS=1):
            routes = _variants(dt, shape, ext, [
                ("none", "----", {}), ("none", "cc--", {"A": "perm", "B": "perm"}),
                ("own", "cc-c", {"B": "sub", "C": "neg"}), ("d", "c-cc", {"D": "sub_mixed"}),
                ("nan", "-c-c", {"A": "sub_neg"})])
        assert any("the whole batch's" in r for r in routes), routes


@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
def test_ttgt_shares_a_batch_out_and_sets_d_from_c_block_by_block(dt: Datatype) -> None:
    """A TTGT batch of 4 MFlop or more runs its GEMMs shared out over the workers; where D
    lies as T and as C, each GEMM's block of D is set from C just before its GEMM adds into
    it (no temporary): with C as its own array, as D itself, conjugated, and without C."""
    ext = {"d": 64, "o": 16, "m": 64, "n": 40}
    routes = _variants(dt, ("dom", "nod", "dnm"), ext, [
        ("none", "----", {}), ("own", "cc--", {}), ("own", "--c-", {}), ("d", "----", {}),
        ("own", "c---", {"C": "neg"})])
    assert all("ttgt [h=64" in r for r in routes), routes


@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
@pytest.mark.parametrize("run", [5, 19])
@pytest.mark.parametrize("shape", [("ikxt", "kj", "jxi"), ("kxit", "jk", "ijx"),
                                   ("ikxts", "kj", "xji")],
                         ids=lambda s: ",".join(s[:2]) + "->" + s[2])
def test_packs_sum_isolated_labels_innermost_in_the_source(dt: Datatype, run: int,
                                                           shape: tuple[str, str, str]) -> None:
    """A's isolated labels are its fastest: the pack sums the innermost one as a plain loop
    (where it is the only one, the kept label under it one too: runs of 5 in four partial
    sums, of 19 in eight) and the others by its odometer (one or two isolated labels),
    conjugated or not, A strided and reversed, C its own, D itself, or none."""
    ext = {"i": 9, "k": 6, "x": 7, "t": run, "s": 3, "j": 8}
    routes = _variants(dt, shape, ext, [
        ("none", "----", {}), ("own", "c---", {}), ("own", "cc-c", {"C": "neg"}),
        ("d", "c---", {"A": "sub"}), ("none", "----", {"A": "sub_neg"})])
    assert any("ttgt" in r and "packs A" in r for r in routes), routes


@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
def test_a_pack_summing_more_than_it_writes_is_shared_over_the_workers(dt: Datatype) -> None:
    """``cix,xz->zc`` summing i: the pack reads 1-2 MB into 8-16 KB, so it is shared out over
    the pool by what it reads (each worker its rows of c); conjugated or not, A reversed."""
    ext = {"c": 40, "i": 220, "x": 26, "z": 24}
    routes = _variants(dt, ("cix", "xz", "zc"), ext, [
        ("none", "----", {}), ("own", "c---", {"A": "sub_neg"})])
    assert all("ttgt" in r and "packs A" in r for r in routes), routes


@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
@pytest.mark.parametrize("run", [13, 220])
def test_a_shared_pack_sums_its_innermost_isolated_label_by_rows(dt: Datatype,
                                                                 run: int) -> None:
    """``cxi,xz->zc`` summing i, A's fastest: the pack, shared out over the pool (each worker
    its part, at the destination's strides), sums each element's run of i in partial sums,
    x a plain loop; conjugated or not, A reversed, C its own."""
    ext = {"c": 40, "i": run, "x": 26, "z": 24}
    routes = _variants(dt, ("cxi", "xz", "zc"), ext, [
        ("none", "----", {}), ("own", "c---", {"A": "sub_neg"}), ("own", "-c-c", {})])
    assert all("ttgt" in r and "packs A" in r for r in routes), routes


@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
@pytest.mark.parametrize("terms", [37, 9])
def test_a_pack_sums_short_rows_of_many_terms_four_rows_at_a_time(dt: Datatype,
                                                                  terms: int) -> None:
    """``xkjo,oy->xy`` summing k and j (A's isolated labels) while packing A by rows of o (6
    numbers, contiguous): with 37 terms of j under each row, four rows of terms go into four
    sums at a time (real types), the odometer stepping k; with 9, one row at a time. D right
    with C its own, conjugated, A reversed, and without C."""
    ext = {"x": 40, "k": 3, "j": terms, "o": 6, "y": 24}
    routes = _variants(dt, ("xkjo", "oy", "xy"), ext, [
        ("none", "----", {}), ("own", "c---", {"A": "sub_neg"}), ("own", "-c-c", {})])
    assert all("ttgt" in r and "packs A" in r for r in routes), routes


def test_transpositions_across_more_pages_than_the_tlb_run_in_blocks() -> None:
    """A 6000^2 F64 transposition (a page per element of B's row) runs in blocks of B packed in
    D's order; a 1000^2 one, whose lines and pages stay cached, as a plain nest."""
    f64 = Datatype.F64

    def lowered(n: int) -> Any:
        def operand(labels: str) -> tuple[Datatype, tuple[int, ...], tuple[int, ...], str, int]:
            return (f64, (n, n), (n, 1), labels, 0)

        lowering._lower.cache_clear()
        return lowering.lower(build_spec(a=operand("ab"), b=operand("ba"), c=operand("ab"),
                                         d=operand("ab"), prec=Prectype.DEFAULT))

    big, small = lowered(6000), lowered(1000)
    assert big is not None and big.planes[0] == 2, big
    assert small is not None and small.planes == (0, ()), small


def test_large_t_is_never_whole() -> None:
    """A product whose T would be as large as its D (134 MB here) and not lie as D computes T
    in boxes: what one run allocates is a small fraction of D."""
    f64 = Datatype.F64
    ext = dict.fromkeys("uldrULDR", 8) | {"p": 2}

    def operand(labels: str) -> tuple[Datatype, tuple[int, ...], tuple[int, ...], str, int]:
        shape = tuple(ext[x] for x in labels)
        strides = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
        return (f64, shape, strides, labels, 0)

    spec = build_spec(a=operand("puldr"), b=operand("pULDR"), c=operand("uUlLdDrR"),
                      d=operand("uUlLdDrR"), prec=Prectype.DEFAULT)
    lowering._lower.cache_clear()
    low = lowering.lower(spec)
    assert low is not None and low.pack is not None, low
    assert low.pack.block_store >= 0 and low.pack.block_lead, low.pack
    d_bytes = 8 ** 8 * 8
    assert low.pack.scratch_bytes(8) < d_bytes // 8, low.pack  # eight workers


# TTGT packs that sum an operand's own label (x, y) by rows, the source running along a kept
# label faster than along the summed one (x between i and k, outermost, between k and i; two of
# B's, one of them its fastest: summed element by element), packs that copy in another order
# than the destination's (a batch label between free and contracted ones), and D whose fastest
# label is a batch label (the GEMMs then follow D's fastest free label: D^T = B^T A^T here).
_PACK_SHAPES = [("ixk", "kj", "ij"), ("xik", "kj", "ji"), ("kxi", "kj", "ij"),
                ("ik", "kxjy", "ij"), ("ibk", "kbj", "ijb"), ("bhyno", "fbrh", "rfoyb")]
_PACK_EXT = {"i": 24, "j": 20, "k": 18, "x": 5, "y": 3, "b": 4, "h": 6, "n": 3, "o": 9, "f": 4,
             "r": 5}


@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", _PACK_SHAPES, ids=lambda s: ",".join(s[:2]) + "->" + s[2])
def test_ttgt_packs_sum_by_rows_and_copy_in_blocks(dt: Datatype,
                                                   shape: tuple[str, str, str]) -> None:
    """Each pack (conjugated, summing, permuting; from permuted, padded and negative layouts)
    and the store with the epilogue, against the oracle."""
    routes = _variants(dt, shape, _PACK_EXT, [
        ("none", "----", {}), ("none", "cc--", {"A": "perm", "B": "perm"}),
        ("own", "cc-c", {"B": "sub", "C": "neg"}), ("d", "c-cc", {"D": "sub_mixed"}),
        ("nan", "-c-c", {"A": "sub_neg"})])
    assert all(r.startswith("compiled: ttgt") for r in routes), routes
    if shape[2] == "rfoyb":
        assert "D^T = B^T A^T" in routes[0], routes


def _planes(block_bytes: int = 96) -> contextlib.AbstractContextManager[None]:
    """Run every elementwise nest whose A or B runs along another label than D block by block
    (tiny data: blocks of ``block_bytes``, labels of any extent and stride)."""
    return _lowering(PLANE_MIN_BYTES=0, PLANE_LINE=0, PLANE_MIN_EXTENT=1,
                     PLANE_BLOCK_BYTES=block_bytes, _l2_bytes=lambda: -1)


# Elementwise products whose B (or A, or both) runs along another label than D: reversed, the
# fastest label of B D's second, a broadcast label (B lacks one of D's), two labels.
_PLANE_SHAPES = [("abcd", "dcba", "abcd"), ("dcba", "abcd", "abcd"), ("dcba", "dcba", "abcd"),
                 ("abcd", "acdb", "abcd"), ("abc", "cb", "abc"), ("ab", "ba", "ab")]
_PLANE_EXT = {"a": 9, "b": 11, "c": 5, "d": 7}


@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", _PLANE_SHAPES, ids=lambda s: ",".join(s[:2]) + "->" + s[2])
def test_elementwise_products_in_blocks(dt: Datatype, shape: tuple[str, str, str]) -> None:
    """Each block of the transposed operand(s) packed in D's order, then multiplied (conjugated,
    with C apart, C = D or none) into its part of D; blocks cut every label."""
    with _planes():
        routes = _variants(dt, shape, _PLANE_EXT, [
            ("none", "----", {}), ("own", "cc-c", {"B": "neg", "C": "perm"}),
            ("d", "c-cc", {"A": "sub", "D": "sub_mixed"}), ("nan", "-c-c", {"B": "sub_neg"}),
            ("own", "----", {"A": "perm"})])
    assert "packed in D's order" in routes[0], routes


@pytest.mark.parametrize("dt", [Datatype.F32, Datatype.C64], ids=lambda d: d.name)
def test_elementwise_blocks_shared_over_threads(dt: Datatype) -> None:
    """A product large enough to share out (each worker's blocks from its part of the first
    label), in blocks of the usual size (the tiled copy packs them) and of a few elements."""
    labels = {"A": tuple("abcd"), "B": tuple("dcba"), "D": tuple("abcd")}
    for block in (lowering.PLANE_BLOCK_BYTES, 200):
        with _planes(block):
            inst = build(dt, labels, dict.fromkeys("abcd", 17), {}, seed=block,
                         alpha=2.0, beta=-1.0, c_mode="own")
            assert "packed in D's order" in _check_compiled(inst)


@_settings
@given(inst=compiled_products(gemm=False, elementwise=True))
def test_loop_nest_products_in_blocks(inst: Instance) -> None:
    """Elementwise Hypothesis products, every nest that qualifies run in blocks."""
    with _planes():
        _check_compiled(inst)


def test_both_routes_are_hit() -> None:
    """The loop nest below GEMM_MIN_MADDS, one GEMM above, batched GEMMs with a batch label."""
    labels = {"A": ("i", "k"), "B": ("k", "j"), "D": ("i", "j")}
    small = _check_compiled(build(Datatype.F64, labels, {"i": 3, "j": 4, "k": 5}, {}))
    assert small.startswith("compiled: loop nest")
    big = _check_compiled(build(Datatype.F64, labels, {"i": 12, "j": 9, "k": 10}, {}))
    assert big.startswith("compiled: 1 gemm")
    batch = {"A": ("b", "i", "k"), "B": ("b", "k", "j"), "D": ("b", "i", "j")}
    many = _check_compiled(build(Datatype.C32, batch, {**_EXT, "b": 4}, {}))
    assert many.startswith("compiled: 4 gemms"), many


# ------------------------------------------------------------------------------ 3. fallbacks
def _plain(dt: Any = np.float64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    a = rng.integers(-3, 4, (4, 5)).astype(dt)
    b = rng.integers(-3, 4, (5, 3)).astype(dt)
    return a, b, np.einsum("ik,kj->ij", a.astype(np.complex128), b.astype(np.complex128))


def _matmul_plan(a: np.ndarray, b: np.ndarray, d: np.ndarray,
                 c: np.ndarray | None = None) -> TensorProduct:
    info = TensorInfo.from_array
    return TensorProduct(Handle("blas"), info(a), "ik", info(b), "kj",
                         None if c is None else info(c), None if c is None else "ij",
                         info(d), "ij")


def _both(monkeypatch: pytest.MonkeyPatch, make: Callable[[], TensorProduct]) -> tuple[
        TensorProduct, TensorProduct]:
    """The same plan with the executor, and created with PYTAPP_COMPILED=0."""
    with_exec = make()
    assert with_exec.algorithm.startswith(COMPILED)
    monkeypatch.setenv("PYTAPP_COMPILED", "0")
    without = make()
    monkeypatch.delenv("PYTAPP_COMPILED")
    assert not without.algorithm.startswith(COMPILED)
    return with_exec, without


def _values(d: Any) -> np.ndarray:
    """A copy of D's values (a NumPy array or a CPU torch tensor)."""
    return np.array(d.numpy() if hasattr(d, "numpy") else d, copy=True)


def _same_outcome(plans: tuple[TensorProduct, TensorProduct],
                  args: Callable[[], tuple[Any, ...]], *, compiled: bool,
                  expect: np.ndarray | None = None, code: int | None = None) -> None:
    """Run both plans on fresh operands from ``args``; same result or same error, D untouched
    on error; whether the first ran compiled."""
    results = []
    for k, plan in enumerate(plans):
        alpha, a, b, beta, c, d = args()
        before = _values(d)
        if code is not None:
            with pytest.raises(pytapp.TappError) as err:
                plan.execute(alpha, a, b, beta, c, d)
            assert err.value.code == code, err.value
            assert np.array_equal(_values(d), before, equal_nan=True)
            continue
        status = plan.execute(alpha, a, b, beta, c, d)
        if k == 0:
            assert status.algorithm.startswith(COMPILED) == compiled, status.algorithm
        results.append(_values(d))
    if code is None:
        assert np.array_equal(results[0], results[1])
        if expect is not None:
            np.testing.assert_allclose(results[0], expect, rtol=1e-12, atol=1e-12)


def test_misaligned_operands_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, ref = _plain()
    plans = _both(monkeypatch, lambda: _matmul_plan(a, b, np.zeros((4, 3))))

    def args() -> tuple[Any, ...]:
        raw = np.zeros(a.nbytes + 1, dtype=np.uint8)
        odd = raw[1:].view(np.float64).reshape(a.shape)  # an odd address: not aligned
        odd[...] = a
        assert not odd.flags.aligned
        return 1.0, odd, b, 0.0, None, np.zeros((4, 3))

    _same_outcome(plans, args, compiled=False, expect=ref.real)


def test_layouts_other_than_the_descriptor_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flat 1-d storage of the descriptor's layout; a view of a transposed array (same shape,
    other strides); an as_strided view (no allocation bounds it): the Python plan."""
    a, b, ref = _plain()
    plans = _both(monkeypatch, lambda: _matmul_plan(a, b, np.zeros((4, 3))))
    _same_outcome(plans, lambda: (1.0, a.reshape(-1).copy(), b, 0.0, None, np.zeros((4, 3))),
                  compiled=False, expect=ref.real)
    _same_outcome(plans, lambda: (1.0, a, b, 0.0, None, np.zeros(12)), compiled=False,
                  expect=ref.real.reshape(-1))
    _same_outcome(plans, lambda: (1.0, a, np.asfortranarray(b), 0.0, None, np.zeros((4, 3))),
                  compiled=False)
    strided = np.lib.stride_tricks.as_strided(a, a.shape, a.strides)
    _same_outcome(plans, lambda: (1.0, strided, b, 0.0, None, np.zeros((4, 3))),
                  compiled=False, expect=ref.real)
    _same_outcome(plans, lambda: (2, a, b, np.float64(0.0), None, np.zeros((4, 3))),
                  compiled=True, expect=2 * ref.real)


def test_foreign_memory_inputs_run_compiled_and_d_falls_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Inputs in memory NumPy did not allocate (a bytearray's buffer, as numba's arrays are
    its runtime's) run compiled; a D there, or an input that is D's memory seen through
    as_strided, does not."""
    a, b, ref = _plain()
    plans = _both(monkeypatch, lambda: _matmul_plan(a, b, np.zeros((4, 3))))

    def foreign(x: np.ndarray) -> np.ndarray:
        view = np.frombuffer(bytearray(x.tobytes()), dtype=x.dtype).reshape(x.shape)
        root: Any = view
        while isinstance(root, np.ndarray) and root.base is not None:
            root = root.base
        assert not isinstance(root, np.ndarray)  # a memoryview of the bytearray
        return view

    _same_outcome(plans, lambda: (1.0, foreign(a), foreign(b), 0.0, None, np.zeros((4, 3))),
                  compiled=True, expect=ref.real)
    _same_outcome(plans, lambda: (1.0, a, b, 0.0, None, foreign(np.zeros((4, 3)))),
                  compiled=False, expect=ref.real)
    # A reads D's own memory through as_strided (A[i, k] = D.flat[2 i + k]): the overlap is
    # seen, and the Python plan computes from a copy of A
    d = np.zeros((4, 3))
    alias = np.lib.stride_tricks.as_strided(d, (4, 5), (16, 8))
    d[...] = np.arange(12.0).reshape(4, 3)
    before = alias.copy()
    plan = _matmul_plan(alias, b, d)
    assert plan.algorithm.startswith(COMPILED)
    status = plan.execute(1.0, alias, b, 0.0, None, d)
    assert not status.algorithm.startswith(COMPILED)
    np.testing.assert_array_equal(d, np.einsum("ik,kj->ij", before, b))


def _numba_ones(shape: tuple[int, ...]) -> np.ndarray:
    """An array numba's runtime allocated (its base a MemInfo, not an ndarray)."""
    import numba

    @numba.njit(cache=False)
    def ones(n: int) -> np.ndarray:
        return np.ones(n)

    return ones(int(np.prod(shape))).reshape(shape)


def _in_buffer(owner: Any, x: np.ndarray, offset: int = 0) -> np.ndarray:
    """``x``'s values in ``owner``'s memory, from ``offset`` bytes on."""
    view = np.frombuffer(owner, dtype=x.dtype, count=x.size, offset=offset).reshape(x.shape)
    if view.flags.writeable:
        view[...] = x
    return view


def _foreign_memory(kind: str, x: np.ndarray, keep: list[Any]) -> np.ndarray:
    """``x``'s values in memory of ``kind``; ``keep`` holds what must outlive the array."""
    n = x.nbytes
    if kind == "bytearray at an offset":
        return _in_buffer(bytearray(n + 16), x, 8)
    if kind == "a view into a bytearray's array":
        flat = _in_buffer(bytearray(n + 16), np.zeros(x.size + 2, x.dtype))
        view = flat[1:-1].reshape(x.shape)
        view[...] = x
        return view
    if kind == "bytes":
        return _in_buffer(x.tobytes(), x)
    if kind == "memoryview slice":
        return _in_buffer(memoryview(bytearray(n + 24))[8:], x)
    if kind == "mmap":
        keep.append(mmap.mmap(-1, n))
        return _in_buffer(keep[-1], x)
    if kind == "array.array":
        return _in_buffer(array.array("d", bytes(n)), x)
    if kind == "numba":
        out = _numba_ones(x.shape)
        out[...] = x
        return out
    if kind == "ctypes array":
        arr = np.ctypeslib.as_array((ctypes.c_double * x.size)()).reshape(x.shape)
        arr[...] = x
        return arr
    if kind == "memoryview of a ctypes array":
        return _in_buffer(memoryview((ctypes.c_double * x.size)()), x)
    if kind == "ctypes pointer":
        buffer = (ctypes.c_double * x.size)()
        keep.append(buffer)
        pointer = ctypes.cast(buffer, ctypes.POINTER(ctypes.c_double))
        arr = np.ctypeslib.as_array(pointer, shape=x.shape)
        arr[...] = x
        return arr
    if kind == "as_strided over mmap":
        keep.append(mmap.mmap(-1, n))
        inner = _in_buffer(keep[-1], x)
        return np.lib.stride_tricks.as_strided(inner, inner.shape, inner.strides)
    if kind == "as_strided over numba":
        inner = _numba_ones(x.shape)
        inner[...] = x
        return np.lib.stride_tricks.as_strided(inner, inner.shape, inner.strides)
    raise AssertionError(kind)


#: Inputs in memory some buffer exporter bounds: compiled.
BOUNDED_INPUTS = ("bytearray at an offset", "a view into a bytearray's array", "bytes",
                  "memoryview slice", "mmap", "array.array", "numba")
#: Inputs no buffer the executor trusts bounds: the Python plan, with its result or its error.
UNBOUNDED_INPUTS = {"ctypes array": None, "memoryview of a ctypes array": None,
                    "ctypes pointer": 19, "as_strided over mmap": None,
                    "as_strided over numba": None}


@pytest.mark.parametrize("role", ["A", "B", "both"])
@pytest.mark.parametrize("kind", [*BOUNDED_INPUTS, *UNBOUNDED_INPUTS])
def test_input_memory_owners(kind: str, role: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inputs whose memory a trusted buffer holds (bytearray, bytes, mmap, array.array,
    numba's allocations) run compiled, on blas and on auto; ctypes memory and as_strided
    views fall back with the Python plan's result, or its error (a pointer's memory: 19)."""
    a, b, ref = _plain()
    plans = _both(monkeypatch, lambda: _matmul_plan(a, b, np.zeros((4, 3))))
    keep: list[Any] = []

    def args() -> tuple[Any, ...]:
        aa = _foreign_memory(kind, a, keep) if role in ("A", "both") else a
        bb = _foreign_memory(kind, b, keep) if role in ("B", "both") else b
        return 1.0, aa, bb, 0.0, None, np.zeros((4, 3))

    compiled = kind in BOUNDED_INPUTS
    code = UNBOUNDED_INPUTS.get(kind)
    _same_outcome(plans, args, compiled=compiled, code=code,
                  expect=None if code else ref.real)
    info = TensorInfo.from_array
    auto = TensorProduct(Handle("auto"), info(a), "ik", info(b), "kj", None, None,
                         info(np.zeros((4, 3))), "ij")
    _, aa, bb, _, _, d = args()
    if code is not None:
        with pytest.raises(pytapp.TappError) as err:
            auto.execute(1.0, aa, bb, 0.0, None, d)
        assert err.value.code == code and not d.any()
        return
    status = auto.execute(1.0, aa, bb, 0.0, None, d)
    assert status.algorithm.startswith("auto -> blas: compiled") == compiled, status.algorithm
    np.testing.assert_array_equal(d, ref.real)


@pytest.mark.parametrize("kind", ["numba", "mmap"])
def test_d_in_foreign_memory_falls_back(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """D must be memory NumPy allocated (an input can then share it only at D's own
    addresses): numba's or an mmap's D takes the Python plan, with the same result."""
    a, b, ref = _plain()
    plans = _both(monkeypatch, lambda: _matmul_plan(a, b, np.zeros((4, 3))))
    keep: list[Any] = []
    _same_outcome(plans, lambda: (1.0, a, b, 0.0, None,
                                  _foreign_memory(kind, np.full((4, 3), 7.0), keep)),
                  compiled=False, expect=ref.real)


def test_torch_tensors_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    a, b, ref = _plain()
    plans = _both(monkeypatch, lambda: _matmul_plan(a, b, np.zeros((4, 3))))
    out: list[Any] = []

    def args() -> tuple[Any, ...]:
        out.append(torch.zeros((4, 3), dtype=torch.float64))
        return 1.0, torch.from_numpy(a), torch.from_numpy(b), 0.0, None, out[-1]

    _same_outcome(plans, args, compiled=False, expect=ref.real)
    assert np.array_equal(out[0].numpy(), ref.real)


def test_overlaps_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """D sharing memory with A, and C overlapping D with another layout: the out-of-place
    result; C being D with D's layout: compiled, in place."""
    rng = np.random.default_rng(3)
    sq = rng.integers(-3, 4, (4, 4)).astype(np.float64)
    info = TensorInfo.from_array(sq)

    def square(c: bool) -> TensorProduct:
        c_info = TensorInfo.from_array(sq.T) if c else None  # C is read transposed
        return TensorProduct(Handle("blas"), info, "ik", info, "kj", c_info,
                             "ij" if c else None, info, "ij")

    plans = _both(monkeypatch, lambda: square(False))

    def d_is_a() -> tuple[Any, ...]:
        x = sq.copy()
        return 1.0, x, sq, 0.0, None, x

    _same_outcome(plans, d_is_a, compiled=False, expect=sq @ sq)
    plans = _both(monkeypatch, lambda: square(True))

    def c_transposed() -> tuple[Any, ...]:
        d = sq.copy()
        return 1.0, sq, sq, 2.0, d.T, d  # C: D's memory read transposed

    _same_outcome(plans, c_transposed, compiled=False, expect=sq @ sq + 2 * sq.T)
    info_d = TensorInfo.from_array(sq)
    plans = _both(monkeypatch, lambda: TensorProduct(Handle("blas"), info, "ik", info, "kj",
                                                     info_d, "ij", info_d, "ij"))

    def c_is_d() -> tuple[Any, ...]:
        d = sq.copy()
        return -1.0, sq, sq, 0.5, d, d

    _same_outcome(plans, c_is_d, compiled=True, expect=0.5 * sq - sq @ sq)


@pytest.mark.parametrize("case", ["read-only D", "wrong dtype", "out of bounds", "C missing",
                                  "complex alpha", "bool alpha", "string beta"])
def test_errors_are_the_python_plans(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, _ = _plain()
    d0 = np.full((4, 3), 7.0)
    c0 = np.ones((4, 3))
    plans = _both(monkeypatch, lambda: _matmul_plan(a, b, d0, c0))

    def args() -> tuple[Any, ...]:
        d = d0.copy()
        alpha: Any = 1.0
        beta: Any = 1.0
        aa, bb, cc = a, b, c0
        if case == "read-only D":
            d.flags.writeable = False
        elif case == "wrong dtype":
            bb = b.astype(np.float32)
        elif case == "out of bounds":
            aa = np.zeros(5)  # flat storage too short for the descriptor's 4x5
        elif case == "C missing":
            cc = None
        elif case == "complex alpha":
            alpha = 1 + 2j
        elif case == "bool alpha":
            alpha = True
        else:
            beta = "1"
        return alpha, aa, bb, beta, cc, d

    codes = {"read-only D": 22, "wrong dtype": 20, "out of bounds": 19, "C missing": 12,
             "complex alpha": 21, "bool alpha": 21, "string beta": 21}
    _same_outcome(plans, args, compiled=False, code=codes[case])


@pytest.mark.parametrize("alpha", [np.float32(1.5), np.int64(-2), np.float64(0.25), 3,
                                   complex(2, 0), np.complex128(1.5)], ids=repr)
def test_scalar_types(alpha: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """NumPy scalar types and complex values with a zero imaginary part: the same D."""
    a, b, ref = _plain()
    plans = _both(monkeypatch, lambda: _matmul_plan(a, b, np.zeros((4, 3)), np.ones((4, 3))))
    value = complex(alpha).real
    _same_outcome(plans, lambda: (alpha, a, b, 0.5, np.ones((4, 3)),
                                  np.zeros((4, 3))),
                  compiled=type(alpha) in (float, int, complex, np.float64, np.complex128),
                  expect=value * ref.real + 0.5)


@pytest.mark.parametrize(("alpha", "code"), [
    (2**70, None), (-(2**63), None), (np.uint64(2**64 - 1), None), (float("inf"), None),
    (1e39, 21), (-(2**200), 21), (10**400, 21), (complex(1e39, 0), 21),
    (np.timedelta64(1), 21), (np.datetime64(1, "s"), 21), (None, 21),
], ids=lambda x: repr(x)[:24])
def test_large_and_odd_scalars_on_f32(alpha: Any, code: int | None,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Ints beyond int64 that F32 holds; values that overflow F32, or are no numbers (21)."""
    a, b, ref = _plain(np.float32)
    plans = _both(monkeypatch, lambda: _matmul_plan(a, b, np.zeros((4, 3), np.float32)))
    expect = None if code is not None else np.float32(alpha) * ref.real.astype(np.float32)
    with np.errstate(invalid="ignore"):
        _same_outcome(plans, lambda: (alpha, a, b, 0.0, None, np.zeros((4, 3), np.float32)),
                      compiled=type(alpha) is float or (
                          type(alpha) is int and -(2**63) <= alpha < 2**63),
                      code=code, expect=expect)


def test_executors_and_destroyed_plans() -> None:
    """An explicit executor takes the Python plan with the same D; a destroyed plan raises 23
    and leaves D as it was."""
    a, b, ref = _plain()
    with Handle("blas") as handle:
        info = TensorInfo.from_array
        plan = TensorProduct(handle, info(a), "ik", info(b), "kj", None, None,
                             info(np.zeros((4, 3))), "ij")
        d = np.zeros((4, 3))
        status = plan.execute(1.0, a, b, 0.0, None, d)
        assert status.algorithm.startswith(COMPILED), status.algorithm
        assert np.array_equal(d, ref.real)
        e = np.zeros((4, 3))
        status = plan.execute(1.0, a, b, 0.0, None, e, handle.create_executor(threads=1))
        assert not status.algorithm.startswith(COMPILED)
        assert np.array_equal(e, d)
        plan.destroy()
        with pytest.raises(pytapp.TappError) as err:
            plan.execute(1.0, a, b, 0.0, None, e)
        assert err.value.code == 23
        assert np.array_equal(e, d)


# ------------------------------------------------------------------------------ 4. alpha == 0
@pytest.mark.parametrize("dt", NATIVE, ids=lambda d: d.name)
@pytest.mark.parametrize(("a_labels", "size"), [("ik", 3), ("ik", 12), ("ikx", 24)],
                         ids=["loop", "gemm", "ttgt"])
def test_zero_alpha_never_reads_a_or_b(dt: Datatype, a_labels: str, size: int) -> None:
    """alpha == 0 with NaN and Inf in A and B: D = op_D(beta op_C(C)) (SPEC section 1)."""
    labels = {"A": tuple(a_labels), "B": ("k", "j"), "D": ("i", "j")}
    ext = {"i": size, "j": size - 1, "k": size + 1, "x": 2}
    beta = complex(1.5, -0.5) if dt.is_complex else 1.5
    for seed, (c_mode, ops) in enumerate([("own", "---c"), ("d", "--c-"), ("none", "----")]):
        inst = build(dt, labels, ext, {}, seed=seed, alpha=0.0,
                     beta=0.0 if c_mode == "none" else beta, ops=ops, c_mode=c_mode)
        item = inst.items[0]
        item.a.parent[...] = np.nan
        item.b.parent[...] = np.inf
        algorithm = _check_compiled(inst)
        assert algorithm.startswith(COMPILED)
        d = np.asarray(item.d.view)
        assert np.all(np.isfinite(d))
        if c_mode == "none":
            assert not np.any(d)


# ------------------------------------------------------------------------------ 5. threads
THREADS = 16
ROUNDS = 25


def _ints(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    return rng.integers(-3, 4, tuple(shape)).astype(np.float64)


@pytest.mark.parametrize(("a_labels", "n", "route"), [
    ("ik", 4, "loop nest"), ("ik", 40, "1 gemm"), ("ikx", 32, "ttgt"),
    ("ikx", 32, "ttgt in blocks")])
def test_threads_share_one_plan(a_labels: str, n: int, route: str,
                                in_threads: Callable[..., None]) -> None:
    """Sixteen threads, one plan, their own exact integer data each: every D exact."""
    ext = {"i": n, "k": n + 1, "j": n - 1, "x": 2}
    shapes = [[ext[x] for x in labels] for labels in (a_labels, "kj", "ij")]
    info_a, info_b, info_d = (TensorInfo.from_array(np.zeros(s)) for s in shapes)
    blocks = route.endswith("in blocks")
    with _thin_blocks() if blocks else contextlib.nullcontext():
        plan = TensorProduct(Handle("blas"), info_a, a_labels, info_b, "kj", info_d, "ij",
                             info_d, "ij")
    assert plan.algorithm.startswith(f"{COMPILED} {route.split()[0]}"), plan.algorithm
    assert ("in blocks of" in plan.algorithm) == blocks, plan.algorithm
    # the larger ones run without the GIL: threads really run the program at the same time
    assert (plan.spec.flops >= RELEASE_GIL_FLOPS) == (n > 4)

    def work(k: int) -> None:
        rng = np.random.default_rng(k)
        for _ in range(ROUNDS):
            a, b, c = (_ints(rng, s) for s in shapes)
            d = np.full(shapes[2], np.nan)
            want = 2 * np.einsum(f"{a_labels},kj->ij", a.astype(np.int64),
                                 b.astype(np.int64)) - 3 * c.astype(np.int64)
            status = plan.execute(2, a, b, -3, c, d)
            assert status.algorithm.startswith(COMPILED)
            assert np.array_equal(d, want)

    in_threads(work)


@pytest.mark.parametrize("n", [6, 34], ids=["small", "large"])
def test_threads_share_one_expression(n: int, in_threads: Callable[..., None]) -> None:
    """Sixteen threads calling one einsum expression (its compiled chain, whose intermediate
    buffers only one call at a time uses), and one-shot einsum on the same layouts."""
    shapes = [(n, n + 1), (n + 1, n + 2), (n + 2, n - 1), (n - 1,)]
    eq = "ij,jk,kl,l->i"
    expr = pytapp.einsum_expression(eq, *shapes, backend="blas")
    first = [np.ones(s) for s in shapes]
    expr(*first)
    assert expr.chain_for(first) is not None  # every step lowered: one C call per network

    def work(k: int) -> None:
        rng = np.random.default_rng(100 + k)
        for r in range(ROUNDS if n < 10 else 8):  # large: steps run without the GIL
            ops = [_ints(rng, s) for s in shapes]
            want = np.einsum(eq, *(x.astype(np.int64) for x in ops))
            got = expr(*ops) if r % 2 else pytapp.einsum(eq, *ops, backend="blas")
            assert np.array_equal(got, want)

    in_threads(work)


@pytest.mark.parametrize("n", [6, 34], ids=["small", "large"])
def test_threads_write_into_their_own_out(n: int, in_threads: Callable[..., None]) -> None:
    """Sixteen threads calling one expression and one-shot einsum with out= of two layouts:
    the chains built for out's layouts write each call's result into that call's out."""
    shapes = [(n, n + 1), (n + 1, n + 2), (n + 2, n - 1)]
    eq = "ij,jk,kl->li"
    expr = pytapp.einsum_expression(eq, *shapes, backend="blas")
    result = (n - 1, n)

    def work(k: int) -> None:
        rng = np.random.default_rng(300 + k)
        for r in range(ROUNDS if n < 10 else 8):
            ops = [_ints(rng, s) for s in shapes]
            want = np.einsum(eq, *(x.astype(np.int64) for x in ops))
            out = np.full(result, np.nan, order="F" if (k + r) % 2 else "C")
            got = expr(*ops, out=out) if r % 2 else pytapp.einsum(eq, *ops, out=out,
                                                                 backend="blas")
            assert got is out and np.array_equal(out, want)

    in_threads(work)


def _checked_calls(expr: Any, eq: str, shapes: Sequence[tuple[int, ...]], seed: int,
                   calls: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Call ``expr`` on exact small-integer operands ``calls`` times, each result checked."""
    rng = np.random.default_rng(seed)
    ops = [rng.integers(-3, 4, s).astype(np.float64) for s in shapes]
    want = np.einsum(eq, *(x.astype(np.int64) for x in ops))
    for _ in range(calls):
        assert np.array_equal(expr(*ops), want)
    return ops, want


def _layouts(ops: list[np.ndarray]) -> tuple[Any, ...]:
    return tuple((a.dtype, a.strides) for a in ops)


def test_an_unsettled_auto_expression_runs_its_chain_and_counts_the_calls(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before auto's choice of a network is settled, its compiled chain runs the expression's
    own calls (timed, counted towards tuning) but is not handed to callers that would not
    count them; tuning settles the choice and compiles the winner."""
    from pytapp import backends, wisdom

    monkeypatch.setenv("PYTAPP_WISDOM", "off")
    wisdom.forget()
    # never affordable: torch's import counted, as in a process that has not imported it
    monkeypatch.setattr(backends, "import_seconds", lambda name: 1e9)
    eq = "kbcd,kd,ce->be"  # kbcd,kd->bc: GEMVs summed over k (the Python plan's route)
    shapes = [(8, 32, 32, 32), (8, 32), (32, 5)]
    expr = pytapp.einsum_expression(eq, *shapes)
    ops, want = _checked_calls(expr, eq, shapes, 4, 3)
    dt = pytapp.Datatype.F64
    assert dt not in expr._settled
    assert expr._chains.get(_layouts(ops)), "the unsettled expression has its chain"
    assert expr.chain_for(ops) is None  # not published while its calls must be counted
    runs = expr._budgets[dt].runs
    for _ in range(5):
        assert np.array_equal(expr(*ops), want)
    assert expr._budgets[dt].runs == runs + 5  # the chain's calls were counted
    monkeypatch.setattr(backends, "import_seconds", lambda name: 0.0)
    monkeypatch.setattr(wisdom, "POOL_SETTLE_SECONDS", 0.0)  # nor the pause before torch's
    for _ in range(wisdom.MIN_RUNS * 3):
        assert np.array_equal(expr(*ops), want)
        if dt in expr._settled:
            break
    assert dt in expr._settled  # tuned within its budget
    assert np.array_equal(expr(*ops), want)
    assert expr.chain_for(ops) is not None  # the winner's chain, published


@pytest.mark.parametrize("large", [False, True])
def test_an_all_compiled_network_settles_at_once_only_when_small(
        large: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Below expression.COMPILED_SETTLES_BELOW flops an all-compiled auto network settles on
    its chain (another library's dispatch cannot win); above, the library's GEMM decides, so
    its calls are counted towards timing the backends like any unsettled network's."""
    from pytapp import backends, expression, wisdom

    monkeypatch.setenv("PYTAPP_WISDOM", "off")
    wisdom.forget()
    monkeypatch.setattr(backends, "import_seconds", lambda name: 1e9)  # never timed here
    eq, shapes = "ij,jk,kl->il", [(12, 13), (13, 14), (14, 11)]
    expr = pytapp.einsum_expression(eq, *shapes)
    flops = expr.network.flops
    assert expr.path == [(1, 2), (0, 1)]  # jk,kl->jl first, then ij,jl->il
    assert flops == 2 * (13 * 14 * 11 + 12 * 13 * 11)
    monkeypatch.setattr(expression, "COMPILED_SETTLES_BELOW", flops if large else flops + 1)
    ops, _ = _checked_calls(expr, eq, shapes, 8, 4)
    dt = pytapp.Datatype.F64
    assert expr._chains.get(_layouts(ops)), "the compiled chain is built either way"
    assert (dt in expr._settled) is not large
    assert (expr.chain_for(ops) is None) is large  # an unsettled chain's calls are counted
    if large:
        assert expr._budgets[dt].runs >= 3


SPLIT = 1 << 16  # _cexec's LOOP_SPLIT_MIN: loop nests this large are shared out over the pool


@pytest.mark.parametrize(("eq", "shapes", "dtype"), [
    ("ij,ij->ij", [(300, 300), (300, 300)], np.float64),  # Hadamard
    ("jr,kr->jkr", [(128, 48), (128, 48)], np.float32),  # CP's outer product, 786k elements
    ("ab,b->ba", [(270, 270), (270,)], np.float64),  # broadcast, D transposed
    ("i,j->ij", [(3, ), (40000, )], np.float64),  # first label shorter than the workers
])
@pytest.mark.parametrize("flavour", ["plain", "epilogue", "c_is_d", "reversed"])
def test_large_loop_nests_shared_out_over_the_pool_stay_exact(
        eq: str, shapes: list[tuple[int, ...]], dtype: type, flavour: str,
        in_threads: Callable[..., None]) -> None:
    """Elementwise loop nests of LOOP_SPLIT_MIN iterations or more run on the BLAS's pool,
    split along their first (output) label: every element exact, whatever the epilogue, the
    strides, or C being D; 16 threads sharing the plan too."""
    ins, out = eq.split("->")
    la, lb = ins.split(",")
    def operand_a(rng: np.random.Generator) -> np.ndarray:
        a = _ints(rng, shapes[0]).astype(dtype)
        return a[::-1] if flavour == "reversed" else a  # negative strides on A

    rng = np.random.default_rng(12)
    a, b = operand_a(rng), _ints(rng, shapes[1]).astype(dtype)
    d_shape = np.einsum(eq, a, b).shape
    c = _ints(rng, d_shape).astype(dtype)
    assert np.prod(d_shape) >= SPLIT
    alpha, beta = (1, 0) if flavour in ("plain", "reversed") else (2, -3)
    infos = [TensorInfo.from_array(x) for x in (a, b, c)]
    plan = TensorProduct(Handle("blas"), infos[0], la, infos[1], lb, infos[2], out, infos[2],
                         out)
    assert plan.algorithm.startswith(f"{COMPILED} loop nest"), plan.algorithm

    def check(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
        want = alpha * np.einsum(eq, a.astype(np.int64), b.astype(np.int64))
        if beta:
            want = want + beta * c.astype(np.int64)
        d = c if flavour == "c_is_d" else np.full(d_shape, np.nan, dtype=dtype)
        status = plan.execute(alpha, a, b, beta, c if beta else None, d)
        assert status.algorithm.startswith(COMPILED)
        assert np.array_equal(d, want.astype(dtype))

    check(a, b, c.copy())

    def work(k: int) -> None:
        r = np.random.default_rng(k)
        for _ in range(2):
            check(operand_a(r), _ints(r, b.shape).astype(dtype), _ints(r, d_shape).astype(dtype))

    in_threads(work)
