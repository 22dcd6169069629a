"""What a backend is: capabilities, a plan factory, and plans that run bound products.

Examples
--------
>>> caps = Capabilities(datatypes=frozenset({Datatype.F64}))
>>> caps.check_datatypes((Datatype.F64,) * 4) is None
True
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pytapp.analysis.spec import ContractionSpec
from pytapp.datatypes import Datatype
from pytapp.errors import ErrorCode, error_for
from pytapp.executor import Executor
from pytapp.operands import BoundProduct
from pytapp.precision import Prectype
from pytapp.status import Status

__all__ = ["ALL_DATATYPES", "ALL_PRECTYPES", "BLAS_POOL", "IMPORT_SECONDS", "Backend",
           "BackendPlan", "Capabilities", "OptionalModule", "Stateless", "setup_seconds",
           "thread_pool", "thread_setting"]

#: Seconds importing a backend's library is assumed to cost until it is imported (torch took
#: 1.7 s on a 2-core EPYC, pytblis 0.1 s): what planning it the first time adds.
IMPORT_SECONDS = {"torch": 2.0}
#: ... for a library not named there.
_OTHER_IMPORT_SECONDS = 0.2

ALL_DATATYPES = frozenset(Datatype)
ALL_PRECTYPES = frozenset(Prectype)


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; a plan outside these raises error 18 (or 16 for precisions)."""

    datatypes: frozenset[Datatype] = ALL_DATATYPES
    prectypes: frozenset[Prectype] = ALL_PRECTYPES
    mixed_datatypes: bool = True
    broadcast: bool = True
    negative_strides: bool = True
    zero_strides: bool = True
    repeated_labels: bool = True
    isolated_labels: bool = True
    conjugation: bool = True
    batched: bool = True
    #: Modes per operand after merging repeated labels: every operand is bound as a NumPy
    #: view over its merged modes, and NumPy arrays have at most 64 dimensions.
    max_modes: int = 64

    def check_datatypes(self, datatypes: tuple[Datatype, ...]) -> str | None:
        """Reason the datatypes are unsupported, or ``None``."""
        kinds = set(datatypes)
        if kinds <= self.datatypes and (self.mixed_datatypes or len(kinds) == 1):
            return None
        missing = sorted({dt.name for dt in kinds if dt not in self.datatypes})
        if missing:
            return "datatypes " + ", ".join(missing) + " are not supported"
        if not self.mixed_datatypes and len(set(datatypes)) > 1:
            return "mixed datatypes are not supported"
        return None

    def unsupported_reason(self, spec: ContractionSpec) -> str | None:
        """Why this backend cannot run ``spec``, or ``None`` when it can."""
        reason = self.check_datatypes(spec.datatypes)
        if reason:
            return reason
        if spec.prec not in self.prectypes:
            return f"precision {spec.prec.name} is not supported"
        if spec.classes.IC and not self.broadcast:
            return "broadcast labels (Case 5) are not supported"
        if (spec.classes.IA or spec.classes.IB) and not self.isolated_labels:
            return "isolated labels (Case 4 reductions) are not supported"
        traits = spec.traits  # the common case, every layout accepted, without the loop below
        if (traits.most_modes <= self.max_modes
                and (self.repeated_labels or not traits.repeated)
                and (self.negative_strides or not traits.negative)
                and (self.zero_strides or not traits.zero)):
            return None
        for op in spec.operands:
            if len(op.modes.labels) > self.max_modes:
                return (f"{op.role} has {len(op.modes.labels)} modes, more than this backend's "
                        f"limit of {self.max_modes} (NumPy arrays have at most 64 dimensions); "
                        "drop modes of extent 1 or merge modes that are contiguous")
            if len(op.modes.labels) != len(op.labels) and not self.repeated_labels:
                return f"repeated labels in {op.role} are not supported"
            if any(s < 0 for s in op.strides) and not self.negative_strides:
                return f"negative strides in {op.role} are not supported"
            if any(s == 0 for s, e in zip(op.strides, op.extents, strict=True) if e > 1) and not (
                self.zero_strides
            ):
                return f"zero strides in {op.role} are not supported"
        return None

    def require(self, spec: ContractionSpec, backend: str) -> None:
        """Raise 16 or 18 with the reason when ``spec`` is outside these capabilities."""
        reason = self.unsupported_reason(spec)
        if reason is None:
            return
        code = ErrorCode.UNKNOWN_PRECISION if "precision" in reason else ErrorCode.UNSUPPORTED
        raise error_for(code, f"backend {backend!r}: {reason}; choose another backend")


