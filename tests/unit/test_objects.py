"""Handles, executors, tensor infos, plans, attributes, status, batched execution."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import pytapp
from pytapp import Attr, Datatype, Handle, TensorInfo, TensorProduct


def test_tensor_info_basics() -> None:
    info = TensorInfo(Datatype.C32, (2, 3, 4))
    assert info.strides == (12, 4, 1) and info.nmodes == 3 and info.datatype is Datatype.C32
    assert info.with_strides((1, 2, 6)).strides == (1, 2, 6)
    assert info.with_extents((1, 1, 1)).extents == (1, 1, 1)
    assert info == TensorInfo("c64", (2, 3, 4)) and hash(info) == hash(TensorInfo(2, (2, 3, 4)))
    with pytest.raises(AttributeError):
        info.foo = 1  # type: ignore[attr-defined]
    arr = np.zeros((3, 5))[::-1, ::2]
    got = TensorInfo.from_array(arr)
    assert got.extents == (3, 3) and got.strides == (-5, 2)
    scalar = TensorInfo(Datatype.F64, ())
    assert scalar.nmodes == 0 and scalar.size == 1


def test_attributes_on_every_object() -> None:
    h = Handle("reference")
    ex = h.create_executor(threads=1)
    info = TensorInfo(Datatype.F64, (2,))
    for obj in (h, ex, info):
        obj.set_attr(0x1000 + 5, "backend value")
        assert obj.get_attr(0x1005) == "backend value"
        obj.clear_attr(0x1005)
        with pytest.raises(pytapp.AttributeKeyError):
            obj.get_attr(0x1005)
    assert h.get_attr(Attr.BACKEND) == "reference"
    with pytest.raises(pytapp.AttributeKeyError):
        h.set_attr(Attr.BACKEND, "blas")
    assert ex.get_attr(Attr.NUM_THREADS) == 1
    plan = TensorProduct(h, info, "i", info, "i", None, None, TensorInfo(Datatype.F64, ()), "")
    assert plan.get_attr(Attr.ALGORITHM) == plan.algorithm
    assert plan.get_attr(Attr.ALLOW_BROADCAST) is False
    status = plan.execute(1.0, np.ones(2), np.ones(2), 0.0, None, np.zeros(()))
    assert status.get_attr(Attr.BACKEND) == "reference"


def test_standard_attributes_are_views_of_the_typed_fields() -> None:
    ex = pytapp.Executor(threads=2, verify=True)
    assert ex.get_attr(Attr.NUM_THREADS) == 2 and ex.get_attr(Attr.VERIFY) is True
    ex.set_attr(Attr.NUM_THREADS, 3)
    ex.set_attr(Attr.MEMORY_LIMIT, 1 << 20)
    assert ex.threads == 3 and ex.memory_limit == 1 << 20
    assert ex.attributes()[Attr.NUM_THREADS] == 3
    ex.clear_attr(Attr.NUM_THREADS)
    ex.clear_attr(Attr.DEVICE)
    assert ex.threads is None and ex.device == "cpu"
    with pytest.raises(pytapp.AttributeKeyError):
        ex.get_attr(Attr.NUM_THREADS)  # None: not set
    with pytest.raises(pytapp.ExecutorError):
        ex.set_attr(Attr.NUM_THREADS, 0)
    assert ex.threads is None  # a refused value changes nothing
    with pytest.raises(AttributeError):
        ex.threads = 0  # type: ignore[misc]  # settings change only through set_attr
    h = Handle("reference", allow_broadcast=True)
    assert h.allow_broadcast is True and h.get_attr(Attr.ALLOW_BROADCAST) is True
    h.set_attr(Attr.MEMORY_LIMIT, 4096)
    assert h.memory_limit() == 4096
    h.clear_attr(Attr.MEMORY_LIMIT)
    assert h.memory_limit() > 4096  # half the available memory, read once
    with pytest.raises(pytapp.AttributeKeyError):
        h.get_attr(Attr.LIBRARY)  # not a clib handle


def test_lifecycle_and_context_managers() -> None:
    with Handle("reference") as h:
        info = TensorInfo(Datatype.F64, (2,))
        with TensorProduct(h, info, "i", info, "i", None, None, info, "i") as plan:
            d = np.zeros(2)
            plan.execute(2.0, np.ones(2), np.full(2, 3.0), 0, None, d)
            assert d.tolist() == [6.0, 6.0]
        plan.destroy()  # idempotent
        with pytest.raises(pytapp.DestroyedError):
            plan.execute(1.0, np.ones(2), np.ones(2), 0, None, d)
    with pytest.raises(pytapp.DestroyedError):
        h.create_executor()


def test_backend_from_environment() -> None:
    code = "import pytapp; print(pytapp.Handle().backend_name)"
    env = dict(os.environ, PYTAPP_BACKEND="reference")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "reference"
    env["PYTAPP_BACKEND"] = "nonsense"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode != 0 and "unknown backend 'nonsense'" in out.stderr


def test_backend_follows_the_environment_as_it_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """PYTAPP_BACKEND is read on every call (set, changed, padded, emptied, removed), the
    default in between."""
    from pytapp.handle import default_backend_name

    monkeypatch.delenv("PYTAPP_BACKEND", raising=False)
    default = pytapp.backends.DEFAULT_BACKEND
    assert default_backend_name() == default
    for value, want in (("reference", "reference"), (" blas ", "blas"), ("", default),
                        ("torch", "torch"), ("reference", "reference")):
        monkeypatch.setenv("PYTAPP_BACKEND", value)
        assert default_backend_name() == want
        assert pytapp.Handle().backend_name == want
    monkeypatch.delenv("PYTAPP_BACKEND")
    assert default_backend_name() == default


def test_labels_any_hashable(backend: str) -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    d = np.zeros((2, 3))
    plan = TensorProduct(Handle(backend), TensorInfo.from_array(a), [("i", 0), 7],
                         TensorInfo.from_array(b), [7, None], None, None,
                         TensorInfo.from_array(d), [None, ("i", 0)])
    plan.execute(1.0, a, b, 0.0, None, d)
    np.testing.assert_allclose(d, (a @ b).T)


def test_execute_batched(backend: str) -> None:
    rng = np.random.default_rng(2)
    h = Handle(backend)
    info_a, info_b = TensorInfo(Datatype.F64, (3, 4)), TensorInfo(Datatype.F64, (4, 5))
    info_d = TensorInfo(Datatype.F64, (3, 5))
    plan = TensorProduct(h, info_a, "ik", info_b, "kj", None, None, info_d, "ij")
    As = [rng.standard_normal((3, 4)) for _ in range(4)]
    Bs = [rng.standard_normal((4, 5)) for _ in range(4)]
    Cs = [rng.standard_normal((3, 5)) for _ in range(4)]
    Ds = [np.zeros((3, 5)) for _ in range(4)]
    status = plan.execute_batched(0.5, As, Bs, 2.0, Cs, Ds)
    assert status.products == 4 and status.flops == 4 * plan.flops
    for a, b, c, d in zip(As, Bs, Cs, Ds, strict=True):
        np.testing.assert_allclose(d, 0.5 * a @ b + 2.0 * c, rtol=1e-12)
    # A bad item anywhere means no item is written.
    Ds2 = [np.zeros((3, 5)) for _ in range(3)]
    bad = [As[0], As[1], As[2].astype(np.float32)]
    with pytest.raises(pytapp.OperandMismatchError):
        plan.execute_batched(1.0, bad, Bs[:3], 0.0, None, Ds2)
    assert all(np.all(d == 0) for d in Ds2)
    # Two outputs sharing memory are rejected.
    shared = np.zeros((3, 5))
    with pytest.raises(pytapp.AliasingError):
        plan.execute_batched(1.0, As[:2], Bs[:2], 0.0, None, [shared, shared])


def test_batch_item_reads_inputs_before_other_items_write(backend: str) -> None:
    h = Handle(backend)
    info = TensorInfo(Datatype.F64, (2, 2))
    plan = TensorProduct(h, info, "ik", info, "kj", None, None, info, "ij")
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    y = np.eye(2) * 2
    d0 = np.zeros((2, 2))
    original = x.copy()
    # Item 0 writes into x, item 1 reads x: item 1 must see the original x.
    plan.execute_batched(1.0, [x, x], [y, y], 0.0, None, [x, d0])
    np.testing.assert_allclose(x, original @ y)
    np.testing.assert_allclose(d0, original @ y)


def test_repr_and_status(backend: str) -> None:
    h = Handle(backend)
    info = TensorInfo(Datatype.F32, (8, 8))
    plan = TensorProduct(h, info, "ik", info, "kj", None, None, info, "ij")
    assert "ik,kj->ij" in repr(plan) and plan.backend_name == backend
    x = np.ones((8, 8), dtype=np.float32)
    st = plan.execute(1, x, x, 0, None, np.zeros((8, 8), dtype=np.float32))
    assert st.flops == 2 * 8 * 8 * 8 and st.seconds > 0
    # Status says what ran: auto names the backend it chose.
    assert st.backend == backend or (backend == "auto" and st.algorithm.startswith("auto -> "))
