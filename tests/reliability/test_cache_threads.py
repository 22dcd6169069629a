"""Caches never destroy a plan or handle under a call in flight (clear and eviction)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

import pytapp
from pytapp import contraction

THREADS = 16
CALLS = 60

# (expression, shape of A, shape of B): distinct products, so that calls also create plans
PRODUCTS = [("ij,jk->ik", (6, 5), (5, 4)), ("ijk,kl->ijl", (3, 4, 5), (5, 2)),
            ("ab,b->a", (7, 3), (3,)), ("abc,cba->", (2, 3, 4), (4, 3, 2))]


def _hammer(call: Callable[[int, int], None], clearer: Callable[[], None]) -> list[BaseException]:
    """Run ``call(thread, i)`` CALLS times on THREADS threads while ``clearer`` runs in a loop."""
    errors: list[BaseException] = []
    stop = threading.Event()
    start = threading.Barrier(THREADS + 1)

    def worker(t: int) -> None:
        start.wait()
        for i in range(CALLS):
            try:
                call(t, i)
            except BaseException as exc:  # collected: the test reports every failure
                errors.append(exc)

    def clear() -> None:
        start.wait()
        while not stop.is_set():
            clearer()

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    cleaner = threading.Thread(target=clear)
    for th in [*threads, cleaner]:
        th.start()
    for th in threads:
        th.join()
    stop.set()
    cleaner.join()
    return errors


def _operands(t: int, i: int) -> tuple[str, np.ndarray, np.ndarray, np.ndarray]:
    expr, sa, sb = PRODUCTS[(t + i) % len(PRODUCTS)]
    rng = np.random.default_rng(t * 1000 + i)
    a, b = rng.integers(-3, 4, sa).astype(float), rng.integers(-3, 4, sb).astype(float)
    return expr, a, b, np.einsum(expr, a, b)  # small integers: exact in float64


@pytest.mark.parametrize("backend", ["blas", "auto"])
def test_contract_survives_clear_plan_cache(backend: str) -> None:
    def call(t: int, i: int) -> None:
        expr, a, b, want = _operands(t, i)
        got = pytapp.contract(expr, a, b, backend=backend)
        assert np.array_equal(got, want)

    errors = _hammer(call, pytapp.clear_plan_cache)
    pytapp.clear_plan_cache()
    assert not errors, f"{len(errors)} of {THREADS * CALLS} calls failed: {errors[0]!r}"


def test_contract_survives_eviction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(contraction, "PLAN_CACHE_SIZE", 1)  # every new layout evicts
    monkeypatch.setattr(contraction, "HANDLE_CACHE_SIZE", 1)  # every other backend evicts

    def call(t: int, i: int) -> None:
        expr, a, b, want = _operands(t, i)
        backend = ("blas", "reference")[(t * 7 + i) % 2]
        got = pytapp.contract(expr, a, b, backend=backend)
        assert np.array_equal(got, want)

    errors = _hammer(call, lambda: None)
    pytapp.clear_plan_cache()
    assert not errors, f"{len(errors)} of {THREADS * CALLS} calls failed: {errors[0]!r}"


def test_einsum_survives_clear_plan_cache() -> None:
    def call(t: int, i: int) -> None:
        rng = np.random.default_rng(t * 1000 + i)
        a, b, c = (rng.integers(-3, 4, s).astype(float) for s in ((4, 5), (5, 6), (6, 3)))
        got = pytapp.einsum("ij,jk,kl->il", a, b, c, backend="blas")
        assert np.array_equal(got, np.einsum("ij,jk,kl->il", a, b, c))

    errors = _hammer(call, pytapp.clear_plan_cache)
    pytapp.clear_plan_cache()
    assert not errors, f"{len(errors)} of {THREADS * CALLS} calls failed: {errors[0]!r}"


def test_cleared_handles_and_plans_are_destroyed_once_idle() -> None:
    x = np.ones((3, 3))
    pytapp.contract("ij,jk->ik", x, x, backend="blas")
    handle = contraction.shared_handle("blas")
    entry = handle.plan_cache.lookup(next(iter(handle.plan_cache._entries)))
    assert entry is not None  # leased: a call in flight
    pytapp.clear_plan_cache()
    assert not entry.plan.destroyed and not handle.destroyed  # not under the call
    entry.plan.execute(1.0, x, x, 0.0, None, out := np.zeros((3, 3)))
    assert np.array_equal(out, x @ x)
    entry.cache.unlease(entry)  # the last user destroys both
    assert entry.plan.destroyed and handle.destroyed
    assert np.array_equal(pytapp.contract("ij,jk->ik", x, x, backend="blas"), x @ x)
