"""``pytapp bench --suite networks``: whole einsum networks against the libraries people use.

Networks from the fields pytapp serves (tensor networks, quantum computing, quantum chemistry,
numerical linear algebra, machine learning), from microseconds to about a second. Every
contender contracts the same network along the same path (the greedy path of opt_einsum):

* pytapp, one-shot: ``pytapp.einsum(eq, *arrays, optimize=path)``, called again and again as
  a user's loop would (the second call on finds its compiled expression in the cache);
* pytapp, compiled: ``pytapp.einsum_expression`` built once, then called;
* the peers: ``numpy.einsum`` with the same path, opt_einsum's ``contract`` (one-shot, same
  path) and ``contract_expression``, cotengra's ``einsum_expression`` and ``torch.einsum``
  (which picks its own path through opt_einsum) on tensors sharing the arrays' memory.

Contenders are timed in interleaved rounds (:func:`pytapp.bench.harness.interleaved`), the
fastest round kept. Each result is checked against numpy.einsum in float64/complex128. The
ratios are the best peer's time over pytapp's (one-shot and compiled); the roof is the time
the network's flops (as opt_einsum counts them along the path) take at the best GEMM rate of
its datatype, or the time its bytes (operands and result once, intermediates twice) take at
the copy bandwidth of that working set, whichever is longer, both measured in the same run (or
the fastest contender's time when that is shorter).

Examples
--------
>>> result = run_networks(cases=network_cases(quick=True)[:1], repeats=1, roof=False)
>>> result[0].times[ONE_SHOT] > 0 and result[0].times[COMPILED] > 0
True
"""

from __future__ import annotations

import itertools
import math
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytapp.bench.harness import (
    SETTLE_SECONDS,
    copy_bandwidth,
    geometric_mean,
    interleaved,
    measure_peaks,
    summary_lines,
    thread_limits,
)
from pytapp.datatypes import datatype_of
from pytapp.expression import cached_expression

__all__ = ["COMPILED", "ONE_SHOT", "PEERS", "TARGET_PEERS", "NetworkCase", "NetworkResult",
           "network_cases", "networks_json", "networks_markdown", "networks_plot",
           "networks_table", "run_networks"]

#: pytapp's two contenders: the one-shot call and the compiled expression.
ONE_SHOT, COMPILED = "pytapp.einsum", "pytapp expr"
#: The peers, one-shot then compiled.
PEERS = ("numpy.einsum", "oe.contract", "oe expr", "cotengra expr", "torch.einsum")
#: The peers the networks target names (numpy.einsum, opt_einsum, torch.einsum): the
#: suite's best peer also counts cotengra, a stricter bar reported beside it.
TARGET_PEERS = ("numpy.einsum", "oe.contract", "oe expr", "torch.einsum")
#: Shortest timed sample of a contender in a full run (quick runs: a tenth).
SAMPLE_SECONDS = 0.03
@dataclass(frozen=True)
class NetworkCase:
    """One network: equation, operand shapes and datatype."""

    name: str
    domain: str
    equation: str
    shapes: tuple[tuple[int, ...], ...]
    dtype: str

    def arrays(self, seed: int = 0) -> list[np.ndarray]:
        """Random operands in [-1, 1] (a tenth of the imaginary unit for complex)."""
        rng = np.random.default_rng(seed)
        out = []
        for shape in self.shapes:
            x = rng.uniform(-1, 1, shape)
            if np.dtype(self.dtype).kind == "c":
                x = x + 1j * rng.uniform(-1, 1, shape)
            out.append(x.astype(self.dtype))
        return out


def _mps_norm(sites: int, d: int, chi: int) -> tuple[str, tuple[tuple[int, ...], ...]]:
    letters = iter(string.ascii_letters)
    ket = [next(letters) for _ in range(sites - 1)]
    bra = [next(letters) for _ in range(sites - 1)]
    phys = [next(letters) for _ in range(sites)]
    terms, shapes = [], []
    for bonds in (ket, bra):
        for i in range(sites):
            terms.append((bonds[i - 1] if i else "") + phys[i] +
                         (bonds[i] if i < sites - 1 else ""))
            shapes.append(tuple([chi] * (i > 0) + [d] + [chi] * (i < sites - 1)))
    return ",".join(terms) + "->", tuple(shapes)


