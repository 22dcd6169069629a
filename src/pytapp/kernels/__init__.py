"""pytapp's own compiled kernels (numba): arrays in, arrays out; no TAPP objects.

* :func:`fused` — ``out = op(alpha * op(x) * op(y) + beta * op(c))`` elementwise over any
  strided layouts: blocked permutation/copy (``y`` and ``c`` absent), the epilogue of a product
  (``x`` the product's result, ``c`` the addend), Hadamard and outer products (``x``, ``y``
  broadcast against ``out`` with zero strides), with scaling and conjugation fused in one pass.
* :func:`reduce` — ``out[m] = op(alpha * sum_k op(x[m, k]) * op(y[m, k]) + beta * op(c[m]))``:
  GEMV-like contractions, batched dot products and Case 4 reductions over strided modes,
  without copying the large operand.

Kernels are compiled lazily on first use (never at import) and cached on disk; one compiled
specialisation serves every layout and rank of a datatype. They accept operands of one datatype
among F32, F64, C32 and C64 (:func:`supports`); callers use NumPy for anything else.

Examples
--------
>>> import numpy as np
>>> x = np.arange(6.0).reshape(2, 3)
>>> out = np.empty((3, 2))
>>> if available():
...     fused(out, x.T, alpha=2.0)
... else:
...     out[...] = 2 * x.T
>>> out.tolist()
[[0.0, 6.0], [2.0, 8.0], [4.0, 10.0]]
"""

from __future__ import annotations

import importlib.util
import threading
from math import prod
from typing import Any

import numpy as np

from pytapp.kernels.layout import flat, merge_dims, order_dims
from pytapp.kernels.pool import cores, run_blocks

__all__ = ["aligned", "available", "copy", "epilogue", "fused", "reduce", "supports"]

#: Datatypes the kernels compute in (one per call).
DTYPES = frozenset(np.dtype(t) for t in ("float32", "float64", "complex64", "complex128"))
#: Below this many output elements (times summed elements) a kernel runs on one thread.
SERIAL_BELOW = 1 << 15
#: Below this many elements of work, :func:`fused` and :func:`reduce` compute with NumPy's
#: ufuncs: a compiled call's layout analysis and dispatch cost about 70 us, which pays for the
#: two extra passes NumPy makes only above ~20k elements (measured: F64, 2 cores).
SMALL_WORK = 1 << 14

_compiled: Any = None
_lock = threading.Lock()
_available = importlib.util.find_spec("numba") is not None


def available() -> bool:
    """Whether numba is installed (the kernels can run)."""
    return _available


def supports(*arrays: np.ndarray | None) -> bool:
    """Whether the kernels can run on these operands (one supported datatype, numba present)."""
    dtypes = {a.dtype for a in arrays if a is not None}
    return _available and len(dtypes) == 1 and dtypes <= DTYPES


def _kernels() -> Any:
    global _compiled
    if _compiled is None:
        with _lock:
            if _compiled is None:
                from pytapp.kernels import compiled

                _compiled = compiled
    return _compiled


def _threads(work: int, threads: int | None) -> int:
    if work < SERIAL_BELOW:
        return 1
    return threads if threads is not None else cores()


def _operand(a: np.ndarray | None, shape: tuple[int, ...], dtype: np.dtype[Any],
             writable: bool = False) -> tuple[np.ndarray, int, tuple[int, ...]]:
    if a is None:
        buf, off, st = np.zeros(1, dtype=dtype), 0, (0,) * len(shape)
    else:
        view = np.broadcast_to(a, shape) if a.shape != shape else a
        buf, off, st = flat(view)
    if not writable and buf.flags.writeable:
        buf = buf.view()
        buf.flags.writeable = False  # one compiled type for every input, read-only
    return buf, off, st


def _mode(y: Any, c: Any, conj_x: bool, conj_y: bool, conj_c: bool, conj_out: bool,
          complex_: bool) -> int:
    k = _kernels()
    mode = (k.HAS_Y if y is not None else 0) | (k.HAS_C if c is not None else 0)
    if complex_:
        mode |= ((k.CONJ_X if conj_x else 0) | (k.CONJ_Y if conj_y else 0)
                 | (k.CONJ_C if conj_c else 0) | (k.CONJ_OUT if conj_out else 0))
    return mode


