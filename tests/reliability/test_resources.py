"""Concurrency, memory limits, offsets beyond 2^31, and a C library that misbehaves."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import pytapp
from pytapp import Attr, Datatype, Handle, TensorInfo, TensorProduct


def test_one_plan_from_eight_threads(any_backend: str) -> None:
    rng = np.random.default_rng(8)
    h = Handle(any_backend)
    info_a, info_b = TensorInfo(Datatype.F64, (12, 9, 4)), TensorInfo(Datatype.F64, (9, 7))
    info_d = TensorInfo(Datatype.F64, (7, 4, 12))
    plan = TensorProduct(h, info_a, "ikl", info_b, "kj", None, None, info_d, "jli")
    inputs = [(rng.standard_normal((12, 9, 4)), rng.standard_normal((9, 7))) for _ in range(8)]
    outputs = [np.zeros((7, 4, 12)) for _ in range(8)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def work(i: int) -> None:
        try:
            barrier.wait()
            for _ in range(20):
                plan.execute(1.0, inputs[i][0], inputs[i][1], 0.0, None, outputs[i])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for (a, b), d in zip(inputs, outputs, strict=True):
        np.testing.assert_allclose(d, np.einsum("ikl,kj->jli", a, b), rtol=1e-12, atol=1e-12)


def test_memory_limit_refuses_huge_workspace(backend: str) -> None:
    h = Handle(backend)
    # D's interleaved layout forces a temporary the size of D on most backends.
    a, b = TensorInfo(Datatype.F64, (64, 64, 8)), TensorInfo(Datatype.F64, (8, 64, 64))
    d = TensorInfo(Datatype.F64, (64, 64, 64, 64)).with_strides((64, 64**3, 1, 64**2))
    plan_small = TensorProduct(h, TensorInfo(Datatype.F64, (2, 2)), "ik",
                               TensorInfo(Datatype.F64, (2, 2)), "kj", None, None,
                               TensorInfo(Datatype.F64, (2, 2)), "ij")
    h.set_attr(Attr.MEMORY_LIMIT, 1 << 20)
    try:
        plan = TensorProduct(h, a, "abp", b, "pcd", None, None, d, "acbd")
    except pytapp.UnsupportedError as err:
        assert "MEMORY_LIMIT" in str(err) and err.code == 18
    else:
        assert plan.workspace_bytes <= 1 << 20  # this backend needs no temporary
    # A limit on the executor is checked at execution.
    ex = h.create_executor()
    ex.set_attr(Attr.MEMORY_LIMIT, 0)
    d_small = np.zeros((2, 2))
    if plan_small.workspace_bytes > 0:
        with pytest.raises(pytapp.UnsupportedError):
            plan_small.execute(1.0, np.ones((2, 2)), np.ones((2, 2)), 0.0, None, d_small, ex)
        assert np.all(d_small == 0)
    with pytest.raises(pytapp.ExecutorError):
        ex.set_attr(Attr.MEMORY_LIMIT, -5)


def test_offsets_beyond_two_to_the_31(any_backend: str, tmp_path: Path) -> None:
    """Element offsets of 2^31 and more are exact (a sparse file-backed memmap, no RAM)."""
    n = 2**31 + 8
    big = np.memmap(tmp_path / "sparse.bin", dtype=np.float64, mode="w+", shape=(n,))
    big[0], big[2**31], big[2**31 + 5] = 1.5, -2.0, 4.0
    # A with offsets 0 and 2^31 (two elements), as a 1-mode tensor over the flat memmap.
    a_info = TensorInfo(Datatype.F64, (2,), (2**31,))
    b = np.array([10.0, 100.0])
    d = np.zeros(())
    plan = TensorProduct(Handle(any_backend), a_info, "k", TensorInfo.from_array(b), "k",
                         None, None, TensorInfo.from_array(d), "")
    plan.execute(1.0, big, b, 0.0, None, d)
    assert float(d) == 1.5 * 10.0 + (-2.0) * 100.0
    big._mmap.close()  # type: ignore[attr-defined]


RISKY = """
import sys
from pytapp.conformance import CASES, run_instance
failed = 0
for backend in sys.argv[1:]:
    for case in (19, 26, 27, 28, 38, 39):  # every invalid layout and misuse, many seeds
        for seed in range(60 if case in (38, 39) else 20):
            outcome = run_instance(CASES[case].make(seed), backend)
            if outcome.verdict == "fail":
                failed += 1
                print(backend, case, seed, outcome.message)
print("done", failed)
"""


def test_risky_inputs_never_crash_the_interpreter(every_backend: list[str]) -> None:
    out = subprocess.run([sys.executable, "-c", RISKY, *every_backend], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "done 0", out.stdout[-2000:]


@pytest.mark.parametrize("fault", ["unknown_code", "no_text"])
def test_clib_faulty_codes_are_errors(test_library: str, fault: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    h = Handle("clib", library=test_library)
    x = np.ones((2, 2))
    d = np.full((2, 2), 7.0)
    plan = TensorProduct(h, TensorInfo.from_array(x), "ik", TensorInfo.from_array(x), "kj",
                         None, None, TensorInfo.from_array(d), "ij")
    monkeypatch.setenv("TAPP_BRUTE_FAULT", fault)
    with pytest.raises(pytapp.TappError) as err:
        plan.execute(1.0, x, x, 0.0, None, d)
    text = str(err.value)
    assert ("4242" in text) if fault == "unknown_code" else ("no explanation" in text)
    assert np.all(d == 7.0)


def test_clib_crash_is_confined_and_reported(test_library: str) -> None:
    env = dict(os.environ, TAPP_BRUTE_FAULT="crash")
    code = (
        "import numpy as np, pytapp\n"
        f"pytapp.contract('ij,jk->ik', np.ones((2,2)), np.ones((2,2)), "
        f"backend='clib:{test_library}')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode < 0  # the child died of a signal; this process did not
    # pytapp check --isolate runs each case in a child and reports the crash as a failure.
    check = subprocess.run(
        [sys.executable, "-m", "pytapp", "check", "--library", test_library, "--isolate",
         "--cases", "2", "--seeds", "2"], env=env, capture_output=True, text=True, timeout=300)
    assert check.returncode == 1
    assert "crashed" in check.stdout and check.stdout.strip().endswith("failed")
