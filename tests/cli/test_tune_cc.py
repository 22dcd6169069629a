"""``pytapp tune`` fills the wisdom file; ``pytapp bench --suite cc`` runs the CC-like loop."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import pytapp
from pytapp import wisdom
from pytapp.bench import ccsd
from pytapp.cli import main


def test_tune_fills_wisdom_that_einsum_then_uses(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "wisdom.json"
    monkeypatch.setenv("PYTAPP_WISDOM", str(store))
    monkeypatch.delenv("PYTAPP_AUTOTUNE", raising=False)
    wisdom.forget()
    work = tmp_path / "work.json"
    work.write_text(json.dumps([{"equation": "ij,jk->ik", "shapes": [[6, 5], [5, 4]]},
                                {"equation": "abc,cd->abd", "shapes": [[3, 4, 5], [5, 2]],
                                 "dtype": "float32"}]))
    out = tmp_path / "choices.json"
    assert main(["tune", "--file", str(work), "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["equation"] for r in rows] == ["ij,jk->ik", "abc,cd->abd"]
    entries = json.loads(store.read_text())["entries"]
    assert len(entries["network"]) == 2  # products: those with two candidates worth timing
    wisdom.forget()  # a new process
    a, b = np.arange(30.0).reshape(6, 5), np.arange(20.0).reshape(5, 4)
    expr = pytapp.einsum_expression("ij,jk->ik", a, b, backend="auto")
    assert np.array_equal(expr(a, b), np.einsum("ij,jk->ik", a, b))
    assert expr.choices == {pytapp.Datatype.F64: rows[0]["choice"]}
    assert "PYTAPP_AUTOTUNE" not in os.environ  # set for the command's own run only


def test_tune_bad_workload(tmp_path: Path) -> None:
    assert main(["tune"]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"equation": "ij"}')
    assert main(["tune", "--file", str(bad)]) == 2


def test_cc_terms_and_shapes_are_consistent() -> None:
    for eq, shapes in ccsd.cc_shapes(0.25):
        ops = [np.ones(s) for s in shapes]
        np.einsum(eq, *ops)  # raises on a label whose extents differ


def test_bench_cc_suite(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ccsd, "ITERATIONS", 1)
    md, js = tmp_path / "cc.md", tmp_path / "cc.json"
    assert main(["bench", "--suite", "cc", "--size", "0.2", "--repeats", "1", "--json",
                 str(js), "--markdown", str(md)]) == 0  # 0: every result matches numpy
    data = json.loads(js.read_text())
    assert "pytapp" in data["seconds"] and "numpy" in data["seconds"]
    assert max(data["errors"].values()) < 1e-10
    assert "default vs" in md.read_text()
