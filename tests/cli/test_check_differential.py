"""``pytapp check --library A --against B``, and crashing or hanging libraries per case."""

from __future__ import annotations

import os
import subprocess
import sys


def _check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytapp", "check", *args], capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, **(env or {})))


def test_a_library_agrees_with_pytapp(test_library: str) -> None:
    out = _check("--library", test_library, "--against", "pytapp", "--cases", "18,26",
                 "--seeds", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1] == "4 agree, 0 disagree, 0 unsupported"


def test_two_libraries_and_unsupported_products(test_library: str, async_library: str) -> None:
    out = _check("--library", test_library, "--against", async_library, "--cases", "2",
                 "--seeds", "3")
    assert out.returncode == 0, out.stdout + out.stderr
    *_, last = out.stdout.strip().splitlines()
    agree, disagree, unsupported = (int(w) for w in last.split()[::2])
    assert disagree == 0 and agree + unsupported == 3


def test_wrong_values_are_a_disagreement(test_library: str) -> None:
    out = _check("--library", test_library, "--cases", "18", "--seeds", "2", "--against",
                 "pytapp", env={"TAPP_BRUTE_FAULT": "wrong"})
    assert out.returncode == 1
    assert out.stdout.strip().splitlines()[-1] == "0 agree, 2 disagree, 0 unsupported"
    assert "values differ beyond tolerance" in out.stdout
    assert "reproduce: pytapp.conformance.CASES[18].make(0)" in out.stdout


def test_a_library_that_fails_after_writing_d_disagrees(test_library: str) -> None:
    out = _check("--library", test_library, "--cases", "18", "--seeds", "1", "--against",
                 "pytapp", env={"TAPP_BRUTE_FAULT": "write_then_fail"})
    assert out.returncode == 1
    assert "error 18 (library code 15)" in out.stdout  # each side's code and text
    assert "D CHANGED" not in out.stdout  # the bridge restored D


def test_crashing_and_hanging_libraries_are_reported_per_case(test_library: str) -> None:
    for fault, word in (("crash", "crashed"), ("hang", "hung")):
        out = _check("--library", test_library, "--against", "pytapp", "--cases", "18",
                     "--seeds", "2", "--timeout", "8", env={"TAPP_BRUTE_FAULT": fault})
        assert out.returncode == 1, out.stderr
        lines = out.stdout.strip().splitlines()
        assert lines[-1] == "0 agree, 2 disagree, 0 unsupported"
        assert sum(f"A {word}" in x for x in lines) == 2
        plain = _check("--library", test_library, "--cases", "18", "--seeds", "1",
                       "--timeout", "8", env={"TAPP_BRUTE_FAULT": fault})
        assert plain.returncode == 1
        assert plain.stdout.strip().splitlines()[-1] == "0 passed, 1 failed"
        assert word in plain.stdout
