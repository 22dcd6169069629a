"""The clib bridge on every ABI variant and optional symbol, detection, and failing libraries.

Each path runs on the C test library (tests/clib/tapp_brute.c) built for it with gcc; results
are compared with NumPy einsum in float64.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np
import pytest

import pytapp
from pytapp import Handle, TensorInfo, TensorProduct
from pytapp.backends import clib
from pytapp.backends.clib_probe import detect, probe_in_child


def _run(handle: Handle, alpha: float = 1.5, beta: float = 0.0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(7)
    a, b, c = rng.standard_normal((3, 4)), rng.standard_normal((4, 2)), rng.standard_normal((3, 2))
    d = np.zeros((3, 2))
    plan = TensorProduct(handle, TensorInfo.from_array(a), "ik", TensorInfo.from_array(b), "kj",
                         TensorInfo.from_array(c), "ij", TensorInfo.from_array(d), "ij")
    plan.execute(alpha, a, b, beta, c, d)
    return a, b, c, d


def _expect(a: np.ndarray, b: np.ndarray, c: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    return alpha * np.einsum("ik,kj->ij", a, b) + beta * c


@pytest.mark.parametrize("fixture,abi", [("test_library", "released"),
                                         ("multi_library", "multi-tapp"),
                                         ("cutensor_library", "cutensor_bindings"),
                                         ("async_library", "released")])
def test_every_abi_runs_products(fixture: str, abi: str, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(fixture)
    with Handle("clib", library=path, abi=abi) as h:
        a, b, c, d = _run(h, 1.5, -0.5)
    np.testing.assert_allclose(d, _expect(a, b, c, 1.5, -0.5), rtol=1e-13)


@pytest.mark.parametrize("fixture,abi", [("test_library", "released"),
                                         ("multi_library", "multi-tapp"),
                                         ("cutensor_library", "cutensor_bindings")])
def test_auto_detects_the_abi_in_a_child(fixture: str, abi: str,
                                         request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(fixture)
    assert detect(os.path.abspath(path)) == abi
    with Handle("clib", library=path, abi="auto") as h:
        a, b, c, d = _run(h)
        assert h._backend.abi == abi  # type: ignore[attr-defined]
    np.testing.assert_allclose(d, _expect(a, b, c, 1.5, 0.0), rtol=1e-13)


def test_a_wrong_guess_never_crashes_the_caller(multi_library: str) -> None:
    record = probe_in_child(multi_library, "cutensor_bindings")  # a wrong ABI for this library
    assert not record["ok"]
    assert probe_in_child(multi_library, "multi-tapp")["ok"]


def test_detection_failure_is_an_error(tmp_path: pytest.TempPathFactory) -> None:
    with pytest.raises(pytapp.UnsupportedError, match="cannot tell which TAPP C ABI"):
        detect(os.path.join(str(tmp_path), "missing.so"))


def test_probe_reports_null_executor_support(async_library: str) -> None:
    record = probe_in_child(async_library, "released")
    assert record["ok"] and record["survived"] and record["null_executor"] is True


def test_optional_symbols_and_name(async_library: str, cutensor_library: str,
                                   minimal_library: str) -> None:
    lib = clib.library(async_library)
    for name in ("TAPP_executor_wait", "TAPP_executor_get_status",
                 "TAPP_status_check_completion", "TAPP_status_get_error",
                 "TAPP_implementation_name", "TAPP_destroy_status"):
        assert name in lib.optional_symbols()
    assert lib.implementation_name() == "tapp_brute (pytapp test library)"
    assert clib.library(minimal_library).optional_symbols() == []
    assert clib.library(minimal_library).implementation_name() == ""
    cut = clib.library(cutensor_library, "cutensor_bindings")
    value = ctypes.c_void_p(0)
    assert cut.fn["TAPP_attr_get"](0, 1, ctypes.byref(value)) == 0  # void** out-parameter
    assert ctypes.cast(value, ctypes.POINTER(ctypes.c_int))[0] == 7


def test_a_failure_reported_through_the_status_leaves_d_unchanged(
        async_library: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with Handle("clib", library=async_library) as h:
        rng = np.random.default_rng(2)
        a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
        d = np.full((3, 2), 5.0)
        plan = TensorProduct(h, TensorInfo.from_array(a), "ik", TensorInfo.from_array(b), "kj",
                             None, None, TensorInfo.from_array(d), "ij")
        monkeypatch.setenv("TAPP_BRUTE_FAULT", "async_fail")
        with pytest.raises(pytapp.UnsupportedError) as err:
            plan.execute(1.0, a, b, 0.0, None, d)
        assert err.value.library_code == 15  # type: ignore[attr-defined]
        assert np.all(d == 5.0)
        monkeypatch.delenv("TAPP_BRUTE_FAULT")
        plan.execute(1.0, a, b, 0.0, None, d)
        np.testing.assert_allclose(d, a @ b, rtol=1e-13)


def test_a_library_that_writes_d_then_fails_leaves_d_unchanged(
        test_library: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(4)
    parent = rng.standard_normal((5, 6))
    d = parent[1:4, ::2]  # a strided view: only its elements may be written
    before = parent.copy()
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 3))
    with Handle("clib", library=test_library) as h:
        plan = TensorProduct(h, TensorInfo.from_array(a), "ik", TensorInfo.from_array(b), "kj",
                             None, None, TensorInfo.from_array(d), "ij")
        monkeypatch.setenv("TAPP_BRUTE_FAULT", "write_then_fail")
        with pytest.raises(pytapp.UnsupportedError, match="returned 15"):
            plan.execute(1.0, a, b, 0.0, None, d)
    assert parent.tobytes() == before.tobytes()


@pytest.mark.parametrize("beta", [0.0, 2.0])
def test_alpha_zero_reads_neither_a_nor_b(test_library: str, beta: float) -> None:
    rng = np.random.default_rng(9)
    a = np.full((3, 4), np.nan)
    b = rng.standard_normal((4, 2))
    c = rng.standard_normal((3, 2)) + 1j * rng.standard_normal((3, 2))
    d = np.full((3, 2), np.nan + 0j)
    a = a.astype(np.complex128)
    b = b.astype(np.complex128)
    with Handle("clib", library=test_library) as h:
        plan = TensorProduct(h, TensorInfo.from_array(a), "ik", TensorInfo.from_array(b), "kj",
                             TensorInfo.from_array(c), "ij", TensorInfo.from_array(d), "ij",
                             op_c=1, op_d=1)
        plan.execute(0.0, a, b, beta, c, d)
    want = np.conjugate(beta * np.conjugate(c)) if beta else np.zeros((3, 2))
    np.testing.assert_array_equal(d, want)
