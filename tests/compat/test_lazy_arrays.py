"""autoray's lazy arrays through pytapp's NumPy functions: lazy results, numpy's values.

autoray's lazy arrays (quimb traces contractions with them, cotengra hands them to the
functions of its ``implementation=`` hook) have no ``__array_function__``: NumPy's own
functions would read each as one object element. :func:`pytapp.einsum`,
:func:`pytapp.tensordot` and :func:`pytapp.transpose` call autoray's function for their
library instead: the result is a lazy array whose ``compute()`` equals numpy's result on the
concrete arrays (exactly: the data are small integers). A duck-typed array autoray knows no
library for still goes to numpy's function.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import autoray
import numpy as np
import pytest
from autoray import lazy
from foreign_arrays import Duck

import pytapp

Op = Callable[..., Any]


def _ints(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-3, 4, shape).astype(np.float64)


A, B, C = _ints((2, 3, 4), 1), _ints((4, 5), 2), _ints((5, 2), 3)

#: (pytapp's call, numpy's call) on operands given as (A, B, C), either lazy or concrete.
CALLS: dict[str, tuple[Op, Op]] = {
    "einsum pair": (lambda a, b, c: pytapp.einsum("ijk,kl->lji", a, b),
                    lambda a, b, c: np.einsum("ijk,kl->lji", a, b)),
    "einsum network": (lambda a, b, c: pytapp.einsum("ijk,kl,lm->mij", a, b, c),
                       lambda a, b, c: np.einsum("ijk,kl,lm->mij", a, b, c)),
    "einsum implicit": (lambda a, b, c: pytapp.einsum("ijk,kl", a, b),
                        lambda a, b, c: np.einsum("ijk,kl", a, b)),
    "einsum one operand": (lambda a, b, c: pytapp.einsum("ijk->ki", a),
                           lambda a, b, c: np.einsum("ijk->ki", a)),
    "einsum sublists": (lambda a, b, c: pytapp.einsum(a, [0, 1, 2], b, [2, 3], [3, 0]),
                        lambda a, b, c: np.einsum(a, [0, 1, 2], b, [2, 3], [3, 0])),
    "tensordot 1": (lambda a, b, c: pytapp.tensordot(a, b, 1),
                    lambda a, b, c: np.tensordot(a, b, 1)),
    "tensordot pairs": (lambda a, b, c: pytapp.tensordot(a, c, ([0], [1])),
                        lambda a, b, c: np.tensordot(a, c, ([0], [1]))),
    "tensordot 0": (lambda a, b, c: pytapp.tensordot(b, c, 0),
                    lambda a, b, c: np.tensordot(b, c, 0)),
    "transpose": (lambda a, b, c: pytapp.transpose(a), lambda a, b, c: np.transpose(a)),
    "transpose axes": (lambda a, b, c: pytapp.transpose(a, (1, 2, 0)),
                       lambda a, b, c: np.transpose(a, (1, 2, 0))),
}


@pytest.mark.parametrize("which", ["all lazy", "first lazy", "second lazy"])
@pytest.mark.parametrize("name", list(CALLS))
def test_lazy_arrays_give_lazy_results(name: str, which: str) -> None:
    ours, theirs = CALLS[name]
    concrete = (A, B, C)
    lazy_at = {"all lazy": (0, 1, 2), "first lazy": (0,), "second lazy": (1, 2)}[which]
    args = [lazy.array(x) if i in lazy_at else x for i, x in enumerate(concrete)]
    want = theirs(*concrete)
    got = ours(*args)
    if not isinstance(got, lazy.LazyArray):
        # an operand the call does not use was the lazy one: numpy's arrays, numpy's result
        assert type(got) is np.ndarray
    else:
        assert got.shape == want.shape
        got = got.compute()
    assert type(got) is np.ndarray and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_lazy_calls_build_one_graph() -> None:
    """pytapp's functions compose on lazy arrays: nothing computes until compute()."""
    x = lazy.array(A)
    step = pytapp.tensordot(pytapp.transpose(x, (2, 0, 1)), lazy.array(A), ([1, 2], [0, 1]))
    total = pytapp.einsum("ij,ji->", step, pytapp.transpose(step))
    assert isinstance(total, lazy.LazyArray) and total.shape == ()
    s = np.tensordot(A.transpose(2, 0, 1), A, ([1, 2], [0, 1]))
    assert total.compute() == np.einsum("ij,ji->", s, s.T)


def test_duck_arrays_autoray_does_not_know_go_to_numpy() -> None:
    assert "autoray" in sys.modules
    with pytest.raises(ImportError):  # autoray has no function of Duck's library
        autoray.get_lib_fn(autoray.infer_backend(Duck(A)), "tensordot")
    x, y = Duck(A), Duck(B)
    got = pytapp.tensordot(x, y, 1)
    assert type(got) is np.ndarray
    np.testing.assert_array_equal(got, np.tensordot(A, B, 1))
    got = pytapp.einsum("ijk,kl->li", x, y)
    np.testing.assert_array_equal(got, np.einsum("ijk,kl->li", A, B))
    np.testing.assert_array_equal(pytapp.transpose(x, (2, 0, 1)), A.transpose(2, 0, 1))
