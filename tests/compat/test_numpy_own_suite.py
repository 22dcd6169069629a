"""numpy's own ``test_einsum.py`` with ``np.einsum`` replaced by ``pytapp.einsum``.

The module shipped with numpy is executed at run time with a numpy whose ``einsum`` is
pytapp's (see :mod:`upstream`); nothing of its text is in this repository. Every backend runs
the whole module (``PYTAPP_BACKEND`` chooses the default backend; here each backend is passed
explicitly so that one run covers all of them).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from upstream import Proxy, expose, installed_file, load_with

import pytapp

PATH = installed_file("numpy", "_core", "tests", "test_einsum.py")
BACKENDS = [name for name in ("auto", "blas", "reference", "tblis", "torch")
            if pytapp.available_backends().get(name, (False, ""))[0]]

if not PATH.exists():  # pragma: no cover - numpy ships its tests in every wheel we use
    pytest.skip(f"numpy's tests are not installed ({PATH})", allow_module_level=True)

#: Run on every backend; the rest of numpy's module runs on ``auto`` only by default (all of
#: it on every backend with ``PYTAPP_COMPAT_FULL=1``; it all passed when this was written).
#: ``test_einsum_sums_<integer, bool, object, long double>`` run through numpy.einsum whatever
#: the backend. tblis skips the sums: its thousands of tiny products took 95 s per dtype on a
#: loaded 2-core machine (idle worker threads, FINDINGS 2) against 5 s on the others.
ON_EVERY_BACKEND = ("test_einsum_sums_float32", "test_einsum_sums_cfloat64")


def keep_in_sample(name: str, k: int) -> bool:
    """Whether test ``name`` (``Class_backend::method``) runs in the default run."""
    where, _, test = name.partition("::")
    if where.endswith("_auto") or not test.startswith("test_einsum_sums_"):
        return True
    return test in ON_EVERY_BACKEND and not where.endswith("_tblis")


for _name in BACKENDS:
    _einsum: Any = functools.wraps(pytapp.einsum)(
        functools.partial(pytapp.einsum, backend=_name))
    _module = load_with(PATH, f"numpy_test_einsum_on_{_name}",
                        {"numpy": Proxy(np, {"einsum": _einsum})})
    expose(_module, _name, globals())
