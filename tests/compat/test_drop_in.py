"""pytapp.einsum, tensordot and transpose as drop-in replacements of numpy's (issue 24).

Each test is one item of the issue's "Drop-in" list; the oracle is numpy.einsum (exact for
integers) or math.fsum.
"""

from __future__ import annotations

import math
import pickle
from typing import Any

import numpy as np
import pytest
from foreign_arrays import Dispatched, Duck
from hypothesis import given, settings
from hypothesis import strategies as st

import pytapp

BACKENDS = [name for name in ("auto", "blas", "reference", "tblis", "torch")
            if pytapp.available_backends().get(name, (False, ""))[0]]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["i1", "u2", "i8", "u8", "?", "g", "G", "O"])
def test_every_numpy_dtype_exactly(dtype: str, backend: str) -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(0, 50, (3, 4)).astype(dtype)
    b = rng.integers(0, 50, (4, 5)).astype(dtype)
    got = pytapp.einsum("ij,jk->ik", a, b, backend=backend)
    want = np.einsum("ij,jk->ik", a, b)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    # int8 wraps around exactly as numpy's does
    big = np.full(200, 100, dtype=np.int8)
    assert pytapp.einsum("i,i->", big, big, backend=backend) == np.einsum("i,i->", big, big)


def test_casting_order_and_dtype_follow_numpy() -> None:
    a, b = np.ones((2, 3, 5), order="F"), np.ones((4, 3), order="F")
    assert pytapp.einsum("...ft,mf->...mt", a, b, order="F").flags.f_contiguous
    assert pytapp.einsum("...ft,mf->...mt", a, b, order="C").flags.c_contiguous
    kept = pytapp.einsum("...ft,mf->...mt", a, b, order="K")
    assert not kept.flags.c_contiguous and not kept.flags.f_contiguous
    f32 = np.ones(3, np.float32)
    assert pytapp.einsum("i,i->i", f32, f32, dtype="f8").dtype == np.float64
    with pytest.raises(TypeError) as err:  # numpy: float64 -> float32 is not 'safe'
        pytapp.einsum("i,i->i", np.ones(3), np.ones(3), dtype="f4")
    assert isinstance(err.value, pytapp.TappError) and err.value.code == 20
    got = pytapp.einsum("i,i->i", np.ones(3), np.ones(3), dtype="f4", casting="same_kind")
    assert got.dtype == np.float32
    for bad in ({"order": "W"}, {"casting": "blah"}, {"casting": "same_value"}):
        with pytest.raises(ValueError) as err2:
            pytapp.einsum("i->i", np.ones(3), **bad)
        assert isinstance(err2.value, pytapp.TappError) and err2.value.code == 13
    with pytest.raises(TypeError) as err3:
        pytapp.einsum("i->i", np.ones(3), dtype="bad_data_type")
    assert isinstance(err3.value, pytapp.TappError) and err3.value.code == 20


@pytest.mark.parametrize("backend", BACKENDS)
def test_size_one_dimensions_broadcast(backend: str) -> None:
    one, ten = np.ones(1), np.arange(10.0)
    np.testing.assert_array_equal(pytapp.einsum("i,i->i", one, ten, backend=backend),
                                  np.einsum("i,i->i", one, ten))
    p, q = np.ones((10, 2)), np.ones((1, 2))
    np.testing.assert_array_equal(pytapp.einsum("ij,ij->j", p, q, backend=backend),
                                  np.einsum("ij,ij->j", p, q))


