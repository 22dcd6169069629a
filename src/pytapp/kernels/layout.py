"""Descriptor-driven loop layouts for the compiled kernels (pure Python, no numba).

A kernel sees every operand as a flat 1-D buffer, the element offset of element [0, ..., 0]
inside it and one stride per loop dimension (0 where the operand does not vary). This module
builds those views from NumPy arrays and orders, merges and blocks the loop dimensions so that
the kernels stay rank-generic: any number of modes, any strides (negative and zero included).

Examples
--------
>>> import numpy as np
>>> x = np.arange(24.0).reshape(2, 3, 4)
>>> buf, off, st = flat(x.transpose(2, 0, 1)[::-1])
>>> int(buf.size), off, st
(24, 3, (-1, 12, 4))
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["flat", "merge_dims", "order_dims"]


def flat(x: np.ndarray) -> tuple[np.ndarray, int, tuple[int, ...]]:
    """(1-D buffer over the elements ``x`` may touch, offset of element 0, element strides).

    The buffer is a view of ``x``'s memory from its lowest to its highest addressed element;
    nothing is copied.
    """
    item = x.itemsize
    strides = tuple(s // item for s in x.strides)
    if x.size == 0:
        return np.empty(0, dtype=x.dtype), 0, strides
    if x.ndim == 0:
        return x.reshape(1), 0, ()
    pairs = list(zip(x.shape, strides, strict=True))
    low = sum((e - 1) * s for e, s in pairs if s < 0)
    high = sum((e - 1) * s for e, s in pairs if s > 0)
    corner = x[tuple(slice(e - 1, e) if s < 0 else slice(0, 1) for e, s in pairs)]
    buf = np.lib.stride_tricks.as_strided(
        corner, shape=(high - low + 1,), strides=(item,), writeable=x.flags.writeable)
    return buf, -low, strides


def order_dims(shape: Sequence[int], lead: Sequence[int]) -> list[int]:
    """Dimensions of extent > 1, fastest first by ``|lead|`` (the output's strides)."""
    dims = [d for d in range(len(shape)) if shape[d] > 1]
    return sorted(dims, key=lambda d: (abs(lead[d]), d))


def merge_dims(
    shape: Sequence[int], strides: Sequence[Sequence[int]], order: Sequence[int]
) -> tuple[list[int], list[list[int]]]:
    """Merge neighbouring dimensions that every operand steps through together.

    Dimensions are taken in ``order``, fastest first; two merge when, for every operand, the
    slower one's stride is the faster one's times its extent.

    Returns the merged extents and, per operand, the merged strides (fastest first).
    """
    ext: list[int] = []
    st: list[list[int]] = [[] for _ in strides]
    for d in order:
        if ext and all(s[d] == prev[-1] * ext[-1] for s, prev in zip(strides, st, strict=True)):
            ext[-1] *= shape[d]
            continue
        ext.append(int(shape[d]))
        for s, out in zip(strides, st, strict=True):
            out.append(int(s[d]))
    return ext, st
