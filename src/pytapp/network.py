"""Tensor networks as sequences of TAPP products: paths, steps, compiled expressions.

A :class:`Network` is everything about an einsum that depends only on the equation and the
operand shapes: how each operand is prepared (size-1 broadcast dimensions dropped, repeated
labels taken as a diagonal view, no copy), the contraction path (opt_einsum, cotengra, or one
given by the caller) and the pairwise steps. Running it binds arrays, builds one TAPP plan per
step and layout (cached), and reuses the intermediate buffers between calls.

Examples
--------
>>> import numpy as np
>>> from pytapp.analysis.subscripts import parse_subscripts
>>> net = Network(parse_subscripts("ij,jk,kl->il", (2, 2, 2)), [(2, 3), (3, 4), (4, 5)])
>>> [str(step) for step in net.steps]
['ij,jk->ik', 'kl,ik->il']
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytapp.analysis.labels import gemm_transposes
from pytapp.analysis.subscripts import Equation
from pytapp.datatypes import Datatype
from pytapp.errors import ErrorCode, error_for
from pytapp.handle import Handle
from pytapp.kernels.program import available as program_executor_built
from pytapp.kernels.program import compile_chain
from pytapp.machine import wide_is_faster
from pytapp.operands import BoundProduct
from pytapp.product import TensorProduct
from pytapp.tensor import TensorInfo, row_major_strides

__all__ = ["Network", "PathInfo", "Prepared", "Step", "machine_layout", "prepare_labels",
           "resolve_path", "result_shape"]

_log = logging.getLogger("pytapp")

#: Most TAPP plans one step keeps (one per operand layout and datatype).
STEP_PLAN_CACHE = 16
#: Fewest flops of a last step whose result layout is worth trying both ways (see
#: :meth:`Network.flipped`): over 10 ms a call, so that planning the other layout (about a
#: millisecond) and the few calls of the slower one are repaid within 20 calls. In a loop of
#: 20 calls per product the two layouts of 0.38 GFLOP GEMMs came out within 5% either way from
#: run to run (the trial picked at random and cost its planning), those of 1.5 GFLOP ones
#: 7-10% apart, the same way every run.
FLIP_MIN_FLOPS = 1 << 30
#: Fewest elements of the innermost run of a result that sums nothing (an outer product, a
#: row scaled by a column): the larger operand's labels that make at least this run come last.
BROADCAST_MIN_RUN = 128

Path = list[tuple[int, ...]]

#: A scalar one per datatype: the B of one-operand steps (read-only, shared).
_ONE = {dt: np.ones((), dtype=dt.numpy_dtype) for dt in Datatype}
for _one in _ONE.values():
    _one.flags.writeable = False


@dataclass(frozen=True)
class Step:
    """One TAPP product of a network: slots ``a`` and ``b`` (``None``: the scalar one)."""

    a: int
    b: int | None
    a_labels: str
    b_labels: str
    out_labels: str
    out: int

    def __str__(self) -> str:
        return f"{self.a_labels},{self.b_labels}->{self.out_labels}"


@dataclass(frozen=True)
class Prepared:
    """How one operand becomes a view with distinct labels.

    Indices to drop (size-1 broadcasts), then the diagonal over repeated labels.
    """

    drop: tuple[int, ...]
    labels: str
    diagonal: bool

    def apply(self, arr: np.ndarray, term: str) -> np.ndarray:
        """Return ``arr`` (with labels ``term``) as the view these steps describe (no copy)."""
        view = arr
        kept = term
        if self.drop:
            index = tuple(0 if axis in self.drop else slice(None) for axis in range(arr.ndim))
            view = arr[(*index, Ellipsis)]  # the Ellipsis keeps a 0-d array, not a scalar
            kept = "".join(ch for axis, ch in enumerate(term) if axis not in self.drop)
        if not self.diagonal:
            return view
        shape, strides = [], []
        for label in self.labels:
            axes = [i for i, ch in enumerate(kept) if ch == label]
            shape.append(view.shape[axes[0]])
            strides.append(sum(view.strides[i] for i in axes))
        return np.lib.stride_tricks.as_strided(view, tuple(shape), tuple(strides),
                                               writeable=False)


def _sizes(equation: Equation, shapes: Sequence[tuple[int, ...]]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    where: dict[str, int] = {}
    for index, (term, shape) in enumerate(zip(equation.inputs, shapes, strict=True)):
        _check_diagonal(term, shape, index)
        for label, extent in zip(term, shape, strict=True):
            known = sizes.get(label)
            if known is None or known == 1:
                sizes[label] = extent
                where[label] = index
            elif extent not in (1, known):
                raise error_for(
                    ErrorCode.EXTENT_MISMATCH_AB,
                    f"label {_show(label)} has extent {known} in operand {where[label]} but "
                    f"{extent} in operand {index}; extents of one label must be equal (or 1, "
                    "to broadcast)",
                )
    return sizes


def _check_diagonal(term: str, shape: tuple[int, ...], index: int) -> None:
    """Raise error 9 when a label repeated in one operand has modes of different extents.

    A repeated label takes a diagonal, which has no size-1 broadcasting (as in NumPy).
    """
    first: dict[str, int] = {}
    for label, extent in zip(term, shape, strict=True):
        known = first.setdefault(label, extent)
        if extent != known:
            raise error_for(
                ErrorCode.REPEATED_EXTENT_A,
                f"label {_show(label)} repeats in operand {index} with extents {known} and "
                f"{extent}; the modes of a label repeated in one operand (a diagonal) must "
                "have equal extents",
            )


def result_shape(equation: Equation, shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """Return the shape of an einsum's result (extents checked as :class:`Network` does)."""
    sizes = _sizes(equation, shapes)
    return tuple(sizes[ch] for ch in equation.output)


