"""Benchmark harness, JSON schema, correctness verdicts and reports (tiny sizes, no timings)."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import numpy as np
import pytest

from pytapp.bench import report
from pytapp.bench.cases import (
    DOMAINS,
    BenchCase,
    generate,
    load_public,
    random_case,
    small_family,
    suite,
)
from pytapp.bench.harness import interleaved, run_bench, time_call
from pytapp.bench.peers import Contender
from pytapp.cli import main

TINY = [c for c in small_family()][:3]


def test_public_cases_match_shared_file() -> None:
    cases = load_public()
    assert len(cases) >= 20 and all(c.flops > 0 for c in cases)
    names = {c.name for c in cases}
    assert {"ccsd_ring_akic", "attn_scores_bf16", "inner_full"} <= names


def test_generators_are_seeded_and_scalable() -> None:
    for domain in DOMAINS:
        one, two = generate(domain, seed=3), generate(domain, seed=3)
        assert one == two and one.extents == two.extents
        half = generate(domain, seed=3, size=0.5)
        assert sum(half.extents.values()) < sum(one.extents.values())
    with pytest.raises(ValueError):
        generate("astrology", seed=0)
    assert {c.name for c in suite("small")} == {c.name for c in small_family()}
    with pytest.raises(ValueError):
        suite("huge")


def test_random_suite_is_seeded_and_bounded() -> None:
    cases = suite("random")
    assert len(cases) >= 10 and len({c.einsum for c in cases}) == len(cases)
    assert random_case(5) == random_case(5) and random_case(5).extents == random_case(5).extents
    for case in cases:
        la, lb, ld = case.labels
        assert set(ld) <= set(la + lb)  # no broadcast labels: every peer can run it
        assert all(np.prod(case.shape(x)) <= 1 << 24 for x in (la, lb, ld))
        assert case.dtype in ("f32", "f64", "c64", "c128", "bf16")
    assert {c.name for c in cases} <= {c.name for c in suite("full")}


def test_arrays_are_random_not_zero() -> None:
    a, b, c, d = TINY[0].arrays(seed=1)
    assert np.count_nonzero(a) == a.size and np.count_nonzero(b) == b.size
    assert np.count_nonzero(c) == c.size and c.shape == d.shape
    assert d.shape == TINY[0].shape(TINY[0].labels[2])


def test_interleaved_rounds_shuffle_and_repeat() -> None:
    order: list[str] = []
    calls = {name: (lambda n=name: order.append(n)) for name in "abcd"}
    times = interleaved(calls, rounds=6, sample_seconds=0.0, seed=1)
    assert sorted(times) == list("abcd") and all(len(t) == 6 for t in times.values())
    timed = order[8:]  # after one warm-up and one calibration call each (sample_seconds 0)
    rounds = [timed[i:i + 4] for i in range(0, len(timed), 4)]
    assert len(rounds) == 6 and all(sorted(r) == list("abcd") for r in rounds)
    assert len({tuple(r) for r in rounds}) > 1  # the order changes between rounds
    # A sample repeats a fast call for about sample_seconds; a slow one runs once.
    slow = interleaved({"sleep": lambda: time.sleep(0.004)}, rounds=2, sample_seconds=0.001)
    assert len(slow["sleep"]) == 2 and min(slow["sleep"]) >= 0.004
    count: list[int] = []
    fast = interleaved({"x": lambda: count.append(1)}, rounds=1, sample_seconds=0.005)
    assert len(count) > 10 and fast["x"][0] < 0.005
    # More rounds until min_seconds are spent.
    more = interleaved({"sleep": lambda: time.sleep(0.002)}, rounds=1, sample_seconds=0.0,
                       min_seconds=0.02)
    spent = more["sleep"]
    assert len(spent) >= 2 and sum(spent) >= 0.02 > sum(spent[:-1])  # stopped once reached


def test_interleaved_settles_between_pools(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytapp.bench import harness

    order: list[str] = []
    pauses: list[tuple[str, float]] = []
    real_sleep = time.sleep
    monkeypatch.setattr(harness.time, "sleep",
                        lambda s: pauses.append((order[-1] if order else "", s)))
    calls = {name: (lambda n=name: order.append(n)) for name in ("np1", "np2", "tc")}
    pools = {"np1": "blas", "np2": "blas", "tc": "torch"}
    interleaved(calls, rounds=5, sample_seconds=0.0, seed=3, pool_of=pools.__getitem__,
                settle_seconds=0.3)
    monkeypatch.setattr(harness.time, "sleep", real_sleep)
    timed = order[6:]  # after one warm-up and one calibration call each
    switches = sum(pools[x] != pools[y] for x, y in itertools.pairwise(timed))
    assert switches >= 5 and len(pauses) == switches  # a pause at each change of pool only
    assert all(s == 0.3 for _, s in pauses)
    pauses.clear()
    interleaved(calls, rounds=3, sample_seconds=0.0, pool_of=lambda _: "blas")
    assert not pauses  # one pool: never


def test_time_call_counts() -> None:
    calls = []
    times = time_call(lambda: calls.append(1), warmup=2, repeats=3)
    assert len(times) == 3 and len(calls) == 5 and all(t >= 0 for t in times)
    # Fast calls are repeated until min_seconds are spent (up to max_repeats).
    import time

    times = time_call(lambda: time.sleep(0.002), repeats=2, min_seconds=0.05, max_repeats=100)
    assert 10 <= len(times) <= 40


def _wrong(case: BenchCase, a: np.ndarray, b: np.ndarray, c: np.ndarray,
           d: np.ndarray) -> Contender:
    def call() -> np.ndarray:
        return (0.75 * np.einsum(case.einsum, a, b) - 0.5 * c) * 1.01

    return Contender("wrong", call, np.asarray, "backend")


def test_harness_flags_wrong_results_and_fills_every_field() -> None:
    result = run_bench(TINY, backends=["blas", "reference"], peers=["numpy"], repeats=2,
                       measure_peaks=False, extra={"wrong": _wrong})
    for c in result.cases:
        assert c.measurements["wrong"].verdict.startswith("wrong")
        for name in ("blas", "reference", "numpy.einsum"):
            m = c.measurements[name]
            assert m.verdict == "ok", m.verdict
            assert m.median_s > 0 and m.min_s > 0 and m.gflops > 0 and m.repeats == 2
            assert m.ratio_to_best_peer > 0
        assert c.measurements["blas"].algorithm
    data = report.to_json(result)
    assert set(data) >= {"suite", "environment", "peaks", "cases",
                         "geomean_ratio_to_best_peer"}
    fields = {"median_s", "min_s", "gflops", "ratio_to_best_peer", "roofline_pct", "verdict",
              "peak_extra_bytes", "algorithm"}
    for case in data["cases"]:
        for res in case["results"].values():
            assert fields <= set(res)
    env = data["environment"]
    assert {"cpu", "cores", "threadpools", "versions"} <= set(env)
    json.dumps(data)  # serialisable
    assert "geometric mean" in report.table_text(result)


def test_unavailable_peer_is_reported_not_skipped() -> None:
    bf16 = next(c for c in load_public() if c.dtype == "bf16").scaled(0.05)
    result = run_bench([bf16], backends=["blas"], peers=["tblis"], repeats=1,
                       measure_peaks=False)
    verdict = result.cases[0].measurements["pytblis"].verdict
    assert verdict.startswith("n/a") and "bf16" in verdict


def test_reports_written(tmp_path: Path) -> None:
    result = run_bench(TINY[:1], peers=["numpy"], repeats=1, measure_peaks=True)
    assert result.peaks["copy_gbytes_per_s"] > 0 and result.peaks["gemm_gflops"]
    report.write_json(result, tmp_path / "r.json")
    report.write_markdown(result, tmp_path / "r.md", "r.png")
    report.write_plot(result, tmp_path / "r.png")
    assert json.loads((tmp_path / "r.json").read_text())["cases"]
    assert "| case |" in (tmp_path / "r.md").read_text()
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_bench_exit_codes(tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    assert main(["bench", "--suite", "small", "--case", "small_0", "--repeats", "1",
                 "--peers", "numpy", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["cases"][0]["name"] == "small_0"
    assert main(["bench", "--suite", "nope"]) == 2
    assert main(["bench", "--suite", "small", "--case", "no-such-case"]) == 2
    assert main(["bench", "--suite", "small", "--peers", "fortran"]) == 2
    assert main(["bench", "--suite", "small", "--backend", "nope"]) == 2


def test_report_from_json_round_trip(tmp_path: Path) -> None:
    result = run_bench(TINY[:2], peers=["numpy"], repeats=1, measure_peaks=False)
    path = tmp_path / "run.json"
    report.write_json(result, path)
    again = report.from_json(json.loads(path.read_text()))
    assert report.to_json(again)["cases"] == report.to_json(result)["cases"]
    assert main(["report", str(path), "--plot", str(tmp_path / "p.png"), "--markdown",
                 str(tmp_path / "p.md")]) == 0
    assert (tmp_path / "p.png").exists() and (tmp_path / "p.md").exists()
    assert main(["report", str(tmp_path / "missing.json")]) == 2


def test_bench_and_check_a_c_library(test_library: str, tmp_path: Path) -> None:
    out = tmp_path / "lib.json"
    assert main(["bench", "--suite", "small", "--case", "small_0", "small_3", "--repeats", "1",
                 "--min-seconds", "0", "--backend", "blas", "--library", test_library,
                 "--peers", "numpy", "--json", str(out)]) == 0
    results = json.loads(out.read_text())["cases"][0]["results"]
    assert results[f"clib:{test_library}"]["verdict"] == "ok"
    assert main(["check", "--library", test_library, "--cases", "2", "--seeds", "2"]) == 0
