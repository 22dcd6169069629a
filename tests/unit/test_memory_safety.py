"""Footprint checks (19): layouts that leave the owning allocation touch nothing."""

from __future__ import annotations

import numpy as np
import pytest

import pytapp
from pytapp import Handle, TensorInfo, TensorProduct

F64 = pytapp.Datatype.F64


def _plan(backend: str, a_info: TensorInfo, d_info: TensorInfo) -> TensorProduct:
    b_info = TensorInfo(F64, (4, 2))
    return TensorProduct(Handle(backend), a_info, "ik", b_info, "kj", None, None, d_info, "ij")


@pytest.mark.parametrize("strides", [(4, 1), (8, 2), (-4, 1), (4, -1)])
def test_input_strides_outside_allocation(backend: str, strides: tuple[int, int]) -> None:
    a = np.arange(12.0).reshape(3, 4)  # owns 12 elements; row-major strides (4, 1) fit
    d = np.full((3, 2), -7.0)
    plan = _plan(backend, TensorInfo(F64, (3, 4), strides), TensorInfo.from_array(d))
    b = np.ones((4, 2))
    if strides == (4, 1):
        plan.execute(1.0, a, b, 0.0, None, d)
        np.testing.assert_allclose(d, a @ b)
        return
    with pytest.raises(pytapp.OutOfBoundsError) as err:
        plan.execute(1.0, a, b, 0.0, None, d)
    assert err.value.code == 19
    assert np.all(d == -7.0)


def test_output_reaching_past_end_touches_nothing(backend: str) -> None:
    parent = np.full(12, 3.0)
    d = parent[:6]  # D's layout reaches element 15 of a 12-element allocation
    plan = _plan(backend, TensorInfo(F64, (3, 4)), TensorInfo(F64, (3, 2), (6, 3)))
    with pytest.raises(pytapp.OutOfBoundsError):
        plan.execute(1.0, np.ones((3, 4)), np.ones((4, 2)), 0.0, None, d)
    assert np.all(parent == 3.0)


def test_view_may_use_whole_base_allocation(backend: str) -> None:
    base = np.arange(40.0)
    a = base[10:22].reshape(3, 4)
    # Negative stride reaching back into the base (before the view, inside the allocation).
    info = TensorInfo(F64, (3, 4), (-4, 1))
    d = np.zeros((3, 2))
    _plan(backend, info, TensorInfo.from_array(d)).execute(
        1.0, a, np.ones((4, 2)), 0.0, None, d
    )
    expected = np.stack([base[10 - 4 * i: 14 - 4 * i] for i in range(3)]) @ np.ones((4, 2))
    np.testing.assert_allclose(d, expected)


def test_flat_buffer_storage(backend: str) -> None:
    raw = bytearray(np.arange(12.0).tobytes())  # untyped buffer read as the info's dtype
    d = np.zeros((3, 2))
    _plan(backend, TensorInfo(F64, (3, 4)), TensorInfo.from_array(d)).execute(
        1.0, raw, np.ones((4, 2)), 0.0, None, d
    )
    np.testing.assert_allclose(d, np.arange(12.0).reshape(3, 4) @ np.ones((4, 2)))
    with pytest.raises(pytapp.OutOfBoundsError):
        _plan(backend, TensorInfo(F64, (3, 4)), TensorInfo.from_array(d)).execute(
            1.0, raw[:-8], np.ones((4, 2)), 0.0, None, d
        )


def test_overlapping_output_gives_out_of_place_result(backend: str) -> None:
    buf = np.arange(1.0, 13.0)
    a = buf[:6].reshape(2, 3)
    d = buf[3:9].reshape(2, 3)  # D overlaps the second row of A
    a_copy = a.copy()
    h = Handle(backend)
    plan = TensorProduct(h, TensorInfo.from_array(a), "ik", TensorInfo(F64, (3, 3)), "kj",
                         None, None, TensorInfo.from_array(d), "ij")
    b = np.arange(9.0).reshape(3, 3)
    plan.execute(1.0, a, b, 0.0, None, d)
    np.testing.assert_allclose(d, a_copy @ b)
