"""Compile lowered products into programs of the compiled executor (``pytapp._cexec``).

The executor calls the CBLAS GEMM of the BLAS library NumPy itself loaded (found once, on
first use): one library and one thread pool serve NumPy, the executor and the thread settings
of :func:`pytapp.executor.thread_scope`. Without that library (NumPy built against another
BLAS) programs use loop nests only; without the compiled extension there are no programs and
every product runs on its backend's Python plan.

Examples
--------
>>> import numpy as np
>>> from pytapp.datatypes import Datatype
>>> from pytapp.analysis.spec import build_spec
>>> from pytapp.status import Status
>>> F = Datatype.F64
>>> spec = build_spec(a=(F, (2, 3), (3, 1), "ik", 0), b=(F, (3, 2), (2, 1), "kj", 0),
...                   c=(F, (2, 2), (2, 1), "ij", 0), d=(F, (2, 2), (2, 1), "ij", 0), prec=-1)
>>> prog = compile_product(spec, Status(backend="blas"))
>>> a, b, d = np.ones((2, 3)), np.ones((3, 2)), np.zeros((2, 2))
>>> status = prog(1.0, a, b, 0.0, None, d) if prog is not None else None
>>> d.tolist() if prog is not None else [[3.0, 3.0], [3.0, 3.0]]
[[3.0, 3.0], [3.0, 3.0]]
"""

from __future__ import annotations

import ctypes
import glob
import importlib
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from math import prod
from typing import Any, Literal

import ml_dtypes
import numpy as np

from pytapp import machine, scratch
from pytapp.analysis.program import RELEASE_GIL_FLOPS, Lowered, Step, alternative, lower
from pytapp.analysis.spec import ContractionSpec
from pytapp.errors import ErrorCode, error_for
from pytapp.operands import same_layout

__all__ = ["STEPS", "available", "bf16_gemm", "bf16_tiles", "bf16_vectors", "blas_available",
           "compile_alternative", "compile_chain", "compile_lowered", "compile_product",
           "convert_copy", "layout_key", "packed_gemm", "pool_map", "release_scratch",
           "step_profile", "summed_gemm", "summed_gemm_available", "tile_count", "tiled_copy",
           "use_tiles"]

_cexec: Any
try:  # by name: the package root is a higher layer than the kernels
    _cexec = importlib.import_module("pytapp._cexec")
except ImportError:  # a source tree used without building: the Python plans run everything
    _cexec = None

if _cexec is not None:
    # one budget for warm scratch: the Python plans' pool and the executor's kept blocks
    _cexec.set_keep_bytes(scratch.KEEP_BYTES)
    _cexec.set_bfloat16(np.dtype(ml_dtypes.bfloat16).num)  # the type convert_copy converts
    # An input whose chain of bases ends in a buffer exporter is bounded by that buffer, except
    # for ctypes objects (one laid over a pointer has no known allocation): pytapp.allocation
    # follows their chains in Python.
    _cexec.set_untrusted((ctypes.Array, ctypes.Structure, ctypes.Union, ctypes._Pointer,
                          ctypes._SimpleCData))


def _layout_key(head: tuple[Any, ...], operands: tuple[Any, ...],
                first: int) -> tuple[Any, ...] | None:
    layouts = []
    for x in operands[first:]:
        if type(x) is not np.ndarray:
            return None
        layouts.append((x.shape, x.strides, x.dtype.str, x.flags.aligned))
    return (*head, tuple(layouts))


#: ``layout_key(head, operands, first)``: the cache key of a call on NumPy arrays, ``head``
#: (the call's other arguments) followed by the exact layouts (shape, strides, datatype,
#: alignment) of ``operands[first:]``; ``None`` unless each of them is exactly an ndarray.
#: The compiled extension's, else the same in Python (keys of one process come from one).
#:
#: >>> a = np.ones((2, 3))
#: >>> layout_key(("ij->ji",), ("ij->ji", a), 1) == layout_key(("ij->ji",), ("ij->ji", a), 1)
#: True
#: >>> layout_key(("ij->ji",), ("ij->ji", a), 1) == layout_key(("ij->ji",), ("ij->ji", a.T), 1)
#: False
#: >>> layout_key((), ([1.0],), 0) is None
#: True
layout_key: Callable[[tuple[Any, ...], tuple[Any, ...], int], tuple[Any, ...] | None] = (
    _layout_key if _cexec is None else _cexec.layout_key)


