"""GEMMs straight on strided views: loop over some labels, fuse the rest in place (pure).

TTGT fuses every free label of A into the rows of one GEMM, which forces a copy whenever those
labels do not lie together in A (or in D). Looping over some free (and all Hadamard) labels
instead often leaves matrices that BLAS reads where they lie: a Tucker mode product
``ijql,kq->ijkl`` is ``i*j`` GEMMs ``(k,q) x (q,l)`` on views of A and D, with no copy at all.
:func:`view_gemms` lists every such mapping (batch labels, row, column and inner groups, with
their fused strides); a cost model chooses among them and TTGT.

Examples
--------
>>> from pytapp.datatypes import Datatype
>>> from pytapp.analysis.spec import build_spec
>>> F = Datatype.F64
>>> spec = build_spec(a=(F, (4, 5, 3, 6), (90, 18, 6, 1), "ijql", 0),
...                   b=(F, (7, 3), (3, 1), "kq", 0),
...                   c=(F, (4, 5, 7, 6), (210, 42, 6, 1), "ijkl", 0),
...                   d=(F, (4, 5, 7, 6), (210, 42, 6, 1), "ijkl", 0), prec=-1)
>>> best = min(view_gemms(spec), key=lambda g: g.calls)
>>> best.batch, best.calls, (best.m, best.n, best.k), best.swap
(('i', 'j'), 20, (6, 7, 3), True)
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from math import prod

from pytapp.analysis.cost import MachineModel, ttgt_seconds, view_gemm_seconds
from pytapp.analysis.labels import LabelClasses
from pytapp.analysis.layout import fusable
from pytapp.analysis.spec import ContractionSpec, OperandSpec

__all__ = ["REDUCE_CALL_ELEMENTS", "REDUCE_TEMP_SHARE", "SUMMED_MIN_FLOPS", "SUMMED_MIN_MADDS",
           "MatrixView", "ViewGemm", "reducing_view_gemm", "summed_view_gemm", "view_gemms"]

Label = Hashable
#: A group of labels fused in place: their order, and each operand's fused stride.
Fused = tuple[tuple[Label, ...], list[int]]
#: Most free (and, separately, summed) labels moved into the loop.
MAX_LOOPED = 3
#: Fewest flops of a product run as GEMMs looped over summed labels (the summed-GEMM kernel,
#: called by the blas plan): below, the compiled executor's packed TTGT costs less than that
#: plan's call (klcd,klad->ac at o=8, v=32, 4.2 Mflop: 75 us summed against 0.66 ms packed;
#: at o=6, v=24, 1 Mflop: 28 us against 32, two cores).
SUMMED_MIN_FLOPS = 1 << 21
#: ... and fewest multiply-adds of each of those GEMMs.
SUMMED_MIN_MADDS = 1 << 13


@dataclass(frozen=True)
class MatrixView:
    """One operand as ``(*batch, rows, cols)``: extents and element strides."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]


@dataclass(frozen=True)
class ViewGemm:
    """``calls`` GEMMs ``(m x k) (k x n)`` on views; ``swap``: each computes ``D^T = B^T A^T``.

    ``a``, ``b`` and ``d`` describe the operands (over their merged modes) as batched
    matrices: A ``(*batch, m, k)``, B ``(*batch, k, n)``, D ``(*batch, m, n)``; a batch label
    absent from an operand has stride 0 there. The first ``reduced`` batch labels are summed
    labels (D's stride 0): their GEMMs go into a temporary, then summed into D.
    """

    batch: tuple[Label, ...]
    rows: tuple[Label, ...]
    cols: tuple[Label, ...]
    inner: tuple[Label, ...]
    calls: int
    m: int
    n: int
    k: int
    swap: bool
    a: MatrixView
    b: MatrixView
    d: MatrixView
    reduced: int = 0


def _strides(op: OperandSpec) -> dict[Label, int]:
    return dict(zip(op.modes.labels, op.modes.strides, strict=True))


def _fuse(labels: Sequence[Label], ext: dict[Label, int],
          ops: Sequence[dict[Label, int]]) -> Fused | None:
    """Return an order of ``labels`` that every operand fuses in place.

    The order is outermost first and comes with each operand's fused stride; ``None`` when
    there is none. Empty groups fuse trivially.
    """
    if not labels:
        return (), [0] * len(ops)
    for by in ops:
        order = sorted(labels, key=lambda x: -abs(by[x]))
        extents = [ext[x] for x in order]
        if all(fusable(extents, [s[x] for x in order]) for s in ops):
            inner = [x for x in order if ext[x] > 1] or order
            return tuple(order), [s[inner[-1]] for s in ops]
    return None


