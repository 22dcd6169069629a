"""pytapp.einsum on CUDA tensors: torch calls on the device, values, datatypes, views,
gradients, ``out=``, threads and torch.compile, as on the CPU. Oracle: numpy.einsum in
float64/complex128 on the same values copied back; gradients: torch.autograd of torch.einsum
on the device. Skipped where torch sees no CUDA device (run on one by the GPU check)."""

from __future__ import annotations

from typing import Any

import pytest

import pytapp

torch = pytest.importorskip("torch")
from torch_oracle import (  # noqa: E402  (needs torch)
    CASES,
    DATATYPE_BOUNDS,
    GRAD_ORACLE,
    assert_close,
    check_datatypes,
    check_threads_share_programs,
    operands,
    relayout,
)

from pytapp.interop import torch_einsum  # noqa: E402  (needs torch)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
CUDA = "cuda"


@pytest.mark.parametrize("layout", ["contiguous", "reversed", "strided"])
def test_values_in_every_layout_stay_on_the_device(layout: str) -> None:
    for equation, shapes in CASES:
        ops = [relayout(t, layout) for t in operands(shapes, torch.float64, device=CUDA)]
        got = pytapp.einsum(equation, *ops)
        assert isinstance(got, torch.Tensor) and got.is_cuda, equation
        assert got.dtype == torch.float64
        assert_close(got, equation, ops, 1e-12)


@pytest.mark.parametrize("dtype", sorted(DATATYPE_BOUNDS))
def test_datatypes(dtype: str) -> None:
    check_datatypes(dtype, CUDA)


def test_conjugate_and_negative_views() -> None:
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(3, 4, dtype=torch.complex128, generator=gen).to(CUDA)
    b = torch.randn(4, 5, dtype=torch.complex128, generator=gen).to(CUDA)
    for x, y in [(a.conj(), b), (a, b.conj().mT.mT), (a.conj().imag, b.real), (-a, b.conj())]:
        assert_close(pytapp.einsum("ij,jk->ik", x, y), "ij,jk->ik", [x, y], 1e-12)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_gradients_equal_torch_einsum_gradients(dtype: str) -> None:
    for equation, shapes in GRAD_ORACLE:
        ops = operands(shapes, getattr(torch, dtype), seed=3, device=CUDA)
        leaves = [t.clone().requires_grad_(True) for t in ops]
        refs = [t.clone().requires_grad_(True) for t in ops]
        got = pytapp.einsum(equation, *leaves)
        want = torch.einsum(equation, *refs)
        torch.testing.assert_close(got, want)
        grad = torch.rand(want.shape, dtype=want.dtype,
                          generator=torch.Generator().manual_seed(4)).to(CUDA)
        mine = torch.autograd.grad(got, leaves, grad)
        theirs = torch.autograd.grad(want, refs, grad)
        for m, t in zip(mine, theirs, strict=True):
            assert m.is_cuda
            torch.testing.assert_close(m, t)


def test_second_derivatives() -> None:
    a = torch.rand(3, 4, dtype=torch.float64, device=CUDA, requires_grad=True)
    b = torch.rand(4, 3, dtype=torch.float64, device=CUDA, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda x, y: pytapp.einsum("ij,jk->ik", x, y), (a, b))


def test_scalars_join_the_tensors_device() -> None:
    a, b = operands([(3,), (3,)], torch.float32, device=CUDA)
    got = pytapp.einsum("i,,i->", a, 2, b)
    assert got.is_cuda and got.dtype == torch.float64  # NumPy's promotion, as on the CPU
    assert_close(got, "i,,i->", [a, 2.0, b], 1e-6)


def test_out_on_the_device_and_elsewhere() -> None:
    a, b = operands([(3, 4), (4, 5)], torch.float64, device=CUDA)
    out = torch.empty(3, 5, dtype=torch.float32, device=CUDA)
    assert pytapp.einsum("ij,jk->ik", a, b, out=out) is out
    assert_close(out, "ij,jk->ik", [a, b], 2e-6)
    host = torch.full((3, 5), 7.0, dtype=torch.float64)
    with pytest.raises(pytapp.OperandMismatchError) as err:
        pytapp.einsum("ij,jk->ik", a, b, out=host)
    assert err.value.code == 20 and "device" in str(err.value)
    assert torch.equal(host, torch.full((3, 5), 7.0, dtype=torch.float64))  # untouched


def test_operands_on_two_devices_are_refused() -> None:
    with pytest.raises(pytapp.OperandMismatchError) as err:
        pytapp.einsum("ij,jk->ik", torch.ones(2, 3, device=CUDA), torch.ones(3, 2))
    assert err.value.code == 20


def test_threads_share_programs() -> None:
    check_threads_share_programs(CUDA, 20)


def test_torch_compile_on_the_device() -> None:
    def f(x: Any, y: Any) -> Any:
        return pytapp.einsum("bij,bjk->bik", x, y) * 2

    compiled = torch.compile(f, fullgraph=True)
    x, y = operands([(2, 3, 4), (2, 4, 5)], torch.float32, device=CUDA)
    got = compiled(x, y)
    assert got.is_cuda
    torch.testing.assert_close(got, torch.einsum("bij,bjk->bik", x, y) * 2)


def test_a_named_tapp_backend_refuses_device_memory_with_code_20() -> None:
    a, b = operands([(3, 4), (4, 5)], torch.float64, device=CUDA)
    with pytest.raises(pytapp.TappError) as err:
        pytapp.einsum("ij,jk->ik", a, b, backend="blas")  # TAPP plans bind host memory only
    assert err.value.code == 20


def test_attention_keeps_its_batch_labels_for_one_matmul_at_every_size() -> None:
    # on the CPU, products above MATMUL_MAX_MADDS fuse them for bmm; on CUDA matmul folds them
    q, k = operands([(4, 12, 256, 64), (4, 12, 256, 64)], torch.float32, device=CUDA)
    calls = torch_einsum.plan("bhqd,bhkd->bhqk", [q, k]).calls()
    assert calls == ["b: permute(0, 1, 3, 2)", "matmul"]
    torch.testing.assert_close(pytapp.einsum("bhqd,bhkd->bhqk", q, k),
                               torch.einsum("bhqd,bhkd->bhqk", q, k))


def test_expressions_stay_on_the_device_with_gradients() -> None:
    ops = operands([(3, 4), (4, 5), (5, 2)], torch.float64, seed=5, device=CUDA)
    expr = pytapp.einsum_expression("ij,jk,kl->il", (3, 4), (4, 5), (5, 2))
    leaves = [t.clone().requires_grad_(True) for t in ops]
    got = expr(*leaves)
    assert got.is_cuda
    assert_close(got, "ij,jk,kl->il", ops, 1e-12)
    grads = torch.autograd.grad(got.sum(), leaves)
    assert all(g.is_cuda for g in grads)
    torch.testing.assert_close(grads[0], (ops[1] @ ops[2]).sum(1).expand(3, 4))