def tiled_copy(dst: np.ndarray, src: Any) -> bool:
    """Copy ``src`` into ``dst`` through cache tiles when their fastest axes differ.

    A permuted copy through NumPy's loop reads (or writes) one element per cache line in its
    inner loop; the compiled copy moves 16 x 16 element tiles, each reading and writing whole
    lines: a 16x16x16x16x12 F64 operand copied to (q, a, rsi) order took 0.57 ms against
    NumPy's 0.82 (a plain memcpy: 0.22), a 1024 x 1024 transpose 2.7x faster. Where both
    sides run along the same axis for under 512 bytes, the copy goes run by run in ``dst``'s
    order instead (NumPy's loop pays a call per run: 1.1-1.8x its speed on runs of 2-64
    numbers; a BF16 operand in runs of 11, 15.9 -> 10.6 ms). Returns ``False``, having
    written nothing, when the copy is not one of those between aligned, non-overlapping arrays
    of one 2-, 4- or 8-byte datatype, when a permutation's fastest axes are under 8 elements
    or NumPy's innermost run is under 256 elements (the source lines it touches are still in
    L1 on its next pass: the cc suite's 48-element runs went 2-13% slower through tiles), or
    when the extension is not built: the caller then copies.

    Examples
    --------
    >>> x = np.arange(12.0).reshape(3, 4)
    >>> y = np.empty((4, 3))
    >>> tiled_copy(y, x.T)  # extents under 8: NumPy's loop is as good
    False
    """
    if _cexec is None or type(src) is not np.ndarray or type(dst) is not np.ndarray:
        return False  # a scalar source broadcasts; subclasses keep NumPy's own handling
    if np.may_share_memory(dst, src):  # a permuted copy onto its source reads what it wrote
        return False
    done: bool = _cexec.tiled_copy(dst, src)
    return done


def convert_copy(dst: np.ndarray, x: Any, c: np.ndarray | None = None, alpha: float = 1.0,
                 beta: float = 0.0) -> bool:
    """``dst[...] = alpha * x + beta * c`` in F32 arithmetic, between F32, F16 and BF16 arrays.

    One pass, whatever the three layouts: rows along ``dst``'s fastest axis, through tiles
    where ``x``'s fastest axis is another (each source line then read once). NumPy converts
    F16 one element at a time (2-4 ns each: 4.9 ms for 2M elements here, against 0.2 ms with
    the CPU's F16C instructions), and a permuted F32 -> BF16 store of 4.3M numbers took 12.4
    ms through its casting loop on two threads, the BF16 C read before it 8.9 more. ``x`` and
    ``c`` (``None``: absent) have ``dst``'s shape, may repeat along axes (zero strides), and
    are F32, F16 or BF16, as ``dst`` is; not all three F32. Aligned, native byte order, not
    overlapping ``dst`` (``c`` may be ``dst`` itself); each number rounds to nearest even
    once, when stored, as NumPy's ``(alpha * x + beta * c).astype(dst.dtype)`` on F32
    values. Returns ``False``, having
    written nothing, when that does not hold, for a plain copy (:func:`tiled_copy`'s), where
    F16 is involved and the CPU lacks F16C, or the extension is not built.

    Examples
    --------
    >>> x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    >>> y = np.empty((4, 3), np.float16)
    >>> if convert_copy(y, x.T, alpha=2.0):
    ...     assert np.array_equal(y, (2 * x.T).astype(np.float16))
    """
    if _cexec is None or type(x) is not np.ndarray or type(dst) is not np.ndarray:
        return False
    if np.may_share_memory(dst, x) or (c is not None and np.may_share_memory(dst, c)
                                        and not same_layout(c, dst)):
        return False  # (C being D itself is read number by number before it is written)
    done: bool = _cexec.convert_copy(dst, x, c, float(alpha), float(beta))
    return done


