"""The ``auto`` backend: picks a backend per plan, and records what ran.

Without measurements it follows a cost model: products whose inputs are stored in F16/BF16 go
to ``torch`` when it is installed (native low-precision matmul, fast conversions), F16
accumulation to ``reference`` through ``blas``, everything else to ``blas``; a candidate that
cannot run the product (capabilities) is skipped. With ``Executor(autotune=True)`` the first
execution times every capable candidate on the real operands, keeps the fastest, and remembers
the winner per product structure in a bounded cache (persisted as JSON when the environment
variable ``PYTAPP_AUTOTUNE_CACHE`` names a file).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections import OrderedDict
from typing import Any

import numpy as np

from pytapp.analysis.spec import ContractionSpec
from pytapp.backends.base import Backend, BackendPlan, Capabilities, Stateless
from pytapp.datatypes import Datatype
from pytapp.errors import TappError
from pytapp.executor import Executor
from pytapp.operands import BoundProduct
from pytapp.status import Status

__all__ = ["CANDIDATES", "AutoBackend", "AutoPlan"]

#: Backends ``auto`` may choose, in order of preference when the model has no opinion.
CANDIDATES = ("blas", "torch", "tblis", "reference")
#: Most product structures whose measured winner is remembered.
CACHE_SIZE = 1024

_winners: OrderedDict[str, str] = OrderedDict()
_lock = threading.Lock()
_loaded = False


def _key(spec: ContractionSpec) -> str:
    return hashlib.sha1(repr(spec).encode()).hexdigest()


def _cache_file() -> str | None:
    return os.environ.get("PYTAPP_AUTOTUNE_CACHE") or None


def _load() -> None:
    global _loaded
    path = _cache_file()
    if _loaded or path is None:
        return
    _loaded = True
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        if isinstance(data, dict):
            for k, v in list(data.items())[-CACHE_SIZE:]:
                _winners[str(k)] = str(v)
    except (OSError, ValueError):
        pass


def _remember(key: str, name: str) -> None:
    with _lock:
        _winners[key] = name
        _winners.move_to_end(key)
        while len(_winners) > CACHE_SIZE:
            _winners.popitem(last=False)
        path = _cache_file()
        if path is not None:
            try:
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                tmp = f"{path}.tmp"
                with open(tmp, "w", encoding="utf-8") as fh:
                    json.dump(dict(_winners), fh)
                os.replace(tmp, path)
            except OSError:
                pass


#: GEMMs from which MKL (through torch) beats NumPy's OpenBLAS here: contraction size and
#: multiply-adds.
TORCH_MIN_K = 256
TORCH_MIN_MACS = 1 << 27
#: Small contraction sizes where TBLIS (no explicit transposition) beats TTGT ...
TBLIS_MAX_K = 64
#: ... when TTGT would copy this many bytes, or cannot write D directly.
TBLIS_MIN_COPY = 16 << 20


def model_choice(spec: ContractionSpec, capable: list[str],
                 profile: dict[str, Any] | None = None) -> str:
    """The cost model's pick among ``capable`` backends (``profile``: the blas plan's).

    Measured on the public benchmark cases (docs/benchmarks.md): torch for F16/BF16 inputs
    (native conversions and matmul) and for large-k GEMMs (MKL); tblis where TTGT would copy
    much or cannot write D in place for a small k, or for elementwise products into permuted
    outputs; blas otherwise.
    """
    low = {Datatype.F16, Datatype.BF16}
    if spec.rule.real is Datatype.F16 and "blas" in capable:
        return "blas"
    if spec.a.datatype in low and spec.b.datatype in low and "torch" in capable:
        return "torch"
    p = profile or {}
    kind = p.get("kind")
    macs = p.get("h", 1) * p.get("m", 0) * p.get("n", 0) * p.get("k", 0)
    if (kind == "gemm" and "torch" in capable and p.get("h") == 1
            and p.get("k", 0) >= TORCH_MIN_K and macs >= TORCH_MIN_MACS):
        return "torch"
    if "tblis" in capable and (
        (kind == "gemm" and p.get("k", 0) <= TBLIS_MAX_K
         and (not p.get("d_direct") or p.get("copy_bytes", 0) >= TBLIS_MIN_COPY))
        or (kind == "elementwise" and not p.get("d_direct"))
    ):
        return "tblis"
    return "blas" if "blas" in capable else capable[0]


class AutoPlan:
    """The chosen backend's plan; the other candidates are planned only for autotuning."""

    def __init__(self, spec: ContractionSpec, candidates: dict[str, Backend], choice: str,
                 executor: Executor | None) -> None:
        self.spec, self.candidates, self.choice = spec, candidates, choice
        self.plans: dict[str, BackendPlan] = {choice: candidates[choice].plan(spec, executor)}
        self.key = _key(spec)
        self.tuned = False
        self._prefix = f"auto -> {choice}: "

    @property
    def algorithm(self) -> str:
        """``auto -> NAME: what NAME does``."""
        return self._prefix + self.plans[self.choice].algorithm

    @property
    def workspace_bytes(self) -> int:
        """The chosen plan's workspace."""
        return int(getattr(self.plans[self.choice], "workspace_bytes", 0))

    def _tune(self, bound: BoundProduct, executor: Executor | None) -> None:
        """Time every candidate once on these operands; D ends with the last (valid) result."""
        times: dict[str, float] = {}
        for name, backend in self.candidates.items():
            if name == "reference" and len(self.candidates) > 1:
                continue  # never the fastest; its cost can be prohibitive
            try:
                plan = self.plans.get(name) or backend.plan(self.spec, executor)
                self.plans[name] = plan
                start = time.perf_counter()
                plan.run(bound, executor)
            except TappError:
                continue
            times[name] = time.perf_counter() - start
        if times:
            self.choice = min(times, key=lambda n: times[n])
            self._prefix = f"auto -> {self.choice}: "
            _remember(self.key, self.choice)
        self.tuned = True

    def release(self) -> None:
        """Release every candidate's plan."""
        plans, self.plans = self.plans, {}
        for plan in plans.values():
            plan.release()

    def run(self, bound: BoundProduct, executor: Executor | None) -> Status:
        """Run the chosen backend (timing the candidates first when autotuning)."""
        if executor is not None and executor.autotune and not self.tuned:
            writes_input = bound.c is not None and np.may_share_memory(bound.c, bound.d)
            if not writes_input:  # every candidate must see the same C
                self._tune(bound, executor)
        status = self.plans[self.choice].run(bound, executor)
        status.algorithm = self._prefix + status.algorithm
        return status


