"""Datatypes and element operations, with their NumPy (and torch) equivalents.

The single source of truth for datatype numbers and dtype mapping (SPEC section 3).

Examples
--------
>>> import numpy as np
>>> from pytapp.datatypes import Datatype, datatype_of
>>> datatype_of(np.dtype("complex64"))
<Datatype.C32: 2>
>>> Datatype.BF16.numpy_dtype.name
'bfloat16'
"""

from __future__ import annotations

import sys
from enum import IntEnum
from typing import Any

import ml_dtypes
import numpy as np

from pytapp.errors import ErrorCode, error_for

__all__ = ["Datatype", "ElementOp", "as_array", "as_datatype", "as_element_op", "datatype_of",
           "datatype_of_data", "numpy_view", "promote", "torch_view"]


class Datatype(IntEnum):
    """Element types of TAPP tensors (C-compatible numbers)."""

    F32 = 0
    F64 = 1
    C32 = 2
    C64 = 3
    F16 = 4
    BF16 = 5

    @property
    def numpy_dtype(self) -> np.dtype[Any]:
        """The NumPy dtype that stores this datatype."""
        return _NUMPY[self]

    @property
    def is_complex(self) -> bool:
        """Whether elements are complex (C32, C64)."""
        return self in (Datatype.C32, Datatype.C64)

    @property
    def real(self) -> Datatype:
        """The datatype of one real part (C32 -> F32, C64 -> F64, others unchanged)."""
        return {Datatype.C32: Datatype.F32, Datatype.C64: Datatype.F64}.get(self, self)

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return int(_NUMPY[self].itemsize)

    @property
    def eps(self) -> float:
        """Machine epsilon of one real part (SPEC section 7)."""
        return _EPS[self.real]

    @property
    def subnormal_spacing(self) -> float:
        """Spacing of the subnormal numbers of one real part (the absolute rounding floor)."""
        return _TINY[self.real]

    @property
    def short_name(self) -> str:
        """Lower-case name used by benchmark files: f32, f64, c64, c128, f16, bf16."""
        return _SHORT[self]

    @classmethod
    def from_name(cls, name: str) -> Datatype:
        """Parse ``'F64'``, ``'f64'``, ``'float64'``, ``'c128'``, ``'complex64'``, ``'bf16'``...

        Examples
        --------
        >>> Datatype.from_name("c128")
        <Datatype.C64: 3>
        """
        key = name.strip().lower()
        for dt in cls:
            if key in (dt.name.lower(), _SHORT[dt], _NUMPY[dt].name):
                return dt
        raise error_for(
            ErrorCode.UNKNOWN_DATATYPE,
            f"unknown datatype name {name!r}; use one of "
            + ", ".join(f"{dt.name}/{_SHORT[dt]}" for dt in cls),
        )


class ElementOp(IntEnum):
    """Element operation applied to an operand: identity or complex conjugation."""

    IDENTITY = 0
    CONJUGATE = 1


_NUMPY: dict[Datatype, np.dtype[Any]] = {
    Datatype.F32: np.dtype(np.float32),
    Datatype.F64: np.dtype(np.float64),
    Datatype.C32: np.dtype(np.complex64),
    Datatype.C64: np.dtype(np.complex128),
    Datatype.F16: np.dtype(np.float16),
    Datatype.BF16: np.dtype(ml_dtypes.bfloat16),
}
_SHORT = {
    Datatype.F32: "f32",
    Datatype.F64: "f64",
    Datatype.C32: "c64",
    Datatype.C64: "c128",
    Datatype.F16: "f16",
    Datatype.BF16: "bf16",
}
_EPS = {
    Datatype.F64: 2.2e-16,
    Datatype.F32: 1.2e-7,
    Datatype.F16: 9.8e-4,
    Datatype.BF16: 7.8e-3,
}
_TINY = {
    Datatype.F64: 2.0**-1074,
    Datatype.F32: 2.0**-149,
    Datatype.F16: 2.0**-24,
    Datatype.BF16: 2.0**-133,
}
_BY_DTYPE = {dtype: dt for dt, dtype in _NUMPY.items()}


def datatype_of(dtype: Any, role: str | None = None) -> Datatype:
    """Map a NumPy dtype (or anything ``np.dtype`` accepts) to a :class:`Datatype`.

    ``role`` names the operand in error messages.

    Raises
    ------
    OperandMismatchError
        Code 20 when the dtype has no TAPP datatype (integers, float128, ...).

    Examples
    --------
    >>> datatype_of("float32")
    <Datatype.F32: 0>
    """
    if isinstance(dtype, Datatype):
        return dtype
    who = f"{role} has " if role else ""
    try:
        key = np.dtype(dtype)
    except (TypeError, ValueError) as exc:
        raise error_for(ErrorCode.OPERAND_MISMATCH, f"{who}{dtype!r}, which is not a dtype") \
            from exc
    found = _BY_DTYPE.get(key)
    if found is None:
        raise error_for(
            ErrorCode.OPERAND_MISMATCH,
            f"{who}dtype {key}, which has no TAPP datatype; convert the array to one of "
            "float32, float64, complex64, complex128, float16 or bfloat16",
        )
    return found


