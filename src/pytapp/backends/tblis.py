"""The ``tblis`` backend: products run by TBLIS through ``pytblis`` (extra ``tblis``).

TBLIS contracts strided tensors without explicit transposition and applies alpha, beta (with
the output as C) and conjugation of A and B natively. What it cannot do is declared as
capabilities, so a plan outside them raises error 18 (or 16) with the reason.

TBLIS adds a long sum in a few running partial sums (about 16 for the isolated labels it
reduces before multiplying, more in its dot and GEMM kernels), so its rounding error grows with
the length of the sum. A product with a long sum (more than 2**14 contracted indices, or
isolated indices of one operand) is therefore split: the label of that sum with the largest
extent is cut into blocks, of at most 2**14 terms for a contracted sum (and at least 4 blocks)
and of at most 128 terms for an isolated one. One TBLIS call contracts every full block at once
into a temporary with one result per block (the block number is one more label of its output),
one more call contracts the shorter last block, and the blocks' results are added pairwise. The
error then grows with the block's length plus log2 of the number of blocks, which makes it at
most numpy.einsum's. The temporary holds D's size times the number of blocks: where that would
exceed 2**22 elements and 1/64 of A and B, fewer blocks are taken, or none.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from pytapp.analysis.spec import ContractionSpec
from pytapp.backends.base import Capabilities, OptionalModule, Stateless, thread_setting
from pytapp.datatypes import Datatype
from pytapp.errors import ErrorCode, error_for
from pytapp.executor import Executor
from pytapp.operands import BoundProduct, same_layout
from pytapp.precision import Prectype
from pytapp.status import Status

__all__ = ["TblisBackend", "TblisPlan"]

#: A sum of more than this many terms (per element of D) is split into blocks.
SPLIT_OVER = 1 << 14
#: The most terms of one block of a split contracted sum (TBLIS's dot and GEMM kernels keep
#: many partial sums), and of a split isolated sum (TBLIS reduces those in about 16); more
#: where the label is too short to cut finer or the temporary would be too large.
_BLOCK_TERMS = 1 << 14
_ISOLATED_BLOCK_TERMS = 128
#: The fewest blocks of a split sum (so that a sum just over SPLIT_OVER gains too).
_MIN_BLOCKS = 4
#: The temporary holding one result per block has at most this many elements, or 1/64 of the
#: elements of A and B where that is more.
_TEMP_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class _Split:
    """How a long sum is cut: its label ``letter`` (of the einsum words) in blocks of ``block``.

    ``full`` blocks of ``block`` indices, then ``rest`` indices (0: none). ``a_axis`` and
    ``b_axis`` are the label's axes in the bound views of A and B (``None``: not there);
    ``blocked`` is the einsum expression of the full blocks: the block number is a new letter,
    placed before ``letter`` in A and B and last in D.
    """

    letter: str
    block: int
    full: int
    rest: int
    a_axis: int | None
    b_axis: int | None
    blocked: str

    @property
    def blocks(self) -> int:
        """The number of blocks, the shorter last one included."""
        return self.full + (1 if self.rest else 0)

    def views(self, x: np.ndarray, axis: int | None) -> tuple[np.ndarray, np.ndarray]:
        """Return views of ``x``: the full blocks (the axis cut in two) and the last block."""
        if axis is None:
            return x, x
        cut = self.full * self.block
        shape = (*x.shape[:axis], self.full, self.block, *x.shape[axis + 1:])
        strides = (*x.strides[:axis], x.strides[axis] * self.block, *x.strides[axis:])
        blocked = as_strided(x, shape, strides, writeable=False)
        return blocked, x[(slice(None),) * axis + (slice(cut, None),)]


def _plan_split(spec: ContractionSpec, words: tuple[str, str, str]) -> _Split | None:
    """Return how to cut the longest sum of ``spec`` into blocks, or ``None`` to run it whole.

    The sums are the contracted labels' (P) and each operand's isolated labels' (IA, IB); the
    longest one is cut when it has more than :data:`SPLIT_OVER` terms, at its label of largest
    extent.
    """
    cls = spec.classes
    sums = [(prod(spec.extent(x) for x in group), group, terms) for group, terms in
            ((cls.P, _BLOCK_TERMS), (cls.IA, _ISOLATED_BLOCK_TERMS),
             (cls.IB, _ISOLATED_BLOCK_TERMS))]
    length, labels, terms = max(sums, key=lambda item: item[0])
    if length <= SPLIT_OVER:
        return None
    label = max(labels, key=spec.extent)
    extent = spec.extent(label)
    d_size = max(1, prod(spec.d.modes.extents))
    inputs = prod(spec.a.modes.extents) + prod(spec.b.modes.extents)
    temp = max(_TEMP_ELEMENTS, inputs // 64)
    blocks = min(max(_MIN_BLOCKS, -(-length // terms)), extent, temp // d_size)
    wa, wb, wd = words
    free = [x for x in string.ascii_letters if x not in wa + wb + wd]
    if blocks < 2 or not free:
        return None
    a_labels, b_labels = spec.a.modes.labels, spec.b.modes.labels
    a_axis = a_labels.index(label) if label in a_labels else None
    b_axis = b_labels.index(label) if label in b_labels else None
    letter = wa[a_axis] if a_axis is not None else wb[b_axis or 0]
    block = -(-extent // blocks)
    cut = free[0] + letter
    blocked = f"{wa.replace(letter, cut)},{wb.replace(letter, cut)}->{wd}{free[0]}"
    return _Split(letter, block, extent // block, extent % block, a_axis, b_axis, blocked)


def _pairwise_sum(x: np.ndarray) -> np.ndarray:
    """Sum ``x`` over its last axis pairwise: neighbours added, level by level.

    A lone last element moves up a level unchanged. The result is a view (0-d for 1-d ``x``).
    """
    while x.shape[-1] > 1:
        half = x.shape[-1] // 2
        pairs = x[..., 0:2 * half:2] + x[..., 1:2 * half:2]
        x = np.concatenate((pairs, x[..., 2 * half:]), axis=-1) if x.shape[-1] % 2 else pairs
    return x[..., 0]


class TblisPlan(Stateless):
    """One ``pytblis.contract`` call per execution (two for a split sum), C and op_D around it."""

    def __init__(self, spec: ContractionSpec, module: Any) -> None:
        self.spec = spec
        self._tblis = module
        a, b, d = spec.einsum_words("tblis")
        self.expr = f"{a},{b}->{d}"
        self.conja = spec.a.conjugates
        self.conjb = spec.b.conjugates
        self.conjc = spec.c.conjugates
        self.conjd = spec.d.conjugates
        self.algorithm = f"tblis contract {self.expr!r}"
        self.workspace_bytes = 0  # C is copied into D itself
        self.split = _plan_split(spec, (a, b, d))
        if self.split is not None:
            cut = self.split
            self.algorithm += (f" in {cut.blocks} blocks of {cut.block} along {cut.letter!r}, "
                               "added pairwise")
            # The blocks' results, the pairwise sums of them, and beta * op_C(C).
            d_bytes = max(1, prod(spec.d.modes.extents)) * spec.d.datatype.itemsize
            self.workspace_bytes = (2 * cut.blocks + 1) * d_bytes

    def run(self, bound: BoundProduct, executor: Executor | None) -> Status:
        """Compute D in place of ``bound.d`` (TBLIS's thread count restored afterwards)."""
        threads = None if executor is None else executor.threads
        with thread_setting(self._tblis.get_num_threads, self._tblis.set_num_threads, threads):
            return self._run(bound)

    def _run(self, bound: BoundProduct) -> Status:
        d = bound.d
        status = Status(backend="tblis", algorithm=self.algorithm, flops=self.spec.flops)
        if d.size == 0:
            return status
        if self.split is not None:
            return self._run_split(bound, self.split, status)
        # TBLIS gives wrong results when a conjugation flag meets beta != 0 (seen with
        # extent-1 contracted modes): then beta * op_C(C) is added after a beta = 0 call.
        c_term = None
        beta: Any = 0.0
        if bound.c is not None:
            if self.conja or self.conjb:
                c_term = np.conjugate(bound.c) if self.conjc else np.array(bound.c)
                c_term *= bound.beta
                status.bytes_allocated += c_term.nbytes
            else:
                beta = bound.beta
                if not same_layout(bound.c, d):
                    np.copyto(d, bound.c)
                    status.bytes_copied += d.nbytes
                if self.conjc:
                    np.conjugate(d, out=d)
        alpha: Any = bound.alpha
        if np.iscomplexobj(d):
            alpha, beta = complex(alpha), complex(beta)
        else:
            alpha, beta = float(alpha), float(beta)
        self._tblis.contract(self.expr, bound.a, bound.b, alpha=alpha, beta=beta, out=d,
                             conja=self.conja, conjb=self.conjb, allow_partial_trace=True)
        if c_term is not None:
            d += c_term
        if self.conjd:
            np.conjugate(d, out=d)
        return status

    def _run_split(self, bound: BoundProduct, cut: _Split, status: Status) -> Status:
        """D = op_D(beta op_C(C) + the pairwise sum of alpha op_A(A) op_B(B) over blocks)."""
        d = bound.d
        complex_d = np.iscomplexobj(d)
        alpha = complex(bound.alpha) if complex_d else float(bound.alpha)
        parts = np.zeros((*d.shape, cut.blocks), dtype=d.dtype)
        status.bytes_allocated += parts.nbytes
        a_full, a_rest = cut.views(bound.a, cut.a_axis)
        b_full, b_rest = cut.views(bound.b, cut.b_axis)
        flags = {"alpha": alpha, "beta": 0.0, "conja": self.conja, "conjb": self.conjb,
                 "allow_partial_trace": True}
        self._tblis.contract(cut.blocked, a_full, b_full, out=parts[..., :cut.full], **flags)
        if cut.rest:
            self._tblis.contract(self.expr, a_rest, b_rest, out=parts[..., cut.full], **flags)
        total = _pairwise_sum(parts)
        if bound.c is None:
            np.copyto(d, total)
        else:
            c = np.conjugate(bound.c) if self.conjc else bound.c
            beta = complex(bound.beta) if complex_d else float(bound.beta)
            np.add(c * beta, total, out=d)
        if self.conjd:
            np.conjugate(d, out=d)
        return status


class TblisBackend(Stateless):
    """TBLIS via pytblis: F32/F64/C32/C64, one datatype per product, no broadcast."""

    name = "tblis"
    #: TBLIS's own threads
    pool = "tblis"
    # TBLIS kernels: one datatype per product, no F16/BF16, no broadcast labels.
    capabilities = Capabilities(
        datatypes=frozenset({Datatype.F32, Datatype.F64, Datatype.C32, Datatype.C64}),
        prectypes=frozenset({Prectype.DEFAULT, Prectype.F32F32_ACCUM_F32,
                             Prectype.F64F64_ACCUM_F64}),
        mixed_datatypes=False,
        broadcast=False,
    )

    def __init__(self) -> None:
        self._lib = OptionalModule("pytblis", "tblis")

    def setup_seconds(self) -> float:
        """Seconds the first plan would spend importing the library (0 once imported)."""
        return self._lib.setup_seconds()

    def available(self) -> tuple[bool, str]:
        """Whether pytblis is installed (imported on first plan)."""
        return self._lib.available()

    def plan(self, spec: ContractionSpec, executor: Executor | None) -> TblisPlan:
        """Check capabilities and precision, then build the einsum string."""
        self.capabilities.require(spec, self.name)
        rule = spec.rule
        if rule.input_round is not None and rule.input_round is not spec.a.datatype.real:
            raise error_for(
                ErrorCode.UNKNOWN_PRECISION,
                f"backend 'tblis' computes in the storage type; precision {spec.prec.name} "
                f"differs from {spec.a.datatype.name}; use DEFAULT or another backend",
            )
        return TblisPlan(spec, self._lib.load())