def low_sum(out: np.ndarray, x: np.ndarray, axes: tuple[int, ...]) -> bool:
    """``out[...] = x.sum(axis=axes, keepdims=True)`` in F32, for F16, BF16 or F32 ``x``.

    One pass over ``x``, each run converted as it is read (rows of ``out`` added to where
    ``x`` runs along a kept axis, dots where it runs along a summed one): NumPy sums
    ml_dtypes' BFloat16 through a cast per number, 14.3 ms for a 24.6 MB operand summed over
    its innermost axis of 27 on one thread. ``out`` is F32, of ``x``'s shape with the summed
    axes of extent 1, any strides. F32 sums in running order (eight interleaved sums along a
    summed innermost axis). Returns ``False``, having written nothing, where that does not
    hold, where F16 is involved and the CPU lacks F16C, or the extension is not built.

    Examples
    --------
    >>> x = np.arange(24, dtype=np.float16).reshape(2, 3, 4)
    >>> out = np.empty((2, 1, 4), np.float32)
    >>> if low_sum(out, x, (1,)):
    ...     assert np.array_equal(out, x.astype(np.float32).sum(axis=1, keepdims=True))
    """
    if _cexec is None or type(x) is not np.ndarray or type(out) is not np.ndarray:
        return False
    if np.may_share_memory(out, x):
        return False
    done: bool = _cexec.low_sum(out, x, tuple(int(i) for i in axes))
    return done


#: What BF16 GEMMs run on, by ``_cexec.amx_ready``'s number.
_BF16_UNITS = ("", "avx512_bf16", "amx")


def bf16_tiles(on: bool | Literal["avx512_bf16"] | None = None) -> str:
    """Return what BF16 and F16 GEMMs run on: ``"amx"``, ``"avx512_bf16"`` or ``""`` (F32).

    The AMX tiles need an x86-64 CPU with AMX-BF16 (Intel Xeon since Sapphire Rapids), Linux,
    and the extension built by GCC 11+ or clang 13+; without them, AVX512-BF16 vectors
    (VDPBF16PS: AMD Zen 4, Intel Cooper Lake) run the same packed kernels at a fraction of the
    tiles' rate. ``on`` first allows both (``True``), only the vectors (``"avx512_bf16"``) or
    neither (``False``: BF16 products go back to the F32 GEMM), for comparisons and tests.

    Examples
    --------
    >>> bf16_tiles() in ("amx", "avx512_bf16", "")
    True
    """
    if _cexec is None:
        return ""
    if on is not None:
        level = 1 if on == "avx512_bf16" else 2 if on is True else 0 if on is False else -1
        if level < 0:
            raise error_for(ErrorCode.UNSUPPORTED,
                            f"bf16_tiles takes True, False or 'avx512_bf16', not {on!r}")
        return _BF16_UNITS[int(_cexec.set_amx(level))]
    return _BF16_UNITS[int(_cexec.amx_ready())]


def bf16_vectors() -> bool:
    """Whether BF16 GEMVs (one side of 1) run on AVX-512 vectors, reading A where it lies.

    They need AVX-512F and BW (no tiles); :func:`bf16_tiles` and :func:`use_tiles` switch them
    off and on with the tiles.

    Examples
    --------
    >>> isinstance(bf16_vectors(), bool)
    True
    """
    return _cexec is not None and bool(_cexec.amx_gemv_ready())


def bf16_gemm(a: np.ndarray, b: np.ndarray, d: np.ndarray, c: np.ndarray | None = None,
              alpha: float = 1.0, beta: float = 0.0) -> int | None:
    """``d[h] = alpha a[h] @ b[h] + beta c[h]`` for BF16 ``a`` and ``b`` on the AMX tiles.

    ``a`` (h, m, k) and ``b`` (h, k, n) hold BF16 numbers (or both F16: each number is split
    exactly into two BF16 ones, four tile products per multiply-add), ``d`` and ``c``
    (h, m, n) BF16, F16 or float32 ones; any strides. Products and sums are F32 (the tiles
    multiply BF16 pairs exactly and add in F32), the epilogue F32 too, rounded once into
    ``d``'s type: SPEC's DEFAULT, BF16BF16_ACCUM_F32 and F16F16_ACCUM_F32 precisions. A GEMV
    (one side of 1) runs on AVX-512 vectors instead (:func:`bf16_vectors`). Returns the bytes
    of the buffers it used; ``None`` when the tiles are not there, the arrays do not fit,
    ``a`` or ``b`` holds subnormal BF16 numbers (which the tiles read as zero) or F16
    infinities (whose split would make NaNs): ``d`` may then be partly written, so ``c`` must
    not be ``d`` then, and ``d`` must not overlap ``a`` or ``b`` (the caller checks both).

    Examples
    --------
    >>> import ml_dtypes
    >>> x = np.arange(6, dtype=ml_dtypes.bfloat16).reshape(1, 2, 3)
    >>> y = np.ones((1, 3, 2), ml_dtypes.bfloat16)
    >>> out = np.empty((1, 2, 2), np.float32)
    >>> if bf16_gemm(x, y, out) is not None:
    ...     assert out.tolist() == [[[3.0, 3.0], [12.0, 12.0]]]
    """
    if _cexec is None:
        return None

    def bits(x: np.ndarray) -> np.ndarray:
        return x.view(np.uint16) if x.dtype.name == "bfloat16" else x

    done: int | None = _cexec.amx_gemm(bits(a), bits(b), bits(d),
                                       None if c is None else bits(c), float(alpha), float(beta))
    return done