def prepare_labels(equation: Equation, shapes: Sequence[tuple[int, ...]]) -> list[Prepared]:
    """How each operand is prepared (dropped broadcast axes, distinct labels, diagonal)."""
    sizes = _sizes(equation, shapes)
    return [_prepare(t, s, sizes) for t, s in zip(equation.inputs, shapes, strict=True)]


def _show(label: str) -> str:
    return repr(label) if label.isalpha() else f"'...' dimension {ord(label) - 0xE000}"


def _prepare(term: str, shape: tuple[int, ...], sizes: dict[str, int]) -> Prepared:
    drop = tuple(axis for axis, (label, extent) in enumerate(zip(term, shape, strict=True))
                 if extent == 1 and sizes[label] != 1)
    kept = "".join(ch for axis, ch in enumerate(term) if axis not in drop)
    labels = "".join(dict.fromkeys(kept))
    return Prepared(drop, labels, len(labels) != len(kept))


def resolve_path(optimize: Any, inputs: list[frozenset[str]], output: frozenset[str],
                 sizes: dict[str, int], memory_limit: int | None) -> Path:
    """Return the contraction path for ``optimize`` (see :func:`pytapp.einsum`).

    Raises
    ------
    UnsupportedError
        Code 18 for an unknown optimizer name or a path that does not contract every operand.
    """
    n = len(inputs)
    if n <= 1:
        return [(0,)] if n else []
    if optimize is False or optimize is None:
        # left to right: the running result (kept last) with the next operand (first)
        chain: Path = [(0, 1)]
        return chain + [(0, n - 2 - i) for i in range(n - 2)]
    if optimize is True:
        optimize = "greedy"
    if (isinstance(optimize, tuple) and len(optimize) == 2 and isinstance(optimize[0], str)
            and optimize[0] != "einsum_path"):
        optimize, memory_limit = optimize  # NumPy's (name, memory limit) form
    if isinstance(optimize, str):
        from opt_einsum import paths

        try:
            fn: Callable[..., Any] = paths.get_path_fn(optimize)
        except (KeyError, ValueError) as exc:
            raise error_for(
                ErrorCode.UNSUPPORTED,
                f"optimize={optimize!r} is not a path optimizer; use 'auto', 'greedy', "
                "'optimal', 'dp', 'branch-2', True/False, an explicit path or an optimizer "
                "object",
            ) from exc
        found = fn(inputs, output, sizes, memory_limit)
        if optimize == "auto" and n >= 3:
            # 'auto' searches small networks exhaustively, but its search prunes what greedy
            # keeps: on dacb,cdba,cabd,ad->cd (32x96x3x64) it found 2.4M multiply-adds where
            # greedy found 1.8M, and ran 1.5x slower; the cheaper of the two is taken
            greedy = paths.get_path_fn("greedy")(inputs, output, sizes, memory_limit)
            if path_cost(greedy, inputs, output, sizes) < path_cost(found, inputs, output, sizes):
                found = greedy
    elif isinstance(optimize, (list, tuple)):
        found = [step for step in optimize if step != "einsum_path"]
    elif callable(optimize):
        found = optimize(inputs, output, sizes, memory_limit)
    else:
        raise error_for(ErrorCode.UNSUPPORTED,
                        f"optimize={optimize!r}; give a bool, an optimizer name, a path or an "
                        "optimizer object")
    return _check_path(found, n)


def path_cost(path: Sequence[Sequence[int]], inputs: Sequence[frozenset[str]],
              output: frozenset[str], sizes: dict[str, int]) -> int:
    """Multiply-adds of a contraction path: each step's whole label space, summed or not.

    Examples
    --------
    >>> ab, bc, cd = frozenset("ab"), frozenset("bc"), frozenset("cd")
    >>> path_cost([(0, 1), (0, 1)], [ab, bc, cd], frozenset("ad"), dict(a=2, b=3, c=4, d=5))
    64
    """
    live = list(inputs)
    total = 0
    for group in path:
        taken = [live[i] for i in group]
        for i in sorted(group, reverse=True):
            del live[i]
        labels = frozenset().union(*taken)
        total += math.prod(sizes[ch] for ch in labels)
        live.append(labels & (output | frozenset().union(*live)))
    return total


