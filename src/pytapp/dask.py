"""TAPP products on Dask arrays: every block a pytapp plan, partial products tree-reduced.

``contract`` builds a lazy ``dask.array`` graph: free and Hadamard labels index the output
blocks; a contracted (or isolated, Case 4) label split over several chunks becomes a
partial-product axis summed by a tree reduction (``split_every``); alpha and beta op_C(C) are
applied once, in the last step, blockwise on C's chunks. Each block is computed by
:func:`pytapp.contract`, whose plan cache keeps one TAPP plan per block layout in each worker,
so blocks run at single-machine speed. :class:`DaskRunner` makes ``TensorProduct.execute``
run on a cluster (``handle.create_executor(dask=client)``) and stream D's blocks into any
array that takes slice assignment (NumPy, ``np.memmap``, zarr).

Examples
--------
>>> import numpy as np, dask.array as da
>>> a = da.ones((4, 6), chunks=(2, 3)); b = da.ones((6, 2), chunks=(3, 2))
>>> contract("ik,kj->ij", a, b, alpha=0.5).compute().tolist()[0]
[3.0, 3.0]
"""

from __future__ import annotations

import mmap
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dask.array as da
import numpy as np

from pytapp.analysis.letters import words
from pytapp.analysis.subscripts import parse_subscripts
from pytapp.contraction import contract as contract_blocks
from pytapp.contraction import parse_expression
from pytapp.datatypes import Datatype, ElementOp, as_element_op, datatype_of, promote
from pytapp.errors import ErrorCode, ExecutorError, error_for
from pytapp.executor import register_runner
from pytapp.expression import normalize_call, result_datatype
from pytapp.network import Network
from pytapp.operands import convert_scalar
from pytapp.precision import Prectype, as_prectype

__all__ = ["DEFAULT_CHUNK_BYTES", "DaskRunner", "MemmapSource", "PartialWriteError", "as_dask",
           "contract", "einsum", "store", "worker_chunk_bytes"]

#: Chunk size budget for arrays that are not dask arrays yet (bytes per chunk).
DEFAULT_CHUNK_BYTES = 64 << 20

_LOW = (Datatype.F16, Datatype.BF16)


class MemmapSource:
    """A ``.npy`` file (or raw memmap) that each worker opens itself.

    A dask array over it ships a file name, not the data. Indexing returns NumPy arrays.
    """

    def __init__(self, filename: str, dtype: Any, shape: tuple[int, ...], offset: int = 0,
                 order: str = "C") -> None:
        self.filename, self.dtype, self.shape = filename, np.dtype(dtype), tuple(shape)
        self.offset, self.order, self.ndim = offset, order, len(shape)

    @classmethod
    def of(cls, mm: np.memmap) -> MemmapSource:
        """Return the source of a memmap (the whole mapped array)."""
        order = "F" if mm.flags.f_contiguous and not mm.flags.c_contiguous else "C"
        return cls(str(mm.filename), mm.dtype, mm.shape, int(mm.offset), order)

    def __getitem__(self, index: Any) -> np.ndarray:
        mm = np.memmap(self.filename, dtype=self.dtype, mode="r", shape=self.shape,
                       offset=self.offset, order="F" if self.order == "F" else "C")
        return np.array(mm[index])


def as_dask(x: Any, chunk_bytes: int = DEFAULT_CHUNK_BYTES, role: str = "operand") -> Any:
    """``x`` as a dask array.

    Dask arrays as they are; memmaps read by the workers from their file; anything else (NumPy,
    zarr) chunked within ``chunk_bytes``.

    Raises
    ------
    OperandMismatchError
        Code 20 for data without a TAPP datatype.
    """
    if isinstance(x, da.Array):
        datatype_of(x.dtype, role)
        return x
    if isinstance(x, np.memmap) and x.filename is not None and (
            x.flags.c_contiguous or x.flags.f_contiguous) and isinstance(x.base, mmap.mmap):
        # the whole mapping (a slice of a memmap keeps its parent's offset: read it as data)
        source: Any = MemmapSource.of(x)
    else:
        source = x if hasattr(x, "shape") and hasattr(x, "dtype") else np.asarray(x)
    datatype_of(source.dtype, role)
    chunks = da.core.normalize_chunks("auto", source.shape, limit=chunk_bytes,
                                      dtype=source.dtype)
    return da.from_array(source, chunks=chunks, asarray=True, fancy=False)


