"""Views made by every route to memory: out-of-allocation layouts raise 19 and touch nothing.

Each route builds data over an allocation of exactly ``N`` doubles (an ndarray, a view made by
``as_strided`` or ``sliding_window_view``, ``np.memmap``, ``mmap``, ``bytearray``, ``bytes``,
``memoryview``, a ctypes array, ``array.array``, a torch tensor) starting ``OFFSET`` elements into
it. Every operand role (A, B, C, D) is bound to such data with a layout inside the allocation,
reaching past its end, or reaching before its start. Inside: the result matches an oracle
gathered element by element from the allocation's values. Outside: error 19 and every byte of
D's allocation is unchanged.
"""

from __future__ import annotations

import array
import ctypes
import mmap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided, sliding_window_view

import pytapp
from pytapp import Datatype, Handle, TensorInfo, TensorProduct

N, OFFSET = 24, 4
SHAPES = {"A": (3, 4), "B": (4, 2), "C": (3, 2), "D": (3, 2)}
LABELS = {"A": "ik", "B": "kj", "C": "ij", "D": "ij"}
ALPHA, BETA = 0.5, 2.0

Route = Callable[[Path], tuple[Any, Callable[[], bytes], Callable[[tuple[int, ...],
                                                                  tuple[int, ...]], Any]]]


def _values() -> np.ndarray:
    return np.arange(1.0, N + 1.0) * 0.25


def _numpy_route(kind: str) -> Route:
    """Owner from NumPy; data = a 1-D view starting at OFFSET (or as_strided lies)."""

    def make(tmp: Path) -> Any:
        if kind == "memmap":
            owner: Any = np.memmap(tmp / "x.bin", dtype=np.float64, mode="w+", shape=(N,))
            owner[:] = _values()
            arr = owner
        else:
            arr = owner = _values().copy()
        if kind == "sliding_window":
            flat: Any = sliding_window_view(arr, 1, writeable=True)[:, 0][OFFSET:]
        else:
            flat = arr[OFFSET:]

        def data(shape: tuple[int, ...], strides: tuple[int, ...]) -> Any:
            if kind == "as_strided":  # the view itself lies about its extent
                return as_strided(arr[OFFSET:], shape=shape, strides=[8 * s for s in strides])
            return flat

        return owner, lambda: np.asarray(owner).tobytes(), data

    return make


def _buffer_route(kind: str) -> Route:
    """Owner is a buffer; data = its memory from OFFSET, raw or through np.frombuffer."""

    def make(tmp: Path) -> Any:
        raw = _values().tobytes()
        owner: Any
        if kind == "bytearray":
            owner = bytearray(raw)
        elif kind == "bytes":
            owner = bytes(raw)
        elif kind == "mmap":
            owner = mmap.mmap(-1, len(raw))
            owner[:] = raw
        elif kind == "ctypes":
            owner = (ctypes.c_double * N)(*_values())
        else:
            owner = array.array("d", _values())
        if kind in ("bytearray", "bytes"):
            data = memoryview(owner)[8 * OFFSET:]  # raw bytes read as the info's datatype
        elif kind == "ctypes":
            data = np.ctypeslib.as_array(owner)[OFFSET:]
        else:
            data = np.frombuffer(owner, dtype=np.float64)[OFFSET:]
        return owner, lambda: bytes(memoryview(owner).cast("B")), lambda s, t: data

    return make


def _torch_route(tmp: Path) -> Any:
    torch = pytest.importorskip("torch")
    owner = torch.tensor(_values())
    return owner, lambda: owner.numpy().tobytes(), lambda s, t: owner[OFFSET:]


ROUTES: dict[str, Route] = {
    "ndarray": _numpy_route("ndarray"),
    "as_strided": _numpy_route("as_strided"),
    "sliding_window": _numpy_route("sliding_window"),
    "memmap": _numpy_route("memmap"),
    "mmap": _buffer_route("mmap"),
    "bytearray": _buffer_route("bytearray"),
    "bytes": _buffer_route("bytes"),
    "ctypes": _buffer_route("ctypes"),
    "array": _buffer_route("array"),
    "torch": _torch_route,
}

