"""Scratch memory kept warm between products: the copies and temporaries of a route.

NumPy takes an allocation of megabytes from the operating system as pages nobody has touched,
and the first write to each page faults. A product whose route copies an operand into a fresh
array pays that on every call: on this project's machine the 2 MiB copy of an operand of a PEPS
contraction step took 1.4-2.1 ms into fresh memory and 0.27-0.43 ms into memory written before,
and the whole step 4.7 ms where its GEMM takes 1.2 ms.

A backend opens a :func:`lease` around one execution and takes its temporaries from it
(:func:`empty`); when the lease closes they go back to a process-wide pool that keeps up to
:data:`KEEP_BYTES` of free buffers for the next product. Small temporaries (under
:data:`MIN_BYTES`) and temporaries taken outside a lease are plain ``np.empty`` arrays. Nothing
taken from a lease may outlive it: results that reach the caller are never scratch.

Examples
--------
>>> import numpy as np
>>> with lease():
...     t = empty((512, 512), np.float64)
...     t.fill(1.0)
...     float(t.sum())
262144.0
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from math import prod
from typing import Any

import numpy as np

__all__ = ["KEEP_BYTES", "MIN_BYTES", "Lease", "empty", "lease", "pool_bytes"]

#: Free scratch the process keeps between products (``PYTAPP_SCRATCH_BYTES``, read at import;
#: 0 keeps none). The compiled executor keeps its own large blocks (TTGT's packs and
#: temporary) within the same budget (``pytapp.kernels.program.release_scratch``).
KEEP_BYTES = int(os.environ.get("PYTAPP_SCRATCH_BYTES", str(64 << 20)))
#: Temporaries smaller than this come from ``np.empty`` (the allocator keeps those warm).
MIN_BYTES = 1 << 16
_ALIGN = 64


class _Pool:
    """Free buffers (raw, 64-byte aligned bytes), handed to one lease at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[np.ndarray] = []
        self.free_bytes = 0

    def take(self, nbytes: int) -> np.ndarray:
        """Return a free buffer of at least ``nbytes`` (and at most twice that), or a new one."""
        with self._lock:
            best = -1
            for i, raw in enumerate(self._free):
                if nbytes <= raw.nbytes <= 2 * nbytes and (
                        best < 0 or raw.nbytes < self._free[best].nbytes):
                    best = i
            if best >= 0:
                raw = self._free.pop(best)
                self.free_bytes -= raw.nbytes
                return raw
        block = np.empty(nbytes + _ALIGN, dtype=np.uint8)
        start = -block.ctypes.data % _ALIGN
        return block[start:start + nbytes]

    def give(self, raw: np.ndarray) -> None:
        """Keep ``raw`` for a later lease, dropping the oldest buffers beyond the budget."""
        if raw.nbytes > KEEP_BYTES:
            return
        with self._lock:
            self._free.append(raw)
            self.free_bytes += raw.nbytes
            while self.free_bytes > KEEP_BYTES:
                self.free_bytes -= self._free.pop(0).nbytes


_pool = _Pool()


class Lease:
    """The scratch buffers one execution took; they return to the pool on :meth:`close`."""

    __slots__ = ("_raws",)

    def __init__(self) -> None:
        self._raws: list[np.ndarray] = []

    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """Return an uninitialised C-order array of ``shape`` and ``dtype`` held by this lease."""
        dt = np.dtype(dtype)
        nbytes = prod(shape) * dt.itemsize
        if nbytes < MIN_BYTES:
            return np.empty(shape, dtype=dt)
        raw = _pool.take(nbytes)
        self._raws.append(raw)
        out: np.ndarray = raw[:nbytes].view(dt).reshape(shape)
        return out

    def close(self) -> None:
        """Give every buffer back (the arrays taken must not be used afterwards)."""
        raws, self._raws = self._raws, []
        for raw in raws:
            _pool.give(raw)


_current: ContextVar[Lease | None] = ContextVar("pytapp_scratch_lease", default=None)


@contextmanager
def lease() -> Iterator[Lease]:
    """Open a lease for the calls inside the block (nested blocks share the outermost)."""
    held = _current.get()
    if held is not None:
        yield held
        return
    fresh = Lease()
    token = _current.set(fresh)
    try:
        yield fresh
    finally:
        _current.reset(token)
        fresh.close()


def empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """``np.empty(shape, dtype)``, from the open lease's scratch when there is one."""
    held = _current.get()
    if held is None:
        return np.empty(shape, dtype=dtype)
    return held.empty(tuple(shape), dtype)


def pool_bytes() -> int:
    """Bytes of free scratch the pool holds now."""
    return _pool.free_bytes
