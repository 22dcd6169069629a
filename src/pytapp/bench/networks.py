"""``pytapp bench --suite networks``: whole einsum networks against the libraries people use.

Five networks from the fields pytapp serves (tensor networks, quantum chemistry, machine
learning). Every contender contracts the same network along the same path (the greedy path of
opt_einsum, which torch.einsum also picks): ``pytapp.einsum_expression``, opt_einsum's
``contract_expression`` on NumPy, cotengra's ``einsum_expression`` on NumPy, and
``torch.einsum`` on tensors sharing the arrays' memory. Each result is checked against
numpy.einsum in float64/complex128; the ratio is the best peer's time over pytapp's.

Examples
--------
>>> result = run_networks(cases=network_cases()[:1], repeats=1, scale=0.25)
>>> result[0].times["pytapp"] > 0
True
"""

from __future__ import annotations

import math
import string
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytapp.bench.harness import summary_lines, time_call

__all__ = ["NetworkCase", "NetworkResult", "network_cases", "networks_json", "networks_markdown",
           "networks_plot", "networks_table", "run_networks"]

PEERS = ("opt_einsum", "cotengra", "torch.einsum")


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


def network_cases(scale: float = 1.0) -> list[NetworkCase]:
    """Return the five networks; ``scale`` multiplies the main extent of each (for quick runs)."""
    def s(n: int) -> int:
        return max(2, round(n * scale))

    mps_eq, mps_shapes = _mps_norm(12, 2, s(128))
    peps_eq, peps_shapes = _peps_grid(3, 4, s(12))
    no, nv, nao = s(14), s(56), s(48)
    b, h, n, dh = 4, 8, s(1024), 64
    return [
        NetworkCase("mps_norm_c128", "tensor network", mps_eq, mps_shapes, "complex128"),
        NetworkCase("peps_3x4_f64", "tensor network", peps_eq, peps_shapes, "float64"),
        NetworkCase("ccsd_quadratic_f64", "quantum chemistry", "klcd,cdij,abkl->abij",
                    ((no, no, nv, nv), (nv, nv, no, no), (nv, nv, no, no)), "float64"),
        NetworkCase("ao_to_mo_f64", "quantum chemistry", "pqrs,pi,qj,rk,sl->ijkl",
                    ((nao,) * 4, (nao, nao), (nao, nao), (nao, nao), (nao, nao)), "float64"),
        NetworkCase("linear_attention_f32", "machine learning", "bhqd,bhkd,bhkv->bhqv",
                    ((b, h, n, dh), (b, h, n, dh), (b, h, n, dh)), "float32"),
    ]


@dataclass
class NetworkResult:
    """Times (median seconds) of every contender on one network."""

    case: NetworkCase
    path: list[tuple[int, ...]]
    times: dict[str, float] = field(default_factory=dict)
    errors: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """Best peer's time over pytapp's (> 1: pytapp is faster)."""
        peers = [t for name, t in self.times.items() if name != "pytapp"]
        return min(peers) / self.times["pytapp"] if peers and "pytapp" in self.times \
            else math.nan


def _contenders(case: NetworkCase, arrays: list[np.ndarray], path: list[tuple[int, ...]],
                expr: Any) -> dict[str, Callable[[], Any] | str]:
    found: dict[str, Callable[[], Any] | str] = {"pytapp": lambda: expr(*arrays)}
    try:
        import opt_einsum

        oe_expr = opt_einsum.contract_expression(case.equation, *[a.shape for a in arrays],
                                                 optimize=path)
        found["opt_einsum"] = lambda: oe_expr(*arrays)
    except ImportError:
        found["opt_einsum"] = "opt_einsum is not installed"
    try:
        import cotengra

        ctg_expr = cotengra.einsum_expression(case.equation, *[a.shape for a in arrays],
                                              optimize=path)
        found["cotengra"] = lambda: ctg_expr(*arrays)
    except ImportError:
        found["cotengra"] = "cotengra is not installed (pip install pytapp[paths])"
    try:
        import torch

        tensors = [torch.from_numpy(a) for a in arrays]
        found["torch.einsum"] = lambda: torch.einsum(case.equation, *tensors)
    except ImportError:
        found["torch.einsum"] = "torch is not installed"
    return found


