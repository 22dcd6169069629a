"""The coupled-cluster-like suite: interleaved by iteration, results checked against NumPy."""

from __future__ import annotations

from pytapp.bench import ccsd


def test_cc_interleaves_by_iteration() -> None:
    heard: list[str] = []
    r = ccsd.run_cc(size=0.2, rounds=2, iterations=3, contenders=["pytapp", "numpy"],
                    progress=heard.append, settle_seconds=0.0)
    assert heard == ["round 1 of 2", "round 2 of 2"]
    assert sorted(r.totals) == ["numpy", "pytapp"]
    for name, total in r.totals.items():
        assert total > 0
        assert set(r.per_term[name]) == set(ccsd.cc_terms())
        # each term's least time is at most its share of the iteration's least time
        assert sum(r.per_term[name].values()) <= total * (1 + 1e-9)
        assert r.errors[name] < 1e-12  # against numpy.einsum in float64


def test_cc_report_says_how_it_was_timed() -> None:
    r = ccsd.CcResult(2, 5, 1, totals={"pytapp": 1.0, "pytapp[blas]": 2.0, "numpy": 4.0})
    text = ccsd.cc_markdown(r)
    assert "by iteration" in text
    assert "default vs fastest single backend (pytapp[blas]): 2.00x (met" in text
    assert "default vs numpy.einsum: 4.00x (met" in text