def _peps_grid(rows: int, cols: int, bond: int) -> tuple[str, tuple[tuple[int, ...], ...]]:
    letters = iter(string.ascii_letters)
    right = {(r, c): next(letters) for r in range(rows) for c in range(cols - 1)}
    down = {(r, c): next(letters) for r in range(rows - 1) for c in range(cols)}
    terms, shapes = [], []
    for r in range(rows):
        for c in range(cols):
            legs = [right.get((r, c - 1)), right.get((r, c)), down.get((r - 1, c)),
                    down.get((r, c))]
            term = "".join(x for x in legs if x)
            terms.append(term)
            shapes.append((bond,) * len(term))
    return ",".join(terms) + "->", tuple(shapes)


def _quantum_circuit(qubits: int, layers: int) -> tuple[str, tuple[tuple[int, ...], ...]]:
    """<0...0| brickwork circuit of two-qubit gates |0...0>: one amplitude."""
    letters = iter(string.ascii_letters)
    wires = [next(letters) for _ in range(qubits)]
    terms = list(wires)  # the input product state, one vector per qubit
    shapes: list[tuple[int, ...]] = [(2,)] * qubits
    for layer in range(layers):
        for q in range(layer % 2, qubits - 1, 2):
            new = next(letters), next(letters)
            terms.append(new[0] + new[1] + wires[q] + wires[q + 1])
            shapes.append((2, 2, 2, 2))
            wires[q], wires[q + 1] = new
    terms += wires  # the output product state
    shapes += [(2,)] * qubits
    return ",".join(terms) + "->", tuple(shapes)


