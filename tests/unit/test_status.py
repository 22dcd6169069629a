"""Async status (SPEC section 4): check_completion, wait, executor.wait; CPU runs are complete."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import pytest

import pytapp
from pytapp import Completion, Executor, Handle, Status, TensorInfo, TensorProduct


def test_cpu_backends_return_completed_statuses(backend: str) -> None:
    rng = np.random.default_rng(3)
    a, b, d = rng.standard_normal((3, 4)), rng.standard_normal((4, 2)), np.zeros((3, 2))
    with Handle(backend) as h:
        plan = TensorProduct(h, TensorInfo.from_array(a), "ik", TensorInfo.from_array(b), "kj",
                             None, None, TensorInfo.from_array(d), "ij")
        ex = Executor(blocking=False)  # only a cluster executor can be asynchronous
        st = plan.execute(1.0, a, b, 0.0, None, d, ex)
        assert st.check_completion() is Completion.COMPLETE and st.error() is None
        np.testing.assert_allclose(d, a @ b, rtol=1e-12)  # done before wait()
        assert st.wait() is st
        ex.wait()


def test_pending_status_reports_completion() -> None:
    future: Future[object] = Future()
    st = Status.pending(future, backend="x")
    assert st.check_completion() is Completion.INCOMPLETE and st.error() is None
    future.set_result(None)
    assert st.check_completion() is Completion.COMPLETE
    assert st.wait() is st


def test_failed_status_raises_its_error_on_each_wait() -> None:
    future: Future[object] = Future()
    st = Status.pending(future)
    err = pytapp.errors.error_for(pytapp.ErrorCode.OPERAND_MISMATCH, "block 3 failed")
    future.set_exception(err)
    assert st.check_completion() is Completion.FAILED and st.error() is err
    for _ in range(2):
        with pytest.raises(pytapp.OperandMismatchError, match="block 3 failed"):
            st.wait()


def test_executor_wait_waits_for_all_and_raises_the_first_failure() -> None:
    ex = Executor()
    good: Future[object] = Future()
    bad: Future[object] = Future()
    later: Future[object] = Future()
    statuses = [Status.pending(f) for f in (good, bad, later)]
    for st in statuses:
        ex.track(st)
    good.set_result(None)
    bad.set_exception(pytapp.errors.error_for(pytapp.ErrorCode.READ_ONLY, "bad"))
    later.set_result(None)
    with pytest.raises(pytapp.ReadOnlyError):
        ex.wait()
    assert [s.check_completion() for s in statuses] == [
        Completion.COMPLETE, Completion.FAILED, Completion.COMPLETE]
    ex.wait()  # reported once: nothing left to wait for
