"""The per-product targets, measured as ratios in one run (``pytapp bench --suite targets``).

* **Per-call overhead** on tiny operands (2-D GEMM, 3-D x 2-D, row-wise dot...): a reused
  ``plan.execute`` (with and without C), ``pytapp.contract`` and ``pytapp.einsum`` against
  ``numpy.einsum(optimize=False)`` (into a preallocated D, with NumPy's in-place epilogue when
  there is C), and ``pytapp.einsum`` on chains of tiny matrices against
  ``numpy.einsum(optimize=True)``; contenders timed in interleaved rounds.
* **GEMM-shaped products**: the default backend on every public case that is one (batched)
  GEMM on operands as they lie, against the same operation on contiguous operands of the flat
  shape, the best way NumPy (``matmul`` then in-place epilogue) or torch (``baddbmm`` with
  alpha and beta) does it; F16/BF16 cases against torch's native ``baddbmm`` in that datatype.
* **Permutations** of 64 MiB tensors with every mode reversed, in % of a contiguous copy.
* **Cold start**: a fresh interpreter computing a GEMV-like and a permuted Hadamard product
  large enough for the compiled kernels, with a cold and then a warm kernel cache.

Examples
--------
>>> rows = overhead_rows(repeats=1, cases=small_cases()[:1], seconds=0.001)
>>> rows[0].name, rows[0].errors["pytapp"] < 1e-12
('small_0 execute', True)
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytapp.bench.cases import BenchCase, load_public, small_family
from pytapp.bench.harness import permutation_speeds
from pytapp.bench.peers import ALPHA, BETA

__all__ = ["TargetRow", "cold_start_rows", "gemm_rows", "interleaved", "network_overhead_rows",
           "overhead_rows", "permutation_rows", "run_targets", "small_cases", "targets_markdown",
           "targets_plot", "targets_table"]


@dataclass
class TargetRow:
    """One measured target: pytapp's time against a baseline's, and the goal for the ratio.

    ``ratio`` is pytapp's time over the baseline's (``lower_is_better``: at most ``goal``) or
    the baseline's over pytapp's (at least ``goal``), as the target is stated.
    """

    group: str
    name: str
    baseline: str
    pytapp_s: float
    baseline_s: float
    goal: float
    lower_is_better: bool
    note: str = ""
    errors: dict[str, float] = field(default_factory=dict)
    #: Largest relative error accepted for pytapp's result (its datatype's rounding).
    tolerance: float = 1e-3

    @property
    def ratio(self) -> float:
        """The target's ratio (see the class docstring)."""
        if self.lower_is_better:
            return self.pytapp_s / self.baseline_s
        return self.baseline_s / self.pytapp_s

    @property
    def met(self) -> bool:
        """Whether the ratio meets the goal."""
        return self.ratio <= self.goal if self.lower_is_better else self.ratio >= self.goal


def small_cases() -> list[BenchCase]:
    """Return the tiny products of the per-call targets: the ``small`` suite and a row-wise dot."""
    return [*small_family(),
            BenchCase("small_rowdot", "small", "ab,ab->a", {"a": 8, "b": 8}, "f64",
                      "per-call overhead")]


def _per_call(fn: Callable[[], Any], number: int, repeats: int) -> float:
    """Seconds per call: the best of ``repeats`` batches of ``number`` calls."""
    fn()
    return min(timeit.repeat(fn, number=number, repeat=repeats)) / number


def _sample(fn: Callable[[], Any], seconds: float, least: int) -> float:
    """Seconds per call of one sample: calls repeated until the sample lasts ``seconds``."""
    n = max(least, 1)
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        spent = time.perf_counter() - start
        if spent >= seconds:
            return spent / n
        n *= 4 if spent < seconds / 8 else 2


def interleaved(contenders: dict[str, Callable[[], Any]], rounds: int, seconds: float = 0.02,
                least: int = 1) -> dict[str, float]:
    """Per-call seconds of each contender, timed in interleaved rounds.

    Each round times every contender once, in a shuffled order; each sample repeats the call
    until it lasts ``seconds``; the minimum over the rounds is kept (timing one contender after
    another swings by 30-50% on a shared machine).
    """
    best = dict.fromkeys(contenders, math.inf)
    for fn in contenders.values():
        fn()  # plans, caches, compiled kernels
    order = list(contenders)
    for _ in range(max(rounds, 1)):
        random.shuffle(order)
        for name in order:
            best[name] = min(best[name], _sample(contenders[name], seconds, least))
    return best