def network_cases(scale: float = 1.0, quick: bool = False) -> list[NetworkCase]:
    """Return the networks.

    ``scale`` multiplies the main extent of each; ``quick`` makes every network tiny (a tenth
    of the scale: for tests and smoke runs).
    """
    if quick:
        scale *= 0.1

    def s(n: int) -> int:
        return max(2, round(n * scale))

    mps_eq, mps_shapes = _mps_norm(12, 2, s(128))
    peps_eq, peps_shapes = _peps_grid(3, 4, s(12))
    qc_eq, qc_shapes = _quantum_circuit(6, 6 if not quick else 2)
    no, nv, nao = s(14), s(56), s(48)
    b, h, n, dh = 4, 8, s(1024), 64
    env = "awb,asc,wstv,btd->cvd"  # left environment, ket site, MPO site, bra site
    chi, big = s(32), s(400)
    tt, rank = s(16), s(12)
    tucker_n, tucker_r = s(160), s(32)
    cp_n, cp_r = s(128), s(48)
    mera = s(10)
    small = max(2, min(s(8), 8))
    dims = [s(48), s(8), s(96), s(16), s(64), s(24), s(40)]
    return [
        NetworkCase("mps_norm_c128", "tensor network", mps_eq, mps_shapes, "complex128"),
        NetworkCase("peps_3x4_f64", "tensor network", peps_eq, peps_shapes, "float64"),
        NetworkCase("mpo_env_small_c128", "tensor network", env,
                    ((chi, 5, chi), (chi, 2, chi), (5, 2, 2, 5), (chi, 2, chi)), "complex128"),
        NetworkCase("mpo_env_large_f64", "tensor network", env,
                    ((big, 6, big), (big, 4, big), (6, 4, 4, 6), (big, 4, big)), "float64"),
        NetworkCase("tt_matvec_f64", "tensor network", "iap,ajbq,bkcr,cls,pqrs->ijkl",
                    ((tt, rank, tt), (rank, tt, rank, tt), (rank, tt, rank, tt),
                     (rank, tt, tt), (tt, tt, tt, tt)), "float64"),
        NetworkCase("mera_layer_f64", "tensor network", "iab,jcd,bcef,efgh,ghmn,kam,lnd->ijkl",
                    ((mera,) * 3, (mera,) * 3, (mera,) * 4, (mera,) * 4, (mera,) * 4,
                     (mera,) * 3, (mera,) * 3), "float64"),
        NetworkCase("circuit_amplitude_c128", "quantum computing", qc_eq, qc_shapes,
                    "complex128"),
        NetworkCase("ccsd_quadratic_f64", "quantum chemistry", "klcd,cdij,abkl->abij",
                    ((no, no, nv, nv), (nv, nv, no, no), (nv, nv, no, no)), "float64"),
        NetworkCase("ao_to_mo_f64", "quantum chemistry", "pqrs,pi,qj,rk,sl->ijkl",
                    ((nao,) * 4, (nao, nao), (nao, nao), (nao, nao), (nao, nao)), "float64"),
        NetworkCase("tucker_f64", "linear algebra", "abc,ia,jb,kc->ijk",
                    ((tucker_r,) * 3, (tucker_n, tucker_r), (tucker_n, tucker_r),
                     (tucker_n, tucker_r)), "float64"),
        NetworkCase("cp_f32", "linear algebra", "r,ir,jr,kr->ijk",
                    ((cp_r,), (cp_n, cp_r), (cp_n, cp_r), (cp_n, cp_r)), "float32"),
        NetworkCase("chain5_tiny_f64", "linear algebra", "ab,bc,cd,de,ef->af",
                    ((small, small),) * 5, "float64"),
        NetworkCase("chain6_f64", "linear algebra", "ab,bc,cd,de,ef,fg->ag",
                    tuple(itertools.pairwise(dims)), "float64"),
        NetworkCase("linear_attention_f32", "machine learning", "bhqd,bhkd,bhkv->bhqv",
                    ((b, h, n, dh), (b, h, n, dh), (b, h, n, dh)), "float32"),
        NetworkCase("bilinear_f32", "machine learning", "bi,oij,bj->bo",
                    ((s(256), s(128)), (s(64), s(128), s(128)), (s(256), s(128))),
                    "float32"),
    ]


@dataclass
class NetworkResult:
    """Seconds per call (fastest interleaved round) of every contender on one network."""

    case: NetworkCase
    path: list[tuple[int, ...]]
    times: dict[str, float] = field(default_factory=dict)
    errors: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    #: Flops along the path (opt_einsum's count, times 4 for complex datatypes).
    flops: float = math.nan
    #: Seconds of the roof: the flops at the best GEMM rate, or the bytes at the copy
    #: bandwidth, whichever is longer (NaN: not measured).
    roof_s: float = math.nan

    def best_peer(self, peers: Sequence[str] = PEERS) -> float:
        """Return the fastest of ``peers``' seconds (NaN when none ran)."""
        return min((t for n, t in self.times.items() if n in peers), default=math.nan)

    def target_ratios(self) -> tuple[float, float]:
        """One-shot and compiled ratios to the best of :data:`TARGET_PEERS` (no cotengra)."""
        best = self.best_peer(TARGET_PEERS)
        return (best / self.times.get(ONE_SHOT, math.nan),
                best / self.times.get(COMPILED, math.nan))

    @property
    def oneshot_ratio(self) -> float:
        """Best peer's time over one-shot ``pytapp.einsum``'s (> 1: pytapp is faster)."""
        return self.best_peer() / self.times.get(ONE_SHOT, math.nan)

    @property
    def ratio(self) -> float:
        """Best peer's time over the compiled expression's (> 1: pytapp is faster)."""
        return self.best_peer() / self.times.get(COMPILED, math.nan)

    @property
    def roof_pct(self) -> float:
        """The compiled expression's speed in % of the roof."""
        return 100.0 * self.roof_s / self.times.get(COMPILED, math.nan)


