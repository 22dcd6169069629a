"""Two-operand einsums seen a few times: one matmul on reshaped views, without a plan.

Planning a product (its spec, the backend's choice, the compiled program) costs a few hundred
microseconds of Python; a plan repays that only over many calls. Code that contracts many
distinct shapes a few times each (DMRG sweeps with growing bonds, tensor-network contractions
whose intermediates change shape) would spend most of its time planning. So
:func:`pytapp.einsum` runs a plain two-operand product of a given layout as NumPy's own
``tensordot`` does: transpose, reshape and one ``matmul`` (BLAS), remembered per layout, until
it has run :data:`PLAN_AFTER` times or for :data:`PLANNING_SECONDS`, and plans it (and
compiles it into a chain) on the next call. :func:`pytapp.tensordot` goes one step further:
a layout's first call is NumPy's own ``tensordot`` (:func:`first_tensordot`, the same matmul,
without the cost of building its :class:`MatmulPair`: in a DMRG sweep about half the layouts
are contracted once), and the pair is built on its second.
Only small products (:data:`DIRECT_MAX_FLOPS`) of one native datatype qualify: larger ones are
planned at once, where planning costs nothing next to the arithmetic; so are those whose
matmul would copy more than :data:`DIRECT_COPY_MAX` bytes of permuted operands on every call,
where the plan reads them in place.

Examples
--------
>>> import numpy as np
>>> from pytapp.analysis.subscripts import parse_subscripts
>>> eq = parse_subscripts("bij,bjk->bki", [3, 3])
>>> a, b = np.ones((2, 3, 4)), np.ones((2, 4, 5))
>>> pair = matmul_pair(eq, a, b)
>>> pair(a, b).shape, pair(a, b)[0, 0, 0].item()
((2, 5, 3), 4.0)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

from pytapp.analysis.subscripts import Equation

__all__ = ["DIRECT_COPY_MAX", "DIRECT_MAX_FLOPS", "PLANNING_SECONDS", "PLAN_AFTER", "DirectCalls",
           "MatmulPair", "TensordotModes", "first_tensordot", "matmul_pair", "tensordot_pair"]

#: Most calls of one two-operand product (equation, shapes, layouts) that run as a matmul
#: before it is planned: a plan saves a few microseconds per call and costs hundreds.
PLAN_AFTER = 256
#: ... or fewer, once those calls took this long (what planning a product costs, twice): a
#: product whose calls take long enough for a plan's in-place GEMMs to matter is planned soon.
PLANNING_SECONDS = 2e-3
#: Largest product (flops) run as a matmul without a plan.
DIRECT_MAX_FLOPS = 1 << 24
#: Longest dot product (rows and columns of one element) run as a matmul: BLAS adds a long
#: dot into a few running sums, less accurately than numpy.einsum's pairwise sums.
LONG_DOT = 1 << 14
#: Most bytes of permuted operands the matmul may copy on each call: a product that would
#: copy more is planned at once (its plan reads them where they lie).
DIRECT_COPY_MAX = 1 << 20
_NATIVE = frozenset({np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.complex64),
                     np.dtype(np.complex128)})


class MatmulPair:
    """One two-operand product as a (batched) matmul: the transposes and reshapes it needs.

    Called with operands of the shapes it was made for, it returns the result as a view of
    the matmul's output (batch, rows, columns), the layout a plan of it writes too. Identity
    transposes are skipped and a batch of one is a 2-D ``numpy.dot`` (cheaper to call than a
    3-D ``matmul``); built on a first call, so construction is a few attribute stores.
    """

    __slots__ = ("_left", "_out", "_permute", "_right", "_run", "dims_a", "dims_b", "perm_a",
                 "perm_b", "perm_out", "shape")

    def __init__(self, perm_a: tuple[int, ...], perm_b: tuple[int, ...],
                 dims_a: tuple[int, int, int], dims_b: tuple[int, int, int],
                 shape: tuple[int, ...], perm_out: tuple[int, ...]) -> None:
        self.perm_a, self.perm_b, self.perm_out = perm_a, perm_b, perm_out
        self.dims_a, self.dims_b, self.shape = dims_a, dims_b, shape
        flat = dims_a[0] == 1  # one product: 2-D operands
        self._left = dims_a[1:] if flat else dims_a
        self._right = dims_b[1:] if flat else dims_b
        # one term per sum (outer and Hadamard products): a broadcast multiply, not a GEMM
        self._run = (np.multiply if dims_a[2] == 1 else np.dot if flat else np.matmul)
        self._out = None if perm_out == tuple(range(len(perm_out))) else perm_out
        self._permute = (perm_a != tuple(range(len(perm_a)))
                         or perm_b != tuple(range(len(perm_b))))

    def __repr__(self) -> str:
        return (f"MatmulPair(perm_a={self.perm_a}, perm_b={self.perm_b}, dims_a={self.dims_a}, "
                f"dims_b={self.dims_b}, shape={self.shape}, perm_out={self.perm_out})")

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Return the product of ``a`` and ``b``."""
        if self._permute:
            a, b = a.transpose(self.perm_a), b.transpose(self.perm_b)
        product: np.ndarray = self._run(a.reshape(self._left), b.reshape(self._right))
        # the output's labels as a view of the matmul's (batch, rows, columns), as numpy.einsum
        # returns its tensordot's result: no permuting copy (k = 0: zeros)
        product = product.reshape(self.shape)
        return product if self._out is None else product.transpose(self._out)


