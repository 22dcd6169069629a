"""Tuning budget, persisted wisdom, and deterministic default choices."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pytapp
from pytapp import Handle, TensorInfo, TensorProduct, machine, wisdom
from pytapp.backends.auto import AutoPlan
from pytapp.expression import EinsumExpression


@pytest.fixture
def wisdom_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "wisdom.json"
    monkeypatch.setenv("PYTAPP_WISDOM", str(path))
    wisdom.forget()
    yield path
    wisdom.forget()


def test_budget_needs_runs_and_pays_for_itself() -> None:
    b = wisdom.Budget()
    for _ in range(wisdom.MIN_RUNS - 1):
        b.add(1.0)
    assert not b.allows(0.0)  # too few runs, however long they took
    b.add(1.0)
    total = b.seconds
    assert b.allows(wisdom.TUNE_SHARE * 2 * total)
    assert not b.allows(wisdom.TUNE_SHARE * 2 * total * 1.01)


def test_record_lookup_and_file_format(wisdom_file: Path) -> None:
    wisdom.record("product", "k1", {"choice": "blas"})
    wisdom.forget()  # as a new process would: read back from the file
    assert wisdom.lookup("product", "k1") == {"choice": "blas"}
    data = json.loads(wisdom_file.read_text())
    assert data["fingerprint"] == machine.fingerprint()
    assert data["entries"]["product"]["k1"] == {"choice": "blas"}


def test_another_machine_or_version_invalidates(wisdom_file: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    wisdom.record("product", "k1", {"choice": "torch"})
    monkeypatch.setattr(wisdom, "fingerprint", lambda: "another cpu|numpy=0")
    wisdom.forget()
    assert wisdom.lookup("product", "k1") is None
    wisdom.record("product", "k2", {"choice": "blas"})  # replaces the stale file
    data = json.loads(wisdom_file.read_text())
    assert data["fingerprint"] == "another cpu|numpy=0"
    assert data["entries"]["product"] == {"k2": {"choice": "blas"}}


def test_off_keeps_wisdom_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTAPP_WISDOM", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    wisdom.forget()
    assert not wisdom.recorded("product")
    wisdom.record("product", "k", 1)
    assert wisdom.lookup("product", "k") == 1
    assert wisdom.recorded("product") and not wisdom.recorded("network")
    assert not any(tmp_path.iterdir())
    wisdom.forget()
    assert not wisdom.recorded("product")


def test_default_path_is_the_user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTAPP_WISDOM")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert wisdom.path() == tmp_path / "pytapp" / "wisdom.json"


def test_two_processes_writing_at_once_lose_nothing(wisdom_file: Path) -> None:
    code = ("import sys\nfrom pytapp import wisdom\n"
            "for i in range(40):\n    wisdom.record('product', f'{sys.argv[1]}-{i}', i)\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(p)], env=dict(os.environ))
             for p in range(3)]
    assert all(p.wait() == 0 for p in procs)
    entries = json.loads(wisdom_file.read_text())["entries"]["product"]
    assert entries == {f"{p}-{i}": i for p in range(3) for i in range(40)}


def _gemm(handle: Handle) -> tuple[TensorProduct, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    a, b = rng.integers(-3, 4, (40, 30)).astype(float), rng.integers(-3, 4, (30, 20)).astype(float)
    d = np.zeros((40, 20))
    plan = TensorProduct(handle, TensorInfo.from_array(a), "ik", TensorInfo.from_array(b), "kj",
                         None, None, TensorInfo.from_array(d), "ij")
    return plan, a, b, d


def test_a_product_run_twenty_times_is_never_timed(wisdom_file: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTAPP_AUTOTUNE", raising=False)
    monkeypatch.setattr(AutoPlan, "_tune", lambda *args: pytest.fail("timed"))
    plan, a, b, d = _gemm(Handle("auto"))
    for _ in range(20):
        plan.execute(1.0, a, b, 0.0, None, d)
        assert np.array_equal(d, np.einsum("ik,kj->ij", a, b))


def test_explicit_autotune_records_wisdom_that_later_plans_use(wisdom_file: Path) -> None:
    h = Handle("auto")
    plan, a, b, d = _gemm(h)
    status = plan.execute(1.0, a, b, 0.0, None, d, h.create_executor(autotune=True))
    assert np.array_equal(d, np.einsum("ik,kj->ij", a, b))
    wisdom.forget()
    again = _gemm(h)[0]
    assert again.algorithm.startswith(f"auto -> {status.backend}:")


def test_expression_run_twenty_times_is_never_timed(wisdom_file: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(EinsumExpression, "tune", lambda *args: pytest.fail("timed"))
    rng = np.random.default_rng(1)
    ops = [rng.integers(-2, 3, s).astype(float) for s in ((5, 6), (6, 7), (7, 3))]
    for _ in range(20):
        got = pytapp.einsum("ij,jk,kl->il", *ops, backend="auto")
        assert np.array_equal(got, np.einsum("ij,jk,kl->il", *ops))


def test_expression_tune_is_remembered(wisdom_file: Path) -> None:
    rng = np.random.default_rng(2)
    ops = [rng.integers(-2, 3, s).astype(float) for s in ((5, 6), (6, 7))]
    expr = EinsumExpression("ij,jk->ik", *ops, backend="auto")
    choice = expr.tune(ops, pytapp.Datatype.F64)
    assert choice in ("auto", "blas", "torch")  # tblis is never timed (see pytapp.backends.auto)
    assert np.array_equal(expr(*ops), ops[0] @ ops[1])
    wisdom.forget()
    fresh = EinsumExpression("ij,jk->ik", *ops, backend="auto")
    assert np.array_equal(fresh(*ops), ops[0] @ ops[1])
    assert fresh.choices == {pytapp.Datatype.F64: choice}


_CHOOSE = """
import numpy as np, pytapp
from pytapp import Handle, TensorInfo, TensorProduct
h = Handle("auto")
for la, lb, ld, sa, sb in [("ik", "kj", "ij", (4, 5), (5, 3)), ("ik", "kj", "ij", (300, 200),
        (200, 100)), ("abcd", "cdef", "abef", (8, 9, 10, 11), (10, 11, 7, 6)),
        ("iajb", "jb", "ia", (12, 40, 12, 40), (12, 40))]:
    a, b = np.ones(sa), np.ones(sb)
    d = np.einsum(f"{la},{lb}->{ld}", a, b)
    p = TensorProduct(h, TensorInfo.from_array(a), la, TensorInfo.from_array(b), lb, None, None,
                      TensorInfo.from_array(d), ld)
    print(p.algorithm)