def test_size_one_broadcasting_with_torch_and_autograd() -> None:
    torch = pytest.importorskip("torch")
    one = torch.ones(1, dtype=torch.float64, requires_grad=True)
    ten = torch.arange(10.0, dtype=torch.float64, requires_grad=True)
    got = pytapp.einsum("i,i->i", one, ten)
    np.testing.assert_array_equal(got.detach().numpy(), np.arange(10.0))
    got.sum().backward()
    assert one.grad is not None and ten.grad is not None
    np.testing.assert_allclose(one.grad.numpy(), [45.0])  # d/d one of sum(one * ten)
    np.testing.assert_allclose(ten.grad.numpy(), np.ones(10))
    plain = pytapp.einsum("i,i->i", torch.ones(1, dtype=torch.float64),
                          torch.arange(10.0, dtype=torch.float64))
    np.testing.assert_array_equal(plain.numpy(), np.arange(10.0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_broadcasts_a_result_of_extent_one(backend: str) -> None:
    out = np.zeros(3)
    assert pytapp.einsum("i->i", np.full(1, 2.0), out=out, backend=backend) is out
    np.testing.assert_array_equal(out, np.einsum("i->i", np.full(1, 2.0), out=np.zeros(3)))
    a, b = np.arange(6.0).reshape(2, 3), np.arange(3.0).reshape(3, 1)
    out2 = np.zeros((2, 4))
    pytapp.einsum("ij,jk->ik", a, b, out=out2, backend=backend)
    np.testing.assert_array_equal(out2, np.einsum("ij,jk->ik", a, b, out=np.zeros((2, 4))))


@pytest.mark.parametrize("backend", BACKENDS)
def test_long_reductions_are_as_accurate_as_numpy(backend: str) -> None:
    value = 1.0 + np.finfo(np.float64).eps * 8196
    x = np.broadcast_to(np.array(value), 10**6)
    got = pytapp.einsum("i->", x, backend=backend)
    exact = math.fsum([value] * 10**6)
    assert abs(got - exact) <= abs(np.einsum("i->", x) - exact)
    y = np.broadcast_to(np.arange(3.0), (10**5, 3))
    np.testing.assert_allclose(pytapp.einsum("ij->j", y, backend=backend), np.sum(y, axis=0),
                               rtol=1e-15)


@pytest.mark.parametrize("out", [[0.0, 0.0, 0.0], (0.0,), "test", 3.0])
def test_out_must_be_an_array(out: Any) -> None:
    with pytest.raises(TypeError) as err:
        pytapp.einsum("i->i", np.ones(3), out=out)
    assert isinstance(err.value, pytapp.TappError) and err.value.code == 20


def test_bad_out_codes() -> None:
    ro = np.zeros(3)
    ro.flags.writeable = False
    with pytest.raises(ValueError) as err:
        pytapp.einsum("i->i", np.ones(3), out=ro)
    assert isinstance(err.value, pytapp.TappError) and err.value.code == 22
    with pytest.raises(TypeError) as err2:
        pytapp.einsum("i->i", np.ones(3), out=np.zeros(3, int))
    assert isinstance(err2.value, pytapp.TappError) and err2.value.code == 20
    with pytest.raises(ValueError) as err3:
        pytapp.einsum("i->i", np.ones(3), out=np.zeros(4))
    assert isinstance(err3.value, pytapp.TappError) and err3.value.code == 20


@pytest.mark.parametrize("subscripts", [None, 7, ["ij"], 2.5, object()])
def test_malformed_subscripts_of_any_type_are_13(subscripts: Any) -> None:
    with pytest.raises(TypeError) as err:
        pytapp.einsum(subscripts, np.ones((2, 2)))
    assert isinstance(err.value, pytapp.TappError) and err.value.code == 13
    with pytest.raises(TypeError):  # numpy raises a TypeError for these too
        np.einsum(subscripts, np.ones((2, 2)))


def test_bytes_subscripts_as_numpy() -> None:
    a = np.arange(4.0).reshape(2, 2)
    np.testing.assert_array_equal(pytapp.einsum(b"ij->ji", a), np.einsum(b"ij->ji", a))
    with pytest.raises(pytapp.TappError) as err:
        pytapp.einsum(b"\xff", a)
    assert err.value.code == 13


def test_same_message_for_string_and_sublist() -> None:
    a, b = np.ones((2, 3)), np.ones((4, 5))
    with pytest.raises(pytapp.TappError) as as_string:
        pytapp.einsum("AB,BC->AC", a, b)
    with pytest.raises(pytapp.TappError) as as_sublist:
        pytapp.einsum(a, [0, 1], b, [1, 2], [0, 2])
    assert str(as_string.value) == str(as_sublist.value) and as_string.value.code == 1


def test_error_text_keeps_a_rewritten_args() -> None:
    err = pytapp.errors.error_for(13, "the original")
    err.args = ("context added by a library: the original",)
    assert str(err).endswith("context added by a library: the original")
    assert pickle.loads(pickle.dumps(pytapp.errors.error_for(13, "x", also=TypeError))).code == 13


def test_foreign_operands_go_where_numpy_sends_them() -> None:
    x = Dispatched("x")
    assert pytapp.einsum("ij,jk->ik", x, x) == ("einsum", "x")
    assert pytapp.tensordot(x, x, 1) == ("tensordot", "x")
    assert pytapp.transpose(x) == ("transpose", "x")
    d = Duck(np.arange(6.0).reshape(2, 3))
    e = Duck(np.arange(12.0).reshape(3, 4))
    np.testing.assert_array_equal(pytapp.tensordot(d, e, 1), np.tensordot(d, e, 1))


def test_tensordot_and_transpose_exactly_numpy() -> None:
    a = np.arange(24.0).reshape(2, 3, 4)
    view = pytapp.transpose(a, (2, 0, 1))
    assert np.shares_memory(view, a) and not view.flags.owndata
    assert view.strides == np.transpose(a, (2, 0, 1)).strides
    assert pytapp.transpose(a, (-1, 0, 1)).shape == (4, 2, 3)
    full = pytapp.tensordot(a, a, 3)
    assert type(full) is np.ndarray and full.shape == () and full == np.tensordot(a, a, 3)
    ints = np.arange(6).reshape(2, 3)
    np.testing.assert_array_equal(pytapp.tensordot(ints, ints.T, 1), np.tensordot(ints, ints.T, 1))
    with pytest.raises(ValueError) as err:  # numpy: shape-mismatch for sum
        pytapp.tensordot(np.ones(1), np.ones(3), 1)
    assert isinstance(err.value, pytapp.TappError) and err.value.code == 1
    with pytest.raises(pytapp.TappError):
        pytapp.transpose(a, (0, 1))


@settings(max_examples=40, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(["i1", "i8", "u4", "?", "f4", "f8", "c16", "g"]))
def test_random_broadcasting_einsums_match_numpy(data: st.DataObject, dtype: str) -> None:
    labels = "abcd"
    n = data.draw(st.integers(1, 3))
    terms = [data.draw(st.text(labels, min_size=0, max_size=3)) for _ in range(n)]
    extent = {ch: data.draw(st.integers(1, 3)) for ch in labels}
    shapes = [tuple(data.draw(st.sampled_from([1, extent[ch]])) for ch in t) for t in terms]
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    ops = [rng.integers(-3, 4, s).astype(dtype) for s in shapes]
    used = sorted(set("".join(terms)))
    out = "".join(ch for ch in used if data.draw(st.booleans()))
    eq = ",".join(terms) + "->" + out
    try:
        want = np.einsum(eq, *[x.astype(np.complex128) if dtype in "f4f8c16" else x
                               for x in ops])
    except ValueError:  # numpy refuses it (a repeated label of two extents): so must we
        with pytest.raises(ValueError) as err:
            pytapp.einsum(eq, *ops)
        assert isinstance(err.value, pytapp.TappError)
        return
    got = pytapp.einsum(eq, *ops)
    if dtype in ("f4", "f8", "c16"):
        np.testing.assert_allclose(np.asarray(got, dtype=np.complex128), want, rtol=1e-5,
                                   atol=1e-5)
    else:
        np.testing.assert_array_equal(got, np.einsum(eq, *ops))


class OnDevice:
    """A device array as CuPy's: it dispatches numpy's functions but refuses host copies."""

    def __init__(self) -> None:
        self.__cuda_array_interface__ = {"shape": (2,), "typestr": "<f8", "data": (0, False),
                                         "version": 3}
        self.dtype = np.dtype(np.float64)
        self.shape = (2,)

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError("implicit conversion to a host NumPy array is not allowed")

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        raise AssertionError("a device array must not be dispatched")


def test_device_arrays_stay_refused() -> None:
    with pytest.raises(pytapp.TappError) as err:
        pytapp.einsum("i->", OnDevice())
    assert err.value.code == 20


def test_torch_tensors_of_dtypes_tapp_lacks() -> None:
    torch = pytest.importorskip("torch")
    a = torch.arange(6).reshape(2, 3)
    got = pytapp.einsum("ij,ij->", a, a)
    assert isinstance(got, torch.Tensor) and got.item() == 55
    view = pytapp.einsum("ij->ji", torch.ones(2, 3, dtype=torch.float64))
    assert isinstance(view, torch.Tensor) and tuple(view.shape) == (3, 2)