def _relative_error(got: Any, want: np.ndarray) -> float:
    value = np.asarray(got.numpy() if hasattr(got, "numpy") else got, dtype=want.dtype)
    return float(np.max(np.abs(value - want), initial=0) / max(np.max(np.abs(want)), 1e-300))


def run_networks(cases: Sequence[NetworkCase] | None = None, repeats: int = 5,
                 scale: float = 1.0, backend: str | None = None,
                 progress: Callable[[str], None] | None = None) -> list[NetworkResult]:
    """Time every contender on every network (see the module docstring)."""
    import opt_einsum

    import pytapp

    results = []
    for case in cases if cases is not None else network_cases(scale):
        arrays = case.arrays()
        path = [tuple(p) for p in opt_einsum.contract_path(case.equation, *arrays,
                                                           optimize="greedy")[0]]
        wide = [a.astype(np.complex128 if a.dtype.kind == "c" else np.float64) for a in arrays]
        want = np.asarray(np.einsum(case.equation, *wide, optimize=["einsum_path", *path]))
        result = NetworkResult(case, path)
        expr = pytapp.einsum_expression(case.equation, *arrays, optimize=path,
                                        backend=backend)
        for name, fn in _contenders(case, arrays, path, expr).items():
            if isinstance(fn, str):
                result.notes[name] = fn
                continue
            if progress is not None:
                progress(f"{case.name}: {name}")
            time.sleep(0.2)  # let the previous contender's idle threads stop spinning
            result.errors[name] = _relative_error(fn(), want)
            result.times[name] = float(np.median(time_call(fn, repeats=repeats, max_seconds=30)))
        ran_on = ", ".join(sorted(set(expr.choices.values()))) or expr.backend
        result.notes["pytapp"] = f"ran on {ran_on}"
        results.append(result)
    return results


def networks_table(results: Sequence[NetworkResult]) -> str:
    """Return a text table: milliseconds per contender, the ratio and the geometric mean."""
    names = ["pytapp", *PEERS]
    head = f"{'network':<22} {'domain':<18}" + "".join(f"{n:>14}" for n in names) + \
        f"{'vs best':>9}"
    lines = [head, "-" * len(head)]
    for r in results:
        cells = "".join(f"{r.times[n] * 1e3:>11.2f} ms" if n in r.times else f"{'n/a':>14}"
                        for n in names)
        lines.append(f"{r.case.name:<22} {r.case.domain:<18}{cells}{r.ratio:>8.2f}x")
    lines += summary_lines(
        [r.ratio for r in results], [e for r in results for e in r.errors.values()],
        "geometric mean of best-peer time / pytapp time: {geo:.2f}x (> 1: pytapp faster)",
        "largest relative error vs numpy.einsum (float64/complex128): {worst:.1e}")
    return "\n".join(lines)


def networks_json(results: Sequence[NetworkResult]) -> dict[str, Any]:
    """Return the results as JSON-ready data."""
    return {"suite": "networks", "cases": [
        {"name": r.case.name, "domain": r.case.domain, "equation": r.case.equation,
         "shapes": [list(s) for s in r.case.shapes], "dtype": r.case.dtype,
         "path": [list(p) for p in r.path], "seconds": r.times, "errors": r.errors,
         "notes": r.notes, "ratio_to_best_peer": r.ratio} for r in results]}


def networks_plot(results: Sequence[NetworkResult], path: str) -> None:
    """Return a bar chart: each contender's time relative to pytapp's, per network."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["pytapp", *PEERS]
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        speed = [r.times["pytapp"] / r.times[name] if name in r.times else 0.0
                 for r in results]
        ax.bar([j + i * width for j in range(len(results))], speed, width, label=name)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(results))],
                  [r.case.name for r in results], rotation=15, fontsize=8)
    ax.set_ylabel("speed relative to pytapp (higher is faster)")
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
             "contender; times are medians; the last column is the best peer's time over "
             "pytapp's (above 1: pytapp is faster). Every result is checked against "
             "numpy.einsum in float64/complex128.", "", "```", networks_table(results), "```",
             ""]
    if plot:
        lines += [f"![networks]({plot})", ""]
    for r in results:
        lines += [f"- **{r.case.name}** ({r.case.domain}, {r.case.dtype}): "
                  f"`{r.case.equation}` shapes {[list(s) for s in r.case.shapes]}, "
                  f"path {r.path}; pytapp {r.notes.get('pytapp', '')}"]
    return "\n".join(lines) + "\n"