def _blas(rows: int, cols: int, s_rows: int, s_cols: int) -> bool:
    """Whether BLAS reads a ``rows x cols`` matrix with these element strides in place."""
    if rows <= 1 or cols <= 1:
        return True
    return (s_cols == 1 and s_rows >= cols) or (s_rows == 1 and s_cols >= rows)


def view_gemms(spec: ContractionSpec) -> list[ViewGemm]:
    """Return the mappings of ``spec`` onto GEMMs on views that BLAS reads and writes in place.

    Only plain contractions qualify: contracted labels, no isolated or broadcast labels.
    Only the mappings that loop over the fewest free labels are listed: looping over one more
    label only splits the same GEMMs into more, smaller calls. When the contracted labels do
    not fuse, every set of at most :data:`MAX_LOOPED` of them that leaves the others fusing
    is looped over too, as ``reduced`` batch labels (``kbcd,kd->bc``: 12 GEMVs
    ``(bc x d) (d)``, summed after; ``klcd,klad->ac``: 144 GEMMs ``(a x d) (d x c)`` over
    ``k, l``, where looping over ``d`` alone leaves dot products): the cost model chooses.
    The blas backend and the compiled executor's lowering both ask, so the answer is
    remembered per spec.
    """
    return list(_view_gemms(spec))


@functools.lru_cache(maxsize=256)
def _view_gemms(spec: ContractionSpec) -> tuple[ViewGemm, ...]:
    cls = spec.classes
    if not cls.P or cls.IA or cls.IB or cls.IC:
        return ()
    ext = {x: spec.extent(x) for x in (*cls.H, *cls.FA, *cls.FB, *cls.P)}
    sa, sb, sd = _strides(spec.a), _strides(spec.b), _strides(spec.d)
    free = [x for x in (*cls.FA, *cls.FB) if ext[x] > 1]
    summed = [x for x in cls.P if ext[x] > 1]
    found: list[ViewGemm] = []
    for size in range(min(MAX_LOOPED, len(summed)) + 1):
        for reduced in itertools.combinations(summed, size):
            kept = [x for x in cls.P if x not in reduced]
            inner = _fuse(kept, ext, [sa, sb])  # the same whatever free label is looped over
            if inner is not None:
                found += _free_loops(cls, ext, free, (sa, sb, sd), reduced, (tuple(kept), inner))
        if found and size == 0:
            return tuple(found)  # nothing summed afterwards: these are the ones
    return tuple(found)


def _free_loops(cls: LabelClasses, ext: dict[Label, int], free: list[Label],
                strides: tuple[dict[Label, int], ...], reduced: tuple[Label, ...],
                inner_fused: tuple[tuple[Label, ...], Fused]) -> tuple[ViewGemm, ...]:
    """Return the mappings looping over the fewest free labels, with ``reduced`` summed loops."""
    sa, sb, sd = strides
    kept, inner = inner_fused
    found: list[ViewGemm] = []
    for size in range(min(MAX_LOOPED, len(free)) + 1):
        if found:
            break
        for looped in itertools.combinations(free, size):
            fa = [x for x in cls.FA if x not in looped]
            fb = [x for x in cls.FB if x not in looped]
            rows = _fuse(fa, ext, [sa, sd])
            cols = _fuse(fb, ext, [sb, sd]) if rows is not None else None
            if rows is None or cols is None:
                continue
            m, n, k = (prod(ext[x] for x in g) for g in (fa, fb, kept))
            (ra, rd), (cb, cd), (ka, kb) = rows[1], cols[1], inner[1]
            if not (_blas(m, k, ra, ka) and _blas(k, n, kb, cb) and _blas(m, n, rd, cd)):
                continue
            swap = not (n <= 1 or cd == 1)  # D column-major per GEMM: compute D^T = B^T A^T
            batch = (*reduced, *cls.H, *looped)
            bshape = tuple(ext[x] for x in batch)
            found.append(ViewGemm(
                batch=batch, rows=rows[0], cols=cols[0], inner=inner[0],
                calls=prod(bshape), m=m, n=n, k=k, swap=swap,
                a=MatrixView((*bshape, m, k), (*(sa.get(x, 0) for x in batch), ra, ka)),
                b=MatrixView((*bshape, k, n), (*(sb.get(x, 0) for x in batch), kb, cb)),
                d=MatrixView((*bshape, m, n), (*(sd.get(x, 0) for x in batch), rd, cd)),
                reduced=len(reduced),
            ))
    return tuple(found)


