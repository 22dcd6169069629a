"""TensorInfo: an immutable tensor descriptor (datatype, extents, strides in elements).

Examples
--------
>>> import numpy as np
>>> info = TensorInfo(Datatype.F64, (2, 3))
>>> info.strides
(3, 1)
>>> TensorInfo.from_array(np.zeros((4, 5), dtype=np.float32).T)
TensorInfo(F32, extents=(5, 4), strides=(1, 5))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pytapp.attributes import AttributeStore
from pytapp.datatypes import Datatype, as_array, as_datatype, datatype_of, datatype_of_data
from pytapp.errors import ErrorCode, error_for

__all__ = ["TensorInfo", "row_major_strides"]


def row_major_strides(extents: Sequence[int]) -> tuple[int, ...]:
    """Row-major (C order) strides in elements; the last mode is contiguous.

    Examples
    --------
    >>> row_major_strides((2, 3, 4))
    (12, 4, 1)
    """
    strides: list[int] = []
    step = 1
    for e in reversed(extents):
        strides.append(step)
        step *= max(int(e), 1)
    return tuple(reversed(strides))


def _as_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise error_for(
            ErrorCode.NEGATIVE_EXTENT if what == "extent" else ErrorCode.NEGATIVE_NMODES,
            f"{what} {value!r} is not an integer; give one integer {what} per mode",
        )
    return int(value)


def _as_tuple(values: Any, what: str) -> tuple[Any, ...]:
    if isinstance(values, str | bytes):
        values = None  # a string is a sequence of characters, never of extents or strides
    try:
        return tuple(values)
    except TypeError as exc:
        raise error_for(
            ErrorCode.NEGATIVE_NMODES,
            f"{what} {values!r} is not a sequence; give one integer per mode, e.g. (2, 3)",
        ) from exc


class TensorInfo(AttributeStore):
    """Descriptor of a strided tensor: datatype, extents (>= 0) and strides in elements.

    Immutable and hashable (attributes do not take part in equality). Strides may be
    negative, zero or overlapping; ``None`` means row-major.

    Parameters
    ----------
    datatype
        A :class:`Datatype`, its value, its name or a NumPy dtype.
    extents
        One extent per mode (a zero-mode tensor is a scalar).
    strides
        One stride per mode, in elements, or ``None`` for row-major.

    Raises
    ------
    InvalidDescriptorError
        Code 15 for an unknown datatype, 14 for a negative extent, 13 when the numbers of
        extents and strides differ.

    Examples
    --------
    >>> TensorInfo("c128", (3,), (-1,)).with_extents((2,))
    TensorInfo(C64, extents=(2,), strides=(-1,))
    """

    _datatype: Datatype
    _extents: tuple[int, ...]
    _strides: tuple[int, ...]

    def __init__(
        self, datatype: Any, extents: Sequence[int], strides: Sequence[int] | None = None
    ) -> None:
        dt = as_datatype(datatype)
        ext = tuple(_as_int(e, "extent") for e in _as_tuple(extents, "extents"))
        for i, e in enumerate(ext):
            if e < 0:
                raise error_for(
                    ErrorCode.NEGATIVE_EXTENT,
                    f"extent {e} of mode {i} is negative; extents must be >= 0",
                )
        st = row_major_strides(ext) if strides is None else tuple(
            _as_int(s, "stride") for s in _as_tuple(strides, "strides")
        )
        if len(st) != len(ext):
            raise error_for(
                ErrorCode.NEGATIVE_NMODES,
                f"{len(ext)} extents but {len(st)} strides; give one stride per mode",
            )
        object.__setattr__(self, "_datatype", dt)
        object.__setattr__(self, "_extents", ext)
        object.__setattr__(self, "_strides", st)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("TensorInfo is immutable; use with_extents or with_strides")

    @classmethod
    def from_array(cls, array: Any) -> TensorInfo:
        """Describe a NumPy array, a torch tensor (on any device) or another array-like.

        Raises
        ------
        OperandMismatchError
            Code 20 for a dtype with no TAPP datatype or strides that are not whole elements.
        """
        if isinstance(array, np.ndarray):
            arr = array
        elif callable(getattr(array, "stride", None)) and hasattr(array, "requires_grad"):
            # a torch tensor, on any device: its layout, without touching its memory
            return cls(datatype_of_data(array, "the array"), tuple(array.shape),
                       tuple(array.stride()))
        elif hasattr(array, "__dlpack__") or hasattr(array, "requires_grad"):
            from pytapp.operands import to_ndarray  # same layer: binding knows tensors

            arr = to_ndarray(array, datatype_of_data(array, "the array"), "the array")
        else:
            arr = as_array(array, "the array")
        dt = datatype_of(arr.dtype)
        item = arr.dtype.itemsize
        strides = []
        for s in arr.strides:
            if s % item:
                raise error_for(
                    ErrorCode.OPERAND_MISMATCH,
                    f"stride of {s} bytes is not a whole number of {item}-byte elements; "
                    "copy the array first",
                )
            strides.append(s // item)
        return cls(dt, arr.shape, strides)

    @property
    def datatype(self) -> Datatype:
        """Element datatype."""
        return self._datatype

    @property
    def extents(self) -> tuple[int, ...]:
        """Extent of every mode."""
        return self._extents

    @property
    def strides(self) -> tuple[int, ...]:
        """Stride of every mode, in elements."""
        return self._strides

    @property
    def nmodes(self) -> int:
        """Number of modes."""
        return len(self._extents)

    @property
    def size(self) -> int:
        """Number of index tuples (product of extents)."""
        return int(np.prod(self._extents, dtype=np.int64)) if self._extents else 1

    def with_extents(self, extents: Sequence[int]) -> TensorInfo:
        """Return a new info with other extents (same number of modes) and the same strides."""
        extents = _as_tuple(extents, "extents")
        if len(extents) != self.nmodes:
            raise error_for(
                ErrorCode.NEGATIVE_NMODES,
                f"{len(extents)} extents given for a {self.nmodes}-mode info",
            )
        return TensorInfo(self._datatype, extents, self._strides)

    def with_strides(self, strides: Sequence[int]) -> TensorInfo:
        """Return a new info with other strides and the same extents."""
        return TensorInfo(self._datatype, self._extents, strides)

    def with_datatype(self, datatype: Any) -> TensorInfo:
        """Return a new info with another datatype and the same layout."""
        return TensorInfo(datatype, self._extents, self._strides)

    def _key(self) -> tuple[Datatype, tuple[int, ...], tuple[int, ...]]:
        return (self._datatype, self._extents, self._strides)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorInfo) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"TensorInfo({self._datatype.name}, extents={self._extents}, "
            f"strides={self._strides})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (TensorInfo, self._key())
