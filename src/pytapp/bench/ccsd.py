"""``pytapp bench --suite cc``: a coupled-cluster-like workload, the way a CC code runs it.

About thirty distinct contractions of CCSD's shape (amplitudes ``ia`` and ``ijab`` with
integrals and intermediates over ``o`` occupied and ``v`` virtual orbitals; operands of
10^4-10^7 elements) are each executed once per iteration for :data:`ITERATIONS` iterations,
in a loop, by every contender: ``pytapp.einsum`` on the default backend, ``pytapp.einsum``
with each single backend forced, ``numpy.einsum(optimize=True)`` and ``pytblis.einsum``.
Contenders are interleaved by iteration: each round clears pytapp's plan caches and remembered
calls (so planning and any tuning count, in iteration 0, as in a new run), then runs the
iterations, each one's contenders in a freshly shuffled order, every contender running the
whole iteration (all the contractions, about 0.1 s) as one sample. A contender's time is the
sum over iterations of its least time for that iteration over the rounds: samples of a tenth
of a second, interleaved, as the suites' rule asks, where a whole 2-second loop as one sample
let the machine's slow phases decide (one loop of identical calls took 1.74-1.92 s). Each
result is checked against numpy.einsum in float64.

pytapp runs as on a machine without wisdom: the suite keeps tuning results in memory
(``PYTAPP_WISDOM=off`` while it runs) and forgets them before each round. Choices recorded
in this machine's wisdom file by earlier tuning would otherwise decide the default's time (a
file here had tblis for six of ten products, each timed alone, where tblis's spinning pool
then slows the OpenBLAS call after it in the loop). Each round starts right after
``gc.collect()``: the plans and expressions a cleared cache let go are the previous round's
garbage, which Python's collector would otherwise reclaim inside some contender's iteration.

Examples
--------
>>> r = run_cc(size=0.25, rounds=1, iterations=1, contenders=["pytapp", "numpy"])
>>> sorted(r.totals)
['numpy', 'pytapp']
"""

from __future__ import annotations

import gc
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["CONTENDERS", "CcResult", "cc_json", "cc_markdown", "cc_shapes", "cc_table",
           "cc_terms", "run_cc"]

#: Iterations of the loop: each contraction runs once per iteration.
ITERATIONS = 20

#: The thread pool each contender runs on: a sample on another pool than the one before
#: waits :data:`pytapp.bench.harness.SETTLE_SECONDS` first (pools spin after their calls).
POOLS = {"pytapp": "openblas", "pytapp[blas]": "openblas", "numpy": "openblas",
         "pytapp[tblis]": "tblis", "pytblis": "tblis", "pytapp[torch]": "torch"}

#: Every contender: pytapp on the default backend, each backend forced, and the peers.
CONTENDERS = ("pytapp", "pytapp[blas]", "pytapp[tblis]", "pytapp[torch]", "numpy", "pytblis")

# Operands by the orbital classes of their modes: o (occupied) or v (virtual).
_TERMS = (
    "ijab,abcd->ijcd", "ijef,abef->ijab", "ijab,kjcb->ikac", "ijab,jkbc->ikac",
    "kbcj,ikac->ijab", "ia,jb->ijab", "iajb,jb->ia", "iabj,jb->ia", "ijkl,klab->ijab",
    "klij,klab->ijab", "ki,kjab->ijab", "kjab,ki->ijab", "ac,ijcb->ijab", "ijcb,ac->ijab",
    "kc,ic->ki", "kc,ka->ac", "klcd,ijcd->ijkl", "klcd,ilcd->ki", "klcd,klad->ac",
    "kija,kb->ijab", "abcj,ic->ijab", "kbcd,kd->bc", "kc,ikac->ia", "akic,kc->ia",
    "ijab,ijab->", "ia,ia->", "ic,jc->ij", "kacb,kc->ab", "ijka,kb->ijab", "ic,abcj->ijab",
    "ijac,bc->ijab", "klic,klac->ia",
)


def cc_terms() -> list[str]:
    """Return the workload's einsum equations (o-class labels: i-n; v-class: a-h)."""
    return list(_TERMS)


def _shape(labels: str, o: int, v: int) -> tuple[int, ...]:
    return tuple(o if ch in "ijklmn" else v for ch in labels)


def _sizes(size: float) -> tuple[int, int]:
    return max(2, round(12 * size)), max(2, round(48 * size))


def cc_shapes(size: float = 1.0) -> list[tuple[str, list[tuple[int, ...]]]]:
    """Each term with its operand shapes at ``size`` (for ``pytapp tune --suite cc``)."""
    o, v = _sizes(size)
    return [(eq, [_shape(t, o, v) for t in eq.split("->")[0].split(",")]) for eq in _TERMS]


