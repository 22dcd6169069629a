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
    # a thin GEMM's, per datatype, for a long sum and short ones
    assert set(first.orientation) == set(machine.ORIENT_KEYS)
    assert {key.split("@")[0] for key in first.orientation} == set(machine.ORIENTED)
    assert again.orientation == first.orientation
    assert all(v > 0 for v in first.orientation.values())


def test_a_file_without_orientations_gets_them_measured_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file from before the per-datatype orientation: its rates are kept, the orientation
    of each datatype is measured once and added to the file."""
    path = tmp_path / "machine.json"
    monkeypatch.setenv("PYTAPP_MACHINE_FILE", str(path))
    monkeypatch.delenv("PYTAPP_MACHINE", raising=False)
    monkeypatch.setattr(machine, "_cached", None)
    rates = {"numpy": {"f64": 1e10}}
    path.write_text(json.dumps({"key": machine.fingerprint(), "bandwidth": 5e9, "big": rates,
                                "small": rates, "tall_over_wide": 1.3}))
    probed: list[str] = []

    def probe(dt: str, k: str | None = None) -> float:
        probed.append(dt if k is None else f"{dt}@{k}")
        return 1.25 if k is None else 0.5

    monkeypatch.setattr(machine, "_orientation", probe)
    monkeypatch.setattr(machine, "_measure", lambda key: pytest.fail("measured again"))
    got = machine.constants()
    assert got.bandwidth == 5e9 and got.big == rates
    assert sorted(probed) == sorted(machine.ORIENT_KEYS)
    assert got.tall_over_wide("f32") == 1.25 and got.tall_over_wide("bf16") == 1.0
    assert got.tall_over_wide("f32", 16) == 0.5 and got.tall_over_wide("f32", 10**6) == 1.25
    want = {key: 0.5 if "@" in key else 1.25 for key in machine.ORIENT_KEYS}
    assert json.loads(path.read_text())["orientation"] == want
    monkeypatch.setattr(machine, "_cached", None)
    assert machine.constants().orientation == got.orientation
    assert len(probed) == len(machine.ORIENT_KEYS)


def test_a_file_with_long_sums_only_gets_the_short_ones_measured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "machine.json"
    monkeypatch.setenv("PYTAPP_MACHINE_FILE", str(path))
    monkeypatch.delenv("PYTAPP_MACHINE", raising=False)
    monkeypatch.setattr(machine, "_cached", None)
    rates = {"numpy": {"f64": 1e10}}
    long = dict.fromkeys(machine.ORIENTED, 1.4)
    path.write_text(json.dumps({"key": machine.fingerprint(), "bandwidth": 5e9, "big": rates,
                                "small": rates, "orientation": long}))
    probed: list[tuple[str, str | None]] = []

    def probe(dt: str, k: str | None = None) -> float:
        probed.append((dt, k))
        return 0.7

    monkeypatch.setattr(machine, "_orientation", probe)
    got = machine.constants()
    assert all(k is not None for _, k in probed)
    assert len(probed) == len(machine.ORIENT_KEYS) - len(machine.ORIENTED)
    assert got.tall_over_wide("f64") == 1.4 and got.tall_over_wide("f64", 16) == 0.7


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


def test_the_tile_probe_binds_the_blas_pool_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """blas's BF16 rate is measured as the kernel runs: shared over the BLAS's pool, which
    the compiled executor's module binds before the probe (unbound, it ran on one thread)."""
    from pytapp.kernels import program

    assert program.blas_available in machine._BEFORE_TILES
    calls: list[int] = []
    monkeypatch.setattr(machine, "_BEFORE_TILES", [lambda: calls.append(1)])
    rates = machine._tile_rates()
    assert bool(calls) == bool(rates)  # a CPU without the kernels measures nothing
