"""The call cache's key: equal exactly when the operands' layouts are (compiled and Python)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pytapp.kernels import program

KEYS = [program._layout_key]
if program._cexec is not None:
    KEYS.append(program._cexec.layout_key)


@pytest.fixture(params=KEYS, ids=lambda f: f.__module__)
def key(request: pytest.FixtureRequest) -> Any:
    return request.param


def test_same_layouts_give_equal_keys_and_keep_the_head(key: Any) -> None:
    a, b = np.ones((3, 4)), np.ones((4, 5))
    k1 = key(("ij,jk->ik", "auto"), ("ij,jk->ik", a, b), 1)
    k2 = key(("ij,jk->ik", "auto"), ("ij,jk->ik", np.zeros((3, 4)), np.zeros((4, 5))), 1)
    assert k1 == k2 and hash(k1) == hash(k2)
    assert k1[:2] == ("ij,jk->ik", "auto")
    assert key(("x",), (a, b), 0) == key(("x",), ("ij,jk->ik", a, b), 1)  # first skips
    assert key(("y",), (a, b), 0) != key(("x",), (a, b), 0)


@pytest.mark.parametrize("other", [
    lambda a: a.T.copy().T,                      # same shape, column-major strides
    lambda a: a[::-1],                            # negative strides
    lambda a: a.astype(np.float32),               # another datatype
    lambda a: a.astype(a.dtype.newbyteorder()),   # the same datatype, byte-swapped
    lambda a: np.ones((4, 6))[:, ::2],            # padded strides
    lambda a: a.reshape(2, 3, 2),                 # another shape, same bytes
    lambda a: np.frombuffer(np.zeros(97, np.uint8).data, np.float64, 12, 1).reshape(4, 3),
])
def test_any_layout_difference_gives_another_key(key: Any, other: Any) -> None:
    a = np.ones((4, 3))
    assert key((), (a,), 0) != key((), (other(a),), 0)


def test_only_exact_ndarrays_get_a_key(key: Any) -> None:
    a = np.ones((2, 2))
    for x in ([1.0, 2.0], 3.0, np.ma.masked_array(a), np.float64(2.0)):
        assert key((), (a, x), 0) is None
    assert key((), (), 0) is not None  # no operands: still a key


def test_many_axes_many_operands(key: Any) -> None:
    ops = tuple(np.ones((1,) * 32) for _ in range(12))  # beyond the compiled stack buffer
    k = key(("h",), ops, 0)
    assert k is not None and k == key(("h",), tuple(x.copy() for x in ops), 0)
    assert k != key(("h",), (*ops[:-1], np.ones((1,) * 31)), 0)
    scalar = np.array(2.0)  # 0-d
    assert key((), (scalar,), 0) == key((), (np.array(3.0),), 0)


def test_bad_arguments_raise() -> None:
    if program._cexec is None:
        pytest.skip("the compiled extension is not built")
    with pytest.raises(TypeError):
        program._cexec.layout_key([], (), 0)
    with pytest.raises(ValueError):
        program._cexec.layout_key((), (np.ones(2),), 2)
