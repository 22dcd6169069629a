"""opt_einsum's own test suite with its numpy backend routed to pytapp.

opt_einsum runs the pairwise steps of every contraction on the numpy backend through
``numpy.einsum``, ``numpy.tensordot`` and ``numpy.transpose``; here those three are
``pytapp.einsum``, ``pytapp.tensordot`` and ``pytapp.transpose`` while opt_einsum's installed
test modules run (imported at run time, nothing of their text copied). Its oracle stays
``numpy.einsum``. Only the modules that contract arrays are run (its parser and path tests
never reach a backend).
"""

from __future__ import annotations

import importlib

import pytest

import pytapp

pytest.importorskip("opt_einsum")
from opt_einsum.backends import dispatch

#: Tests parametrized over hundreds of equations run every n-th case by default (all of them
#: with ``PYTAPP_COMPAT_FULL=1``; every case passed when this was written).
EVERY = {"test_contract__contract_expressions": 16, "test_contract__compare_blas_greek": 8,
         "test_contract__compare_greek": 8, "test_contract__compare_blas": 8,
         "test_contract__compare": 8}

MODULES = ("test_backends", "test_blas", "test_contract", "test_edge_cases", "test_input",
           "test_sharing")

for _module in MODULES:
    _tests = importlib.import_module(f"opt_einsum.tests.{_module}")
    for _name, _value in vars(_tests).items():
        if _name.startswith("test_") and callable(_value):
            globals()[f"test_{_module[5:]}__{_name[5:]}"] = _value


def keep_in_sample(name: str, k: int) -> bool:
    """Whether the ``k``-th case of test ``name`` runs in the default (sampled) run."""
    return k % EVERY.get(name, 1) == 0


@pytest.fixture(autouse=True)
def numpy_backend_is_pytapp(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("einsum", "tensordot", "transpose"):
        monkeypatch.setitem(dispatch._cached_funcs, (name, "numpy"), getattr(pytapp, name))
