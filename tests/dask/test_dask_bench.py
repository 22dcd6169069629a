"""The dask suite at a tiny scale: both contenders run, results are checked, reports build."""

from __future__ import annotations

from pytapp.bench.dask_suite import dask_cases, dask_markdown, dask_table, run_dask


def test_dask_suite_tiny() -> None:
    cases = dask_cases(0.05)
    assert len(cases) == 5 and {c.expr for c in cases} >= {"ik,kj->ij", "iij,jk->ik"}
    results = run_dask(cases[:2], repeats=1)
    for r in results:
        assert set(r.times) == {"pytapp", "dask.array.einsum", "pytapp 1 worker"}
        assert max(r.errors.values()) < 1e-4
    text = dask_markdown(results, "dask.png")
    assert "multi-node" in text and "![dask](dask.png)" in text
    assert "geometric mean" in dask_table(results)
