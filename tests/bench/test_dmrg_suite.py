"""The dmrg suite: every mode's solve in every round, energies agree, reports (speed untested)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytapp.bench import dmrg
from pytapp.cli import main


def _needs_quimb() -> None:
    # At run time, not at collection: importing cotengra registers its path optimizers with
    # opt_einsum, which would change how opt_einsum's own test suite (tests/compat) is
    # parametrized when it is collected after this module.
    pytest.importorskip("quimb")
    pytest.importorskip("cotengra")


def test_each_round_times_each_mode_and_energies_agree() -> None:
    _needs_quimb()
    result = dmrg.run_dmrg(sites=6, bonds=(4, 8), sweeps=2, rounds=2,
                           modes=("numpy", "registry", "cotengra"))
    assert not result.skipped
    assert {m: len(v) for m, v in result.samples.items()} == {"numpy": 2, "registry": 2,
                                                               "cotengra": 2}
    for mode, samples in result.samples.items():
        assert result.seconds[mode] == min(samples) and result.median(mode) >= min(samples)
        assert abs(result.energy[mode] - result.energy["numpy"]) < 1e-10
    text = dmrg.dmrg_markdown(result)
    assert "| registry |" in text and "median" in text


def test_cli_writes_json(tmp_path: Path) -> None:
    _needs_quimb()
    out = tmp_path / "dmrg.json"
    assert main(["bench", "--suite", "dmrg", "--quick", "--repeats", "1",
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data["samples"]) == set(dmrg.MODES)
    assert all(len(v) == 1 for v in data["samples"].values())
