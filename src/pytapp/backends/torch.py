"""The ``torch`` backend: products run by torch (extra ``torch``, torch==2.13.0).

GEMM-shaped products use the TTGT layout shared with ``blas`` (``analysis.ttgt``) and
``torch.matmul`` (MKL on x86), written straight into D when its layout allows; Hadamard, outer
and dot products go through ``torch.einsum``. NumPy arrays and CPU torch tensors (through
DLPack) are viewed without copying and the result is written into D in place. Products of F16
(BF16) inputs use torch's native low-precision matmul, which accumulates in F32, when its
rounding is the final one.
"""

from __future__ import annotations

from math import prod
from typing import Any

import numpy as np

from pytapp.analysis.spec import ContractionSpec, OperandSpec
from pytapp.analysis.ttgt import Kind, gemm_layout
from pytapp.backends.base import (
    ALL_DATATYPES,
    Capabilities,
    OptionalModule,
    Stateless,
    thread_setting,
)
from pytapp.datatypes import Datatype, numpy_view, torch_view
from pytapp.errors import ErrorCode, error_for
from pytapp.executor import Executor
from pytapp.operands import BoundProduct, same_layout
from pytapp.precision import Prectype
from pytapp.status import Status

__all__ = ["TorchBackend", "TorchPlan"]


