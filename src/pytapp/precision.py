"""Precision types and the compute rules they imply (SPEC section 3).

The one table of what each :class:`Prectype` means: to which type inputs are rounded, in which
type products and sums are formed, and whether every partial sum is rounded to F16.

Examples
--------
>>> from pytapp.datatypes import Datatype
>>> rule = compute_rule(Prectype.DEFAULT, [Datatype.F16, Datatype.F32, Datatype.F32, Datatype.C32])
>>> rule.real.name, rule.is_complex, rule.input_round
('F32', True, None)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np

from pytapp.datatypes import Datatype
from pytapp.errors import ErrorCode, error_for

__all__ = [
    "ComputeRule",
    "Prectype",
    "as_prectype",
    "compute_rule",
    "tiny_floor",
    "tolerance_factor",
    "tolerance_for_eps",
    "within_tolerance",
]


class Prectype(IntEnum):
    """Requested computational precision (C-compatible numbers)."""

    DEFAULT = -1
    F32F32_ACCUM_F32 = 0
    F64F64_ACCUM_F64 = 1
    F16F16_ACCUM_F16 = 4
    F16F16_ACCUM_F32 = 5
    BF16BF16_ACCUM_F32 = 6


@dataclass(frozen=True)
class ComputeRule:
    """What a precision means for one product.

    Attributes
    ----------
    input_round
        Real datatype every input part (A, B, C) is rounded to first; ``None`` keeps storage.
    real
        Real datatype in which every product and sum (of each part) is formed and rounded.
    is_complex
        Whether the computation is complex (any operand is complex).
    """

    prec: Prectype
    input_round: Datatype | None
    real: Datatype
    is_complex: bool

    @property
    def real_dtype(self) -> np.dtype[Any]:
        """NumPy dtype of one part of the compute type."""
        return self.real.numpy_dtype

    @property
    def eps(self) -> float:
        """Epsilon of the compute type (SPEC section 7)."""
        return self.real.eps


# (input rounding, real compute type) per precision; DEFAULT is decided from the operands.
_TABLE: dict[Prectype, tuple[Datatype | None, Datatype]] = {
    Prectype.F32F32_ACCUM_F32: (Datatype.F32, Datatype.F32),
    Prectype.F64F64_ACCUM_F64: (Datatype.F64, Datatype.F64),
    Prectype.F16F16_ACCUM_F16: (Datatype.F16, Datatype.F16),
    Prectype.F16F16_ACCUM_F32: (Datatype.F16, Datatype.F32),
    Prectype.BF16BF16_ACCUM_F32: (Datatype.BF16, Datatype.F32),
}


def as_prectype(value: Any) -> Prectype:
    """Validate a precision given as :class:`Prectype` or int.

    Raises
    ------
    PrecisionError
        Code 16 for an unknown value.
    """
    if isinstance(value, Prectype):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        try:
            return Prectype(int(value))
        except ValueError:
            pass
    raise error_for(
        ErrorCode.UNKNOWN_PRECISION,
        f"prec={value!r} is not a precision; use one of "
        + ", ".join(f"Prectype.{p.name} ({p.value})" for p in Prectype),
    )


def compute_rule(prec: Prectype, datatypes: Iterable[Datatype]) -> ComputeRule:
    """Decide input rounding and compute type for ``prec`` and the operands' datatypes.

    DEFAULT computes in the widest real type among the operands (F16/BF16 compute in F32),
    complex if any operand is complex. Under F16 and BF16 precisions complex operands are
    computed with F16 (BF16)-rounded parts; F16F16_ACCUM_F16 keeps complex in F16 parts too.
    """
    dts = list(datatypes)
    is_complex = any(dt.is_complex for dt in dts)
    if prec is Prectype.DEFAULT:
        wide = Datatype.F64 if any(dt.real is Datatype.F64 for dt in dts) else Datatype.F32
        return ComputeRule(prec, None, wide, is_complex)
    rounding, real = _TABLE[prec]
    return ComputeRule(prec, rounding, real, is_complex)


def tiny_floor(rule: ComputeRule, n_terms: int, storage: Datatype) -> float:
    """Absolute error allowed for results in the subnormal range.

    Every rounding in the compute type, and the final one into D's type, may lose up to the
    spacing of that type's subnormal numbers, which the relative terms of SPEC section 7 do
    not cover.
    """
    return storage.subnormal_spacing + rule.real.subnormal_spacing * (max(n_terms, 0) + 4)


def tolerance_factor(rule: ComputeRule, n_terms: int) -> float:
    """SPEC section 7: ``tol = 4 * eps(compute type) * (number of summed terms + 4)``."""
    return tolerance_for_eps(rule.eps, n_terms)


def tolerance_for_eps(eps: float, n_terms: int) -> float:
    """SPEC section 7's factor for a given machine epsilon: ``4 * eps * (n_terms + 4)``.

    Examples
    --------
    >>> tolerance_for_eps(0.5, 0)
    8.0
    """
    return 4.0 * eps * (max(int(n_terms), 0) + 4)


def within_tolerance(
    result: np.ndarray,
    expected: np.ndarray,
    bound: np.ndarray,
    tol: float,
    store_eps: float,
    store_tiny: float = 0.0,
) -> np.ndarray:
    """Elementwise SPEC section 7 check, plus the final rounding into D's datatype.

    ``|result - expected| <= tol * bound + store_eps * |expected| + store_tiny``, where
    ``bound`` is ``|alpha| sum |A||B| + |beta| |C|``; the last two terms are the rounding into
    D's storage type (relative for normal numbers, ``store_tiny``, the subnormal spacing, for
    tiny ones). A non-finite expectation needs a non-finite result. Returns a boolean array
    (True where the element is acceptable).
    """
    res = np.asarray(result).astype(np.complex128)
    exp = np.asarray(expected).astype(np.complex128)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(res - exp)
        ok = diff <= (tol * np.asarray(bound, dtype=np.float64) + store_eps * np.abs(exp)
                      + store_tiny)
    # NaN and Inf must propagate, but which of the two appears depends on the order of
    # operations (inf - inf is NaN): a non-finite expectation needs a non-finite result.
    finite_res = np.isfinite(res)
    finite_exp = np.isfinite(exp)
    return np.where(finite_exp, ok & finite_res, ~finite_res)
