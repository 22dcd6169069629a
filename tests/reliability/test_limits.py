"""Limits honoured: the copies a route makes count against MEMORY_LIMIT, reductions over
zero-stride operands need no copy, einsum's intermediates are checked before they are
allocated, and more modes than NumPy binds is a TappError naming the limit (issue 24)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import pytapp
from pytapp import Attr, Datatype, Handle, TensorInfo, TensorProduct


@pytest.mark.parametrize("backend", ["blas", "auto"])
def test_zero_stride_copy_counts_against_the_limit(backend: str) -> None:
    n = 4000  # a 122 MiB copy for BLAS, from 8 bytes of memory
    a = np.broadcast_to(np.float64(1.0), (n, n))
    b, d = np.ones((n, 2)), np.zeros((n, 2))
    h = Handle(backend)
    h.set_attr(Attr.MEMORY_LIMIT, 64 << 20)
    info = TensorInfo.from_array
    with pytest.raises(pytapp.TappError) as err:
        TensorProduct(h, info(a), "ik", info(b), "kj", None, None, info(d), "ij")
    assert err.value.code == 18 and "MEMORY_LIMIT" in str(err.value)
    h.set_attr(Attr.MEMORY_LIMIT, 1 << 30)
    plan = TensorProduct(h, info(a), "ik", info(b), "kj", None, None, info(d), "ij")
    assert plan.workspace_bytes >= n * n * 8 or "tblis" in plan.algorithm
    plan.execute(1.0, a, b, 0.0, None, d)
    np.testing.assert_array_equal(d, np.full((n, 2), float(n)))


@pytest.mark.parametrize("backend", ["blas", "tblis"])
def test_dot_of_zero_stride_vectors_needs_no_memory(backend: str) -> None:
    n = 10**7 + 3
    x = np.broadcast_to(np.float64(0.5), (n,))
    y = np.broadcast_to(np.float64(3.0), (n,))
    if not pytapp.available_backends()[backend][0]:
        pytest.skip(f"{backend} is not installed here (`make test` installs it)")
    h = Handle(backend)
    info = TensorInfo.from_array
    d = np.zeros(())
    plan = TensorProduct(h, info(x), "i", info(y), "i", None, None, info(d), "")
    tracemalloc.start()
    try:
        plan.execute(1.0, x, y, 0.0, None, d)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert float(d) == 1.5 * n  # exact: every partial sum is an integer multiple of 1.5
    assert peak < 1 << 20, f"{peak} bytes allocated for a reduction of zero-stride vectors"


def test_reference_index_tuples_count_against_the_limit() -> None:
    x = np.broadcast_to(np.float64(1.0), (2**31 + 10,))
    info = TensorInfo.from_array(x)
    d = TensorInfo(Datatype.F64, ())
    with pytest.raises(pytapp.TappError) as err:  # raised before anything is allocated
        TensorProduct(Handle("reference"), info, "i", info, "i", None, None, d, "")
    assert err.value.code == 18 and "MEMORY_LIMIT" in str(err.value)


def test_einsum_intermediate_checked_before_allocation(backend: str) -> None:
    a, b, c = np.ones((90000, 2)), np.ones((2, 90000)), np.ones((2, 2))
    with pytest.raises(pytapp.TappError) as err:
        pytapp.einsum("ij,kl,jk->il", a, b, c, optimize=False, backend=backend)
    assert err.value.code == 18 and "MEMORY_LIMIT" in str(err.value)
    small = pytapp.einsum("ij,kl,jk->il", a[:5], b[:, :4], c, optimize=False, backend=backend)
    np.testing.assert_array_equal(small, np.einsum("ij,kl,jk->il", a[:5], b[:, :4], c))


@pytest.mark.parametrize("nmodes", [65, 70])
def test_more_modes_than_numpy_binds_is_a_tapp_error(backend: str, nmodes: int) -> None:
    # extent-1 modes plus one of extent 2, over a flat buffer of 2 elements
    info = TensorInfo(Datatype.F64, (1,) * (nmodes - 1) + (2,), (1,) * nmodes)
    labels = list(range(nmodes))
    with pytest.raises(pytapp.TappError) as err:
        TensorProduct(Handle(backend), info, labels, info, labels, None, None,
                      TensorInfo(Datatype.F64, ()), [])
    assert err.value.code == 18 and ("64" in str(err.value) or "52" in str(err.value))


def test_as_many_modes_as_numpy_binds_run() -> None:
    info = TensorInfo(Datatype.F64, (1,) * 63 + (2,), (1,) * 64)
    labels = list(range(64))
    d = np.zeros(())
    x = np.array([2.0, 3.0])
    TensorProduct(Handle("blas"), info, labels, info, labels, None, None,
                  TensorInfo(Datatype.F64, ()), []).execute(1.0, x, x, 0.0, None, d)
    assert float(d) == 13.0
    with pytest.raises(pytapp.TappError) as err:  # the reference gathers with index arrays
        TensorProduct(Handle("reference"), info, labels, info, labels, None, None,
                      TensorInfo(Datatype.F64, ()), [])
    assert err.value.code == 18 and "63" in str(err.value)
