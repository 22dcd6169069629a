"""The ``auto`` backend: picks a backend per plan, and records what ran.

A cost model in seconds ranks the capable backends from this machine's measured constants
(:mod:`pytapp.machine`: GEMM rates of NumPy's BLAS and torch per datatype, copy bandwidth):
products that blas runs as one compiled kernel pass or as GEMMs on strided views stay on
blas, F16/BF16 inputs go to torch when its native low-precision GEMM is the faster here,
the rest to the smaller prediction of blas and torch (torch only when predicted
:data:`OTHER_POOL_MARGIN` times faster: its thread pool and OpenBLAS's slow each other). The
model never picks tblis: its thread pool keeps spinning after each call and slows the next
OpenBLAS call of the workload (on the cc suite: 560 ms against 415 ms over 20 runs of a GEMM
that follows two tblis products). Timing a product alone cannot see that cost, so timing and
wisdom choose only among :data:`AUTOMATIC` too (a wisdom file whose timings had picked tblis
for one step of a PEPS network made the whole network 2-3x slower); ``backend='tblis'``
still runs it. The model
decides by default, the same way in every process on one machine (its constants and the
backends' per-call costs are measured once per machine and kept on disk). Timing the
candidates is a refinement within a budget (:class:`pytapp.wisdom.Budget`): a product is
timed only after :data:`~pytapp.wisdom.MIN_RUNS` executions, when timing the candidates
predicted within :data:`TUNE_WITHIN` of the choice costs at most a tenth of what the product
has run and is predicted to run. Winners are kept per machine in the wisdom file
(:mod:`pytapp.wisdom`), so later processes start from them. ``PYTAPP_AUTOTUNE`` (read when a
plan is created): ``=0`` never times, ``=1`` (or ``Executor(autotune=True)``) times at the
first execution. ``plan.explain()`` shows the candidates with predicted and measured times.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping

import numpy as np

from pytapp import wisdom
from pytapp.analysis.cost import (
    MachineModel,
    Route,
    gemm_seconds,
    ttgt_seconds,
    view_gemm_seconds,
)
from pytapp.analysis.program import lower
from pytapp.analysis.spec import ContractionSpec
from pytapp.analysis.ttgt import Kind, PlanProfile
from pytapp.backends.base import (
    BLAS_POOL,
    Backend,
    BackendPlan,
    Capabilities,
    Stateless,
    setup_seconds,
    thread_pool,
)
from pytapp.datatypes import Datatype
from pytapp.errors import ErrorCode, TappError, error_for
from pytapp.executor import Executor
from pytapp.kernels import program as compiled_programs
from pytapp.machine import Machine
from pytapp.machine import constants as machine_constants
from pytapp.operands import BoundProduct
from pytapp.status import Status

__all__ = ["AUTOMATIC", "CANDIDATES", "AutoBackend", "AutoPlan", "CompiledPlan", "call_overheads",
           "pool_choice"]

_log = logging.getLogger("pytapp")

#: Backends ``auto`` may choose, in order of preference when the model has no opinion.
CANDIDATES = ("blas", "torch", "tblis", "reference")
#: The candidates the model, timing and wisdom may choose (the others run when forced).
AUTOMATIC = frozenset({"blas", "torch"})

_lock = threading.Lock()


def _key(spec: ContractionSpec) -> str:
    """Return the product's key in the wisdom file: what defines it, the same in every process."""
    parts = tuple((int(op.datatype), int(op.op), op.labels, op.extents, op.strides)
                  for op in spec.operands)
    return hashlib.sha1(repr((parts, int(spec.prec), spec.allow_broadcast)).encode()).hexdigest()


