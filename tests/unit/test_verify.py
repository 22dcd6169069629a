"""Verification wrapper: the error bound and the verdict on every label class."""

from __future__ import annotations

import numpy as np
import pytest

import pytapp
from pytapp import Handle, TensorInfo, TensorProduct
from pytapp.backends.verify import error_bound
from pytapp.operands import Binder


def _plan(h: Handle, a: np.ndarray, la: str, b: np.ndarray, lb: str, d: np.ndarray,
          ld: str) -> TensorProduct:
    return TensorProduct(h, TensorInfo.from_array(a), la, TensorInfo.from_array(b), lb, None,
                         None, TensorInfo.from_array(d), ld, allow_broadcast=True)


def test_error_bound_matches_a_hand_computed_bound() -> None:
    # Diagonal of A (Case 3), an isolated sum in B (Case 4), a broadcast label z (Case 5).
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 3, 4)) + 1j * rng.standard_normal((3, 3, 4))
    b = rng.standard_normal((4, 2, 5)) + 0j
    c = rng.standard_normal((3, 2, 6)) + 0j
    d = np.zeros((3, 2, 6), dtype=complex)
    with Handle("reference") as h:
        plan = _plan(h, a, "iik", b, "kjs", d, "ijz")
        bound = Binder(plan.spec).bind(2 - 1j, a, b, -0.5, c, d)
        got = error_bound(plan.spec, bound)
    diag = np.abs(a[np.arange(3), np.arange(3)])  # (i, k)
    want = abs(2 - 1j) * np.einsum("ik,kjs->ij", diag, np.abs(b))[:, :, None] + 0.5 * np.abs(c)
    assert got.shape == (3, 2, 6)
    np.testing.assert_allclose(got, want, rtol=1e-13)


@pytest.mark.parametrize("backend", ["blas", "auto", "reference"])
def test_verified_run_accepts_every_label_class(backend: str) -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(-3, 4, (3, 3, 4)).astype(np.float64)
    b = rng.integers(-3, 4, (4, 2, 5)).astype(np.float64)
    d = rng.integers(-3, 4, (3, 2, 6)).astype(np.float64)
    want = 2 * np.einsum("iik,kjs->ij", a, b)[:, :, None] - d
    with Handle(backend) as h, h.create_executor(verify=True) as ex:
        plan = _plan(h, a, "iik", b, "kjs", d, "ijz")
        status = plan.execute(2.0, a, b, -1.0, d, d, executor=ex)
    assert np.array_equal(d, want)  # exact small-integer data
    assert status.seconds >= 0


def test_blas_refuses_f16_accumulation_and_auto_runs_it_on_reference() -> None:
    a = np.full((2, 3), 0.5, dtype=np.float16)
    info = TensorInfo.from_array(a)
    d = np.zeros((2, 2), dtype=np.float16)
    dinfo = TensorInfo.from_array(d)
    prec = pytapp.Prectype.F16F16_ACCUM_F16
    with pytest.raises(pytapp.PrecisionError) as err:
        TensorProduct(Handle("blas"), info, "ik", info, "jk", None, None, dinfo, "ij", prec=prec)
    assert err.value.code == 16 and "F16F16_ACCUM_F16" in str(err.value)
    plan = TensorProduct(Handle("auto"), info, "ik", info, "jk", None, None, dinfo, "ij",
                         prec=prec)
    status = plan.execute(1.0, a, a, 0.0, None, d)
    assert status.backend == "reference"
    assert np.array_equal(d, np.full((2, 2), 0.75, dtype=np.float16))