def _contenders(case: NetworkCase, arrays: list[np.ndarray], path: list[tuple[int, ...]],
                backend: str | None) -> tuple[Any, dict[str, Callable[[], Any] | str]]:
    """Return the compiled expression, and every contender (a reason when it cannot run)."""
    import pytapp

    eq = case.equation
    expr = pytapp.einsum_expression(eq, *arrays, optimize=path, backend=backend)
    found: dict[str, Callable[[], Any] | str] = {
        ONE_SHOT: lambda: pytapp.einsum(eq, *arrays, optimize=path, backend=backend),
        COMPILED: lambda: expr(*arrays),
        "numpy.einsum": lambda: np.einsum(eq, *arrays, optimize=["einsum_path", *path]),
    }
    try:
        import opt_einsum

        oe_expr = opt_einsum.contract_expression(eq, *[a.shape for a in arrays], optimize=path)
        found["oe.contract"] = lambda: opt_einsum.contract(eq, *arrays, optimize=path)
        found["oe expr"] = lambda: oe_expr(*arrays)
    except ImportError:
        found["oe.contract"] = found["oe expr"] = "opt_einsum is not installed"
    try:
        import cotengra

        ctg_expr = cotengra.einsum_expression(eq, *[a.shape for a in arrays], optimize=path)
        found["cotengra expr"] = lambda: ctg_expr(*arrays)
    except ImportError:
        found["cotengra expr"] = "cotengra is not installed (pip install pytapp[paths])"
    try:
        import torch

        tensors = [torch.from_numpy(a) for a in arrays]
        found["torch.einsum"] = lambda: torch.einsum(eq, *tensors)
    except ImportError:
        found["torch.einsum"] = "torch is not installed"
    return expr, found


def _relative_error(got: Any, want: np.ndarray) -> float:
    value = np.asarray(got.numpy() if hasattr(got, "numpy") else got, dtype=want.dtype)
    return float(np.max(np.abs(value - want), initial=0) / max(np.max(np.abs(want)), 1e-300))


def _gemm_rates(cases: Sequence[NetworkCase]) -> dict[str, float]:
    """Best GEMM GFLOP/s per datatype short name, measured now."""
    rates = measure_peaks([datatype_of(c.dtype, "dtype") for c in cases])["gemm_gflops"]
    return {str(k): float(v) for k, v in rates.items()}


def run_networks(cases: Sequence[NetworkCase] | None = None, repeats: int = 5,
                 scale: float = 1.0, backend: str | None = None,
                 progress: Callable[[str], None] | None = None, roof: bool = True,
                 sample_seconds: float = SAMPLE_SECONDS, min_seconds: float = 0.0,
                 threads: int | None = None,
                 settle_seconds: float = SETTLE_SECONDS) -> list[NetworkResult]:
    """Time every contender on every network (see the module docstring).

    ``repeats`` interleaved rounds per network (more until each contender ran
    ``min_seconds``), samples of ``sample_seconds``; ``roof`` measures the GEMM rates first;
    ``threads`` for every library (default: each library's own); ``settle_seconds``: the
    pause before a sample on another thread pool than the one before (torch's or NumPy's
    BLAS; see :data:`pytapp.bench.harness.SETTLE_SECONDS`).
    """
    chosen = list(cases) if cases is not None else network_cases(scale)
    with thread_limits(threads):
        rates = _gemm_rates(chosen) if roof else {}
        return [_run_case(case, repeats, backend, progress, rates, sample_seconds,
                          min_seconds, settle_seconds) for case in chosen]


