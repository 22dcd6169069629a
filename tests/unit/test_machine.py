"""Machine constants: measured once, cached in a file keyed by the machine, or defaults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytapp import machine


def test_measured_once_and_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "machine.json"
    monkeypatch.setenv("PYTAPP_MACHINE_FILE", str(path))
    monkeypatch.delenv("PYTAPP_MACHINE", raising=False)
    monkeypatch.setattr(machine, "_cached", None)
    first = machine.constants()
    assert first.measured and first.bandwidth > 0
    assert first.gemm_rate("numpy", "f64") > 0 and first.gemm_rate("numpy", "c64") > 0
    saved = json.loads(path.read_text())
    assert saved["key"] == first.key
    monkeypatch.setattr(machine, "_cached", None)
    monkeypatch.setattr(machine, "_measure", lambda key: pytest.fail("measured twice"))
    again = machine.constants()  # read back from the file, not measured
    assert again.big == first.big and again.bandwidth == first.bandwidth


def test_defaults_and_unknown_rates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTAPP_MACHINE", "defaults")
    m = machine.constants()
    assert not m.measured and m.gemm_rate("numpy", "f32") > 0
    assert m.gemm_rate("nolib", "f32") == 0.0


def test_fingerprint_names_the_executor_build() -> None:
    """A rebuilt executor is another fingerprint: it carries the digest of the built file."""
    import hashlib

    pytest.importorskip("pytapp._cexec")
    import pytapp._cexec as cexec

    with open(str(cexec.__file__), "rb") as fh:
        want = hashlib.sha1(fh.read()).hexdigest()[:12]
    assert machine.fingerprint().endswith(f"|executor={want}")
