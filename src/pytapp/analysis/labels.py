"""Label analysis: normalisation, structural checks in the C reference's order, classes.

Label classes (SPEC section 1): H in A, B and D; P in A and B only; FA (FB) in D and A (B)
only; IA (IB) only in A (B), reduced before the product; IC only in D, a broadcast.

Examples
--------
>>> cls = classify(("a", "k", "h"), ("k", "b", "h"), ("h", "a", "b"))
>>> cls.H, cls.P, cls.FA, cls.FB
(('h',), ('k',), ('a',), ('b',))
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from pytapp.errors import ErrorCode, error_for

__all__ = [
    "LabelClasses",
    "Modes",
    "check_structure",
    "classify",
    "gemm_transposes",
    "merge_modes",
    "normalize_labels",
]

Label = Hashable


def normalize_labels(labels: Any, nmodes: int, operand: str) -> tuple[Label, ...]:
    """Turn user labels into a tuple with one hashable label per mode.

    A string gives one label per character; any other iterable one label per item.

    Raises
    ------
    InvalidDescriptorError
        Code 13 when the number of labels differs from the number of modes, or a label is
        not hashable.
    """
    try:
        items: tuple[Any, ...] = tuple(labels)
    except TypeError as exc:
        raise error_for(
            ErrorCode.NEGATIVE_NMODES,
            f"labels {labels!r} of {operand} are not a sequence; give a string with one "
            "character per mode, or a sequence of hashable labels",
        ) from exc
    if len(items) != nmodes:
        raise error_for(
            ErrorCode.NEGATIVE_NMODES,
            f"{operand} has {nmodes} modes but {len(items)} labels {items!r}; "
            "give exactly one label per mode",
        )
    for item in items:
        try:
            hash(item)
        except TypeError as exc:
            raise error_for(
                ErrorCode.NEGATIVE_NMODES,
                f"label {item!r} of {operand} is not hashable; use str, int or tuples",
            ) from exc
    return items


@dataclass(frozen=True)
class Modes:
    """An operand's modes after merging repeated labels (its diagonal view).

    ``labels`` are unique, in first-appearance order; a merged mode's stride is the sum of the
    strides of the modes that share its label (paper, note 6).
    """

    labels: tuple[Label, ...]
    extents: tuple[int, ...]
    strides: tuple[int, ...]


def merge_modes(
    labels: Sequence[Label], extents: Sequence[int], strides: Sequence[int]
) -> Modes:
    """Merge repeated labels by summing their strides (extents must already agree).

    Examples
    --------
    >>> merge_modes("aba", (3, 4, 3), (12, 3, 1))
    Modes(labels=('a', 'b'), extents=(3, 4), strides=(13, 3))
    """
    order: list[Label] = []
    ext: dict[Label, int] = {}
    stride: dict[Label, int] = {}
    for label, e, s in zip(labels, extents, strides, strict=True):
        if label in stride:
            stride[label] += int(s)
        else:
            order.append(label)
            ext[label] = int(e)
            stride[label] = int(s)
    return Modes(tuple(order), tuple(ext[x] for x in order), tuple(stride[x] for x in order))


def _check_against(
    label: Label,
    extent: int,
    other: Sequence[Label],
    other_ext: Sequence[int],
    code: ErrorCode,
    where: tuple[str, str],
    skip: int = -1,
) -> None:
    for j, (o, e) in enumerate(zip(other, other_ext, strict=True)):
        if j != skip and o == label and e != extent:
            raise error_for(
                code,
                f"label {label!r} has extent {extent} in {where[0]} but {e} in {where[1]} "
                f"(mode {j}); make the extents of label {label!r} equal",
            )


def _consistent(a: tuple[Sequence[Label], Sequence[int]], b: tuple[Sequence[Label], Sequence[int]],
                d: tuple[Sequence[Label], Sequence[int]], allow_broadcast: bool) -> bool:
    """Whether every label has one extent and D's labels are in A or B (one pass)."""
    seen: dict[Label, int] = {}
    for labels, extents in (a, b, d):
        for label, extent in zip(labels, extents, strict=True):
            if seen.setdefault(label, extent) != extent:
                return False
    if allow_broadcast:
        return True
    inputs = {*a[0], *b[0]}
    return all(label in inputs for label in d[0])


