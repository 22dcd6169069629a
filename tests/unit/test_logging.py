"""The pytapp logger: INFO for plan and execute phases, DEBUG for layouts and copies."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import pytapp
from pytapp import Handle, TensorInfo, TensorProduct


def test_plan_and_execute_phases_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    a = np.arange(24.0).reshape(2, 3, 4)
    b = np.arange(12.0).reshape(4, 3)
    d = np.zeros((2, 4, 4))
    with caplog.at_level(logging.DEBUG, logger="pytapp"), Handle("blas") as h:
        # B is used transposed with a permuted D: the GEMM needs packing copies.
        plan = TensorProduct(h, TensorInfo.from_array(a), "ikx", TensorInfo.from_array(b),
                             "yk", None, None, TensorInfo.from_array(d), "iyx")
        plan.execute(1.0, a, b, 0.0, None, d)
    np.testing.assert_allclose(d, np.einsum("ikx,yk->iyx", a, b))
    messages = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "pytapp"]
    assert any(lv == logging.INFO and m.startswith("plan ikx,yk->iyx on blas") for lv, m in
               messages)
    assert any(lv == logging.INFO and m.startswith("execute on blas") for lv, m in messages)
    assert any(lv == logging.DEBUG and m.startswith("blas layout of ikx,yk->iyx") for lv, m in
               messages)


def test_nothing_is_logged_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    logger = logging.getLogger("pytapp")
    assert any(isinstance(hd, logging.NullHandler) for hd in logger.handlers)
    pytapp.contract("ij,jk->ik", np.ones((2, 2)), np.ones((2, 2)))
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""