def _oracle(case: BenchCase, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    wide = np.complex128 if case.datatype.is_complex else np.float64
    return np.asarray(ALPHA * np.einsum(case.einsum, a.astype(wide), b.astype(wide))
                      + BETA * c.astype(wide))


def _error(got: np.ndarray, want: np.ndarray) -> float:
    scale = max(float(np.max(np.abs(want), initial=0.0)), 1e-300)
    return float(np.max(np.abs(got.astype(want.dtype) - want), initial=0.0)) / scale


def overhead_rows(repeats: int = 7, number: int = 1, cases: Sequence[BenchCase] | None = None,
                  seconds: float = 0.02) -> list[TargetRow]:
    """Measure the per-call time of ``plan.execute``, ``contract`` and ``pytapp.einsum``.

    Against ``numpy.einsum(optimize=False)`` into a preallocated D (``plan.execute`` without C,
    goal 1.0x; ``contract``, goal 1.5x), against that einsum and NumPy's in-place epilogue
    (``plan.execute`` with alpha, beta and C, goal 1.0x), and against the allocating
    ``numpy.einsum`` (``pytapp.einsum`` on two operands, goal 1.5x); ``repeats`` interleaved
    rounds of samples of ``seconds`` (at least ``number`` calls) per case.
    """
    rows: list[TargetRow] = []
    for case in cases if cases is not None else small_cases():
        rows += _overhead_case(case, repeats, number, seconds)
    return rows


def _overhead_case(case: BenchCase, repeats: int, number: int,
                   seconds: float) -> list[TargetRow]:
    from pytapp.contraction import contract
    from pytapp.handle import Handle
    from pytapp.numpy_api import einsum
    from pytapp.product import TensorProduct
    from pytapp.tensor import TensorInfo

    a, b, c, d = case.arrays(seed=1)
    want = _oracle(case, a, b, c)
    plain = _oracle(case, a, b, np.zeros_like(c)) / ALPHA
    la, lb, ld = case.labels
    info = TensorInfo.from_array
    tmp = np.empty_like(d)
    expr = case.einsum
    alpha, beta = d.dtype.type(ALPHA), d.dtype.type(BETA)
    errors: dict[str, float] = {}

    def numpy_epilogue() -> None:
        np.einsum(expr, a, b, optimize=False, out=d)
        np.multiply(d, alpha, out=d)
        np.multiply(c, beta, out=tmp)
        np.add(d, tmp, out=d)

    with Handle() as handle:
        plan = TensorProduct(handle, info(a), la, info(b), lb, info(c), ld, info(d), ld)
        plan.execute(ALPHA, a, b, BETA, c, d)
        errors["execute C"] = _error(d, want)
        plan.execute(1.0, a, b, 0.0, None, d)
        errors["execute"] = _error(d, plain)
        errors["contract"] = _error(contract(expr, a, b, out=d), plain)
        errors["einsum"] = _error(np.asarray(einsum(expr, a, b)), plain)
        best = interleaved({
            "numpy.einsum(out=)": lambda: np.einsum(expr, a, b, optimize=False, out=d),
            "numpy.einsum + epilogue": numpy_epilogue,
            "numpy.einsum": lambda: np.einsum(expr, a, b, optimize=False),
            "execute": lambda: plan.execute(1.0, a, b, 0.0, None, d),
            "execute C": lambda: plan.execute(ALPHA, a, b, BETA, c, d),
            "contract": lambda: contract(expr, a, b, out=d),
            "einsum": lambda: einsum(expr, a, b),
        }, repeats, seconds, number)
    group = "per-call overhead"
    return [
        TargetRow(group, f"{case.name} {name}", base, best[name], best[base], goal, True,
                  f"{expr}; {best[name] * 1e6:.1f} us vs {best[base] * 1e6:.1f} us",
                  {"pytapp": errors[name]})
        for name, base, goal in (("execute", "numpy.einsum(out=)", 1.0),
                                 ("execute C", "numpy.einsum + epilogue", 1.0),
                                 ("contract", "numpy.einsum(out=)", 1.5),
                                 ("einsum", "numpy.einsum", 1.5))]


def network_overhead_rows(repeats: int = 7, seconds: float = 0.02) -> list[TargetRow]:
    """``pytapp.einsum`` on chains of 3-5 tiny matrices against ``numpy.einsum(optimize=True)``.

    Goal: no slower (1.0x), interleaved as :func:`overhead_rows`.
    """
    from pytapp.numpy_api import einsum

    rng = np.random.default_rng(3)
    rows: list[TargetRow] = []
    for count in (3, 4, 5):
        letters = "abcdef"[:count + 1]
        expr = ",".join(letters[i:i + 2] for i in range(count)) + f"->{letters[0]}{letters[-1]}"
        arrays = [rng.standard_normal((4 + i, 5 + i)) for i in range(count)]
        for i in range(1, count):  # chain the shapes
            arrays[i] = rng.standard_normal((arrays[i - 1].shape[1], 5 + i))
        want = np.linalg.multi_dot(arrays)
        err = _error(np.asarray(einsum(expr, *arrays)), want)

        def peer(e: str = expr, x: list[np.ndarray] = arrays) -> Any:
            return np.einsum(e, *x, optimize=True)

        def ours(e: str = expr, x: list[np.ndarray] = arrays) -> Any:
            return einsum(e, *x)

        best = interleaved({"numpy.einsum(optimize=True)": peer, "einsum": ours}, repeats,
                           seconds)
        base = "numpy.einsum(optimize=True)"
        rows.append(TargetRow("per-call overhead", f"chain of {count} einsum", base,
                              best["einsum"], best[base], 1.0, True,
                              f"{expr}; {best['einsum'] * 1e6:.1f} us vs "
                              f"{best[base] * 1e6:.1f} us", {"pytapp": err}))
    return rows


def _gemm_shape(case: BenchCase) -> tuple[tuple[int, ...], int, int, int] | None:
    """(batch extents, m, n, k) when ``case`` is GEMM-shaped.

    A (batched) GEMM whose operands and D are matrices as they lie (blas copies nothing), with
    m, n, k >= 16.
    """
    from pytapp import backends
    from pytapp.analysis.ttgt import Kind, PlanProfile, gemm_layout
    from pytapp.handle import Handle
    from pytapp.product import TensorProduct
    from pytapp.tensor import TensorInfo

    if case.dtype in ("f16", "bf16"):  # the layout question of the same product in F32
        case = dataclasses.replace(case, dtype="f32")
    a, b, _, d = case.arrays(seed=0)
    la, lb, ld = case.labels
    info = TensorInfo.from_array
    with Handle("reference") as handle:
        spec = TensorProduct(handle, info(a), la, info(b), lb, None, None, info(d), ld).spec
    profile = getattr(backends.get("blas").plan(spec, None), "profile", PlanProfile())
    lay = gemm_layout(spec)
    if (lay.kind is not Kind.GEMM or min(lay.m, lay.n, lay.k) < 16 or profile.copy_bytes
            or not profile.d_direct or spec.classes.IA or spec.classes.IB):
        return None
    return tuple(lay.h_shape), lay.m, lay.n, lay.k


def _flat_gemms(case: BenchCase,
                shape: tuple[tuple[int, ...], int, int, int]) -> dict[str, Callable[[], Any]]:
    """Return the same TAPP operation on contiguous flat operands, as each library does it best.

    NumPy's matmul into D, then its in-place epilogue; torch's addmm/baddbmm with alpha and
    beta (the BLAS call fuses them). Low precision: torch only, natively.
    """
    h, m, n, k = shape
    dt = case.datatype
    rng = np.random.default_rng(0)
    low = dt.short_name in ("f16", "bf16")
    calls: dict[str, Callable[[], Any]] = {}
    batch = math.prod(h)
    x = rng.standard_normal((batch, m, k)).astype(np.float32 if low else dt.numpy_dtype)
    y = rng.standard_normal((batch, k, n)).astype(x.dtype)
    c = rng.standard_normal((batch, m, n)).astype(x.dtype)
    if not low:
        out, tmp = np.empty_like(c), np.empty_like(c)
        alpha, beta = x.dtype.type(ALPHA), x.dtype.type(BETA)

        def numpy_call() -> None:
            np.matmul(x, y, out=out)
            np.multiply(out, alpha, out=out)
            np.multiply(c, beta, out=tmp)
            np.add(out, tmp, out=out)

        calls["numpy matmul + epilogue"] = numpy_call
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is an extra
        return calls
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16}.get(dt.short_name)
    tx, ty, tc = (torch.from_numpy(v) for v in (x, y, c))
    if tdt is not None:
        tx, ty, tc = tx.to(tdt), ty.to(tdt), tc.to(tdt)
    tout = torch.empty_like(tc)
    calls["torch baddbmm"] = lambda: torch.baddbmm(tc, tx, ty, beta=BETA, alpha=ALPHA, out=tout)
    return calls


