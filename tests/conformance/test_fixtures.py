"""Fixtures as data: export, replay through pytapp and through clib, corruption reported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from pytapp.conformance import CASES
from pytapp.conformance.fixtures import FORMAT, VERSION, export, load
from pytapp.conformance.oracle import expected_result


def _check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytapp", "check", *args], capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, **(env or {})))


def test_export_writes_versioned_data_that_loads_back(tmp_path: Path) -> None:
    index = export(str(tmp_path), cases=[2, 12, 26, 34], seeds=2)
    assert index["format"] == FORMAT and index["version"] == VERSION
    assert {f["case"] for f in index["fixtures"]} == {2, 12, 26}
    assert {s["case"] for s in index["skipped"]} == {34}  # C is D: shares an allocation
    on_disk = json.loads((tmp_path / "index.json").read_text())
    assert on_disk == index
    for f in index["fixtures"]:
        inst, expected = load(str(tmp_path / f["file"]))
        original = CASES[f["case"]].make(f["seed"])
        assert inst.expected_code == original.expected_code
        for role in "ABD":  # the same values at the same positions, from the raw bytes
            got = np.asarray(inst.items[0].need(role).view)
            want = np.asarray(original.items[0].need(role).view)
            np.testing.assert_array_equal(got, want)
        if expected is not None:
            oracle = expected_result(original, original.items[0])
            np.testing.assert_array_equal(expected.parent, oracle.parent.ravel())
            np.testing.assert_array_equal(expected.bound, oracle.bound.ravel())


def test_replay_through_clib_and_a_corrupt_fixture(tmp_path: Path, test_library: str) -> None:
    out = _check("--export", str(tmp_path), "--cases", "18,26", "--seeds", "2")
    assert out.returncode == 0, out.stderr
    replay = _check("--fixtures", str(tmp_path), "--library", test_library)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert replay.stdout.strip().splitlines()[-1] == "4 passed, 0 failed"
    # One changed byte in one operand's data: that fixture is reported, the rest still run.
    target = tmp_path / "case18-seed001-A.bin"
    raw = bytearray(target.read_bytes())
    raw[3] ^= 0x40
    target.write_bytes(bytes(raw))
    (tmp_path / "case26-seed000.json").write_text("{ not json")
    bad = _check("--fixtures", str(tmp_path), "--library", test_library)
    assert bad.returncode == 1
    lines = bad.stdout.strip().splitlines()
    assert any("case18-seed001.json: corrupt:" in x and "sha256" in x for x in lines)
    assert any("case26-seed000.json: corrupt:" in x for x in lines)
    assert lines[-1] == "2 passed, 2 failed"


def test_a_wrong_expectation_fails_the_replay(tmp_path: Path) -> None:
    export(str(tmp_path), cases=[18], seeds=1)
    record = json.loads((tmp_path / "case18-seed000.json").read_text())
    record["expect"]["tol"] = -1.0  # no result can be within a negative tolerance
    (tmp_path / "case18-seed000.json").write_text(json.dumps(record))
    out = _check("--fixtures", str(tmp_path))
    assert out.returncode == 1
    assert "case18-seed000.json: fail:" in out.stdout


def test_a_hanging_library_fails_each_fixture_and_the_replay_ends(tmp_path: Path,
                                                                  test_library: str) -> None:
    export(str(tmp_path), cases=[18], seeds=2)
    out = _check("--fixtures", str(tmp_path), "--library", test_library, "--timeout", "6",
                 env={"TAPP_BRUTE_FAULT": "hang"})
    assert out.returncode == 1
    lines = out.stdout.strip().splitlines()
    assert sum(": hung: no result within 6 s" in x for x in lines) == 2
    assert lines[-1] == "0 passed, 2 failed"
