"""Command line exit codes and output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pytapp.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_explain(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "8", "137"]) == 0
    out = capsys.readouterr().out
    assert "8: D aliases itself" in out and "137: verification" in out


def test_info(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info"]) == 0
    assert "reference" in capsys.readouterr().out
    assert main(["info", "--json"]) == 0


def test_check_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--backend", "reference", "--cases", "1-3,38", "--seeds", "3"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == "12 passed, 0 failed"


def test_check_bad_arguments() -> None:
    assert main(["check", "--backend", "nope", "--seeds", "1"]) == 2
    assert main(["check", "--cases", "99", "--seeds", "1"]) == 2


def test_module_entry_point() -> None:
    out = subprocess.run([sys.executable, "-m", "pytapp", "explain", "19"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.startswith("19: ")


def test_examples_run() -> None:
    for script in sorted((ROOT / "examples").glob("*.py")):
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr


def test_demo_runs_examples_and_quick_bench() -> None:
    out = subprocess.run([sys.executable, "-m", "pytapp", "demo"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "both agree with numpy.einsum" in out.stdout
    assert "geometric" in out.stdout


def test_plan_command_shows_candidates(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "ijql,kq->ijkl", "--shapes", "6x5x4x3", "7x4", "--backend", "blas"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ijql,kq->ijkl (F64 x F64 -> F64") and "on blas" in out
    assert main(["plan", "ij,jk->ik", "--shapes", "3x4", "4x5", "--run"]) == 0
    assert "auto chose" in capsys.readouterr().out
    assert main(["plan", "ij,jk->ik", "--shapes", "3x4", "5x6"]) == 2  # error 1, reported
    assert main(["plan", "ij,jk->ik", "--shapes", "3x4x2", "4x5"]) == 2
