"""The oracle: expected results computed independently of every backend.

Inputs are rounded as the precision says, widened to float64/complex128, and contracted with
``numpy.einsum``. Diagonals (repeated labels) are read and written through explicit strided
views, and broadcast labels (only in D) by explicit broadcasting, since einsum has neither.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

from pytapp.analysis.letters import words
from pytapp.conformance.instance import Instance, OperandData, Operands
from pytapp.datatypes import Datatype, ElementOp
from pytapp.precision import compute_rule, tiny_floor, tolerance_factor, within_tolerance

__all__ = ["Expected", "check_result", "expected_result"]


@dataclass
class Expected:
    """Expected parent of D after the product, and the per-element error bound."""

    parent: np.ndarray  # complex128 copy of D's parent with the result written in
    bound: np.ndarray  # float64, |alpha| sum |A||B| + |beta| |C| where D is written, else 0
    written: np.ndarray  # bool, the elements of D's parent that D addresses
    original: np.ndarray  # D's parent before the run, in its own dtype
    tol: float
    store_eps: float
    store_tiny: float


def _wide(x: Any) -> np.ndarray:
    arr = np.asarray(x)
    if np.iscomplexobj(arr):
        return arr.astype(np.complex128)
    return arr.astype(np.float64).astype(np.complex128)


def _diagonal(
    arr: np.ndarray, labels: Sequence[Hashable]
) -> tuple[np.ndarray, tuple[Hashable, ...]]:
    """View ``arr`` with repeated labels merged (strides summed), unique labels in order."""
    order: list[Hashable] = []
    shape: list[int] = []
    strides: list[int] = []
    for label, e, s in zip(labels, arr.shape, arr.strides, strict=True):
        if label in order:
            strides[order.index(label)] += s
        else:
            order.append(label)
            shape.append(e)
            strides.append(s)
    if arr.size == 0:
        return np.zeros(shape, dtype=arr.dtype), tuple(order)
    view = np.lib.stride_tricks.as_strided(arr, shape, strides, writeable=arr.flags.writeable)
    return view, tuple(order)


def _rounded(x: Any, datatype: Datatype, rounding: Datatype | None) -> np.ndarray:
    arr = np.asarray(x)
    if rounding is None:
        return _wide(arr)
    r = rounding.numpy_dtype
    if datatype.is_complex:
        re = arr.real.astype(r).astype(np.float64)
        im = arr.imag.astype(r).astype(np.float64)
        return re + 1j * im
    return _wide(arr.real.astype(r))


def _view_in(parent: np.ndarray, data: OperandData) -> np.ndarray:
    """Return the operand's view re-created inside ``parent`` (a widened copy of its parent)."""
    view = np.asarray(data.view)
    item = view.dtype.itemsize
    offset = data.offset_bytes // item
    strides = tuple(s // item * parent.itemsize for s in view.strides)
    flat = parent.reshape(-1) if parent.flags.c_contiguous else parent.ravel()
    if view.size == 0:
        return np.zeros(view.shape, dtype=parent.dtype)
    return np.lib.stride_tricks.as_strided(flat[offset:], view.shape, strides)


def expected_result(inst: Instance, item: Operands) -> Expected:
    """Compute the expected parent of D for one batch item of ``inst``."""
    dts = dict(inst.datatypes)
    if item.c is None:  # the plan then gives C the descriptor (and datatype) of D
        dts["C"] = dts["D"]
    rule = compute_rule(inst.prec, (dts["A"], dts["B"], dts["C"], dts["D"]))
    data_a, data_b, data_d = item.a, item.b, item.d
    def operand(role: str, data: OperandData) -> tuple[np.ndarray, tuple[Hashable, ...]]:
        view, uniq = _diagonal(np.asarray(data.view), inst.labels[role])
        val = _rounded(view, dts[role], rule.input_round)
        if inst.ops.get(role) is ElementOp.CONJUGATE:
            val = np.conj(val)
        return val, uniq

    a, la = operand("A", data_a)
    b, lb = operand("B", data_b)
    parent = _wide(data_d.parent)
    d_view, ld = _diagonal(_view_in(parent, data_d), inst.labels["D"])
    ld_in = tuple(x for x in ld if x in la or x in lb)
    expr = "{},{}->{}".format(*words((la, lb, ld_in), "the conformance oracle"))
    product = np.einsum(expr, a, b)
    magnitude = np.einsum(expr, np.abs(a), np.abs(b))
    # ld_in keeps D's order, so a reshape inserts the broadcast (D-only) axes.
    shape = [d_view.shape[i] if x in ld_in else 1 for i, x in enumerate(ld)]
    product = np.broadcast_to(product.reshape(shape), d_view.shape)
    magnitude = np.broadcast_to(magnitude.reshape(shape), d_view.shape)
    alpha = _wide(np.array(inst.alpha).astype(dts["D"].numpy_dtype))[()]
    beta = _wide(np.array(inst.beta).astype(dts["D"].numpy_dtype))[()]
    extents = _label_extents(inst, item)
    summed = [e for x, e in extents.items() if x not in ld]
    if 0 in summed or alpha == 0:  # the alpha term vanishes, NaN in A or B too (SPEC 1)
        value = np.zeros(d_view.shape, dtype=np.complex128)
        bound = np.zeros(d_view.shape)
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            value = alpha * product
            bound = abs(alpha) * magnitude
    data_c = item.c
    if beta != 0 and data_c is not None:
        c_src = data_d if inst.c_is_d else data_c
        c_parent = _wide(c_src.parent)
        c_view, _ = _diagonal(_view_in(c_parent, c_src), inst.labels["C"])
        c_val = _rounded(c_view, dts["C"], rule.input_round)
        if inst.ops.get("C") is ElementOp.CONJUGATE:
            c_val = np.conj(c_val)
        with np.errstate(invalid="ignore", over="ignore"):
            value = value + beta * c_val
            bound = bound + abs(beta) * np.abs(c_val)
    if inst.ops.get("D") is ElementOp.CONJUGATE:
        value = np.conj(value)
    if not dts["D"].is_complex:
        value = value.real.astype(np.complex128)
    bound_parent = np.zeros(parent.shape, dtype=np.float64)
    written = np.zeros(parent.shape, dtype=bool)
    if d_view.size:
        d_view[...] = value
        b_view, _ = _diagonal(_view_in(bound_parent, data_d), inst.labels["D"])
        b_view[...] = bound
        w_view, _ = _diagonal(_view_in(written, data_d), inst.labels["D"])
        w_view[...] = True
    n_terms = prod(
        d for x, d in _label_extents(inst, item).items() if x not in ld
    )
    return Expected(
        parent, bound_parent, written, data_d.parent.copy(), tolerance_factor(rule, n_terms),
        dts["D"].eps, tiny_floor(rule, n_terms, dts["D"]),
    )


def _label_extents(inst: Instance, item: Operands) -> dict[Hashable, int]:
    out: dict[Hashable, int] = {}
    for role in "ABD":
        data = item.need(role)
        out.update(zip(inst.labels[role], np.asarray(data.view).shape, strict=True))
    return out


def _same_bits(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Elementwise bit equality of two C-contiguous arrays of one dtype."""
    item = x.dtype.itemsize
    bx = np.ascontiguousarray(x).view(np.uint8).reshape(*x.shape, item)
    by = np.ascontiguousarray(y).view(np.uint8).reshape(*y.shape, item)
    same: np.ndarray = np.all(bx == by, axis=-1)
    return same


def check_result(result_parent: np.ndarray, exp: Expected) -> tuple[bool, str]:
    """Compare D's whole parent after the run with the expectation.

    Elements that D addresses must be within SPEC section 7's tolerance; every other element
    of the allocation must be bit-for-bit unchanged.
    """
    ok = within_tolerance(result_parent, exp.parent, exp.bound, exp.tol, exp.store_eps,
                          exp.store_tiny)
    ok = np.where(exp.written, ok, _same_bits(result_parent, exp.original))
    if np.all(ok):
        return True, ""
    bad = np.argwhere(~ok)
    first = tuple(int(i) for i in bad[0])
    got = _wide(result_parent)[first]
    if not exp.written[first]:
        return False, (
            f"{len(bad)} of {ok.size} elements wrong; first at {first} is outside D and was "
            f"changed from {exp.original[first]} to {got}"
        )
    return False, (
        f"{len(bad)} of {ok.size} elements wrong; first at {first}: got {got}, expected "
        f"{exp.parent[first]} (bound {exp.bound[first]:.3g}, tol {exp.tol:.3g})"
    )
