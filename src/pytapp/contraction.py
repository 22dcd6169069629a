"""``contract``: an einsum-style front end over cached TAPP plans.

Examples
--------
>>> import numpy as np
>>> a, b = np.arange(6.0).reshape(2, 3), np.ones((3, 2))
>>> contract("ik,kj->ij", a, b, backend="reference")
array([[ 3.,  3.],
       [12., 12.]])
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import numpy as np

from pytapp.datatypes import Datatype, ElementOp, as_element_op, datatype_of_data, promote
from pytapp.errors import ErrorCode, TappError, error_for
from pytapp.executor import Executor
from pytapp.handle import CachedPlan, Handle, default_backend_name
from pytapp.kernels.program import release_scratch
from pytapp.operands import to_ndarray
from pytapp.precision import Prectype, as_prectype
from pytapp.product import TensorProduct
from pytapp.tensor import TensorInfo
from pytapp.typing import ArrayLike, BackendName, ElementOpLike, PrectypeLike, Scalar

__all__ = ["backend_name", "clear_plan_cache", "contract", "leased_handle", "parse_expression",
           "plan_cache_info", "shared_handle"]

#: Most plans each shared handle keeps for :func:`contract` (least recently used dropped first).
PLAN_CACHE_SIZE = 256

#: Most handles kept by :func:`contract` (one per backend name or C library).
HANDLE_CACHE_SIZE = 8

#: Raw call signature (expression, flags, dtypes, shapes, strides) -> (entry, D's shape, dtype).
_fast: OrderedDict[Hashable, tuple[CachedPlan, tuple[int, ...], Any]] = OrderedDict()
_handles: OrderedDict[str, Handle] = OrderedDict()
_lock = threading.Lock()


def _malformed(expr: str, position: int, what: str) -> TappError:
    pointer = " " * (position + 1) + "^"
    return error_for(
        ErrorCode.NEGATIVE_NMODES,
        f"malformed expression at position {position}: {what}\n  {expr!r}\n  {pointer}\n"
        "write two inputs and an optional output of letter labels, like 'ik,kj->ij'",
    )


def parse_expression(expr: str) -> tuple[str, str, str]:
    """Split ``'abc,cd->abd'`` into the labels of A, B and D.

    Labels are letters (one per mode); spaces are ignored. Without ``->`` the output is, as in
    ``numpy.einsum``, the labels that appear exactly once, sorted.

    Raises
    ------
    InvalidDescriptorError
        Code 13 for a malformed expression: the message says what is wrong and points at the
        position (a second ``->``, a stray ``-`` or ``>``, an ellipsis, a character that is not
        a letter, or not exactly two inputs).

    Examples
    --------
    >>> parse_expression("ij,jk")
    ('ij', 'jk', 'ik')
    """
    if not isinstance(expr, str):
        raise error_for(
            ErrorCode.NEGATIVE_NMODES,
            f"the expression must be a string like 'ik,kj->ij', not {type(expr).__name__}",
        )
    terms: list[list[str]] = [[]]
    arrow_at = -1
    i = 0
    while i < len(expr):
        ch = expr[i]
        if ch.isspace():
            pass
        elif ch == "-":
            if expr[i + 1: i + 2] != ">":
                raise _malformed(expr, i, "'-' must be followed by '>' (the arrow '->')")
            if arrow_at >= 0:
                raise _malformed(expr, i, f"a second '->' (the first is at position {arrow_at})")
            arrow_at = i
            terms.append([])
            i += 1
        elif ch == ">":
            raise _malformed(expr, i, "'>' without '-' before it (the arrow is '->')")
        elif ch == ",":
            if arrow_at >= 0:
                raise _malformed(expr, i, "the output after '->' is one term: no ','")
            terms.append([])
        elif ch == ".":
            raise _malformed(expr, i, "ellipsis ('...') is not supported by contract; name "
                                      "every mode")
        elif ch.isalpha():
            terms[-1].append(ch)
        else:
            raise _malformed(expr, i, f"{ch!r} is not a label; labels are letters")
        i += 1
    inputs = terms[:-1] if arrow_at >= 0 else terms
    if len(inputs) != 2:
        where = arrow_at if arrow_at >= 0 else len(expr)
        raise _malformed(expr, max(where, 0), f"contract takes exactly two inputs (A and B); "
                                              f"this expression has {len(inputs)}")
    la, lb = "".join(inputs[0]), "".join(inputs[1])
    if arrow_at >= 0:
        return la, lb, "".join(terms[-1])
    counts = {x: (la + lb).count(x) for x in set(la + lb)}
    return la, lb, "".join(sorted(x for x, n in counts.items() if n == 1))


def backend_name(backend: Any) -> str:
    """Return the backend name of a ``backend=`` argument (``None``: the default).

    Raises
    ------
    UnsupportedError
        Code 18 when ``backend`` is not a non-empty string.
    """
    if backend is None:
        return default_backend_name()
    if not isinstance(backend, str) or not backend:
        raise error_for(
            ErrorCode.UNSUPPORTED,
            f"backend={backend!r}; give a backend name such as 'auto', 'blas' or "
            "'clib:PATH', or None for the default",
        )
    return backend


def shared_handle(name: str) -> Handle:
    """Return the cached handle of backend ``name``.

    The least recently used handles beyond :data:`HANDLE_CACHE_SIZE` are let go: each is
    destroyed, with its plans, once no call uses it (:meth:`Handle.retire`).
    """
    with _lock:
        h = _handles.get(name)
        if h is not None and not h.destroyed:
            _handles.move_to_end(name)
            return h
    h = Handle(name)
    evicted = []
    with _lock:
        old = _handles.get(name)
        if old is not None and not old.destroyed:  # another thread was first: use its handle
            _handles.move_to_end(name)
            return old
        _handles[name] = h
        while len(_handles) > HANDLE_CACHE_SIZE:
            evicted.append(_handles.popitem(last=False)[1])
    for handle in evicted:
        handle.retire()
    return h


def leased_handle(name: str) -> Handle:
    """Return the shared handle of ``name``, leased.

    Pair with :meth:`Handle.unlease`: until then no cache can destroy the handle.
    """
    while True:
        handle = shared_handle(name)
        if handle.lease():
            return handle


def _device_of(given: dict[str, Any]) -> Any:
    """Return the device of the operands that are tensors off the CPU (``None``: none are)."""
    for x in given.values():
        device = getattr(x, "device", None)
        if device is not None and getattr(device, "type", "cpu") != "cpu" and callable(
                getattr(x, "stride", None)):
            return device
    return None


def _device_zeros(extents: list[int], datatype: Datatype, device: Any) -> Any:
    import torch

    return torch.zeros(extents, dtype=getattr(torch, datatype.numpy_dtype.name), device=device)


#: One executor per device (str) that ``contract`` runs tensors on.
_device_executors: dict[str, Executor] = {}


def _device_executor(device: Any) -> Executor:
    name = str(device)
    found = _device_executors.get(name)
    if found is None:
        found = _device_executors.setdefault(name, Executor(device=name))
    return found


def contract(
    expr: str,
    a: ArrayLike,
    b: ArrayLike,
    c: ArrayLike | None = None,
    *,
    alpha: Scalar = 1,
    beta: Scalar | None = None,
    out: ArrayLike | None = None,
    op_a: ElementOpLike = ElementOp.IDENTITY,
    op_b: ElementOpLike = ElementOp.IDENTITY,
    op_c: ElementOpLike = ElementOp.IDENTITY,
    op_d: ElementOpLike = ElementOp.IDENTITY,
    prec: PrectypeLike = Prectype.DEFAULT,
    allow_broadcast: bool = False,
    backend: BackendName | None = None,
) -> ArrayLike:
    """Compute ``D = op_d(alpha op_a(A) op_b(B) + beta op_c(C))`` from an einsum expression.

    Descriptors come from the arrays' own shapes and strides; plans are cached structurally
    (labels, descriptors, ops, precision, backend), so repeated calls skip plan creation.

    Parameters
    ----------
    expr
        ``'ik,kj->ij'``: labels of A, B and D (and C, which has D's labels).
    a, b
        Input arrays (NumPy, buffers or DLPack tensors). Torch tensors on a device (CUDA)
        are contracted there: D is allocated on that device and the product runs on an
        executor of it (:mod:`pytapp.interop.torch_device`).
    c
        Optional addend with D's shape. ``beta`` defaults to 1 when ``c`` is given, else 0.
    out
        Array to write D into (it may be ``c`` itself); allocated when ``None``.
    alpha, beta, op_a, op_b, op_c, op_d, prec, allow_broadcast
        As for :class:`TensorProduct`.
    backend
        Backend name; ``None`` uses ``PYTAPP_BACKEND`` or the default.

    Returns
    -------
    The output array (``out`` when given).

    Raises
    ------
    TappError
        As for :class:`TensorProduct` and :meth:`TensorProduct.execute`.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([1.0, 2.0]); y = np.array([3.0, 4.0])
    >>> float(contract("i,i->", x, y, backend="reference"))
    11.0
    """
    # The thin path: a call that repeats an earlier one on NumPy arrays of the same dtypes,
    # shapes and strides reuses everything but the binding (which checks bounds every time).
    fast_key = None
    if type(a) is np.ndarray and type(b) is np.ndarray and (
            c is None or type(c) is np.ndarray) and (out is None or type(out) is np.ndarray):
        fast_key = (expr, backend, op_a, op_b, op_c, op_d, prec, allow_broadcast,
                    beta is None, a.dtype, a.shape, a.strides, b.dtype, b.shape, b.strides,
                    None if c is None else (c.dtype, c.shape, c.strides),
                    None if out is None else (out.dtype, out.shape, out.strides))
        try:
            hit = _fast.get(fast_key)
        except TypeError:  # an unhashable argument: the general path reports it
            hit = fast_key = None
        if hit is not None:
            entry, d_shape, d_dtype = hit
            # A compiled program holds no state a cache could destroy: it needs no lease.
            program = entry.plan.compiled_program
            if program is not None:
                written = np.zeros(d_shape, dtype=d_dtype) if out is None else out
                if program(alpha, a, b, (0 if c is None else 1) if beta is None else beta, c,
                           written) is not NotImplemented:
                    return written
            cache = entry.cache
            if cache.lease(entry):  # not dropped since: nothing destroys it under this call
                try:
                    written = np.zeros(d_shape, dtype=d_dtype) if out is None else out
                    entry.plan.execute(alpha, a, b,
                                       (0 if c is None else 1) if beta is None else beta, c,
                                       written)
                finally:
                    cache.unlease(entry)
                return written
    la, lb, ld = parse_expression(expr)
    ops = tuple(as_element_op(op, r) for op, r in zip((op_a, op_b, op_c, op_d), "ABCD",
                                                      strict=True))
    prectype = as_prectype(prec)
    name = backend_name(backend)
    if beta is None:
        beta = 0 if c is None else 1
    given = {"A": a, "B": b, "C": c, "D": out}
    for role in "AB":
        if given[role] is None:
            raise error_for(ErrorCode.OPERAND_MISMATCH,
                            f"{role} is None; pass an array for {role}")
    views: dict[str, Any] = {}
    dts: dict[str, Datatype] = {}
    device = _device_of(given)
    for role, x in given.items():
        if x is None:
            continue
        dts[role] = datatype_of_data(x, role)
        # tensors on a device are described as they lie (their memory stays there)
        views[role] = x if device is not None else to_ndarray(x, dts[role], role)
    labels = {"A": la, "B": lb, "C": ld, "D": ld}
    for role, v in views.items():
        if v.ndim != len(labels[role]):
            raise error_for(
                ErrorCode.NEGATIVE_NMODES,
                f"{role} has {v.ndim} modes (shape {v.shape}) but the expression {expr!r} "
                f"gives it {len(labels[role])} labels {labels[role]!r}; give one label per "
                "mode",
            )
    if out is None:
        extents = []
        for label in ld:
            if label in la:
                extents.append(views["A"].shape[la.index(label)])
            elif label in lb:
                extents.append(views["B"].shape[lb.index(label)])
            elif "C" in views:
                extents.append(views["C"].shape[ld.index(label)])
            else:
                raise error_for(
                    ErrorCode.LABEL_NOT_IN_INPUTS,
                    f"label {label!r} of the output is in neither input; pass out= or c= "
                    "to give its extent and set allow_broadcast=True",
                )
        d_dt = promote(*dts.values())
        result: Any = (np.zeros(extents, dtype=d_dt.numpy_dtype) if device is None else
                       _device_zeros(extents, d_dt, device))
        views["D"] = result
        given["D"] = result
    else:
        result = out
    info = {r: TensorInfo.from_array(v) for r, v in views.items()}
    info_c = info.get("C")
    key = (la, lb, ld, info["A"], info["B"], info_c, info["D"], ops, prectype,
           bool(allow_broadcast))
    handle = leased_handle(name)
    try:
        cache = handle.plan_cache
        found = cache.lookup(key)
        if found is None:
            plan = TensorProduct(
                handle, info["A"], la, info["B"], lb, info_c, ld if info_c else None,
                info["D"], ld, op_a=ops[0], op_b=ops[1], op_c=ops[2], op_d=ops[3],
                prec=prectype, allow_broadcast=allow_broadcast,
            )
            found = cache.insert(key, plan, PLAN_CACHE_SIZE)
    finally:
        handle.unlease()  # the entry's lease holds the handle from here
    try:
        found.plan.execute(alpha, given["A"], given["B"], beta, given["C"], given["D"],
                           None if device is None else _device_executor(device))
    finally:
        cache.unlease(found)
    if fast_key is not None:
        with _lock:
            _fast[fast_key] = (found, views["D"].shape, views["D"].dtype)
            while len(_fast) > PLAN_CACHE_SIZE:
                _fast.popitem(last=False)
    return result


def plan_cache_info() -> dict[str, int]:
    """Size and capacity of :func:`contract`'s plan cache (the shared handles' caches)."""
    with _lock:
        handles = list(_handles.values())
    return {"size": sum(len(h.plan_cache) for h in handles), "capacity": PLAN_CACHE_SIZE}


def clear_plan_cache() -> None:
    """Destroy every cached plan and handle, freeing the memory they and the executor keep.

    Their backend resources are released, and the scratch the compiled executor keeps
    between calls is freed. A plan or handle that a call is using is destroyed when that
    call ends, never under it.
    """
    with _lock:
        handles = list(_handles.values())
        _handles.clear()
        _fast.clear()
    for handle in handles:
        handle.retire()
    release_scratch()  # (blocks a call in flight holds are its own until it ends)
