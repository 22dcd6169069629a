"""Torch operands and the float64 NumPy oracle shared by the torch tests (CPU and CUDA).

Operands are drawn on the CPU from a seeded generator and moved to the device, so that a CUDA
test sees the same values as its CPU twin; results come back to the CPU for the oracle
(numpy.einsum in float64/complex128).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import torch
from einsum_cases import NUMPY_BROADCAST, NUMPY_SUMS, NUMPY_VIEWS, OPT_EINSUM, TORCH

#: Cases with a tensor first (the torch path; scalars first go through NumPy).
CASES = [c for c in TORCH + NUMPY_BROADCAST + NUMPY_VIEWS + OPT_EINSUM + NUMPY_SUMS[::3]
         if c[1][0] is not None]
#: Cases torch.einsum itself computes (no Python scalars, no size-1 broadcasting).
TORCH_ORACLE = [c for c in TORCH + OPT_EINSUM if all(s is not None for s in c[1])
                and c[0] not in ("...,...", "ij,ij->")]
#: Those with something to differentiate (empty operands: the values tests).
GRAD_ORACLE = [c for c in TORCH_ORACLE if all(0 not in s for s in c[1] if s is not None)]


def operands(shapes: list[tuple[int, ...] | None], dtype: Any, seed: int = 0,
             device: str = "cpu") -> list[Any]:
    """Uniform values in [-1, 1) (a Python 0.5 where a shape is None) on ``device``."""
    gen = torch.Generator().manual_seed(seed)
    ops: list[Any] = []
    for s in shapes:
        if s is None:
            ops.append(0.5)
            continue
        t = torch.rand(s, dtype=dtype, generator=gen) * 2 - 1
        ops.append(t.to(device))
    return ops


def relayout(t: Any, how: str) -> Any:
    """The same values in another memory layout: modes reversed in memory, or strided."""
    if not isinstance(t, torch.Tensor) or t.dim() == 0:
        return t
    if how == "reversed":
        return t.permute(*reversed(range(t.dim()))).contiguous().permute(
            *reversed(range(t.dim())))
    if how == "strided":
        big = torch.zeros([2 * n for n in t.shape], dtype=t.dtype, device=t.device)
        view = big[tuple(slice(None, None, 2) for _ in t.shape)]
        view.copy_(t)
        return view
    return t


def wide(x: Any) -> Any:
    """A tensor as a float64/complex128 NumPy array (conjugate and negative bits resolved)."""
    if isinstance(x, torch.Tensor):
        x = x.detach().resolve_conj().resolve_neg().cpu()
        return x.to(torch.complex128 if x.is_complex() else torch.float64).numpy()
    return x


def assert_close(got: Any, equation: str, ops: list[Any], bound: float) -> None:
    """Elementwise error at most ``bound`` times the einsum of the operands' magnitudes."""
    args = [wide(x) for x in ops]
    want = np.einsum(equation, *args)
    scale = np.einsum(equation, *[np.abs(x) for x in args])
    err = np.abs(np.asarray(wide(got)) - want)
    assert np.all(err <= bound * np.maximum(scale, 1e-300)), (equation, float(err.max()))


def check_threads_share_programs(device: str, calls: int) -> None:
    """16 threads contract ``ij,jk->ki`` on five shapes at once, each result checked."""
    shapes = [((n, 4), (4, n + 1)) for n in range(1, 6)]
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        import pytapp

        try:
            for i in range(calls):
                sa, sb = shapes[(seed + i) % len(shapes)]
                a, b = operands([sa, sb], torch.float64, seed=seed * 1000 + i, device=device)
                assert_close(pytapp.einsum("ij,jk->ki", a, b), "ij,jk->ki", [a, b], 1e-12)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


#: Datatypes of the torch tests, with the bound of each against the float64 oracle.
DATATYPE_BOUNDS = {"float32": 2e-5, "complex64": 2e-5, "complex128": 1e-12, "float16": 2e-2,
                   "bfloat16": 8e-2}


def check_datatypes(dtype: str, device: str) -> None:
    """Every einsum torch itself computes, in ``dtype`` on ``device``: result stays there."""
    import pytapp

    for equation, shapes in TORCH_ORACLE:
        ops = operands(shapes, getattr(torch, dtype), device=device)
        got = pytapp.einsum(equation, *ops)
        assert got.device.type == torch.device(device).type and got.dtype == getattr(torch, dtype)
        assert_close(got, equation, ops, DATATYPE_BOUNDS[dtype])