#: Candidates predicted more than this many times slower than the choice are not timed.
TUNE_WITHIN = 4.0
#: Seconds planning one more candidate for timing is assumed to cost.
PLAN_SECONDS = 1e-3
#: Per-call costs (:func:`call_overheads`) enter predictions only below this many seconds:
#: above, tens of microseconds cannot change the ranking, and measuring them plans on every
#: backend (importing torch costs a new process about two seconds).
OVERHEADS_MATTER_BELOW = 1e-3
#: How much faster than blas a backend on another thread pool (torch's for F32-C64) must be
#: predicted to be chosen without measuring. The products of a workload share the cores, and
#: two pools whose idle threads spin slow each other: a coupled-cluster loop whose GEMM terms
#: went to torch (its MKL calibrated at 1.5x OpenBLAS's rate on a Xeon) and the rest stayed on
#: blas ran 10% slower than on either library alone, where the torch terms alone ran 20% faster.
OTHER_POOL_MARGIN = 2.0
#: Seconds NumPy/ml_dtypes take to convert one F16/BF16 element to F32.
CONVERT_SECONDS = 1e-9
#: Seconds torch's ``Tensor.to`` takes to convert one F16/BF16 element to F32 (one thread:
#: 13 ms for the 12.3M of a BF16 operand, where the copy bandwidth alone, 2 bytes read and 4
#: written, had priced 3.5 ms and sent such products to torch at 0.3-0.5x blas's speed).
TORCH_CONVERT_SECONDS = 1e-9
#: Round-robin rounds of timed runs while tuning (the best of each candidate's runs counts).
TUNE_ROUNDS = 3
_LOW = frozenset({Datatype.F16, Datatype.BF16})
#: Products of at most this many flops that the compiled executor runs are not priced: the
#: executor's call costs a microsecond where another library's dispatch costs tens, and what
#: a faster kernel could save is less than what planning the candidates costs (a millisecond).
COMPILED_MAX_FLOPS = 1 << 24


_overheads: dict[str, float] = {}


def call_overheads(names: list[str]) -> dict[str, float]:
    """Seconds one execution costs each backend beyond its arithmetic.

    The best of 15 runs of a 4x4 F64 GEMM, measured once per machine and kept in the wisdom
    file (a few milliseconds; later processes read it, so they decide alike). torch's
    conversions and dispatch cost several times blas's; for the small products of a tensor
    network this term decides.
    """
    from pytapp import backends
    from pytapp.analysis.spec import build_spec
    from pytapp.datatypes import ElementOp
    from pytapp.operands import Binder
    from pytapp.precision import Prectype

    missing = [n for n in names if n not in _overheads]
    for name in list(missing):
        known = wisdom.lookup("overhead", name)
        if isinstance(known, (int, float)):
            with _lock:
                _overheads[name] = float(known)
            missing.remove(name)
    if missing:
        x = np.ones((4, 4))
        item = (Datatype.F64, (4, 4), (4, 1))
        spec = build_spec((*item, ("a", "b"), ElementOp.IDENTITY),
                          (*item, ("b", "c"), ElementOp.IDENTITY),
                          (*item, ("a", "c"), ElementOp.IDENTITY),
                          (*item, ("a", "c"), ElementOp.IDENTITY), Prectype.DEFAULT, False)
        for name in missing:
            try:
                plan = backends.get(name).plan(spec, None)
                bound = Binder(spec).bind(1, x, x, 0, None, np.empty((4, 4)))
            except Exception:  # a backend that cannot run it is priced by its model alone
                best = 0.0
            else:
                best = wisdom.time_candidates({name: functools.partial(plan.run, bound, None)},
                                              15).get(name, 0.0)
                plan.release()
            with _lock:
                _overheads[name] = best
            wisdom.record("overhead", name, best)
    return {n: _overheads[n] for n in names}


