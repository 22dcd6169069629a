"""Multi-threaded NumPy copies and elementwise products for the backends.

NumPy's copies, casts and ufuncs release the GIL, but each call runs on one core. Large
transpositions, datatype conversions and Hadamard/outer products are memory-bound and gain
from splitting them into slabs run on a small thread pool (created on first use, never on
import).

Examples
--------
>>> import numpy as np
>>> src = np.arange(24.0).reshape(2, 3, 4).transpose(2, 0, 1)
>>> dst = np.empty(src.shape)
>>> parallel_copyto(dst, src, threads=2, min_bytes=0)
>>> bool(np.array_equal(dst, src))
True
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from pytapp.kernels.pool import cores as default_threads
from pytapp.kernels.pool import executor as _executor
from pytapp.kernels.program import convert_copy, low_sum, pool_map, summed_gemm, tiled_copy

__all__ = ["default_threads", "parallel_convert", "parallel_copyto", "parallel_einsum",
           "parallel_map", "parallel_matmul", "parallel_multiply", "parallel_sum"]

#: Below this many bytes of output an operation runs on the calling thread.
MIN_BYTES = 1 << 22
#: Below this many bytes of input a sum runs on the calling thread (a 3.8 MB F64 sum over one
#: or two of three modes: 163-287 us on two threads against 227-409 on one; at 1 MB, one
#: thread was faster on two of three).
SUM_MIN_BYTES = 1 << 21

_lock = threading.Lock()


#: Fewest slabs per thread along the axis :func:`parallel_map` cuts, where it can choose.
SPLIT_SLABS = 4


def _split_axis(out: np.ndarray, parts: int) -> int:
    """Return the axis of ``out`` to cut into slabs.

    The outermost in its memory of those at least :data:`SPLIT_SLABS` slabs per thread long,
    else the longest. The longest alone could be the fastest one, cutting every run of a copy
    in two: a 9.6 MB BF16 copy in runs of 520 numbers (26 along the longest axis) took 5.2 ms
    on two threads that way, 2.5 on one, 1.3 cut along its outermost axis.
    """
    shape, strides = out.shape, out.strides
    long = [i for i in range(out.ndim) if shape[i] >= SPLIT_SLABS * parts]
    if long:
        return max(long, key=lambda i: (abs(strides[i]), -i))
    return max(range(out.ndim), key=lambda i: (shape[i], -i))


def _slabs(extent: int, parts: int) -> list[slice]:
    bounds = [extent * i // parts for i in range(parts + 1)]
    return [slice(lo, hi) for lo, hi in itertools.pairwise(bounds) if hi > lo]


def parallel_map(out: np.ndarray, inputs: tuple[np.ndarray, ...], threads: int | None,
                 min_bytes: int | None, work: Callable[..., Any]) -> None:
    """Run ``work(out_slab, *input_slabs)`` on slabs of ``out`` in parallel.

    Small outputs (under ``min_bytes``, default :data:`MIN_BYTES`) run on the calling thread.
    """
    n = threads or default_threads()
    limit = MIN_BYTES if min_bytes is None else min_bytes
    if n <= 1 or out.nbytes < limit or out.ndim == 0:
        work(out, *inputs)
        return
    axis = _split_axis(out, n)
    if out.shape[axis] < 2:
        work(out, *inputs)
        return

    def cut(x: np.ndarray, s: slice) -> np.ndarray:
        # Inputs broadcast against out: only axes of the same extent are cut.
        k = axis - (out.ndim - x.ndim)
        if k < 0 or x.shape[k] == 1:
            return x
        index = [slice(None)] * x.ndim
        index[k] = s
        return x[tuple(index)]

    tasks = []
    for s in _slabs(out.shape[axis], n):
        index = [slice(None)] * out.ndim
        index[axis] = s
        tasks.append((out[tuple(index)], *(cut(x, s) for x in inputs)))
    if not pool_map(lambda i: work(*tasks[i]), len(tasks)):  # the BLAS's threads, else ours
        list(_executor(n).map(lambda t: work(*t), tasks))


def _run_parts(work: Callable[[int], object], count: int, threads: int) -> None:
    """Run ``work(i)`` for ``i < count`` on the BLAS's threads, else on ours."""
    if not pool_map(work, count):
        list(_executor(threads).map(work, range(count)))