def gemm_rows(repeats: int = 5, cases: Sequence[BenchCase] | None = None) -> list[TargetRow]:
    """Compare the default backend on GEMM-shaped cases with the best flat GEMM.

    Return the default backend on each GEMM-shaped case against the best flat GEMM doing the same
    TAPP operation (goal 0.95; F16/BF16 against torch's native ``baddbmm``: 0.9). The
    contenders are interleaved in ``repeats`` rounds (samples of at least 0.2 s; a pause
    between samples on different thread pools, see
    :data:`pytapp.bench.harness.SETTLE_SECONDS`); each keeps its least time.
    """
    from pytapp.bench.harness import interleaved as rounds_of
    from pytapp.bench.peers import backend_contender

    rows: list[TargetRow] = []
    for case in cases if cases is not None else load_public():
        shape = _gemm_shape(case)
        if shape is None:
            continue
        flat = _flat_gemms(case, shape)
        if not flat:
            continue
        a, b, c, d = case.arrays(seed=0)
        who = backend_contender("auto", case, a, b, c, d)
        calls = {"pytapp": who.call, **flat}

        def pool_of(name: str, ran: Callable[[], str] = who.what_ran) -> str:
            if name == "pytapp":
                return "torch" if ran().startswith("auto -> torch") else "blas"
            return "torch" if name.startswith("torch") else "blas"

        times = {name: min(t) for name, t in rounds_of(
            calls, rounds=repeats, sample_seconds=0.2, pool_of=pool_of).items()}
        ours = times.pop("pytapp")
        error = _error(np.asarray(who.result(who.call())), _oracle(case, a, b, c))
        what = who.what_ran()
        baseline = min(times, key=lambda name: times[name])
        h, m, n, k = shape
        low = case.dtype in ("f16", "bf16")
        rows.append(TargetRow(
            "low precision vs torch's native matmul" if low else "GEMM-shaped vs flat GEMM",
            case.name, baseline, ours, times[baseline], 0.9 if low else 0.95, False,
            f"{case.dtype} batch {h or '-'} m={m} n={n} k={k}; {what}",
            {"pytapp": error}, 0.05 if low else 1e-3))
    return rows


