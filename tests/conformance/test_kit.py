"""The conformance kit on every available backend, and proof that the kit catches errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pytapp import backends, kernels
from pytapp.backends import blas
from pytapp.backends.reference import ReferenceBackend, ReferencePlan
from pytapp.conformance import CASES, run, run_case
from pytapp.conformance.runner import run_instance
from pytapp.executor import Executor
from pytapp.operands import BoundProduct
from pytapp.status import Status

SEEDS = 6


def _assert_no_failures(outcomes: list[Any]) -> None:
    failures = [f"seed {o.seed}: {o.message} | {o.description}" for o in outcomes
                if o.verdict == "fail"]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("number", sorted(CASES))
def test_case(any_backend: str, number: int) -> None:
    outcomes = run_case(number, any_backend, range(SEEDS))
    _assert_no_failures(outcomes)
    # Nothing may be silently skipped: unsupported products must say why.
    for o in outcomes:
        if o.verdict == "unsupported":
            assert o.message


@pytest.mark.skipif(not kernels.available(), reason="numba is not installed")
@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("number", sorted(CASES))
def test_case_on_compiled_kernels(number: int, stream: bool,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """blas with its compiled kernels and routes on every size (small operands normally take
    NumPy's einsum and ufuncs); reductions streaming x in memory order, or not."""
    monkeypatch.setattr(kernels, "SMALL_WORK", 0)
    monkeypatch.setattr(kernels, "STREAM_MAX_OUT", (1 << 62) if stream else 0)
    monkeypatch.setattr(blas, "SMALL_ELEMENTS", 0)
    outcomes = run_case(number, "blas", range(SEEDS))
    _assert_no_failures(outcomes)


@pytest.mark.parametrize("number", sorted(CASES))
@pytest.mark.usefixtures("summed_route")
def test_case_on_summed_gemms(number: int) -> None:
    """blas running every product whose contracted labels do not fuse as GEMMs looped over
    summed labels (normally only from 2 Mflop on): compiled (no executor), and on one and
    on three workers."""
    for threads in (None, 1, 3):
        outcomes = [run_instance(CASES[number].make(seed), "blas", threads=threads)
                    for seed in range(SEEDS)]
        _assert_no_failures(outcomes)


class _OffByOnePlan(ReferencePlan):
    """Deliberately wrong: adds 1e-3 to every element it writes."""

    def run(self, bound: BoundProduct, executor: Executor | None) -> Status:
        status = super().run(bound, executor)
        if bound.d.size:
            bound.d[...] = bound.d + np.asarray(1e-3).astype(bound.d.dtype)
        return status


class WrongBackend(ReferenceBackend):
    name = "wrong-for-tests"

    def plan(self, spec, executor):  # type: ignore[no-untyped-def]
        return _OffByOnePlan(spec)


class _NoConjPlan(ReferencePlan):
    """Deliberately wrong: ignores conjugation of A."""

    def __init__(self, spec):  # type: ignore[no-untyped-def]
        from dataclasses import replace

        from pytapp.datatypes import ElementOp

        super().__init__(replace(spec, a=replace(spec.a, op=ElementOp.IDENTITY)))


class NoConjBackend(ReferenceBackend):
    name = "noconj-for-tests"

    def plan(self, spec, executor):  # type: ignore[no-untyped-def]
        return _NoConjPlan(spec)


@pytest.fixture
def broken_backends():  # type: ignore[no-untyped-def]
    backends.register("wrong-for-tests", f"{__name__}:WrongBackend")
    backends.register("noconj-for-tests", f"{__name__}:NoConjBackend")
    yield
    for name in ("wrong-for-tests", "noconj-for-tests"):
        backends._FACTORIES.pop(name, None)
        backends._INSTANCES.pop(name, None)


def test_kit_flags_a_wrong_backend(broken_backends) -> None:  # type: ignore[no-untyped-def]
    summary = run("wrong-for-tests", cases=[2, 18], seeds=3)
    assert summary.count("fail") == 6
    summary = run("noconj-for-tests", cases=[19, 20], seeds=6)
    assert summary.count("fail") > 0


def test_verifying_executor_catches_wrong_backend(broken_backends) -> None:  # type: ignore[no-untyped-def]
    import pytapp

    a, b = np.ones((2, 3)), np.ones((3, 2))
    d = np.full((2, 2), 5.0)
    with pytapp.Handle("wrong-for-tests") as h:
        plan = pytapp.TensorProduct(h, pytapp.TensorInfo.from_array(a), "ik",
                                    pytapp.TensorInfo.from_array(b), "kj", None, None,
                                    pytapp.TensorInfo.from_array(d), "ij")
        with pytest.raises(pytapp.VerificationError) as err:
            plan.execute(1.0, a, b, 0.0, None, d, h.create_executor(verify=True))
        assert err.value.code == 137
        assert np.all(d == 5.0)
        plan.execute(1.0, a, b, 0.0, None, d)  # without verification the wrong value lands
        assert np.allclose(d, 3.001)


def test_verifying_executor_accepts_correct_backend(backend: str) -> None:
    import pytapp

    rng = np.random.default_rng(3)
    a, b, c = rng.standard_normal((4, 3)), rng.standard_normal((3, 5)), rng.standard_normal((4, 5))
    d = c.copy()
    with pytapp.Handle(backend) as h:
        plan = pytapp.TensorProduct(h, pytapp.TensorInfo.from_array(a), "ik",
                                    pytapp.TensorInfo.from_array(b), "kj", None, None,
                                    pytapp.TensorInfo.from_array(d), "ij")
        plan.execute(2.0, a, b, 1.0, d, d, h.create_executor(verify=True))
    np.testing.assert_allclose(d, 2 * a @ b + c, rtol=1e-12)
