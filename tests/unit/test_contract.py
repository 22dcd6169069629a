"""The einsum-style front end against numpy.einsum."""

from __future__ import annotations

import numpy as np
import pytest

import pytapp
from pytapp import backends
from pytapp.contraction import plan_cache_info


@pytest.mark.parametrize(
    "expr",
    ["ij,jk->ik", "ijk,kjl->il", "abc,abc->abc", "ab,cd->acbd", "abcd,abcd->", "bij,bjk->bik",
     "ij,jk", "i,i", "ii,ij->j", "ijk,k->ij"],
)
def test_contract_matches_einsum(backend: str, expr: str, rng: np.random.Generator) -> None:
    inputs = expr.split("->")[0].split(",")
    sizes = {x: int(rng.integers(1, 5)) for x in "abcdijkl"}
    a = rng.standard_normal([sizes[x] for x in inputs[0]])
    b = rng.standard_normal([sizes[x] for x in inputs[1]])
    got = pytapp.contract(expr, a, b, backend=backend)
    np.testing.assert_allclose(got, np.einsum(expr, a, b), rtol=1e-12, atol=1e-12)


def test_contract_alpha_beta_out_in_place(backend: str, rng: np.random.Generator) -> None:
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    c = rng.standard_normal((3, 5))
    want = 2.0 * a @ b + 0.5 * c
    got = pytapp.contract("ik,kj->ij", a, b, c, alpha=2.0, beta=0.5, backend=backend)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    out = c.copy()
    ret = pytapp.contract("ik,kj->ij", a, b, out, alpha=2.0, beta=0.5, out=out, backend=backend)
    assert ret is out
    np.testing.assert_allclose(out, want, rtol=1e-12)


def test_contract_mixed_and_low_precision(backend: str, rng: np.random.Generator) -> None:
    a = rng.standard_normal((8, 6)).astype(np.float16)
    b = rng.standard_normal((6, 7)).astype(np.float32)
    caps = backends.get(backend).capabilities
    if caps.check_datatypes((pytapp.Datatype.F16, pytapp.Datatype.F32)) is not None:
        # A declared limitation must be reported as code 18, never computed wrongly.
        with pytest.raises(pytapp.UnsupportedError):
            pytapp.contract("ik,kj->ij", a, b, backend=backend)
        return
    got = pytapp.contract("ik,kj->ij", a, b, backend=backend)
    assert got.dtype == np.float32
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_plan_cache_is_bounded_and_reused(backend: str) -> None:
    pytapp.clear_plan_cache()
    x = np.ones((2, 2))
    for _ in range(3):
        pytapp.contract("ij,jk->ik", x, x, backend=backend)
    assert plan_cache_info()["size"] == 1
    assert plan_cache_info()["capacity"] >= 1


def test_contract_errors() -> None:
    with pytest.raises(pytapp.InvalidDescriptorError) as err:  # malformed: three inputs
        pytapp.contract("ij,jk,kl->il", np.ones((2, 2)), np.ones((2, 2)))
    assert err.value.code == 13 and "position" in err.value.message
    with pytest.raises(pytapp.ExtentMismatchError):
        pytapp.contract("ij,jk->ik", np.ones((2, 3)), np.ones((2, 2)))
    with pytest.raises(pytapp.OperandMismatchError):
        pytapp.contract("ij,jk->ik", np.ones((2, 2), dtype=int), np.ones((2, 2)))


def test_no_public_function_hides_its_module() -> None:
    import importlib
    import pkgutil
    import types

    for info in pkgutil.iter_modules(pytapp.__path__):
        attr = getattr(pytapp, info.name, None)
        if attr is not None:  # a re-exported name equal to a module's would hide the module
            assert isinstance(attr, types.ModuleType), info.name
            assert attr is importlib.import_module(f"pytapp.{info.name}")
