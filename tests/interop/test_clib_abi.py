"""The clib bridge: released and multi-tapp ABIs, optional symbols, lifetimes, release, crashes.

The C test library (tests/clib/tapp_brute.c) keeps the tensor-info handles inside its products,
as the official reference does, answers 99 when an info died before its product, and counts
its live objects (``tapp_brute_live``), so these tests see what the bridge creates and destroys.
"""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
import weakref

import numpy as np
import pytest

import pytapp
from pytapp import Datatype, Handle, TensorInfo, TensorProduct
from pytapp.backends import clib

HANDLES, EXECUTORS, INFOS, PRODUCTS = range(4)


@pytest.fixture(autouse=True)
def _no_garbage_from_other_tests() -> None:
    """Counts of live C objects start from what other tests really left alive."""
    pytapp.clear_plan_cache()
    gc.collect()


def _live(path: str) -> list[int]:
    lib = ctypes.CDLL(os.path.abspath(path))  # the same loaded image: the same counters
    return [int(lib.tapp_brute_live(k)) for k in range(4)]


def _gemm_plan(handle: Handle) -> tuple[TensorProduct, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    d = np.zeros((3, 2))
    plan = TensorProduct(handle, TensorInfo.from_array(a), "ik", TensorInfo.from_array(b), "kj",
                         None, None, TensorInfo.from_array(d), "ij")
    return plan, a, b, d


def test_released_abi_is_the_default(test_library: str) -> None:
    h = Handle("clib", library=test_library)
    plan, a, b, d = _gemm_plan(h)
    plan.execute(2.0, a, b, 0.0, None, d)  # an info freed too early would give 99 here
    np.testing.assert_allclose(d, 2 * a @ b, rtol=1e-13)
    h.destroy()


def test_multi_tapp_abi_on_request(multi_library: str) -> None:
    h = Handle("clib", library=multi_library, abi="multi-tapp")
    before = _live(multi_library)
    plan, a, b, d = _gemm_plan(h)
    plan.execute(1.0, a, b, 0.0, None, d)
    np.testing.assert_allclose(d, a @ b, rtol=1e-13)
    assert _live(multi_library)[INFOS] == before[INFOS] + 4
    h.destroy()
    assert _live(multi_library) == [0, 0, 0, 0]
    with pytest.raises(pytapp.UnsupportedError):
        Handle("clib", library=multi_library, abi="v2")


def test_only_the_four_mandatory_symbols(minimal_library: str) -> None:
    h = Handle("clib", library=minimal_library)
    plan, a, b, d = _gemm_plan(h)
    plan.execute(1.0, a, b, 0.0, None, d)
    np.testing.assert_allclose(d, a @ b, rtol=1e-13)
    f32 = TensorInfo(Datatype.F32, (3, 4))
    with pytest.raises(pytapp.UnsupportedError) as err:  # the library answers 18, no text
        TensorProduct(h, f32, "ik", f32.with_extents((4, 2)), "kj", None, None,
                      f32.with_extents((3, 2)), "ij")
    assert "returned 18" in err.value.message
    assert "exports no TAPP_explain_error" in err.value.message
    plan.destroy()
    h.destroy()  # nothing to destroy with: no crash, nothing called


def test_objects_are_destroyed_in_order(test_library: str) -> None:
    start = _live(test_library)
    h = Handle("clib", library=test_library)
    p1, a, b, d = _gemm_plan(h)
    p2, *_ = _gemm_plan(h)
    live = _live(test_library)
    assert live[HANDLES] == start[HANDLES] + 1 and live[EXECUTORS] == start[EXECUTORS] + 1
    assert live[PRODUCTS] == start[PRODUCTS] + 2 and live[INFOS] == start[INFOS] + 8
    p1.destroy()
    p1.destroy()  # idempotent
    assert _live(test_library)[PRODUCTS:] == [start[PRODUCTS] + 1]
    assert _live(test_library)[INFOS] == start[INFOS] + 4
    p2.execute(1.0, a, b, 0.0, None, d)  # the other plan's infos are still alive
    with pytest.raises(pytapp.DestroyedError):
        p1.execute(1.0, a, b, 0.0, None, d)
    h.destroy()  # destroys p2 first, then the executor and the handle
    assert _live(test_library) == start
    with pytest.raises(pytapp.DestroyedError):
        p2.execute(1.0, a, b, 0.0, None, d)


def test_collected_plans_release_their_products(test_library: str) -> None:
    start = _live(test_library)
    h = Handle("clib", library=test_library)
    plan, *_ = _gemm_plan(h)
    assert _live(test_library)[PRODUCTS] == start[PRODUCTS] + 1
    del plan
    gc.collect()
    assert _live(test_library)[PRODUCTS] == start[PRODUCTS]
    assert _live(test_library)[INFOS] == start[INFOS]
    del h
    gc.collect()
    assert _live(test_library) == start


def test_products_per_layout_are_bounded(test_library: str) -> None:
    start = _live(test_library)
    h = Handle("clib", library=test_library)
    plan, a, b, d = _gemm_plan(h)
    backend_plan = plan._plan
    assert isinstance(backend_plan, clib.ClibPlan)
    for extra in range(3 * clib.MAX_PRODUCTS):  # other operand layouts: new C products
        backend_plan._product(((4 + extra, 1), (2, 1), (2, 1), (2, 1)))
    assert backend_plan.live_products == clib.MAX_PRODUCTS
    assert _live(test_library)[PRODUCTS] == start[PRODUCTS] + clib.MAX_PRODUCTS
    assert _live(test_library)[INFOS] == start[INFOS] + 4 * clib.MAX_PRODUCTS
    plan.execute(1.0, a, b, 0.0, None, d)  # its own layout, recreated after eviction
    np.testing.assert_allclose(d, a @ b, rtol=1e-13)
    h.destroy()
    assert _live(test_library) == start


def test_contract_cache_destroys_what_it_evicts(test_library: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import pytapp.contraction as contract_module
    pytapp.clear_plan_cache()
    start = _live(test_library)
    monkeypatch.setattr(contract_module, "PLAN_CACHE_SIZE", 3)
    backend = f"clib:{test_library}"
    for n in range(2, 10):
        x = np.ones((n, n))
        np.testing.assert_allclose(pytapp.contract("ij,jk->ik", x, x, backend=backend), x @ x)
    assert _live(test_library)[PRODUCTS] == start[PRODUCTS] + 3
    pytapp.clear_plan_cache()
    assert _live(test_library) == start


def test_destroy_releases_backend_plans(backend: str) -> None:
    plan = _gemm_plan(Handle(backend))[0]
    ref = weakref.ref(plan._plan)  # type: ignore[arg-type]
    plan.destroy()
    gc.collect()
    assert ref() is None  # nothing keeps the backend plan (and its workspaces) alive
    assert plan.algorithm  # still describes what it did


def test_library_codes_outside_1_to_14_are_its_own(test_library: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    h = Handle("clib", library=test_library)
    plan, a, b, d = _gemm_plan(h)
    monkeypatch.setenv("TAPP_BRUTE_FAULT", "unknown_code")
    with pytest.raises(pytapp.UnsupportedError) as err:
        plan.execute(1.0, a, b, 0.0, None, d)
    assert err.value.library_code == 4242  # type: ignore[attr-defined]
    assert "4242" in err.value.message and np.all(d == 0)
    h.destroy()


def test_check_isolates_a_crashing_library_by_default(test_library: str) -> None:
    env = dict(os.environ, TAPP_BRUTE_FAULT="crash")
    args = [sys.executable, "-m", "pytapp", "check", "--library", test_library, "--cases", "1,2",
            "--seeds", "2"]
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 1
    lines = out.stdout.strip().splitlines()
    assert sum("crashed (signal" in line for line in lines) == 2
    assert lines[-1] == "0 passed, 4 failed"  # the summary, whatever happened
    unisolated = subprocess.run([*args, "--no-isolate"], env=env, capture_output=True,
                                text=True, timeout=300)
    assert unisolated.returncode < 0  # opting out: the crash ends the run
