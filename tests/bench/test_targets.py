"""The targets suite: each group measures pytapp against its baseline and checks the result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytapp.bench import targets
from pytapp.bench.cases import BenchCase
from pytapp.cli import main


def test_overhead_rows_time_execute_contract_and_einsum() -> None:
    rows = targets.overhead_rows(repeats=2, cases=targets.small_cases()[3:5], seconds=0.002)
    assert [r.name for r in rows] == [
        f"small_{i} {what}" for i in (3, 4)
        for what in ("execute", "execute C", "contract", "einsum")]
    for r in rows:
        assert r.pytapp_s > 0 and r.baseline_s > 0 and r.lower_is_better
        assert r.errors["pytapp"] < 1e-12
        assert r.met == (r.ratio <= r.goal)
    chains = targets.network_overhead_rows(repeats=1, seconds=0.002)
    assert [r.name for r in chains] == [f"chain of {n} einsum" for n in (3, 4, 5)]
    assert all(r.errors["pytapp"] < 1e-12 and r.goal == 1.0 for r in chains)


def test_gemm_rows_cover_gemm_shaped_cases_only() -> None:
    gemm = BenchCase("g", "test", "ik,kj->ij", {"i": 64, "k": 32, "j": 48}, "f64")
    batched = BenchCase("bg", "test", "bik,bkj->bij", {"b": 3, "i": 32, "k": 16, "j": 24},
                        "f32")
    permuted = BenchCase("p", "test", "ki,kj->ji", {"i": 64, "k": 32, "j": 48}, "f64")
    hadamard = BenchCase("h", "test", "ij,ij->ij", {"i": 64, "j": 48}, "f64")
    rows = targets.gemm_rows(repeats=2, cases=[gemm, batched, permuted, hadamard])
    names = [r.name for r in rows]
    assert "g" in names and "bg" in names and "h" not in names
    for r in rows:
        assert r.errors["pytapp"] < 1e-5 and not r.lower_is_better and r.goal == 0.95
        assert "m=" in r.note


def test_permutation_and_cold_start_rows() -> None:
    perm = targets.permutation_rows(mib=1)
    assert {r.name.split()[2] for r in perm} <= {"f32", "f64", "c128"}
    assert all(r.ratio > 0 for r in perm)
    (cold,) = targets.cold_start_rows()
    assert cold.pytapp_s > 0 and "cold kernel cache" in cold.note


def test_reports_and_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [targets.TargetRow("per-call overhead", "x execute", "numpy", 2e-6, 1e-6, 1.5, True),
            targets.TargetRow("GEMM-shaped vs flat GEMM", "y", "torch", 1.0, 0.99, 0.95,
                              False, "m=1", {"pytapp": 0.0})]
    assert not rows[0].met and rows[1].met
    table = targets.targets_table(rows)
    assert "1 of 2 targets met" in table
    markdown = targets.targets_markdown(rows, "t.png")
    assert "## per-call overhead" in markdown and "**no**" in markdown
    monkeypatch.setattr(targets, "run_targets", lambda repeats, progress: rows)
    out = tmp_path / "t.json"
    code = main(["bench", "--suite", "targets", "--json", str(out), "--plot",
                 str(tmp_path / "t.png"), "--markdown", str(tmp_path / "t.md")])
    assert code == 0
    data = json.loads(out.read_text())
    assert [r["met"] for r in data["rows"]] == [False, True]
    assert (tmp_path / "t.png").stat().st_size > 0
