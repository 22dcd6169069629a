"""The networks suite: cases, correctness of every contender, reports (tiny sizes)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import opt_einsum

from pytapp.bench.networks import (
    COMPILED,
    ONE_SHOT,
    PEERS,
    network_cases,
    networks_json,
    networks_markdown,
    networks_table,
    run_networks,
)
from pytapp.cli import main

KINDS = ("mps_norm", "peps", "ccsd_quadratic", "ao_to_mo", "linear_attention", "mpo_env",
         "tt_matvec", "tucker", "cp_", "bilinear", "mera", "chain", "circuit_amplitude")


def test_networks_across_domains_and_sizes() -> None:
    cases = network_cases()
    assert len(cases) >= 12 and len({c.name for c in cases}) == len(cases)
    assert all(any(k in c.name for c in cases) for k in KINDS)
    assert {c.domain for c in cases} >= {"tensor network", "quantum chemistry",
                                         "machine learning", "quantum computing",
                                         "linear algebra"}
    sizes = [sum(math.prod(s) for s in c.shapes) for c in cases]
    assert min(sizes) < 1000 < 10**6 < max(sizes)  # from tiny to large
    for case in network_cases(quick=True):
        arrays = case.arrays()
        assert len(arrays) == len(case.shapes) and all(np.any(a != 0) for a in arrays)
        opt_einsum.contract_path(case.equation, *arrays)  # the shapes fit the equation


def test_every_contender_is_checked() -> None:
    cases = [c for c in network_cases(quick=True) if "tucker" in c.name or "circuit" in c.name]
    results = run_networks(cases, repeats=2, roof=False, sample_seconds=0.001)
    for r in results:
        assert set(r.times) == {ONE_SHOT, COMPILED, *PEERS}
        assert max(r.errors.values()) < 1e-4, r.errors
        best = min(t for n, t in r.times.items() if n in PEERS)
        assert math.isclose(r.ratio, best / r.times[COMPILED])
        assert math.isclose(r.oneshot_ratio, best / r.times[ONE_SHOT])
        named = min(r.times[n] for n in ("numpy.einsum", "oe.contract", "oe expr",
                                         "torch.einsum"))  # the target's peers: no cotengra
        assert r.target_ratios() == (named / r.times[ONE_SHOT], named / r.times[COMPILED])
        assert r.flops > 0 and math.isnan(r.roof_s)
    table = networks_table(results)
    assert "geometric mean" in table and "tucker_f64" in table and "one-shot" in table
    assert "(cotengra left out)" in table
    data = json.loads(json.dumps(networks_json(results)))
    assert len(data["cases"]) == 2 and data["cases"][0]["path"]
    assert data["geomean_compiled"] > 0 and data["geomean_oneshot"] > 0
    assert "![networks](n.png)" in networks_markdown(results, "n.png")


def test_cli_networks_suite(tmp_path: Path) -> None:
    out = tmp_path / "n.json"
    md = tmp_path / "n.md"
    assert main(["bench", "--suite", "networks", "--quick", "--repeats", "1",
                 "--case", "ccsd", "--json", str(out), "--markdown", str(md)]) == 0
    assert json.loads(out.read_text())["cases"][0]["name"] == "ccsd_quadratic_f64"
    assert "ccsd_quadratic_f64" in md.read_text()
