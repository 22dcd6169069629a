"""``pytapp bench --suite dmrg``: quimb's DMRG on NumPy against quimb routed to pytapp.

A two-site DMRG of the Heisenberg chain (``quimb.tensor.DMRG2``, L sites, bonds growing
8, 16, 32, 64, four sweeps, a fixed random start) contracts hundreds of distinct shapes a few
times each: the calls a drop-in einsum must not slow down. Modes, interleaved in rounds
(shuffled; each round runs every mode's whole solve once; pytapp's caches are cleared before
each of its solves, so planning counts), the least time kept:

``numpy``
    quimb as it is (autoray's NumPy functions, cotengra's own contraction).
``registry``
    autoray's ``tensordot``, ``einsum`` and ``transpose`` for NumPy arrays registered to
    pytapp's (every call quimb makes through autoray).
``cotengra``
    cotengra's implementation hook: ``set_default_implementation((pytapp.einsum,
    pytapp.tensordot))`` (every contraction cotengra runs).
``both``
    the two at once.

Each mode's energy is compared with NumPy's.

Every timed solve starts right after ``gc.collect()``. A solve promotes about 12,500 objects
(mostly quimb's) into the garbage collector's oldest generation whatever the mode, and Python
collects that generation (60-85 ms on quimb's heap of about 147,000 objects) once a quarter of
it is new: about every third solve. Without the collect that pause falls on whichever mode runs
third, which decided the ratios more than the modes did. Young-generation collections, the ones
pytapp's own allocations cause, still count.

A solve spends about a tenth of its time in the calls a mode routes, so a difference there of a
few per cent is far below the run-to-run noise of a shared machine (10-20% here). After the
rounds each routed mode therefore solves once more with every routed call on NumPy arrays run
twice, on pytapp and on what quimb would call without it (``numpy.tensordot``,
``numpy.einsum``, ``numpy.transpose``), in a random order, the pytapp result kept: the sums of
the two times (``DmrgResult.calls``) compare the same calls under the same conditions.

The suite runs BLAS on one thread unless ``--threads`` says otherwise. quimb's solve goes
through two OpenBLAS pools (SciPy's, for the eigensolver, and NumPy's, for the contractions);
on a two-core machine with two threads each they take turns spinning, and one NumPy solve took
anywhere from 1.08 s to 2.02 s over eight rounds (0.49 s to 0.78 s on one thread): a spread
that buries any difference between the modes. The table gives the median beside the least.

Examples
--------
>>> result = run_dmrg(sites=6, rounds=1, modes=("numpy", "registry"))  # doctest: +SKIP
>>> sorted(result.seconds)  # doctest: +SKIP
['numpy', 'registry']
"""

from __future__ import annotations

import gc
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pytapp.bench.harness import shuffled_rounds

__all__ = ["MODES", "DmrgResult", "dmrg_json", "dmrg_markdown", "dmrg_table", "run_dmrg"]

#: The modes, in report order.
MODES = ("numpy", "registry", "cotengra", "both")
_ROUTED = ("tensordot", "einsum", "transpose")


@dataclass
class DmrgResult:
    """Least seconds and the energy of each mode."""

    sites: int
    bonds: tuple[int, ...]
    sweeps: int
    seconds: dict[str, float] = field(default_factory=dict)
    energy: dict[str, float] = field(default_factory=dict)
    skipped: str = ""
    samples: dict[str, list[float]] = field(default_factory=dict)
    #: mode -> (seconds in pytapp, seconds in NumPy, calls) of its routed calls, paired
    calls: dict[str, tuple[float, float, int]] = field(default_factory=dict)

    def median(self, mode: str) -> float:
        """Median seconds of ``mode`` over the rounds."""
        return statistics.median(self.samples[mode])

    def calls_ratio(self, mode: str) -> float:
        """NumPy's time over pytapp's on ``mode``'s routed calls, paired in one solve."""
        pytapp_s, numpy_s, _ = self.calls[mode]
        return numpy_s / pytapp_s

    def ratio(self, mode: str) -> float:
        """NumPy's time over ``mode``'s (at least 1: ``mode`` is no slower)."""
        return self.seconds["numpy"] / self.seconds[mode]


