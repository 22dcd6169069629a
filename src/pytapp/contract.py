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

from pytapp.datatypes import Datatype, ElementOp
from pytapp.errors import ErrorCode, error_for
from pytapp.handle import Handle, default_backend_name
from pytapp.operands import to_ndarray
from pytapp.precision import Prectype
from pytapp.product import TensorProduct
from pytapp.tensor import TensorInfo

__all__ = ["clear_plan_cache", "contract", "parse_expression", "plan_cache_info"]

#: Most plans kept by :func:`contract` (least recently used are dropped first).
PLAN_CACHE_SIZE = 256

_plans: OrderedDict[Hashable, TensorProduct] = OrderedDict()
_handles: dict[str, Handle] = {}
_lock = threading.Lock()


def parse_expression(expr: str) -> tuple[str, str, str]:
    """Split ``'abc,cd->abd'`` into the labels of A, B and D.

    Without ``->`` the output is, as in ``numpy.einsum``, the labels that appear exactly once,
    sorted. Spaces are ignored.

    Raises
    ------
    LabelError
        Code 4 for an expression that does not name exactly two inputs.

    Examples
    --------
    >>> parse_expression("ij,jk")
    ('ij', 'jk', 'ik')
    """
    text = expr.replace(" ", "")
    inputs, arrow, output = text.partition("->")
    parts = inputs.split(",")
    if len(parts) != 2 or "." in text:
        raise error_for(
            ErrorCode.LABEL_NOT_IN_INPUTS,
            f"expression {expr!r} must have exactly two inputs, like 'ik,kj->ij' "
            "(no ellipsis)",
        )
    if not arrow:
        counts = {x: (parts[0] + parts[1]).count(x) for x in set(parts[0] + parts[1])}
        output = "".join(sorted(x for x, n in counts.items() if n == 1))
    return parts[0], parts[1], output


def _datatype(x: Any) -> Datatype:
    dtype = getattr(x, "dtype", None)
    if isinstance(x, np.ndarray) or dtype is not None:
        try:
            return Datatype.from_name(str(np.dtype(dtype)))
        except (TypeError, ValueError):
            pass
    from pytapp.datatypes import datatype_of

    return datatype_of(np.asarray(x).dtype)


def _result_datatype(*dts: Datatype) -> Datatype:
    is_complex = any(dt.is_complex for dt in dts)
    reals = {dt.real for dt in dts}
    if Datatype.F64 in reals:
        real = Datatype.F64
    elif Datatype.F32 in reals or len(reals) > 1:
        real = Datatype.F32
    else:
        real = reals.pop()
    if is_complex:
        return Datatype.C64 if real is Datatype.F64 else Datatype.C32
    return real


def _handle(backend: str | None) -> Handle:
    name = backend or default_backend_name()
    h = _handles.get(name)
    if h is None or h._destroyed:
        h = Handle(name)
        _handles[name] = h
    return h


def contract(
    expr: str,
    a: Any,
    b: Any,
    c: Any = None,
    *,
    alpha: Any = 1,
    beta: Any = None,
    out: Any = None,
    op_a: ElementOp = ElementOp.IDENTITY,
    op_b: ElementOp = ElementOp.IDENTITY,
    op_c: ElementOp = ElementOp.IDENTITY,
    op_d: ElementOp = ElementOp.IDENTITY,
    prec: Prectype = Prectype.DEFAULT,
    allow_broadcast: bool = False,
    backend: str | None = None,
) -> Any:
    """Compute ``D = op_d(alpha op_a(A) op_b(B) + beta op_c(C))`` from an einsum expression.

    Descriptors come from the arrays' own shapes and strides; plans are cached structurally
    (labels, descriptors, ops, precision, backend), so repeated calls skip plan creation.

    Parameters
    ----------
    expr
        ``'ik,kj->ij'``: labels of A, B and D (and C, which has D's labels).
    a, b
        Input arrays (NumPy, buffers or DLPack tensors).
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
    la, lb, ld = parse_expression(expr)
    if beta is None:
        beta = 0 if c is None else 1
    arrays = [a, b] + ([c] if c is not None else []) + ([out] if out is not None else [])
    dts = [_datatype(x) for x in arrays]
    views = [to_ndarray(x, dt, role) for x, dt, role in zip(arrays, dts, "ABCD", strict=False)]
    va, vb = views[0], views[1]
    vc = views[2] if c is not None else None
    if out is None:
        extents = []
        for label in ld:
            if label in la:
                extents.append(va.shape[la.index(label)])
            elif label in lb:
                extents.append(vb.shape[lb.index(label)])
            elif vc is not None:
                extents.append(vc.shape[ld.index(label)])
            else:
                raise error_for(
                    ErrorCode.LABEL_NOT_IN_INPUTS,
                    f"label {label!r} of the output is in neither input; pass out= or c= "
                    "to give its extent and set allow_broadcast=True",
                )
        d_dt = _result_datatype(*dts)
        result: Any = np.zeros(extents, dtype=d_dt.numpy_dtype)
        vd = result
    else:
        result = out
        vd = views[-1]
    infos = [TensorInfo.from_array(v) for v in (va, vb)]
    info_c = TensorInfo.from_array(vc) if vc is not None else None
    info_d = TensorInfo.from_array(vd)
    name = backend or default_backend_name()
    key = (name, la, lb, ld, infos[0], infos[1], info_c, info_d,
           int(op_a), int(op_b), int(op_c), int(op_d), int(prec), bool(allow_broadcast))
    with _lock:
        plan = _plans.get(key)
        if plan is not None:
            _plans.move_to_end(key)
    if plan is None:
        plan = TensorProduct(
            _handle(name), infos[0], la, infos[1], lb, info_c, ld if info_c else None,
            info_d, ld, op_a=op_a, op_b=op_b, op_c=op_c, op_d=op_d, prec=prec,
            allow_broadcast=allow_broadcast,
        )
        with _lock:
            _plans[key] = plan
            while len(_plans) > PLAN_CACHE_SIZE:
                _plans.popitem(last=False)
    plan.execute(alpha, va, vb, beta, vc, vd)
    return result


def plan_cache_info() -> dict[str, int]:
    """Size and capacity of :func:`contract`'s plan cache."""
    return {"size": len(_plans), "capacity": PLAN_CACHE_SIZE}


def clear_plan_cache() -> None:
    """Drop every cached plan."""
    with _lock:
        _plans.clear()