"""


def test_two_processes_choose_the_same(wisdom_file: Path, tmp_path: Path) -> None:
    env = dict(os.environ, PYTAPP_WISDOM=str(wisdom_file),
               PYTAPP_MACHINE_FILE=str(tmp_path / "machine.json"))
    env.pop("PYTAPP_MACHINE", None)
    env.pop("PYTAPP_AUTOTUNE", None)
    runs = [subprocess.run([sys.executable, "-c", _CHOOSE], env=env, capture_output=True,
                           text=True, check=True).stdout for _ in range(2)]
    assert runs[0] == runs[1] and len(runs[0].splitlines()) == 4


class _Unloaded:
    """A candidate backend whose library would take ``seconds`` to import (never planned)."""

    name = "torch"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def setup_seconds(self) -> float:
        return self.seconds


def _auto_plan(loading: float) -> AutoPlan:
    from pytapp import backends
    from pytapp.analysis.spec import build_spec
    from pytapp.datatypes import ElementOp
    from pytapp.precision import Prectype

    item = (pytapp.Datatype.F64, (64, 64), (64, 1))
    spec = build_spec((*item, ("a", "b"), ElementOp.IDENTITY),
                      (*item, ("b", "c"), ElementOp.IDENTITY),
                      (*item, ("a", "c"), ElementOp.IDENTITY),
                      (*item, ("a", "c"), ElementOp.IDENTITY), Prectype.DEFAULT, False)
    candidates = {"blas": backends.get("blas"), "torch": _Unloaded(loading)}
    return AutoPlan(spec, candidates, "blas", None,  # type: ignore[arg-type]
                    predicted={"blas": 1e-3, "torch": 1e-3})


@pytest.mark.parametrize("loading", [0.0, 2.0])
def test_timing_a_candidate_counts_its_library_import(loading: float,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTAPP_AUTOTUNE", raising=False)
    plan = _auto_plan(loading)
    assert plan._timed == ["blas", "torch"]
    plan.budget.runs, plan.budget.seconds = wisdom.MIN_RUNS, 1.0  # 1 s run: 0.2 s to spend
    assert plan._should_tune(None) is (loading == 0.0)
    plan.budget.runs, plan.budget.seconds = 1000, 20.0  # run long enough to pay the import too
    assert plan._should_tune(None)


def test_optional_module_import_cost() -> None:
    from pytapp.backends.base import IMPORT_SECONDS, OptionalModule, setup_seconds

    assert OptionalModule("numpy", "x").setup_seconds() == 0.0  # imported
    module = OptionalModule("json.tool", "x")
    if "json.tool" not in sys.modules:
        assert module.setup_seconds() > 0.0
    module.load()
    assert module.setup_seconds() == 0.0
    assert setup_seconds(object()) == 0.0
    assert setup_seconds(_Unloaded(IMPORT_SECONDS["torch"])) == IMPORT_SECONDS["torch"]


def test_pricing_and_budgeted_tuning_do_not_import_torch() -> None:
    script = ("import sys, numpy as np, pytapp\n"
              "for _ in range(300):\n"
              "    pytapp.einsum('ij,jk->ik', np.ones((30, 30)), np.ones((30, 30)))\n"
              "a = np.ones((12, 12, 48, 48))\n"
              "for _ in range(60):\n"
              "    pytapp.einsum('ijab,kjcb->ikac', a, a)\n"
              "print('torch' in sys.modules)\n")
    env = {**os.environ, "PYTAPP_WISDOM": "off"}
    env.pop("PYTAPP_AUTOTUNE", None)
    env.pop("PYTAPP_BACKEND", None)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, check=True, timeout=300)
    assert out.stdout.strip() == "False"


def test_time_candidates_runs_each_back_to_back_and_drops_failures() -> None:
    order: list[str] = []

    def failing() -> None:
        order.append("bad")
        raise RuntimeError("cannot run")

    times = wisdom.time_candidates({"a": lambda: order.append("a"), "bad": failing,
                                    "b": lambda: order.append("b")}, 3)
    assert order == ["a", "a", "a", "bad", "b", "b", "b"]  # never alternating pools
    assert sorted(times) == ["a", "b"] and all(0 <= t < 1 for t in times.values())


def test_time_candidates_pauses_before_another_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool's idle threads spin after its calls: its candidates run first, the others after
    a pause each, grouped by pool."""
    events: list[str] = []
    monkeypatch.setattr(wisdom, "_sleep", lambda s: events.append(f"pause {s}"))
    runs = {name: (lambda name=name: events.append(name)) for name in ("t", "a", "b", "c")}
    pools = {"t": "torch", "a": "blas", "b": "blas", "c": "tblis"}
    times = wisdom.time_candidates(runs, 2, pools=pools, after="blas")
    pause = f"pause {wisdom.POOL_SETTLE_SECONDS}"
    assert events == ["a", "a", "b", "b", pause, "c", "c", pause, "t", "t"]
    assert sorted(times) == ["a", "b", "c", "t"]
    assert wisdom.pause_seconds(pools, "blas") == 2 * wisdom.POOL_SETTLE_SECONDS
    events.clear()
    wisdom.time_candidates(runs, 1, pools=pools, after=None)  # unknown: a pause before each
    assert events.count(pause) == 3 == wisdom.pause_seconds(pools, None) / float(pause[6:])
    events.clear()
    wisdom.time_candidates({"a": runs["a"], "b": runs["b"]}, 1, pools=pools, after="blas")
    assert events == ["a", "b"]  # one pool, the caller's: no pause
    assert wisdom.pause_seconds({"a": "blas"}, "blas") == 0.0


