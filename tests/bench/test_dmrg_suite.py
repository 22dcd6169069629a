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
    # each routed mode's calls were paired once: both sides timed, over the same calls
    assert set(result.calls) == {"registry", "cotengra"}
    for mine, theirs, count in result.calls.values():
        assert count > 0 and mine > 0 and theirs > 0
    assert "routed calls, paired" in text


def test_paired_calls_time_both_and_return_pytapps_result() -> None:
    """The pairing wrapper runs both functions on array calls (pytapp's result returned) and
    only pytapp's on others, counting only the paired ones."""
    import numpy as np

    ran: list[str] = []

    def mine(x: object) -> str:
        ran.append("mine")
        return "mine"

    def theirs(x: object) -> str:
        ran.append("theirs")
        return "theirs"

    paired = dmrg._Paired(seed=1)
    call = paired.wrap(mine, theirs)
    assert [call(np.ones(2)) for _ in range(6)] == ["mine"] * 6
    assert sorted(ran) == ["mine"] * 6 + ["theirs"] * 6
    assert ran[0::2] != ["mine"] * 6 or ran[1::2] != ["theirs"] * 6  # both orders occur

    class Lazy:
        shape = (2,)

    ran.clear()
    assert call(Lazy()) == "mine" and ran == ["mine"] and paired.count == 6


def test_cli_writes_json(tmp_path: Path) -> None:
    _needs_quimb()
    out = tmp_path / "dmrg.json"
    assert main(["bench", "--suite", "dmrg", "--quick", "--repeats", "1",
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data["samples"]) == set(dmrg.MODES)
    assert set(data["calls"]) == set(dmrg.MODES) - {"numpy"}
    assert all(len(v) == 1 for v in data["samples"].values())
