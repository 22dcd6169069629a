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

for _name in BACKENDS:
    _einsum: Any = functools.wraps(pytapp.einsum)(
        functools.partial(pytapp.einsum, backend=_name))
    _module = load_with(PATH, f"numpy_test_einsum_on_{_name}",
                        {"numpy": Proxy(np, {"einsum": _einsum})})
    expose(_module, _name, globals())
