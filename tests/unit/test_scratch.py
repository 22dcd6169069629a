"""Scratch leases: buffers reused across leases, the pool's budget, small and unleased arrays,
and blas products whose copies come from scratch giving exact results run after run."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import pytapp
from pytapp import scratch


def test_a_closed_lease_gives_its_buffers_to_the_next() -> None:
    with scratch.lease():
        first = scratch.empty((256, 256), np.float64)
        address = first.ctypes.data
    with scratch.lease():
        again = scratch.empty((256, 256), np.float64)
        assert again.ctypes.data == address  # warm memory, not a fresh allocation
        other = scratch.empty((256, 256), np.float64)  # the first is taken: a new one
        assert other.ctypes.data != again.ctypes.data
    assert scratch.pool_bytes() >= 2 * 256 * 256 * 8


def test_small_and_unleased_arrays_are_plain() -> None:
    tiny = scratch.empty((4, 4), np.float32)
    assert tiny.flags.owndata and tiny.dtype == np.float32
    with scratch.lease():
        small = scratch.empty((8,), np.complex128)
        assert small.flags.owndata
        big = scratch.empty((300, 300), np.float32)
        assert not big.flags.owndata and big.ctypes.data % 64 == 0
        assert big.flags.c_contiguous and big.shape == (300, 300)


def test_nested_leases_share_the_outer_one() -> None:
    with scratch.lease() as outer, scratch.lease() as inner:
        assert inner is outer


def test_the_pool_keeps_at_most_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scratch, "KEEP_BYTES", 3 * (1 << 20))
    with scratch.lease():
        for _ in range(6):
            scratch.empty((1 << 20,), np.uint8)
    assert scratch.pool_bytes() <= 3 * (1 << 20)


def test_threads_never_share_a_buffer() -> None:
    seen: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def work() -> None:
        with scratch.lease():
            t = scratch.empty((128, 128), np.float64)
            barrier.wait()  # all eight hold theirs at once
            with lock:
                seen.append(t.ctypes.data)
            barrier.wait()

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(seen)) == 8


def test_blas_copies_from_scratch_stay_exact() -> None:
    """A product that packs both operands (blas's Python plan), run repeatedly on different
    data with other products in between: every result equals NumPy's in float64."""
    rng = np.random.default_rng(3)
    shapes = {"deko": (12, 12, 12, 12), "oipdj": (12, 12, 12, 12, 12)}
    for _ in range(3):
        a = rng.standard_normal(shapes["deko"])
        b = rng.standard_normal(shapes["oipdj"])
        got = pytapp.einsum("deko,oipdj->ipjek", a, b, backend="blas")
        other = pytapp.einsum("ij,jk->ik", rng.standard_normal((300, 200)),
                              rng.standard_normal((200, 300)), backend="blas")
        np.testing.assert_allclose(got, np.einsum("deko,oipdj->ipjek", a, b), rtol=1e-12,
                                   atol=1e-12)
        assert other.shape == (300, 300)



def test_the_executor_keeps_its_large_scratch_and_gives_it_back() -> None:
    """A TTGT product with megabytes of packs runs twice on other data from the blocks the
    first call kept (exact results both times); clear_plan_cache gives them back."""
    from pytapp.kernels import program

    if not program.available():
        pytest.skip("the compiled extension pytapp._cexec was not built")
    rng = np.random.default_rng(7)
    pytapp.clear_plan_cache()
    for _ in range(2):
        a = rng.integers(-3, 4, (48, 36, 40, 8)).astype(np.float64)  # 4.4 MB, packed
        b = rng.integers(-3, 4, (36, 30, 8)).astype(np.float64)
        got = pytapp.contract("ijks,jls->ilk", a, b, backend="blas")
        np.testing.assert_array_equal(got, np.einsum("ijks,jls->ilk", a, b))
    kept = program.release_scratch()
    a = rng.integers(-3, 4, (48, 36, 40, 8)).astype(np.float64)
    pytapp.contract("ijks,jls->ilk", a, b, backend="blas")
    pytapp.clear_plan_cache()
    assert program.release_scratch() == 0 < kept
