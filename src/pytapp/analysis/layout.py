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

from collections.abc import Sequence

__all__ = ["footprint", "self_aliases"]


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