def permutation_rows(mib: int = 64) -> list[TargetRow]:
    """Reversing every mode of a ``mib`` MiB tensor, in % of a contiguous copy (goal 50%)."""
    return [TargetRow("permutation", f"{mib} MiB {dt} reversed", "contiguous copy",
                      100.0 / pct, 1.0, 0.5, False, f"{pct:.0f}% of the copy's bandwidth")
            for dt, pct in permutation_speeds(mib).items() if pct > 0]


_COLD_SCRIPT = """
import time
start = time.perf_counter()
import numpy as np
import pytapp
x = np.ones((256, 256, 64)); v = np.ones(256)
y = np.ones((64, 256, 256))
pytapp.contract("ijk,j->ik", x, v)
pytapp.contract("ijk,kji->ijk", x, y)
print(time.perf_counter() - start)
"""


def cold_start_rows() -> list[TargetRow]:
    """Measure the seconds from interpreter start to the first results.

    Seconds from interpreter start to the first two results, with a cold kernel cache (the
    compile time, reported) and then a warm one (goal: 1 s).
    """
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        seconds = []
        for _ in range(2):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", _COLD_SCRIPT], env=env, check=True,
                           capture_output=True)
            seconds.append(time.perf_counter() - start)
    cold, warm = seconds
    return [TargetRow("cold start", "first results, warm kernel cache", "1 s", warm, 1.0, 1.0,
                      True, f"cold kernel cache (compiling): {cold:.2f} s")]