SIDES = {
    # strides (in elements) of a 2-D operand of shape (r, c), starting OFFSET into N elements
    "inside": lambda r, c: (c, 1),
    "past_end": lambda r, c: (N // 2, 1),
    "before_start": lambda r, c: (-(OFFSET + 1), 1),
}


def _gather(values: np.ndarray, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """The operand as the descriptor addresses it, element by element (the oracle's view)."""
    out = np.empty(shape)
    for i in range(shape[0]):
        for j in range(shape[1]):
            out[i, j] = values[OFFSET + i * strides[0] + j * strides[1]]
    return out


@pytest.mark.parametrize("side", list(SIDES))
@pytest.mark.parametrize("role", list("ABCD"))
@pytest.mark.parametrize("route", list(ROUTES))
def test_every_route_is_bounds_checked(any_backend: str, route: str, role: str, side: str,
                                       tmp_path: Path) -> None:
    _owner, snapshot, data_for = ROUTES[route](tmp_path)  # the owner lives to the end
    shape = SHAPES[role]
    strides = SIDES[side](*shape)
    rng = np.random.default_rng(7)
    plain = {r: rng.standard_normal(SHAPES[r]) for r in "ABC"}
    d_parent = np.full(20, -3.0)  # canaries around a plain D
    plain["D"] = d_parent[2:8].reshape(3, 2)
    infos = {r: TensorInfo.from_array(plain[r]) for r in "ABCD"}
    infos[role] = TensorInfo(Datatype.F64, shape, strides)
    data = dict(plain)
    data[role] = data_for(shape, strides)
    beta = 0.0 if role == "D" else BETA
    c = None if role == "D" else data["C"]
    plan = TensorProduct(Handle(any_backend), infos["A"], "ik", infos["B"], "kj",
                         None if role == "D" else infos["C"], None if role == "D" else "ij",
                         infos["D"], "ij")
    before = snapshot() if role == "D" else d_parent.tobytes()
    if route == "bytes" and role == "D":  # immutable memory: refused before any access
        with pytest.raises(pytapp.ReadOnlyError):
            plan.execute(ALPHA, data["A"], data["B"], beta, c, data["D"])
        assert snapshot() == before
        return
    if side != "inside":
        with pytest.raises(pytapp.OutOfBoundsError) as err:
            plan.execute(ALPHA, data["A"], data["B"], beta, c, data["D"])
        assert err.value.code == 19 and role in err.value.message
        after = snapshot() if role == "D" else d_parent.tobytes()
        assert after == before, "D's allocation changed on error"
        return
    plan.execute(ALPHA, data["A"], data["B"], beta, c, data["D"])
    values = _values()
    operands = {r: (_gather(values, shape, strides) if r == role else plain[r]) for r in "ABC"}
    expected = ALPHA * operands["A"] @ operands["B"] + beta * operands["C"]
    if role == "D":
        got = _gather(np.frombuffer(snapshot(), dtype=np.float64), shape, strides)
        np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-13)
        untouched = np.ones(N, dtype=bool)
        for i in range(shape[0]):
            for j in range(shape[1]):
                untouched[OFFSET + i * strides[0] + j * strides[1]] = False
        after = np.frombuffer(snapshot(), dtype=np.float64)
        assert np.array_equal(after[untouched], values[untouched])
    else:
        np.testing.assert_allclose(plain["D"], expected, rtol=1e-13, atol=1e-13)
        assert np.all(d_parent[:2] == -3.0) and np.all(d_parent[8:] == -3.0)


def test_contract_refuses_as_strided_views_past_their_base() -> None:
    a = np.random.default_rng(0).random((3, 4))
    big = as_strided(a, shape=(3, 40), strides=a.strides)  # 108 elements past a
    with pytest.raises(pytapp.OutOfBoundsError):
        pytapp.contract("ij,jk->ik", big, np.ones((40, 2)))
    parent = np.full(6, 9.0)
    out = as_strided(parent, shape=(3, 4), strides=(32, 8))  # D reaching past its base
    with pytest.raises(pytapp.OutOfBoundsError):
        pytapp.contract("ij,jk->ik", np.ones((3, 5)), np.ones((5, 4)), out=out)
    assert np.all(parent == 9.0)
    inside = as_strided(a, shape=(3, 2), strides=a.strides)
    got = pytapp.contract("ij,jk->ik", inside, np.ones((2, 2)))
    np.testing.assert_allclose(got, a[:, :2] @ np.ones((2, 2)))


def test_unknown_owner_is_refused_with_advice() -> None:
    torch = pytest.importorskip("torch")
    t = torch.arange(6.0, dtype=torch.float64)
    foreign = np.from_dlpack(t)  # an ndarray whose owner is a DLPack capsule
    info = TensorInfo.from_array(foreign)
    d = np.zeros(())
    plan = TensorProduct(Handle("blas"), info, "i", info, "i", None, None,
                         TensorInfo.from_array(d), "")
    with pytest.raises(pytapp.OutOfBoundsError) as err:
        plan.execute(1.0, foreign, foreign, 0.0, None, d)
    assert "cannot establish" in err.value.message and "torch tensor" in err.value.message
    plan.execute(1.0, t, t, 0.0, None, d)  # the tensor itself: its storage is known
    assert float(d) == float(np.dot(np.arange(6.0), np.arange(6.0)))
    raw = ctypes.cast((ctypes.c_double * 6)(), ctypes.POINTER(ctypes.c_double))
    pointer_view = np.ctypeslib.as_array(raw, shape=(6,))  # made from a bare pointer
    with pytest.raises(pytapp.OutOfBoundsError):
        plan.execute(1.0, pointer_view, pointer_view, 0.0, None, d)