def _labels_of(expr: str, a: Any, b: Any, c: Any) -> tuple[str, str, str]:
    la, lb, ld = parse_expression(expr)
    for role, x, labels in (("A", a, la), ("B", b, lb), ("C", c, ld)):
        if x is not None and x.ndim != len(labels):
            raise error_for(ErrorCode.NEGATIVE_NMODES,
                            f"{role} has {x.ndim} modes (shape {x.shape}) but {expr!r} gives it "
                            f"{len(labels)} labels {labels!r}; give one label per mode")
    if len(set(ld)) != len(ld):
        raise error_for(ErrorCode.UNSUPPORTED,
                        f"D's labels {ld!r} repeat a label; pytapp.dask writes whole tensors, "
                        "not diagonals: use pytapp.contract for this product")
    return la, lb, ld


def _extents(la: str, lb: str, ld: str, a: Any, b: Any, c: Any,
             allow_broadcast: bool) -> dict[str, int]:
    sizes: dict[str, int] = {}
    codes = {"A": ErrorCode.EXTENT_MISMATCH_AB, "B": ErrorCode.EXTENT_MISMATCH_AB,
             "C": ErrorCode.C_D_EXTENTS}
    for role, x, labels in (("A", a, la), ("B", b, lb), ("C", c, ld)):
        if x is None:
            continue
        for label, extent in zip(labels, x.shape, strict=True):
            if sizes.setdefault(label, extent) != extent:
                raise error_for(codes[role], f"label {label!r} has extent {sizes[label]} and "
                                             f"{extent} ({role}); extents of a label must agree")
    for label in ld:
        if label not in la and label not in lb and (not allow_broadcast or c is None):
            raise error_for(ErrorCode.LABEL_NOT_IN_INPUTS,
                            f"label {label!r} of D is in neither A nor B; pass C (it gives the "
                            "extent) and allow_broadcast=True")
    return sizes


