"""Fixtures of the compat tests (the oracle lives in einsum_oracle)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable

import pytest
from einsum_oracle import assert_einsum_close


@pytest.fixture
def check() -> Callable[..., None]:
    return assert_einsum_close


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run a sample of a module's tests where it says so (``PYTAPP_COMPAT_FULL=1``: all).

    A module that defines ``keep_in_sample(name, k)`` keeps the ``k``-th collected instance
    of test ``name`` (``Class::function`` or ``function``, parameters stripped) only when it
    returns True: the other projects' suites are run whole on one backend and sampled on the
    others, so that ``make test`` stays fast.
    """
    if os.environ.get("PYTAPP_COMPAT_FULL", "").strip() in ("1", "yes", "true"):
        return
    seen: Counter[str] = Counter()
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        keep = getattr(getattr(item, "module", None), "keep_in_sample", None)
        if keep is None:
            kept.append(item)
            continue
        name = item.nodeid.split("[")[0].split("::", 1)[1]
        k = seen[name]
        seen[name] += 1
        (kept if keep(name, k) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
