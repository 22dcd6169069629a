"""The oracle of the compat tests: numpy.einsum in float64/complex128 on the same values."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np

#: Datatypes TAPP has, with the bound on |error| / (sum of |terms|) each may reach.
DTYPES: dict[str, tuple[Any, float]] = {
    "float64": (np.float64, 1e-12),
    "complex128": (np.complex128, 1e-12),
    "float32": (np.float32, 2e-5),
    "complex64": (np.complex64, 2e-5),
    "float16": (np.float16, 2e-2),
    "bfloat16": (ml_dtypes.bfloat16, 8e-2),
}


def make_operands(shapes: Sequence[tuple[int, ...] | None], dtype: Any,
                  rng: np.random.Generator) -> list[Any]:
    """Random operands in [-1, 1] (Python floats or complexes for ``None`` shapes)."""
    complex_ = np.dtype(dtype).kind == "c"
    ops: list[Any] = []
    for shape in shapes:
        x = rng.uniform(-1, 1, size=shape or ())
        if complex_:
            x = x + 1j * rng.uniform(-1, 1, size=shape or ())
        ops.append(complex(x) if shape is None and complex_ else
                   float(x) if shape is None else x.astype(dtype))
    return ops


def wide(x: Any) -> Any:
    """The value of ``x`` in float64 or complex128 (Python scalars as they are)."""
    if isinstance(x, (int, float, complex)):
        return x
    arr = np.asarray(x)
    return arr.astype(np.complex128 if arr.dtype.kind == "c" else np.float64)


def _sublist_call(items: Sequence[Any], value: Callable[[Any], Any]) -> list[Any]:
    """``value`` applied to the operands of a sublist-form call (not to the sublists)."""
    pairs = len(items) // 2
    return [value(x) if i % 2 == 0 and i < 2 * pairs else x for i, x in enumerate(items)]


def assert_einsum_close(result: Any, equation: str | None, operands: Sequence[Any],
                        bound: float) -> None:
    """``result`` is within ``bound`` x (sum of |terms|) of numpy.einsum in wide precision.

    ``equation`` None: ``operands`` is a whole sublist-form call.
    """
    if equation is None:
        ref = np.einsum(*_sublist_call(operands, wide))
        scale = np.einsum(*_sublist_call(operands, lambda x: np.abs(wide(x))))
    else:
        args = [wide(x) for x in operands]
        ref = np.einsum(equation, *args, optimize=False)
        scale = np.einsum(equation, *[np.abs(x) for x in args], optimize=False)
    got = np.asarray(result).astype(np.complex128)
    assert got.shape == np.shape(ref), (got.shape, np.shape(ref))
    err = np.abs(got - ref)
    limit = bound * (np.asarray(scale) + 1e-30)
    assert np.all(err <= limit), f"max error {np.max(err, initial=0):.3g}"