def fused(out: np.ndarray, x: np.ndarray, y: np.ndarray | None = None,
          c: np.ndarray | None = None, *, alpha: Any = 1, beta: Any = 0,
          conj_x: bool = False, conj_y: bool = False, conj_c: bool = False,
          conj_out: bool = False, threads: int | None = None) -> None:
    """``out = op(alpha op(x) op(y) + beta op(c))``; inputs broadcast against ``out``.

    Every operand has ``out``'s datatype (:func:`supports`); ``out`` must not overlap the
    inputs unless it is the same view (in-place accumulation ``c is out``).
    """
    shape = out.shape
    if out.size == 0:
        return
    if y is None and c is None and alpha == 1 and not conj_out and x is not out and (
            x.shape == shape and x.dtype == out.dtype and out.size >= SMALL_COPY
            and _inner_run(out, x) >= NUMPY_RUN):  # a plain copy with long runs: NumPy slabs
        copy(out, x, conj=conj_x, threads=threads)
        return
    if x is out and y is None and not conj_x and out.size < SMALL_WORK:  # a small epilogue
        epilogue(out, out, c, alpha, beta, conj_c, conj_out)
        return
    if out.size < SMALL_WORK:
        _fused_small(out, x, y, c, alpha, beta, conj_x, conj_y, conj_c, conj_out)
        return
    dtype = out.dtype
    ops = [flat(out)] + [_operand(a, shape, dtype) for a in (x, y, c)]
    order = order_dims(shape, ops[0][2])
    ext, st = merge_dims(shape, [o[2] for o in ops], order)
    if not ext:  # a single element
        ext, st = [1], [[0] for _ in ops]
    ext, st = _split_inner(ext, st)
    tdim = 0
    for s in st[1:]:  # an input not contiguous along the output's fastest dimension: tile
        fastest = min(range(len(ext)), key=lambda d: (abs(s[d]) if s[d] else 1 << 62, d))
        if fastest != 0 and s[fastest] != 0 and abs(s[0]) != 1:
            tdim = fastest
            break
    if tdim == 0 and len(ext) > 1 and ext[0] < SHORT_RUN:
        tdim = 1  # a short innermost dimension: blocks of two dimensions amortise the loop setup
    k = _kernels()
    (ob, oo, _), (xb, xo, _), (yb, yo, _), (cb, co, _) = ops
    arr = [np.asarray(s_, dtype=np.int64) for s_ in st]
    shape_arr = np.asarray(ext, dtype=np.int64)
    args = (ob, oo, arr[0], xb, xo, arr[1], yb, yo, arr[2], cb, co, arr[3], shape_arr, tdim,
            dtype.type(alpha), dtype.type(beta),
            _mode(y, c, conj_x, conj_y, conj_c, conj_out, dtype.kind == "c"))
    run_blocks(lambda lo, hi: k.fused_elementwise(*args, lo, hi),
               k.elementwise_blocks(shape_arr, tdim), _threads(out.size, threads))


#: An innermost dimension shorter than this is blocked together with the next one.
SHORT_RUN = 32
#: Elements of the innermost dimension per block when a kernel would otherwise see too few
#: blocks to share among threads (a power of two: it divides most extents).
INNER_BLOCK = 1 << 14