def _check_path(found: Any, n: int) -> Path:
    path: Path = []
    live = n
    for item in found:
        try:
            step = tuple(int(i) for i in item)
        except (TypeError, ValueError) as exc:
            raise error_for(ErrorCode.UNSUPPORTED,
                            f"path step {item!r} is not a tuple of operand positions") from exc
        if not step or len(set(step)) != len(step) or not all(0 <= i < live for i in step):
            raise error_for(ErrorCode.UNSUPPORTED,
                            f"path step {step} is not a set of distinct positions among the "
                            f"{live} operands left at that point")
        path.append(step)
        live -= len(step) - 1
    if live != 1:
        raise error_for(ErrorCode.UNSUPPORTED,
                        f"the path {path} leaves {live} operands; a path must contract all of "
                        "them into one")
    return path


@dataclass(frozen=True)
class PathInfo:
    """What a network does, step by step (printed by :func:`pytapp.einsum_path`)."""

    equation: str
    path: Path
    steps: tuple[str, ...]
    flops: tuple[int, ...]
    algorithms: tuple[str, ...]
    predicted: tuple[float | None, ...]
    naive_flops: int
    largest_intermediate: int

    def __str__(self) -> str:
        total = sum(self.flops)
        lines = [
            f"  Complete contraction:  {self.equation}",
            f"         Naive FLOP count:  {self.naive_flops:.4g}",
            f"     Optimized FLOP count:  {total:.4g}",
            f"      Theoretical speedup:  {self.naive_flops / max(total, 1):.4g}",
            f"  Largest intermediate:  {self.largest_intermediate:.4g} elements",
            "-" * 78,
            f"{'step':>4}  {'contraction':<28} {'flops':>10} {'predicted':>11}  algorithm",
            "-" * 78,
        ]
        for i, (step, flops, algo, pred) in enumerate(zip(
                self.steps, self.flops, self.algorithms, self.predicted, strict=True)):
            shown = "-" if pred is None else f"{pred * 1e3:.3f} ms"
            lines.append(f"{i:>4}  {step:<28} {flops:>10.4g} {shown:>11}  {algo}")
        return "\n".join(lines)


def machine_layout(natural: Network, flipped: Network, dtype: Datatype) -> Network | None:
    """Return the result layout this machine's BLAS writes faster, or ``None`` (try both).

    ``flipped`` is ``natural`` with its last GEMM transposed (:meth:`Network.flipped`). A
    thin last GEMM without batch labels takes the orientation the machine measured faster in
    ``dtype``, when the preference is clear (:func:`pytapp.machine.wide_is_faster`); a square
    or batched one, or a machine without a clear preference, is tried both ways.

    Examples
    --------
    >>> from pytapp.analysis.subscripts import parse_subscripts
    >>> net = Network(parse_subscripts("ik,kj->ij", [2, 2]), [(64, 2048), (2048, 64)],
    ...               free_layout=True)
    >>> machine_layout(net, net, Datatype.F64) is None  # 64 x 64: square, no preference
    True
    """
    if natural.final_batched():
        return None
    wide = wide_is_faster(*natural.final_extents(), dtype.short_name, natural.final_sum())
    if wide is None:
        return None
    return natural if natural.writes_wide() == wide else flipped


