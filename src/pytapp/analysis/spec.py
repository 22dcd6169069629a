"""The ContractionSpec: everything a backend needs to know about a product, structurally.

A spec is pure data (ints, tuples, enums), hashable, and built once per plan. Backends consume
it together with bound operand views and never re-parse labels or re-validate.

Examples
--------
>>> from pytapp.datatypes import Datatype
>>> from pytapp.precision import Prectype
>>> F = Datatype.F64
>>> spec = build_spec(
...     a=(F, (2, 3), (3, 1), "ik", 0), b=(F, (3, 4), (4, 1), "kj", 0),
...     c=(F, (2, 4), (4, 1), "ij", 0), d=(F, (2, 4), (4, 1), "ij", 0),
...     prec=Prectype.DEFAULT)
>>> spec.classes.P, spec.flops
(('k',), 48)
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from math import prod
from typing import Any, NamedTuple

from pytapp.analysis.cost import flop_count
from pytapp.analysis.labels import LabelClasses, Modes, check_structure, classify, merge_modes
from pytapp.analysis.layout import footprint, self_aliases
from pytapp.analysis.letters import einsum_text, words
from pytapp.datatypes import Datatype, ElementOp, as_element_op
from pytapp.errors import ErrorCode, error_for
from pytapp.precision import ComputeRule, Prectype, as_prectype, compute_rule

__all__ = ["ContractionSpec", "LayoutTraits", "OperandInput", "OperandSpec", "build_spec"]

Label = Hashable
#: (datatype, extents, strides, labels, op) of one operand, as given to :func:`build_spec`.
OperandInput = tuple[Datatype, Sequence[int], Sequence[int], Sequence[Label], Any]


@dataclass(frozen=True)
class OperandSpec:
    """One operand of a product: descriptor, labels, op, and its merged (diagonal) modes."""

    role: str
    datatype: Datatype
    op: ElementOp
    labels: tuple[Label, ...]
    extents: tuple[int, ...]
    strides: tuple[int, ...]
    modes: Modes
    footprint: tuple[int, int] | None

    @property
    def conjugate(self) -> bool:
        """Whether the op conjugates (only meaningful for complex data)."""
        return self.op is ElementOp.CONJUGATE

    @property
    def conjugates(self) -> bool:
        """Whether the op changes values: conjugation of complex data (a no-op on real data)."""
        return self.op is ElementOp.CONJUGATE and self.datatype.is_complex

    @property
    def size(self) -> int:
        """Number of distinct elements addressed (product of merged extents)."""
        return prod(self.modes.extents)


class LayoutTraits(NamedTuple):
    """What a product's operands need of a backend: checked once per spec, not per backend."""

    most_modes: int  # merged modes of the operand with the most
    repeated: bool  # some operand repeats a label (a diagonal)
    negative: bool  # some stride is negative
    zero: bool  # some mode of extent above 1 has stride 0