def _split_inner(ext: list[int], st: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """Cut a long innermost dimension into blocks of :data:`INNER_BLOCK`.

    The blocks become an extra, outer dimension, when the outer dimensions give fewer blocks
    than a few per core: contiguous operands merge into one dimension, which would otherwise
    run on one thread.
    """
    n0, outer = ext[0], prod(ext[1:])
    chunk = INNER_BLOCK
    while chunk > 1024 and n0 % chunk:
        chunk //= 2
    if outer >= 4 * cores() or n0 < 2 * chunk or n0 % chunk:
        return ext, st
    return [chunk, n0 // chunk, *ext[1:]], [[s[0], s[0] * chunk, *s[1:]] for s in st]


#: Largest output :func:`reduce` accumulates while streaming x (per thread; in cache).
STREAM_MAX_OUT = 1 << 15


def _stream_reduce(out: np.ndarray, x: np.ndarray, y: np.ndarray | None, c: np.ndarray | None,
                   alpha: Any, beta: Any, conj_x: bool, conj_y: bool, conj_c: bool,
                   conj_out: bool, threads: int | None) -> None:
    """:func:`reduce` walking x in its memory order.

    Every thread adds its share of the outermost dimension into a dense accumulator of ``out``'s
    shape, then one epilogue.
    """
    full, dtype = x.shape, out.dtype
    xb, xo, xst = flat(x)
    yb, yo, yst = _operand(y, full, dtype)
    dense = [0] * len(full)
    step = 1
    for d in reversed(range(out.ndim)):
        dense[d] = step
        step *= out.shape[d]
    ext, st = merge_dims(full, [dense, xst, yst], order_dims(full, xst))
    while len(ext) < 3:  # the kernel's two inner loops and an outermost one
        ext.append(1)
        for s_ in st:
            s_.append(0)
    n = max(1, min(_threads(x.size, threads), ext[-1]))
    accs = np.zeros((n, max(out.size, 1)), dtype=dtype)
    k = _kernels()
    arr = [np.asarray(s_, dtype=np.int64) for s_ in st]
    shape_arr = np.asarray(ext, dtype=np.int64)
    mode = _mode(y, None, conj_x, conj_y, False, False, dtype.kind == "c")
    bounds = [ext[-1] * t // n for t in range(n + 1)]

    def work(lo: int, hi: int) -> None:
        for t in range(lo, hi):
            k.stream_accumulate(accs[t], arr[0], xb, xo, arr[1], yb, yo, arr[2], shape_arr,
                                mode, bounds[t], bounds[t + 1])

    run_blocks(work, n, n, min_blocks=1)
    total = accs.sum(axis=0) if n > 1 else accs[0]
    epilogue(out, total.reshape(out.shape), c, alpha, beta, conj_c, conj_out)


def _op(x: np.ndarray, conj: bool) -> np.ndarray:
    return np.conjugate(x) if conj and x.dtype.kind == "c" else x


def epilogue(out: np.ndarray, t: np.ndarray, c: np.ndarray | None, alpha: Any,
             beta: Any, conj_c: bool, conj_out: bool, scaled: bool = False) -> None:
    """``out = op(alpha t + beta op(c))`` with NumPy's ufuncs, for small operands.

    ``t`` (``out``'s shape) is a temporary that is overwritten, or ``out`` itself; ``c`` may
    be ``out`` too (it is read before anything is written). ``scaled``: alpha is already
    applied to ``t``.
    """
    dtype = out.dtype.type
    term = None if c is None else np.multiply(np.conjugate(c) if conj_c else c, dtype(beta))
    if not scaled and alpha != 1:
        np.multiply(t, dtype(alpha), out=t)
    if term is not None:
        np.add(t, term, out=t)
    if conj_out and out.dtype.kind == "c":
        np.conjugate(t, out=t)
    if t is not out:
        np.copyto(out, t)


def _fused_small(out: np.ndarray, x: np.ndarray, y: np.ndarray | None, c: np.ndarray | None,
                 alpha: Any, beta: Any, conj_x: bool, conj_y: bool, conj_c: bool,
                 conj_out: bool) -> None:
    """:func:`fused` for a few elements.

    NumPy ufuncs into a temporary (or ``out`` itself when it is ``x``, the in-place epilogue),
    so overlapping views stay correct.
    """
    dtype = out.dtype.type
    second = dtype(alpha) if y is None else _op(y, conj_y)
    t = np.multiply(_op(x, conj_x), second, dtype=out.dtype)
    if not isinstance(t, np.ndarray) or t.shape != out.shape:  # a 0-d result, or broadcast
        t = np.array(np.broadcast_to(t, out.shape), dtype=out.dtype)
    if y is not None and alpha != 1:
        np.multiply(t, dtype(alpha), out=t)
    epilogue(out, t, c, alpha, beta, conj_c, conj_out, scaled=True)


def _reduce_small(out: np.ndarray, x: np.ndarray, y: np.ndarray | None, c: np.ndarray | None,
                  alpha: Any, beta: Any, conj_x: bool, conj_y: bool, conj_c: bool,
                  conj_out: bool) -> None:
    """:func:`reduce` for a few elements: one NumPy product and sum into a temporary."""
    t = _op(x, conj_x)
    if y is not None:
        t = np.multiply(t, _op(y, conj_y), dtype=out.dtype)
    s = np.sum(t, axis=tuple(range(out.ndim, x.ndim)), dtype=out.dtype)
    s = np.array(s, dtype=out.dtype, ndmin=out.ndim)
    epilogue(out, s, c, alpha, beta, conj_c, conj_out)


#: Below this many elements a copy is NumPy's, on the calling thread: its loop starts in a
#: microsecond, where a compiled kernel's layout analysis and dispatch, or handing slabs to
#: other threads, cost tens (measured: 100k-element copies, 2 cores).
SMALL_COPY = 1 << 17


def _copy_slabs(out: np.ndarray, x: np.ndarray, conj: bool, threads: int) -> None:
    """NumPy copies of slabs along the outermost mode, one range of slabs per thread."""
    def work(lo: int, hi: int) -> None:
        if conj:
            np.conjugate(x[lo:hi], out=out[lo:hi], casting="unsafe")
        else:
            np.copyto(out[lo:hi], x[lo:hi], casting="unsafe")

    run_blocks(work, out.shape[0], threads, min_blocks=1)


#: NumPy copies slabs on the pool's threads only when ``out`` and ``x`` step through this many
#: elements together in their fastest dimension: NumPy's strided copy pays per inner run, so a
#: permutation that keeps only a short mode contiguous (4 or 6 elements) can run at a fraction
#: of the compiled kernel's speed (once measured: 5 MB F32 with a 6-element run, 4.7 ms against
#: 1 ms). From 16 elements on, the slabs were faster on every permutation measured on a 2-core
#: Xeon with NumPy 2.4 (F32 and F64, 1-15 MB): 12x48x12x48 swapping its middle modes (48-element
#: runs), 0.23 ms against 0.51 ms; 50x50x50x16, 0.76 against 0.89; at 2-element runs the kernel
#: won (5.0 against 5.7 ms).
NUMPY_RUN = 16


def _inner_run(out: np.ndarray, x: np.ndarray) -> int:
    """Elements that ``out`` and ``x`` both hold contiguously in ``out``'s fastest order."""
    item_o, item_x = out.itemsize, x.itemsize
    st = [[s // item_o for s in out.strides], [s // item_x for s in x.strides]]
    ext, merged = merge_dims(out.shape, st, order_dims(out.shape, st[0]))
    if not ext or any(abs(m[0]) != 1 for m in merged):
        return 1
    return ext[0]


def aligned(x: np.ndarray) -> np.ndarray:
    """Return ``x`` when its elements are aligned, else an aligned copy.

    ``x`` itself when its elements are aligned, else an aligned copy made at memory speed
    (as bytes: NumPy's element copy of misaligned data is several times slower).
    """
    if x.flags.aligned:
        return x
    fortran = x.flags.f_contiguous and not x.flags.c_contiguous
    out = np.empty(x.shape, dtype=x.dtype, order="F" if fortran else "C")
    if x.flags.c_contiguous or fortran:
        src, dst = (x.T, out.T) if fortran else (x, out)  # C-contiguous views of both
        dst.reshape(-1).view(np.uint8)[...] = src.reshape(-1).view(np.uint8)
    else:
        np.copyto(out, x)
    return out


def copy(out: np.ndarray, x: np.ndarray, *, conj: bool = False,
         threads: int | None = None) -> None:
    """``out[...] = op(x)`` (``conj``: complex conjugate) for any layouts, cast to ``out``'s dtype.

    Small operands: NumPy. Copies that keep the output's fastest mode contiguous in ``x``:
    NumPy slabs over the outermost mode, on the pool's threads. True transposes of large
    operands: the blocked compiled kernel.
    """
    conj = conj and x.dtype.kind == "c"
    n = _threads(out.size, threads)
    # Small copies: NumPy's per-call cost is lower than the kernel's dispatch.
    if out.size < SMALL_COPY or out.ndim == 0 or (n == 1 and not supports(out, x)):
        if out.ndim:
            _copy_slabs(out, x, conj, 1)
        else:  # a 0-d operand (a scalar factor): conjugated too
            np.copyto(out, np.conjugate(x) if conj else x, casting="unsafe")
        return
    # Long contiguous runs: NumPy's inner loop is as fast as ours, so split the outermost
    # mode into slabs for the threads. Short runs (true transposes) need the blocked kernel.
    if _inner_run(out, x) >= NUMPY_RUN or not supports(out, x):
        outer = max(range(out.ndim), key=lambda d: (abs(out.strides[d]), -d))
        order = [outer] + [d for d in range(out.ndim) if d != outer]
        _copy_slabs(out.transpose(order), x.transpose(order), conj, n)
        return
    fused(out, x, conj_x=conj, threads=threads)


def reduce(out: np.ndarray, x: np.ndarray, y: np.ndarray | None = None,
           c: np.ndarray | None = None, *, alpha: Any = 1, beta: Any = 0,
           conj_x: bool = False, conj_y: bool = False, conj_c: bool = False,
           conj_out: bool = False, threads: int | None = None) -> None:
    """``out[m] = op(alpha sum_k op(x[m, k]) op(y[m, k]) + beta op(c[m]))``.

    ``x`` and ``y`` have shape ``out.shape + summed extents`` (``y`` broadcast against it,
    zero strides where it does not vary); ``c`` has ``out``'s shape. At least one summed
    dimension; every operand has ``out``'s datatype.
    """
    keep = out.ndim
    full = x.shape
    if out.size == 0:
        return
    if x.size < SMALL_WORK:
        _reduce_small(out, x, y, c, alpha, beta, conj_x, conj_y, conj_c, conj_out)
        return
    dtype = out.dtype
    o_buf, o_off, o_st = flat(out)
    ops = [(o_buf, o_off, o_st + (0,) * (len(full) - keep))]
    ops += [_operand(a, full, dtype) for a in (x, y)]
    cb, co, cst = _operand(c, out.shape, dtype)
    ops.append((cb, co, cst + (0,) * (len(full) - keep)))
    kept = order_dims(full[:keep], o_st)
    x_st = ops[1][2]
    summed = sorted((d for d in range(keep, len(full)) if full[d] > 1),
                    key=lambda d: (abs(x_st[d]), d))
    ek, sk = merge_dims(full, [o[2] for o in ops], kept)
    es, ss = merge_dims(full, [o[2] for o in ops], summed)
    if not ek:
        ek, sk = [1], [[0] for _ in ops]
    if not es:
        es, ss = [1], [[0] for _ in ops]
    ext = ek + es
    st = [a + b for a, b in zip(sk, ss, strict=True)]
    # The innermost loop runs over whichever dimension x steps through fastest: over kept
    # dimensions (one dot product per output row, vectorised across rows) or summed ones.
    inner_keep = abs(st[1][0]) <= abs(st[1][len(ek)]) and ek[0] > 1
    if (ek[0] if inner_keep else es[0]) < SHORT_RUN and out.size <= STREAM_MAX_OUT:
        # Short inner loops: stream x in its own memory order into small accumulators.
        _stream_reduce(out, x, y, c, alpha, beta, conj_x, conj_y, conj_c, conj_out, threads)
        return
    k = _kernels()
    arr = [np.asarray(s_, dtype=np.int64) for s_ in st]
    (ob, oo, _), (xb, xo, _), (yb, yo, _), (cb2, co2, _) = ops
    args = (ob, oo, arr[0], xb, xo, arr[1], yb, yo, arr[2], cb2, co2, arr[3],
            np.asarray(ext, dtype=np.int64), len(ek), inner_keep, dtype.type(alpha),
            dtype.type(beta), _mode(y, c, conj_x, conj_y, conj_c, conj_out, dtype.kind == "c"),
            dtype.type(0))
    # Threads split the output rows: each output element is written by exactly one thread.
    rows = prod(ek[1:]) if inner_keep else prod(ek)
    run_blocks(lambda lo, hi: k.fused_reduce(*args, lo, hi), rows, _threads(x.size, threads))