class Network:
    """An einsum compiled for operand shapes: preparation, path and TAPP steps.

    Parameters
    ----------
    equation
        The parsed equation (see :func:`pytapp.analysis.subscripts.parse_subscripts`).
    shapes
        One shape per operand.
    optimize, memory_limit
        As for :func:`pytapp.einsum`.
    """

    def __init__(self, equation: Equation, shapes: Sequence[tuple[int, ...]], *,
                 optimize: Any = "auto", memory_limit: Any = None,
                 free_layout: bool = False, flip_final: bool | None = None,
                 layout_dtype: Datatype | None = None) -> None:
        self.equation = equation
        self.shapes = tuple(tuple(int(x) for x in s) for s in shapes)
        self.sizes = _sizes(equation, self.shapes)
        self.prepared = tuple(_prepare(t, s, self.sizes)
                              for t, s in zip(equation.inputs, self.shapes, strict=True))
        inputs = [frozenset(p.labels) for p in self.prepared]
        limit = self._limit(memory_limit)
        start = time.perf_counter()
        self.path = resolve_path(optimize, inputs, frozenset(equation.output), self.sizes, limit)
        self.free_layout = free_layout
        self.flip_final = bool(flip_final) and free_layout
        self.layout_dtype = layout_dtype
        self.steps = self._steps()
        if flip_final is None and (self._machine_flips() or self._transposes_flip()):
            self.flip_final = True
            self.steps = self._steps()
        last = self.steps[-1].out_labels if self.steps else equation.output
        #: Axes of the last step's result that give the output's order (None: the same).
        self.final_perm: tuple[int, ...] | None = (
            tuple(last.index(ch) for ch in equation.output) if last != equation.output
            else None)
        _log.info("network %s: path %s (optimize=%r) in %.3f ms, %d pairwise steps",
                  equation, self.path, optimize, 1e3 * (time.perf_counter() - start),
                  len(self.steps))
        self._out_shapes = [tuple(self.sizes[ch] for ch in st.out_labels) for st in self.steps]
        self._plans: list[OrderedDict[Any, TensorProduct]] = [OrderedDict() for _ in self.steps]
        self._buffers: dict[tuple[int, Datatype], np.ndarray] = {}
        self._bound: dict[tuple[int, Datatype], tuple[TensorProduct, BoundProduct]] = {}
        self._lock = threading.Lock()  # the plan caches
        self._busy = threading.Lock()  # held by the call that uses the shared buffers

    @property
    def flops(self) -> int:
        """Twice the multiply-adds of every step (a product's whole label space, summed or not).

        Examples
        --------
        >>> from pytapp.analysis.subscripts import parse_subscripts
        >>> Network(parse_subscripts("ij,jk->ik", [2, 2]), [(2, 3), (3, 4)]).flops
        48
        """
        return sum(self._step_flops(st) for st in self.steps)

    def _step_flops(self, step: Step) -> int:
        return 2 * math.prod(self.sizes[ch] for ch in set(step.a_labels) | set(step.b_labels))

    def _final_split(self) -> tuple[set[str], set[str]]:
        """Return the labels the last step keeps of A alone and of B alone."""
        last = self.steps[-1]
        kept = set(last.out_labels)
        return (kept & (set(last.a_labels) - set(last.b_labels)),
                kept & (set(last.b_labels) - set(last.a_labels)))

    def final_extents(self) -> tuple[int, int]:
        """Return the extents the last GEMM keeps of A and of B alone (rows, then columns).

        A free layout writes them in this order; :meth:`flipped` writes B's first.

        Examples
        --------
        >>> from pytapp.analysis.subscripts import parse_subscripts
        >>> Network(parse_subscripts("bik,bkj->bij", [3, 3]),
        ...         [(2, 4, 5), (2, 5, 6)]).final_extents()
        (4, 6)
        """
        if not self.steps:
            return 1, 1
        own_a, own_b = self._final_split()
        return (math.prod(self.sizes[ch] for ch in own_a),
                math.prod(self.sizes[ch] for ch in own_b))

    def final_sum(self) -> int:
        """Return the extent the last step sums (the product of its summed labels' extents).

        Examples
        --------
        >>> from pytapp.analysis.subscripts import parse_subscripts
        >>> Network(parse_subscripts("bik,bkj->bij", [3, 3]),
        ...         [(2, 4, 5), (2, 5, 6)]).final_sum()
        5
        """
        if not self.steps or self.steps[-1].b is None:
            return 1
        last = self.steps[-1]
        summed = (set(last.a_labels) & set(last.b_labels)) - set(last.out_labels)
        return math.prod(self.sizes[ch] for ch in summed)

    def writes_wide(self) -> bool:
        """Whether the last GEMM's result has more columns than rows (row-major, as written)."""
        m, n = self.final_extents()
        return m > n if self.flip_final else n > m

    def final_batched(self) -> bool:
        """Whether the last step has batch labels (in both operands and the result)."""
        if not self.steps or self.steps[-1].b is None:
            return False
        last = self.steps[-1]
        return bool(set(last.a_labels) & set(last.b_labels) & set(last.out_labels))

    def _machine_flips(self) -> bool:
        """Whether a free layout's thin last GEMM is written faster transposed on this machine.

        Given the datatype the layout is for (``layout_dtype``), a thin result without batch
        labels takes the orientation this machine's BLAS writes faster in that datatype
        (:func:`machine_layout`), at any size: ``kjab,ki->ijab`` at o=12, v=48 in F64 as A's
        labels first (27,648 x 12) took 0.42 ms, as B's (12 x 27,648) 0.26 ms.
        """
        if self.layout_dtype is None or not self._final_gemm_orients():
            return False
        if self.final_batched():  # the probe measured a plain GEMM (batched ones differ)
            return False
        wide = wide_is_faster(*self.final_extents(), self.layout_dtype.short_name,
                              self.final_sum())
        return wide is not None and wide != self.writes_wide()

    def _final_gemm_orients(self) -> bool:
        """Whether the result layout is free and the last step a GEMM with two orientations.

        It sums (an elementwise step has its kernel's layout), and each operand keeps a label
        of its own, so that A's labels or B's can come first.
        """
        if not self.free_layout or not self.steps or self.steps[-1].b is None:
            return False
        last = self.steps[-1]
        if set(last.a_labels) | set(last.b_labels) == set(self.equation.output):
            return False
        own_a, own_b = self._final_split()
        return bool(own_a and own_b)

    def _transposes_flip(self) -> bool:
        """Whether a free layout's last GEMM reads fewer operands transposed writing B's first.

        Where this machine has no measured preference for the orientation (a result that is
        not thin, or no clear ratio), the order whose GEMM reads its operands as they lie is
        taken (:func:`gemm_transposes`): ``bad,cba->cd`` (12x4x200, 256x12x4, F32) written as
        ``dc`` reads both transposed (62-67 us), as ``cd`` neither (26 us).
        """
        if not self._final_gemm_orients():
            return False
        last = self.steps[-1]
        if (self.layout_dtype is not None and not self.final_batched()
                and wide_is_faster(*self.final_extents(), self.layout_dtype.short_name,
                                   self.final_sum()) is not None):
            return False  # the orientation this machine measured decides
        other = self._natural(last.b_labels, last.a_labels, set(last.out_labels))
        return gemm_transposes(last.a_labels, last.b_labels, other) < gemm_transposes(
            last.a_labels, last.b_labels, last.out_labels)

    def flipped(self) -> Network | None:
        """Return this network with its last GEMM computing the transposed result, or ``None``.

        A free result layout (``free_layout``) is the last step's GEMM's: A's free labels
        then B's. The other order, B's then A's (numpy.einsum's for two operands), is the same
        GEMM transposed, ``D^T = B^T A^T``: BLAS runs the two at different speeds, by up to
        1.6x either way depending on the shapes and the machine (see
        :meth:`pytapp.machine.Machine.tall_over_wide` for thin GEMMs).
        ``None`` unless the layout is free, the last step multiplies two operands that each
        keep a label of their own, and it has at least :data:`FLIP_MIN_FLOPS` flops.

        Examples
        --------
        >>> from pytapp.analysis.subscripts import parse_subscripts
        >>> net = Network(parse_subscripts("ik,jk->ij", [2, 2]), [(4096, 64), (2048, 64)],
        ...               free_layout=True)
        >>> net.steps[-1].out_labels, net.flipped().steps[-1].out_labels
        ('ij', 'ji')
        """
        if not self.free_layout or not self.steps or self.steps[-1].b is None:
            return None
        own_a, own_b = self._final_split()
        if not own_a or not own_b or self._step_flops(self.steps[-1]) < FLIP_MIN_FLOPS:
            return None
        return Network(self.equation, self.shapes, optimize=list(self.path),
                       free_layout=True, flip_final=not self.flip_final,
                       layout_dtype=self.layout_dtype)

    def _limit(self, memory_limit: Any) -> int | None:
        if memory_limit is None:
            return None
        if memory_limit == "max_input":
            return max((math.prod(s) for s in self.shapes), default=1)
        if isinstance(memory_limit, bool) or not isinstance(memory_limit, (int, np.integer)):
            raise error_for(ErrorCode.UNSUPPORTED,
                            f"memory_limit={memory_limit!r}; give a number of elements, "
                            "'max_input' or None")
        return int(memory_limit)

    def _steps(self) -> tuple[Step, ...]:
        live: list[tuple[int, str]] = list(enumerate(p.labels for p in self.prepared))
        output = self.equation.output
        slots = len(live)
        steps: list[Step] = []
        for k, group in enumerate(self.path):
            taken = [live[i] for i in group]
            for i in sorted(group, reverse=True):
                del live[i]
            last_group = k == len(self.path) - 1
            first_slot, first_labels = taken[0]
            rest: list[tuple[int | None, str]] = list(taken[1:]) or [(None, "")]
            for j, (slot, labels) in enumerate(rest):
                later = "".join(lbl for _, lbl in live) + "".join(lbl for _, lbl in rest[j + 1:])
                if last_group and j == len(rest) - 1:
                    pair = (labels, first_labels) if self.flip_final else (first_labels, labels)
                    if not self.free_layout:
                        out_labels = output
                    elif set(first_labels) | set(labels) == set(output):  # nothing summed
                        out_labels = self._broadcast(first_labels, labels, set(output))
                    else:
                        out_labels = self._natural(*pair, set(output))
                else:
                    out_labels = self._intermediate(first_labels, labels,
                                                    set(output) | set(later))
                steps.append(Step(first_slot, slot, first_labels, labels, out_labels, slots))
                first_slot, first_labels = slots, out_labels
                slots += 1
            live.append((first_slot, first_labels))
        return self._for_consumers(steps)

    def _for_consumers(self, steps: list[Step]) -> tuple[Step, ...]:
        """Lay out what a step writes as the step that reads it wants it, where that is free.

        The GEMM that reads an intermediate is copy-free when the labels it shares with its
        other operand come last, in that operand's order: batch labels first, then the
        result's own, then the contracted ones. A step that sums nothing (Hadamard, outer
        product) writes any layout at the same cost (a CP reconstruction's ``jr,kr->jkr`` then
        ``ir,jkr->ijk`` is one GEMM on views); a step that sums writes without a copy the
        layouts of its GEMM (batch labels, then one operand's free labels, then the other's),
        and takes the reader's when it is one of those (a bilinear layer's ``bi,oij->boj``
        then ``boj,bj->bo`` is a batched GEMV on views). Where a summing step can write both
        orders of the reader's groups, the one whose two GEMMs transpose fewer operands
        (:func:`gemm_transposes`) is taken: a CCSD term's ``klcd,cdij->klij`` then
        ``abkl,klij->abij`` multiplies row-major operands twice, where ``ijkl`` transposed
        three. An elementwise step takes the reader's layout only where its larger operand's
        innermost label stays innermost: writing 2.5M elements across the memory order of
        ``gabe`` (``gabe,gb->eabg``) took 7.4 ms, where the reader's packing copies it through
        cache tiles.
        """
        for k in range(len(steps) - 1):
            st = steps[k]  # as an earlier iteration left it (it may read what one wrote)
            if st.b is None:
                continue
            sums = set(st.out_labels) != set(st.a_labels) | set(st.b_labels)
            j = next((i for i in range(k + 1, len(steps))
                      if st.out in (steps[i].a, steps[i].b)), None)
            if j is None or steps[j].b is None or steps[j].a == steps[j].b:
                continue
            reader = steps[j]
            mine = reader.a_labels if reader.a == st.out else reader.b_labels
            other = reader.b_labels if reader.a == st.out else reader.a_labels
            batch = [ch for ch in other if ch in mine and ch in reader.out_labels]
            summed = [ch for ch in other if ch in mine and ch not in reader.out_labels]
            own = [ch for ch in mine if ch not in other]
            # the reader's GEMM reads either order of its groups in place
            wanted = ["".join([*batch, *own, *summed]), "".join([*batch, *summed, *own])]
            if sums:  # a GEMM writes its two groups of free labels in either order, no other
                keep = set(st.out_labels)
                written = (Network._natural(st.a_labels, st.b_labels, keep),
                           Network._natural(st.b_labels, st.a_labels, keep))
                wanted = [w for w in wanted if w in written]
            else:  # an elementwise kernel: the reader's summed labels last, read in order
                del wanted[1:]  # (a CP's jr,kr->rjk ran 6% slower than jr,kr->jkr)
                big = max(st.a_labels, st.b_labels, key=self._size)
                if big and wanted[0][-1:] != big[-1]:  # but the larger operand streamed
                    continue
            if not wanted:
                continue
            transposed = [gemm_transposes(st.a_labels, st.b_labels, w)
                          + gemm_transposes(other, w, reader.out_labels) for w in wanted]
            labels = wanted[transposed.index(min(transposed))]  # the first on a tie
            if labels == st.out_labels:
                continue
            steps[k] = dataclasses.replace(st, out_labels=labels)
            if reader.a == st.out:
                steps[j] = dataclasses.replace(reader, a_labels=labels)
            else:
                steps[j] = dataclasses.replace(reader, b_labels=labels)
        return tuple(steps)

    @staticmethod
    def _natural(a: str, b: str, keep: set[str]) -> str:
        """Return the order a product writes without a permutation, as numpy's tensordot does.

        Labels of both operands first, then A's own, then B's, each in its operand's order:
        the layout of TTGT's GEMM result (and of numpy.einsum's, which returns the transposed
        view of a tensordot).
        """
        both = [ch for ch in a if ch in keep and ch in b]
        return "".join([*both, *(ch for ch in a if ch in keep and ch not in b),
                        *(ch for ch in b if ch in keep and ch not in a)])

    def _size(self, labels: str) -> int:
        return math.prod(self.sizes[ch] for ch in labels)

    def _broadcast(self, a: str, b: str, keep: set[str]) -> str:
        """Return the result layout of a last step that sums nothing (outer, Hadamard products).

        The larger operand's labels in its own order, read and written in memory order
        (``ij,j->ij`` written as ``ji``, a GEMM's order, took 10.8 ms against numpy's 5.1),
        with the smaller operand's own labels placed just outside the shortest run of the
        larger's innermost labels that holds :data:`BROADCAST_MIN_RUN` elements: the loop
        nest's inner loop is then a long unit-stride one, and a row of the larger operand is
        reused from cache for each element of the smaller. Placing them innermost instead ran
        loops as short as the smaller operand: ``ik,jk->ijk`` (300x64, 20x64, F32) took 173 us
        as ``ikj``, 41 as ``jik``; ``ab,c->abc`` (500x400, 5) 429 us as ``abc``, 197 as
        ``acb``; ``g,ch->hcg`` (200, 32x3, C128) 75 us as ``gch``, 30 as ``chg``.

        Examples
        --------
        >>> from pytapp.analysis.subscripts import parse_subscripts
        >>> net = Network(parse_subscripts("ab,c->abc", (2, 1)), [(500, 400), (5,)],
        ...               free_layout=True)
        >>> net.steps[-1].out_labels
        'acb'
        """
        big, small = (a, b) if self._size(a) >= self._size(b) else (b, a)
        kept = [ch for ch in big if ch in keep]
        own = [ch for ch in small if ch in keep and ch not in big]
        cut, run = len(kept), 1
        while cut > 0 and run < BROADCAST_MIN_RUN:
            cut -= 1
            run *= self.sizes[kept[cut]]
        return "".join([*kept[:cut], *own, *kept[cut:]])

    def _intermediate(self, a: str, b: str, keep: set[str]) -> str:
        """Return the mode order of an intermediate.

        The larger operand's kept labels in its own order, then the other's. The big operand
        is then read (and the result written) in memory order, and a chain of products that
        each add a small factor (a basis change, a bond) ends with the labels already in the
        order of the next step.
        """
        first, second = (a, b) if self._size(a) >= self._size(b) else (b, a)
        return "".join(ch for ch in dict.fromkeys(first + second) if ch in keep)

    # ------------------------------------------------------------------ running

    def prepare(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Return views of the operands with distinct labels (no copies)."""
        return [p.apply(a, t) for p, a, t in
                zip(self.prepared, arrays, self.equation.inputs, strict=True)]

    def _plan(self, k: int, handle: Handle, a: np.ndarray, b: np.ndarray,
              d: np.ndarray) -> TensorProduct:
        # keyed on the raw layouts: building TensorInfos (which validate) costs more than
        # a small product's execution
        key = (handle.backend_name, a.dtype.char, a.shape, a.strides, b.shape, b.strides,
               d.strides)  # one dtype per call; D's shape is the step's
        cache = self._plans[k]
        plan = cache.get(key)
        if plan is not None and not plan.destroyed:
            return plan
        step = self.steps[k]
        infos = (TensorInfo.from_array(a), TensorInfo.from_array(b), TensorInfo.from_array(d))
        plan = TensorProduct(handle, infos[0], step.a_labels, infos[1], step.b_labels, None,
                             None, infos[2], step.out_labels)
        with self._lock:
            cache[key] = plan
            while len(cache) > STEP_PLAN_CACHE:
                cache.popitem(last=False)[1].destroy()
        return plan

    def _buffer(self, k: int, dt: Datatype, shared: bool) -> np.ndarray:
        shape = self._out_shapes[k]
        if not shared:
            return np.empty(shape, dtype=dt.numpy_dtype)
        buf = self._buffers.get((k, dt))
        if buf is None:
            buf = self._buffers[(k, dt)] = np.empty(shape, dtype=dt.numpy_dtype)
        return buf

    def intermediate_bytes(self, dt: Datatype) -> int:
        """Bytes of the buffers a run allocates for intermediates (every step but the last).

        Examples
        --------
        >>> from pytapp.analysis.subscripts import parse_subscripts
        >>> net = Network(parse_subscripts("ij,jk,kl->il", [2, 2, 2]),
        ...               [(2, 3), (3, 4), (4, 5)], optimize=False)
        >>> net.intermediate_bytes(Datatype.F64)  # ik: 2 x 4 elements
        64
        """
        return dt.itemsize * sum(math.prod(s) for s in self._out_shapes[:-1])

    def _check_memory(self, dt: Datatype, handle: Handle, new_result: bool) -> None:
        """Raise 18 before allocating when the buffers of a run exceed the memory limit."""
        need = self.intermediate_bytes(dt)
        if new_result:
            need += dt.itemsize * math.prod(self.output_shape())
        limit = handle.memory_limit()
        if need > limit:
            raise error_for(
                ErrorCode.UNSUPPORTED,
                f"this einsum's intermediates{' and result' if new_result else ''} need "
                f"{need / 2**20:.1f} MiB, more than the handle's MEMORY_LIMIT (default: half "
                f"the free memory) of {limit / 2**20:.1f} MiB; raise the limit "
                "(set_attr(Attr.MEMORY_LIMIT, bytes)), let the path be optimized "
                "(optimize='greedy' instead of False), or pass memory_limit= to bound them",
            )

    def output_shape(self) -> tuple[int, ...]:
        """Return the shape of the result."""
        return tuple(self.sizes[ch] for ch in self.equation.output)

    def run(self, views: Sequence[np.ndarray], dt: Datatype, handle: Handle,
            out: np.ndarray | None = None) -> np.ndarray:
        """Contract prepared ``views`` (all of datatype ``dt``) into ``out`` or a new array.

        Intermediates use the network's buffers unless another thread is running it.
        """
        self._check_memory(dt, handle, out is None)
        perm = self.final_perm
        if out is None:
            result = np.empty(self._out_shapes[-1] if self.steps else self.output_shape(),
                              dtype=dt.numpy_dtype)
        else:  # the last step writes into out seen in its own order of labels
            result = out if perm is None else out.transpose(np.argsort(perm))
        shared = self._busy.acquire(blocking=False)
        try:
            slots: dict[int, np.ndarray] = dict(enumerate(views))
            one = _ONE[dt]
            inputs = len(self.prepared)
            for k, step in enumerate(self.steps):
                last = k == len(self.steps) - 1
                d = result if last else self._buffer(k, dt, shared)
                a = slots[step.a]
                b = one if step.b is None else slots[step.b]
                plan = self._plan(k, handle, a, b, d)
                internal = shared and not last and step.a >= inputs and (
                    step.b is None or step.b >= inputs)
                if internal:  # every operand is this network's: bind once, run many times
                    bound = self._bound.get((k, dt))
                    if bound is None or bound[0] is not plan:
                        bound = self._bound[(k, dt)] = (plan, plan.bind(1, a, b, 0, None, d))
                    plan.run_bound(bound[1])
                else:
                    plan.execute(1, a, b, 0, None, d)
                slots[step.out] = d
        finally:
            if shared:
                self._busy.release()
        if out is not None:
            return out
        return result if perm is None else result.transpose(perm)

    def compiled_chain(self, arrays: Sequence[np.ndarray], dt: Datatype, handle: Handle,
                       programs_only: bool = False, out: np.ndarray | None = None) -> Any:
        """Return the network bound to its plans for these inputs' layouts, or ``None``.

        A compiled chain (``pytapp._cexec.Chain``): called with the operands, it runs every
        step as its plan's compiled program when it has one, else through the plan's
        :meth:`~pytapp.TensorProduct.execute`, and returns the result (``None`` when a cache
        destroyed a plan meanwhile). ``None`` unless the compiled executor is built, the inputs
        are used as they are (no diagonal or dropped axis) and are already of ``dt``, and, with
        ``programs_only``, unless every step is a compiled program.

        With ``out`` (of the result's shape and of ``dt``) the chain is built for that
        array's layout and takes it as its last operand: the last step writes the result
        there and the chain returns it.
        """
        want = dt.numpy_dtype
        if not program_executor_built() or any(p.drop or p.diagonal for p in self.prepared) or any(
                a.dtype != want for a in arrays) or (out is not None and (
                    out.dtype != want or out.shape != self.output_shape() or not self.steps)):
            return None
        perm = self.final_perm
        slots = list(arrays)
        plans: list[TensorProduct] = []
        buffers: list[np.ndarray] = []
        for k, step in enumerate(self.steps):
            if step.out != len(slots):
                return None
            shape = self._out_shapes[k]
            if k < len(self.steps) - 1:
                d = np.empty(shape, dtype=want)
            elif out is not None:  # the caller's array, seen in the step's order of labels
                d = out if perm is None else out.transpose(np.argsort(perm))
            else:  # the result is allocated by each call: only its layout is needed here
                d = np.lib.stride_tricks.as_strided(
                    np.empty(1, dtype=want), shape,
                    tuple(s * want.itemsize for s in row_major_strides(shape)))
            b = _ONE[dt] if step.b is None else slots[step.b]
            plans.append(self._plan(k, handle, slots[step.a], b, d))
            buffers.append(d)
            slots.append(d)
        programs = tuple(p.compiled_program for p in plans)
        if programs_only and any(p is None for p in programs):
            return None
        return compile_chain(
            ninputs=len(arrays), a=[st.a for st in self.steps],
            b=[-1 if st.b is None else st.b for st in self.steps], shapes=self._out_shapes,
            type_num=want.num, programs=programs, plans=tuple(plans),
            buffers=(*buffers[:-1], np.empty(0, dtype=want)), one=_ONE[dt], perm=perm,
            takes_out=out is not None)

    def info(self, handle: Handle, dt: Datatype) -> PathInfo:
        """Build (or reuse) each step's plan on contiguous operands and describe it."""
        algorithms, predicted, flops = [], [], []
        shapes: dict[int, tuple[int, ...]] = {
            s: tuple(self.sizes[ch] for ch in p.labels) for s, p in enumerate(self.prepared)}
        largest = 0
        for step in self.steps:
            out_shape = tuple(self.sizes[ch] for ch in step.out_labels)
            shapes[step.out] = out_shape
            largest = max(largest, math.prod(out_shape))
            infos = [TensorInfo(dt, shapes[step.a]),
                     TensorInfo(dt, () if step.b is None else shapes[step.b]),
                     TensorInfo(dt, out_shape)]
            plan = TensorProduct(handle, infos[0], step.a_labels, infos[1], step.b_labels,
                                 None, None, infos[2], step.out_labels)
            try:
                algorithms.append(plan.algorithm)
                predicted.append(plan.predicted_seconds)
                flops.append(plan.flops)
            finally:
                plan.destroy()
        naive = max(len(self.prepared), 1) * math.prod(self.sizes.values())
        return PathInfo(str(self.equation), list(self.path), tuple(str(s) for s in self.steps),
                        tuple(flops), tuple(algorithms), tuple(predicted), naive, largest)

    def release(self) -> None:
        """Destroy every cached plan and drop the buffers."""
        with self._lock:
            plans = [p for cache in self._plans for p in cache.values()]
            for cache in self._plans:
                cache.clear()
            self._buffers.clear()
            self._bound.clear()
        for plan in plans:
            plan.destroy()