def _operands(o: int, v: int, seed: int = 0) -> list[tuple[str, list[np.ndarray]]]:
    rng = np.random.default_rng(seed)
    work = []
    for eq in _TERMS:
        inputs = eq.split("->")[0].split(",")
        work.append((eq, [rng.uniform(-1, 1, _shape(t, o, v)) for t in inputs]))
    return work


@dataclass
class CcResult:
    """Seconds of the whole loop per contender and per term.

    ``totals``: the sum over iterations of each iteration's least time over the rounds;
    ``per_term``: the same sum for each contraction alone.
    """

    o: int
    v: int
    iterations: int
    totals: dict[str, float] = field(default_factory=dict)
    per_term: dict[str, dict[str, float]] = field(default_factory=dict)
    errors: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    def ratio(self, name: str, against: str) -> float:
        """``against``'s time over ``name``'s (above 1: ``name`` is faster)."""
        return self.totals[against] / self.totals[name]

    def best_forced(self) -> str | None:
        """Return the fastest single backend forced."""
        forced = [n for n in self.totals if n.startswith("pytapp[")]
        return min(forced, key=lambda n: self.totals[n]) if forced else None


def _contender(name: str) -> Callable[[str, list[np.ndarray]], Any]:
    if name == "numpy":
        return lambda eq, ops: np.einsum(eq, *ops, optimize=True)
    if name == "pytblis":
        import pytblis

        return lambda eq, ops: pytblis.einsum(eq, *ops)
    import pytapp

    backend = name[len("pytapp["):-1] if name.startswith("pytapp[") else None
    pytapp.Handle(backend).destroy()  # unavailable: code 18 now, not inside the loop
    return lambda eq, ops: pytapp.einsum(eq, *ops, backend=backend)


def run_cc(size: float = 1.0, rounds: int = 3, iterations: int = ITERATIONS,
           contenders: Sequence[str] = CONTENDERS,
           progress: Callable[[str], None] | None = None,
           threads: int | None = None, settle_seconds: float | None = None) -> CcResult:
    """Run the workload; ``size`` scales o=12 and v=48 (at least 2 each).

    ``threads``: every library's thread count (default: each library's own);
    ``settle_seconds``: the pause before a sample on another thread pool than the one before
    (default :data:`pytapp.bench.harness.SETTLE_SECONDS`).

    Returns
    -------
    CcResult
        Each contender's loop time (the sum of its iterations' least times over ``rounds``),
        the same per term, and its largest relative error against numpy.einsum.
    """
    from pytapp import wisdom
    from pytapp.bench.harness import SETTLE_SECONDS, thread_limits

    saved = os.environ.get("PYTAPP_WISDOM")
    os.environ["PYTAPP_WISDOM"] = "off"  # tuning results stay in memory, forgotten per loop
    wisdom.forget()
    try:
        with thread_limits(threads):
            return _run(size, rounds, iterations, contenders, progress,
                        SETTLE_SECONDS if settle_seconds is None else settle_seconds)
    finally:
        if saved is None:
            os.environ.pop("PYTAPP_WISDOM", None)
        else:
            os.environ["PYTAPP_WISDOM"] = saved
        wisdom.forget()


def _run(size: float, rounds: int, iterations: int, contenders: Sequence[str],
         progress: Callable[[str], None] | None, settle_seconds: float) -> CcResult:
    import pytapp
    from pytapp import wisdom
    from pytapp.bench.harness import settle
    from pytapp.numpy_api import forget_calls

    o, v = _sizes(size)
    work = _operands(o, v)
    want = [np.einsum(eq, *ops, optimize=True) for eq, ops in work]
    result = CcResult(o, v, iterations)
    calls: dict[str, Callable[[str, list[np.ndarray]], Any]] = {}
    for name in contenders:
        try:
            calls[name] = _contender(name)
        except Exception as exc:  # not installed or not available here: reported, not timed
            result.skipped[name] = str(exc).splitlines()[0]
    inf = float("inf")
    # least seconds of each (contender, iteration) and of each term in it, over the rounds
    least = {name: [inf] * iterations for name in calls}
    terms = {name: {eq: [inf] * iterations for eq, _ in work} for name in calls}
    order = list(calls)
    shuffle = random.Random(0)
    previous: str | None = None
    for r in range(rounds):
        if progress is not None:
            progress(f"round {r + 1} of {rounds}")
        pytapp.clear_plan_cache()  # planning (and any tuning) counts, as in a new run
        forget_calls()
        wisdom.forget()  # ... on a machine without wisdom (see the module's notes)
        gc.collect()  # the previous round's garbage (plans, expressions) is not this one's
        for it in range(iterations):
            shuffle.shuffle(order)
            for name in order:
                settle(previous, POOLS.get(name, name), settle_seconds)
                previous = POOLS.get(name, name)
                fn, mine = calls[name], terms[name]
                got: list[Any] = []
                start = time.perf_counter()
                for eq, ops in work:
                    t0 = time.perf_counter()
                    out = fn(eq, ops)
                    seconds = time.perf_counter() - t0
                    if seconds < mine[eq][it]:
                        mine[eq][it] = seconds
                    if it == 0:
                        got.append(out)
                least[name][it] = min(least[name][it], time.perf_counter() - start)
                if got:
                    err = max(_relative_error(g, w) for g, w in zip(got, want, strict=True))
                    result.errors[name] = max(result.errors.get(name, 0.0), err)
    for name in calls:
        result.totals[name] = sum(least[name])
        result.per_term[name] = {eq: sum(times) for eq, times in terms[name].items()}
    return result


