"""``pytapp info --library``: ABI, optional symbols, name, error texts, probe survival."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pytapp.backends.clib_probe import error_texts


def _info(path: str, *extra: str,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytapp", "info", "--library", path, *extra],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **(env or {})))


def test_info_describes_an_async_library(async_library: str) -> None:
    out = _info(async_library, "--json")
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert record["abi"] == "released" and record["survived"] and record["probe_ok"]
    assert record["name"] == "tapp_brute (pytapp test library)"
    assert {"TAPP_executor_wait", "TAPP_status_check_completion"} <= set(record["optional"])
    assert record["texts"]["4"] == "Tensor D has indices not shared with tensor A or B."
    assert record["texts"]["0"] == "Success." and len(record["texts"]) == 41


def test_info_detects_multi_tapp(multi_library: str) -> None:
    out = _info(multi_library)
    assert out.returncode == 0, out.stderr
    assert "ABI: multi-tapp" in out.stdout
    assert "probe as released: " in out.stdout  # tried first (it may crash its child)


def test_info_reports_a_crashing_library(test_library: str) -> None:
    out = _info(test_library, "--abi", "released", env={"TAPP_BRUTE_FAULT": "crash"})
    assert out.returncode == 1
    assert "did not survive; the probe crashed (signal" in out.stdout
    assert "TAPP_explain_error" in out.stdout  # the symbols printed before the crash count


def test_texts_go_on_after_a_code_that_crashes(test_library: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAPP_BRUTE_FAULT", "explain_crash")
    texts = error_texts(test_library, "released", range(28, 33))
    assert texts == {28: "Unknown error.", 29: "Unknown error.", 30: "(crashed)",
                     31: "Unknown error.", 32: "Unknown error."}


def test_info_without_explain_error(minimal_library: str) -> None:
    out = _info(minimal_library)
    assert out.returncode == 0, out.stderr
    assert "optional symbols: (none)" in out.stdout
    assert "exports no TAPP_explain_error" in out.stdout