def parallel_sum(x: np.ndarray, axes: tuple[int, ...], dtype: Any,
                 threads: int | None = None, min_bytes: int | None = None) -> Any:
    """``np.sum(x, axis=axes, dtype=dtype)`` split across threads.

    A sum is memory-bound and one core streams about half of what two do (a 2000 x 2000 F64
    sum took 1.58 ms on one, 0.79 ms on two). The largest kept axis is cut into slabs, each
    summed into its part of the result; with no kept axis long enough, the largest summed one
    is, and the threads' partial sums are added (each one NumPy's pairwise sum). Small
    operands (under ``min_bytes``, default :data:`SUM_MIN_BYTES`) are summed on the calling
    thread. F16/BF16 operands summed in F32 go through the compiled pass
    (:func:`pytapp.kernels.program.low_sum`: a 24.6 MB BF16 operand summed over its innermost
    axis of 27 in 2.4 ms on two threads, 7.4 through NumPy's cast per number).

    Examples
    --------
    >>> x = np.arange(24.0).reshape(4, 6)
    >>> float(parallel_sum(x, (0, 1), np.float64, threads=2, min_bytes=0))
    276.0
    """
    n = threads or default_threads()
    limit = SUM_MIN_BYTES if min_bytes is None else min_bytes
    summed = _low_sum if x.dtype.itemsize == 2 and np.dtype(dtype) == np.float32 else np.sum
    if n <= 1 or x.nbytes < limit or not axes:
        return summed(x, axis=axes, dtype=dtype)
    kept = [i for i in range(x.ndim) if i not in axes]
    cut = max(kept, key=lambda i: x.shape[i], default=-1)
    if cut >= 0 and x.shape[cut] >= 2 * n:
        out = np.empty([x.shape[i] for i in kept], dtype=dtype)
        at = kept.index(cut)
        parts = _slabs(x.shape[cut], n)

        def keep(i: int) -> None:
            index = [slice(None)] * x.ndim
            index[cut] = parts[i]
            where = [slice(None)] * out.ndim
            where[at] = parts[i]
            summed(x[tuple(index)], axis=axes, dtype=dtype, out=out[tuple(where)])

        _run_parts(keep, len(parts), n)
        return out
    cut = max(axes, key=lambda i: x.shape[i])
    if x.shape[cut] < 2:
        return np.sum(x, axis=axes, dtype=dtype)
    parts = _slabs(x.shape[cut], n)
    sums: list[Any] = [None] * len(parts)

    def partial(i: int) -> None:
        index = [slice(None)] * x.ndim
        index[cut] = parts[i]
        sums[i] = summed(x[tuple(index)], axis=axes, dtype=dtype)

    _run_parts(partial, len(parts), n)
    total = sums[0]
    for part in sums[1:]:
        total = total + part
    return total


def _low_sum(x: np.ndarray, axis: tuple[int, ...], dtype: Any,
             out: np.ndarray | None = None) -> Any:
    """``np.sum(x, axis=axis, dtype=dtype, out=out)`` for F16/BF16 ``x`` summed in F32.

    The compiled pass (:func:`pytapp.kernels.program.low_sum`) where it applies, else NumPy's.
    """
    into = out if out is not None else np.empty(
        [e for i, e in enumerate(x.shape) if i not in axis], dtype=np.float32)
    if low_sum(np.expand_dims(into, axis), x, axis):
        return into
    return np.sum(x, axis=axis, dtype=dtype, out=out)