def _relative_error(got: Any, want: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(got) - want)) / (np.max(np.abs(want)) or 1.0))


def cc_table(r: CcResult) -> str:
    """Return a text table: each contender's loop time and its ratio to the default."""
    lines = [f"coupled-cluster-like loop: {len(_TERMS)} contractions x {r.iterations} "
             f"iterations, o={r.o}, v={r.v} (each iteration's least time over the rounds, summed)"]
    base = r.totals.get("pytapp")
    for name, seconds in sorted(r.totals.items(), key=lambda kv: kv[1]):
        rel = f"{seconds / base:6.2f}x pytapp" if base else ""
        lines.append(f"  {name:<15} {seconds:9.3f} s  {rel}  max rel. error "
                     f"{r.errors.get(name, 0.0):.1e}")
    for name, why in r.skipped.items():
        lines.append(f"  {name:<15} skipped: {why}")
    lines.extend(_verdicts(r))
    return "\n".join(lines)


def _verdicts(r: CcResult) -> list[str]:
    if "pytapp" not in r.totals:
        return []
    out = []
    best = r.best_forced()
    if best is not None:
        ratio = r.ratio("pytapp", best)
        out.append(f"default vs fastest single backend ({best}): {ratio:.2f}x "
                   f"({'met' if ratio >= 1.0 else 'MISSED'}: target >= 1.0x)")
    for peer in ("numpy", "pytblis"):
        if peer in r.totals:
            ratio = r.ratio("pytapp", peer)
            out.append(f"default vs {peer}.einsum: {ratio:.2f}x "
                       f"({'met' if ratio > 1.0 else 'MISSED'}: target > 1.0x)")
    return out


def slowest_terms(r: CcResult, name: str = "pytapp", count: int = 8) -> list[str]:
    """Return the terms where ``name`` loses most time to the fastest contender of each term."""
    mine = r.per_term.get(name, {})
    rows = []
    for eq, seconds in mine.items():
        best_name = min(r.per_term, key=lambda n: r.per_term[n].get(eq, float("inf")))
        rows.append((seconds - r.per_term[best_name][eq], eq, seconds, best_name,
                     r.per_term[best_name][eq]))
    rows.sort(reverse=True)
    return [f"| `{eq}` | {s * 1e3:.1f} | {b} | {bs * 1e3:.1f} |"
            for _, eq, s, b, bs in rows[:count]]


def cc_json(r: CcResult) -> dict[str, Any]:
    """Return the result as JSON data."""
    return {"suite": "cc", "o": r.o, "v": r.v, "iterations": r.iterations,
            "terms": list(_TERMS), "seconds": r.totals, "per_term": r.per_term,
            "errors": r.errors, "skipped": r.skipped}


def cc_markdown(r: CcResult) -> str:
    """Return a Markdown report: totals, verdicts, and where the default loses time."""
    lines = ["# Coupled-cluster-like workload (`pytapp bench --suite cc`)", "",
             f"{len(_TERMS)} distinct CCSD-like contractions (o={r.o}, v={r.v}), each run "
             f"once per iteration for {r.iterations} iterations; contenders interleaved in "
             "rounds by iteration (each iteration's contenders in shuffled order), each "
             "iteration's least time over the rounds summed; pytapp's caches cleared before "
             "each round.", "",
             "| contender | seconds | vs default |", "| --- | ---: | ---: |"]
    base = r.totals.get("pytapp")
    for name, seconds in sorted(r.totals.items(), key=lambda kv: kv[1]):
        rel = f"{seconds / base:.2f}x" if base else "-"
        lines.append(f"| {name} | {seconds:.3f} | {rel} |")
    lines += ["", *(f"- {v}" for v in _verdicts(r)), ""]
    if "pytapp" in r.per_term:
        lines += ["Terms where the default loses most time to the fastest contender "
                  "(milliseconds over all iterations):", "",
                  "| term | default | fastest | its time |", "| --- | ---: | --- | ---: |",
                  *slowest_terms(r), ""]
    return "\n".join(lines)