def contract(expr: str, a: Any, b: Any, c: Any = None, *, alpha: Any = 1, beta: Any = None,
             op_a: Any = ElementOp.IDENTITY, op_b: Any = ElementOp.IDENTITY,
             op_c: Any = ElementOp.IDENTITY, op_d: Any = ElementOp.IDENTITY,
             prec: Any = Prectype.DEFAULT, allow_broadcast: bool = False,
             backend: str | None = None, split_every: int | None = None,
             chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Any:
    """``D = op_D(alpha op_A(A) op_B(B) + beta op_C(C))`` as a lazy dask array.

    Parameters
    ----------
    expr
        ``'ik,kj->ij'``, as for :func:`pytapp.contract`.
    a, b, c
        Dask arrays, or arrays to wrap (memmaps stay on disk; others are chunked within
        ``chunk_bytes``). Chunkings that differ along a label are unified.
    alpha, beta, op_a, op_b, op_c, op_d, prec, allow_broadcast
        As for :func:`pytapp.contract`.
    backend
        The pytapp backend of every block product (``None``: the default).
    split_every
        Fan-in of the tree that sums partial products over split contracted labels.

    Returns
    -------
    dask.array.Array
        Lazy; ``.compute()``, ``da.store`` or :func:`store` it.

    Raises
    ------
    TappError
        13 labels that do not match the modes; 1/7 extents that disagree; 4 a label of D in
        neither input (without C and allow_broadcast); 20 datatypes; 16/17 precision and ops;
        18 repeated labels in D. Raised here, before any block runs.
    """
    ops = [as_element_op(op, r) for op, r in zip((op_a, op_b, op_c, op_d), "ABCD",
                                                   strict=True)]
    prectype = as_prectype(prec)
    a, b = as_dask(a, chunk_bytes, "A"), as_dask(b, chunk_bytes, "B")
    c = None if c is None else as_dask(c, chunk_bytes, "C")
    la, lb, ld = _labels_of(expr, a, b, c)
    _extents(la, lb, ld, a, b, c, allow_broadcast)
    if beta is None:
        beta = 0 if c is None else 1
    dts = [datatype_of(x.dtype) for x in (a, b, c) if x is not None]
    final = promote(*dts)
    convert_scalar(alpha, final, "alpha")
    convert_scalar(beta, final, "beta")
    if beta == 0:
        c = None
    a, b = _unify(a, la, b, lb)
    summed = [x for x in dict.fromkeys(la + lb) if x not in ld]
    split = [x for x in summed if _numblocks(x, a, la, b, lb) > 1]
    kept = "".join(x for x in ld if x in la or x in lb)
    if not split:  # every block is final: one TAPP product per block, C included
        return _single_pass(la, lb, ld, a, b, c, alpha, beta, ops, prectype,
                            allow_broadcast, backend, final)
    partial_dt = Datatype.F32 if final in _LOW else final
    p = _partial_products(la, lb, kept, split, a, b, ops, prectype, backend, partial_dt)
    p = p.sum(axis=tuple(range(len(kept), len(kept) + len(split))), split_every=split_every,
              dtype=partial_dt.numpy_dtype)
    if c is None and alpha == 1 and ops[3] is ElementOp.IDENTITY and partial_dt is final \
            and kept == ld:
        return p
    return _epilogue(kept, ld, p, c, alpha, beta, ops, allow_broadcast, backend, final)


def _numblocks(label: str, a: Any, la: str, b: Any, lb: str) -> int:
    for x, labels in ((a, la), (b, lb)):
        if label in labels:
            return int(x.numblocks[labels.index(label)])
    return 1


def _unify(a: Any, la: str, b: Any, lb: str) -> tuple[Any, Any]:
    """Equal chunks along every label A and B share (and along A's own repeated labels)."""
    _, (a, b) = da.core.unify_chunks(a, la, b, lb)
    return a, b


def _single_pass(la: str, lb: str, ld: str, a: Any, b: Any, c: Any, alpha: Any, beta: Any,
                 ops: list[ElementOp], prec: Prectype, allow_broadcast: bool,
                 backend: str | None, final: Datatype) -> Any:
    expr = f"{la},{lb}->{ld}"
    dtype = final.numpy_dtype

    def block(x: Any, y: Any, z: np.ndarray | None = None) -> Any:
        x, y = _one(x), _one(y)
        return contract_blocks(expr, x, y, z, alpha=alpha, beta=beta if z is not None else 0,
                               op_a=ops[0], op_b=ops[1], op_c=ops[2], op_d=ops[3], prec=prec,
                               allow_broadcast=allow_broadcast, backend=backend,
                               out=np.empty([_block_extent(ch, x, la, y, lb, z, ld)
                                             for ch in ld], dtype=dtype))

    args: list[Any] = [a, la, b, lb] + ([] if c is None else [c, ld])
    return da.blockwise(block, ld, *args, dtype=dtype, concatenate=False,
                        meta=np.empty((0,) * len(ld), dtype=dtype))


def _one(x: Any) -> Any:
    """Return the block of a one-chunk contracted label.

    Blockwise (``concatenate=False``) passes a list per label not in the output; contracted
    labels split over several chunks are output axes of the partial products, so every such list
    here has one block.
    """
    while isinstance(x, list):
        if len(x) != 1:  # pragma: no cover - split labels are never summed by blockwise
            raise error_for(ErrorCode.UNSUPPORTED, "a block list of several chunks")
        x = x[0]
    return x


def _block_extent(label: str, x: np.ndarray, lx: str, y: np.ndarray, ly: str,
                  z: np.ndarray | None, lz: str) -> int:
    for arr, labels in ((x, lx), (y, ly), (z, lz)):
        if arr is not None and label in labels:
            return int(arr.shape[labels.index(label)])
    raise error_for(ErrorCode.LABEL_NOT_IN_INPUTS, f"label {label!r} has no extent")


def _partial_products(la: str, lb: str, kept: str, split: list[str], a: Any, b: Any,
                      ops: list[ElementOp], prec: Prectype, backend: str | None,
                      partial: Datatype) -> Any:
    """One partial product per block of the split labels (size-1 axes for them)."""
    expr = f"{la},{lb}->{kept}"
    dtype = partial.numpy_dtype

    def block(x: Any, y: Any) -> np.ndarray:
        x, y = _one(x), _one(y)
        shape = [_block_extent(ch, x, la, y, lb, None, "") for ch in kept]
        out = contract_blocks(expr, x, y, op_a=ops[0], op_b=ops[1], prec=prec,
                              backend=backend, out=np.empty(shape, dtype=dtype))
        return np.asarray(out).reshape(out.shape + (1,) * len(split))

    out_ind = kept + "".join(split)
    return da.blockwise(block, out_ind, a, la, b, lb, dtype=dtype, concatenate=False,
                        adjust_chunks={ch: 1 for ch in split},
                        meta=np.empty((0,) * len(out_ind), dtype=dtype))


def _epilogue(kept: str, ld: str, p: Any, c: Any, alpha: Any, beta: Any,
              ops: list[ElementOp], allow_broadcast: bool, backend: str | None,
              final: Datatype) -> Any:
    """D = op_D(alpha P + beta op_C(C)) blockwise: a TAPP product with a scalar one as B."""
    expr = f"{kept},->{ld}"
    dtype = final.numpy_dtype
    one = np.ones((), dtype=p.dtype)

    def block(x: np.ndarray, z: np.ndarray | None = None) -> Any:
        x = x if isinstance(x, np.ndarray) else np.array(x)  # a full sum gives a scalar
        shape = [_block_extent(ch, x, kept, one, "", z, ld) for ch in ld]
        return contract_blocks(expr, x, one, z, alpha=alpha, beta=beta if z is not None else 0,
                               op_c=ops[2], op_d=ops[3], allow_broadcast=allow_broadcast,
                               backend=backend, out=np.empty(shape, dtype=dtype))

    if c is None:
        return da.blockwise(block, ld, p, kept, dtype=dtype, concatenate=False,
                            meta=np.empty((0,) * len(ld), dtype=dtype))
    return da.blockwise(block, ld, p, kept, c, ld, dtype=dtype, concatenate=False,
                        meta=np.empty((0,) * len(ld), dtype=dtype))


def einsum(subscripts: Any, *operands: Any, optimize: Any = "auto", memory_limit: Any = None,
           backend: str | None = None, dtype: Any = None, split_every: int | None = None,
           chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Any:
    """:func:`pytapp.einsum` on dask arrays.

    Each pairwise step of the path is a :func:`contract` (blockwise TAPP plans, tree-reduced
    partial products). Lazy.

    Examples
    --------
    >>> import dask.array as da
    >>> x = da.ones((4, 4), chunks=2)
    >>> float(einsum("ij,jk,ki", x, x, x).compute())
    64.0
    """
    subs, ops = normalize_call(subscripts, operands)
    arrays = [as_dask(x, chunk_bytes, f"operand {i}") for i, x in enumerate(ops)]
    eq = parse_subscripts(subs, [x.ndim for x in arrays])
    net = Network(eq, [tuple(x.shape) for x in arrays], optimize=optimize,
                  memory_limit=memory_limit)
    dt = result_datatype([np.empty(0, dtype=x.dtype) for x in arrays], dtype)
    rename = eq.letter_map()

    def letters(labels: str) -> str:
        return "".join(rename[ch] for ch in labels)

    one = np.ones((), dtype=dt.numpy_dtype)
    slots: dict[int, Any] = {}
    for i, (x, prep, term) in enumerate(zip(arrays, net.prepared, eq.inputs, strict=True)):
        x = x.astype(dt.numpy_dtype) if x.dtype != dt.numpy_dtype else x
        if prep.drop:
            x = x[tuple(0 if ax in prep.drop else slice(None) for ax in range(x.ndim))]
        if prep.diagonal:
            kept = "".join(ch for ax, ch in enumerate(term) if ax not in prep.drop)
            x = contract(f"{letters(kept)},->{letters(prep.labels)}", x, one, backend=backend)
        slots[i] = x
    for step in net.steps:
        b = one if step.b is None else slots[step.b]
        slots[step.out] = contract(
            f"{letters(step.a_labels)},{letters(step.b_labels)}->{letters(step.out_labels)}",
            slots[step.a], b, backend=backend, split_every=split_every,
            chunk_bytes=chunk_bytes)
    return slots[net.steps[-1].out]


def store(result: Any, target: Any, client: Any = None,
          progress: Callable[[int, int], None] | None = None) -> Any:
    """Compute ``result`` block by block into ``target`` (anything taking slice assignment).

    With a ``distributed`` client, blocks are gathered as they finish and written by this
    process, so D never has to fit in one worker, nor the whole result in this process.
    ``progress(done, total)`` is called after each block.

    Raises
    ------
    PartialWriteError
        Code 33 when a block fails (a worker lost, a block's task erred): it lists the blocks
        written; the run's other blocks are cancelled, and storing again rewrites every block.
    """
    blocks = result.to_delayed().ravel()
    slices = list(da.core.slices_from_chunks(result.chunks))
    total = len(slices)
    if client is None:
        stored: list[tuple[slice, ...]] = []
        try:
            for blk, where in zip(blocks, slices, strict=True):
                target[where] = blk.compute()
                stored.append(where)
                if progress is not None:
                    progress(len(stored), total)
        except Exception as exc:
            raise PartialWriteError(stored, total, exc) from exc
        return target
    from distributed import as_completed

    futures = client.compute(list(blocks))
    index = {f.key: i for i, f in enumerate(futures)}
    written: list[tuple[slice, ...]] = []
    try:
        for done, future in enumerate(as_completed(futures), start=1):
            where = slices[index[future.key]]
            target[where] = future.result()
            written.append(where)
            future.release()
            if progress is not None:
                progress(done, total)
    except BaseException as exc:
        # Nothing of this run may keep running or stay in the scheduler as erred: the same
        # execute again must compute (and write) every block afresh.
        client.cancel(futures, force=True)
        keys = list(index)
        futures.clear()
        _await_forgotten(client, keys)
        if not isinstance(exc, Exception):
            raise
        raise PartialWriteError(written, total, exc) from exc
    return target


#: Longest wait (seconds) for the scheduler to forget a failed run's blocks.
FORGET_SECONDS = 10.0


def _await_forgotten(client: Any, keys: list[Any]) -> None:
    """Wait until the scheduler holds none of ``keys`` (at most :data:`FORGET_SECONDS`).

    A cancel is asynchronous, and a block's key depends only on its inputs: the same execute
    run again at once submitted keys the scheduler was still cancelling, and got its blocks
    back cancelled ("cancelled for reason: unknown").
    """
    def held(dask_scheduler: Any, keys: list[Any] = keys) -> int:
        return sum(key in dask_scheduler.tasks for key in keys)

    deadline = time.monotonic() + FORGET_SECONDS
    while time.monotonic() < deadline:
        try:
            if not client.run_on_scheduler(held):
                return
        except Exception:  # a scheduler that cannot be asked: nothing to wait for
            return
        time.sleep(0.02)


def _describe_block(where: tuple[slice, ...]) -> str:
    return "D[" + ", ".join(f"{s.start}:{s.stop}" for s in where) + "]"


class PartialWriteError(ExecutorError):
    """A distributed execute failed after writing some of D's blocks (SPEC section 5).

    ``blocks_written`` lists the slices of D that hold the new result; every other block of D
    keeps its old value. Running the same execute again rewrites every block.
    """

    def __init__(self, written: list[tuple[slice, ...]], total: int, cause: BaseException):
        self.blocks_written: tuple[tuple[slice, ...], ...] = tuple(written)
        shown = ", ".join(_describe_block(w) for w in written[:8])
        more = f" and {len(written) - 8} more" if len(written) > 8 else ""
        super().__init__(
            f"computing D block by block failed after {len(written)} of {total} blocks were "
            "written "
            f"({type(cause).__name__}: {cause}); blocks written: {shown or 'none'}{more} "
            "(.blocks_written lists them); every other block keeps its old value. Run the "
            "same execute again once the cluster is healthy: it rewrites every block",
            ErrorCode.INVALID_EXECUTOR,
        )


def worker_chunk_bytes(client: Any) -> int:
    """Return a chunk size for ``client``'s cluster.

    A twentieth of the smallest worker memory limit (a block product holds blocks of A, B, D and
    temporaries, beside what the worker itself needs), at most :data:`DEFAULT_CHUNK_BYTES`, at
    least 1 MiB.
    """
    try:
        workers = client.scheduler_info()["workers"].values()
        limits = [int(w["memory_limit"]) for w in workers if w.get("memory_limit")]
    except (AttributeError, KeyError, TypeError, ValueError):
        limits = []
    if not limits:
        return DEFAULT_CHUNK_BYTES
    return max(1 << 20, min(DEFAULT_CHUNK_BYTES, min(limits) // 20))


class DaskRunner:
    """Run ``TensorProduct.execute`` on a Dask cluster.

    Runs ``TensorProduct.execute`` on a Dask cluster (registered as the ``dask`` runner;
    see :meth:`pytapp.Handle.create_executor`).
    """

    def __init__(self, client: Any, chunk_bytes: int | None = None,
                 progress: Callable[[int, int], None] | None = None) -> None:
        self.client, self.progress = client, progress
        #: The pytapp Executor this runner serves (its ``blocking`` flag and pending list).
        self.executor: Any = None
        self.chunk_bytes = chunk_bytes if chunk_bytes is not None else worker_chunk_bytes(client)

    def execute(self, product: Any, alpha: Any, a: Any, b: Any, beta: Any, c: Any,
                d: Any) -> Any:
        """Validate every operand against the plan's descriptors, then stream D's blocks.

        Nothing is written before validation passes. If a block fails later (a worker dies),
        the blocks already written stay written, D is otherwise unchanged, the run's other
        blocks are cancelled, and :class:`PartialWriteError` (code 33) lists the blocks
        written; the same execute again rewrites every block.
        """
        from pytapp.status import Status

        spec = product.spec
        a_info, b_info, c_info, d_info = product.infos
        for role, x, info in (("A", a, a_info), ("B", b, b_info), ("C", c, c_info),
                              ("D", d, d_info)):
            if x is None:
                continue
            if tuple(x.shape) != info.extents or datatype_of(x.dtype, role) is not \
                    info.datatype:
                raise error_for(ErrorCode.OPERAND_MISMATCH,
                                f"{role} has shape {tuple(x.shape)} and dtype {x.dtype}; the "
                                f"plan expects {info.extents} and {info.datatype.name}")
        flags = getattr(d, "flags", None)
        if flags is not None and not flags.writeable:
            raise error_for(ErrorCode.READ_ONLY, "D is read-only; pass a writable array")
        if beta != 0 and c is None:
            raise error_for(ErrorCode.C_MISSING, "beta is not zero but C is None; pass C")
        expr = "{},{}->{}".format(*words((spec.a.labels, spec.b.labels, spec.d.labels),
                                         "pytapp.dask"))
        result = contract(expr, a, b, c if beta != 0 else None, alpha=alpha, beta=beta,
                          op_a=spec.a.op, op_b=spec.b.op, op_c=spec.c.op, op_d=spec.d.op,
                          prec=spec.prec, allow_broadcast=spec.allow_broadcast,
                          backend=product.backend_name, chunk_bytes=self.chunk_bytes)
        fields: dict[str, Any] = {"backend": f"dask:{product.backend_name}",
                                  "algorithm": "blockwise TAPP plans", "flops": spec.flops}
        if self.executor is None or self.executor.blocking:
            store(result, d, self.client, self.progress)
            return Status(**fields)
        # Non-blocking: the operands are checked; the blocks are computed and written by a
        # background thread, and the Status reports completion and the error, if any.
        status = Status.pending(_BACKGROUND.submit(store, result, d, self.client,
                                                   self.progress), **fields)
        self.executor.track(status)
        return status


#: Writes D's blocks for non-blocking executions (one at a time, in submission order).
_BACKGROUND = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pytapp-dask")


def _runner(executor: Any) -> DaskRunner:
    runner = DaskRunner(executor.dask, progress=getattr(executor, "progress", None))
    runner.executor = executor
    return runner


register_runner("dask", _runner)
