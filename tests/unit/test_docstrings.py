"""Every docstring example in the package runs and prints what it shows."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import pytapp

MODULES = sorted(m.name for m in pkgutil.walk_packages(pytapp.__path__, "pytapp.")
                 if not m.name.endswith("__main__"))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    if name == "pytapp.dask":  # every extra is installed by `make test`; not on a device's host
        pytest.importorskip("dask.array", reason="pytapp.dask needs the dask extra")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed"