def packed_gemm(d: np.ndarray, src: np.ndarray, other: np.ndarray, rows: int, block: int,
                threads: int, summed_first: bool = False) -> bool:
    """``d[m, n] = pack(src)[m, k] @ other[k, n]``, packing ``src`` a block at a time.

    ``src``'s first ``rows`` axes are ``d``'s rows, the others the summed ones (with
    ``summed_first``, its last ``rows`` axes are the rows, and each block is packed as
    ``[k][rows]``: the order that reads ``src`` along its memory when its fastest axis is a
    row axis; the blocks are cut along the first row axis). Instead of
    copying all of ``src`` into a matrix as large as the operand before one GEMM, ``block``
    indices of its first axis are packed into a small buffer and multiplied while it is still
    in cache, each of ``threads`` threads doing a share of the blocks with a one-thread BLAS.
    Worth it when ``other`` is thin (BLAS reads it again for every block): a 48x48x48x12
    operand times a 12x48 one (``abcj,ic->abji``) took 1.0-1.5 ms this way on two cores,
    against 2.1-4.0 ms packed whole and multiplied by BLAS's own threads. ``d`` and ``other``
    must be matrices BLAS reads in place, all three of one datatype (F32, F64, C64, C128),
    ``d`` overlapping neither. Returns ``False``, having written nothing, when that does not
    hold or the extension or NumPy's CBLAS is missing: the caller packs the usual way.

    Examples
    --------
    >>> a = np.arange(24.0).reshape(2, 3, 4)
    >>> d = np.empty((8, 2))
    >>> if packed_gemm(d, a.transpose(0, 2, 1), np.ones((3, 2)), 2, 1, 2):
    ...     assert np.array_equal(d, np.einsum("ijk,jn->ikn", a, np.ones((3, 2))).reshape(8, 2))
    """
    if _cexec is None or not blas_available():
        return False
    done: bool = _cexec.packed_gemm(d, src, other, rows, block, threads, summed_first)
    return done


def summed_gemm(d: np.ndarray, left: np.ndarray, right: np.ndarray, summed: int,
                threads: int) -> bool:
    """``d[..., m, n] = sum over left's first summed axes of left[..., m, k] @ right[..., k, n]``.

    The GEMMs of a product that sums over labels looped around them (a GEMV-like
    ``kbcd,kd->bc`` is 12 GEMVs of 2304 x 48), accumulated in ``d``. ``left`` and ``right``
    have the same batch axes: the ``summed`` first ones, then those ``d`` has too (kept).
    Each of ``threads`` workers takes its share of ``d`` (kept batch elements, else rows) and
    runs all the GEMMs of that share with a one-thread BLAS, so the operands are read once
    and BLAS's pool is handed work once, not once per GEMM (with a temporary summed after):
    ``kbcd,kd->bc`` took 0.36 ms this way on two cores, against 0.62 ms. The matrices must be
    ones BLAS reads in place, all of one datatype (F32, F64, C64, C128), ``d`` overlapping
    neither operand. Returns ``False``, having written nothing, when that does not hold or
    the extension or NumPy's CBLAS is missing.

    Examples
    --------
    >>> x, y = np.ones((3, 4, 2)), np.ones((3, 2, 1))
    >>> d = np.empty((4, 1))
    >>> if summed_gemm(d, x, y, 1, 2):
    ...     assert np.array_equal(d, np.full((4, 1), 6.0))
    """
    if _cexec is None or not blas_available():
        return False
    done: bool = _cexec.summed_gemm(d, left, right, summed, threads)
    return done


