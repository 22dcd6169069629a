"""The reference backend: the paper's loop nest, literal and readable; slow by design.

For every element of D (the loops over H, FA, FB and IC labels), in the order of SPEC
section 1::

    acc = beta * op_C(C)            (or +0 when beta == 0)
    for each contracted index K (first label of A fastest):
        sA = +0 + sum over IA of op_A(A)
        sB = +0 + sum over IB of op_B(B)
        acc = acc + (alpha * sA) * sB
    D = op_D(acc)

Every operation is rounded to the compute type of the precision (F16F16_ACCUM_F16 rounds every
partial sum to F16); complex products are ``(ac - bd) + (ad + bc)i`` without fused multiply-add.
The loops over the elements of D are independent of each other, so they are vectorised with
NumPy (in chunks); the loops over contracted and isolated labels stay sequential, so every
element sees exactly the operations above in exactly that order.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from math import prod
from typing import Any

import numpy as np

from pytapp.analysis.spec import ContractionSpec, OperandSpec
from pytapp.backends.base import Capabilities, Stateless
from pytapp.executor import Executor
from pytapp.operands import BoundProduct
from pytapp.precision import ComputeRule
from pytapp.status import Status

__all__ = ["ReferenceBackend", "ReferencePlan"]

Label = Hashable
#: A value in the compute type: real part and imaginary part (``None`` when real).
Value = tuple[np.ndarray, np.ndarray | None]
#: How many (D element, contracted index) pairs one vectorised step holds.
_CHUNK = 1 << 18


def _mul(x: Value, y: Value) -> Value:
    (a, b), (c, d) = x, y
    if b is None or d is None:
        return a * c, None
    return a * c - b * d, a * d + b * c


def _add(x: Value, y: Value) -> Value:
    (a, b), (c, d) = x, y
    if b is None or d is None:
        return a + c, None
    return a + c, b + d


def _scalar(value: Any, rule: ComputeRule) -> Value:
    real = rule.real_dtype
    z = complex(value)
    re = np.asarray(z.real, dtype=np.float64).astype(real)
    if not rule.is_complex:
        return re, None
    return re, np.asarray(z.imag, dtype=np.float64).astype(real)


def _zero(shape: tuple[int, ...], rule: ComputeRule) -> Value:
    re = np.zeros(shape, dtype=rule.real_dtype)
    return re, (np.zeros(shape, dtype=rule.real_dtype) if rule.is_complex else None)


def _load(raw: np.ndarray, spec: OperandSpec, rule: ComputeRule) -> Value:
    """Round stored values as the precision says and apply the element op."""
    real = rule.real_dtype
    rounding = None if rule.input_round is None else rule.input_round.numpy_dtype

    def part(x: np.ndarray) -> np.ndarray:
        if rounding is not None:
            x = x.astype(rounding)
        return x.astype(real)

    stored_complex = spec.datatype.is_complex
    re = part(raw.real if stored_complex else raw)
    if not rule.is_complex:
        return re, None
    im = part(raw.imag) if stored_complex else np.zeros_like(re)
    if spec.conjugates:
        im = -im
    return re, im


class ReferencePlan(Stateless):
    """Loop nest for one spec. Precomputes which loop drives each mode of each operand."""

    algorithm = "loop nest"

    def __init__(self, spec: ContractionSpec) -> None:
        self.spec = spec
        self.rule = spec.rule
        cls = spec.classes
        self.d_labels: tuple[Label, ...] = spec.d.modes.labels
        self.d_extents: tuple[int, ...] = spec.d.modes.extents
        self.p_extents = tuple(spec.extent(x) for x in cls.P)
        self.ia_extents = tuple(spec.extent(x) for x in cls.IA)
        self.ib_extents = tuple(spec.extent(x) for x in cls.IB)
        # About a dozen arrays of one step's (D element x contracted index) pairs (a step is
        # at least one D element with every contracted index), and the index tuples of every
        # contracted index (an int64 per label, and the arange they come from).
        n_p = max(prod(self.p_extents), 1)
        rows = min(prod(self.d_extents), max(1, _CHUNK // n_p))
        self.workspace_bytes = 12 * 16 * rows * n_p + 8 * (len(cls.P) + 1) * n_p

    @staticmethod
    def _tuples(extents: Sequence[int], labels: Sequence[Label]) -> dict[Label, np.ndarray]:
        """All index tuples of ``labels``, the first label varying fastest."""
        n = prod(extents)
        if not labels:
            return {}
        digits = np.unravel_index(np.arange(n), tuple(extents), order="F")
        return dict(zip(labels, digits, strict=True))

    def _gather(
        self,
        view: np.ndarray,
        spec: OperandSpec,
        d_idx: dict[Label, np.ndarray],
        p_idx: dict[Label, np.ndarray],
        iso_idx: dict[Label, np.ndarray],
        t: int,
        shape: tuple[int, int],
    ) -> np.ndarray:
        """Values of an operand for a block of D elements x every contracted index."""
        index: list[Any] = []
        for label in spec.modes.labels:
            if label in d_idx:
                index.append(d_idx[label][:, None])
            elif label in p_idx:
                index.append(p_idx[label][None, :])
            else:
                index.append(int(iso_idx[label][t]))
        return np.broadcast_to(view[tuple(index)], shape)

    def _reduce(
        self,
        view: np.ndarray,
        spec: OperandSpec,
        iso_labels: tuple[Label, ...],
        iso_extents: tuple[int, ...],
        d_idx: dict[Label, np.ndarray],
        p_idx: dict[Label, np.ndarray],
        shape: tuple[int, int],
    ) -> Value:
        """Sum the isolated labels in order: sX = +0 + sum of op_X(X)."""
        rule = self.rule
        iso_idx = self._tuples(iso_extents, iso_labels)
        total: Value = _zero(shape, rule)
        for t in range(prod(iso_extents)):
            raw = self._gather(view, spec, d_idx, p_idx, iso_idx, t, shape)
            total = _add(total, _load(raw, spec, rule))
        return total

    def run(self, bound: BoundProduct, executor: Executor | None) -> Status:
        """Compute D in place of ``bound.d``."""
        spec, rule, cls = self.spec, self.rule, self.spec.classes
        n_d = prod(self.d_extents)
        n_p = prod(self.p_extents)
        alpha = _scalar(bound.alpha, rule)
        beta = _scalar(bound.beta, rule)
        # alpha == 0 or an empty sum: A and B are not read (SPEC section 1).
        empty_sum = bound.alpha_zero or prod(self.ia_extents) == 0 or prod(self.ib_extents) == 0
        p_idx = self._tuples(self.p_extents, cls.P)
        step = max(1, _CHUNK // max(n_p, 1))
        for start in range(0, n_d, step):
            stop = min(n_d, start + step)
            flat = np.unravel_index(np.arange(start, stop), self.d_extents) if (
                self.d_extents) else ()
            d_idx = dict(zip(self.d_labels, flat, strict=True))
            rows = stop - start
            if bound.c is None:
                acc = _zero((rows,), rule)
            else:
                raw_c = bound.c[tuple(d_idx[x] for x in self.d_labels)] if d_idx else (
                    np.broadcast_to(bound.c[()], (rows,))
                )
                acc = _mul(beta, _load(raw_c, spec.c, rule))
            if not empty_sum and n_p > 0:
                shape = (rows, n_p)
                s_a = self._reduce(bound.a, spec.a, cls.IA, self.ia_extents, d_idx, p_idx, shape)
                s_b = self._reduce(bound.b, spec.b, cls.IB, self.ib_extents, d_idx, p_idx, shape)
                term = _mul(_mul(alpha, s_a), s_b)
                for k in range(n_p):
                    acc = _add(acc, (term[0][:, k], None if term[1] is None else term[1][:, k]))
            self._store(bound.d, acc, d_idx, rows)
        return Status(backend="reference", algorithm=self.algorithm, flops=spec.flops)

    def _store(self, d: np.ndarray, acc: Value, d_idx: dict[Label, np.ndarray], rows: int) -> None:
        """D = op_D(acc), rounded once to D's datatype (a real D keeps the real part)."""
        spec = self.spec.d
        re, im = acc
        if im is not None and spec.conjugate:
            im = -im
        if spec.datatype.is_complex:
            out = np.empty(rows, dtype=d.dtype)
            out.real = re
            out.imag = 0 if im is None else im
        else:
            out = re.astype(d.dtype)
        if d_idx:
            d[tuple(d_idx[x] for x in self.d_labels)] = out
        else:
            d[()] = out[0]


class ReferenceBackend(Stateless):
    """Every TAPP feature, every datatype and precision; the conformance baseline."""

    name = "reference"
    # NumPy indexes with at most 63 index arrays (one per mode of the gathered operand).
    capabilities = Capabilities(max_modes=63)

    def available(self) -> tuple[bool, str]:
        """Report availability: always (NumPy only)."""
        return True, ""

    def plan(self, spec: ContractionSpec, executor: Executor | None) -> ReferencePlan:
        """Build the loop-nest plan (nothing is unsupported)."""
        self.capabilities.require(spec, self.name)
        return ReferencePlan(spec)
