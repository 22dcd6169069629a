"""The torch backend with C and a D stored in F16/BF16: the GEMM accumulates in F32 into a
temporary holding beta C, and D is rounded once (exact integer data: every value, F32 sum and
rounded result is representable, so results must be equal)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("torch")

from pytapp.backends import torch as torch_backend
from pytapp.handle import Handle
from pytapp.product import TensorProduct
from pytapp.tensor import TensorInfo

CASES = [
    ("bhqd,bhkd->bhqk", {"b": 2, "h": 3, "q": 5, "k": 6, "d": 8}),  # batched, D^T or not
    ("ik,kj->ij", {"i": 7, "k": 8, "j": 9}),                         # one matrix
    ("ik,jk->ji", {"i": 7, "k": 8, "j": 9}),                         # D the transposed GEMM
]


def _ints(rng: np.random.Generator, labels: str, ext: dict[str, int], dtype: Any) -> np.ndarray:
    return rng.integers(-2, 3, [ext[x] for x in labels]).astype(np.float64).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize(("eq", "ext"), CASES)
@pytest.mark.parametrize("c_layout", ["same", "transposed"])
def test_low_precision_d_with_c_rounds_once(dtype: Any, eq: str, ext: dict[str, int],
                                             c_layout: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[bool] = []
    fused = torch_backend.TorchPlan._gemm_with_c_stored

    def spy(self: Any, *args: Any) -> bool:
        done = fused(self, *args)
        taken.append(done)
        return done

    monkeypatch.setattr(torch_backend.TorchPlan, "_gemm_with_c_stored", spy)
    rng = np.random.default_rng(4)
    (la, lb), ld = eq.split("->")[0].split(","), eq.split("->")[1]
    a, b = _ints(rng, la, ext, dtype), _ints(rng, lb, ext, dtype)
    c = _ints(rng, ld, ext, dtype)
    if c_layout == "transposed":  # C laid out unlike D: the copy into the temporary permutes
        c = np.ascontiguousarray(c.T).T
    d = np.full(c.shape, np.nan, dtype=dtype)
    plan = TensorProduct(Handle("torch"), TensorInfo.from_array(a), la, TensorInfo.from_array(b),
                         lb, TensorInfo.from_array(c), ld, TensorInfo.from_array(d), ld)
    plan.execute(2.0, a, b, -3.0, c, d)
    want = 2 * np.einsum(eq, a.astype(np.float64), b.astype(np.float64)) - 3 * c.astype(
        np.float64)
    np.testing.assert_array_equal(d.astype(np.float64), want)
    assert taken and all(taken)


def test_c_overlapping_d_keeps_the_general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """C that is D: the temporary path would read what it writes; the general path runs."""
    rng = np.random.default_rng(5)
    a = _ints(rng, "ik", {"i": 6, "k": 4}, np.float16)
    b = _ints(rng, "kj", {"k": 4, "j": 5}, np.float16)
    d = _ints(rng, "ij", {"i": 6, "j": 5}, np.float16)
    want = 2 * (a.astype(np.float64) @ b.astype(np.float64)) - 3 * d.astype(np.float64)
    plan = TensorProduct(Handle("torch"), TensorInfo.from_array(a), "ik",
                         TensorInfo.from_array(b), "kj", TensorInfo.from_array(d), "ij",
                         TensorInfo.from_array(d), "ij")
    plan.execute(2.0, a, b, -3.0, d, d)
    np.testing.assert_array_equal(d.astype(np.float64), want)