def release_scratch() -> int:
    """Free the large scratch blocks the executor keeps between calls; return their bytes.

    TTGT's packs and temporary and a stream's buffers of 1 MiB or more stay allocated after a
    call (at most four blocks and :data:`pytapp.scratch.KEEP_BYTES`, the budget of the Python
    plans' pool too), so that the next call does not fault in and zero their pages again.
    :func:`pytapp.clear_plan_cache` calls this.

    Examples
    --------
    >>> release_scratch() >= 0
    True
    """
    return 0 if _cexec is None else int(_cexec.release_scratch())


def summed_gemm_available() -> bool:
    """Whether :func:`summed_gemm` can run here (the extension and NumPy's CBLAS)."""
    return _cexec is not None and blas_available()


def pool_map(work: Callable[[int], object], count: int) -> bool:
    """Run ``work(i)`` for ``i < count``: ``i = 0`` here, the others on the BLAS's own threads.

    OpenBLAS's idle threads busy-wait for a while after every call; threads of our own then
    compete with them for the cores, where work handed to them starts at once (a 10.6 MB
    permuted copy split in two: 0.65 ms on the BLAS's threads, 1.2 ms on ours, 1.0 ms on one
    thread). The BLAS runs on one thread per caller meanwhile. ``work`` must release the GIL
    for its heavy part (NumPy's copies and ufuncs, nogil kernels) for the calls to overlap.
    Returns ``False``, having called nothing, when there is no such pool (another BLAS, the
    extension not built, fewer BLAS threads than ``count``, or a call from inside such work):
    the caller then uses threads of its own. The first exception a call raised is raised once
    every call has returned.
    """
    if _cexec is None or count < 2 or not blas_available():
        return False
    done: bool = _cexec.pool_map(work, count)
    return done


_lock = threading.Lock()
_blas_state: bool | None = None
#: CBLAS GEMM symbol spellings, ILP64 first: (prefix, suffix, ILP64).
_SPELLINGS = (("scipy_cblas_", "64_", True), ("cblas_", "64_", True),
              ("scipy_cblas_", "", False), ("cblas_", "", False))


def available() -> bool:
    """Whether the compiled executor was built and is not switched off.

    ``PYTAPP_COMPILED=0`` in the environment switches it off for plans created afterwards (every
    product then runs on its backend's Python plan: for comparisons and for testing those).
    """
    return _cexec is not None and os.environ.get("PYTAPP_COMPILED", "1").strip() != "0"


def _numpy_blas_paths() -> list[str]:
    """Shared libraries that may be NumPy's BLAS: the wheel's bundled ones first."""
    root = os.path.dirname(os.path.dirname(np.__file__))
    found = sorted(glob.glob(os.path.join(root, "numpy.libs", "*openblas*")))
    if found:
        return found
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    return [str(i["filepath"]) for i in threadpool_info() if i.get("user_api") == "blas"]