def parallel_einsum(out: np.ndarray, a: np.ndarray, a_sub: list[int], b: np.ndarray,
                    b_sub: list[int], out_sub: list[int], threads: int | None = None,
                    min_bytes: int | None = None) -> None:
    """``out[...] = np.einsum(a, a_sub, b, b_sub, out_sub)`` split across threads.

    NumPy's sum-of-products loop runs on one core; a memory-bound one (a GEMV-like sum, a
    row-wise dot) gains from a second (100000 rows of 8-element dots: 1.0 ms on one, 0.57 ms
    on two). The longest output label is cut into slabs, each computed by NumPy into a
    temporary and written into its part of ``out``. Operands of fewer than ``min_bytes``
    (default :data:`MIN_BYTES`) together run on the calling thread.

    Examples
    --------
    >>> x = np.arange(12.0).reshape(6, 2)
    >>> d = np.empty(6)
    >>> parallel_einsum(d, x, [0, 1], x, [0, 1], [0], threads=2, min_bytes=0)
    >>> d.tolist() == np.einsum("ij,ij->i", x, x).tolist()
    True
    """
    n = threads or default_threads()
    limit = MIN_BYTES if min_bytes is None else min_bytes
    cut = max(range(out.ndim), key=lambda i: out.shape[i], default=-1)
    if n <= 1 or a.nbytes + b.nbytes < limit or cut < 0 or out.shape[cut] < 2 * n:
        out[...] = np.einsum(a, a_sub, b, b_sub, out_sub)
        return
    label = out_sub[cut]
    parts = _slabs(out.shape[cut], n)

    def view(x: np.ndarray, sub: list[int], s: slice) -> np.ndarray:
        if label not in sub:
            return x
        index = [slice(None)] * x.ndim
        index[sub.index(label)] = s
        return x[tuple(index)]

    def part(i: int) -> None:
        s = parts[i]
        view(out, out_sub, s)[...] = np.einsum(view(a, a_sub, s), a_sub, view(b, b_sub, s),
                                               b_sub, out_sub)

    _run_parts(part, len(parts), n)


def _copy(dst: np.ndarray, src: np.ndarray) -> None:
    if dst.dtype != src.dtype:
        if not convert_copy(dst, src):  # between F32, F16 and BF16, compiled
            np.copyto(dst, src, casting="unsafe")
    elif not tiled_copy(dst, src):  # a permutation goes through cache tiles
        np.copyto(dst, src, casting="unsafe")


def parallel_copyto(dst: np.ndarray, src: np.ndarray, threads: int | None = None,
                    min_bytes: int | None = None) -> None:
    """``np.copyto(dst, src, casting='unsafe')`` split across threads (src may broadcast).

    Permutations go through the compiled tiled copy (:func:`pytapp.kernels.program.tiled_copy`)
    where it applies.
    """
    parallel_map(dst, (src,), threads, min_bytes, _copy)


def parallel_convert(dst: np.ndarray, x: np.ndarray, c: np.ndarray | None, alpha: float,
                     beta: float, threads: int | None = None) -> None:
    """``dst[...] = alpha * x + beta * c`` computed in F32, split across threads.

    ``x`` is F32 and broadcasts to ``dst`` (F16 or BF16); ``c`` (``None``: absent) has
    ``dst``'s shape, F32, F16 or BF16. One compiled pass where
    :func:`pytapp.kernels.program.convert_copy` applies, else NumPy's ufuncs in the same
    order (``alpha * x``, then ``beta * c`` added, rounded once to ``dst``'s datatype).

    Examples
    --------
    >>> import ml_dtypes
    >>> d = np.empty((3, 2), ml_dtypes.bfloat16)
    >>> parallel_convert(d, np.arange(6, dtype=np.float32).reshape(2, 3).T, None, 2.0, 0.0)
    >>> d.astype(float).tolist()
    [[0.0, 6.0], [2.0, 8.0], [4.0, 10.0]]
    """
    def work(out: np.ndarray, xs: np.ndarray, *cs: np.ndarray) -> None:
        c_slab = cs[0] if cs else None
        if convert_copy(out, xs, c_slab, alpha, beta):
            return
        total = xs * np.float32(alpha) if alpha != 1 else xs
        if c_slab is not None:
            total = np.multiply(c_slab, np.float32(beta), dtype=np.float32) + total
        np.copyto(out, total, casting="unsafe")

    x = np.broadcast_to(x, dst.shape)
    parallel_map(dst, (x,) if c is None else (x, c), threads, None, work)


