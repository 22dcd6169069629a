"""Benchmark reports: terminal table, JSON, Markdown and a PNG plot.

Examples
--------
>>> from pytapp.bench.harness import run_bench
>>> from pytapp.bench.cases import small_family
>>> res = run_bench(small_family()[:1], peers=["numpy"], repeats=2, measure_peaks=False)
>>> "small_0" in table_text(res)
True
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pytapp.bench.harness import BenchResult, Measurement

__all__ = ["from_json", "names", "table_rows", "table_text", "to_json", "write_json",
           "write_markdown", "write_plot"]


def names(result: BenchResult) -> list[str]:
    """Contender names in order of first appearance (backends first)."""
    seen: dict[str, str] = {}
    for case in result.cases:
        for name, m in case.measurements.items():
            if m.kind != "?" or name not in seen:
                seen.setdefault(name, m.kind)
    return sorted(seen, key=lambda n: (seen[n] != "backend", list(seen).index(n)))


def _cell(m: Measurement | None) -> str:
    if m is None:
        return "-"
    if not m.timed:
        return "n/a"
    text = f"{m.gflops:.2f}" if m.gflops < 100 else f"{m.gflops:.0f}"
    return text if m.verdict == "ok" else f"{text} WRONG"


def table_rows(result: BenchResult) -> tuple[list[str], list[list[str]], list[str]]:
    """(header, rows, notes): GFLOP/s per contender, then per backend ratio and % roofline."""
    cols = names(result)
    backends = [n for n in cols if any(c.measurements.get(n) and c.measurements[n].kind ==
                                       "backend" for c in result.cases)]
    header = ["case", "dtype", *[f"{n} GF/s" for n in cols]]
    header += [f"{n} vs best peer" for n in backends] + [f"{n} % roof" for n in backends]
    rows, notes = [], []
    for c in result.cases:
        row = [c.case.name, c.case.dtype]
        row += [_cell(c.measurements.get(n)) for n in cols]
        for n in backends:
            m = c.measurements.get(n)
            row.append(f"{m.ratio_to_best_peer:.2f}x" if m and m.timed and
                       not math.isnan(m.ratio_to_best_peer) else "-")
        for n in backends:
            m = c.measurements.get(n)
            row.append(f"{m.roofline_pct:.0f}%" if m and m.timed and
                       not math.isnan(m.roofline_pct) else "-")
        rows.append(row)
        for n, m in c.measurements.items():
            if m.verdict != "ok":
                notes.append(f"{c.case.name} / {n}: {m.verdict}")
    summary = ["geometric mean", ""] + [""] * len(cols)
    summary += [f"{result.geomean_ratio(n):.2f}x" for n in backends] + [""] * len(backends)
    rows.append(summary)
    if len(backends) > 1:
        for n in backends:
            notes.append(f"{n}: geometric mean of (fastest other backend / {n}) = "
                         f"{result.geomean_vs_best_backend(n):.2f}")
    return header, rows, notes


def table_text(result: BenchResult) -> str:
    """Return the table as plain aligned text."""
    header, rows, notes = table_rows(result)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)


def to_json(result: BenchResult) -> dict[str, Any]:
    """Return the JSON record of a run (schema: environment, peaks, cases[].results{name: ...})."""

    def num(x: float) -> float | None:
        return None if x is None or (isinstance(x, float) and math.isnan(x)) else x

    cases = []
    for c in result.cases:
        cases.append({
            **c.case.to_json(),
            "flops": c.case.flops,
            "attainable_gflops": num(c.attainable_gflops),
            "bound": c.bound,
            "results": {
                n: {"kind": m.kind, "verdict": m.verdict, "median_s": num(m.median_s),
                    "min_s": num(m.min_s), "repeats": m.repeats, "gflops": num(m.gflops),
                    "ratio_to_best_peer": num(m.ratio_to_best_peer),
                    "roofline_pct": num(m.roofline_pct),
                    "peak_extra_bytes": m.peak_extra_bytes, "algorithm": m.algorithm}
                for n, m in c.measurements.items()
            },
        })
    summary = {n: num(result.geomean_ratio(n)) for n in names(result)}
    vs_backends = {n: num(result.geomean_vs_best_backend(n)) for n in names(result)
                   if any(c.measurements.get(n) and c.measurements[n].kind == "backend"
                          for c in result.cases)}
    return {"suite": result.suite, "environment": result.environment, "peaks": result.peaks,
            "cases": cases, "geomean_ratio_to_best_peer": summary,
            "geomean_vs_best_other_backend": vs_backends}


def write_json(result: BenchResult, path: str | Path) -> None:
    """Write :func:`to_json` to ``path``."""
    Path(path).write_text(json.dumps(to_json(result), indent=1) + "\n", encoding="utf-8")


def write_markdown(result: BenchResult, path: str | Path, plot: str | None = None) -> None:
    """Write the table and the environment as Markdown."""
    header, rows, notes = table_rows(result)
    env = result.environment
    lines = [
        "# pytapp benchmarks",
        "",
        f"Suite `{result.suite}`, measured {env.get('date', '')} on {env.get('cpu', '?')} "
        f"({env.get('cores')} cores, threads: {env.get('threads') or 'library default'}).",
        "GFLOP/s from the case's least work (isolated labels summed first, 2 flops per "
        "multiply-add, 3 per element of D for the epilogue; per call, in the fastest of "
        "interleaved rounds: each round times every contender once, in a shuffled order, as a "
        "sample of repeated calls lasting tens of milliseconds); ratio = best peer's time / "
        "backend's time (above 1 is faster than every peer); % roof = share of "
        "the roofline (the best measured GEMM rate of numpy or torch, or the best copy bandwidth "
        "for the case's working set times its arithmetic intensity; raised to the best rate a "
        "contender reached on the case when that is higher, since it is attainable here).",
        "Every contender computes the whole TAPP operation D = 0.75 A B - 0.5 C: backends "
        "through a reused plan into a preallocated D; numpy.einsum and opt_einsum into a "
        "preallocated output, then the epilogue with in-place ufuncs; pytblis with alpha and "
        "beta fused (C copied into the output first); torch.einsum, then mul_ and add_ in "
        "place. Each contender is timed after a 0.3 s pause, so that the spinning worker "
        "threads of the previous library do not share its cores.",
        "",
    ]
    if plot:
        lines += [f"![speed ratio per case]({plot})", ""]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join("---" for _ in header) + "|")
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", "## Notes", ""] + ([f"- {n}" for n in notes] or ["- every result verified"])
    lines += ["", "## Environment", "", "```json", json.dumps(env, indent=1),
              json.dumps(result.peaks, indent=1), "```", ""]
    Path(path).write_text("\n".join(lines), encoding="utf-8")


def write_plot(result: BenchResult, path: str | Path) -> None:
    """Bar chart: speed ratio to the best peer per case, one bar per contender."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = names(result)
    cases = [c.case.name for c in result.cases]
    fig, ax = plt.subplots(figsize=(min(18.0, max(8.0, 0.75 * len(cases))), 6.0))
    width = 0.8 / max(len(cols), 1)
    for i, name in enumerate(cols):
        values = []
        for c in result.cases:
            m = c.measurements.get(name)
            values.append(m.ratio_to_best_peer if m and m.timed else 0.0)
        xs = [j + i * width for j in range(len(cases))]
        ax.bar(xs, values, width=width, label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cases))])
    ax.set_xticklabels(cases, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("speed / best peer (higher is faster)")
    ax.set_title(f"pytapp bench --suite {result.suite}")
    ax.legend(fontsize=8, ncol=min(len(cols), 4))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def from_json(data: dict[str, Any]) -> BenchResult:
    """Rebuild a :class:`BenchResult` from :func:`to_json`'s record (to redraw reports)."""
    from pytapp.bench.cases import BenchCase
    from pytapp.bench.harness import CaseResult

    def num(x: Any) -> float:
        return math.nan if x is None else float(x)

    result = BenchResult(data["suite"], data["environment"], data["peaks"])
    for c in data["cases"]:
        case = BenchCase(c["name"], c["domain"], c["einsum"], c["extents"], c["dtype"],
                         c.get("note", ""))
        cr = CaseResult(case, attainable_gflops=num(c.get("attainable_gflops")),
                        bound=c.get("bound", ""))
        for name, m in c["results"].items():
            cr.measurements[name] = Measurement(
                name, m["kind"], m["verdict"], num(m["median_s"]), num(m["min_s"]),
                m["repeats"], num(m["gflops"]), num(m["ratio_to_best_peer"]),
                num(m["roofline_pct"]), m["peak_extra_bytes"], m["algorithm"])
        result.cases.append(cr)
    return result
