"""The fast default backend: every product mapped at plan time onto NumPy's BLAS.

Plan-time analysis orders the labels of each class so that the large operands are used in
place, and picks one of:

* ``gemm`` / ``batched gemm``: ``matmul`` over (H..., m, k) x (H..., k, n) views, written
  straight into D when D's layout allows (TTGT copies only the operands whose layout does not
  fuse; the copy also does any datatype conversion and conjugation, in one pass);
* ``elementwise``: Hadamard and outer products as one broadcasting multiply into D;
* ``dot``: full or batched inner products (BLAS dot / ``vecdot``).

F16F16_ACCUM_F16, which rounds every partial sum to F16, is not offered (error 16): BLAS
accumulates in wider types. ``auto`` runs it on the reference backend.

Reductions over isolated labels happen first, broadcasts (labels only in D) last. Alpha, beta,
C and op_D are applied in place on the product's result or on D, never as extra temporaries
of D's size when D is written directly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable, Sequence
from enum import Enum
from math import prod
from typing import Any

import numpy as np

from pytapp import kernels, scratch, wisdom
from pytapp.analysis.cost import MachineModel, Route, ttgt_seconds, view_gemm_seconds
from pytapp.analysis.layout import fusable
from pytapp.analysis.program import PACK_BLOCK_BYTES, THIN_MAX, THIN_REREAD
from pytapp.analysis.spec import ContractionSpec, OperandSpec
from pytapp.analysis.ttgt import Kind, PlanProfile, gemm_layout
from pytapp.analysis.viewgemm import (
    MatrixView,
    ViewGemm,
    reducing_view_gemm,
    summed_view_gemm,
    view_gemms,
)
from pytapp.backends.base import ALL_PRECTYPES, Capabilities, Stateless
from pytapp.backends.threads import (
    default_threads,
    parallel_convert,
    parallel_copyto,
    parallel_einsum,
    parallel_map,
    parallel_matmul,
    parallel_multiply,
    parallel_sum,
)
from pytapp.datatypes import Datatype
from pytapp.errors import TappError
from pytapp.executor import Executor
from pytapp.kernels.program import (
    bf16_gemm,
    bf16_tiles,
    bf16_vectors,
    packed_gemm,
    summed_gemm,
    summed_gemm_available,
)
from pytapp.machine import wide_is_faster
from pytapp.operands import BoundProduct, same_layout
from pytapp.precision import Prectype
from pytapp.status import Status

__all__ = ["BlasBackend", "BlasPlan"]

Label = Hashable
#: Largest temporary of one block of a blocked TTGT (within the last-level cache).
BLOCK_BYTES = 1 << 24
#: A batch's GEMMs are stored into D in groups (each group's temporary in cache) only where
#: the batch label cut steps through D by at least this many bytes. Where it steps by less
#: (the batch label among D's fastest), each group's slice of D is short pieces of every page
#: of D, and the stores of the groups went through D's memory once per group: on 15 seeded
#: products whose batch label steps 4-40 bytes through D, the whole temporary stored at once
#: was 1.07-3.83x faster on 14 (``dbifu,fxoeb->exdoufi``, F64, 15 groups of a 91 MB D:
#: 105 -> 27.5 ms; ``vskgw,ezscw->zkegcvw`` 78 -> 34; ``asukw,mkaoy->wumoysa`` 69 -> 28) and
#: 0.93x on one (F32, ``iaeskd,eiqmdy->ykqasmi``); where it steps 6 KB-4.8 MB, the groups kept
#: 0.96-1.14x (``nzeird,icnro->rdcoze`` 36.1 whole, 31.7 in groups).
GROUP_MIN_STRIDE = 4096
#: Most blocks a blocked TTGT loops over (Python loop).
MAX_BLOCKS = 4096
#: Fewest rows of one block's GEMM.
MIN_BLOCK_ROWS = 64
#: Batched GEMMs are split across threads (one BLAS thread each) when each GEMM has at least
#: SPLIT_MIN_FLOPS and the whole batch at least SPLIT_MIN_TOTAL, on a machine where that was
#: measured faster than NumPy's matmul (:func:`split_pays`). On the BLAS's pool a 2-core
#: AMD EPYC took 0.52-0.96x matmul's time from 6.6 x 10^4 to 2.7 x 10^8 flops per GEMM (a
#: batch of 3 on two threads: 1.21x, which the pool avoids by sharing rows instead), and
#: 1.3-1.6x on GEMMs of 16x16x16 and 8x8x8.
SPLIT_MIN_FLOPS = 1 << 15
SPLIT_MIN_TOTAL = 1 << 24
#: The split must take at most this share of matmul's time to be used (on the BLAS's pool it
#: is not slower anywhere measured, so any gain counts).
SPLIT_GAIN = 1.0
_split_ratio: float | None = None


def split_entry() -> str:
    """Return the wisdom key of :func:`split_pays`'s measurement (per BLAS thread count).

    Limited to one thread, NumPy's matmul would lose to any split.
    """
    from threadpoolctl import threadpool_info

    blas_threads = max((int(i.get("num_threads", 1)) for i in threadpool_info()
                        if i.get("user_api") == "blas"), default=1)
    return f"blas batch split on the BLAS pool (32 x 128x64x128), {blas_threads} BLAS threads"


def split_batch(per_gemm: int, count: int) -> bool:
    """Whether a batch of ``count`` GEMMs of ``per_gemm`` flops each is split across threads."""
    return (count >= 2 and per_gemm >= SPLIT_MIN_FLOPS and per_gemm * count >= SPLIT_MIN_TOTAL
            and split_pays())


def split_pays() -> bool:
    """Whether splitting a batch of GEMMs across threads beats NumPy's matmul here.

    Measured once per machine (a batch of 32 F64 GEMMs of 128x64x128, the least of seven
    interleaved runs of each, about 25 ms) and kept in the wisdom file, so that every process
    decides alike: the split is used unless it is slower. Split on threads of our own, a
    2-core AMD EPYC took 1.4-1.85x matmul's time at every size from 2^20 to 2^25 flops per
    GEMM (OpenBLAS's idle threads spin, competing with ours); on the BLAS's own pool,
    0.79-0.86x on this batch (0.75-0.93x on batches of 1.8 to 4.2 MFLOP GEMMs). Kept per BLAS
    thread count (the first process's count decides for the process).
    """
    global _split_ratio
    if _split_ratio is None:
        entry = split_entry()
        known = wisdom.lookup("overhead", entry)
        if isinstance(known, (int, float)) and known > 0:
            _split_ratio = float(known)
        else:
            rng = np.random.default_rng(0)
            a, b = rng.standard_normal((32, 128, 64)), rng.standard_normal((32, 64, 128))
            out = np.empty((32, 128, 128))
            best = {"matmul": float("inf"), "split": float("inf")}

            def run(name: str) -> None:
                if name == "split":
                    parallel_matmul(a, b, out, 2)
                else:
                    np.matmul(a, b, out=out)

            for name in best:
                run(name)
            for _ in range(7):
                for name in best:
                    start = time.perf_counter()
                    run(name)
                    best[name] = min(best[name], time.perf_counter() - start)
            _split_ratio = best["split"] / max(best["matmul"], 1e-12)
            wisdom.record("overhead", entry, _split_ratio)
    return _split_ratio <= SPLIT_GAIN


#: An A or B of the BF16/F16 GEMMs (``_run_tiles``) larger than this many bytes whose batch
#: label runs fastest through memory is copied in batch order first (see ``_tile_view``):
#: one batch's GEMM in the L2 cache reads lines that the next batches read again from there.
BATCH_INTERLEAVED_BYTES = 1 << 20
#: Fewest output elements for which a GEMV-like product runs as one fused kernel.
KERNEL_MIN_ROWS = 64
#: Fewest rows of each GEMV on views of a GEMV-like product with a smaller D: strided dots
#: (``abe,beda->d``: 96 dots of 24576 terms) took 5.4 ms as BLAS calls, 2.2 ms packed.
GEMV_MIN_ROWS = 16
#: Products whose operands all hold at most this many elements, and that are not GEMMs on
#: operands used as they lie, run as one ``numpy.einsum`` call and NumPy's in-place epilogue:
#: at this size a call's fixed costs (layout analysis, views, kernel dispatch) are the time.
SMALL_ELEMENTS = 1 << 12

_log = logging.getLogger("pytapp")

#: Real storage types that a rounding type represents exactly (no rounding pass needed).
_EXACT_IN = {
    Datatype.F64: {Datatype.F64, Datatype.F32, Datatype.F16, Datatype.BF16},
    Datatype.F32: {Datatype.F32, Datatype.F16, Datatype.BF16},
    Datatype.F16: {Datatype.F16},
    Datatype.BF16: {Datatype.BF16},
}


#: Datatypes of D that F32 sums are stored into by one compiled pass (``parallel_convert``)...
_HALVES = (Datatype.BF16, Datatype.F16)
#: ... with C of one of these.
_CONVERTED_C = (Datatype.BF16, Datatype.F16, Datatype.F32)

#: Types of C that the tiles' epilogue reads (others go through the F32 temporary).
_TILE_C_TYPES = ("bfloat16", "float16", "float32")


class Written(Enum):
    """Where a kernel left the product ``op_A(A) op_B(B)``, so the epilogue knows what to do."""

    #: In D itself: alpha, beta C and op_D are applied in place.
    DIRECT = "direct"
    #: In a temporary owned by the plan: D = op_D(alpha T + beta op_C(C)) is written from it.
    TEMP = "temp"
    #: D is finished (blocked TTGT ran the epilogue per block): nothing left to do.
    DONE = "done"


def _reshape_view(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """``x`` reshaped without copying, or ``None`` when that needs a copy."""
    try:
        return x.reshape(shape, copy=False)
    except ValueError:
        return None


#: A copy for BLAS runs columns first when that makes NumPy's innermost copy loop at least
#: this many times longer (and the row-major one is shorter than COPY_SHORT_RUN elements):
#: a 48x48x48x12 operand packed as (c, abj) runs 110,592 loops of 12 elements (2.2 ms), as
#: (abj, c) 27,648 of 48 (1.1 ms); the GEMM on the transposed operand costs 0.3 ms more.
COPY_RUN_GAIN = 4
COPY_SHORT_RUN = 32


def _copy_run(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """Elements NumPy's copy loop runs per innermost loop into a fresh C-ordered array.

    The destination's trailing axes merge while the source's strides merge them too.
    """
    run, step = 1, 0
    for extent, stride in zip(reversed(shape), reversed(strides), strict=True):
        if extent == 1:
            continue
        if run > 1 and stride != step * run:
            break
        if run == 1:
            step = stride
        run *= extent
    return run


def _streams(shape: Sequence[int], strides: Sequence[int], item: int) -> bool:
    """Whether a copy loop in this mode order reads its innermost run at unit stride."""
    moving = [abs(s) for e, s in zip(shape, strides, strict=True) if e != 1]
    return not moving or moving[-1] == item


def _copy_columns_first(x: np.ndarray, nh: int, lead: int) -> tuple[int, ...] | None:
    """Return the mode order (batch, columns, rows) to copy ``x`` in, where that is faster.

    ``x``'s modes: ``nh`` batch modes, then rows up to mode ``lead``, then columns. ``None``:
    copy in ``x``'s own order (row-major matrices). Columns first when only that order reads
    the source at unit stride, in loops at least as long (or :data:`COPY_SHORT_RUN`), or when
    the row-major copy runs short loops and the other's run :data:`COPY_RUN_GAIN` times longer.
    A ring term's ``kjcb`` packed as ``(jb, kc)`` gathers elements 48 apart: 0.52 ms; as
    ``(kc, jb)`` it streams: 0.27 ms (the GEMM on the transposed operand costs the same); a
    12^5 ``oipdj`` packed as ``(ipj, do)``, loops of 12 either way: 0.25 against 0.22 ms.
    """
    if not 0 <= nh < lead < x.ndim:
        return None
    order = (*range(nh), *range(lead, x.ndim), *range(nh, lead))
    shape, strides = tuple(x.shape[i] for i in order), tuple(x.strides[i] for i in order)
    run, flipped = _copy_run(x.shape, x.strides), _copy_run(shape, strides)
    streams = (_streams(x.shape, x.strides, x.itemsize), _streams(shape, strides, x.itemsize))
    if streams == (False, True) and flipped >= min(run, COPY_SHORT_RUN):
        return order
    return order if run < COPY_SHORT_RUN and flipped >= COPY_RUN_GAIN * run else None


def _blas_strides(mv: MatrixView) -> tuple[int, ...]:
    """``mv``'s element strides, with a matrix axis of extent 1 given the stride BLAS expects.

    Any stride addresses the one element of such an axis, but NumPy hands a matrix to BLAS
    only with one unit stride and the other a leading dimension: a ``(k, 1)`` column of stride
    0 there ran NumPy's own loop, 3x slower.
    """
    st = list(mv.strides)
    if len(st) >= 2:
        if mv.shape[-1] == 1:
            st[-1] = 1 if mv.shape[-2] == 1 or st[-2] != 1 else mv.shape[-2]
        if mv.shape[-2] == 1:
            st[-2] = max(mv.shape[-1], 1) if st[-1] == 1 else 1
    return tuple(st)


def _view(x: np.ndarray, mv: MatrixView, writable: bool = False) -> np.ndarray:
    """``x`` (over its merged modes) viewed as the batched matrix ``mv`` describes."""
    return np.lib.stride_tricks.as_strided(
        x, shape=mv.shape, strides=tuple(s * x.itemsize for s in _blas_strides(mv)),
        writeable=writable)


def _blocking_axes(x: np.ndarray, rows: int, workers: int) -> tuple[np.ndarray, int]:
    """Return ``x`` ready to be packed in blocks of its first axis, and its row axes' count.

    ``x``'s first ``rows`` axes are the rows. Axes of extent 1 are dropped, and the leading
    row axes merged (where a view allows) until the first has enough indices to give every
    worker several blocks. A count of 0: no row or no summed axis is left.
    """
    keep = [i for i in range(x.ndim) if x.shape[i] != 1]
    rows = sum(1 for i in keep if i < rows)
    if len(keep) != x.ndim:
        x = x.reshape([x.shape[i] for i in keep], copy=False)
    while rows >= 2 and x.shape[0] < 4 * workers and x.strides[0] == x.strides[1] * x.shape[1]:
        x = x.reshape((x.shape[0] * x.shape[1], *x.shape[2:]), copy=False)
        rows -= 1
    return x, (rows if rows < x.ndim else 0)


def _rows_fastest(x: np.ndarray, rows: int) -> bool:
    """Whether ``x``'s fastest-moving axis (of extent above 1) is one of its first ``rows``.

    A thin GEMM's thick operand is then packed summed labels first, reading it along its
    memory: packed rows first, ``hjndy,hdiyv->nivj`` (F64, 30 MB) ran 0.70x packing whole.
    """
    moving = [(abs(s), i) for i, (n, s) in enumerate(zip(x.shape, x.strides, strict=True))
              if n > 1]
    return bool(moving) and min(moving)[1] < rows


def _blasable(x: np.ndarray) -> bool:
    """Whether the last two axes form a matrix BLAS reads in place (row or column major).

    Misaligned data (a buffer deserialized at an odd offset, as Dask's network frames can
    be) is not: NumPy then skips BLAS for a plain loop several times slower than a copy.
    """
    if not x.flags.aligned:
        return False
    if x.ndim < 2:
        return True
    (s1, s2), (d1, d2), item = x.strides[-2:], x.shape[-2:], x.itemsize
    if d1 <= 1 or d2 <= 1:
        return (s1 == item or d1 <= 1) or (s2 == item or d2 <= 1)
    return (s2 == item and s1 >= d2 * item and s1 % item == 0) or (
        s1 == item and s2 >= d1 * item and s2 % item == 0
    )


def _readable_matrix(groups: list[tuple[list[int], list[int]]]) -> bool:
    """:func:`_blasable` at plan time: (extents, element strides) of two fusable mode groups."""
    fused = []
    for extents, strides in groups:
        inner = [st for e, st in zip(extents, strides, strict=True) if e != 1]
        fused.append((prod(extents), inner[-1] if inner else 1))
    (e1, s1), (e2, s2) = fused
    if e1 <= 1 or e2 <= 1:
        return True
    return (s2 == 1 and s1 >= e2) or (s1 == 1 and s2 >= e1)


class BlasPlan(Stateless):
    """Everything decided once: label orders, permutations, kernel, direct output."""

    #: The compiled executor may run this product when it lowers (see pytapp.kernels.program).
    compiled = True

    def __init__(self, spec: ContractionSpec) -> None:
        self.spec = spec
        rule, cls = spec.rule, spec.classes
        self.reduce_ok = False
        #: (strides of A, B, D; shapes of the GEMM views; bytes packed) once a run was one GEMM.
        self._recipe: tuple[Any, Any, int] | None = None
        #: What the plan will do, for cost models (auto): sizes, copies, direct output.
        self.profile = PlanProfile()
        real = rule.real_dtype
        self.compute: np.dtype[Any] = (
            np.result_type(real, np.complex64) if rule.is_complex else real
        )
        self.rounding = rule.input_round
        a, b, d = spec.a, spec.b, spec.d
        lay = gemm_layout(spec)
        self.kind, self.h, self.fa, self.fb, self.p = lay.kind, lay.h, lay.fa, lay.fb, lay.p
        self.h_shape, self.m, self.n, self.k = lay.h_shape, lay.m, lay.n, lay.k
        self.swap, self.d_target, self.d_perm, self.ic = lay.swap, lay.d_target, lay.d_perm, lay.ic
        self.result_shape = lay.result_shape
        self.a_reduce, self.b_reduce = lay.a_reduce, lay.b_reduce
        self.a_perm, self.b_perm = lay.a_perm, lay.b_perm
        first, second = lay.first, lay.second
        self.direct_ok = (
            d.datatype.numpy_dtype == self.compute and not cls.IC
        )
        # beta op_C(C) can be added to a D the GEMM wrote, in one kernel pass.
        self._kernel_epilogue = kernels.supports(np.empty(0, self.compute))
        self._conj_a = spec.a.conjugates
        self._conj_b = spec.b.conjugates
        self._conj_c = spec.c.conjugates
        self._conj_d = spec.d.conjugates
        self.c_in_place = (self._kernel_epilogue
                           and spec.c.datatype.numpy_dtype == self.compute
                           and self._round_free(spec.c.datatype))
        # Operands used as they are (only permuted): the common case, decided once.
        self.a_plain = self._plain(a, self.a_reduce)
        self.b_plain = self._plain(b, self.b_reduce)
        self.a_perm_id = self.a_perm == tuple(range(len(self.a_perm)))
        self.b_perm_id = self.b_perm == tuple(range(len(self.b_perm)))
        self.d_perm_id = self.d_perm == tuple(range(len(self.d_perm)))
        detail = f"h={prod(self.h_shape)}, m={self.m}, n={self.n}, k={self.k}"
        name = ("batched gemm" if self.h else "gemm") if self.kind is Kind.GEMM else \
            self.kind.value
        extras = []
        if cls.IA or cls.IB:
            extras.append("reduce isolated labels first")
        if cls.IC:
            extras.append("broadcast into D")
        if self.swap:
            extras.append("D^T = B^T A^T")
        self.algorithm = f"{name} [{detail}]" + (f" ({'; '.join(extras)})" if extras else "")
        self._kernel = {Kind.GEMM: self._gemm, Kind.ELEMENTWISE: self._elementwise,
                        Kind.DOT: self._dot}[self.kind]
        # Many small GEMMs: split the batch across threads, one BLAS thread each.
        self.split_batches = (self.kind is Kind.GEMM and len(self.h) > 0
                              and self.h_shape[0] >= 2 and split_batch(
                                  2 * self.m * self.n * self.k, prod(self.h_shape)))
        if self.split_batches:
            self.algorithm += " (batch split across threads)"
        self.block = self._plan_blocks(first, second)
        if self.block is not None:
            self.algorithm += (f" (blocked over {self.block[0]} slices when D is not written "
                               "directly)")
        self.workspace_bytes = self._workspace(first, second)
        #: The temporary (whole, or each block's) computed transposed where D is not written
        #: in place: see _flips.
        rows, cols = (self.n, self.m) if self.swap else (self.m, self.n)
        self.flip_temp = (self.kind is Kind.GEMM and not self.h and not self.profile.d_direct
                          and _flips(rows if self.block is None else rows // self.block[0],
                                     cols, self.k, self.compute))
        if self.flip_temp:
            self.algorithm += " (a temporary computed transposed, as this BLAS writes faster)"
        #: BF16 GEMMs on the AMX tiles (see _run_tiles), where the CPU has them.
        self.tiles = self._tiles_fit()
        if self.tiles:
            where = ("AVX-512 vectors" if min(self.m, self.n) == 1 else
                     "the AMX tiles" if bf16_tiles() == "amx" else "AVX512-BF16 vectors")
            pairs = " split into BF16 pairs" if spec.a.datatype is Datatype.F16 else ""
            self.algorithm += f" ({spec.a.datatype.name} products{pairs} on {where}, F32 sums)"
            self.profile.tiles = True
        self.view_gemm: ViewGemm | None = None
        self.route = self._kernel_route()
        self.small = self._small_equation()
        if self.small is not None:
            self.algorithm = "numpy.einsum on the operands where they lie, then the epilogue " \
                             "(a small product)"
            self.workspace_bytes = spec.d.size * self.compute.itemsize
        elif self.route is not None:
            self.algorithm = self.route_description()
            self.workspace_bytes = 0
            self.profile.route = self.route
            if self.route is Route.VIEW_GEMM:
                g = self._views()
                self.profile.view = (g.m, g.n, g.k, g.calls)
        #: The view route's batch of GEMMs (none summed) split across threads.
        g_v = self.view_gemm if self.route is Route.VIEW_GEMM else None
        self.split_views = (g_v is not None and not g_v.reduced and len(g_v.batch) > 0
                            and split_batch(2 * g_v.m * g_v.n * g_v.k, g_v.calls))
        _log.debug("blas layout of %s: kind %s, h %s m %d n %d k %d, A perm %s, B perm %s, "
                   "D perm %s; profile %s", spec.einsum(), self.kind.value, self.h_shape, self.m,
                   self.n, self.k, self.a_perm, self.b_perm, self.d_perm, self.profile)

    # ----------------------------------------------------------------- kernel routes
    def _small_equation(self) -> str | None:
        """Return the einsum equation of a small product, or ``None``.

        Small means at most :data:`SMALL_ELEMENTS` per operand, one datatype, no input rounding
        and no broadcast labels. ``None`` for every other product and for GEMMs on operands
        used as they lie (their first run learns a faster recipe).
        """
        spec = self.spec
        if (max(op.size for op in spec.operands) > SMALL_ELEMENTS or spec.classes.IC
                or (self.kind is Kind.GEMM and not self.profile.copy_bytes
                    and self.profile.d_direct)
                or not all(op.datatype.numpy_dtype == self.compute for op in spec.operands)
                or not all(self._round_free(op.datatype) for op in spec.operands)):
            return None
        try:
            wa, wb, wd = spec.einsum_words("blas")
        except TappError:  # more labels than letters: the general path has no such limit
            return None
        return f"{wa},{wb}->{wd}"

    def _run_small(self, bound: BoundProduct) -> None:
        """D = op_D(alpha op_A(A) op_B(B) + beta op_C(C)) with one einsum into a temporary."""
        a = np.conjugate(bound.a) if self._conj_a else bound.a
        b = np.conjugate(bound.b) if self._conj_b else bound.b
        assert self.small is not None
        t = np.einsum(self.small, a, b)
        if not isinstance(t, np.ndarray):  # a 0-d result comes back as a scalar
            t = np.array(t)
        kernels.epilogue(bound.d, t, bound.c, bound.alpha, bound.beta, self._conj_c,
                         self._conj_d)

    def _uniform(self) -> bool:
        """Every operand stored in the compute type, no input rounding: one kernel dtype."""
        spec = self.spec
        return (kernels.supports(np.empty(0, self.compute))
                and all(op.datatype.numpy_dtype == self.compute for op in spec.operands)
                and all(self._round_free(op.datatype) for op in spec.operands))

    def _kernel_route(self) -> Route | None:
        """``elementwise`` or ``reduce`` when one compiled pass computes D from A, B and C.

        Elementwise: Hadamard and outer products (no label summed). Reduce: GEMV-like
        products (one side has no free label) with at least one output label, memory-bound
        whatever the layout: the large operand is streamed where it lies instead of copied.
        """
        if not self._uniform():
            return None
        cls = self.spec.classes
        if self.kind is Kind.ELEMENTWISE and not (cls.IA or cls.IB):
            return Route.ELEMENTWISE
        out_size = prod(self.spec.extent(x) for x in self.spec.d.modes.labels)
        gemv_like = self.kind is Kind.DOT or (self.kind is Kind.GEMM and min(self.m, self.n) == 1)
        # A GEMV that BLAS reads in place (nothing copied, D written directly) stays BLAS's:
        # its threaded GEMV streams the operand as fast as the kernel, without the dispatch.
        blas_in_place = self.kind is Kind.GEMM and self.profile.copy_bytes == 0 and \
            self.profile.d_direct
        #: Whether the reduce kernel can run this product (for misaligned operands at run
        #: time: NumPy gives BLAS only aligned data, and copying them costs more).
        self.reduce_ok = gemv_like and not cls.IC and out_size >= KERNEL_MIN_ROWS
        if gemv_like and not cls.IC and not blas_in_place:
            # GEMVs on views below KERNEL_MIN_ROWS elements of D too where each has at least
            # GEMV_MIN_ROWS rows (``aedg,ag->ed``, 50: 12 GEMVs in place, 58 us, instead of a
            # 1.2 MB copy, 168 us); the fused pass from KERNEL_MIN_ROWS
            view = self._reducing_view_gemm()
            if view is not None and (self.reduce_ok or view.m * view.n >= GEMV_MIN_ROWS):
                self.view_gemm = view
                return Route.VIEW_GEMM
            if self.reduce_ok:
                return Route.REDUCE
        if self.kind is Kind.GEMM and summed_gemm_available() and self._views_allowed():
            # GEMMs looped over summed labels, accumulated by the summed-GEMM kernel (the
            # compiled executor's lowering makes the same choice and runs them itself)
            self.view_gemm = summed_view_gemm(self.spec)
            if self.view_gemm is not None:
                return Route.VIEW_GEMM
        self.view_gemm = self._choose_view_gemm() if self.kind is Kind.GEMM else None
        return Route.VIEW_GEMM if self.view_gemm is not None else None

    def _views_allowed(self) -> bool:
        """BLAS cannot conjugate, and the view route writes C's terms where D lies."""
        spec = self.spec
        return not any(op.conjugates for op in (spec.a, spec.b)) and \
            spec.c.strides == spec.d.strides

    def _reducing_view_gemm(self) -> ViewGemm | None:
        """Return the GEMVs on views of a GEMV-like product (:func:`reducing_view_gemm`)."""
        return reducing_view_gemm(self.spec) if self._views_allowed() else None

    def _views(self) -> ViewGemm:
        """Return the GEMMs-on-views mapping of route ``view-gemm`` (set with the route)."""
        if self.view_gemm is None:
            raise RuntimeError("route view-gemm without a mapping")  # never: set together
        return self.view_gemm

    def _choose_view_gemm(self) -> ViewGemm | None:
        """Return the cheapest GEMMs-on-views mapping when the cost model prefers it to TTGT."""
        spec = self.spec
        if not self._views_allowed():
            return None
        model, cplx = MachineModel(), self.spec.rule.is_complex
        item = self.compute.itemsize
        p = self.profile
        stored = 0 if p.d_direct else spec.d.size * item
        ttgt = ttgt_seconds(self.m, self.n, self.k, prod(self.h_shape), p.copy_bytes,
                            stored, model, cplx)
        best = min((g for g in view_gemms(spec) if not g.reduced), default=None,
                   key=lambda g: view_gemm_seconds(g.m, g.n, g.k, g.calls, model, cplx))
        if best is None or view_gemm_seconds(best.m, best.n, best.k, best.calls, model,
                                             cplx) >= ttgt:
            return None
        return best

    def route_description(self) -> str:
        """Return what a kernel route does, for ``algorithm``."""
        if self.route is Route.VIEW_GEMM:
            g = self._views()
            summed = (f", summed after over {', '.join(map(str, g.batch[:g.reduced]))}"
                      if g.reduced else "")
            return (f"{g.calls} gemm{'s' if g.calls > 1 else ''} on strided views "
                    f"[m={g.m}, n={g.n}, k={g.k}; loop over {', '.join(map(str, g.batch))}"
                    f"{summed}]" + (" (D^T = B^T A^T)" if g.swap else "") + " (no copies)")
        if self.route is Route.ELEMENTWISE:
            return "kernel: fused elementwise product into D (A, B, C read where they lie)"
        return (f"kernel: fused multiply-reduce into D [m={prod(self.h_shape) * self.m * self.n},"
                f" k={self.k}] (no copies)")

    def _label_view(self, x: np.ndarray, op: OperandSpec, labels: Sequence[Label],
                    writable: bool = False) -> np.ndarray:
        """``x`` (over ``op``'s merged modes) viewed over ``labels``; stride 0 where absent."""
        strides = dict(zip(op.modes.labels, x.strides, strict=True))
        shape = tuple(self.spec.extent(lab) for lab in labels)
        return np.lib.stride_tricks.as_strided(
            x, shape=shape, strides=tuple(strides.get(lab, 0) for lab in labels),
            writeable=writable)

    def _run_view_gemm(self, bound: BoundProduct, threads: int | None) -> None:
        """GEMMs on views of A, B and D; alpha, beta C and op_D in one pass over D after."""
        g, spec = self._views(), self.spec

        if g.reduced:
            self._run_reducing_view_gemm(bound, threads)
            return
        a, b, d = _view(bound.a, g.a), _view(bound.b, g.b), _view(bound.d, g.d, writable=True)
        if g.swap:
            left, right, out = np.swapaxes(b, -1, -2), np.swapaxes(a, -1, -2), np.swapaxes(
                d, -1, -2)
        else:
            left, right, out = a, b, d
        c = None if bound.c is None else _view(bound.c, g.d)
        conj_c = spec.c.conjugates
        conj_d = spec.d.conjugates
        if c is not None and np.may_share_memory(c, d):  # D = beta D + alpha A B: keep D
            kernels.fused(d, np.matmul(left, right).swapaxes(-1, -2) if g.swap else
                          np.matmul(left, right), None, c, alpha=bound.alpha, beta=bound.beta,
                          conj_c=conj_c, conj_out=conj_d, threads=threads)
            return
        if self.split_views:
            parallel_matmul(left, right, out, threads)
        else:
            np.matmul(left, right, out=out)
        if c is not None or bound.alpha != 1 or conj_d:
            kernels.fused(d, d, None, c, alpha=bound.alpha,
                          beta=0 if c is None else bound.beta, conj_c=conj_c,
                          conj_out=conj_d, threads=threads)

    def _run_reducing_view_gemm(self, bound: BoundProduct, threads: int | None) -> None:
        """Run the GEMMs over the looped summed labels, summed into D.

        With an epilogue (alpha, C, op_D), into a temporary of D's shape first.
        """
        g, spec = self._views(), self.spec
        r = g.reduced
        out = MatrixView(g.d.shape[r:], g.d.strides[r:])  # D without the summed loops
        d = _view(bound.d, out, writable=True)
        plain = bound.c is None and bound.alpha == 1 and not spec.d.conjugates
        workers = threads or default_threads()
        a, b = _view(bound.a, g.a), _view(bound.b, g.b)
        if plain and summed_gemm(d, a, b, r, workers):
            if _log.isEnabledFor(logging.DEBUG):  # the GEMMs accumulated in D
                _log.debug("blas summed %d GEMMs (m=%d, n=%d, k=%d) in D on %d threads",
                           g.calls, g.m, g.n, g.k, workers)
            return
        if not plain and a.dtype == b.dtype == self.compute:
            with scratch.lease():  # D's terms summed in a warm temporary, then the epilogue
                total = scratch.empty(out.shape, self.compute)
                if summed_gemm(total, a, b, r, workers):
                    kernels.fused(d, total, None,
                                  None if bound.c is None else _view(bound.c, out),
                                  alpha=bound.alpha, beta=0 if bound.c is None else bound.beta,
                                  conj_c=spec.c.conjugates, conj_out=spec.d.conjugates,
                                  threads=threads)
                    return
        with scratch.lease():  # the temporary: warm memory, given back
            t = np.matmul(_view(bound.a, g.a), _view(bound.b, g.b),
                          out=scratch.empty(g.d.shape, self.compute))
            if plain:
                np.sum(t, axis=tuple(range(r)), out=d)
                return
            total = np.sum(t, axis=tuple(range(r)))
        kernels.fused(d, total, None, None if bound.c is None else _view(bound.c, out),
                      alpha=bound.alpha, beta=0 if bound.c is None else bound.beta,
                      conj_c=spec.c.conjugates, conj_out=spec.d.conjugates, threads=threads)

    def _run_route(self, bound: BoundProduct, threads: int | None,
                   route: Route | None = None) -> None:
        route = route or self.route
        if route is Route.VIEW_GEMM:
            self._run_view_gemm(bound, threads)
            return
        spec, cls = self.spec, self.spec.classes
        conj = {op.role: op.conjugates for op in spec.operands}
        out_labels = spec.d.modes.labels
        labels = out_labels if route is Route.ELEMENTWISE else (
            *out_labels, *cls.P, *cls.IA, *cls.IB)
        plain = (bound.alpha == 1 and bound.c is None and not any(conj.values())
                 and bound.a.dtype == bound.b.dtype == bound.d.dtype)
        if plain and route is Route.REDUCE:
            # NumPy's own sum-of-products loop (vectorised, no pool) is the faster one (a
            # GEMV-like sum 0.28 ms against 0.62), given each operand with its own labels and
            # no out= (with out= it keeps D's loop order: 6.5 ms against 0.7 on bj,ojb->bo);
            # the reduced result is then copied into D. Large operands: split over the
            # threads along D's longest label.
            index = {lab: i for i, lab in enumerate(labels)}
            parallel_einsum(bound.d, bound.a, [index[x] for x in spec.a.modes.labels],
                            bound.b, [index[x] for x in spec.b.modes.labels],
                            [index[x] for x in out_labels], threads)
            return
        x = self._label_view(bound.a, spec.a, labels)
        y = self._label_view(bound.b, spec.b, labels)
        if plain:  # elementwise: NumPy's loops over the broadcast views (0.46 ms vs 0.69 by
            # the kernel), split over the threads when D is large
            parallel_multiply(x, y, bound.d, threads)
            return
        kernel = kernels.fused if route is Route.ELEMENTWISE else kernels.reduce
        kernel(bound.d, x, y, bound.c, alpha=bound.alpha,
               beta=0 if bound.c is None else bound.beta, conj_x=conj["A"], conj_y=conj["B"],
               conj_c=conj["C"], conj_out=conj["D"], threads=threads)

    def _workspace(self, first: Sequence[Label], second: Sequence[Label]) -> int:
        """Upper bound of the temporaries of one execution (bytes), from the layouts."""
        spec, item = self.spec, self.compute.itemsize

        def in_place(op: OperandSpec, groups: list[Sequence[Label]], plain: bool,
                     matrix: bool = False) -> bool:
            strides = dict(zip(op.modes.labels, op.modes.strides, strict=True))
            shapes = [([spec.extent(x) for x in g], [strides[x] for x in g]) for g in groups]
            if not (plain and all(fusable(e, st) for e, st in shapes)):
                return False
            # A GEMM operand is also copied when BLAS cannot read the fused matrix (a zero
            # stride, say): _matrix's copy, counted here so MEMORY_LIMIT sees it.
            return not matrix or _readable_matrix(shapes)

        gemm = self.kind is Kind.GEMM
        copied = 0
        if not in_place(spec.a, [self.fa, self.p], self.a_plain, gemm):
            copied += spec.a.size * item
        if not in_place(spec.b, [self.p, self.fb], self.b_plain, gemm):
            copied += spec.b.size * item
        total = copied
        d_size = prod(spec.extent(x) for x in self.d_target)
        groups: list[Sequence[Label]] = (
            [first, second] if self.kind is Kind.GEMM else [self.d_target])
        d_direct = self.direct_ok and in_place(spec.d, groups, True)
        if not d_direct:
            total += BLOCK_BYTES if self.block is not None else d_size * item
        if self.spec.c.datatype.numpy_dtype != self.compute or self.spec.c.conjugate:
            total += spec.d.size * item  # C converted to the compute type
        self.profile = PlanProfile(kind=self.kind, h=prod(self.h_shape), m=self.m, n=self.n,
                                   k=self.k, copy_bytes=copied, d_direct=d_direct)
        return int(total)

    def _plan_blocks(
        self, first: Sequence[Label], second: Sequence[Label]
    ) -> tuple[int, int] | None:
        """Return (number of blocks, leading modes looped over) for blocked TTGT, or None.

        When the GEMM cannot write D in place, the result goes through a temporary; computing
        it in row blocks of at most BLOCK_BYTES keeps that temporary in cache, so D is written
        once from cache instead of the whole temporary going through memory twice.
        """
        if self.kind is not Kind.GEMM or self.h or self.ic:
            return None
        ext = [self.spec.extent(x) for x in first]
        cols = prod(self.spec.extent(x) for x in second)
        row_bytes = cols * self.compute.itemsize
        right_bytes = self.k * cols * self.compute.itemsize
        # Every block reads the whole right operand: it must stay in cache.
        if prod(ext) * row_bytes <= BLOCK_BYTES or right_bytes > BLOCK_BYTES:
            return None
        for lead in range(1, len(ext) + 1):
            if prod(ext[lead:]) * row_bytes <= BLOCK_BYTES:
                if prod(ext[lead:]) < MIN_BLOCK_ROWS:
                    if lead == 1:
                        return None  # thin GEMMs cost more than the temporary saves
                    lead -= 1
                count = prod(ext[:lead])
                return (count, lead) if count <= MAX_BLOCKS else None
        return None

    # ----------------------------------------------------------------- operands
    def _plain(self, op: OperandSpec, reduce: tuple[int, ...]) -> bool:
        return (
            not reduce
            and op.datatype.numpy_dtype == self.compute
            and not (op.conjugates)
            and self._round_free(op.datatype)
        )

    def _round(self, x: np.ndarray, storage: Datatype) -> np.ndarray:
        """Round to the precision's input type when that loses bits, then widen."""
        rounding = self.rounding
        if rounding is None or storage.real in _EXACT_IN[rounding]:
            return x
        r = rounding.numpy_dtype
        real = self.compute if not np.issubdtype(self.compute, np.complexfloating) else (
            np.empty(0, self.compute).real.dtype
        )
        if storage.is_complex:
            out = np.empty(x.shape, dtype=self.compute)
            out.real = x.real.astype(r).astype(real)
            out.imag = x.imag.astype(r).astype(real)
            return out
        return x.astype(r).astype(real)

    def _prepare(
        self, x: np.ndarray, spec: OperandSpec, reduce: tuple[int, ...], perm: tuple[int, ...],
        threads: int | None,
    ) -> tuple[np.ndarray, int]:
        """Operand in target order and compute dtype with op applied; (array, bytes copied)."""
        copied = 0
        x = self._round(x, spec.datatype)
        conj = spec.conjugates
        if reduce:  # NumPy's pairwise sums, on the threads when x is large (the compiled
            # kernel, adding in order, took 1.5-4x as long: 64x64x32 over its last two modes,
            # 111 us against 37)
            x = parallel_sum(x, reduce, self.compute, threads)
            copied += x.nbytes
        x = x.transpose(perm)
        if conj or x.dtype != self.compute:
            out = scratch.empty(x.shape, self.compute)
            if kernels.supports(out, x) or out.size < kernels.SMALL_COPY:
                kernels.copy(out, x, conj=conj, threads=threads)
            elif conj:
                parallel_map(out, (x,), threads, None, lambda o, i: np.conjugate(i, out=o))
            else:
                parallel_copyto(out, x, threads)
            copied += out.nbytes
            x = out
        if copied and _log.isEnabledFor(logging.DEBUG):
            _log.debug("blas packed %s: %d bytes (reduce %s, permutation %s, %s)", spec.role,
                       copied, reduce, perm, self.compute.name)
        return x, copied

    def _matrix(
        self, x: np.ndarray, shape: tuple[int, ...], threads: int | None, nh: int, lead: int
    ) -> tuple[np.ndarray, int]:
        """Return ``x`` as the ``shape`` (batch, rows, columns) BLAS reads, and bytes copied.

        ``x``'s modes: ``nh`` batch modes, rows up to mode ``lead``, then columns. A view
        where one does, else a copy in scratch memory, laid out row- or column-major,
        whichever NumPy's copy loop runs with the longer innermost loop
        (:func:`_copy_columns_first`); BLAS reads either.
        """
        view = _reshape_view(x, shape)
        if view is not None and _blasable(view):
            return view, 0
        if view is not None and not view.flags.aligned:
            fixed = _reshape_view(kernels.aligned(x), shape)
            if fixed is not None and _blasable(fixed):
                return fixed, fixed.nbytes
        batch = len(shape) - 2
        order = _copy_columns_first(x, nh, lead)
        source = x if order is None else x.transpose(order)
        out = scratch.empty(source.shape, x.dtype)
        # split across threads: the tiled copy for long strided runs, else NumPy's loop (faster
        # than the numba copy kernel on permutations: a 12x12x48x48 transpose 0.17 ms vs 0.56)
        parallel_copyto(out, source, threads)
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("blas copied a %s operand with strides %s for BLAS: %d bytes%s",
                       x.shape, x.strides, out.nbytes, "" if order is None else ", columns first")
        if order is None:
            return out.reshape(shape), out.nbytes
        flipped = out.reshape((*shape[:batch], shape[-1], shape[-2]))
        return np.swapaxes(flipped, -1, -2), out.nbytes

    # ----------------------------------------------------------------- kernels
    def _direct_out(self, bound: BoundProduct, shape: tuple[int, ...]) -> np.ndarray | None:
        """D's memory viewed as the kernel's output, when it can be written directly.

        With C present that needs C elsewhere than D (the product would overwrite it) and an
        epilogue kernel that adds beta op_C(C) in place afterwards.
        """
        # C that is D (or overlaps it) must be read before the GEMM overwrites D, so the
        # product then goes through a temporary.
        if not self.direct_ok or (bound.c is not None and not (
                self.c_in_place and not np.may_share_memory(bound.c, bound.d))):
            return None
        d = bound.d if self.d_perm_id else bound.d.transpose(self.d_perm)
        view = _reshape_view(d, shape)
        # matmul's out= must have a unit-stride last axis to be written by BLAS itself;
        # otherwise NumPy computes into a buffer and copies, which is slower than our store.
        if view is None or not view.flags.aligned or (self.kind is Kind.GEMM and not (
            view.ndim < 2 or view.strides[-1] == view.itemsize or view.shape[-1] == 1
        )):
            return None
        return view

    def _gemm(
        self, a: np.ndarray, b: np.ndarray, bound: BoundProduct, threads: int | None
    ) -> tuple[Any, Written, int]:
        thin = self._gemm_thin(a, b, bound, threads)
        if thin is not None:
            return thin
        h, m, n, k = self.h_shape, self.m, self.n, self.k
        nh = a.ndim - len(self.fa) - len(self.p)  # a: batch, rows, summed; b: batch, summed, cols
        a3, ca = self._matrix(a, (*h, m, k), threads, nh, nh + len(self.fa))
        b3, cb = self._matrix(b, (*h, k, n), threads, nh, nh + len(self.p))
        if self.swap:
            left, right, shape = np.swapaxes(b3, -1, -2), np.swapaxes(a3, -1, -2), (*h, n, m)
        else:
            left, right, shape = a3, b3, (*h, m, n)
        out = self._direct_out(bound, shape)
        # D not writable in place and large: row blocks keep each temporary in cache and store
        # it into D (with the epilogue) before the next block is computed.
        if out is None and self.block is not None:
            self._gemm_blocked(left, right, bound, threads)
            return None, Written.DONE, ca + cb
        # A batch whose temporary outgrows the cache: groups of GEMMs stored while in cache.
        if out is None and h and self._gemm_batch_blocked(left, right, shape, bound, threads):
            return None, Written.DONE, ca + cb
        if self.split_batches:
            direct = out is not None
            if out is None:
                out = scratch.empty(shape, self.compute)
            parallel_matmul(left, right, out, threads)
            return out, Written.DIRECT if direct else Written.TEMP, ca + cb
        direct = out is not None
        if out is None:
            if self.flip_temp:  # the temporary laid out as this machine's BLAS writes faster
                flipped = scratch.empty(shape[::-1], np.result_type(left, right))
                np.matmul(right.T, left.T, out=flipped)
                return flipped.T, Written.TEMP, ca + cb
            out = scratch.empty(shape, np.result_type(left, right))
        result = np.matmul(left, right, out=out)
        return result, Written.DIRECT if direct else Written.TEMP, ca + cb

    def _gemm_thin(
        self, a: np.ndarray, b: np.ndarray, bound: BoundProduct, threads: int | None
    ) -> tuple[Any, Written, int] | None:
        """Run a thin GEMM whose thick operand needs packing, packed and multiplied in blocks.

        ``None`` where that does not apply (batch modes, both sides thick, nothing to pack,
        the thin operand not readable in place, D needing the row-blocked store): the caller
        packs the thick operand whole.
        """
        h, m, n, k = self.h_shape, self.m, self.n, self.k
        if h or not 2 <= min(m, n) <= THIN_MAX or k < 1:
            return None
        pack_a = m >= n  # the thick side is packed; the thin one must be a view BLAS reads
        thick, thin = (a, b) if pack_a else (b, a)
        if thick.size < kernels.SMALL_COPY:
            return None
        thick_view = _reshape_view(thick, (m, k) if pack_a else (k, n))
        thin_view = _reshape_view(thin, (k, n) if pack_a else (m, k))
        if (thick_view is not None and _blasable(thick_view)) or thin_view is None or not (
                _blasable(thin_view)):
            return None
        shape = (n, m) if self.swap else (m, n)
        out = self._direct_out(bound, shape)
        direct = out is not None
        if out is None:
            if self.block is not None:
                return None
            out = scratch.empty(shape, self.compute)
        d = out.T if self.swap else out  # D as (m, n)
        if pack_a:  # A's modes: its free ones (D's rows), then the summed ones
            src, rows, other = a, len(self.fa), thin_view
        else:  # B's modes: the summed ones, then its free ones (D's columns): D^T = B^T A^T
            np_ = len(self.p)
            src, rows = b.transpose((*range(np_, b.ndim), *range(np_))), len(self.fb)
            other, d = thin_view.T, d.T
        workers = threads or default_threads()
        src, rows = _blocking_axes(src, rows, workers)
        if rows < 1:
            return None
        unit = prod(src.shape[1:rows]) * k * src.itemsize  # bytes per index of the first axis
        thin_rows = n if pack_a else m
        target = max(PACK_BLOCK_BYTES, THIN_REREAD * thin_rows * k * src.itemsize)
        block = max(1, min(target // max(unit, 1), -(-src.shape[0] // workers)))
        summed_first = _rows_fastest(src, rows)  # then packed in src's own order
        if summed_first:
            src = src.transpose((*range(rows, src.ndim), *range(rows)))
        if not packed_gemm(d, src, other, rows, block, workers, summed_first):
            return None
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("blas packed a %s operand in blocks of %d x %d bytes%s for a thin GEMM "
                       "(m=%d, n=%d, k=%d) on %d threads", thick.shape, block, unit,
                       " (summed labels first)" if summed_first else "", m, n, k, workers)
        return out, Written.DIRECT if direct else Written.TEMP, thick.size * thick.itemsize

    def _gemm_blocked(
        self, left: np.ndarray, right: np.ndarray, bound: BoundProduct, threads: int | None
    ) -> None:
        """Row blocks of the GEMM, each finished into its slice of D while in cache."""
        assert self.block is not None
        count, lead = self.block
        d_t = bound.d.transpose(self.d_perm)
        c_t = None if bound.c is None else bound.c.transpose(self.d_perm)
        loop_shape = d_t.shape[:lead]
        rows = left.shape[0] // count
        block_shape = d_t.shape[lead:]
        cols, flip = right.shape[1], self.flip_temp
        temp = scratch.empty((cols, rows) if flip else (rows, cols), self.compute)
        t = (temp.T if flip else temp).reshape(block_shape)  # a view either way
        for j in range(count):
            idx = np.unravel_index(j, loop_shape)
            if flip:  # T^T = B^T A^T: as this machine's BLAS writes faster
                np.matmul(right.T, left[j * rows:(j + 1) * rows].T, out=temp)
            else:
                np.matmul(left[j * rows:(j + 1) * rows], right, out=temp)
            self._store(t, d_t[idx], None if c_t is None else c_t[idx], bound, threads)

    def _gemm_batch_blocked(self, left: np.ndarray, right: np.ndarray, shape: tuple[int, ...],
                            bound: BoundProduct, threads: int | None) -> bool:
        """Run a batch in groups of GEMMs, each stored into its slice of D while in cache.

        Each group's temporary fits BLOCK_BYTES and is stored with the epilogue before the
        next group runs. False (nothing run) where the whole temporary fits, or not even one
        GEMM's does. The batch's first label is cut: ``iqmoc,oti->iqctm`` (12 GEMMs of
        25200x31x16, F64, a 75 MB temporary) took 30.4 ms whole (GEMMs 10.2, store 15.5) and
        21.9 ms in groups of two on a 2-core EPYC (pytblis: 21.5).
        """
        item = np.dtype(self.compute).itemsize
        per = prod(shape[1:]) * item
        if per * shape[0] <= BLOCK_BYTES or per > BLOCK_BYTES:
            return False
        d_t = bound.d.transpose(self.d_perm)
        if abs(d_t.strides[0]) < GROUP_MIN_STRIDE:
            return False  # each group's slice of D would be pieces of every page of D
        multiply = parallel_matmul if self.split_batches else _matmul
        group = max(1, BLOCK_BYTES // per)
        c_t = None if bound.c is None else bound.c.transpose(self.d_perm)
        temp = scratch.empty((min(group, shape[0]), *shape[1:]), self.compute)

        def cut(x: np.ndarray, s: slice) -> np.ndarray:
            return x if x.ndim < len(shape) or x.shape[0] == 1 else x[s]

        for start in range(0, shape[0], group):
            part = slice(start, min(start + group, shape[0]))
            t = temp[:part.stop - part.start]
            multiply(cut(left, part), cut(right, part), t, threads)
            self._store(t, d_t[part], None if c_t is None else c_t[part], bound, threads)
        return True

    def _elementwise(
        self, a: np.ndarray, b: np.ndarray, bound: BoundProduct, threads: int | None
    ) -> tuple[Any, Written, int]:
        h, nfa, nfb = self.h_shape, len(self.fa), len(self.fb)
        ext = self.spec.extent
        a_b = a.reshape((*h, *(ext(x) for x in self.fa), *(1,) * nfb))
        b_b = b.reshape((*h, *(1,) * nfa, *(ext(x) for x in self.fb)))
        out = self._direct_out(bound, self.result_shape)
        direct = out is not None
        if out is None:
            out = scratch.empty(self.result_shape, self.compute)
        parallel_multiply(a_b, b_b, out, threads)
        return out, Written.DIRECT if direct else Written.TEMP, 0

    def _dot(
        self, a: np.ndarray, b: np.ndarray, bound: BoundProduct, threads: int | None
    ) -> tuple[Any, Written, int]:
        h, k = self.h_shape, self.k
        rows = (*h, k)
        a1, b1 = _reshape_view(a, rows), _reshape_view(b, rows)
        streams = a1 is not None and b1 is not None and bool(a1.strides[-1] and b1.strides[-1])
        if not h and not streams and a.shape == b.shape and 0 in (*a.strides, *b.strides):
            # zero strides: np.dot would copy; einsum's loop does not
            axes = list(range(a.ndim))
            return np.einsum(a, axes, b, axes, []), Written.TEMP, 0
        # an operand in another order: copied into the labels' order (through cache tiles),
        # then one dot per batch element; einsum's loop over the strided views took 7.4 ms
        # where this takes 2.1 (dabc,cabd->, 1.9M F64 elements), and NumPy's reshape copy
        # 0.53 ms where this takes 0.14 (badc,bcda->d, 77k F32 elements)
        copied = 0
        flat = []
        for x, x1 in ((a, a1), (b, b1)):
            if x1 is None or (not h and not x1.strides[-1]):  # (batched dots read zero strides)
                packed = scratch.empty(x.shape, x.dtype)
                parallel_copyto(packed, x, threads)
                copied += packed.nbytes
                x1 = packed.reshape(rows)
            flat.append(x1)
        if not h or k > DOT_BLOCK:  # long rows: blocked, added pairwise
            return _blocked_dot(flat[0], flat[1]), Written.TEMP, copied
        out = self._direct_out(bound, h)
        return (_dots(flat[0], flat[1], out), Written.DIRECT if out is not None else Written.TEMP,
                copied)

    # ----------------------------------------------------------------- epilogue
    def _finish(self, result: Any, mode: Written, bound: BoundProduct, threads: int | None) -> None:
        """D = op_D(alpha * result + beta * op_C(C)) for the kernel's ``mode``.

        See :class:`Written`.
        """
        if mode is Written.DONE:
            return
        if mode is Written.DIRECT and bound.c is not None:  # D = op_D(alpha D + beta op_C(C))
            spec = self.spec
            kernels.fused(bound.d, bound.d, None, bound.c, alpha=bound.alpha, beta=bound.beta,
                          conj_c=spec.c.conjugates,
                          conj_out=spec.d.conjugates,
                          threads=threads)
            return
        if mode is Written.DIRECT:
            alpha = bound.alpha
            if alpha != 1:
                np.multiply(result, np.asarray(alpha).astype(self.compute)[()], out=result)
            if self.spec.d.conjugates:
                np.conjugate(result, out=result)
            return
        d_t = bound.d if self.d_perm_id else bound.d.transpose(self.d_perm)
        c_t = None if bound.c is None else bound.c.transpose(self.d_perm)
        self._store(np.asarray(result), d_t, c_t, bound, threads)

    def _store(self, r: np.ndarray, d_t: np.ndarray, c_t: np.ndarray | None,
               bound: BoundProduct, threads: int | None) -> None:
        """Write op_D(alpha r + beta op_C(C)) into ``d_t`` (views in the plan's D order).

        ``r`` lacks the broadcast (D-only) axes, which come last in ``d_t``; it is a temporary
        and may be overwritten.
        """
        spec = self.spec
        if d_t.ndim == 0 and c_t is None and bound.alpha == 1 and not spec.d.conjugates and (
                spec.d.datatype.is_complex or not np.iscomplexobj(r)):
            d_t[()] = r  # a full contraction's one number
            return
        r = r.reshape(d_t.shape[:d_t.ndim - self.ic] + (1,) * self.ic)
        scale, weight = complex(bound.alpha), complex(bound.beta)
        if r.dtype == np.float32 and spec.d.datatype in _HALVES and (c_t is None or (
                spec.c.datatype in _CONVERTED_C and self._round_free(spec.c.datatype) and (
                    same_layout(c_t, d_t) or not np.may_share_memory(c_t, d_t)))) and (
                scale.imag == 0 and weight.imag == 0):
            # F32 sums into F16 or BF16: scaled, added to C and rounded in one pass through
            # cache tiles (lnijzk's BF16 D: the permuted store took 12.4 ms on two threads
            # through NumPy's casting loop, C's conversion before it 8.9 more)
            parallel_convert(d_t, r, c_t, scale.real, 0.0 if c_t is None else weight.real,
                             threads)
            return
        conj_c = spec.c.conjugates
        if d_t.size >= kernels.SMALL_COPY and kernels.supports(r, d_t, c_t) and (
                c_t is None or self._round_free(spec.c.datatype)):
            # One pass: D = op_D(alpha r + beta op_C(C)), whatever D's and C's layouts.
            kernels.fused(d_t, r, None, c_t, alpha=bound.alpha, beta=bound.beta,
                          conj_c=conj_c, conj_out=spec.d.conjugates,
                          threads=threads)
            return
        if bound.alpha != 1:
            alpha = np.asarray(bound.alpha).astype(self.compute)[()]
            r = np.multiply(r, alpha, out=r) if r.base is None else r * alpha
        conj_d = spec.d.conjugates
        if c_t is not None and self.direct_ok and not conj_d and not (
            spec.c.conjugates
        ) and same_layout(c_t, d_t) and self._round_free(spec.c.datatype):
            # In-place accumulation on D's own memory: D = beta * D + alpha * result.
            beta = np.asarray(bound.beta).astype(self.compute)[()]
            if beta != 1:
                np.multiply(d_t, beta, out=d_t)
            np.add(d_t, r, out=d_t)
            return
        if c_t is not None:
            c_val, copied = self._prepare(c_t, spec.c, (), tuple(range(c_t.ndim)), threads)
            beta = np.asarray(bound.beta).astype(self.compute)[()]
            if copied and c_val.shape == r.shape:  # our converted copy: summed in place
                np.multiply(c_val, beta, out=c_val)
                np.add(c_val, r, out=c_val)  # into the copy: r may be a NumPy scalar (0-d)
                r = c_val
            else:
                total = np.multiply(c_val, beta, dtype=self.compute)
                total += r
                r = total
        if conj_d:
            r = np.conjugate(r)
        if np.iscomplexobj(r) and not spec.d.datatype.is_complex:
            r = r.real
        parallel_copyto(d_t, r, threads)

    # ----------------------------------------------------------------- BF16 on tiles
    def _tiles_fit(self) -> bool:
        """Whether blas computes this product with ``_amx.c``'s kernels, as SPEC says.

        GEMMs whose A and B are both BF16 (or both F16) and used as they are: no isolated
        sums, no rounding that loses bits (DEFAULT, the matching *_ACCUM_F32 precision, or an
        F32/F64 one), products and sums in F32, D stored as BF16, F16 or F32, no broadcast
        labels. They run on the AMX tiles or, without them, on AVX512-BF16 vectors; GEMVs (one
        side of 1) on AVX-512 vectors. The tiles multiply BF16 pairs exactly and add in F32, as
        the F32 GEMM on converted copies does, without the copies (a 2048x1024 by 1024x1024
        product took 22 ms that way and 5 ms on the tiles, 2-core Xeon); an F16 number is split
        exactly into two BF16 ones, four tile products per multiply-add. GEMVs are
        memory-bound: 35-42 GB/s from a BF16 matrix here, against 20-27 for torch's matvec.
        """
        spec = self.spec
        low = spec.a.datatype
        return (self.kind is Kind.GEMM and not spec.classes.IC and not self.a_reduce
                and not self.b_reduce and self.compute == np.float32
                and low in (Datatype.BF16, Datatype.F16) and spec.b.datatype is low
                and spec.d.datatype in (Datatype.BF16, Datatype.F16, Datatype.F32)
                and self._round_free(low)
                and (bf16_tiles() != "" or (min(self.m, self.n) == 1 and bf16_vectors())))

    def _tile_view(self, x: np.ndarray, perm: tuple[int, ...],
                   shape: tuple[int, int, int], operand: bool = False) -> np.ndarray | None:
        """``x`` permuted and reshaped to ``shape`` (batch, rows, columns) as a view, if any.

        ``operand``: also ``None`` for an A or B whose batch runs fastest through memory
        (closer than a cache line and than its rows and columns) and that is larger than
        BATCH_INTERLEAVED_BYTES: each batch's GEMM would read every line of it, for a few of
        the line's numbers (qtkp,tqegk->pgek: B's 33 MB read 50 times, 52 ms; copied in
        batch order first, 12 ms).
        """
        view = _reshape_view(x.transpose(perm), shape)
        if view is None or not view.flags.aligned:
            return None
        if operand and shape[0] > 1 and view.nbytes > BATCH_INTERLEAVED_BYTES:
            h, r, c = (abs(st) for st in view.strides)
            if h < 64 and h < min(r if shape[1] > 1 else h + 1, c if shape[2] > 1 else h + 1):
                return None
        return view

    @staticmethod
    def _copied(x: np.ndarray, perm: tuple[int, ...], threads: int | None) -> np.ndarray:
        """``x.transpose(perm)`` copied into a contiguous array.

        Shared out over threads, run by run or through cache tiles where those pay
        (:func:`parallel_copyto`): kvpujbh's 28 MB of BF16 in runs of 11 numbers took 15.9 ms
        through NumPy's copy, 6.7 ms so.
        """
        src = x.transpose(perm)
        out = np.empty(src.shape, src.dtype)
        parallel_copyto(out, src, threads)
        return out

    def _run_tiles(self, bound: BoundProduct, threads: int | None) -> Status | None:
        """D = alpha A B + beta C with the tiles (see _tiles_fit); ``None``: not this time.

        The GEMM writes D itself, the epilogue fused (one rounding into D's type), where D and
        C are views of shape (batch, m, n) and C is not D; otherwise it writes an F32
        temporary that the usual epilogue stores. ``None`` (nothing written but possibly D's
        own memory, recomputed by the caller) where an operand is not a view of that shape, or
        where the tiles decline (subnormal inputs, which they would read as zero).
        """
        h, m, n, k = prod(self.h_shape), self.m, self.n, self.k
        if np.may_share_memory(bound.d, bound.a) or np.may_share_memory(bound.d, bound.b):
            return None
        # an operand no view maps (its summed labels in another order than the other's) is
        # copied in that order, still BF16: cgblsz,zslt->gbct (720x105x1722) 3.9 ms through
        # F32 copies and the F32 GEMM, 1.3 ms so
        copied = 0
        a = self._tile_view(bound.a, self.a_perm, (h, m, k), operand=True)
        if a is None:
            a = self._copied(bound.a, self.a_perm, threads).reshape(h, m, k)
            copied += a.nbytes
        b = self._tile_view(bound.b, self.b_perm, (h, k, n), operand=True)
        if b is None:
            b = self._copied(bound.b, self.b_perm, threads).reshape(h, k, n)
            copied += b.nbytes
        if self.swap:  # D's fastest labels are B's: D^T = B^T A^T writes D along its rows
            a, b = b.transpose(0, 2, 1), a.transpose(0, 2, 1)
        shape = (h, n, m) if self.swap else (h, m, n)
        alpha, beta = complex(bound.alpha), complex(bound.beta)
        c_in = bound.c if beta != 0 else None
        d = self._tile_view(bound.d, self.d_perm, shape)
        c = None if c_in is None else self._tile_view(c_in, self.d_perm, shape)
        fused = (d is not None and alpha.imag == 0 and beta.imag == 0
                 and (c_in is None or (c is not None and c.dtype.name in _TILE_C_TYPES
                                       and not np.may_share_memory(c_in, bound.d))))
        if fused:
            assert d is not None
            used = bf16_gemm(a, b, d, c, alpha.real, beta.real)
            if used is None:
                return None
            return Status(backend="blas", algorithm=self.algorithm, flops=self.spec.flops,
                          bytes_allocated=used + copied)
        with scratch.lease():
            out = scratch.empty(shape, np.float32)
            used = bf16_gemm(a, b, out)
            if used is None:
                return None
            self._finish(out, Written.TEMP, bound, threads)
        return Status(backend="blas", algorithm=self.algorithm, flops=self.spec.flops,
                      bytes_allocated=used + out.nbytes + copied)

    def _round_free(self, storage: Datatype) -> bool:
        return self.rounding is None or storage.real in _EXACT_IN[self.rounding]

    def _fast_gemm(self, bound: BoundProduct) -> Status | None:
        """Return the common case in a few NumPy calls.

        A GEMM on (permuted) A and B written straight into D, then the in-place epilogue
        (alpha, beta op_C(C), op_D).

        The reshapes were found by a first full run on these strides: the same strides give a
        view again where that run had one, and a copy (NumPy's, of an operand below
        :data:`kernels.SMALL_COPY` elements) where that run packed the operand. ``None``: not
        this case.
        """
        recipe = self._recipe
        if recipe is None:
            return None
        a, b, d, c = bound.a, bound.b, bound.d, bound.c
        if recipe[0] != (a.strides, b.strides, d.strides) or not (
                a.flags.aligned and b.flags.aligned and d.flags.aligned):
            return None
        epilogue = c is not None or bound.alpha != 1 or self._conj_d
        if (epilogue and not self._kernel_epilogue) or (c is not None and not (
                self.c_in_place and not np.may_share_memory(c, d))):
            return None  # no epilogue kernel, or the GEMM would overwrite C before it is read
        a3_shape, b3_shape, out_shape = recipe[1]
        a3 = a if self.a_perm_id else a.transpose(self.a_perm)
        b3 = b if self.b_perm_id else b.transpose(self.b_perm)
        out = d if self.d_perm_id else d.transpose(self.d_perm)
        if a3_shape is not None:
            a3 = a3.reshape(a3_shape)
        if b3_shape is not None:
            b3 = b3.reshape(b3_shape)
        if out_shape is not None:
            out = out.reshape(out_shape, copy=False)  # a view of D, as on the first run
        if self.swap:
            np.matmul(b3.swapaxes(-1, -2), a3.swapaxes(-1, -2), out=out)
        else:
            np.matmul(a3, b3, out=out)
        if epilogue:
            kernels.fused(d, d, None, c, alpha=bound.alpha, beta=bound.beta,
                          conj_c=self._conj_c, conj_out=self._conj_d)
        return Status(backend="blas", algorithm=self.algorithm, flops=self.spec.flops,
                      bytes_copied=recipe[2], bytes_allocated=recipe[2])

    def _learn_recipe(self, bound: BoundProduct, copied: int, mode: Written) -> None:
        """Remember a full run that was one GEMM written into D.

        On views of A and B, or on small copies of them (which a reshape makes as well).
        """
        spec = self.spec
        if (self.kind is not Kind.GEMM or mode is not Written.DIRECT or self.split_batches
                or self.route is not None or not (self.a_plain and self.b_plain)
                or bound.a.dtype != self.compute or bound.b.dtype != self.compute
                or (copied and max(spec.a.size, spec.b.size) >= kernels.SMALL_COPY)):
            return
        h, m, n, k = self.h_shape, self.m, self.n, self.k
        shapes = ((*h, m, k), (*h, k, n), (*h, n, m) if self.swap else (*h, m, n))
        views = (bound.a.transpose(self.a_perm), bound.b.transpose(self.b_perm),
                 bound.d.transpose(self.d_perm))
        # None: the (permuted) operand already has the GEMM's shape, no reshape needed.
        self._recipe = ((bound.a.strides, bound.b.strides, bound.d.strides),
                        tuple(None if v.shape == sh else sh
                              for v, sh in zip(views, shapes, strict=True)), copied)

    def run(self, bound: BoundProduct, executor: Executor | None) -> Status:
        """Compute D in place of ``bound.d``."""
        if executor is None and self._recipe is not None:
            fast = self._fast_gemm(bound)
            if fast is not None:
                return fast
        spec = self.spec
        threads = None if executor is None else executor.threads
        if bound.d.size == 0:
            return Status(backend="blas", algorithm=self.algorithm, flops=spec.flops)
        if self.tiles:
            tiled = self._run_tiles(bound, threads)
            if tiled is not None:
                return tiled
        if self.small is not None:
            self._run_small(bound)
            return Status(backend="blas", algorithm=self.algorithm, flops=spec.flops,
                          bytes_allocated=bound.d.nbytes)
        if self.route is not None:
            self._run_route(bound, threads)
            return Status(backend="blas", algorithm=self.algorithm, flops=spec.flops)
        with scratch.lease():  # the copies and temporaries below: warm memory, given back
            return self._run_full(bound, executor, threads)

    def _run_full(self, bound: BoundProduct, executor: Executor | None,
                  threads: int | None) -> Status:
        """Prepare the operands, run the kernel, finish D (inside a scratch lease)."""
        spec = self.spec
        # NumPy skips BLAS for misaligned data (e.g. buffers deserialized by Dask) and runs a
        # plain loop several times slower; the fused kernel reads them at memory speed.
        if self.reduce_ok and not (bound.a.flags.aligned and bound.b.flags.aligned):
            self._run_route(bound, threads, Route.REDUCE)
            return Status(backend="blas", algorithm="kernel: fused multiply-reduce (operands "
                          "not aligned for BLAS)", flops=spec.flops)
        # "Plain" operands need neither rounding, conversion, conjugation nor isolated sums:
        # they are used as views and only _matrix may copy them (when BLAS cannot read them).
        if self.a_plain:
            a, ca = (bound.a if self.a_perm_id else bound.a.transpose(self.a_perm)), 0
        else:
            a, ca = self._prepare(bound.a, spec.a, self.a_reduce, self.a_perm, threads)
        if self.b_plain:
            b, cb = (bound.b if self.b_perm_id else bound.b.transpose(self.b_perm)), 0
        else:
            b, cb = self._prepare(bound.b, spec.b, self.b_reduce, self.b_perm, threads)
        result, mode, cm = self._kernel(a, b, bound, threads)
        self._finish(result, mode, bound, threads)
        copied = ca + cb + cm
        # Learned from a real run rather than derived at plan time: the recipe then repeats
        # exactly the reshapes this run made, for these strides (a later run compares them).
        if self._recipe is None and executor is None:
            self._learn_recipe(bound, copied, mode)
        temp = int(np.asarray(result).nbytes) if mode is Written.TEMP else 0
        if mode is Written.DONE:
            temp = BLOCK_BYTES
        return Status(
            backend="blas", algorithm=self.algorithm, flops=spec.flops, bytes_copied=copied,
            bytes_allocated=copied + temp,
        )


class BlasBackend(Stateless):
    """Fast CPU backend on NumPy (BLAS GEMM, TTGT, elementwise and dot kernels)."""

    name = "blas"
    capabilities = Capabilities(prectypes=ALL_PRECTYPES - {Prectype.F16F16_ACCUM_F16})

    def available(self) -> tuple[bool, str]:
        """Report availability: always (NumPy only)."""
        return True, ""

    def plan(self, spec: ContractionSpec, executor: Executor | None) -> BlasPlan:
        """Decide the algorithm for ``spec``."""
        self.capabilities.require(spec, self.name)
        return BlasPlan(spec)


#: Longest dot product BLAS sums in one call; longer ones are cut into dots of this length
#: whose results are added pairwise (BLAS adds into a few running sums: on a 10**6-element
#: F32 dot its error was 5x numpy.einsum's; blocked, it is numpy's).
DOT_BLOCK = 1 << 14
#: Datatypes whose long dots BLAS runs whole: its running sums lose nothing numpy's keep.
_BLAS_DOT_WIDE = (np.dtype(np.float64), np.dtype(np.complex128))


def _dots(x: np.ndarray, y: np.ndarray, out: np.ndarray | None = None) -> Any:
    """Return the dot products of ``x`` and ``y`` along their last axis (BLAS's, per row)."""
    if np.iscomplexobj(x) or np.iscomplexobj(y):
        return np.einsum("...k,...k->...", x, y, out=out)  # vecdot would conjugate x
    return np.vecdot(x, y, out=out)


def _matmul(left: np.ndarray, right: np.ndarray, out: np.ndarray, threads: int | None) -> None:
    """``np.matmul`` into ``out`` (the BLAS's threads share each GEMM)."""
    np.matmul(left, right, out=out)


def _blocked_dot(x: np.ndarray, y: np.ndarray) -> Any:
    """Return ``sum(x * y)`` over the last axis: dots of :data:`DOT_BLOCK`, added pairwise.

    One long F64 or C128 dot is BLAS's own, on its threads: its error stays at numpy's (on
    10**6 and 10**7 normal pairs, 1.5e-18 and 2.6e-18 of the sum of the products' magnitudes,
    numpy.einsum's 1.7e-18 and 5.7e-19), and it ran in 81 us where the blocks took 146 (331,776
    elements, the energy term ``ijab,ijab->`` of a CC code at o=12, v=48).
    """
    n = x.shape[-1]
    if n <= DOT_BLOCK or (x.ndim == 1 and x.dtype == y.dtype and x.dtype in _BLAS_DOT_WIDE):
        return np.dot(x, y) if x.ndim == 1 else _dots(x, y)
    whole = n - n % DOT_BLOCK
    head = x.shape[:-1]
    xs = x[..., :whole].reshape((*head, -1, 1, DOT_BLOCK))
    ys = y[..., :whole].reshape((*head, -1, DOT_BLOCK, 1))
    parts = np.empty(xs.shape[:-2], np.result_type(x, y))
    # the blocks' dots shared out over the BLAS's threads (both cores stream the operands)
    if not summed_gemm(parts[..., None, None], xs, ys, 0, default_threads()):
        parts = _dots(xs[..., 0, :], ys[..., 0])
    total = np.sum(parts, axis=-1)  # pairwise
    if whole < n:
        total = total + _dots(x[..., whole:], y[..., whole:])
    return total


def _flips(rows: int, cols: int, k: int, compute: np.dtype[Any]) -> bool:
    """Whether a GEMM into a ``rows x cols`` temporary should compute it transposed.

    Where D is not written in place, the temporary's orientation is free: a thin one is laid
    out as this machine's BLAS writes faster (:func:`pytapp.machine.wide_is_faster`, measured
    once per machine), and the store into D reads it transposed. OpenBLAS on a Zen EPYC took
    1.27-1.6x as long in F64 to write 31500x70 or 31500x8 results tall as wide (k = 351-1500):
    ``agntz,aqg->nztq`` (m = 31500, n = 70, k = 351, in 45 blocks) 32.6 -> 25.3 ms,
    ``pysgaw,gjuys->apwuj`` (1380x69, k = 6656) 32.9 -> 26.3, ``jetrw,itmjw->emir`` (280x2736,
    k = 1500) 29.0 -> 27.1.
    """
    name = np.dtype(compute).name
    wide = wide_is_faster(rows, cols, Datatype.from_name(name).short_name, k) if name in (
        "float32", "float64", "complex64", "complex128") else None
    return wide is not None and wide != (cols > rows)
