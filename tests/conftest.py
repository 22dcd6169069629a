"""Shared fixtures: the backends under test and small helpers."""

from __future__ import annotations

import numpy as np
import pytest

import pytapp


def backends_under_test() -> list[str]:
    """Every registered backend that is available on this machine."""
    return [name for name, (ok, _) in pytapp.available_backends().items() if ok]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


@pytest.fixture(params=backends_under_test())
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)