#: Fewest elements of ``out`` for which :func:`_multiply` considers einsum's loop.
_EINSUM_MIN = 1 << 14


def _multiply(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """``np.multiply(a, b, out=out)``, by einsum's loop where an input repeats along a row.

    A row: out's fastest axis. There (an outer product, a row scaled by a column) the ufunc's
    strided loop ran at half the speed (2000 x 2000 F64 outer product 4.8 ms against 2.6;
    2000 x 2000 rows scaled, 4.6 against 3.9), and at its own speed elsewhere (a Hadamard
    product, 4.5 against 5.6 ms by einsum). Real datatypes only: einsum's complex loop is
    not vectorised (a 4M-element C64 outer product took 10.3 ms by einsum, 4.1 by multiply).
    """
    if out.size >= _EINSUM_MIN and a.dtype == b.dtype == out.dtype and out.dtype.kind != "c":
        inner = min(range(out.ndim), key=lambda i: (abs(out.strides[i]), -i))
        x, y = np.broadcast_to(a, out.shape), np.broadcast_to(b, out.shape)
        if out.shape[inner] > 1 and (x.strides[inner] == 0 or y.strides[inner] == 0):
            axes = list(range(out.ndim))
            np.einsum(x, axes, y, axes, axes, out=out)
            return
    np.multiply(a, b, out=out)


def parallel_multiply(a: np.ndarray, b: np.ndarray, out: np.ndarray,
                      threads: int | None = None, min_bytes: int | None = None) -> None:
    """``np.multiply(a, b, out=out)`` split across threads (a and b broadcast to out).

    Examples
    --------
    >>> x, y = np.arange(3.0), np.arange(4.0)
    >>> d = np.empty((3, 4))
    >>> parallel_multiply(x[:, None], y[None, :], d, threads=2, min_bytes=0)
    >>> bool((d == np.outer(x, y)).all())
    True
    """
    parallel_map(out, (a, b), threads, min_bytes, _multiply)


_controller: Any = None


def _blas_single_thread() -> Any:
    """Context limiting the BLAS pools to one thread (process-wide, while it lasts)."""
    global _controller
    with _lock:
        if _controller is None:
            from threadpoolctl import ThreadpoolController

            _controller = ThreadpoolController()
    return _controller.limit(limits=1, user_api="blas")


def parallel_matmul(left: np.ndarray, right: np.ndarray, out: np.ndarray,
                    threads: int | None = None) -> None:
    """Batched ``np.matmul(left, right, out=out)`` with the batch split across threads.

    NumPy runs a batch of GEMMs one after the other, each on every BLAS thread; for many
    small GEMMs it is faster to give each thread whole GEMMs with a single-threaded BLAS.
    The shares run on the BLAS's own pool (:func:`pytapp.kernels.program.summed_gemm`) where
    the extension and the BLAS allow it, else on this module's threads: OpenBLAS's idle
    threads busy-wait for a while after every call, so threads of our own compete with them
    (a batch of 48 GEMMs of 256x64x256 took 6.2 ms on the pool, 7.7 with NumPy's matmul, 10.6
    on our threads, on two cores).
    """
    n = threads or default_threads()
    if n <= 1 or out.ndim < 3 or out.shape[0] < 2:
        np.matmul(left, right, out=out)
        return
    batch = out.shape[:-2]  # on the BLAS's own threads where it can: they wait, spinning
    if summed_gemm(out, np.broadcast_to(left, (*batch, *left.shape[-2:])),
                   np.broadcast_to(right, (*batch, *right.shape[-2:])), 0, n):
        return

    def cut(x: np.ndarray, s: slice) -> np.ndarray:
        return x if x.ndim < out.ndim or x.shape[0] == 1 else x[s]

    slabs = _slabs(out.shape[0], n)
    with _blas_single_thread():
        list(_executor(n).map(lambda s: np.matmul(cut(left, s), cut(right, s), out=out[s]),
                              slabs))