def test_time_candidates_warms_each_up_right_before_its_timed_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm-up on another pool would leave its threads spinning through the timed runs of
    the pools before it: each warm-up runs after its pool's pause, untimed."""
    events: list[str] = []
    monkeypatch.setattr(wisdom, "_sleep", lambda s: events.append("pause"))
    runs = {name: (lambda name=name: events.append(name)) for name in ("t", "a")}

    def failing() -> None:
        events.append("bad")
        raise RuntimeError("cannot run these operands")

    pools = {"t": "torch", "a": "blas", "bad": "torch"}
    times = wisdom.time_candidates({**runs, "bad": failing}, 2, pools=pools, after="blas",
                                   warm_up=True)
    assert events == ["a", "a", "a", "pause", "t", "t", "t", "bad"]
    assert sorted(times) == ["a", "t"]


class _OtherPool(_Unloaded):
    """An imported candidate on a thread pool of its own."""

    pool = "torch"


def test_product_tuning_counts_the_pause_before_another_pool(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTAPP_AUTOTUNE", raising=False)
    plan = _auto_plan(0.0)
    plan.candidates["torch"] = _OtherPool(0.0)  # type: ignore[assignment]
    # timing costs 8 runs of 1 ms (4 each) and torch's planning, 9 ms, plus the pause
    plan.budget.runs, plan.budget.seconds = 100, 0.1  # 1 ms a run, 20 ms to spend
    monkeypatch.setattr(wisdom, "POOL_SETTLE_SECONDS", 0.0)
    assert plan._should_tune(None)
    monkeypatch.setattr(wisdom, "POOL_SETTLE_SECONDS", 0.05)
    assert not plan._should_tune(None)
    plan.budget.runs, plan.budget.seconds = 300, 0.3  # 60 ms to spend: pays the pause too
    assert plan._should_tune(None)