class _Paired:
    """Time each routed call on pytapp and on NumPy, in a random order; return pytapp's result.

    Calls with operands that are not NumPy arrays (autoray's lazy arrays, while cotengra traces
    a contraction) run on pytapp alone and are not counted.
    """

    def __init__(self, seed: int = 0) -> None:
        self.pytapp_s = self.numpy_s = 0.0
        self.count = 0
        self._coin = random.Random(seed)

    def wrap(self, mine: Callable[..., Any], theirs: Callable[..., Any]) -> Callable[..., Any]:
        import numpy as np

        clock = time.perf_counter

        def call(*args: Any, **kwargs: Any) -> Any:
            if not all(type(x) is np.ndarray for x in args if hasattr(x, "shape")):
                return mine(*args, **kwargs)
            if self._coin.random() < 0.5:
                start = clock()
                found = mine(*args, **kwargs)
                middle = clock()
                theirs(*args, **kwargs)
                self.pytapp_s += middle - start
                self.numpy_s += clock() - middle
            else:
                start = clock()
                theirs(*args, **kwargs)
                middle = clock()
                found = mine(*args, **kwargs)
                self.numpy_s += middle - start
                self.pytapp_s += clock() - middle
            self.count += 1
            return found

        return call


def _paired_solve(mode: str, sites: int, bonds: Sequence[int], sweeps: int
                  ) -> tuple[float, float, int]:
    """Solve once in ``mode`` with every routed call paired (see the module's notes)."""
    paired = _Paired()
    with _routed(mode, paired.wrap):
        gc.collect()
        _solve(sites, bonds, sweeps)
    return paired.pytapp_s, paired.numpy_s, paired.count


Route = Callable[[Callable[..., Any], Callable[..., Any]], Callable[..., Any]]


@contextmanager
def _routed(mode: str, route: Route | None = None) -> Iterator[None]:
    """Route quimb's NumPy calls to pytapp as ``mode`` says, restoring everything after.

    ``route(pytapp's function, NumPy's)`` gives what is installed (default: pytapp's).
    """
    import autoray
    import numpy as np

    import pytapp
    from pytapp import numpy_api

    def chosen(name: str) -> Callable[..., Any]:
        mine = getattr(pytapp, name)
        return mine if route is None else route(mine, getattr(np, name))

    hook = sys.modules["cotengra.contract"]
    saved = {name: autoray.get_lib_fn("numpy", name) for name in _ROUTED}
    saved_impl = hook.get_default_implementation()
    if mode in ("registry", "both"):
        for name in _ROUTED:
            autoray.register_function("numpy", name, chosen(name))
    if mode in ("cotengra", "both"):
        hook.set_default_implementation((chosen("einsum"), chosen("tensordot")))
    pytapp.clear_plan_cache()  # a new run: planning counts
    numpy_api.forget_calls()
    _forget_cotengra_expressions()
    try:
        yield
    finally:
        for name, fn in saved.items():
            autoray.register_function("numpy", name, fn)
        hook.set_default_implementation(saved_impl)
        _forget_cotengra_expressions()


def _forget_cotengra_expressions() -> None:
    """Empty cotengra's cache of contraction expressions.

    Each expression keeps the implementation that was the default when it was built: without
    this, a mode would run with the previous mode's functions.
    """
    interface = sys.modules.get("cotengra.interface")
    for name in dir(interface) if interface is not None else ():
        cache = getattr(interface, name)
        if name.endswith("_CACHE") and hasattr(cache, "clear"):
            cache.clear()


def _solve(sites: int, bonds: Sequence[int], sweeps: int) -> tuple[float, float]:
    import quimb.tensor as qtn

    ham = qtn.MPO_ham_heis(sites)
    dmrg = qtn.DMRG2(ham, p0=qtn.MPS_rand_state(sites, bond_dim=bonds[0], seed=7),
                     bond_dims=list(bonds), cutoffs=1e-10)
    start = time.perf_counter()
    dmrg.solve(max_sweeps=sweeps, verbosity=0, tol=1e-14)
    return time.perf_counter() - start, float(dmrg.energy)


def run_dmrg(sites: int = 32, bonds: Sequence[int] = (8, 16, 32, 64), sweeps: int = 4,
             rounds: int = 3, modes: Sequence[str] = MODES,
             progress: Callable[[str], None] | None = None) -> DmrgResult:
    """Time quimb's DMRG2 in each mode; ``skipped`` says why when quimb is not installed."""
    result = DmrgResult(sites, tuple(bonds), sweeps)
    try:
        import cotengra  # noqa: F401 - loads cotengra.contract, the hook
        import quimb.tensor  # noqa: F401
    except ImportError as exc:
        result.skipped = f"quimb and cotengra are needed ({exc})"
        return result
    for mode in modes:  # imports, numba's caches, pytapp's planning modules: not timed
        with _routed(mode):
            _solve(sites, bonds[:1], 1)
    for _, mode in shuffled_rounds(modes, rounds, progress):
        with _routed(mode):
            gc.collect()  # each solve starts from a collected heap (see the module's notes)
            seconds, energy = _solve(sites, bonds, sweeps)
        result.seconds[mode] = min(result.seconds.get(mode, float("inf")), seconds)
        result.samples.setdefault(mode, []).append(seconds)
        result.energy[mode] = energy
    for mode in modes:
        if mode != "numpy":
            result.calls[mode] = _paired_solve(mode, sites, bonds, sweeps)
    return result


