"""Fixtures of the compat tests (the oracle lives in einsum_oracle)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from einsum_oracle import assert_einsum_close


@pytest.fixture
def check() -> Callable[..., None]:
    return assert_einsum_close