class TorchPlan(Stateless):
    """``torch.matmul`` or ``torch.einsum`` on the merged (diagonal) views, then the epilogue."""

    def __init__(self, spec: ContractionSpec, torch: Any, device: str) -> None:
        self.spec, self.torch, self.device = spec, torch, device
        cls = spec.classes
        in_inputs = [x for x in spec.d.modes.labels if x not in cls.IC]
        a, b, d = spec.einsum_words("torch", in_inputs)
        self.expr = f"{a},{b}->{d}"
        rule = spec.rule
        real = {Datatype.F32: torch.float32, Datatype.F64: torch.float64}[rule.real]
        self.compute = {torch.float32: torch.complex64, torch.float64: torch.complex128}[
            real] if rule.is_complex else real
        # Native low precision (spec.native_low): exact up to the final rounding into D.
        low = {Datatype.BF16: torch.bfloat16, Datatype.F16: torch.float16}
        self.native_type: Datatype | None = spec.native_low
        self.native = self.native_type is not None
        self.input_dtype = low[self.native_type] if self.native_type else self.compute
        # torch.einsum may copy both inputs and builds the result before D is written.
        self.workspace_bytes = 16 * (spec.a.size + spec.b.size + 2 * spec.d.size)
        self.layout = gemm_layout(spec)
        labels = spec.d.modes.labels
        self.ic = len(cls.IC)
        # The einsum result has D's labels without the broadcast ones; those come last.
        self.einsum_perm = tuple(
            [i for i, x in enumerate(labels) if x not in cls.IC]
            + [i for i, x in enumerate(labels) if x in cls.IC])
        lay = self.layout
        what = (f"torch.matmul [h={prod(lay.h_shape)}, m={lay.m}, n={lay.n}, k={lay.k}]"
                if lay.kind is Kind.GEMM else f"torch.einsum {self.expr!r}")
        self.algorithm = what + (
            f" in {str(self.input_dtype).removeprefix('torch.')} when alpha is 1 and C is "
            "absent" if self.native else "")

    def _tensor(self, x: np.ndarray, spec: OperandSpec, dtype: Any, native: bool = False) -> Any:
        """Return a torch view of ``x`` in ``dtype``, rounded as the precision says, op applied."""
        rule = self.spec.rule
        if rule.input_round is not None and not native and spec.datatype.real is not (
                rule.input_round):
            # Rounded by NumPy/ml_dtypes in one step, like the reference (torch rounds F64 to
            # F16 through F32, which differs in rare ties).
            r = rule.input_round.numpy_dtype
            if spec.datatype.is_complex:
                parts = np.stack([x.real.astype(r), x.imag.astype(r)], axis=-1)
                x = parts.astype(np.float32).view(np.complex64)[..., 0]
            else:
                x = x.astype(r)
        if any(s < 0 for s in x.strides):
            x = np.array(x, order="C", copy=True)  # also for extent-1 modes
        if not x.flags.writeable:  # torch wants writable memory; it only reads it here
            x = x.copy()
        t = torch_view(x).to(device=self.device, dtype=dtype)
        if spec.conjugates:
            t = t.conj()
        return t

    def run(self, bound: BoundProduct, executor: Executor | None) -> Status:
        """Compute D in place of ``bound.d`` (torch's thread count restored afterwards)."""
        threads = None if executor is None else executor.threads
        with thread_setting(self.torch.get_num_threads, self.torch.set_num_threads, threads):
            return self._run(bound)

    def _run(self, bound: BoundProduct) -> Status:
        torch, spec = self.torch, self.spec
        status = Status(backend="torch", algorithm=self.algorithm, flops=spec.flops)
        if bound.d.size == 0:
            return status
        # The native low-precision product is rounded once to its storage type: exact only
        # when that rounding is the final one (D of that type, alpha 1, no C).
        native = self.native and bound.c is None and bound.alpha == 1
        dtype = self.input_dtype if native else self.compute
        a = self._tensor(bound.a, spec.a, dtype, native)
        b = self._tensor(bound.b, spec.b, dtype, native)
        if self.layout.kind is Kind.GEMM:
            r, perm = self._matmul(a, b, bound)
            if r is None:
                return status  # written into D directly
        else:
            r, perm = torch.einsum(self.expr, a, b), self.einsum_perm
        if not native:  # the native result is already final (and in D's type)
            r = r.to(self.compute)
        if bound.alpha != 1:
            r = r * torch.tensor(complex(bound.alpha) if r.is_complex() else float(bound.alpha),
                                 dtype=self.compute)
        d = bound.d.transpose(perm)
        r = r.reshape(tuple(r.shape) + (1,) * self.ic).expand(d.shape)
        if bound.c is not None:
            c = self._tensor(bound.c, spec.c, self.compute).permute(perm)
            beta = complex(bound.beta) if c.is_complex() else float(bound.beta)
            r = r + c * torch.tensor(beta, dtype=self.compute)
        if spec.d.conjugate and r.is_complex():
            r = r.conj()
        if r.is_complex() and not spec.d.datatype.is_complex:
            r = r.real
        self._store(d, r.resolve_conj())
        return status

    def _d_tensor(self, d: np.ndarray) -> Any:
        """D's memory as a torch tensor (None when torch cannot view it: negative strides)."""
        if any(s < 0 for s in d.strides):
            return None
        return torch_view(d)

    def _matmul(self, a: Any, b: Any, bound: BoundProduct) -> tuple[Any, tuple[int, ...]]:
        """GEMM on the TTGT layout; (None, ()) when the result went straight into D."""
        torch, lay, spec = self.torch, self.layout, self.spec
        if lay.a_reduce:
            a = a.sum(dim=lay.a_reduce)
        if lay.b_reduce:
            b = b.sum(dim=lay.b_reduce)
        h, m, n, k = lay.h_shape, lay.m, lay.n, lay.k
        a = a.permute(lay.a_perm).reshape(*h, m, k)
        b = b.permute(lay.b_perm).reshape(*h, k, n)
        if lay.swap:
            left, right, shape = b.transpose(-1, -2), a.transpose(-1, -2), (*h, n, m)
        else:
            left, right, shape = a, b, (*h, m, n)
        if bound.c is not None and self._gemm_with_c(left, right, shape, bound):
            return None, ()
        d = self._d_tensor(bound.d) if bound.c is None and not lay.ic else None
        out = None
        if d is not None and d.dtype == left.dtype:
            try:
                out = d.permute(lay.d_perm).view(shape)
            except RuntimeError:  # D's layout does not fuse into the GEMM's matrices
                out = None
        if out is not None and (out.dim() < 2 or out.stride(-1) == 1 or out.shape[-1] == 1):
            torch.matmul(left, right, out=out)
            if bound.alpha != 1:
                out.mul_(complex(bound.alpha) if out.is_complex() else float(bound.alpha))
            if spec.d.conjugate and out.is_complex():
                torch.conj_physical(out, out=out)
            return None, ()
        return torch.matmul(left, right).reshape(lay.result_shape), lay.d_perm

    def _gemm_with_c(self, left: Any, right: Any, shape: tuple[int, ...],
                     bound: BoundProduct) -> bool:
        """Compute D = alpha A B + beta C with beta inside the BLAS call.

        ``addmm``/``baddbmm`` run on D's memory, with C copied there first unless it is D
        itself: two passes over D instead of a temporary and three more. Returns False when
        the layouts or ops do not allow it.
        """
        lay, spec = self.layout, self.spec
        c = bound.c
        if (c is None or lay.ic or spec.d.conjugates or spec.c.conjugates
                or c.dtype != bound.d.dtype or left.dtype != self.compute):
            return False
        d = self._d_tensor(bound.d)
        if d is None:
            return False
        if d.dtype != left.dtype:
            return self._gemm_with_c_stored(left, right, shape, bound, d)
        full = d.permute(lay.d_perm)
        try:
            out = full.view(shape)
            batched = out.view(-1, *shape[-2:]) if len(shape) > 3 else out
        except RuntimeError:  # D's layout does not fuse into the GEMM's matrices
            return False
        if out.dim() >= 2 and out.stride(-1) != 1 and out.shape[-1] != 1:
            return False
        rule = spec.rule
        rounds_c = rule.input_round is not None and spec.c.datatype.real is not rule.input_round
        if same_layout(c, bound.d) and not rounds_c:
            pass  # C is D (and used as it is): accumulate in place
        elif np.may_share_memory(c, bound.d):
            return False
        else:
            full.copy_(self._tensor(c, spec.c, self.compute).permute(lay.d_perm))
        cplx = batched.is_complex()
        _accumulate(batched, left, right, complex(bound.alpha) if cplx else float(bound.alpha),
                    complex(bound.beta) if cplx else float(bound.beta))
        return True

    def _gemm_with_c_stored(self, left: Any, right: Any, shape: tuple[int, ...],
                            bound: BoundProduct, d: Any) -> bool:
        """``_gemm_with_c`` for a D stored in a narrower type than the computation (F16, BF16).

        C is converted into a temporary of the computation's type, ``addmm``/``baddbmm``
        accumulate alpha A B there, and D receives it rounded once: three passes over D's
        elements where the general path made seven (an F16 attention-score product with C,
        4x8x256x256: 4.3 ms before).
        """
        spec, lay = self.spec, self.layout
        c = bound.c
        if c is None or self.compute.is_complex or d.is_complex() or np.may_share_memory(
                c, bound.d):
            return False
        full = d.permute(lay.d_perm)
        tmp = self.torch.empty(tuple(full.shape), dtype=self.compute, device=full.device)
        # C as stored (rounded first where the precision says so), converted by the copy
        tmp.copy_(self._tensor(c, spec.c, None).permute(lay.d_perm))
        batched = tmp.view(-1, *shape[-2:]) if len(shape) >= 3 else tmp.view(shape)
        _accumulate(batched, left, right, float(bound.alpha), float(bound.beta))
        full.copy_(tmp)  # rounded once, into D's type
        return True

    def _store(self, d: np.ndarray, r: Any) -> None:
        """Copy (and round) ``r`` into D's memory, in place."""
        torch = self.torch
        target = self._d_tensor(d)
        if target is not None:
            target.copy_(r)
            return
        host = r.to("cpu")  # torch has no negative strides: go through NumPy
        if d.dtype.name == "bfloat16":
            host = host.to(torch.bfloat16)
        np.copyto(d, numpy_view(host), casting="unsafe")


