"""Non-blocking execution on a Dask cluster: the Status reports completion and errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import pytapp
import pytapp.dask
from pytapp import Completion, Executor, Handle, TensorInfo, TensorProduct


def _plan(h: Handle, a: np.ndarray, b: np.ndarray, d: np.ndarray) -> TensorProduct:
    return TensorProduct(h, TensorInfo.from_array(a), "ik", TensorInfo.from_array(b), "kj",
                         None, None, TensorInfo.from_array(d), "ij")


def test_non_blocking_execute_returns_a_pending_status(client: Any) -> None:
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((40, 30)), rng.standard_normal((30, 20))
    d = np.zeros((40, 20))
    with Handle("reference") as h:
        plan = _plan(h, a, b, d)
        ex = Executor(dask=client, blocking=False)
        st = plan.execute(2.0, a, b, 0.0, None, d, ex)
        assert st.check_completion() in (Completion.INCOMPLETE, Completion.COMPLETE)
        ex.wait()
        assert st.check_completion() is Completion.COMPLETE
        np.testing.assert_allclose(d, 2 * np.einsum("ik,kj->ij", a, b), rtol=1e-12)


class _FailingTarget:
    """A D that passes the operand checks but cannot store a block."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape, self.dtype = shape, np.dtype(np.float64)

    def __setitem__(self, where: Any, value: Any) -> None:
        raise pytapp.errors.error_for(pytapp.ErrorCode.READ_ONLY, "this store refuses blocks")


def test_non_blocking_errors_arrive_through_the_status(client: Any) -> None:
    a, b = np.ones((6, 5)), np.ones((5, 4))
    with Handle("reference") as h:
        plan = _plan(h, a, b, np.zeros((6, 4)))
        ex = Executor(dask=client, blocking=False)
        st = plan.execute(1.0, a, b, 0.0, None, _FailingTarget((6, 4)), ex)
        # the block-by-block writer reports what it wrote (SPEC 5), its cause the store's error
        with pytest.raises(pytapp.dask.PartialWriteError, match="refuses blocks") as err:
            st.wait()
        assert isinstance(err.value.__cause__, pytapp.ReadOnlyError)
        assert err.value.blocks_written == ()
        assert st.check_completion() is Completion.FAILED
        with pytest.raises(pytapp.dask.PartialWriteError):
            ex.wait()


def test_checks_still_raise_at_once(client: Any) -> None:
    a, b = np.ones((6, 5)), np.ones((5, 4))
    with Handle("reference") as h:
        plan = _plan(h, a, b, np.zeros((6, 4)))
        with pytest.raises(pytapp.OperandMismatchError):
            plan.execute(1.0, a, b, 0.0, None, np.zeros((6, 3)),
                         Executor(dask=client, blocking=False))
