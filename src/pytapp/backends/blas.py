"""The fast default backend: every product mapped at plan time onto NumPy's BLAS.

Plan-time analysis orders the labels of each class so that the large operands are used in
place, and picks one of:

* ``gemm`` / ``batched gemm``: ``matmul`` over (H..., m, k) x (H..., k, n) views, written
  straight into D when D's layout allows (TTGT copies only the operands whose layout does not
  fuse; the copy also does any datatype conversion and conjugation, in one pass);
* ``elementwise``: Hadamard and outer products as one broadcasting multiply into D;
* ``dot``: full or batched inner products (BLAS dot / ``vecdot``);
* ``reference``: F16F16_ACCUM_F16, which rounds every partial sum, runs the exact loop nest.

Reductions over isolated labels happen first, broadcasts (labels only in D) last. Alpha, beta,
C and op_D are applied in place on the product's result or on D, never as extra temporaries
of D's size when D is written directly.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from math import prod
from typing import Any

import numpy as np

from pytapp.analysis.layout import order_by_stride
from pytapp.analysis.spec import ContractionSpec, OperandSpec
from pytapp.backends.base import Capabilities
from pytapp.backends.reference import ReferencePlan
from pytapp.datatypes import Datatype
from pytapp.executor import Executor
from pytapp.operands import BoundProduct, same_layout
from pytapp.status import Status

__all__ = ["BlasBackend", "BlasPlan"]

Label = Hashable

#: Real storage types that a rounding type represents exactly (no rounding pass needed).
_EXACT_IN = {
    Datatype.F64: {Datatype.F64, Datatype.F32, Datatype.F16, Datatype.BF16},
    Datatype.F32: {Datatype.F32, Datatype.F16, Datatype.BF16},
    Datatype.F16: {Datatype.F16},
    Datatype.BF16: {Datatype.BF16},
}


def _reshape_view(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """``x`` reshaped without copying, or ``None`` when that needs a copy."""
    try:
        return x.reshape(shape, copy=False)
    except ValueError:
        return None


def _blasable(x: np.ndarray) -> bool:
    """Whether the last two axes form a matrix BLAS reads in place (row or column major)."""
    if x.ndim < 2:
        return True
    (s1, s2), (d1, d2), item = x.strides[-2:], x.shape[-2:], x.itemsize
    if d1 <= 1 or d2 <= 1:
        return (s1 == item or d1 <= 1) or (s2 == item or d2 <= 1)
    return (s2 == item and s1 >= d2 * item and s1 % item == 0) or (
        s1 == item and s2 >= d1 * item and s2 % item == 0
    )


def _larger(x: OperandSpec, y: OperandSpec) -> OperandSpec:
    return x if x.size >= y.size else y


def _order(labels: Sequence[Label], by: OperandSpec) -> list[Label]:
    """``labels`` outermost first, as they lie in operand ``by``."""
    strides = dict(zip(by.modes.labels, by.modes.strides, strict=True))
    return [x for x in order_by_stride(list(labels), [strides[x] for x in labels])]


class BlasPlan:
    """Everything decided once: label orders, permutations, kernel, direct output."""

    def __init__(self, spec: ContractionSpec) -> None:
        self.spec = spec
        rule, cls = spec.rule, spec.classes
        self._fallback: ReferencePlan | None = None
        if rule.real is Datatype.F16:
            self._fallback = ReferencePlan(spec)
            self.algorithm = "reference loop (F16 accumulation rounds every partial sum)"
            return
        real = rule.real_dtype
        self.compute: np.dtype[Any] = (
            np.result_type(real, np.complex64) if rule.is_complex else real
        )
        self.rounding = rule.input_round
        a, b, d = spec.a, spec.b, spec.d
        self.h = _order(cls.H, d)
        self.fa = _order(cls.FA, _larger(a, d))
        self.fb = _order(cls.FB, _larger(b, d))
        self.p = _order(cls.P, _larger(a, b))
        ext = spec.extent
        self.h_shape = tuple(ext(x) for x in self.h)
        self.m, self.n, self.k = (prod(ext(x) for x in g) for g in (self.fa, self.fb, self.p))
        if not self.p:
            self.kind = "elementwise"
        elif not self.fa and not self.fb:
            self.kind = "dot"
        else:
            self.kind = "gemm"
        # Swap to compute D^T = B^T A^T when D's FB modes lie outside its FA modes.
        d_strides = dict(zip(d.modes.labels, d.modes.strides, strict=True))
        self.swap = bool(
            self.kind == "gemm" and self.fa and self.fb
            and min(abs(d_strides[x]) for x in self.fa) < min(abs(d_strides[x]) for x in self.fb)
        )
        first, second = (self.fb, self.fa) if self.swap else (self.fa, self.fb)
        self.d_target = [*self.h, *first, *second]
        self.d_perm = tuple(d.modes.labels.index(x) for x in [*self.d_target, *cls.IC])
        self.ic = len(cls.IC)
        self.result_shape = tuple(ext(x) for x in self.d_target)
        self.a_reduce = tuple(a.modes.labels.index(x) for x in cls.IA)
        self.b_reduce = tuple(b.modes.labels.index(x) for x in cls.IB)
        a_rest = [x for x in a.modes.labels if x not in cls.IA]
        b_rest = [x for x in b.modes.labels if x not in cls.IB]
        a_target = [*self.h, *self.fa, *self.p]
        b_target = [*self.h, *self.p, *self.fb]
        self.a_perm = tuple(a_rest.index(x) for x in a_target)
        self.b_perm = tuple(b_rest.index(x) for x in b_target)
        self.direct_ok = (
            d.datatype.numpy_dtype == self.compute and not cls.IC
        )
        detail = f"h={prod(self.h_shape)}, m={self.m}, n={self.n}, k={self.k}"
        name = {"gemm": "batched gemm" if self.h else "gemm"}.get(self.kind, self.kind)
        extras = []
        if cls.IA or cls.IB:
            extras.append("reduce isolated labels first")
        if cls.IC:
            extras.append("broadcast into D")
        if self.swap:
            extras.append("D^T = B^T A^T")
        self.algorithm = f"{name} [{detail}]" + (f" ({'; '.join(extras)})" if extras else "")

    # ----------------------------------------------------------------- operands
    def _round(self, x: np.ndarray, storage: Datatype) -> np.ndarray:
        """Round to the precision's input type when that loses bits, then widen."""
        rounding = self.rounding
        if rounding is None or storage.real in _EXACT_IN[rounding]:
            return x
        r = rounding.numpy_dtype
        real = self.compute if not np.issubdtype(self.compute, np.complexfloating) else (
            np.empty(0, self.compute).real.dtype
        )
        if storage.is_complex:
            out = np.empty(x.shape, dtype=self.compute)
            out.real = x.real.astype(r).astype(real)
            out.imag = x.imag.astype(r).astype(real)
            return out
        return x.astype(r).astype(real)

    def _prepare(
        self, x: np.ndarray, spec: OperandSpec, reduce: tuple[int, ...], perm: tuple[int, ...]
    ) -> tuple[np.ndarray, int]:
        """Operand in target order and compute dtype with op applied; (array, bytes copied)."""
        copied = 0
        x = self._round(x, spec.datatype)
        if reduce:
            x = np.sum(x, axis=reduce, dtype=self.compute)
            copied += x.nbytes
        x = x.transpose(perm)
        conj = spec.conjugate and spec.datatype.is_complex
        if conj or x.dtype != self.compute:
            out = np.empty(x.shape, dtype=self.compute)
            if conj:
                np.conjugate(x, out=out)
            else:
                np.copyto(out, x, casting="unsafe")
            copied += out.nbytes
            x = out
        return x, copied

    def _matrix(self, x: np.ndarray, shape: tuple[int, ...]) -> tuple[np.ndarray, int]:
        view = _reshape_view(x, shape)
        if view is not None and _blasable(view):
            return view, 0
        out = np.ascontiguousarray(x).reshape(shape)
        return out, out.nbytes

    # ----------------------------------------------------------------- kernels
    def _direct_out(self, bound: BoundProduct, shape: tuple[int, ...]) -> np.ndarray | None:
        """D's memory viewed as the kernel's output, when it can be written directly."""
        if not self.direct_ok or bound.c is not None:
            return None
        view = _reshape_view(bound.d.transpose(self.d_perm), shape)
        if view is None or (self.kind == "gemm" and not (
            view.ndim < 2 or view.strides[-1] == view.itemsize or view.shape[-1] == 1
        )):
            return None
        return view

    def _gemm(self, a: np.ndarray, b: np.ndarray, bound: BoundProduct) -> tuple[Any, bool, int]:
        h, m, n, k = self.h_shape, self.m, self.n, self.k
        a3, ca = self._matrix(a, (*h, m, k))
        b3, cb = self._matrix(b, (*h, k, n))
        if self.swap:
            left, right, shape = np.swapaxes(b3, -1, -2), np.swapaxes(a3, -1, -2), (*h, n, m)
        else:
            left, right, shape = a3, b3, (*h, m, n)
        out = self._direct_out(bound, shape)
        result = np.matmul(left, right, out=out)
        return result, out is not None, ca + cb

    def _elementwise(self, a: np.ndarray, b: np.ndarray, bound: BoundProduct) -> tuple[
        Any, bool, int
    ]:
        h, nfa, nfb = self.h_shape, len(self.fa), len(self.fb)
        ext = self.spec.extent
        a_b = a.reshape((*h, *(ext(x) for x in self.fa), *(1,) * nfb))
        b_b = b.reshape((*h, *(1,) * nfa, *(ext(x) for x in self.fb)))
        out = self._direct_out(bound, self.result_shape)
        result = np.multiply(a_b, b_b, out=out)
        return result, out is not None, 0

    def _dot(self, a: np.ndarray, b: np.ndarray, bound: BoundProduct) -> tuple[Any, bool, int]:
        h, k = self.h_shape, self.k
        if not h:
            return np.dot(a.reshape(-1), b.reshape(-1)), False, 0
        a2, b2 = a.reshape((*h, k)), b.reshape((*h, k))
        out = self._direct_out(bound, h)
        if np.issubdtype(self.compute, np.complexfloating):
            result = np.einsum("...k,...k->...", a2, b2, out=out)
        else:
            result = np.vecdot(a2, b2, out=out)
        return result, out is not None, 0

    # ----------------------------------------------------------------- epilogue
    def _finish(self, result: Any, direct: bool, bound: BoundProduct) -> None:
        """D = op_D(alpha * result + beta * op_C(C)), broadcast along labels only in D.

        ``result`` is either D itself (``direct``) or a temporary this plan owns.
        """
        spec = self.spec
        alpha = np.asarray(bound.alpha).astype(self.compute)[()]
        conj_d = spec.d.conjugate and spec.d.datatype.is_complex
        if direct:
            if alpha != 1:
                np.multiply(result, alpha, out=result)
            if conj_d:
                np.conjugate(result, out=result)
            return
        r = np.asarray(result).reshape(self.result_shape + (1,) * self.ic)
        if alpha != 1:
            r = np.multiply(r, alpha, out=r) if r.flags.writeable and r.base is None else r * alpha
        d_t = bound.d.transpose(self.d_perm)
        if bound.c is not None and self.direct_ok and not conj_d and not (
            spec.c.conjugate and spec.c.datatype.is_complex
        ) and same_layout(bound.c, bound.d) and self._round_free(spec.c.datatype):
            # In-place accumulation on D's own memory: D = beta * D + alpha * result.
            beta = np.asarray(bound.beta).astype(self.compute)[()]
            if beta != 1:
                np.multiply(d_t, beta, out=d_t)
            np.add(d_t, r, out=d_t)
            return
        if bound.c is not None:
            c_t, _ = self._prepare(bound.c, spec.c, (), self.d_perm)
            beta = np.asarray(bound.beta).astype(self.compute)[()]
            total = np.multiply(c_t, beta, dtype=self.compute)
            total += r
            r = total
        if conj_d:
            r = np.conjugate(r)
        if np.iscomplexobj(r) and not spec.d.datatype.is_complex:
            r = r.real
        np.copyto(d_t, np.broadcast_to(r, d_t.shape), casting="unsafe")

    def _round_free(self, storage: Datatype) -> bool:
        return self.rounding is None or storage.real in _EXACT_IN[self.rounding]

    def run(self, bound: BoundProduct, executor: Executor | None) -> Status:
        """Compute D in place of ``bound.d``."""
        if self._fallback is not None:
            status = self._fallback.run(bound, executor)
            status.backend, status.algorithm = "blas", self.algorithm
            return status
        spec = self.spec
        if bound.d.size == 0:
            return Status(backend="blas", algorithm=self.algorithm, flops=spec.flops)
        a, ca = self._prepare(bound.a, spec.a, self.a_reduce, self.a_perm)
        b, cb = self._prepare(bound.b, spec.b, self.b_reduce, self.b_perm)
        kernel = {"gemm": self._gemm, "elementwise": self._elementwise, "dot": self._dot}
        result, direct, cm = kernel[self.kind](a, b, bound)
        self._finish(result, direct, bound)
        copied = ca + cb + cm
        return Status(
            backend="blas", algorithm=self.algorithm, flops=spec.flops, bytes_copied=copied,
            bytes_allocated=copied + (0 if direct else int(np.asarray(result).nbytes)),
        )


class BlasBackend:
    """Fast CPU backend on NumPy (BLAS GEMM, TTGT, elementwise and dot kernels)."""

    name = "blas"
    capabilities = Capabilities(notes="GEMM/TTGT on NumPy's BLAS; F16 accumulation exact")

    def available(self) -> tuple[bool, str]:
        """Always available (NumPy only)."""
        return True, ""

    def plan(self, spec: ContractionSpec, executor: Executor | None) -> BlasPlan:
        """Decide the algorithm for ``spec``."""
        self.capabilities.require(spec, self.name)
        return BlasPlan(spec)
