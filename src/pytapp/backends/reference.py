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

One exception keeps long sums accurate: a sum of more than 128 terms (the contracted indices,
or the isolated indices of one operand) is added pairwise instead of one term after the other.
Runs of 8 consecutive terms are summed in order, the runs' sums are added in a balanced binary
tree (adjacent pairs, level by level), and the tree's total is added to ``acc`` (or to +0), so
the rounding error grows with log2 of the length rather than with the length (numpy.sum's
error is of the same kind). Sums of at most 128 terms keep the order above exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
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
#: Sums of at most this many terms are added in order; longer ones pairwise (see _sum).
_IN_ORDER = 128
#: Pairwise summation adds runs of this many consecutive terms in order.
_RUN = 8


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


def _sum(start: Value, term: Callable[[int], Value], n: int) -> Value:
    """Return ``start + (term(0) + ... + term(n - 1))``, pairwise when ``n > _IN_ORDER``.

    Up to ``_IN_ORDER`` terms: ``((start + term(0)) + term(1)) + ...``, one after the other.
    Beyond: runs of ``_RUN`` consecutive terms are summed in order, and the runs' sums in a
    balanced binary tree, pairs of neighbours level by level (a lone last sum moves up a level
    unchanged). The tree is built as the runs arrive: ``partial`` holds at most one sum per
    level, and a new sum merges with the one of its level like a carry in binary counting, so
    at most log2(n) sums are held. Left over at the end is one sum per set bit of the number
    of runs, largest first; they are added from the last (the same totals as level by level).
    """
    if n <= _IN_ORDER:
        for t in range(n):
            start = _add(start, term(t))
        return start
    partial: list[tuple[int, Value]] = []  # (level, sum of 2**level consecutive runs)
    for first in range(0, n, _RUN):
        run = term(first)
        for t in range(first + 1, min(n, first + _RUN)):
            run = _add(run, term(t))
        level = 0
        while partial and partial[-1][0] == level:
            run = _add(partial.pop()[1], run)
            level += 1
        partial.append((level, run))
    total = partial.pop()[1]
    while partial:
        total = _add(partial.pop()[1], total)
    return _add(start, total)


def _column(terms: Value) -> Callable[[int], Value]:
    """Column ``k`` of a block of (D element x contracted index) values, as a function of k."""
    re, im = terms
    return lambda k: (re[:, k], None if im is None else im[:, k])


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
        """Sum the isolated labels: sX = +0 + sum of op_X(X) (pairwise when long, see _sum)."""
        rule = self.rule
        iso_idx = self._tuples(iso_extents, iso_labels)

        def term(t: int) -> Value:
            raw = self._gather(view, spec, d_idx, p_idx, iso_idx, t, shape)
            return _load(raw, spec, rule)

        return _sum(_zero(shape, rule), term, prod(iso_extents))

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
                acc = _sum(acc, _column(_mul(_mul(alpha, s_a), s_b)), n_p)
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
