"""The torch suite: interleaved rounds, checked results, the CLI hook (speed is not tested)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytapp.bench import torch_suite
from pytapp.cli import main

pytest.importorskip("torch")


def test_interleaved_rounds_run_each_contender_once_per_round_in_samples() -> None:
    calls: dict[str, int] = {"a": 0, "b": 0}

    def count(name: str) -> None:
        calls[name] += 1

    best = torch_suite.interleaved({"a": lambda: count("a"), "b": lambda: count("b")},
                                   rounds=3, sample_seconds=0.0)
    assert calls == {"a": 2 + 3, "b": 2 + 3}  # warm-up and calibration, then one per round
    assert set(best) == {"a", "b"} and all(t >= 0 for t in best.values())


def test_rows_check_results_and_gradients_against_float64() -> None:
    case = torch_suite.TorchCase("scores", "bhqd,bhkd->bhqk", ((1, 2, 3, 4), (1, 2, 5, 4)))
    rows = torch_suite.torch_rows(rounds=1, cases=[case], sample_seconds=0.0)
    assert [r.name for r in rows] == ["scores forward", "scores forward+backward"]
    assert set(rows[1].errors) == {"grad 0", "grad 1"}
    assert all(0 <= e < torch_suite.TOLERANCE for r in rows for e in r.errors.values())
    assert all(r.pytapp_s > 0 and r.baseline_s > 0 for r in rows)
    text = torch_suite.torch_markdown(rows)
    assert "| scores forward |" in text and "of 2 targets met" in text


def test_cases_cover_8_to_2048_and_attention() -> None:
    names = [c.name for c in torch_suite.torch_cases()]
    assert "matmul 8" in names and "matmul 2048" in names
    assert any(n.startswith("attention scores") for n in names)
    assert any(n.startswith("attention values") for n in names)


def test_cli_suite(tmp_path: Path) -> None:
    out = tmp_path / "torch.json"
    assert main(["bench", "--suite", "torch", "--case", "matmul 8", "--repeats", "1",
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["suite"] == "torch"
    assert [r["name"] for r in data["rows"]] == ["matmul 8 forward", "matmul 8 forward+backward"]
    assert main(["bench", "--suite", "torch", "--case", "no-such-case"]) == 2