#: The BLAS's thread count setter and getter (process-wide in OpenBLAS), by spelling.
_THREAD_SPELLINGS = (("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
                     ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
                     ("openblas_set_num_threads", "openblas_get_num_threads"))


def _register_threads(lib: Any) -> None:
    """Hand the BLAS's thread count setter and getter to the executor, where it has them."""
    assert _cexec is not None
    for set_name, get_name in _THREAD_SPELLINGS:
        try:
            found = [getattr(lib, set_name), getattr(lib, get_name)]
        except AttributeError:
            continue
        pool = getattr(lib, "gotoblas_pthread", None)  # OpenBLAS's own pool runs our shares
        found.append(pool)
        _cexec.set_blas_threads(*(0 if f is None else ctypes.cast(f, ctypes.c_void_p).value or 0
                                  for f in found))
        return


def _register_blas() -> bool:
    """Hand NumPy's CBLAS GEMM addresses to the executor; whether that worked."""
    if _cexec is None:
        return False
    for path in _numpy_blas_paths():
        try:
            lib = ctypes.CDLL(path)  # already loaded by NumPy: the same image
        except OSError:
            continue
        for prefix, suffix, ilp64 in _SPELLINGS:
            try:
                funcs = [getattr(lib, f"{prefix}{t}gemm{suffix}") for t in "sdcz"]
            except AttributeError:
                continue
            addresses = [ctypes.cast(f, ctypes.c_void_p).value or 0 for f in funcs]
            try:  # GEMM steps of one row or column run as GEMVs
                vectors = [ctypes.cast(getattr(lib, f"{prefix}{t}gemv{suffix}"),
                                       ctypes.c_void_p).value or 0 for t in "sdcz"]
            except AttributeError:
                vectors = [0] * 4
            if all(addresses):
                _cexec.set_blas(*addresses, ilp64, *vectors)
                use_tiles(_TILE_SETTINGS.get(os.environ.get("PYTAPP_TILES", "1").strip().lower(),
                                             True))
                _register_threads(lib)
                return True
    return False


#: The vectors of the register tiles, by ``_cexec.set_tiles``'s number.
_TILE_ISAS = ("", "avx2", "avx512")
#: ``PYTAPP_TILES`` values and what they ask of :func:`use_tiles`.
_TILE_SETTINGS: dict[str, bool | Literal["avx2", "avx512"]] = {
    "0": False, "off": False, "1": True, "on": True, "avx2": "avx2", "avx512": "avx512"}


def use_tiles(on: bool | Literal["avx2", "avx512"] = True) -> str:
    """Run the GEMMs that fit on the executor's register tiles (on by default).

    The tiles (``_tilegemm.c``) compute F32/F64 GEMMs (and, on AVX-512, C64/C128 ones, A
    conjugated or not) with a small side (a B of at most an eighth of the core's L2 cache,
    256 KiB at most, or of at most 128 columns) from the operands where they lie, where the
    BLAS packs both first; the BLAS runs the rest. They run on the widest vectors the CPU has,
    AVX-512F or AVX2 with FMA; BF16 GEMMs run on the AMX tiles where the CPU has them
    (:func:`bf16_tiles`) unless the cap is below AVX-512. ``on``: ``True`` for those,
    ``False`` for none, ``"avx2"`` or ``"avx512"`` for at most those (comparisons, tests).
    ``PYTAPP_TILES`` in the environment (``0``, ``1``, ``avx2``, ``avx512``) sets it at
    start-up. Returns the vectors the tiles now run on: ``"avx512"``, ``"avx2"``, or ``""``
    when switched off, on a CPU with neither, or without the compiled executor.

    Examples
    --------
    >>> use_tiles(False)
    ''
    >>> use_tiles(True) in ("avx512", "avx2", "")
    True
    """
    cap = {False: 0, True: 2}.get(on, -1) if isinstance(on, bool) else (
        _TILE_ISAS.index(on) if on in _TILE_ISAS[1:] else -1)
    if cap < 0:
        raise error_for(ErrorCode.UNSUPPORTED,
                        f"use_tiles takes True, False, 'avx2' or 'avx512', not {on!r}")
    if _cexec is None:
        return ""
    _cexec.set_amx(2 if cap == 2 else 0)
    return _TILE_ISAS[int(_cexec.set_tiles(cap))]


def tile_count() -> int:
    """Return how many GEMMs the register tiles have run in this process (every thread).

    Examples
    --------
    >>> tile_count() >= 0
    True
    """
    return 0 if _cexec is None else int(_cexec.tile_count())


#: The steps :func:`step_profile` times, in the order the executor counts them: packing
#: operands (TTGT's copies, a stream's vector), GEMMs (on views, TTGT's, summed ones), storing
#: (T or C into D with the epilogue, D scaled by beta), blocked TTGT (packs, GEMMs and stores of
#: each block, interleaved), a stream's passes through its matrix, loop nests.
STEPS = ("pack", "gemm", "store", "blocked", "stream", "loop")
_step_lock = threading.Lock()


@contextmanager
def step_profile() -> Iterator[dict[str, float]]:
    """Time each step of the compiled programs run inside the block (seconds, summed).

    Yields a dict of :data:`STEPS`, filled when the block ends: where a product's time goes
    (packing, GEMMs, stores...), as the calling thread sees each step. Programs run from other
    threads meanwhile count too; profiles do not nest (a second one waits for the first).
    Without the compiled extension every step stays 0.

    Examples
    --------
    >>> import numpy as np
    >>> from pytapp import Handle, TensorInfo, TensorProduct
    >>> a, b, d = np.ones((64, 48, 8)), np.ones((8, 64, 32)), np.zeros((32, 48, 64))
    >>> plan = TensorProduct(Handle("blas"), TensorInfo.from_array(a), "ijk",
    ...                      TensorInfo.from_array(b), "kil", None, None,
    ...                      TensorInfo.from_array(d), "lji")
    >>> with step_profile() as steps:
    ...     _ = plan.execute(1.0, a, b, 0.0, None, d)
    >>> sorted(steps) == sorted(STEPS) and all(t >= 0.0 for t in steps.values())
    True
    """
    times = dict.fromkeys(STEPS, 0.0)
    if _cexec is None:
        yield times
        return
    with _step_lock:
        _cexec.step_times(True)
        _cexec.set_step_timing(True)
        try:
            yield times
        finally:
            _cexec.set_step_timing(False)
            times.update(zip(STEPS, _cexec.step_times(True), strict=True))


def blas_available() -> bool:
    """Whether GEMM steps can run (NumPy's CBLAS was found), decided once."""
    global _blas_state
    if _blas_state is None:
        with _lock:
            if _blas_state is None:
                _blas_state = _register_blas()
    return _blas_state


# the tiles' rate is measured with the kernel shared over the BLAS's pool, as it runs
machine.before_tile_probe(blas_available)


def compile_lowered(prog: Lowered, status: Any) -> Any:
    """Return the executor's program for ``prog``; ``status`` is copied for every run."""
    assert _cexec is not None  # callers check available()
    gemm = prog.gemm.as_tuple() if prog.gemm is not None else None
    ttgt = prog.pack.as_tuple() if prog.pack is not None else None
    return _cexec.Program(
        type_num=prog.datatype.numpy_dtype.num, dtype=prog.dtype, kind=int(prog.kind),
        shapes=prog.shapes, strides=prog.strides, footprints=prog.footprints, conj=prog.conj,
        nout=prog.nout, extents=prog.extents, label_strides=prog.label_strides, gemm=gemm,
        ttgt=ttgt,
        flops=float(prog.flops), release_gil_flops=float(RELEASE_GIL_FLOPS),
        empty_sum=prog.empty_sum, row_sums=prog.row_sums, status=status,
        stream=prog.stream.as_tuple() if prog.stream is not None else None,
        planes=prog.planes if prog.planes[0] else None)


def compile_chain(**parts: Any) -> Any:
    """Return the executor's chain of a network's steps (see ``Network.compiled_chain``)."""
    assert _cexec is not None  # callers check available()
    return _cexec.Chain(**parts)


def compile_product(spec: ContractionSpec, status: Any) -> Any | None:
    """Lower and compile ``spec``, or ``None`` when the executor does not cover it.

    ``status`` is the Status template every run returns a copy of (its ``seconds`` set);
    the program's description is appended to its ``algorithm``, and its scratch (TTGT's
    packed operands and temporary) set as its bytes copied and allocated.
    """
    if not available():
        return None
    return _compile(spec, lower(spec, gemm=blas_available()), status)


def compile_alternative(spec: ContractionSpec, status: Any) -> Any | None:
    """Compile the route the cost model cannot weigh against ``spec``'s program, if any.

    See :func:`pytapp.analysis.program.alternative`; ``status`` as for
    :func:`compile_product`. ``None`` where there is none.
    """
    if not available() or not blas_available():
        return None
    return _compile(spec, alternative(spec), status)


def _compile(spec: ContractionSpec, prog: Lowered | None, status: Any) -> Any | None:
    """Compile ``prog``, the lowering of ``spec``; fill ``status`` (see compile_product)."""
    if prog is None:
        return None
    status.algorithm += prog.description
    if prog.pack is not None:  # TTGT's scratch: the packed operands and the GEMMs' result
        status.bytes_copied = prog.pack.bytes_a + prog.pack.bytes_b
        status.bytes_allocated = prog.pack.scratch_bytes(os.cpu_count() or 1)
    if prog.stream is not None:  # the packed vector operand, the workers' temporaries
        status.bytes_copied = prog.stream.bytes_v
        status.bytes_allocated = prog.stream.scratch_bytes(os.cpu_count() or 1)
    if prog.planes[0]:  # the packed operands, block by block through each worker's buffer
        mask, chunks = prog.planes
        packed = [op for i, op in enumerate(spec.operands[:2]) if mask >> i & 1]
        status.bytes_copied = sum(op.size for op in packed) * prog.datatype.itemsize
        status.bytes_allocated = (len(packed) * prod(chunks) * prog.datatype.itemsize
                                  * (os.cpu_count() or 1))
    if prog.kind not in (Step.LOOP, Step.STREAM) and not blas_available():
        return None
    return compile_lowered(prog, status)