def datatype_of_data(data: Any, role: str = "operand") -> Datatype:
    """Return the :class:`Datatype` of array data: NumPy arrays, torch tensors, other array objects.

    Torch dtypes are mapped by name, so no tensor is converted (or exported) to find it.

    Raises
    ------
    OperandMismatchError
        Code 20 when the data has no dtype TAPP knows.

    Examples
    --------
    >>> import numpy as np
    >>> datatype_of_data(np.zeros(2, dtype=np.complex64))
    <Datatype.C32: 2>
    """
    if isinstance(data, np.ndarray):
        return datatype_of(data.dtype, role)
    dtype = getattr(data, "dtype", None)
    if dtype is not None:
        name = str(dtype)
        if name.startswith("torch."):
            name = name[len("torch."):]
            for dt, np_dtype in _NUMPY.items():
                if np_dtype.name == name:
                    return dt
            raise error_for(
                ErrorCode.OPERAND_MISMATCH,
                f"{role} has torch dtype {dtype}, which has no TAPP datatype; convert it to "
                "float32, float64, complex64, complex128, float16 or bfloat16",
            )
        return datatype_of(dtype, role)
    return datatype_of(as_array(data, role).dtype, role)


def promote(*dts: Datatype) -> Datatype:
    """Return the datatype of a result computed from operands of datatypes ``dts``.

    NumPy's promotion within TAPP's datatypes: the widest real type, complex if any operand
    is; F16 with BF16 (which NumPy cannot promote) gives F32.

    Examples
    --------
    >>> promote(Datatype.F32, Datatype.C64).name
    'C64'
    >>> promote(Datatype.F16, Datatype.BF16).name
    'F32'
    """
    if not dts:
        return Datatype.F64
    is_complex = any(dt.is_complex for dt in dts)
    reals = {dt.real for dt in dts}
    if Datatype.F64 in reals:
        real = Datatype.F64
    elif Datatype.F32 in reals or len(reals) > 1:
        real = Datatype.F32
    else:
        real = reals.pop()
    if is_complex:
        return Datatype.C64 if real is Datatype.F64 else Datatype.C32
    return real


def as_array(data: Any, role: str = "operand") -> np.ndarray:
    """``np.asarray(data)``, or error 20 for an object NumPy cannot read as an array.

    Raises
    ------
    OperandMismatchError
        Code 20, whatever the foreign object raised.
    """
    try:
        return np.asarray(data)
    except Exception as exc:  # any foreign object: report it, whatever it raised
        raise error_for(
            ErrorCode.OPERAND_MISMATCH,
            f"{role}: {type(data).__name__} is not array data; pass a NumPy array or a torch "
            "tensor",
        ) from exc


def as_datatype(value: Any) -> Datatype:
    """Validate a datatype given as :class:`Datatype`, int, name or NumPy dtype.

    Raises
    ------
    InvalidDescriptorError
        Code 15 for an unknown value.
    """
    if isinstance(value, Datatype):
        return value
    if value is None or isinstance(value, bool):  # np.dtype(None) would say float64
        pass
    elif isinstance(value, str):
        return Datatype.from_name(value)
    elif isinstance(value, (int, np.integer)):
        try:
            return Datatype(int(value))
        except ValueError:
            pass
    else:
        try:
            return _BY_DTYPE[np.dtype(value)]
        except (TypeError, KeyError, ValueError):
            pass
    raise error_for(
        ErrorCode.UNKNOWN_DATATYPE,
        f"unknown datatype {value!r}; use pytapp.Datatype (F32=0, F64=1, C32=2, C64=3, "
        "F16=4, BF16=5) or a matching NumPy dtype",
    )


def as_element_op(value: Any, operand: str) -> ElementOp:
    """Validate an element operation for ``operand`` (``'A'``, ``'B'``, ``'C'`` or ``'D'``).

    Raises
    ------
    ElementOpError
        Code 17 for anything but IDENTITY (0) and CONJUGATE (1).
    """
    if isinstance(value, ElementOp):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        try:
            return ElementOp(int(value))
        except ValueError:
            pass
    raise error_for(
        ErrorCode.UNKNOWN_ELEMENT_OP,
        f"op_{operand.lower()}={value!r} is not an element operation; use "
        "ElementOp.IDENTITY (0) or ElementOp.CONJUGATE (1)",
    )


# NumPy and torch both have bfloat16, but neither converts the other's (torch.from_numpy and
# DLPack refuse ml_dtypes' bfloat16): the bits are shared as int16 and reinterpreted.


def torch_view(x: np.ndarray) -> Any:
    """Return a torch tensor sharing ``x``'s memory (bfloat16 too). torch must be imported already.

    Examples
    --------
    >>> import torch
    >>> t = torch_view(np.ones(2, dtype=ml_dtypes.bfloat16))
    >>> t.dtype
    torch.bfloat16
    """
    torch = sys.modules["torch"]
    if x.dtype.name == "bfloat16":
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(x)


def numpy_view(t: Any, *, dlpack: bool = False) -> np.ndarray:
    """Return a NumPy array sharing a CPU torch tensor's memory.

    bfloat16 included. Through ``.numpy()`` or, with ``dlpack=True``, through DLPack (any
    exporter; torch's bfloat16 handled).

    Examples
    --------
    >>> import torch
    >>> numpy_view(torch.ones(2, dtype=torch.bfloat16)).dtype.name
    'bfloat16'
    """
    if str(getattr(t, "dtype", "")) == "torch.bfloat16":
        bits = t.view(sys.modules["torch"].int16)
        raw = np.from_dlpack(bits) if dlpack else bits.numpy()
        return raw.view(Datatype.BF16.numpy_dtype)
    return np.from_dlpack(t) if dlpack else np.asarray(t.numpy())