def _run_case(case: NetworkCase, repeats: int, backend: str | None,
              progress: Callable[[str], None] | None, rates: dict[str, float],
              sample_seconds: float, min_seconds: float,
              settle_seconds: float) -> NetworkResult:
    import opt_einsum

    if progress is not None:
        progress(case.name)
    arrays = case.arrays()
    path_found, info = opt_einsum.contract_path(case.equation, *arrays, optimize="greedy")
    path = [tuple(p) for p in path_found]
    wide = [a.astype(np.complex128 if a.dtype.kind == "c" else np.float64) for a in arrays]
    want = np.asarray(np.einsum(case.equation, *wide, optimize=["einsum_path", *path]))
    result = NetworkResult(case, path)
    complex_factor = 4 if np.dtype(case.dtype).kind == "c" else 1
    result.flops = float(info.opt_cost) * complex_factor
    rate = rates.get(datatype_of(case.dtype, "dtype").short_name, math.nan)
    if rate > 0:
        # the operands and the result moved once, every intermediate written and read once
        sizes = [int(x) for x in info.size_list]
        moved = np.dtype(case.dtype).itemsize * (
            sum(a.size for a in arrays) + 2 * sum(sizes[:-1]) + sizes[-1])
        result.roof_s = max(result.flops / (rate * 1e9), moved / (copy_bandwidth(moved) * 1e9))
    expr, found = _contenders(case, arrays, path, backend)
    calls: dict[str, Callable[[], Any]] = {}
    for name, fn in found.items():
        if isinstance(fn, str):
            result.notes[name] = fn
            continue
        result.errors[name] = _relative_error(fn(), want)
        calls[name] = fn
    one_shot = cached_expression(case.equation, arrays, path, None, backend, None)

    def pool_of(name: str) -> str:  # torch's own pool, or NumPy's BLAS (the peers' and ours)
        if name == "torch.einsum":
            return "torch"
        used = expr if name == COMPILED else one_shot if name == ONE_SHOT else None
        return "torch" if used is not None and "torch" in used.choices.values() else "blas"

    rounds = interleaved(calls, rounds=repeats, sample_seconds=sample_seconds,
                         min_seconds=min_seconds, max_seconds=60.0, pool_of=pool_of,
                         settle_seconds=settle_seconds)
    result.times = {name: min(t) for name, t in rounds.items()}
    # A time some contender reached is attainable here: the roof is never slower than it.
    if math.isfinite(result.roof_s):
        result.roof_s = min(result.roof_s, *result.times.values())
    for name, used in ((COMPILED, expr), (ONE_SHOT, one_shot)):
        ran_on = ", ".join(sorted(set(used.choices.values()))) or used.backend
        result.notes[name] = f"ran on {ran_on}"
    return result


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}" if seconds < 1e-2 else f"{seconds * 1e3:.1f}"


def networks_table(results: Sequence[NetworkResult]) -> str:
    """Return a text table: milliseconds per contender, the ratios, roof and geometric means."""
    names = [ONE_SHOT, COMPILED, *PEERS]
    head = f"{'network':<24}" + "".join(f"{n:>14}" for n in names) + \
        f"{'1-shot':>8}{'expr':>7}{'roof':>6}"
    lines = ["milliseconds per call (fastest interleaved round); ratios: best peer's time "
             "over pytapp's", head, "-" * len(head)]
    for r in results:
        cells = "".join(f"{_ms(r.times[n]):>14}" if n in r.times else f"{'n/a':>14}"
                        for n in names)
        roof = f"{r.roof_pct:>5.0f}%" if math.isfinite(r.roof_pct) else f"{'-':>6}"
        lines.append(f"{r.case.name:<24}{cells}{r.oneshot_ratio:>7.2f}x{r.ratio:>6.2f}x{roof}")
    one = [r.oneshot_ratio for r in results]
    comp = [r.ratio for r in results]
    lines.append(f"one-shot pytapp.einsum vs best peer: geometric mean {geometric_mean(one):.2f}x, "
                 f"lowest {min(one, default=math.nan):.2f}x (target >= 1.2x, none < 0.95x)")
    lines += summary_lines(
        comp, [e for r in results for e in r.errors.values()],
        "compiled einsum_expression vs best peer: geometric mean {geo:.2f}x, lowest "
        f"{min(comp, default=math.nan):.2f}x (target >= 1.3x, none < 0.95x)",
        "largest relative error vs numpy.einsum (float64/complex128): {worst:.1e}")
    for label, k in (("one-shot pytapp.einsum", 0), ("compiled einsum_expression", 1)):
        values = [r.target_ratios()[k] for r in results]
        lines.append(f"{label} vs the best of numpy.einsum, opt_einsum and torch.einsum "
                     f"(cotengra left out): geometric mean {geometric_mean(values):.2f}x, "
                     f"lowest {min(values, default=math.nan):.2f}x")
    return "\n".join(lines)