def run_targets(repeats: int = 5, progress: Callable[[str], None] | None = None,
                ) -> list[TargetRow]:
    """Every target group, in order."""
    rows: list[TargetRow] = []
    steps: list[tuple[str, Callable[[], list[TargetRow]]]] = [
        ("per-call overhead", lambda: overhead_rows(repeats=max(repeats, 5))
         + network_overhead_rows(repeats=max(repeats, 5))),
        ("GEMM-shaped", lambda: gemm_rows(repeats)),
        ("permutation", permutation_rows),
        ("cold start", cold_start_rows),
    ]
    for what, step in steps:
        if progress is not None:
            progress(what)
        rows += step()
    return rows


def _fmt_s(s: float) -> str:
    return f"{s * 1e6:.1f} us" if s < 1e-3 else f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s"


def targets_table(rows: Sequence[TargetRow]) -> str:
    """Return a plain-text table, one row per target."""
    head = f"{'target':<44} {'pytapp':>10} {'baseline':>10} {'ratio':>7} {'goal':>7}  met"
    lines = [head, "-" * len(head)]
    for r in rows:
        goal = f"{'<=' if r.lower_is_better else '>='}{r.goal:g}"
        lines.append(f"{r.name[:44]:<44} {_fmt_s(r.pytapp_s):>10} {_fmt_s(r.baseline_s):>10} "
                     f"{r.ratio:>6.2f}x {goal:>7}  {'yes' if r.met else 'NO'}")
    met = sum(r.met for r in rows)
    lines.append(f"{met} of {len(rows)} targets met")
    return "\n".join(lines)


def targets_markdown(rows: Sequence[TargetRow], plot: str | None = None) -> str:
    """Return a Markdown report: per group, each target with its baseline, ratio and goal."""
    lines = ["# Per-product targets", "",
             "Ratios measured in one run on this machine (`pytapp bench --suite targets`). "
             "Overhead: pytapp's time over the baseline's (lower is better). GEMM-shaped and "
             "permutation: the baseline's time over pytapp's (higher is better). GEMM-shaped "
             "cases compute the whole TAPP operation D = 0.75 A B - 0.5 C; so does the "
             "baseline, on contiguous operands of the flat (batch, m, n, k) shape. Every pytapp "
             "result is checked against numpy.einsum in float64/complex128.", ""]
    if plot:
        lines += [f"![targets]({plot})", ""]
    group = None
    for r in rows:
        if r.group != group:
            group = r.group
            lines += ([""] if lines[-1] else []) + [
                f"## {group}", "", "| target | pytapp | baseline | ratio | goal | met | note |",
                "|---|---|---|---|---|---|---|"]
        goal = f"{'<=' if r.lower_is_better else '>='} {r.goal:g}"
        lines.append(f"| {r.name} | {_fmt_s(r.pytapp_s)} | {r.baseline}: "
                     f"{_fmt_s(r.baseline_s)} | {r.ratio:.2f}x | {goal} | "
                     f"{'yes' if r.met else '**no**'} | {r.note} |")
    met = sum(r.met for r in rows)
    lines += ["", f"{met} of {len(rows)} targets met.", ""]
    return "\n".join(lines)


def targets_plot(rows: Sequence[TargetRow], path: str) -> None:
    """Each target's ratio over its goal (above 1: met), one bar per target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    score = [(r.goal / r.ratio if r.lower_is_better else r.ratio / r.goal) for r in rows]
    fig, ax = plt.subplots(figsize=(9, max(3.0, 0.25 * len(rows))))
    colors = ["tab:green" if s >= 1 else "tab:red" for s in score]
    ax.barh(range(len(rows)), [s if math.isfinite(s) else 0.0 for s in score], color=colors)
    ax.set_yticks(range(len(rows)), [r.name for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("ratio / goal (right of the line: target met)")
    ax.set_title("pytapp bench --suite targets")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
