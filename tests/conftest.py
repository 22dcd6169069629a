"""Shared fixtures: the backends under test (the C test library compiled once) and helpers."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import pytapp

HERE = Path(__file__).resolve().parent


def _temporary_dir(prefix: str) -> Path:
    """A fresh directory removed when this process exits (each xdist worker has its own)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


# Tuning results go to a fresh file, never to the user's cache (subprocesses inherit it).
os.environ["PYTAPP_WISDOM"] = str(_temporary_dir("pytapp-wisdom-") / "w.json")
os.environ.pop("PYTAPP_AUTOTUNE_CACHE", None)


def build_test_library(variant: str = "") -> str | None:
    """Compile tests/clib/tapp_brute.c with the system C compiler; None without one.

    ``variant``: ``""`` (released ABI), ``"MULTI_TAPP"`` (the multi-tapp ABI) or
    ``"MINIMAL"`` (only the four mandatory symbols), ``"CUTENSOR_BINDINGS"`` or ``"ASYNC"``
    (see the head of tapp_brute.c).
    """
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    name = f"libtapp_brute{('_' + variant.lower()) if variant else ''}.so"
    out = _temporary_dir("pytapp-clib-") / name
    flags = [f"-DTAPP_{variant}"] if variant else []
    subprocess.run([cc, "-O1", "-shared", "-fPIC", *flags, "-o", str(out),
                    str(HERE / "clib" / "tapp_brute.c"), "-lm"], check=True)
    return str(out)


TEST_LIBRARY = build_test_library()


def python_backends() -> list[str]:
    """Every registered backend available on this machine (clib needs a library)."""
    return [name for name, (ok, _) in pytapp.available_backends().items() if ok]


def all_backends() -> list[str]:
    """The Python backends plus the C test library through the clib bridge."""
    extra = [f"clib:{TEST_LIBRARY}"] if TEST_LIBRARY else []
    return python_backends() + extra


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


@pytest.fixture(params=python_backends())
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=all_backends(), ids=lambda b: b.split(":")[0])
def any_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def test_library() -> str:
    """Path of the compiled C test library (tests needing it are skipped without a compiler)."""
    if TEST_LIBRARY is None:
        pytest.skip("no C compiler to build the test library")
    return TEST_LIBRARY


@pytest.fixture(scope="session")
def every_backend() -> list[str]:
    """Names of every backend under test, the C test library included."""
    return all_backends()


def _variant(name: str) -> str:
    path = build_test_library(name)
    if path is None:
        pytest.skip("no C compiler to build the test library")
    return path


@pytest.fixture(scope="session")
def multi_library() -> str:
    """The C test library built for the multi-tapp ABI."""
    return _variant("MULTI_TAPP")


@pytest.fixture(scope="session")
def minimal_library() -> str:
    """The C test library exporting only the four mandatory TAPP symbols."""
    return _variant("MINIMAL")


@pytest.fixture(scope="session")
def cutensor_library() -> str:
    """The C test library built for the cutensor_bindings ABI."""
    return _variant("CUTENSOR_BINDINGS")


@pytest.fixture(scope="session")
def async_library() -> str:
    """The C test library exporting upstream's asynchronous symbols and its name."""
    return _variant("ASYNC")


@pytest.fixture
def summed_route(monkeypatch: pytest.MonkeyPatch) -> object:
    """blas (and the compiled lowering) take the summed-GEMM route wherever it exists.

    The route's size thresholds are dropped and copies are priced out of reach; the cached
    decisions are cleared before and after.
    """
    from pytapp.analysis import cost, program, viewgemm
    from pytapp.backends import blas

    monkeypatch.setattr(viewgemm, "SUMMED_MIN_FLOPS", 0)
    monkeypatch.setattr(viewgemm, "SUMMED_MIN_MADDS", 1)
    monkeypatch.setattr(viewgemm, "MachineModel", lambda: cost.MachineModel(bandwidth=1.0))
    monkeypatch.setattr(blas, "SMALL_ELEMENTS", 0)
    viewgemm.summed_view_gemm.cache_clear()
    program._lower.cache_clear()
    yield None
    viewgemm.summed_view_gemm.cache_clear()
    program._lower.cache_clear()


def run_in_threads(work: Callable[[int], None], count: int = 16) -> None:
    """Run ``work(k)`` for k < ``count`` on that many threads at once (released together by a
    barrier); fail with the first errors any of them raised."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def body(k: int) -> None:
        try:
            barrier.wait()
            work(k)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]


@pytest.fixture
def in_threads() -> Callable[..., None]:
    """:func:`run_in_threads`, for tests that share a plan or an expression between threads."""
    return run_in_threads
