"""Malformed user input never reaches a non-TAPP exception, through contract or the object API.

Every entry below is one malformed input (an expression, an operand, a shape, a dtype, a stride,
a label, a scalar, an op, a precision, an executor, an attribute, a backend name). Each must
raise a ``TappError`` with the expected code, and leave the output untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import pytapp
from pytapp import Attr, Datatype, Executor, Handle, TensorInfo, TensorProduct

A2 = np.arange(6.0).reshape(2, 3)
B2 = np.arange(12.0).reshape(3, 4)
OUT = np.full((2, 4), 5.0)


def _plan() -> TensorProduct:
    return TensorProduct(Handle("blas"), TensorInfo.from_array(A2), "ik",
                         TensorInfo.from_array(B2), "kj", None, None,
                         TensorInfo.from_array(OUT), "ij")


def _contract(expr: Any = "ik,kj->ij", a: Any = A2, b: Any = B2, **kw: Any) -> Callable[[], Any]:
    kw.setdefault("out", OUT)
    return lambda: pytapp.contract(expr, a, b, **kw)


def _execute(*args: Any, **kw: Any) -> Callable[[], Any]:
    full = dict(zip(("alpha", "a", "b", "beta", "c", "d"), (1.0, A2, B2, 0.0, None, OUT),
                    strict=True))
    full.update(dict(zip(("alpha", "a", "b", "beta", "c", "d"), args, strict=False)))
    full.update(kw)
    return lambda: _plan().execute(**full)


def _batched(a: Any, b: Any, d: Any, c: Any = None) -> Callable[[], Any]:
    return lambda: _plan().execute_batched(1.0, a, b, 0.0, c, d)


def _info(*args: Any) -> Callable[[], Any]:
    return lambda: TensorInfo(*args)


def _product(**changes: Any) -> Callable[[], Any]:
    args: dict[str, Any] = dict(handle=Handle("blas"), a=TensorInfo.from_array(A2), a_labels="ik",
                                b=TensorInfo.from_array(B2), b_labels="kj", c=None,
                                c_labels=None, d=TensorInfo.from_array(OUT), d_labels="ij")
    args.update(changes)
    return lambda: TensorProduct(**args)


def _attr(obj: Callable[[], Any], method: str, *args: Any) -> Callable[[], Any]:
    return lambda: getattr(obj(), method)(*args)


def _readonly() -> np.ndarray:
    x = np.zeros((2, 4))
    x.flags.writeable = False
    return x


def _torch_requiring_grad() -> Any:
    torch = pytest.importorskip("torch")
    return torch.ones((2, 3), dtype=torch.float64, requires_grad=True)


MALFORMED: dict[str, tuple[int, Callable[[], Any]]] = {
    # expressions
    "expr: second arrow": (13, _contract("ik,kj->ij->")),
    "expr: three inputs": (13, _contract("ik,kj,jl->il")),
    "expr: one input": (13, _contract("ik->ik")),
    "expr: stray dash": (13, _contract("i-k,kj->ij")),
    "expr: stray >": (13, _contract("ik,kj>ij")),
    "expr: digit label": (13, _contract("i1,1j->ij")),
    "expr: ellipsis": (13, _contract("...k,kj->...j")),
    "expr: comma in output": (13, _contract("ik,kj->i,j")),
    "expr: not a string": (13, _contract(42)),
    "expr: None": (13, _contract(None)),
    # labels vs operands
    "labels: more than modes": (13, _contract("ijk,kj->ij")),
    "labels: fewer than modes": (13, _contract("i,kj->ij")),
    "labels: out has other ndim": (13, _contract(out=np.zeros((2, 4, 1)))),
    "labels: c has other ndim": (13, _contract(c=np.zeros(8), out=None)),
    # shapes and extents
    "shape: extents disagree": (1, _contract(b=np.ones((4, 4)))),
    "shape: out extents disagree": (2, _contract(out=np.zeros((3, 4)))),
    "shape: c extents disagree": (7, _contract(c=np.zeros((2, 5)), out=None)),
    # operand data
    "data: None": (20, _contract(a=None)),
    "data: string": (20, _contract(a="abc")),
    "data: list": (20, _contract(a=[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])),
    "data: int array": (20, _contract(a=np.ones((2, 3), dtype=np.int64))),
    "data: bool array": (20, _contract(a=np.ones((2, 3), dtype=bool))),
    "data: object array": (20, _contract(a=np.empty((2, 3), dtype=object))),
    "data: float128": (20, _contract(a=np.ones((2, 3), dtype=np.longdouble))),
    "data: dict": (20, _contract(a={"x": 1})),
    "data: read-only out": (22, lambda: pytapp.contract("ik,kj->ij", A2, B2, out=_readonly())),
    "data: torch requires grad": (18, lambda: pytapp.contract(
        "ik,kj->ij", _torch_requiring_grad(), B2, out=OUT)),
    # scalars
    "alpha: string": (21, _contract(alpha="2")),
    "alpha: None": (21, _contract(alpha=None)),
    "alpha: array": (21, _contract(alpha=np.ones(2))),
    "alpha: complex for real D": (21, _contract(alpha=1 + 2j)),
    "beta: overflows F32": (21, _contract(c=np.zeros((2, 4), np.float32), beta=1e300,
                                          out=np.zeros((2, 4), np.float32))),
    # ops and precisions
    "op: string": (17, _contract(op_a="conj")),
    "op: 2": (17, _contract(op_b=2)),
    "op: None": (17, _contract(op_c=None)),
    "op: float": (17, _contract(op_d=1.0)),
    "prec: string": (16, _contract(prec="high")),
    "prec: 99": (16, _contract(prec=99)),
    "prec: None": (16, _contract(prec=None)),
    # backends
    "backend: int": (18, _contract(backend=3)),
    "backend: unknown": (18, _contract(backend="gpu-magic")),
    "backend: empty": (18, _contract(backend="")),
    "handle: int backend": (18, lambda: Handle(5)),  # type: ignore[arg-type]
    "handle: library for blas": (18, lambda: Handle("blas", library="x.so")),
    "handle: library not a path": (18, lambda: Handle("clib", library=7)),  # type: ignore[arg-type]
    "handle: abi for blas": (18, lambda: Handle("blas", abi="released")),
    # descriptors
    "info: datatype None": (15, _info(None, (2,))),
    "info: datatype 99": (15, _info(99, (2,))),
    "info: datatype bool": (15, _info(True, (2,))),
    "info: datatype int dtype": (15, _info(np.int32, (2,))),
    "info: extents not a sequence": (13, _info(Datatype.F64, 3)),
    "info: extent float": (14, _info(Datatype.F64, (2.5,))),
    "info: extent None": (14, _info(Datatype.F64, (None,))),
    "info: negative extent": (14, _info(Datatype.F64, (-1,))),
    "info: strides length": (13, _info(Datatype.F64, (2, 3), (1,))),
    "info: stride float": (13, _info(Datatype.F64, (2,), (1.5,))),
    "info: strides not a sequence": (13, _info(Datatype.F64, (2,), 1)),
    "info: from_array of object": (20, lambda: TensorInfo.from_array(object())),
    "info: with_extents not a sequence": (13, lambda: TensorInfo(Datatype.F64, (2,)).with_extents(
        2)),
    # plans
    "product: labels None": (13, _product(a_labels=None)),
    "product: labels int": (13, _product(a_labels=5)),
    "product: unhashable label": (13, _product(a_labels=[["i"], "k"])),
    "product: info not a TensorInfo": (15, _product(a=A2)),
    "product: handle not a Handle": (24, _product(handle="blas")),
    "product: executor string": (33, _product(executor="cpu")),
    "product: executor of another handle": (24, _product(executor=Executor(Handle("blas")))),
    "product: prec string": (16, _product(prec="fast")),
    "product: op float": (17, _product(op_a=0.5)),
    "product: allow_broadcast string": (26, lambda: Handle("blas").set_attr(
        Attr.ALLOW_BROADCAST, "yes")),
    # execution
    "execute: D wrong shape": (20, _execute(d=np.zeros((4, 2)))),
    "execute: D wrong dtype": (20, _execute(d=np.zeros((2, 4), dtype=np.float32))),
    "execute: executor string": (33, _execute(executor="cpu")),
    "execute: C missing": (12, _execute(beta=1.0)),
    "batched: lists of other lengths": (25, _batched([A2, A2], [B2], [OUT])),
    "batched: None for A": (25, _batched(None, [B2], [OUT])),
    "batched: an int for D": (25, _batched([A2], [B2], 7)),
    "batched: item None": (20, _batched([None], [B2], [OUT])),
    "batched: C not a list": (25, _batched([A2], [B2], [OUT], c=5)),
    # executors and attributes
    "executor: threads string": (33, lambda: Executor(threads="2")),  # type: ignore[arg-type]
    "executor: threads 0": (33, lambda: Executor(threads=0)),
    "executor: device None": (33, lambda: Executor(device=None)),  # type: ignore[arg-type]
    "executor: memory limit string": (33, _attr(Executor, "set_attr", Attr.MEMORY_LIMIT, "1G")),
    "attr: key string": (26, _attr(Executor, "get_attr", "threads")),
    "attr: key negative": (26, _attr(Executor, "get_attr", -1)),
    "attr: key float": (26, _attr(Executor, "set_attr", 2.0, 1)),
    "attr: key not for object": (26, _attr(lambda: Handle("blas"), "get_attr",
                                           Attr.NUM_THREADS)),
    "attr: unset key": (26, _attr(lambda: Handle("blas"), "get_attr", 0x1234)),
    "attr: handle memory limit string": (26, _attr(lambda: Handle("blas"), "set_attr",
                                                   Attr.MEMORY_LIMIT, "lots")),
    "attr: read-only key": (26, _attr(lambda: Handle("blas"), "set_attr", Attr.BACKEND, "x")),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_input_is_a_tapp_error(name: str) -> None:
    code, call = MALFORMED[name]
    before = OUT.copy()
    with pytest.raises(pytapp.TappError) as err:
        call()
    assert err.value.code == code, f"{name}: {err.value}"
    assert err.value.message  # says what to change
    assert np.array_equal(OUT, before)


def test_explain_and_check_accept_anything() -> None:
    assert pytapp.explain_error("abc") == "unknown error code 'abc'"
    assert pytapp.check_success(None) is False
    assert pytapp.check_success(0) is True
