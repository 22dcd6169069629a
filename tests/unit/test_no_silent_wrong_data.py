"""No silent wrong data: alpha == 0, files mapped twice, torch's conjugate and negative bits.

Each case once gave a result that differs from the operation's definition (issue 24).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pytapp
from pytapp import Handle, TensorInfo, TensorProduct


def _plan(backend: str, a: np.ndarray, la: str, b: np.ndarray, lb: str, d: np.ndarray,
          ld: str, **ops: int) -> TensorProduct:
    info = TensorInfo.from_array
    return TensorProduct(Handle(backend), info(a), la, info(b), lb, None, None, info(d), ld,
                         **ops)


# ------------------------------------------------------------------ alpha == 0 (SPEC section 1)
@pytest.mark.parametrize("poison", [np.nan, np.inf, -np.inf])
def test_alpha_zero_never_reads_a_or_b(any_backend: str, poison: float) -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    a[1, 2], b[0, 3] = poison, poison
    c = rng.standard_normal((3, 5))
    d = np.full((3, 5), 7.0)
    plan = _plan(any_backend, a, "ik", b, "kj", d, "ij")
    plan.execute(0.0, a, b, 2.0, c, d)
    np.testing.assert_array_equal(d, 2.0 * c)
    plan.execute(0.0, a, b, 0.0, None, d)
    assert np.array_equal(d, np.zeros((3, 5))) and not np.signbit(d).any()  # +0


def test_alpha_zero_complex_applies_op_c_and_op_d(backend: str) -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3))
    a[0, 0] = complex(np.nan, np.inf)
    b = rng.standard_normal((3, 2)) + 1j * rng.standard_normal((3, 2))
    c = rng.standard_normal((2, 2)) + 1j * rng.standard_normal((2, 2))
    d = np.zeros((2, 2), dtype=complex)
    plan = TensorProduct(Handle(backend), TensorInfo.from_array(a), "ik",
                         TensorInfo.from_array(b), "kj", TensorInfo.from_array(c), "ij",
                         TensorInfo.from_array(d), "ij", op_c=1, op_d=1)
    status = plan.execute(0j, a, b, 1.5 - 0.5j, c, d)
    np.testing.assert_allclose(d, np.conj((1.5 - 0.5j) * np.conj(c)), rtol=1e-15)
    assert "alpha == 0" in status.algorithm or "compiled:" in status.algorithm


def test_alpha_zero_through_verify_and_contract(backend: str) -> None:
    a = np.array([[np.nan, 1.0], [2.0, 3.0]])
    c = np.arange(4.0).reshape(2, 2)
    got = pytapp.contract("ik,kj->ij", a, a, c, alpha=0, beta=3, backend=backend)
    np.testing.assert_array_equal(got, 3 * c)
    info = TensorInfo.from_array(a)
    d = np.zeros((2, 2))
    with Handle(backend) as h, h.create_executor(verify=True) as ex:
        plan = TensorProduct(h, info, "ik", info, "kj", None, None, info, "ij")
        plan.execute(0.0, a, a, -1.0, c, d, executor=ex)
    np.testing.assert_array_equal(d, -c)


@settings(max_examples=25, deadline=None)
@given(alpha=st.sampled_from([0.0, -0.0, 0j]), beta=st.sampled_from([0.0, 1.0, -2.5]),
       seed=st.integers(0, 2**16))
def test_alpha_zero_any_layout(alpha: complex, beta: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((4, 3, 2))[:, ::-1, :]  # negative strides
    a[rng.integers(0, 4), rng.integers(0, 3), 0] = np.nan
    b = np.broadcast_to(np.inf, (2, 5))  # zero strides, all Inf
    c = rng.standard_normal((5, 4))
    d = np.empty((5, 4)).T.copy().T  # Fortran order
    plan = TensorProduct(Handle("blas"), TensorInfo.from_array(a), "ikl",
                         TensorInfo.from_array(b), "lj", TensorInfo.from_array(c), "ji",
                         TensorInfo.from_array(d), "ji")
    plan.execute(alpha, a, b, beta, c if beta else None, d)
    np.testing.assert_array_equal(d, beta * c)


# ------------------------------------------------------------------ one file mapped twice
def test_two_memmaps_of_one_file_overlap(backend: str, tmp_path: Path) -> None:
    name = tmp_path / "shared.bin"
    first = np.memmap(name, dtype=np.float64, mode="w+", shape=(16, 16))
    first[:] = np.arange(256.0).reshape(16, 16) / 100
    first.flush()
    a = np.memmap(name, dtype=np.float64, mode="r+", shape=(16, 16))
    d = np.memmap(name, dtype=np.float64, mode="r+", shape=(16, 16))
    assert not np.may_share_memory(a, d)  # why address checks cannot see it
    b = np.random.default_rng(3).standard_normal((16, 16))
    expected = np.einsum("ik,kj->ij", np.array(a), b)
    _plan(backend, a, "ik", b, "kj", d, "ij").execute(1.0, a, b, 0.0, None, d)
    np.testing.assert_allclose(np.array(d), expected, rtol=1e-12, atol=1e-12)


def test_memmaps_of_disjoint_bytes_are_not_copied(tmp_path: Path) -> None:
    name = tmp_path / "two.bin"
    np.memmap(name, dtype=np.float64, mode="w+", shape=(2, 8, 8)).flush()
    whole = np.memmap(name, dtype=np.float64, mode="r+", shape=(2, 8, 8))
    whole[0] = np.eye(8)
    whole.flush()
    a = np.memmap(name, dtype=np.float64, mode="r", shape=(8, 8))
    d = np.memmap(name, dtype=np.float64, mode="r+", shape=(8, 8), offset=8 * 64)
    b = np.arange(64.0).reshape(8, 8)
    status = _plan("blas", a, "ik", b, "kj", d, "ij").execute(1.0, a, b, 0.0, None, d)
    np.testing.assert_array_equal(np.array(d), b)
    assert status.bytes_copied == 0
    # Sliced views of a third mapping that do reach D's bytes are copied.
    again = np.memmap(name, dtype=np.float64, mode="r+", shape=(2, 8, 8))
    d2 = again[0]
    b2 = np.eye(8)
    status = _plan("blas", b2, "ik", whole[0], "kj", d2, "ij").execute(
        2.0, b2, whole[0], 0.0, None, d2)
    np.testing.assert_array_equal(np.array(d2), 2 * np.eye(8))
    assert status.bytes_copied == 8 * 64


# ------------------------------------------------------------------ torch bits
@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch")


def test_negative_and_conjugate_inputs_are_read_as_meant(torch: Any, backend: str) -> None:
    x = torch.arange(6.0).reshape(2, 3)
    y = torch.full((3,), 2.0)
    want = -(x.numpy() @ y.numpy())
    np.testing.assert_array_equal(pytapp.contract("ij,j->i", torch._neg_view(x), y,
                                                  backend=backend), want)
    z = torch.tensor([[1 + 2j, 3 - 4j], [0.5j, 2.0 + 0j]], dtype=torch.complex128)
    w = torch.tensor([1 - 1j, 2 + 3j], dtype=torch.complex128)
    oracle = np.conj(z.numpy()) @ w.numpy()
    np.testing.assert_allclose(pytapp.contract("ij,j->i", z.conj(), w, backend=backend),
                               oracle, rtol=1e-15)
    # z.conj().imag has the negative bit: its values are -z.imag
    np.testing.assert_allclose(
        pytapp.contract("ij,j->i", z.conj().imag, w.real, backend=backend),
        -z.imag.numpy() @ w.real.numpy(), rtol=1e-15)
    # both bits, and strided views of a larger storage
    big = torch.arange(24.0, dtype=torch.float64).reshape(4, 6) * (1 + 1j)
    both = torch._neg_view(big.conj())[1:3, ::2]
    got = pytapp.einsum("ij->ji", both, backend=backend)
    if isinstance(got, torch.Tensor):  # a view of ``both``, bits included, as torch.einsum's
        got = got.resolve_conj().resolve_neg()
    np.testing.assert_allclose(got, -np.conj(big.numpy()[1:3, ::2]).T, rtol=1e-15)


def test_plans_read_bits_through_execute(torch: Any) -> None:
    z = torch.tensor([1 + 1j, 2 - 3j])
    d = np.zeros((), dtype=np.complex64)
    info = TensorInfo.from_array(z.numpy())
    plan = TensorProduct(Handle("blas"), info, "i", info, "i", None, None,
                         TensorInfo.from_array(d), "")
    plan.execute(1.0, z.conj(), torch._neg_view(z), 0.0, None, d)
    assert d == pytest.approx(-np.vdot(z.numpy(), z.numpy()))


@pytest.mark.parametrize("kind", ["neg", "conj"])
def test_output_with_a_bit_is_refused_and_untouched(torch: Any, backend: str,
                                                    kind: str) -> None:
    base = torch.full((2,), 5.0 + 0j)
    out = torch._neg_view(base) if kind == "neg" else base.conj()
    x = torch.ones((2, 3), dtype=torch.complex64)
    y = torch.ones(3, dtype=torch.complex64)
    for call in (lambda: pytapp.contract("ij,j->i", x, y, out=out, backend=backend),
                 lambda: pytapp.einsum("ij,j->i", x, y, out=out, backend=backend)):
        with pytest.raises(pytapp.TappError) as err:
            call()
        assert err.value.code == 20 and "bit" in str(err.value)
        np.testing.assert_array_equal(base.numpy(), np.full(2, 5.0 + 0j))
