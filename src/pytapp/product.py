"""TensorProduct: the plan of ``D := op_D(alpha op_A(A) op_B(B) + beta op_C(C))``.

All structural checks run at creation, so a plan that exists is valid; ``execute`` only binds
the buffers, checks them, and runs the backend's precomputed plan.

Examples
--------
>>> import numpy as np
>>> from pytapp import Handle, TensorInfo, TensorProduct
>>> a, b = np.ones((2, 3)), np.ones((3, 4))
>>> d = np.zeros((2, 4))
>>> with Handle("reference") as h:
...     plan = TensorProduct(h, TensorInfo.from_array(a), "ik", TensorInfo.from_array(b), "kj",
...                          None, None, TensorInfo.from_array(d), "ij")
...     status = plan.execute(2.0, a, b, 0.0, None, d)
>>> float(d[0, 0]), status.backend
(6.0, 'reference')
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

from pytapp import backends
from pytapp.analysis.labels import normalize_labels
from pytapp.analysis.spec import ContractionSpec, build_spec
from pytapp.attributes import Attr, TappObject
from pytapp.backends.base import BackendPlan
from pytapp.backends.verify import VerifiedPlan
from pytapp.datatypes import ElementOp
from pytapp.errors import ErrorCode, error_for
from pytapp.executor import Executor, runner_for, runner_kind, thread_scope
from pytapp.handle import Handle
from pytapp.kernels.program import compile_product
from pytapp.kernels.routes import RouteTrial, routes_for
from pytapp.operands import Binder, BoundProduct, bind_batch
from pytapp.precision import Prectype
from pytapp.status import Status
from pytapp.tensor import TensorInfo
from pytapp.typing import ArrayLike, ElementOpLike, Labels, PrectypeLike, Scalar

__all__ = ["TensorProduct"]

_log = logging.getLogger("pytapp")


def _log_status(status: Status) -> None:
    _log.info("execute on %s in %.3f ms: %s (%d bytes copied)", status.backend,
              1e3 * status.seconds, status.algorithm, status.bytes_copied)


def _check_info(info: Any, role: str) -> TensorInfo:
    if not isinstance(info, TensorInfo):
        raise error_for(
            ErrorCode.UNKNOWN_DATATYPE,
            f"{role} must be described by a pytapp.TensorInfo, not {type(info).__name__}; "
            "use TensorInfo(datatype, extents, strides) or TensorInfo.from_array(array)",
        )
    return info


class TensorProduct(TappObject):
    """A validated, reusable plan for one tensor product.

    Parameters
    ----------
    handle
        The :class:`Handle` whose backend runs this product.
    a, a_labels, b, b_labels, c, c_labels, d, d_labels
        Descriptor and labels of each operand (labels: a string with one character per mode,
        or any sequence of hashables). ``c=None`` gives C the descriptor of D, and
        ``c_labels=None`` gives it D's labels.
    op_a, op_b, op_c, op_d
        :class:`ElementOp` per operand; ``op_d`` applies to the whole result.
    prec
        :class:`Prectype`.
    allow_broadcast
        Accept labels only in D (Case 5); default from the handle's ALLOW_BROADCAST.
    executor
        Executor the backend may plan for (threads, device); execution may use another.

    Raises
    ------
    TappError
        Codes 13-17 and 1-11 at creation, in SPEC section 5's order; 18 when the backend
        cannot run this product; 23/24 for a destroyed or foreign handle.
    """

    _attr_keys = frozenset({Attr.ALLOW_BROADCAST, Attr.ALGORITHM, Attr.BACKEND})
    _attr_readonly = frozenset({Attr.ALLOW_BROADCAST, Attr.ALGORITHM, Attr.BACKEND})
    _attr_fields: ClassVar[Mapping[int, str]] = MappingProxyType({
        Attr.ALLOW_BROADCAST: "allow_broadcast", Attr.ALGORITHM: "algorithm",
        Attr.BACKEND: "backend_name"})

    def __init__(
        self,
        handle: Handle,
        a: TensorInfo,
        a_labels: Labels,
        b: TensorInfo,
        b_labels: Labels,
        c: TensorInfo | None,
        c_labels: Labels | None,
        d: TensorInfo,
        d_labels: Labels,
        *,
        op_a: ElementOpLike = ElementOp.IDENTITY,
        op_b: ElementOpLike = ElementOp.IDENTITY,
        op_c: ElementOpLike = ElementOp.IDENTITY,
        op_d: ElementOpLike = ElementOp.IDENTITY,
        prec: PrectypeLike = Prectype.DEFAULT,
        allow_broadcast: bool | None = None,
        executor: Executor | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(handle, Handle):
            raise error_for(
                ErrorCode.HANDLE_MISMATCH,
                f"handle must be a pytapp.Handle, not {type(handle).__name__}",
            )
        handle.check_alive()
        self.handle = handle
        infos = {
            "A": _check_info(a, "A"),
            "B": _check_info(b, "B"),
            "D": _check_info(d, "D"),
        }
        infos["C"] = infos["D"] if c is None else _check_info(c, "C")
        raw = {"A": a_labels, "B": b_labels, "D": d_labels}
        raw["C"] = d_labels if c_labels is None else c_labels
        labels = {r: normalize_labels(raw[r], infos[r].nmodes, r) for r in "ABCD"}
        ops = {"A": op_a, "B": op_b, "C": op_c, "D": op_d}
        if allow_broadcast is None:
            allow_broadcast = bool(handle.allow_broadcast)
        items = {
            r: (infos[r].datatype, infos[r].extents, infos[r].strides, labels[r], ops[r])
            for r in "ABCD"
        }
        self.spec: ContractionSpec = build_spec(
            items["A"], items["B"], items["C"], items["D"], prec, bool(allow_broadcast)
        )
        self.infos = (infos["A"], infos["B"], infos["C"], infos["D"])
        start = time.perf_counter()
        plan = handle.backend.plan(self.spec, self._valid_executor(executor))
        # The compiled executor runs the product when the backend lets it ("compiled") and the
        # product lowers to a program; operands it does not cover take the backend's plan.
        self._program: Any = None
        name = handle.backend_name

        def make_status() -> Status:
            return Status(backend="blas", flops=self.spec.flops,
                          algorithm="" if name == "blas" else f"{name} -> blas: ")

        template = make_status()
        if getattr(plan, "compiled", False):
            self._program = compile_product(self.spec, template)
            # a plan that may tune tries the route the cost model cannot weigh (kernels.routes)
            key = getattr(plan, "route_key", None)
            if self._program is not None and key is not None:
                self._program, template = routes_for(self.spec, self._program, template, key,
                                                     make_status, handle.memory_limit())
        program_bytes = template.bytes_allocated if self._program is not None else 0
        # Either may run: the larger of the two workspaces is what an execution may need.
        self.workspace_bytes = max(int(getattr(plan, "workspace_bytes", 0)), program_bytes)
        try:
            limit = handle.memory_limit()
            settle = getattr(plan, "settle", None)
            if self.workspace_bytes > limit and settle is not None:
                settle()  # a bound until the backend plans: plan now, for the exact figure
                self.workspace_bytes = max(int(plan.workspace_bytes), program_bytes)
            self._check_memory(limit, "the handle's MEMORY_LIMIT (default: half the free memory)")
        except BaseException:
            plan.release()  # nothing the backend created outlives a failed creation
            raise
        self._plan: BackendPlan | None = plan
        #: Runs D = op_D(beta op_C(C)) when alpha is zero (made on first use).
        self._c_only: BackendPlan | None = None
        self._algorithm = template.algorithm if self._program is not None else plan.algorithm
        self._binder = Binder(self.spec)
        if _log.isEnabledFor(logging.INFO):
            _log.info("plan %s on %s in %.3f ms: %s (workspace %d bytes)", self.spec.einsum(),
                      handle.backend_name, 1e3 * (time.perf_counter() - start), plan.algorithm,
                      self.workspace_bytes)
        handle._register(self)

    def _check_memory(self, limit: int, source: str) -> None:
        if self.workspace_bytes > limit:
            raise error_for(
                ErrorCode.UNSUPPORTED,
                f"this product needs about {self.workspace_bytes / 2**20:.1f} MiB of workspace "
                f"on backend {self.handle.backend_name!r}, more than {source} of "
                f"{limit / 2**20:.1f} MiB; raise the limit (set_attr(Attr.MEMORY_LIMIT, bytes)),"
                " give D a layout the backend can write directly, or split the product",
            )

    # ------------------------------------------------------------------ lifecycle
    def check_alive(self) -> None:
        """Raise code 23 when the plan (or its handle) was destroyed."""
        super().check_alive()
        self.handle.check_alive()

    def _release(self) -> None:
        """Release the backend plan (C products, workspaces) and drop it."""
        plan, self._plan, self._c_only = self._plan, None, None
        self._program = None
        if plan is not None:
            plan.release()

    def _backend_plan(self) -> BackendPlan:
        self.check_alive()
        assert self._plan is not None  # alive plans always have one
        return self._plan

    @property
    def algorithm(self) -> str:
        """What the plan decided at creation: the compiled program, else the backend's plan."""
        plan, program = self._plan, self._program
        if isinstance(program, RouteTrial):
            return program.algorithm
        if program is not None or plan is None:
            return self._algorithm
        return plan.algorithm

    def explain(self) -> str:
        """Return what this plan does and why.

        The product, the backend's algorithm and, for ``auto``, every candidate with its
        predicted (and, once tuned, measured) time.

        Examples
        --------
        >>> import numpy as np
        >>> from pytapp import Handle, TensorInfo, TensorProduct
        >>> x = TensorInfo.from_array(np.ones((2, 2)))
        >>> print(TensorProduct(Handle("blas"), x, "ik", x, "kj", None, None, x, "ij")
        ...       .explain().splitlines()[0])
        ik,kj->ij (F64 x F64 -> F64, prec DEFAULT) on blas
        """
        spec = self.spec
        head = (f"{spec.einsum()} ({spec.a.datatype.name} x {spec.b.datatype.name} -> "
                f"{spec.d.datatype.name}, prec {spec.prec.name}) on {self.backend_name}")
        plan = self._plan
        detail = getattr(plan, "explain", None)
        body = detail() if callable(detail) else f"{plan.algorithm if plan else self.algorithm}"
        program = self._program
        if program is not None:
            body = (f"{self.algorithm} (operands with the descriptors' exact layouts; "
                    f"others:)\n{body}")
        if isinstance(program, RouteTrial):
            state = "settled" if program.settled else "on trial"
            body = (f"{body}\nroutes tried on its calls ({state}):"
                    + "".join(f"\n  {algorithm}" for algorithm in program.algorithms))
        return f"{head}\n{body}\nworkspace: {self.workspace_bytes} bytes, flops: {spec.flops}"

    @property
    def compiled_program(self) -> Any:
        """The compiled executor's program of this plan, or ``None`` (the backend plan runs).

        Calling it with ``(alpha, A, B, beta, C, D)`` runs the product when the operands are
        exactly the descriptors' layouts and returns a :class:`Status`; otherwise it returns
        ``NotImplemented`` without touching anything (:meth:`execute` then binds them).
        ``None`` too while the plan tries its routes (:mod:`pytapp.kernels.routes`): only
        :meth:`execute` counts its calls toward the trial.
        """
        program = self._program
        if isinstance(program, RouteTrial):
            return program.current if program.settled else None
        return program

    @property
    def allow_broadcast(self) -> bool:
        """Whether labels only in D (Case 5) are accepted (fixed at creation)."""
        return self.spec.allow_broadcast

    @property
    def backend_name(self) -> str:
        """Name of the backend that runs this plan."""
        return self.handle.backend_name

    @property
    def flops(self) -> int:
        """Floating-point operations of one execution."""
        return self.spec.flops

    @property
    def predicted_seconds(self) -> float | None:
        """Return the cost model's time for one execution, when the backend has one.

        That is the chosen algorithm's predicted time when the backend priced its candidates
        (``auto``); ``None`` otherwise.
        """
        plan = self._plan
        predicted = getattr(plan, "predicted", None)
        choice = getattr(plan, "choice", None)
        if isinstance(predicted, dict) and choice in predicted:
            return float(predicted[choice])
        return None

    def __repr__(self) -> str:
        return (
            f"TensorProduct({self.spec.einsum()!r}, backend={self.backend_name!r}, "
            f"algorithm={self.algorithm!r}, prec={self.spec.prec.name})"
        )

    # ------------------------------------------------------------------ execution
    def _executor(self, executor: Any) -> Executor | None:
        """Validate an execution's executor (type, lifetime, handle, memory limit)."""
        checked = self._valid_executor(executor)
        if checked is not None and checked.memory_limit is not None:
            self._check_memory(checked.memory_limit, "the executor's MEMORY_LIMIT")
        return checked

    def _valid_executor(self, executor: Any) -> Executor | None:
        if executor is None:
            return None
        if not isinstance(executor, Executor):
            raise error_for(
                ErrorCode.INVALID_EXECUTOR,
                f"executor must be a pytapp.Executor or None, not {type(executor).__name__}",
            )
        executor.check_alive()
        if executor.handle is not None and executor.handle is not self.handle:
            raise error_for(
                ErrorCode.HANDLE_MISMATCH,
                "the executor was created by another handle; create it with this plan's handle",
            )
        return executor

    @staticmethod
    def _run_default(plan: BackendPlan, bound: BoundProduct) -> Status:
        """Run on the default executor: nothing to set up."""
        start = time.perf_counter()
        status = plan.run(bound, None)
        status.seconds = time.perf_counter() - start
        status.bytes_copied += bound.bytes_copied
        if _log.isEnabledFor(logging.INFO):
            _log_status(status)
        return status

    def _run_c_only(self, bound: BoundProduct) -> Status:
        """Run an execution whose alpha is 0: D = op_D(beta op_C(C)) (or +0), A, B not read.

        SPEC section 1. Done here once for every backend, by the reference's loop nest over
        D's elements (it rounds C and applies the ops exactly as SPEC section 1 orders them):
        no backend multiplies NaN or Inf in A or B by zero.
        """
        plan = self._c_only
        if plan is None:
            plan = self._c_only = backends.get("reference").plan(self.spec, None)
        start = time.perf_counter()
        status = plan.run(bound, None)
        status.seconds = time.perf_counter() - start
        status.algorithm = "alpha == 0: D = op_D(beta op_C(C)), A and B not read"
        status.flops = 0
        status.bytes_copied += bound.bytes_copied
        if _log.isEnabledFor(logging.INFO):
            _log_status(status)
        return status

    def _run(self, bound: BoundProduct, executor: Executor | None) -> Status:
        plan = self._backend_plan()
        if bound.alpha_zero:
            return self._run_c_only(bound)
        if executor is None:
            return self._run_default(plan, bound)
        if executor.verify:  # times its inner run itself, so the check is not counted
            plan = VerifiedPlan(plan, self.spec, self.backend_name)
        start = time.perf_counter()
        with thread_scope(executor.threads):
            status = plan.run(bound, executor)
        if not executor.verify:
            status.seconds = time.perf_counter() - start
        status.bytes_copied += bound.bytes_copied
        if _log.isEnabledFor(logging.INFO):
            _log_status(status)
        return status

    def execute(
        self,
        alpha: Scalar,
        a: ArrayLike,
        b: ArrayLike,
        beta: Scalar,
        c: ArrayLike | None,
        d: ArrayLike,
        executor: Executor | None = None,
    ) -> Status:
        """Compute ``D := op_D(alpha op_A(A) op_B(B) + beta op_C(C))`` into ``d``.

        Parameters
        ----------
        alpha, beta
            Scalars, converted to D's datatype. ``beta == 0`` means C is not read.
        a, b, c, d
            Data for each operand: NumPy arrays, buffers or DLPack tensors whose element
            [0, ..., 0] is the descriptor's. ``c`` may be ``None`` when ``beta == 0``.
        executor
            Where to run; ``None`` is the default executor.

        Returns
        -------
        Status
            Backend, algorithm, seconds, flops and bytes copied.

        Raises
        ------
        TappError
            23 destroyed; 33/24 invalid or foreign executor; 19, 20, 22 operand binding;
            21 alpha/beta; 12 C missing; 137 verification. D is unchanged on every error.
        """
        program = self._program
        if program is not None and executor is None:  # the hot path: one compiled call
            status: Any = program(alpha, a, b, beta, c, d)
            if status is not NotImplemented:
                if _log.isEnabledFor(logging.INFO):
                    _log_status(status)
                return status  # type: ignore[no-any-return]
        plan = self._plan
        if executor is None and plan is not None:  # a live plan, no executor
            bound = self._binder.bind(alpha, a, b, beta, c, d)
            if bound.alpha_zero:
                return self._run_c_only(bound)
            return self._run_default(plan, bound)
        self.check_alive()
        ex = self._executor(executor)
        if ex is not None and runner_kind(ex) is not None:  # on a cluster, or on a device
            result: Status = runner_for(ex).execute(self, alpha, a, b, beta, c, d)
            return result
        bound = self._binder.bind(alpha, a, b, beta, c, d)
        return self._run(bound, ex)

    def bind(self, alpha: Scalar, a: ArrayLike, b: ArrayLike, beta: Scalar, c: ArrayLike | None,
             d: ArrayLike) -> BoundProduct:
        """Check and bind operands once, for :meth:`run_bound` to execute many times.

        The bound views keep pointing at the same memory: the caller promises not to free or
        resize it while the binding is used (pytapp's einsum networks bind their own
        intermediate buffers this way). Raises as :meth:`execute` does.
        """
        self.check_alive()
        return self._binder.bind(alpha, a, b, beta, c, d)

    def run_bound(self, bound: BoundProduct) -> Status:
        """Execute on operands bound by :meth:`bind` (on the default executor)."""
        self.check_alive()
        return self._run(bound, None)

    def execute_batched(
        self,
        alpha: Scalar,
        a: Sequence[ArrayLike],
        b: Sequence[ArrayLike],
        beta: Scalar,
        c: Sequence[ArrayLike] | None,
        d: Sequence[ArrayLike],
        executor: Executor | None = None,
    ) -> Status:
        """Run the product on every item of equally long operand lists.

        Every item is bound and checked before the first is computed, so an error leaves every
        D unchanged. Items whose D overlaps another item's inputs see those inputs as they were
        before the batch; two D's that overlap each other are error 8.

        Raises
        ------
        BatchLengthError
            Code 25 when the lists differ in length; otherwise as :meth:`execute`.
        """
        self.check_alive()
        ex = self._executor(executor)
        lists = {"A": a, "B": b, "C": c, "D": d}
        for role, items in lists.items():
            if (items is None and role != "C") or (
                    items is not None and not isinstance(items, Sequence)):
                raise error_for(
                    ErrorCode.BATCH_LENGTH,
                    f"execute_batched takes a list of {role} operands, not "
                    f"{type(items).__name__}; pass one item per product"
                    + (" (or None for C when beta is 0)" if role == "C" else ""),
                )
        cs: Sequence[Any] = [None] * len(d) if c is None else c
        lengths = {len(a), len(b), len(cs), len(d)}
        if len(lengths) != 1:
            raise error_for(
                ErrorCode.BATCH_LENGTH,
                f"batched lists have lengths A={len(a)}, B={len(b)}, C={len(cs)}, D={len(d)}; "
                "give every operand list the same length",
            )
        if ex is not None and runner_kind(ex) == "device":
            found: Status = runner_for(ex).execute_batched(self, alpha, a, b, beta, cs, d)
            return found
        bounds = bind_batch(self._binder, alpha, a, b, beta, cs, d)
        total = Status(backend=self.backend_name, algorithm=self.algorithm, products=0)
        for bound in bounds:
            total.merge(self._run(bound, ex))
        return total