def _paired_text(r: DmrgResult, mode: str) -> str:
    """``mode``'s paired routed calls: pytapp / NumPy milliseconds, ratio, count."""
    mine, theirs, count = r.calls[mode]
    return (f"{mine * 1e3:.1f} / {theirs * 1e3:.1f} ms ({r.calls_ratio(mode):.2f}x, "
            f"{count} calls)")


def _ordered(r: DmrgResult) -> list[str]:
    return [m for m in MODES if m in r.seconds]


def _verdicts(r: DmrgResult) -> list[str]:
    out = []
    for mode in _ordered(r):
        if mode == "numpy" or "numpy" not in r.seconds:
            continue
        ratio = r.ratio(mode)
        gap = abs(r.energy[mode] - r.energy["numpy"])
        median = r.median("numpy") / r.median(mode)
        paired = (f"; its routed calls, paired in one solve: pytapp / NumPy "
                  f"{_paired_text(r, mode)}" if mode in r.calls else "")
        out.append(f"{mode}: {ratio:.2f}x quimb on NumPy, least of the rounds "
                   f"({'met' if ratio >= 1.0 else 'MISSED'}: target >= 1.0x; median "
                   f"{median:.2f}x), energy within "
                   f"{gap:.1e} ({'met' if gap <= 1e-10 else 'MISSED'}: target 1e-10){paired}")
    return out


def dmrg_table(r: DmrgResult) -> str:
    """Return a text table: each mode's time, its ratio to NumPy's, its energy."""
    if r.skipped:
        return f"dmrg suite skipped: {r.skipped}"
    lines = [f"quimb DMRG2, Heisenberg L={r.sites}, bonds {list(r.bonds)}, {r.sweeps} sweeps "
             "(least of the rounds)"]
    for mode in _ordered(r):
        lines.append(f"  {mode:<9} {r.seconds[mode]:7.3f} s  median {r.median(mode):7.3f} s  "
                     f"energy {r.energy[mode]!r}")
    return "\n".join([*lines, *_verdicts(r)])


def dmrg_json(r: DmrgResult) -> dict[str, Any]:
    """Return the result as JSON data."""
    return {"suite": "dmrg", "sites": r.sites, "bonds": list(r.bonds), "sweeps": r.sweeps,
            "seconds": r.seconds, "samples": r.samples, "energy": r.energy,
            "calls": {m: {"pytapp_s": c[0], "numpy_s": c[1], "count": c[2]}
                      for m, c in r.calls.items()},
            "skipped": r.skipped}


def dmrg_markdown(r: DmrgResult) -> str:
    """Return a Markdown report of the run."""
    lines = ["# quimb DMRG routed to pytapp (`pytapp bench --suite dmrg`)", "",
             f"`quimb.tensor.DMRG2` on the Heisenberg chain, L={r.sites}, bonds "
             f"{list(r.bonds)}, {r.sweeps} sweeps; modes interleaved in rounds, least time "
             "kept (median beside it), pytapp's caches cleared and the heap collected before "
             "each run, BLAS on one thread unless `--threads` says otherwise. See "
             "`pytapp.bench.dmrg` for what each mode routes.", ""]
    if r.skipped:
        return "\n".join([*lines, f"Skipped: {r.skipped}", ""])
    lines += ["| mode | least s | median s | vs NumPy (least) | vs NumPy (median) | routed "
              "calls, paired: pytapp / NumPy | energy |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for mode in _ordered(r):
        ratio = f"{r.ratio(mode):.2f}x" if "numpy" in r.seconds else "-"
        median = f"{r.median('numpy') / r.median(mode):.2f}x" if "numpy" in r.seconds else "-"
        paired = _paired_text(r, mode) if mode in r.calls else "-"
        lines.append(f"| {mode} | {r.seconds[mode]:.3f} | {r.median(mode):.3f} | {ratio} | "
                     f"{median} | {paired} | {r.energy[mode]!r} |")
    return "\n".join([*lines, "", *(f"- {v}" for v in _verdicts(r)), ""])
