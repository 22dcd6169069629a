"""The networks suite: cases, correctness of every contender, reports (tiny sizes)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from pytapp.bench.networks import (
    network_cases,
    networks_json,
    networks_markdown,
    networks_table,
    run_networks,
)
from pytapp.cli import main


def test_five_networks_from_three_fields() -> None:
    cases = network_cases()
    assert len(cases) == 5
    assert {c.domain for c in cases} == {"tensor network", "quantum chemistry",
                                         "machine learning"}
    for case in network_cases(0.1):
        arrays = case.arrays()
        assert len(arrays) == len(case.shapes) and all(np.any(a != 0) for a in arrays)
        np.einsum(case.equation, *arrays, optimize=True)  # the shapes fit the equation


def test_every_contender_is_checked(tmp_path: Path) -> None:
    results = run_networks(network_cases(0.1), repeats=1)
    for r in results:
        assert set(r.times) == {"pytapp", "opt_einsum", "cotengra", "torch.einsum"}
        assert max(r.errors.values()) < 1e-4, r.errors
        assert r.ratio > 0
    table = networks_table(results)
    assert "geometric mean" in table and "mps_norm_c128" in table
    data = json.loads(json.dumps(networks_json(results)))
    assert len(data["cases"]) == 5 and data["cases"][0]["path"]
    assert "![networks](n.png)" in networks_markdown(results, "n.png")


def test_cli_networks_suite(tmp_path: Path) -> None:
    out = tmp_path / "n.json"
    md = tmp_path / "n.md"
    assert main(["bench", "--suite", "networks", "--size", "0.1", "--repeats", "1",
                 "--case", "ccsd", "--json", str(out), "--markdown", str(md)]) == 0
    assert json.loads(out.read_text())["cases"][0]["name"] == "ccsd_quadratic_f64"
    assert "ccsd_quadratic_f64" in md.read_text()
