"""Layout facts computed from extents and strides alone (in elements).

Examples
--------
>>> footprint((3, 4), (4, 1))
(0, 11)
>>> footprint((3, 4), (-4, 1))
(-8, 3)
>>> self_aliases((3, 4), (1, 1))
True
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

__all__ = ["footprint", "fusable", "order_by_stride", "self_aliases"]


def footprint(extents: Sequence[int], strides: Sequence[int]) -> tuple[int, int] | None:
    """Lowest and highest element offset a layout touches, relative to element [0, ..., 0].

    Returns ``None`` when the tensor is empty (some extent is 0): nothing is touched.
    """
    if any(e == 0 for e in extents):
        return None
    low = sum(min(0, (e - 1) * s) for e, s in zip(extents, strides, strict=True))
    high = sum(max(0, (e - 1) * s) for e, s in zip(extents, strides, strict=True))
    return low, high


def self_aliases(extents: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether two distinct index tuples may address the same element.

    Exact for the usual layouts: modes of extent > 1 are sorted by ``|stride|`` and each
    ``|stride|`` must be at least the span of the modes before it. Exotic interleaved layouts
    that do not alias may be reported as aliasing (SPEC section 2 allows this). Empty tensors
    and modes of extent 1 never alias.
    """
    if any(e == 0 for e in extents):
        return False
    modes = sorted(
        ((abs(s), e) for e, s in zip(extents, strides, strict=True) if e > 1),
        key=lambda m: m[0],
    )
    span = 1  # number of elements (in stride units) covered by the modes so far
    for stride, extent in modes:
        if stride < span:
            return True
        span = stride * (extent - 1) + span
    return False


def order_by_stride(labels: Sequence[object], strides: Sequence[int]) -> list[object]:
    """Labels sorted by decreasing ``|stride|`` (outermost first), ties in given order.

    Examples
    --------
    >>> order_by_stride("abc", (1, 12, 4))
    ['b', 'c', 'a']
    """
    keyed = sorted(range(len(labels)), key=lambda i: -abs(strides[i]))
    return [labels[i] for i in keyed]


def fusable(extents: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether modes (outermost first) can be viewed as one mode without copying.

    Modes of extent 1 never matter; each other mode's stride must equal the next non-trivial
    mode's stride times that mode's extent.

    Examples
    --------
    >>> fusable((2, 3, 4), (12, 4, 1)), fusable((2, 3), (1, 2))
    (True, False)
    """
    modes = [(e, s) for e, s in zip(extents, strides, strict=True) if e != 1]
    return all(s == s2 * e2 for (_, s), (e2, s2) in itertools.pairwise(modes))