@runtime_checkable
class BackendPlan(Protocol):
    """A backend's executable plan for one ContractionSpec."""

    algorithm: str
    #: Upper bound of the temporaries one execution allocates (bytes).
    workspace_bytes: int

    def run(self, bound: BoundProduct, executor: Executor | None) -> Status:
        """Compute into ``bound.d``; return what was done (seconds are set by the caller)."""
        ...

    def release(self) -> None:
        """Free what the plan holds (library objects, workspaces); idempotent."""
        ...


@runtime_checkable
class Backend(Protocol):
    """A backend: a name, capabilities, availability and a plan factory."""

    name: str
    capabilities: Capabilities

    def available(self) -> tuple[bool, str]:
        """(whether it can run here, why not)."""
        ...

    def plan(self, spec: ContractionSpec, executor: Executor | None) -> BackendPlan:
        """Build a plan (all decisions made here); raise 18 when unsupported."""
        ...

    def release(self) -> None:
        """Free what the backend holds for its handle (library handles); idempotent."""
        ...


#: The thread pool of a backend that names none: NumPy's BLAS (OpenBLAS), which blas's GEMMs
#: and pytapp's own parallel work run on.
BLAS_POOL = "blas"


def thread_pool(backend: object) -> str:
    """Name the thread pool ``backend``'s calls run on (a ``pool`` attribute, else NumPy's BLAS).

    The tuners time candidates of one pool together and pause before another's
    (:func:`pytapp.wisdom.time_candidates`): a pool's idle threads keep spinning after its
    calls and slow the next pool's.

    Examples
    --------
    >>> thread_pool(object())
    'blas'
    """
    return str(getattr(backend, "pool", BLAS_POOL))


def setup_seconds(backend: object) -> float:
    """Seconds ``backend``'s first plan would spend loading its library (0: nothing to load).

    A backend that imports a library on first use says so with a ``setup_seconds()`` method;
    the tuners add it to what timing that backend costs, and the cost model does not import
    a library only to measure its per-call cost.

    Examples
    --------
    >>> setup_seconds(object())
    0.0
    """
    method = getattr(backend, "setup_seconds", None)
    return float(method()) if callable(method) else 0.0


@contextmanager
def thread_setting(get: Callable[[], int], set_: Callable[[int], object],
                   threads: int | None) -> Iterator[None]:
    """Set a library's global thread count for one call.

    The previous count is restored afterwards: the executor's count is for this product, not
    for the rest of the process.
    """
    if not threads:
        yield
        return
    previous = get()
    set_(threads)
    try:
        yield
    finally:
        set_(previous)


class Stateless:
    """Mixin for plans and backends that hold nothing to free: ``release`` does nothing."""

    def release(self) -> None:
        """Nothing to free."""


class OptionalModule:
    """A third-party library a backend needs: found without importing, imported on first use.

    Examples
    --------
    >>> OptionalModule("no_such_module_here", "extra").why
    "no_such_module_here is not installed; pip install 'pytapp[extra]'"
    """

    def __init__(self, name: str, extra: str) -> None:
        self.name = name
        self._module: Any = None
        found = importlib.util.find_spec(name) is not None
        self.why = "" if found else f"{name} is not installed; pip install 'pytapp[{extra}]'"

    def available(self) -> tuple[bool, str]:
        """(whether the library is installed, why not)."""
        return not self.why, self.why

    def setup_seconds(self) -> float:
        """Seconds the first :meth:`load` would cost now: 0 once the library is imported."""
        if self._module is not None or self.name in sys.modules:
            return 0.0
        return IMPORT_SECONDS.get(self.name, _OTHER_IMPORT_SECONDS)

    def load(self) -> Any:
        """Return the imported module (imported once)."""
        if self._module is None:
            self._module = importlib.import_module(self.name)
        return self._module
