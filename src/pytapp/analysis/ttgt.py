"""Plan-time layout decisions for GEMM-based backends (TTGT): pure, from the spec alone.

A product is mapped onto ``(H..., m, k) x (H..., k, n)`` matrices: Hadamard labels are batch
axes, free labels of A (of B) fuse into m (n), contracted labels into k. The label orders are
chosen so that the larger operand, and D on ties, can be used in place; ``swap`` computes
``D^T = B^T A^T`` when D's B-side labels lie inside its A-side ones.

Examples
--------
>>> from pytapp.datatypes import Datatype
>>> from pytapp.analysis.spec import build_spec
>>> F = Datatype.F64
>>> spec = build_spec(a=(F, (4, 3), (3, 1), "ik", 0), b=(F, (3, 5), (5, 1), "kj", 0),
...                   c=(F, (4, 5), (5, 1), "ij", 0), d=(F, (4, 5), (5, 1), "ij", 0), prec=-1)
>>> lay = gemm_layout(spec)
>>> lay.kind.value, lay.m, lay.n, lay.k, lay.swap
('gemm', 4, 5, 3, False)
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from enum import Enum
from math import prod

from pytapp.analysis.cost import Route
from pytapp.analysis.layout import order_by_stride
from pytapp.analysis.spec import ContractionSpec, OperandSpec

__all__ = ["GemmLayout", "Kind", "PlanProfile", "gemm_layout"]

Label = Hashable


class Kind(Enum):
    """How a product maps onto matrices."""

    #: Contracted labels and free labels on both sides (or one): a (batched) GEMM.
    GEMM = "gemm"
    #: No contracted label: Hadamard and outer products.
    ELEMENTWISE = "elementwise"
    #: Contracted labels but no free label: (batched) inner products.
    DOT = "dot"


@dataclass(frozen=True)
class GemmLayout:
    """Label orders, shapes and axis permutations of a product mapped onto GEMM.

    ``kind``: see :class:`Kind`. Operand axes are permuted
    by ``a_perm``/``b_perm`` after the isolated labels (``a_reduce``/``b_reduce``) are summed;
    D's axes by ``d_perm`` into ``d_target`` order followed by its broadcast labels.
    """

    kind: Kind
    h: tuple[Label, ...]
    fa: tuple[Label, ...]
    fb: tuple[Label, ...]
    p: tuple[Label, ...]
    h_shape: tuple[int, ...]
    m: int
    n: int
    k: int
    swap: bool
    first: tuple[Label, ...]
    second: tuple[Label, ...]
    d_target: tuple[Label, ...]
    d_perm: tuple[int, ...]
    ic: int
    result_shape: tuple[int, ...]
    a_reduce: tuple[int, ...]
    b_reduce: tuple[int, ...]
    a_perm: tuple[int, ...]
    b_perm: tuple[int, ...]


@dataclass
class PlanProfile:
    """What blas will do for a product, as the cost model of ``auto`` prices it.

    ``kind`` is the layout's (``None`` when unknown: every figure then takes its default);
    ``copy_bytes`` the operand bytes packed per execution; ``d_direct`` whether the product
    is written straight into D; ``route`` and ``view`` (m, n, k, calls of the GEMMs on
    views) when blas runs it without packing; ``tiles`` when its GEMMs run on the AMX tiles.
    """

    kind: Kind | None = None
    h: int = 1
    m: int = 1
    n: int = 1
    k: int = 1
    copy_bytes: int = 0
    d_direct: bool = True
    route: Route | None = None
    view: tuple[int, int, int, int] | None = None
    #: BF16 GEMMs on the AMX tiles (no copies, the epilogue fused).
    tiles: bool = False


def _larger(x: OperandSpec, y: OperandSpec) -> OperandSpec:
    return x if x.size >= y.size else y


def _order(labels: Sequence[Label], by: OperandSpec) -> tuple[Label, ...]:
    """``labels`` outermost first, as they lie in operand ``by``."""
    strides = dict(zip(by.modes.labels, by.modes.strides, strict=True))
    return tuple(order_by_stride(list(labels), [strides[x] for x in labels]))


def gemm_layout(spec: ContractionSpec) -> GemmLayout:
    """Decide label orders, kernel kind and permutations for ``spec``."""
    cls, a, b, d = spec.classes, spec.a, spec.b, spec.d
    h = _order(cls.H, d)
    fa = _order(cls.FA, _larger(d, a))  # ties: D, so that D can be written in place
    fb = _order(cls.FB, _larger(d, b))
    p = _order(cls.P, _larger(a, b))
    ext = spec.extent
    m, n, k = (prod(ext(x) for x in g) for g in (fa, fb, p))
    kind = Kind.ELEMENTWISE if not p else Kind.DOT if not fa and not fb else Kind.GEMM
    d_strides = dict(zip(d.modes.labels, d.modes.strides, strict=True))
    swap = bool(kind is Kind.GEMM and fa and fb and
                min(abs(d_strides[x]) for x in fa) < min(abs(d_strides[x]) for x in fb))
    first, second = (fb, fa) if swap else (fa, fb)
    d_target = (*h, *first, *second)
    a_rest = [x for x in a.modes.labels if x not in cls.IA]
    b_rest = [x for x in b.modes.labels if x not in cls.IB]
    return GemmLayout(
        kind=kind, h=h, fa=fa, fb=fb, p=p, h_shape=tuple(ext(x) for x in h), m=m, n=n, k=k,
        swap=swap, first=first, second=second, d_target=d_target,
        d_perm=tuple(d.modes.labels.index(x) for x in [*d_target, *cls.IC]),
        ic=len(cls.IC), result_shape=tuple(ext(x) for x in d_target),
        a_reduce=tuple(a.modes.labels.index(x) for x in cls.IA),
        b_reduce=tuple(b.modes.labels.index(x) for x in cls.IB),
        a_perm=tuple(a_rest.index(x) for x in (*h, *fa, *p)),
        b_perm=tuple(b_rest.index(x) for x in (*h, *p, *fb)),
    )