class AutoBackend(Stateless):
    """Chooses among the available backends per plan."""

    name = "auto"
    capabilities = Capabilities(notes="the union of the available backends")

    def available(self) -> tuple[bool, str]:
        """Always available (blas and reference always are)."""
        return True, ""

    def plan(self, spec: ContractionSpec, executor: Executor | None) -> AutoPlan:
        """Pick by remembered measurement, else by the cost model; plan on that backend."""
        from pytapp import backends

        candidates: dict[str, Backend] = {}
        for name in CANDIDATES:
            try:
                backend = backends.get(name)
            except TappError:
                continue
            if backend.capabilities.unsupported_reason(spec) is None:
                candidates[name] = backend
        with _lock:
            _load()
            remembered = _winners.get(_key(spec))
        profile = None
        if "blas" in candidates:
            blas_plan = candidates["blas"].plan(spec, executor)
            profile = getattr(blas_plan, "profile", None)
        choice = remembered if remembered in candidates else model_choice(
            spec, list(candidates), profile)
        try:
            plan = AutoPlan(spec, candidates, str(choice), executor)
        except TappError:
            choice = "blas" if "blas" in candidates and choice != "blas" else "reference"
            plan = AutoPlan(spec, candidates, choice, executor)
        plan.tuned = remembered in candidates
        return plan