#: A GEMV-like product runs as GEMVs on views (summed labels looped) when each call reads at
#: least this many elements (NumPy's per-call cost stays small against the stream) ...
REDUCE_CALL_ELEMENTS = 1024
#: ... and the temporary of partial results is at most this share of the larger operand.
REDUCE_TEMP_SHARE = 0.125


def reducing_view_gemm(spec: ContractionSpec) -> ViewGemm | None:
    """Return the GEMVs on views of a GEMV-like product whose summed labels do not fuse.

    ``kbcd,kd->bc`` (o=12, v=48) is 12 GEMVs ``(bc x d) (d)`` into a 12 x 2304 temporary,
    summed into D: 0.28 ms, where the multiply-reduce pass takes 0.62 ms (BLAS's GEMV
    streams the operand at the copy rate). Taken when each call reads at least
    :data:`REDUCE_CALL_ELEMENTS` elements and the temporary is at most
    :data:`REDUCE_TEMP_SHARE` of the larger operand; ``None`` otherwise.
    """
    big = max(spec.a.size, spec.b.size)
    out = prod(spec.extent(x) for x in spec.d.modes.labels)
    fit = [g for g in view_gemms(spec)
           if g.reduced and max(g.m, g.n) * g.k >= REDUCE_CALL_ELEMENTS
           and out * prod(g.d.shape[:g.reduced]) <= REDUCE_TEMP_SHARE * big]
    return min(fit, key=lambda g: (g.calls, prod(g.d.shape[:g.reduced])), default=None)


@functools.lru_cache(maxsize=256)
def summed_view_gemm(spec: ContractionSpec) -> ViewGemm | None:
    """Return the mapping to run as GEMMs looped over summed labels, or ``None``.

    The product's contracted labels do not fuse in place (no mapping without summed loops),
    A and B are not conjugated (BLAS reads them as they are), the product has at least
    :data:`SUMMED_MIN_FLOPS` and each GEMM at least :data:`SUMMED_MIN_MADDS`: then its GEMMs,
    accumulated into D by the summed-GEMM kernel on every core, read A and B where they lie
    where TTGT would copy both (``klcd,klad->ac`` at o=12, v=48: 144 GEMMs of 48^3 in 0.35 ms
    against 1.35 ms packed, two cores). The blas plan and the compiled executor's lowering
    both ask it: one decision for both. The cost model chooses among
    the mappings, and against TTGT with the copies it cannot avoid (``ijab,kjcb->ikac`` at
    16 x 32: 8192 GEMMs of 16 x 16 x 32 against one of 256 x 256 x 1024: TTGT).

    Examples
    --------
    >>> from pytapp.datatypes import Datatype
    >>> from pytapp.analysis.spec import build_spec
    >>> F, o, v = Datatype.F64, 12, 48
    >>> op = (F, (o, o, v, v), (o * v * v, v * v, v, 1))
    >>> spec = build_spec(a=(*op, "klcd", 0), b=(*op, "klad", 0),
    ...                   c=(F, (v, v), (v, 1), "ac", 0), d=(F, (v, v), (v, 1), "ac", 0), prec=-1)
    >>> g = summed_view_gemm(spec)
    >>> g.batch[:g.reduced], g.calls, (g.m, g.n, g.k)
    (('k', 'l'), 144, (48, 48, 48))
    """
    if spec.flops < SUMMED_MIN_FLOPS or spec.a.conjugates or spec.b.conjugates:
        return None
    found = view_gemms(spec)
    if any(not g.reduced for g in found):
        return None
    model, cplx = MachineModel(), spec.rule.is_complex
    fit = [g for g in found if g.m * g.n * g.k >= SUMMED_MIN_MADDS]
    best = min(fit, default=None,
               key=lambda g: view_gemm_seconds(g.m, g.n, g.k, g.calls, model, cplx))
    if best is None:
        return None
    # TTGT copies at least the operands whose contracted labels do not fuse in place
    cls, item = spec.classes, spec.rule.real.itemsize * (2 if cplx else 1)
    ext = {x: spec.extent(x) for x in cls.P}
    copied = sum(op.size * item for op in (spec.a, spec.b)
                 if _fuse(list(cls.P), ext, [_strides(op)]) is None)
    ttgt = ttgt_seconds(spec.size(cls.FA), spec.size(cls.FB), spec.size(cls.P),
                        spec.size(cls.H), copied, 0, model, cplx)
    summed = view_gemm_seconds(best.m, best.n, best.k, best.calls, model, cplx)
    return best if summed < ttgt else None