def predictions(spec: ContractionSpec, capable: list[str], profile: PlanProfile | None,
                machine: Machine, imports: bool = False, native: bool = True
                ) -> dict[str, float]:
    """Predicted seconds of each capable backend, from this machine's measured constants.

    blas: its chosen route (one pass of a compiled kernel over the operands, GEMMs on views,
    or TTGT with its copies) at NumPy's GEMM rate, BF16 GEMMs on the AMX tiles at theirs;
    torch: the same TTGT at torch's rate (its native rate for F16/BF16 inputs where
    ``spec.native_low`` allows it and ``native`` says the call has alpha 1 and no C, else its
    F32 rate after converting them); tblis: the GEMM without copies at NumPy's rate.
    """
    p = profile or PlanProfile()
    cplx = spec.rule.is_complex
    compute = spec.rule.real if not cplx else (
        Datatype.C32 if spec.rule.real is Datatype.F32 else Datatype.C64)
    if compute not in (Datatype.F32, Datatype.F64, Datatype.C32, Datatype.C64):
        compute = Datatype.F32  # F16 accumulation: rates of F32 are the nearest measured
    dt, item = compute.short_name, compute.itemsize
    touched = item * sum(op.size for op in spec.operands)
    out: dict[str, float] = {}
    m, n, k, h = p.m, p.n, p.k, p.h
    stored = 0 if p.d_direct else spec.d.size * item
    copies = p.copy_bytes

    def model(library: str, rate_dt: str) -> MachineModel:
        rate = machine.gemm_rate(library, rate_dt) or machine.gemm_rate("numpy", dt) or 1e10
        return MachineModel(gemm_flops=rate, bandwidth=machine.bandwidth)

    low = spec.a.datatype in _LOW and spec.b.datatype in _LOW
    # NumPy converts F16/BF16 element by element (ml_dtypes): about a nanosecond each.
    converted = sum(op.size for op in spec.operands if op.datatype in _LOW)
    # ... where blas sums an operand's isolated labels first, straight from F16/BF16 (one pass
    # reading it), and converts the sums; torch converts it whole, then sums in F32
    cls = spec.classes
    isolated = [(op, spec.size(iso)) for op, iso in ((spec.a, cls.IA), (spec.b, cls.IB))
                if op.datatype in _LOW and spec.size(iso) > 1]
    blas_converted = converted - sum(op.size - op.size // kept for op, kept in isolated)
    summed_low = sum(2 * op.size for op, _ in isolated) / machine.bandwidth
    summed_f32 = sum(4 * op.size for op, _ in isolated) / machine.bandwidth
    for name in capable:
        if name == "blas":
            route = p.route
            if route in (Route.ELEMENTWISE, Route.REDUCE) or (
                    route is Route.VIEW_GEMM and p.view is not None and min(p.view[:2]) == 1):
                # one pass over the operands (GEMVs on views stream them too)
                out[name] = touched / machine.bandwidth
            elif route is Route.VIEW_GEMM and p.view is not None:
                vm, vn, vk, calls = p.view
                out[name] = view_gemm_seconds(vm, vn, vk, calls, model("numpy", dt), cplx)
            elif p.tiles:  # BF16 on the AMX tiles: nothing converted, nothing copied; F16
                # numbers split into BF16 pairs: four tile products per multiply-add
                split = 4 if spec.a.datatype is Datatype.F16 else 1
                out[name] = split * ttgt_seconds(m, n, k, h, 0, 0, model("tiles", "bf16"), cplx)
                continue
            elif p.kind is Kind.GEMM:
                out[name] = ttgt_seconds(m, n, k, h, copies, stored, model("numpy", dt), cplx)
            else:
                out[name] = 2 * touched / machine.bandwidth
            out[name] += blas_converted * CONVERT_SECONDS + summed_low
        elif name == "torch":
            in_low = native and spec.native_low is not None
            rate_dt = spec.a.datatype.short_name if in_low else dt
            out[name] = (ttgt_seconds(m, n, k, h, copies, stored, model("torch", rate_dt), cplx)
                         if p.kind is Kind.GEMM else 2 * touched / machine.bandwidth)
            if low and not in_low:  # converted to F32 by torch (Tensor.to)
                out[name] += converted * TORCH_CONVERT_SECONDS + summed_f32
        elif name == "tblis":
            out[name] = (h * gemm_seconds(m, n, k, model("numpy", dt), cplx)
                         if p.kind is Kind.GEMM else 2 * touched / machine.bandwidth)
    if not out:
        return out
    from pytapp import backends

    # A library not imported yet is not imported to measure its call: it would cost its import,
    # priced here as that call's overhead. ``imports``: price the import at any size (the
    # model's choice: a 3 ms product chose torch, on a machine whose measured MKL rate was
    # 1.5x OpenBLAS's, and paid 2 s to import it); the tuners count it in their budgets.
    small = min(out.values()) < OVERHEADS_MATTER_BELOW
    if not (small or imports):
        return out
    loading = {name: backends.import_seconds(name) for name in out}
    if small:
        ready = [name for name in out if loading[name] == 0.0]
        for name, seconds in call_overheads(ready).items():
            out[name] += seconds
    if small or imports:
        for name in out:
            out[name] += loading[name]
    return out


def model_choice(spec: ContractionSpec, capable: list[str],
                 profile: PlanProfile | None = None,
                 machine: Machine | None = None, native: bool = True) -> str:
    """Return the cost model's pick among ``capable`` backends (``profile``: what blas would do).

    F16 accumulation (every partial sum rounded) runs on the reference loop; F16/BF16 inputs
    go where the prediction is smaller: torch's native low-precision GEMM (fast on CPUs with
    AMX or AVX512-BF16, slow on others), blas's BF16 GEMM on the AMX tiles, or NumPy's F32
    GEMM after converting the inputs (whatever blas's route, the conversion is a copy); a
    product blas runs as one compiled kernel pass or as GEMMs on views stays on blas
    (nothing is copied); otherwise torch only
    when predicted :data:`OTHER_POOL_MARGIN` times faster than blas (never tblis: its idle
    threads slow the OpenBLAS calls around it; see the module's notes). A library not
    imported yet is priced with its import. ``native``: price calls with alpha 1 and no C
    (torch's native low-precision GEMM is exact only for them).
    """
    if spec.rule.real is Datatype.F16 and "reference" in capable:
        return "reference"
    machine = machine or machine_constants()
    p = profile or PlanProfile()
    if spec.a.datatype in _LOW and spec.b.datatype in _LOW and "torch" in capable:
        # blas converts F16/BF16 operands to F32 whatever its route (BF16 GEMMs on the AMX
        # tiles excepted): the two are priced
        if "blas" not in capable:
            return "torch"
        ranked = predictions(spec, ["blas", "torch"], p, machine, imports=True, native=native)
        return min(ranked, key=lambda name: ranked[name])
    if p.route is not None and "blas" in capable:
        return "blas"
    ranked = predictions(spec, [c for c in capable if c in ("blas", "torch")], p, machine,
                         imports=True)
    if "blas" in ranked and "torch" in ranked:
        # The model sees GEMM rates, not torch's conversions and extra passes around them, nor
        # what its pool costs the OpenBLAS calls around it: torch must be predicted far faster.
        return "torch" if ranked["torch"] * OTHER_POOL_MARGIN < ranked["blas"] else "blas"
    if ranked:
        return min(ranked, key=lambda name: ranked[name])
    return "blas" if "blas" in capable else capable[0]


def pool_choice(times: Mapping[str, float], pools: Mapping[str, str]) -> str:
    """Return the fastest backend timed; one off NumPy's BLAS pool only when far faster.

    A backend on another thread pool than :data:`~pytapp.backends.base.BLAS_POOL` wins only
    when :data:`OTHER_POOL_MARGIN` times faster than the fastest on it: timed alone, it does
    not pay what the two pools cost each other in a workload whose other products run on
    OpenBLAS. ``pools``: each timed backend's pool.

    Examples
    --------
    >>> pools = {"blas": "blas", "torch": "torch"}
    >>> [pool_choice({"blas": 1.0, "torch": t}, pools) for t in (0.6, 0.4)]
    ['blas', 'torch']
    """
    fastest = min(times, key=lambda n: times[n])
    home = [n for n in times if pools[n] == BLAS_POOL]
    if pools[fastest] != BLAS_POOL and home:
        best_home = min(home, key=lambda n: times[n])
        if times[fastest] * OTHER_POOL_MARGIN >= times[best_home]:
            return best_home
    return fastest


#: PYTAPP_AUTOTUNE values that time every product at its first execution.
_ALWAYS = ("1", "on", "always")
#: PYTAPP_AUTOTUNE values that never time a product (nor try its routes).
_NEVER = ("0", "off", "never")


def _tune_policy() -> str:
    return os.environ.get("PYTAPP_AUTOTUNE", "auto").strip().lower() or "auto"


class AutoPlan:
    """The chosen backend's plan; the other candidates are planned only for timing them.

    ``general``: the backend for calls with alpha other than 1 or with C, where the choice was
    priced at torch's native low-precision rate, which only those without hold (None: the
    choice runs every call). ``key``: the product's wisdom key (computed when not given).
    """

    @property
    def compiled(self) -> bool:
        """Whether the compiled executor may run this product.

        When blas is the choice and its plan lets it (not when it runs a kernel of its own,
        such as summed GEMMs).
        """
        return self.choice == "blas" and bool(getattr(self.plans.get("blas"), "compiled", True))

    def __init__(self, spec: ContractionSpec, candidates: dict[str, Backend], choice: str,
                 executor: Executor | None, predicted: dict[str, float] | None = None,
                 planned: dict[str, BackendPlan] | None = None, general: str | None = None,
                 key: str | None = None) -> None:
        self.spec, self.candidates, self.choice = spec, candidates, choice
        planned = dict(planned or {})
        self.plans: dict[str, BackendPlan] = {
            choice: planned.pop(choice) if choice in planned
            else candidates[choice].plan(spec, executor)}
        self.general = general if general != choice else None
        self._general: BackendPlan | None = None
        if self.general is not None:
            self._general = self.plans[self.general] = (
                planned.pop(self.general) if self.general in planned
                else candidates[self.general].plan(spec, executor))
            self._general_prefix = f"auto -> {self.general}: "
        self.key = _key(spec) if key is None else key
        self.tuned = False
        self.budget = wisdom.Budget()  # executions so far, and their seconds
        self.predicted = dict(predicted or {})
        self.measured: dict[str, float] = {}
        self._prefix = f"auto -> {choice}: "
        self._last = ("", "")  # (a backend's algorithm, the prefixed text) of the last run
        self._policy = _tune_policy()  # read once per plan: reading the environment costs 1 us
        self._timed = self._worth_timing()
        for name, other in planned.items():  # planned to ask what it would do
            if name in self._timed:
                self.plans[name] = other
            else:
                other.release()
        # What timing costs, in mean executions of the choice, plus the planning of the others.
        self._cost_runs, self._cost_fixed = self._timing_cost()

    @property
    def route_key(self) -> str | None:
        """The wisdom key under which the compiled executor's routes may be tried.

        ``None`` where this plan never tunes (``PYTAPP_AUTOTUNE=0``): the cost model's route
        runs (see :mod:`pytapp.kernels.routes`).
        """
        return None if self._policy in _NEVER else self.key

    @property
    def runs(self) -> int:
        """Executions so far."""
        return self.budget.runs

    def _worth_timing(self) -> list[str]:
        """Return the candidates worth timing: predicted within :data:`TUNE_WITHIN`."""
        own = self.predicted.get(self.choice)
        names = []
        for name in self.candidates:
            if name not in AUTOMATIC and name != self.choice:
                continue  # reference: never the fastest; tblis: see the module's notes
            pred = self.predicted.get(name)
            if name == self.choice or own is None or pred is None or pred <= TUNE_WITHIN * own:
                names.append(name)
        return names

    def _timing_cost(self) -> tuple[float, float]:
        own = self.predicted.get(self.choice) or 0.0
        runs = fixed = 0.0
        for name in self._timed:
            pred = self.predicted.get(name)
            ratio = pred / own if pred is not None and own > 0 else 1.0
            runs += (1 + TUNE_ROUNDS) * max(ratio, 1.0)
            if name not in self.plans:
                fixed += PLAN_SECONDS
        return runs, fixed

    def explain(self) -> str:
        """Candidates with predicted (and, once tuned, measured) seconds, and the choice."""
        lines = [f"auto chose {self.choice}: {self.plans[self.choice].algorithm}"]
        if self.general is not None:
            lines.append(f"  (calls with alpha other than 1 or with C: {self.general})")
        for name in self.candidates:
            if name not in self.predicted and name != self.choice:
                continue
            pred = self.predicted.get(name)
            meas = self.measured.get(name)
            cells = [f"predicted {pred * 1e3:9.3f} ms" if pred is not None else
                     "predicted         -   "]
            if meas is not None:
                cells.append(f"measured {meas * 1e3:9.3f} ms")
            mark = "*" if name == self.choice else " "
            lines.append(f" {mark} {name:<10} " + "  ".join(cells))
        return "\n".join(lines)

    @property
    def algorithm(self) -> str:
        """``auto -> NAME: what NAME does``."""
        return self._prefix + self.plans[self.choice].algorithm

    @property
    def workspace_bytes(self) -> int:
        """The chosen plan's workspace."""
        return int(getattr(self.plans[self.choice], "workspace_bytes", 0))

    def _tune(self, bound: BoundProduct, executor: Executor | None) -> None:
        """Time the candidates worth it on these operands; D ends with the last valid result.

        Each candidate is warmed up (first calls compile and allocate) right before it is
        timed :data:`TUNE_ROUNDS` times in a row (:func:`pytapp.wisdom.time_candidates`: a
        pause before the candidates of another thread pool); the best time of each counts.
        """
        plans: dict[str, BackendPlan] = {}
        for name in self._timed:
            try:
                plan = self.plans.get(name) or self.candidates[name].plan(self.spec, executor)
            except Exception:  # a candidate that cannot plan this product is not chosen
                continue
            self.plans[name] = plans[name] = plan
        # each warmed up right before its timed runs; one that cannot run these operands drops
        times = wisdom.time_candidates(
            {name: functools.partial(plan.run, bound, executor) for name, plan in plans.items()},
            TUNE_ROUNDS, pools=self._pools(plans),
            after=thread_pool(self.candidates[self.choice]), warm_up=True)
        self.measured = dict(times)
        if times:
            self.choice = pool_choice(times, self._pools(times))
            _log.info("auto tuned %s: %s wins (%s)", self.spec.einsum(), self.choice,
                      ", ".join(f"{n} {t * 1e3:.3f} ms" for n, t in times.items()))
            self._prefix = f"auto -> {self.choice}: "
            self._last = ("", "")
            wisdom.record("product", self.key, {"choice": self.choice, "seconds": times})
        self.tuned = True

    def _should_tune(self, executor: Executor | None) -> bool:
        """Tell whether to time the candidate backends now.

        Executor(autotune=True), or PYTAPP_AUTOTUNE=1, or (by default) when the budget
        allows what timing would cost.
        """
        policy = self._policy
        if policy in _NEVER or len(self._timed) < 2:
            return False
        if (executor is not None and executor.autotune) or policy in _ALWAYS:
            return True
        budget = self.budget
        if budget.runs < wisdom.MIN_RUNS:
            return False
        cost = budget.seconds / budget.runs * self._cost_runs + self._cost_fixed
        if not budget.allows(cost):
            return False
        # a candidate whose library is not imported yet costs its import too (torch: seconds),
        # and one on another thread pool the pause before it
        loading = sum(setup_seconds(self.candidates[n]) for n in self._timed if n not in self.plans)
        pauses = wisdom.pause_seconds(self._pools(self._timed),
                                      thread_pool(self.candidates[self.choice]))
        return budget.allows(cost + loading + pauses)

    def _pools(self, names: Iterable[str]) -> dict[str, str]:
        """Each named candidate's thread pool."""
        return {name: thread_pool(self.candidates[name]) for name in names}

    def release(self) -> None:
        """Release every candidate's plan."""
        plans, self.plans = self.plans, {}
        for plan in plans.values():
            plan.release()

    def run(self, bound: BoundProduct, executor: Executor | None) -> Status:
        """Run the chosen backend (timing the candidates first when the budget allows)."""
        general = self._general
        if general is not None and (bound.c is not None or bound.alpha != 1):
            status = general.run(bound, executor)
            status.algorithm = self._general_prefix + status.algorithm
            return status
        if not self.tuned and self._should_tune(executor):
            writes_input = bound.c is not None and np.may_share_memory(bound.c, bound.d)
            if not writes_input:  # every candidate must see the same C
                self._tune(bound, executor)
            else:
                self.tuned = True  # this product overwrites its input: never time it
        start = time.perf_counter()
        status = self.plans[self.choice].run(bound, executor)
        self.budget.add(time.perf_counter() - start)
        if status.algorithm is not self._last[0]:  # the same string object: reuse the sum
            self._last = (status.algorithm, self._prefix + status.algorithm)
        status.algorithm = self._last[1]
        return status


class CompiledPlan:
    """auto's plan of a small product the compiled executor runs: blas, planned when needed.

    Nothing is priced and nothing is timed (:data:`COMPILED_MAX_FLOPS`). The executor runs
    every call whose operands have the descriptors' layouts; blas's own plan, for operands
    laid out otherwise, is made on the first call that needs it. Until then
    :attr:`workspace_bytes` is an upper bound of what blas could allocate (copies of A, B and
    D, and C converted); :meth:`settle` makes the blas plan and the workspace exact.
    """

    compiled = True
    choice = "blas"
    tuned = True
    predicted: dict[str, float] = {}  # noqa: RUF012 - read-only, never priced
    measured: dict[str, float] = {}  # noqa: RUF012

    def __init__(self, spec: ContractionSpec, blas: Backend, executor: Executor | None) -> None:
        self.spec, self._backend, self._executor = spec, blas, executor
        self._plan: BackendPlan | None = None
        self._priced: AutoPlan | None = None  # made when an executor asks to autotune
        self._lock = threading.Lock()
        item = max(op.datatype.numpy_dtype.itemsize for op in spec.operands)
        self._bound = item * (spec.a.size + spec.b.size + 2 * spec.d.size)

    def settle(self) -> BackendPlan:
        """Return blas's plan of the product, made on the first call."""
        plan = self._plan
        if plan is None:
            with self._lock:
                if self._plan is None:
                    self._plan = self._backend.plan(self.spec, self._executor)
                plan = self._plan
        return plan

    @property
    def algorithm(self) -> str:
        """``auto -> blas: what blas does``."""
        return "auto -> blas: " + self.settle().algorithm

    @property
    def workspace_bytes(self) -> int:
        """Return the workspace of blas's plan once settled, else the upper bound."""
        plan = self._plan
        return self._bound if plan is None else int(getattr(plan, "workspace_bytes", 0))

    def explain(self) -> str:
        """Return the choice and why nothing was priced (or, once timed, the candidates)."""
        if self._priced is not None:
            return self._priced.explain()
        return (f"auto chose blas: {self.settle().algorithm} (a compiled program of at most "
                f"{COMPILED_MAX_FLOPS} flops: not priced, not timed)")

    def run(self, bound: BoundProduct, executor: Executor | None) -> Status:
        """Run blas's plan (operands the compiled program does not take).

        An executor asking to autotune gets what it asks: every capable backend is planned
        and timed (:class:`AutoPlan`), and that plan serves the executors from then on.
        """
        if self._priced is None and executor is not None and executor.autotune:
            with self._lock:
                if self._priced is None:
                    self._priced = AutoBackend().priced(self.spec, executor)
        if self._priced is not None:
            return self._priced.run(bound, executor)
        status = self.settle().run(bound, executor)
        status.algorithm = "auto -> blas: " + status.algorithm
        return status

    def release(self) -> None:
        """Release blas's plan, and the priced plan, when they were made."""
        plan, self._plan = self._plan, None
        priced, self._priced = self._priced, None
        if plan is not None:
            plan.release()
        if priced is not None:
            priced.release()


def _compiled_only(spec: ContractionSpec) -> bool:
    """Whether ``spec`` is small and lowers to a program the executor runs as it is."""
    if spec.flops > COMPILED_MAX_FLOPS or not compiled_programs.available():
        return False
    gemm = compiled_programs.blas_available()
    lowered = lower(spec, gemm=gemm)
    return lowered is not None


class AutoBackend(Stateless):
    """Chooses among the available backends per plan."""

    name = "auto"
    capabilities = Capabilities()  # the union of the available backends

    def available(self) -> tuple[bool, str]:
        """Report availability: always (blas and reference always are)."""
        return True, ""

    def plan(self, spec: ContractionSpec, executor: Executor | None
             ) -> AutoPlan | CompiledPlan:
        """Pick by this machine's wisdom, else by the cost model; plan on that backend."""
        from pytapp import backends

        key = _key(spec)
        known = wisdom.lookup("product", key)
        remembered = known.get("choice") if isinstance(known, dict) else None
        seconds = known.get("seconds") if isinstance(known, dict) else None
        if isinstance(seconds, dict):  # decided again by today's rule (an older file's min)
            timed = {n: float(t) for n, t in seconds.items()
                     if n in AUTOMATIC and isinstance(t, (int, float))}
            if timed:
                remembered = pool_choice(timed, {n: backends.pool_of(n) for n in timed})
        if remembered not in AUTOMATIC:  # an older file's tblis (see the module's notes)
            remembered = None
        if (remembered is None and _tune_policy() not in _ALWAYS and _compiled_only(spec)
                and not (executor is not None and executor.autotune)):
            blas = backends.get("blas")
            if blas.capabilities.unsupported_reason(spec) is None:
                return CompiledPlan(spec, blas, executor)
        return self.priced(spec, executor, remembered, key)

    def priced(self, spec: ContractionSpec, executor: Executor | None,
               remembered: object = None, key: str | None = None) -> AutoPlan:
        """Plan on the remembered choice, else the cost model's, among every capable backend.

        ``key``: the product's wisdom key, when the caller has it.
        """
        from pytapp import backends

        candidates: dict[str, Backend] = {}
        for name in CANDIDATES:
            try:
                backend = backends.get(name)
            except TappError:
                continue
            if backend.capabilities.unsupported_reason(spec) is None:
                candidates[name] = backend
        if not candidates:  # e.g. more modes than any backend binds: say why blas cannot
            backends.get("blas").capabilities.require(spec, self.name)
            raise error_for(ErrorCode.UNSUPPORTED,
                            f"no backend can run {spec.einsum()}; see pytapp backends")
        profile = None
        planned: dict[str, BackendPlan] = {}
        if "blas" in candidates:
            planned["blas"] = candidates["blas"].plan(spec, executor)
            profile = getattr(planned["blas"], "profile", None)
        machine = machine_constants()
        tunable = [n for n in candidates if n != "reference"]
        predicted = predictions(spec, tunable, profile, machine)
        choice = remembered if remembered in candidates else model_choice(
            spec, list(candidates), profile, machine)
        # torch priced at its native low-precision rate: calls it cannot run natively go to
        # the model's choice for them
        general = (model_choice(spec, list(candidates), profile, machine, native=False)
                   if choice == "torch" and spec.native_low is not None else None)
        try:
            plan = AutoPlan(spec, candidates, str(choice), executor, predicted, planned, general,
                            key)
        except TappError:
            # Capabilities do not say everything (torch and tblis take at most 52 labels,
            # a library may refuse a layout): only auto may choose another backend.
            choice = "blas" if "blas" in candidates and choice != "blas" else "reference"
            plan = AutoPlan(spec, candidates, choice, executor, predicted, planned, key=key)
        plan.tuned = remembered in candidates
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("auto on %s: %s (%s); predicted %s", spec.einsum(), plan.choice,
                       "remembered" if plan.tuned else "cost model",
                       ", ".join(f"{n} {t * 1e3:.3f} ms" for n, t in predicted.items()))
        return plan
