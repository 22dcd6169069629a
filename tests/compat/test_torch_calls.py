"""Torch tensors run as torch calls on views (pytapp.interop.torch_einsum): no NumPy round
trip, no TAPP network, native autograd, one cached program per layout. Oracle: numpy.einsum in
float64/complex128 on the same values; gradients: torch.autograd of torch.einsum."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from einsum_cases import Case

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


@pytest.mark.parametrize("layout", ["contiguous", "reversed", "strided"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_values_match_numpy_in_every_layout(case: Case, layout: str) -> None:
    equation, shapes = case
    ops = [relayout(t, layout) for t in operands(shapes, torch.float64)]
    got = pytapp.einsum(equation, *ops)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float64
    assert_close(got, equation, ops, 1e-12)


@pytest.mark.parametrize("dtype", sorted(DATATYPE_BOUNDS))
def test_datatypes(dtype: str) -> None:
    check_datatypes(dtype, "cpu")


def test_conjugate_and_negative_views() -> None:
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(3, 4, dtype=torch.complex128, generator=gen)
    b = torch.randn(4, 5, dtype=torch.complex128, generator=gen)
    for x, y in [(a.conj(), b), (a, b.conj().mT.mT), (a.conj().imag, b.real)]:
        assert_close(pytapp.einsum("ij,jk->ik", x, y), "ij,jk->ik", [x, y], 1e-12)


def test_no_numpy_round_trip_and_no_tapp_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the torch path left torch")

    monkeypatch.setattr(torch.Tensor, "numpy", refuse)
    monkeypatch.setattr(torch.Tensor, "__array__", refuse)
    monkeypatch.setattr(torch.Tensor, "__dlpack__", refuse)
    monkeypatch.setattr(pytapp.network.Network, "run", refuse)
    a = torch.rand(3, 4, dtype=torch.float64, requires_grad=True)
    b = torch.rand(2, 4, 5, dtype=torch.float64)
    got = pytapp.einsum("ij,bjk->bik", a, b)
    got.sum().backward()
    monkeypatch.undo()
    assert_close(got.detach(), "ij,bjk->bik", [a.detach(), b], 1e-12)
    np.testing.assert_allclose(a.grad.numpy(), b.sum((0, 2)).numpy()[None, :].repeat(3, 0))


def test_autograd_differentiates_the_torch_calls_not_the_operator() -> None:
    a = torch.rand(3, 4, requires_grad=True)
    got = pytapp.einsum("ij,jk->ik", a, torch.rand(4, 5))
    assert got.grad_fn is not None and "pytapp" not in got.grad_fn.name()
    assert "Mm" in got.grad_fn.name()


@pytest.mark.parametrize("case", GRAD_ORACLE, ids=[c[0] for c in GRAD_ORACLE])
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_gradients_equal_torch_einsum_gradients(case: Case, dtype: str) -> None:
    equation, shapes = case
    ops = operands(shapes, getattr(torch, dtype), seed=3)
    leaves = [t.clone().requires_grad_(True) for t in ops]
    refs = [t.clone().requires_grad_(True) for t in ops]
    got = pytapp.einsum(equation, *leaves)
    want = torch.einsum(equation, *refs)
    torch.testing.assert_close(got, want)
    grad = torch.rand(want.shape, dtype=want.dtype, generator=torch.Generator().manual_seed(4))
    mine = torch.autograd.grad(got, leaves, grad)
    theirs = torch.autograd.grad(want, refs, grad)
    for m, t in zip(mine, theirs, strict=True):
        torch.testing.assert_close(m, t)


def test_second_derivatives() -> None:
    a = torch.rand(3, 4, dtype=torch.float64, requires_grad=True)
    b = torch.rand(4, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda x, y: pytapp.einsum("ij,jk->ik", x, y), (a, b))


def test_one_program_per_layout() -> None:
    torch_einsum.clear_cache()
    a, b = torch.rand(3, 4), torch.rand(4, 5)
    first = torch_einsum.plan("ij,jk->ik", [a, b])
    assert torch_einsum.plan("ij,jk->ik", [torch.rand(3, 4), torch.rand(4, 5)]) is first
    transposed = torch.rand(4, 3).mT
    other = torch_einsum.plan("ij,jk->ik", [transposed, b])
    assert other is not first
    assert first.calls() == ["mm"]
    got = pytapp.einsum("ij,jk->ik", transposed, b)
    assert_close(got, "ij,jk->ik", [transposed, b], 2e-5)
    torch_einsum.clear_cache()
    assert torch_einsum.plan("ij,jk->ik", [a, b]) is not first


def test_attention_is_one_batched_product_on_views() -> None:
    q, k = torch.rand(2, 3, 4, 5), torch.rand(2, 3, 6, 5)
    calls = torch_einsum.plan("bhqd,bhkd->bhqk", [q, k]).calls()
    # two batch labels stay as they are: one matmul, no reshape of operands or result
    assert calls == ["b: permute(0, 1, 3, 2)", "matmul"]
    assert_close(pytapp.einsum("bhqd,bhkd->bhqk", q, k), "bhqd,bhkd->bhqk", [q, k], 2e-5)
    # with the result transposed (D^T = B^T A^T), and one batch label: bmm on fused views
    swapped = torch_einsum.plan("bhqd,bhkd->bhkq", [q, k]).calls()
    assert [c for c in swapped if not c.startswith(("a: ", "b: "))] == ["matmul (swapped)"]
    assert_close(pytapp.einsum("bhqd,bhkd->bhkq", q, k), "bhqd,bhkd->bhkq", [q, k], 2e-5)
    one = torch_einsum.plan("bqd,bkd->bqk", [q[0], k[0]]).calls()
    assert [c for c in one if not c.startswith(("a: ", "b: ", "reshape"))] == ["bmm"]
    # above MATMUL_MAX_MADDS the batch axes fuse for bmm, the faster kernel there
    big_q, big_k = torch.empty(4, 12, 256, 64), torch.empty(4, 12, 256, 64)
    assert torch_einsum.MATMUL_MAX_MADDS < 4 * 12 * 256 * 256 * 64
    big = torch_einsum.plan("bhqd,bhkd->bhqk", [big_q, big_k]).calls()
    assert [c for c in big if not c.startswith(("a: ", "b: ", "reshape"))] == ["bmm"]


def test_explicit_paths_are_cached_and_optimizer_objects_are_not() -> None:
    ops = [torch.rand(2, 3), torch.rand(3, 4), torch.rand(4, 5)]
    path = [(1, 2), (0, 1)]
    first = torch_einsum.plan("ij,jk,kl->il", ops, optimize=path)
    assert torch_einsum.plan("ij,jk,kl->il", ops, optimize=list(path)) is first
    assert torch_einsum.plan("ij,jk,kl->il", ops, optimize=["einsum_path", *path]) is not None
    greedy = torch_einsum.plan("ij,jk,kl->il", ops, optimize=("greedy", 10**6))  # NumPy's form
    assert torch_einsum.plan("ij,jk,kl->il", ops, optimize=("greedy", 10**6)) is greedy
    calls = []

    def optimizer(inputs: Any, output: Any, sizes: Any, limit: Any) -> list[tuple[int, int]]:
        calls.append(1)
        return [(0, 1), (0, 1)]

    for _ in range(2):
        got = pytapp.einsum("ij,jk,kl->il", *ops, optimize=optimizer)
    assert len(calls) == 2
    assert_close(got, "ij,jk,kl->il", ops, 2e-5)


def test_the_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    torch_einsum.clear_cache()
    monkeypatch.setattr(torch_einsum, "PROGRAM_CACHE_SIZE", 3)
    for n in range(1, 8):
        a = torch.rand(n, 2)
        assert_close(pytapp.einsum("ij->j", a), "ij->j", [a], 2e-5)
    assert len(torch_einsum._programs) == 3


def test_threads_share_programs() -> None:
    check_threads_share_programs("cpu", 40)


def test_torch_thread_count_is_left_alone() -> None:
    before = torch.get_num_threads()
    pytapp.einsum("ij,jk->ik", torch.rand(64, 64), torch.rand(64, 64))
    assert torch.get_num_threads() == before


def test_scalars_dtype_and_sublists() -> None:
    a = torch.rand(3, dtype=torch.float32)
    b = torch.rand(3, dtype=torch.float32)
    for _ in range(2):  # planned, then found in the cache
        got = pytapp.einsum("i,,i->", a, 2, b)
        assert got.dtype == torch.float64  # NumPy's promotion: an int with float32
        assert_close(got, "i,,i->", [a, 2.0, b], 1e-6)
    got = pytapp.einsum("i,i->i", a, b, dtype="float64")
    assert got.dtype == torch.float64
    assert_close(got, "i,i->i", [a, b], 1e-12)
    m = torch.rand(3, 4, dtype=torch.float64)
    got = pytapp.einsum(m, [0, 1], m, [2, 1], [0, 2])
    assert_close(got, "ij,kj->ik", [m, m], 1e-12)


def test_out() -> None:
    a = torch.rand(3, 4, dtype=torch.float64)
    b = torch.rand(4, 5, dtype=torch.float64)
    out = torch.empty(3, 5, dtype=torch.float32)
    assert pytapp.einsum("ij,jk->ik", a, b, out=out) is out
    assert_close(out, "ij,jk->ik", [a, b], 2e-6)
    square = torch.rand(4, 4, dtype=torch.float64)
    expected = square.mT.clone()
    pytapp.einsum("ij->ji", square, out=square)  # the result is a view of out
    assert torch.equal(square, expected)
    with pytest.raises(pytapp.OperandMismatchError) as err:
        pytapp.einsum("ij,jk->ik", a, b, out=torch.empty(5, 3, dtype=torch.float64))
    assert err.value.code == 20
    with pytest.raises(pytapp.OperandMismatchError):
        pytapp.einsum("ij,jk->ik", a.to(torch.complex128), b, out=torch.empty(3, 5))
    with pytest.raises(pytapp.OperandMismatchError) as err:  # no copy across devices
        pytapp.einsum("ij,jk->ik", a, b, out=torch.empty(3, 5, dtype=torch.float64,
                                                          device="meta"))
    assert "device" in str(err.value)


@pytest.mark.parametrize(("call", "code"), [
    (lambda: pytapp.einsum("ij,jk->ik", torch.ones(2, 3), torch.ones(3, 2, device="meta")), 20),
    (lambda: pytapp.einsum("ij,jk->ik", torch.ones(2, 3), torch.ones(4, 2)), 1),
    (lambda: pytapp.einsum("ij,jk->iq", torch.ones(2, 3), torch.ones(3, 2)), 4),
    (lambda: pytapp.einsum("ij,jk->ik->", torch.ones(2, 3), torch.ones(3, 2)), 13),
])
def test_errors_carry_tapp_codes(call: Callable[[], Any], code: int) -> None:
    with pytest.raises(pytapp.TappError) as err:
        call()
    assert err.value.code == code


def test_a_named_tapp_backend_still_runs_tapp_products() -> None:
    a = torch.rand(3, 4, dtype=torch.float64, requires_grad=True)
    b = torch.rand(4, 5, dtype=torch.float64)
    got = pytapp.einsum("ij,jk->ik", a, b, backend="blas")
    assert "pytapp" in got.grad_fn.name()  # the operator, forward on the TAPP network
    assert_close(got.detach(), "ij,jk->ik", [a.detach(), b], 1e-12)


def test_torch_compile_of_a_view_result() -> None:
    compiled = torch.compile(lambda x: pytapp.einsum("ij->ji", x) * 2, fullgraph=True)
    x = torch.rand(3, 4, dtype=torch.float64)
    torch.testing.assert_close(compiled(x), x.mT * 2)


def test_expressions_run_tensors_as_torch_calls_with_gradients() -> None:
    ops = operands([(3, 4), (4, 5), (5, 2)], torch.float64, seed=5)
    expr = pytapp.einsum_expression("ij,jk,kl->il", (3, 4), (4, 5), (5, 2))
    leaves = [t.clone().requires_grad_(True) for t in ops]
    refs = [t.clone().requires_grad_(True) for t in ops]
    got = expr(*leaves)
    assert got.grad_fn is not None and "pytapp" not in got.grad_fn.name()
    want = torch.einsum("ij,jk,kl->il", *refs)
    torch.testing.assert_close(got, want)
    grad = torch.rand(want.shape, dtype=want.dtype, generator=torch.Generator().manual_seed(6))
    for m, t in zip(torch.autograd.grad(got, leaves, grad), torch.autograd.grad(want, refs, grad),
                    strict=True):
        torch.testing.assert_close(m, t)
    # the expression's path, planned once per layout
    assert torch_einsum.plan("ij,jk,kl->il", ops, optimize=expr.path) is torch_einsum.plan(
        "ij,jk,kl->il", ops, optimize=list(expr.path))
    with pytest.raises(pytapp.OperandMismatchError) as err:
        expr(ops[0], ops[1], torch.rand(5, 3, dtype=torch.float64))
    assert "compiled for" in str(err.value)


def test_expressions_on_a_named_backend_keep_gradients_through_the_operator() -> None:
    a, b = operands([(3, 4), (4, 5)], torch.float64, seed=7)
    expr = pytapp.einsum_expression("ij,jk->ik", (3, 4), (4, 5), backend="blas")
    leaf = a.clone().requires_grad_(True)
    got = expr(leaf, b)
    assert "pytapp" in got.grad_fn.name()
    (grad,) = torch.autograd.grad(got.sum(), [leaf])
    torch.testing.assert_close(grad, b.sum(1).expand(3, 4))
    assert_close(expr(a, b), "ij,jk->ik", [a, b], 1e-12)  # no grad: the TAPP network


def test_expressions_take_shapes_from_tensors_without_reading_them() -> None:
    meta = [torch.ones(2, 3, device="meta"), torch.ones(3, 4, device="meta")]
    expr = pytapp.einsum_expression("ij,jk->ik", *meta)  # no memory to view on this device
    a, b = operands([(2, 3), (3, 4)], torch.float64)
    assert_close(expr(a, b), "ij,jk->ik", [a, b], 1e-12)


def test_view_chains_fold_into_one_view_without_gradients() -> None:
    # operands that start inside their storage (offsets), in layouts a chain has to permute
    big = torch.rand(40, 8, 40, dtype=torch.complex128)
    awb = big[3:35, 1:6, 2:34]
    env = ("awb,asc,wstv,btd->cvd", [awb, torch.rand(32, 2, 32, dtype=torch.complex128),
                                     torch.rand(6, 2, 2, 5, dtype=torch.complex128)[1:].conj(),
                                     torch.rand(32, 2, 32, dtype=torch.complex128)])
    equation, ops = env
    program = torch_einsum.plan(equation, ops)
    folded = program.folded_calls()
    assert any("as_strided" in c for c in folded) and len(folded) < len(program.calls())
    assert_close(pytapp.einsum(equation, *ops), equation, ops, 1e-12)
    # with gradients the chains run as they are (their backward, not as_strided's)
    leaf = ops[1].clone().requires_grad_(True)
    got = pytapp.einsum(equation, ops[0], leaf, *ops[2:])
    assert_close(got, equation, [ops[0], leaf, *ops[2:]], 1e-12)
    names = []
    todo = [got.grad_fn]
    while todo:
        fn = todo.pop()
        if fn is not None:
            names.append(fn.name())
            todo += [f for f, _ in fn.next_functions]
    assert not any("AsStrided" in n for n in names)


def test_torch_compile_of_an_expression_called_before() -> None:
    expr = pytapp.einsum_expression("ij,jk->ik", (3, 4), (4, 5))
    x, y = operands([(3, 4), (4, 5)], torch.float64, seed=8)
    first = expr(x, y)  # a program kept by the expression, then the same call compiled
    compiled = torch.compile(lambda p, q: expr(p, q) * 2, fullgraph=True)
    torch.testing.assert_close(compiled(x, y), first * 2)
    assert_close(first, "ij,jk->ik", [x, y], 1e-12)