def networks_json(results: Sequence[NetworkResult]) -> dict[str, Any]:
    """Return the results as JSON-ready data."""
    def num(x: float) -> float | None:
        return x if math.isfinite(x) else None

    return {"suite": "networks", "cases": [
        {"name": r.case.name, "domain": r.case.domain, "equation": r.case.equation,
         "shapes": [list(s) for s in r.case.shapes], "dtype": r.case.dtype,
         "path": [list(p) for p in r.path], "seconds": r.times, "errors": r.errors,
         "notes": r.notes, "flops": num(r.flops), "roof_seconds": num(r.roof_s),
         "roof_pct": num(r.roof_pct), "oneshot_ratio_to_best_peer": num(r.oneshot_ratio),
         "ratio_to_best_peer": num(r.ratio),
         "oneshot_ratio_to_target_peers": num(r.target_ratios()[0]),
         "ratio_to_target_peers": num(r.target_ratios()[1])} for r in results],
        "geomean_oneshot": num(geometric_mean([r.oneshot_ratio for r in results])),
        "geomean_compiled": num(geometric_mean([r.ratio for r in results]))}


def networks_plot(results: Sequence[NetworkResult], path: str) -> None:
    """Draw a bar chart: pytapp's speed relative to the best peer, one-shot and compiled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    x = np.arange(len(results))
    for i, (label, values) in enumerate((
            ("one-shot pytapp.einsum", [r.oneshot_ratio for r in results]),
            ("einsum_expression", [r.ratio for r in results]))):
        ax.bar(x + (i - 0.5) * 0.4, [v if math.isfinite(v) else 0.0 for v in values], 0.4,
               label=label)
    ax.set_xticks(x, [r.case.name for r in results], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("best peer's time / pytapp's (higher: pytapp faster)")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.legend(fontsize=8)
    ax.set_title("pytapp bench --suite networks (same path for every contender)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def networks_markdown(results: Sequence[NetworkResult], plot: str | None = None) -> str:
    """Return a Markdown report: the table, then each network's equation and path."""
    lines = ["# Networks benchmark", "",
             "Each network is contracted along the same path (opt_einsum's greedy) by every "
             "contender but torch.einsum (its own path). Contenders are timed in interleaved "
             "rounds: each round times every contender once, in a shuffled order, as a sample "
             "of repeated calls lasting tens of milliseconds; the fastest round is kept. "
             "`pytapp.einsum` is the one-shot call with the path, `pytapp expr` an "
             "`einsum_expression` built once; `oe` is opt_einsum. The ratio columns are the "
             "best peer's time over pytapp's (above 1: pytapp is faster); roof: the "
             "expression's speed in % of the roof: the network's flops at the best GEMM rate "
             "of its datatype or its bytes (operands and result once, intermediates twice) at "
             "the copy bandwidth of that working set, whichever takes longer, both measured in "
             "the same run (or the fastest contender's speed when that is higher). Every "
             "result is checked against numpy.einsum in float64/complex128.", "", "```",
             networks_table(results), "```", ""]
    if plot:
        lines += [f"![networks]({plot})", ""]
    for r in results:
        lines += [f"- **{r.case.name}** ({r.case.domain}, {r.case.dtype}, "
                  f"{r.flops:.3g} flops): `{r.case.equation}` shapes "
                  f"{[list(s) for s in r.case.shapes]}, path {r.path}; "
                  f"one-shot {r.notes.get(ONE_SHOT, '')}, compiled "
                  f"{r.notes.get(COMPILED, '')}"]
    return "\n".join(lines) + "\n"