def check_structure(
    a: tuple[Sequence[Label], Sequence[int]],
    b: tuple[Sequence[Label], Sequence[int]],
    c: tuple[Sequence[Label], Sequence[int]],
    d: tuple[Sequence[Label], Sequence[int]],
    allow_broadcast: bool,
) -> None:
    """Run the label and extent checks in the C reference's order (SPEC section 5).

    (1) every label of D in A or B (4); (2) each mode of A against A (9), B (1), D (2);
    (3) each mode of B against B (10), A (1), D (3); (4) each mode of D against D (11),
    A (2), B (3); (5) C against D: count (5), per position label (6) and extent (7).
    Aliasing (8) is checked on layouts, afterwards.
    """
    (al, ae), (bl, be), (cl, ce), (dl, de) = a, b, c, d
    if _consistent(a, b, d, allow_broadcast) and tuple(cl) == tuple(dl) and (
            tuple(ce) == tuple(de)):
        return  # nothing to report: the ordered checks below only find which error comes first
    if not allow_broadcast:
        for label in dl:
            if label not in al and label not in bl:
                raise error_for(
                    ErrorCode.LABEL_NOT_IN_INPUTS,
                    f"label {label!r} of D is in neither A nor B; add it to A or B, remove it "
                    "from D, or set the plan attribute ALLOW_BROADCAST to replicate along it",
                )
    for i, (label, e) in enumerate(zip(al, ae, strict=True)):
        _check_against(label, e, al, ae, ErrorCode.REPEATED_EXTENT_A, ("A", "A"), skip=i)
        _check_against(label, e, bl, be, ErrorCode.EXTENT_MISMATCH_AB, ("A", "B"))
        _check_against(label, e, dl, de, ErrorCode.EXTENT_MISMATCH_AD, ("A", "D"))
    for i, (label, e) in enumerate(zip(bl, be, strict=True)):
        _check_against(label, e, bl, be, ErrorCode.REPEATED_EXTENT_B, ("B", "B"), skip=i)
        _check_against(label, e, al, ae, ErrorCode.EXTENT_MISMATCH_AB, ("B", "A"))
        _check_against(label, e, dl, de, ErrorCode.EXTENT_MISMATCH_BD, ("B", "D"))
    for i, (label, e) in enumerate(zip(dl, de, strict=True)):
        _check_against(label, e, dl, de, ErrorCode.REPEATED_EXTENT_D, ("D", "D"), skip=i)
        _check_against(label, e, al, ae, ErrorCode.EXTENT_MISMATCH_AD, ("D", "A"))
        _check_against(label, e, bl, be, ErrorCode.EXTENT_MISMATCH_BD, ("D", "B"))
    if len(cl) != len(dl):
        raise error_for(
            ErrorCode.C_D_NMODES,
            f"C has {len(cl)} modes but D has {len(dl)}; C must have D's structure",
        )
    for i, (lc, ld, ec, ed) in enumerate(zip(cl, dl, ce, de, strict=True)):
        if lc != ld:
            raise error_for(
                ErrorCode.C_D_LABELS,
                f"mode {i} of C has label {lc!r} but mode {i} of D has {ld!r}; "
                "give C the labels of D in the same order",
            )
        if ec != ed:
            raise error_for(
                ErrorCode.C_D_EXTENTS,
                f"mode {i} (label {lc!r}) has extent {ec} in C but {ed} in D; "
                "C must have D's extents",
            )


@dataclass(frozen=True)
class LabelClasses:
    """The seven disjoint label classes of a product, each in its canonical order.

    H, FA, FB and IC follow D's order; P and IA follow A's order; IB follows B's order.
    """

    H: tuple[Label, ...]
    P: tuple[Label, ...]
    FA: tuple[Label, ...]
    FB: tuple[Label, ...]
    IA: tuple[Label, ...]
    IB: tuple[Label, ...]
    IC: tuple[Label, ...]

    @property
    def case(self) -> int:
        """The paper's case number (1-5) that this product needs at least (without repeats)."""
        if self.IC:
            return 5
        if self.IA or self.IB:
            return 4
        return 2 if self.H else 1


def _unique(labels: Sequence[Label]) -> tuple[Label, ...]:
    return tuple(dict.fromkeys(labels))


def classify(a: Sequence[Label], b: Sequence[Label], d: Sequence[Label]) -> LabelClasses:
    """Split the labels of A, B and D into the classes H, P, FA, FB, IA, IB and IC.

    Examples
    --------
    >>> classify("abx", "bcy", "acz")
    LabelClasses(H=(), P=('b',), FA=('a',), FB=('c',), IA=('x',), IB=('y',), IC=('z',))
    """
    ua, ub, ud = _unique(a), _unique(b), _unique(d)
    sa, sb, sd = set(ua), set(ub), set(ud)
    return LabelClasses(
        H=tuple(x for x in ud if x in sa and x in sb),
        P=tuple(x for x in ua if x in sb and x not in sd),
        FA=tuple(x for x in ud if x in sa and x not in sb),
        FB=tuple(x for x in ud if x in sb and x not in sa),
        IA=tuple(x for x in ua if x not in sb and x not in sd),
        IB=tuple(x for x in ub if x not in sa and x not in sd),
        IC=tuple(x for x in ud if x not in sa and x not in sb),
    )


#: What :func:`gemm_transposes` counts for a left operand read transposed (summed labels
#: before free ones) and for a right one (free before summed). On OpenBLAS (F32 and F64,
#: 2-core Xeon), against the same GEMM on row-major operands: a transposed left cost 1-22%
#: more (most 4-12%), a transposed right 0-8% (once 28%), both 2-42%.
TRANSPOSED_LEFT, TRANSPOSED_RIGHT = 2, 1


def gemm_transposes(a: Sequence[Label], b: Sequence[Label], d: Sequence[Label]) -> int:
    """Count the operands the GEMM of ``a, b -> d`` reads transposed, each row-major in its order.

    The GEMM writes D row-major (D's first free label is the left operand's). The left
    operand is read as it lies when its free labels come before its summed ones, the right
    when its summed labels come before its free ones; otherwise the operand counts
    :data:`TRANSPOSED_LEFT` (left) or :data:`TRANSPOSED_RIGHT` (right). Products that sum
    nothing, or whose D has no free labels, count 0.

    Examples
    --------
    >>> gemm_transposes("ik", "kj", "ij"), gemm_transposes("ki", "kj", "ij")
    (0, 2)
    >>> gemm_transposes("ik", "jk", "ij"), gemm_transposes("ik", "kj", "ji")
    (1, 3)
    """
    cls = classify(a, b, d)
    free = [x for x in d if x not in cls.H and x not in cls.IC]
    if not cls.P or not free:
        return 0
    left, right = (a, b) if free[0] in cls.FA else (b, a)
    summed = set(cls.P)

    def summed_first(labels: Sequence[Label]) -> bool | None:
        order = [x in summed for x in labels if x in summed or (x in d and x not in cls.H)]
        return None if all(order) else order[0]

    count = 0
    if summed_first(left):
        count += TRANSPOSED_LEFT
    if summed_first(right) is False:
        count += TRANSPOSED_RIGHT
    return count