@dataclass
class DirectCalls:
    """One product's matmul and what its calls have cost so far (the rule to plan it)."""

    pair: MatmulPair
    calls: int = 0
    seconds: float = 0.0

    def run(self, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
        """Return the product as a matmul, or ``None`` once it is worth a plan.

        The first call always runs; later ones until :data:`PLAN_AFTER` calls or
        :data:`PLANNING_SECONDS` of them.
        """
        if self.calls and (self.calls >= PLAN_AFTER or self.seconds >= PLANNING_SECONDS):
            return None
        start = time.perf_counter()
        found = self.pair(a, b)
        self.seconds += time.perf_counter() - start
        self.calls += 1
        return found


def matmul_pair(equation: Equation, a: np.ndarray, b: np.ndarray) -> MatmulPair | None:
    """Return ``einsum(equation, a, b)`` as one (batched) matmul, or ``None``.

    ``None`` when the product is not plain: a label repeated within an operand, a label
    summed in one operand only, extents that differ (size-1 broadcasting), datatypes that
    differ or are not F32, F64, C64 or C128, more than :data:`DIRECT_MAX_FLOPS` flops, dots
    longer than :data:`LONG_DOT`, or more than :data:`DIRECT_COPY_MAX` bytes of operands to
    copy into the matmul's order (``kacb,kc->ab`` at o=12, v=48: A's 2.6 MB, 3.3 then 1.8 ms
    a call where the plan takes 0.7).
    Labels in both operands and the output are the batch, labels in both operands only are
    summed, the others are the rows and columns; each group in its operand's order, so the
    result is the view numpy.einsum returns (and the layout a plan writes, see
    ``Network._natural``).
    """
    if a.dtype != b.dtype or a.dtype not in _NATIVE:
        return None
    ta, tb = equation.inputs
    out = equation.output
    if len(set(ta)) != len(ta) or len(set(tb)) != len(tb) or len(set(out)) != len(out):
        return None
    ea, eb = dict(zip(ta, a.shape, strict=True)), dict(zip(tb, b.shape, strict=True))
    kept = set(out)  # each group in its operand's order: the layout of numpy's tensordot
    batch = [x for x in ta if x in eb and x in kept]
    rows = [x for x in ta if x not in eb and x in kept]
    cols = [x for x in tb if x not in ea and x in kept]
    summed = [x for x in ta if x in eb and x not in out]
    if (len(batch) + len(rows) + len(cols) != len(out)
            or len(batch) + len(rows) + len(summed) != len(ta)
            or len(batch) + len(cols) + len(summed) != len(tb)
            or any(ea[x] != eb[x] for x in (*batch, *summed))):
        return None
    nb, m = prod(ea[x] for x in batch), prod(ea[x] for x in rows)
    n, k = prod(eb[x] for x in cols), prod(ea[x] for x in summed)
    if 2 * nb * m * n * max(k, 1) > DIRECT_MAX_FLOPS or (m * n == 1 and k > LONG_DOT):
        return None  # large, or long dots (the plan adds those in blocks, pairwise)
    labels = (*batch, *rows, *cols)
    perm_a = tuple(ta.index(x) for x in (*batch, *rows, *summed))
    perm_b = tuple(tb.index(x) for x in (*batch, *summed, *cols))
    if _copied(a, perm_a, (nb, m, k)) + _copied(b, perm_b, (nb, k, n)) > DIRECT_COPY_MAX:
        return None
    return MatmulPair(
        perm_a=perm_a, perm_b=perm_b, dims_a=(nb, m, k), dims_b=(nb, k, n),
        shape=tuple(ea[x] if x in ea else eb[x] for x in labels),
        perm_out=tuple(labels.index(x) for x in out))


def _copied(x: np.ndarray, perm: tuple[int, ...], dims: tuple[int, int, int]) -> int:
    """Bytes the matmul's reshape of ``x`` (axes in ``perm``'s order) copies: 0 for a view."""
    try:
        np.reshape(x.transpose(perm), dims, copy=False)
    except ValueError:
        return x.nbytes
    return 0


class TensordotModes:
    """``numpy.tensordot``'s modes for operands of ``na`` and ``nb`` modes paired by its axes.

    What a :class:`MatmulPair` of the product needs beyond the extents (the free modes and the
    transposes), made once per (``na``, ``nb``, axes) and shared by every shape: a DMRG sweep
    contracts the same pattern at many bond dimensions. ``axes_a`` and ``axes_b`` are
    non-negative, distinct and in range (checked by the caller).

    Examples
    --------
    >>> modes = TensordotModes(3, 3, [1, 2], [1, 0])
    >>> modes.perm_a, modes.perm_b
    ((0, 1, 2), (1, 0, 2))
    """

    __slots__ = ("axes_a", "axes_b", "free_a", "free_b", "perm_a", "perm_b")

    def __init__(self, na: int, nb: int, axes_a: Sequence[int], axes_b: Sequence[int]) -> None:
        self.axes_a, self.axes_b = list(axes_a), list(axes_b)
        self.free_a = [i for i in range(na) if i not in axes_a]
        self.free_b = [j for j in range(nb) if j not in axes_b]
        self.perm_a = (*self.free_a, *axes_a)
        self.perm_b = (*axes_b, *self.free_b)

    def pair(self, a: np.ndarray, b: np.ndarray) -> MatmulPair | None:
        """Return ``numpy.tensordot(a, b, (axes_a, axes_b))`` as a matmul, or ``None``.

        ``None`` on the conditions of :func:`matmul_pair`: datatypes that differ or are not
        native, more than :data:`DIRECT_MAX_FLOPS` flops, dots longer than :data:`LONG_DOT`.
        """
        if a.dtype != b.dtype or a.dtype not in _NATIVE:
            return None
        sa, sb = a.shape, b.shape
        left = [sa[i] for i in self.free_a]
        right = [sb[j] for j in self.free_b]
        m, n, k = prod(left), prod(right), prod([sa[i] for i in self.axes_a])
        if 2 * m * n * k > DIRECT_MAX_FLOPS or (m * n == 1 and k > LONG_DOT):
            return None
        shape = (*left, *right)
        return MatmulPair(self.perm_a, self.perm_b, (1, m, k), (1, k, n), shape,
                          tuple(range(len(shape))))


def tensordot_pair(a: np.ndarray, b: np.ndarray, axes_a: Sequence[int],
                   axes_b: Sequence[int]) -> MatmulPair | None:
    """Return ``numpy.tensordot(a, b, (axes_a, axes_b))`` as a matmul, or ``None``.

    The same product as :func:`matmul_pair` of its einsum, built from the paired modes
    directly (see :class:`TensordotModes`). The same conditions hold.

    Examples
    --------
    >>> a, b = np.ones((2, 3, 4)), np.ones((4, 3, 5))
    >>> tensordot_pair(a, b, [1, 2], [1, 0])(a, b).shape
    (2, 5)
    """
    return TensordotModes(a.ndim, b.ndim, axes_a, axes_b).pair(a, b)


def first_tensordot(a: np.ndarray, b: np.ndarray, axes: int | tuple[Any, Any]
                    ) -> np.ndarray | None:
    """Return ``numpy.tensordot(a, b, axes)`` where :func:`tensordot_pair` takes it, or ``None``.

    A layout's first call: NumPy's own ``tensordot`` runs the transposes, reshapes and the one
    matmul that the pair would run, without building the pair (most layouts of a DMRG sweep
    are contracted once). ``None`` where the pair's conditions fail or NumPy refuses the call:
    the caller's own path then plans it or says what is wrong. ``axes`` is hashable (a count,
    or two ints or tuples).

    Examples
    --------
    >>> first_tensordot(np.ones((2, 3)), np.ones((3, 4)), 1).shape
    (2, 4)
    >>> first_tensordot(np.ones(3, np.int64), np.ones(3, np.int64), 1) is None
    True
    """
    if a.dtype != b.dtype or a.dtype not in _NATIVE:
        return None
    size_a, size_b = a.size, b.size
    try:
        if size_a * size_b > DIRECT_MAX_FLOPS // 2 or (size_a == size_b > LONG_DOT):
            k = _summed(a.shape, axes)  # the pair's bounds on flops and on long dots
            if (k == 0 or 2 * (size_a // k) * size_b > DIRECT_MAX_FLOPS
                    or (size_a == size_b == k > LONG_DOT)):
                return None
        return np.tensordot(a, b, axes)
    except (TypeError, ValueError, IndexError):
        return None


def _summed(shape: tuple[int, ...], axes: int | tuple[Any, Any]) -> int:
    """Return the summed extent of ``a`` (of ``shape``) in ``numpy.tensordot(a, b, axes)``."""
    if isinstance(axes, int):
        return prod(shape[len(shape) - axes:]) if axes else 1
    first = axes[0]
    return shape[first] if isinstance(first, int) else prod(shape[i] for i in first)