@dataclass(frozen=True)
class ContractionSpec:
    """Pure, hashable description of ``D := op_D(alpha op_A(A) op_B(B) + beta op_C(C))``."""

    a: OperandSpec
    b: OperandSpec
    c: OperandSpec
    d: OperandSpec
    prec: Prectype
    rule: ComputeRule
    classes: LabelClasses
    allow_broadcast: bool
    label_extents: tuple[tuple[Label, int], ...]
    flops: int
    _extent_map: dict[Label, int] = field(init=False, repr=False, compare=False, hash=False)
    _hash: list[int] = field(init=False, repr=False, compare=False, hash=False)
    _traits: list[LayoutTraits] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_extent_map", dict(self.label_extents))
        object.__setattr__(self, "_hash", [])
        object.__setattr__(self, "_traits", [])

    @property
    def traits(self) -> LayoutTraits:
        """Return what backends' capabilities ask of the operands' layouts, computed once."""
        known = self._traits
        if not known:
            ops = self.operands
            known.append(LayoutTraits(
                most_modes=max(len(op.modes.labels) for op in ops),
                repeated=any(len(op.modes.labels) != len(op.labels) for op in ops),
                negative=any(s < 0 for op in ops for s in op.strides),
                zero=any(s == 0 and e > 1 for op in ops
                         for s, e in zip(op.strides, op.extents, strict=True))))
        return known[0]

    def __hash__(self) -> int:
        """Return the fields' hash, computed once (plans look specs up in several caches)."""
        known = self._hash
        if not known:
            known.append(hash((self.a, self.b, self.c, self.d, self.prec, self.rule,
                               self.classes, self.allow_broadcast, self.label_extents,
                               self.flops)))
        return known[0]

    def extent(self, label: Label) -> int:
        """Extent of ``label`` (every occurrence agrees: the plan checked it)."""
        return self._extent_map[label]

    def size(self, labels: Sequence[Label]) -> int:
        """Product of the extents of ``labels``."""
        return prod(self._extent_map[x] for x in labels)

    @property
    def empty_sum(self) -> bool:
        """Whether a contracted or isolated label has extent 0: the product term is +0."""
        return 0 in (self.extent(x) for x in self.classes.P + self.classes.IA + self.classes.IB)

    @property
    def native_low(self) -> Datatype | None:
        """Return the 16-bit type a library's native GEMM in it computes this product in, or None.

        Products of two F16 (BF16) numbers are exact in F32: a native low-precision GEMM that
        sums them in F32 and rounds once to its storage type computes this product exactly up
        to that final rounding when A and B are both stored in it, the computation is real with
        F32 sums, inputs are rounded to it or not at all, no isolated label is summed first
        (those sums would be rounded) and D is stored in it. The rounding is then the final
        one only for calls with alpha 1 and no C (the caller's check).

        Examples
        --------
        >>> from pytapp.precision import Prectype
        >>> H = Datatype.BF16
        >>> spec = build_spec(
        ...     a=(H, (2, 3), (3, 1), "ik", 0), b=(H, (3, 4), (4, 1), "kj", 0),
        ...     c=(H, (2, 4), (4, 1), "ij", 0), d=(H, (2, 4), (4, 1), "ij", 0),
        ...     prec=Prectype.DEFAULT)
        >>> spec.native_low is H
        True
        """
        storage, rule = self.a.datatype, self.rule
        if (storage in (Datatype.F16, Datatype.BF16) and self.b.datatype is storage
                and self.d.datatype is storage and not rule.is_complex
                and rule.real is Datatype.F32 and rule.input_round in (None, storage)
                and not (self.classes.IA or self.classes.IB)):
            return storage
        return None

    @property
    def operands(self) -> tuple[OperandSpec, OperandSpec, OperandSpec, OperandSpec]:
        """(A, B, C, D)."""
        return (self.a, self.b, self.c, self.d)

    @property
    def datatypes(self) -> tuple[Datatype, Datatype, Datatype, Datatype]:
        """Datatypes of (A, B, C, D)."""
        return (self.a.datatype, self.b.datatype, self.c.datatype, self.d.datatype)

    def einsum(self) -> str:
        """Return an einsum-like rendering, e.g. ``'ik,kj->ij'`` (letters for other labels)."""
        return einsum_text((self.a.labels, self.b.labels), self.d.labels)

    def einsum_words(self, what: str, d_labels: Sequence[Label] | None = None
                     ) -> tuple[str, str, str]:
        """Return einsum letters for the merged labels of A, B and D.

        Letters for the merged (unique) labels of A, B and D (or ``d_labels``), for
        ``what`` (a backend that speaks einsum).

        Raises
        ------
        UnsupportedError
            Code 18 when the product has more than 52 distinct labels.
        """
        d = self.d.modes.labels if d_labels is None else d_labels
        wa, wb, wd = words((self.a.modes.labels, self.b.modes.labels, d),
                           f"backend {what!r}")
        return wa, wb, wd


def _operand(role: str, item: OperandInput) -> OperandSpec:
    datatype, extents, strides, labels, op = item
    ext = tuple(int(e) for e in extents)
    st = tuple(int(s) for s in strides)
    labs = tuple(labels)
    return OperandSpec(
        role=role,
        datatype=datatype,
        op=as_element_op(op, role),
        labels=labs,
        extents=ext,
        strides=st,
        modes=merge_modes(labs, ext, st),
        footprint=footprint(ext, st),
    )


def build_spec(
    a: OperandInput,
    b: OperandInput,
    c: OperandInput,
    d: OperandInput,
    prec: Any,
    allow_broadcast: bool = False,
) -> ContractionSpec:
    """Validate a product's structure and build its :class:`ContractionSpec`.

    Checks run in SPEC section 5's order so that error codes equal the C reference's:
    precision (16), element ops (17), labels and extents (4, 9, 1, 2, 10, 3, 11, 5, 6, 7),
    then D aliasing (8).

    Parameters
    ----------
    a, b, c, d
        ``(datatype, extents, strides, labels, op)`` per operand; datatypes already valid.
    prec
        A :class:`Prectype` or its integer value.
    allow_broadcast
        Accept labels of D that are in neither A nor B (Case 5).

    Raises
    ------
    TappError
        With the codes listed above.
    """
    prectype = as_prectype(prec)
    for role, item in zip("ABCD", (a, b, c, d), strict=True):
        as_element_op(item[4], role)  # op errors (17) come before structural ones
    check_structure(
        (a[3], a[1]), (b[3], b[1]), (c[3], c[1]), (d[3], d[1]), allow_broadcast
    )
    sa, sb, sc, sd = (_operand(r, x) for r, x in zip("ABCD", (a, b, c, d), strict=True))
    if self_aliases(sd.modes.extents, sd.modes.strides):
        raise error_for(
            ErrorCode.D_ALIASING,
            f"D with extents {sd.extents} and strides {sd.strides} (labels {sd.labels}) "
            "addresses some element twice; give D a layout where each element is distinct "
            "(for example row-major strides)",
        )
    classes = classify(sa.labels, sb.labels, sd.labels)
    extents: dict[Label, int] = {}
    for spec in (sa, sb, sd):
        extents.update(zip(spec.modes.labels, spec.modes.extents, strict=True))
    rule = compute_rule(prectype, (sa.datatype, sb.datatype, sc.datatype, sd.datatype))
    return ContractionSpec(
        a=sa,
        b=sb,
        c=sc,
        d=sd,
        prec=prectype,
        rule=rule,
        classes=classes,
        allow_broadcast=bool(allow_broadcast),
        label_extents=tuple(extents.items()),
        flops=flop_count(extents.values(), rule.is_complex),
    )
