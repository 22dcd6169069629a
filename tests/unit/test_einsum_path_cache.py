"""A one-shot ``pytapp.einsum`` given an explicit path reuses its compiled expression."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import pytapp
from pytapp import numpy_api
from pytapp.expression import path_key


@pytest.mark.parametrize("path", [[(0, 1), (0, 2), (0, 1)], [[0, 1], [0, 2], [0, 1]],
                                  ["einsum_path", (0, 1), (0, 2), (0, 1)]])
def test_explicit_path_hits_the_one_shot_cache(path: list[Any],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    ops = [rng.standard_normal((3, 3, 3))] + [rng.standard_normal((5, 3)) for _ in range(3)]
    eq = "abc,ia,jb,kc->ijk"
    want = np.einsum(eq, *ops, optimize=["einsum_path", (0, 1), (0, 2), (0, 1)])
    np.testing.assert_allclose(pytapp.einsum(eq, *ops, optimize=path), want, rtol=1e-12)

    def no_planning(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a repeated call with the same path planned again")

    monkeypatch.setattr(numpy_api, "cached_expression", no_planning)
    again = pytapp.einsum(eq, *ops, optimize=list(path))  # an equal list, not the same one
    np.testing.assert_allclose(again, want, rtol=1e-12)


def test_path_key_keeps_other_arguments() -> None:
    assert path_key([(0, 1), [1, 0]]) == ((0, 1), (1, 0))
    optimizer = object()
    assert path_key(optimizer) is optimizer and path_key("greedy") == "greedy"
    assert path_key(True) is True and path_key(None) is None


def test_forget_calls_drops_one_shot_expressions_and_their_budgets() -> None:
    """A benchmark's "new run": the one-shot expression (and its tuning budget) is rebuilt."""
    from pytapp import expression
    from pytapp.numpy_api import forget_calls

    a = np.ones((3, 4))
    pytapp.einsum("ij,jk->ik", a, a.T, optimize=True)
    before = expression.cached_expression("ij,jk->ik", [a, a.T], True, None, None, None)
    forget_calls()
    after = expression.cached_expression("ij,jk->ik", [a, a.T], True, None, None, None)
    assert after is not before
