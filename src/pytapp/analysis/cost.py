"""Operation counts of a product, for Status, benchmarks and backend choice."""

from __future__ import annotations

from collections.abc import Iterable
from math import prod

__all__ = ["flop_count"]


def flop_count(distinct_extents: Iterable[int], is_complex: bool = False) -> int:
    """Floating-point operations: 2 per multiply-add over all distinct labels.

    A complex multiply-add counts as 8 real operations.

    Examples
    --------
    >>> flop_count([10, 20, 30])
    12000
    """
    n = prod(int(e) for e in distinct_extents)
    return (8 if is_complex else 2) * n
