"""torch tensors through pytapp.einsum: torch in, torch out, autograd (gradcheck in F64 and
C128) and torch.compile(fullgraph=True) through the pytapp::einsum operator."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from einsum_cases import NUMPY_BROADCAST, TORCH, Case

import pytapp

torch = pytest.importorskip("torch")

GRAD_CASES = [c for c in TORCH + NUMPY_BROADCAST[:12]
              if all(s is not None and 0 not in s for s in c[1])]


def tensors(shapes: list[tuple[int, ...] | None], dtype: object, grad: bool) -> list[object]:
    gen = torch.Generator().manual_seed(len(shapes))
    return [torch.rand(s or (), dtype=dtype, generator=gen).mul(2).sub(1)
            .requires_grad_(grad) for s in shapes]


@pytest.mark.parametrize("case", TORCH, ids=[c[0] for c in TORCH])
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "bfloat16"])
def test_torch_in_torch_out(case: Case, dtype: str, check: Callable[..., None]) -> None:
    equation, shapes = case
    ops = tensors(shapes, getattr(torch, dtype), grad=False)
    got = pytapp.einsum(equation, *ops)
    assert isinstance(got, torch.Tensor) and got.dtype == getattr(torch, dtype)
    wide = [t.to(torch.complex128 if t.is_complex() else torch.float64).numpy() for t in ops]
    bound = {"float32": 2e-5, "complex64": 2e-5, "float64": 1e-12, "bfloat16": 8e-2}[dtype]
    check(got.to(torch.complex128).numpy(), equation, wide, bound)


def test_out_and_view_results() -> None:
    a = torch.ones(3, 4)
    out = torch.zeros(3)
    assert pytapp.einsum("ij->i", a, out=out) is out
    assert out.tolist() == [4.0, 4.0, 4.0]
    got = pytapp.einsum("ij->ji", a)
    a[0, 1] = 7.0  # a transpose is a view of its operand, as with torch.einsum and numpy.einsum
    assert got[1, 0].item() == 7.0


@pytest.mark.parametrize("case", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_gradcheck(case: Case, dtype: str) -> None:
    equation, shapes = case
    ops = tensors(shapes, getattr(torch, dtype), grad=True)
    # gradcheck runs the einsum many times: once the tuning budget allows, auto may move a
    # product to a backend measured faster, whose sums round differently (to ~1e-16)
    assert torch.autograd.gradcheck(lambda *xs: pytapp.einsum(equation, *xs), tuple(ops),
                                    nondet_tol=1e-12)


def test_gradients_of_some_operands_only() -> None:
    a = torch.rand(3, 4, dtype=torch.float64, requires_grad=True)
    b = torch.rand(4, 5, dtype=torch.float64)
    pytapp.einsum("ij,jk->ik", a, b).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), np.broadcast_to(b.sum(1).numpy(), (3, 4)))
    assert b.grad is None


def test_grad_with_python_scalar_and_mixed_dtypes() -> None:
    a = torch.rand(3, dtype=torch.float32, requires_grad=True)
    b = torch.rand(3, dtype=torch.float64)
    out = pytapp.einsum("i,,i->", a, 2.0, b)
    assert out.dtype == torch.float64
    out.backward()
    assert a.grad.dtype == torch.float32
    np.testing.assert_allclose(a.grad.numpy(), 2 * b.numpy(), rtol=1e-6)


def test_torch_compile_fullgraph() -> None:
    def f(x: object, y: object, z: object) -> object:
        return pytapp.einsum("ij,jk,kl->il", x, y, z).tanh()

    compiled = torch.compile(f, fullgraph=True)
    ops = tensors([(3, 4), (4, 5), (5, 2)], torch.float64, grad=True)
    got = compiled(*ops)
    want = torch.einsum("ij,jk,kl->il", *[t.detach() for t in ops]).tanh()
    torch.testing.assert_close(got.detach(), want)
    got.sum().backward()
    ref = [t.detach().clone().requires_grad_(True) for t in ops]
    torch.einsum("ij,jk,kl->il", *ref).tanh().sum().backward()
    for t, r in zip(ops, ref, strict=True):
        torch.testing.assert_close(t.grad, r.grad)


def test_out_with_grad_is_refused() -> None:
    a = torch.rand(2, 2, requires_grad=True)
    with pytest.raises(pytapp.UnsupportedError):
        pytapp.einsum("ij->ji", a, out=torch.empty(2, 2))