def _accumulate(out: Any, left: Any, right: Any, alpha: Any, beta: Any) -> None:
    """``out = beta out + alpha left right`` in place: ``addmm`` on a matrix, else ``baddbmm``.

    ``out`` is a matrix or a batch of them (batch labels fused into its first axis).
    """
    if out.dim() == 2:
        out.addmm_(left, right, beta=beta, alpha=alpha)
    else:
        out.baddbmm_(left.reshape(out.shape[0], *left.shape[-2:]),
                     right.reshape(out.shape[0], *right.shape[-2:]), beta=beta, alpha=alpha)


class TorchBackend(Stateless):
    """torch.einsum on CPU; native BF16/F16 matmul for the low-precision precisions."""

    name = "torch"
    #: torch's own intra-op threads (OpenMP), not NumPy's BLAS pool
    pool = "torch"
    # torch.matmul (MKL) for GEMM shapes, torch.einsum otherwise; native BF16/F16 matmul when
    # it is the final rounding; no F16 accumulation.
    capabilities = Capabilities(
        datatypes=ALL_DATATYPES,
        prectypes=frozenset(Prectype) - {Prectype.F16F16_ACCUM_F16},
    )

    def __init__(self) -> None:
        self._lib = OptionalModule("torch", "torch")

    def setup_seconds(self) -> float:
        """Seconds the first plan would spend importing the library (0 once imported)."""
        return self._lib.setup_seconds()

    def available(self) -> tuple[bool, str]:
        """Whether torch is installed (imported on first plan)."""
        return self._lib.available()

    def plan(self, spec: ContractionSpec, executor: Executor | None) -> TorchPlan:
        """Check capabilities and the executor's device; return the host plan.

        Executions on a device executor run through :mod:`pytapp.interop.torch_device`
        (the executor's runner), on the same spec.
        """
        self.capabilities.require(spec, self.name)
        torch = self._lib.load()
        device = "cpu" if executor is None else executor.device
        if device != "cpu":
            cuda = torch.cuda.is_available()
            if not device.startswith("cuda") or not cuda:
                raise error_for(
                    ErrorCode.INVALID_EXECUTOR,
                    f"device {device!r} is not available to torch here (CUDA available: "
                    f"{cuda}); use device 'cpu'",
                )
        return TorchPlan(spec, torch, "cpu")
