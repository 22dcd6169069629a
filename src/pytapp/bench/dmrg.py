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

Examples
--------
>>> result = run_dmrg(sites=6, rounds=1, modes=("numpy", "registry"))  # doctest: +SKIP
>>> sorted(result.seconds)  # doctest: +SKIP
['numpy', 'registry']
"""

from __future__ import annotations

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

    def ratio(self, mode: str) -> float:
        """NumPy's time over ``mode``'s (at least 1: ``mode`` is no slower)."""
        return self.seconds["numpy"] / self.seconds[mode]


@contextmanager
def _routed(mode: str) -> Iterator[None]:
    """Route quimb's NumPy calls to pytapp as ``mode`` says, restoring everything after."""
    import autoray

    import pytapp
    from pytapp import numpy_api

    hook = sys.modules["cotengra.contract"]
    saved = {name: autoray.get_lib_fn("numpy", name) for name in _ROUTED}
    saved_impl = hook.get_default_implementation()
    if mode in ("registry", "both"):
        for name in _ROUTED:
            autoray.register_function("numpy", name, getattr(pytapp, name))
    if mode in ("cotengra", "both"):
        hook.set_default_implementation((pytapp.einsum, pytapp.tensordot))
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
    with _routed("numpy"):
        _solve(sites, bonds, 1)  # imports, numba's caches: not timed
    for _, mode in shuffled_rounds(modes, rounds, progress):
        with _routed(mode):
            seconds, energy = _solve(sites, bonds, sweeps)
        result.seconds[mode] = min(result.seconds.get(mode, float("inf")), seconds)
        result.energy[mode] = energy
    return result


def _ordered(r: DmrgResult) -> list[str]:
    return [m for m in MODES if m in r.seconds]


def _verdicts(r: DmrgResult) -> list[str]:
    out = []
    for mode in _ordered(r):
        if mode == "numpy" or "numpy" not in r.seconds:
            continue
        ratio = r.ratio(mode)
        gap = abs(r.energy[mode] - r.energy["numpy"])
        out.append(f"{mode}: {ratio:.2f}x quimb on NumPy "
                   f"({'met' if ratio >= 1.0 else 'MISSED'}: target >= 1.0x), energy within "
                   f"{gap:.1e} ({'met' if gap <= 1e-10 else 'MISSED'}: target 1e-10)")
    return out


def dmrg_table(r: DmrgResult) -> str:
    """Return a text table: each mode's time, its ratio to NumPy's, its energy."""
    if r.skipped:
        return f"dmrg suite skipped: {r.skipped}"
    lines = [f"quimb DMRG2, Heisenberg L={r.sites}, bonds {list(r.bonds)}, {r.sweeps} sweeps "
             "(least of the rounds)"]
    for mode in _ordered(r):
        lines.append(f"  {mode:<9} {r.seconds[mode]:7.3f} s  energy {r.energy[mode]!r}")
    return "\n".join([*lines, *_verdicts(r)])


def dmrg_json(r: DmrgResult) -> dict[str, Any]:
    """Return the result as JSON data."""
    return {"suite": "dmrg", "sites": r.sites, "bonds": list(r.bonds), "sweeps": r.sweeps,
            "seconds": r.seconds, "energy": r.energy, "skipped": r.skipped}


def dmrg_markdown(r: DmrgResult) -> str:
    """Return a Markdown report of the run."""
    lines = ["# quimb DMRG routed to pytapp (`pytapp bench --suite dmrg`)", "",
             f"`quimb.tensor.DMRG2` on the Heisenberg chain, L={r.sites}, bonds "
             f"{list(r.bonds)}, {r.sweeps} sweeps; modes interleaved in rounds, least time "
             "kept, pytapp's caches cleared before each of its runs. See "
             "`pytapp.bench.dmrg` for what each mode routes.", ""]
    if r.skipped:
        return "\n".join([*lines, f"Skipped: {r.skipped}", ""])
    lines += ["| mode | seconds | vs NumPy | energy |", "| --- | ---: | ---: | ---: |"]
    for mode in _ordered(r):
        ratio = f"{r.ratio(mode):.2f}x" if "numpy" in r.seconds else "-"
        lines.append(f"| {mode} | {r.seconds[mode]:.3f} | {ratio} | {r.energy[mode]!r} |")
    return "\n".join([*lines, "", *(f"- {v}" for v in _verdicts(r)), ""])
