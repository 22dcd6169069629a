"""Routes a plan tries on the calls it makes anyway, where the cost model cannot weigh them.

Above :data:`pytapp.analysis.program.VIEWS_TO_TTGT_MAX_FLOPS` the lowering keeps GEMMs on
views that it does not price against TTGT (:func:`pytapp.analysis.program.alternative`: on
104 seeded products, TTGT ran 0.32-7.7x their speed, and nothing the model knows told which),
GEMVs on views scattering their matrix in long rows against one GEMV (0.85-2.56x on 27), and
a large TTGT into a small D against its GEMMs the other way round (0.43-1.60x on 80: the
BLAS's speed in each orientation, which differs by datatype and shape), and a batch's TTGT
storing its whole T of 1-16 MiB against the same packed in blocks, each block's T stored
while in cache (0.68-2.17x on 17).
A plan allowed to tune (``auto``, unless ``PYTAPP_AUTOTUNE=0``) compiles both and calls them
through a :class:`RouteTrial`: the model's choice first, then the calls alternate
(:class:`pytapp.wisdom.Trial`) until one wins, which every later call runs. No call is added:
what a trial costs is what the slower route loses on a few calls. The winner is kept in this
machine's wisdom (section :data:`SECTION`), so the next plan of the product runs it at once,
in this process and in the next.

Examples
--------
>>> calls = []
>>> def slow(*args):
...     calls.append("slow")
...     return "done slowly"
>>> def fast(*args):
...     calls.append("fast")
...     return "done"
>>> t = RouteTrial((slow, fast), ("model's", "other"), key=None)
>>> t.settled, t.algorithm
(False, "model's")
>>> for _ in range(12):
...     _ = t(1.0, None, None, 0.0, None, None)
>>> calls[:2]  # the model's choice first
['slow', 'slow']
>>> t.settled and t.current in (slow, fast)
True
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from pytapp import wisdom
from pytapp.analysis.spec import ContractionSpec
from pytapp.kernels.program import compile_alternative

__all__ = ["SECTION", "RouteTrial", "routes_for"]

#: The wisdom section of the routes' winners (value: ``{"route": index, ...}``).
SECTION = "route"


class RouteTrial:
    """Compiled programs of one product tried on its calls (candidate 0: the model's choice).

    Called as a program is, ``(alpha, A, B, beta, C, D)``: runs the candidate the trial
    picks and returns its Status (or ``NotImplemented``, the operands being for the plan to
    bind, which no candidate of the same product takes either). ``key``: the product's wisdom
    key, where the winner is recorded (``None``: nowhere).
    """

    def __init__(self, programs: tuple[Callable[..., Any], ...], algorithms: tuple[str, ...],
                 key: str | None, equation: str = "") -> None:
        self.programs, self.algorithms = programs, algorithms
        self.key, self.equation = key, equation
        self._trial = wisdom.Trial(len(programs), cold=wisdom.TRIAL_COLD_MARGIN)
        #: The winner's index, once known (the model's choice runs until then).
        self.winner: int | None = None
        self._lock = threading.Lock()

    @property
    def settled(self) -> bool:
        """Whether the trial has a winner (every call runs it)."""
        return self.winner is not None

    @property
    def current(self) -> Callable[..., Any]:
        """The program calls run once settled: the winner, else the model's choice."""
        return self.programs[self.winner or 0]

    @property
    def algorithm(self) -> str:
        """The running program's algorithm (the model's choice while on trial)."""
        return self.algorithms[self.winner or 0]

    def __call__(self, alpha: Any, a: Any, b: Any, beta: Any, c: Any, d: Any) -> Any:
        """Run the picked candidate on these operands; count its time toward the trial."""
        winner = self.winner
        if winner is not None:
            return self.programs[winner](alpha, a, b, beta, c, d)
        which = self._trial.pick()
        start = time.perf_counter()
        status = self.programs[which](alpha, a, b, beta, c, d)
        if status is NotImplemented:
            return status
        found = self._trial.add(which, time.perf_counter() - start)
        if found is not None:
            self._settle(found)
        return status

    def _settle(self, winner: int) -> None:
        with self._lock:
            if self.winner is not None:
                return
            self.winner = winner
        if self.key is not None:
            best = self._trial.best
            wisdom.record(SECTION, self.key, {
                "route": winner, "algorithm": self.algorithms[winner],
                "seconds": [t if t != float("inf") else None for t in best],
                "equation": self.equation})


def routes_for(spec: ContractionSpec, program: Any, template: Any, key: str,
               make_status: Callable[[], Any], limit: int | None = None) -> tuple[Any, Any]:
    """Return what a plan of ``spec`` calls, and its Status template.

    ``program`` and ``template``: the model's choice, compiled (:func:`compile_product`).
    Where the lowering has an alternative (:func:`compile_alternative`, compiled with the
    template ``make_status()`` returns) whose workspace is within ``limit`` bytes, the
    winner this machine's wisdom holds under ``key``, else a :class:`RouteTrial` of both
    (its template's workspace the larger of the two); otherwise ``program`` and
    ``template`` as given (a plan never needs more memory for what it may try).
    """
    other_template = make_status()
    other = compile_alternative(spec, other_template)
    if other is None or (limit is not None and other_template.bytes_allocated > limit):
        return program, template
    known = wisdom.lookup(SECTION, key)
    route = known.get("route") if isinstance(known, dict) else None
    if route == 1:
        return other, other_template
    if route == 0:
        return program, template
    template.bytes_allocated = max(template.bytes_allocated, other_template.bytes_allocated)
    trial = RouteTrial((program, other), (template.algorithm, other_template.algorithm), key,
                       spec.einsum())
    return trial, template
