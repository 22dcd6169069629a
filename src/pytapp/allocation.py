"""Which allocation owns a view: the memory-safety half of binding (SPEC section 2, error 19).

A descriptor may address any element of the memory that the passed object *owns*, not only the
elements of the object's own view (a slice of a larger array may be described with the larger
array's strides, as a C pointer would be). To check that before anything is read or written,
:func:`owning_span` walks the view's ownership chain down to the object that owns the memory
and returns that object's byte range. The chain may pass through

* ndarray bases (views of views, ``np.memmap`` down to its ``mmap``);
* objects exposing ``__array_interface__`` with a ``base`` (what ``as_strided`` and
  ``sliding_window_view`` build: their interface describes a view that may lie about its
  extent, so only the base is trusted);
* ``memoryview`` (down to the exporting object) and buffer owners: ``bytes``, ``bytearray``,
  ``array.array``, ``mmap.mmap``, ctypes arrays and structures that own their buffer (or share
  their base object's), and any exporter of a contiguous buffer;
* torch tensors, through their storage.

When the chain ends in anything else (a DLPack capsule of an unknown producer, an array or a
ctypes object laid over a raw pointer), the owner's extent is unknown and the answer is
``None``: callers refuse the operand with error 19 instead of trusting the view's own span.

Examples
--------
>>> import numpy as np
>>> from numpy.lib.stride_tricks import as_strided
>>> base = np.zeros(12)
>>> low, high = owning_span(base[2:5])
>>> high - low
96
>>> stretched = as_strided(base, shape=(40,), strides=(8,))
>>> owning_span(stretched) == owning_span(base)
True
"""

from __future__ import annotations

import ctypes
import mmap
import os
from typing import Any

import numpy as np

__all__ = ["describe_owner", "file_span", "owning_span"]

#: Longest ownership chain followed (protects against cycles in foreign objects).
_MAX_DEPTH = 64


def _buffer_span(obj: Any) -> tuple[int, int] | None:
    """Byte range of a buffer owner's whole, contiguous buffer (``None`` if not contiguous)."""
    if isinstance(obj, ctypes.Array | ctypes.Structure | ctypes.Union):
        low = ctypes.addressof(obj)
        return low, low + ctypes.sizeof(obj)
    try:
        view = memoryview(obj)
    except (TypeError, ValueError, BufferError):
        return None
    with view:
        if not view.contiguous:
            return None
        if view.nbytes == 0:
            return (0, 0)
        flat = np.frombuffer(view.cast("B") if view.ndim != 1 or view.format != "B" else view,
                             dtype=np.uint8)
        low = int(flat.__array_interface__["data"][0])
        return low, low + view.nbytes


def _torch_span(data: Any) -> tuple[int, int] | None:
    """Byte range of a torch tensor's storage, or ``None`` for anything else."""
    storage = getattr(data, "untyped_storage", None)
    if not callable(storage) or type(data).__module__.split(".")[0] != "torch":
        return None
    try:
        st = storage()
        low = int(st.data_ptr())
        return low, low + int(st.nbytes())
    except (RuntimeError, TypeError, ValueError):
        return None


def _owner(arr: Any) -> tuple[Any, tuple[int, int] | None]:
    """Follow the chain from ``arr``: (last object reached, its byte range or ``None``)."""
    obj = arr
    for _ in range(_MAX_DEPTH):
        if isinstance(obj, np.ndarray):
            base = obj.base
            if base is None:
                if not obj.flags.owndata:  # made from a raw pointer: extent unknown
                    return obj, None
                low, high = np.lib.array_utils.byte_bounds(obj)
                return obj, (int(low), int(high))
            obj = base
        elif isinstance(obj, memoryview):
            try:
                exporter = obj.obj
            except ValueError:  # released
                return obj, None
            if exporter is None:
                return obj, None
            obj = exporter
        elif isinstance(obj, ctypes.Array | ctypes.Structure | ctypes.Union):
            # A ctypes object either owns its buffer, shares its base object's, or was laid
            # over an address (from_address, a pointer's contents): then nothing vouches for
            # the memory around it.
            base = getattr(obj, "_b_base_", None)
            if base is not None:
                obj = base
            elif getattr(obj, "_b_needsfree_", 0):
                return obj, _buffer_span(obj)
            else:
                return obj, None
        elif isinstance(obj, mmap.mmap | bytes | bytearray):
            return obj, _buffer_span(obj)
        elif hasattr(obj, "__array_interface__"):
            # as_strided's DummyArray and the like: the interface is the (possibly stretched)
            # view itself; only what it keeps alive as its base is memory we can vouch for.
            base = getattr(obj, "base", None)
            if base is None:
                return obj, None
            obj = base
        else:
            torch = _torch_span(obj)
            if torch is not None:
                return obj, torch
            return obj, _buffer_span(obj)
    return obj, None


def owning_span(arr: np.ndarray, data: Any = None) -> tuple[int, int] | None:
    """Byte range ``[low, high)`` of the allocation that owns ``arr``'s memory.

    Parameters
    ----------
    arr
        The NumPy view pytapp will read or write.
    data
        The object the user passed, when ``arr`` was made from it (a torch tensor's storage
        is found through the tensor, not through its DLPack capsule).

    Returns
    -------
    tuple of int or None
        ``None`` when the owner's extent cannot be established.
    """
    if data is not None and data is not arr:
        torch = _torch_span(data)
        if torch is not None:
            return torch
    return _owner(arr)[1]


def file_span(arr: np.ndarray) -> tuple[Any, int, int] | None:
    """Which file, and which bytes of it, ``arr``'s elements are mapped from.

    Two ``np.memmap`` objects of one file live at different addresses, so comparing addresses
    (``np.may_share_memory``) cannot see that they overlap; comparing file positions can.

    Returns
    -------
    tuple or None
        ``(file identity, first byte, end byte)`` for an array whose ownership chain passes
        through an ``np.memmap`` down to its ``mmap``; ``None`` for any other memory.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> name = os.path.join(tempfile.mkdtemp(), "x.bin")
    >>> one = np.memmap(name, dtype=np.float64, mode="w+", shape=(4,))
    >>> two = np.memmap(name, dtype=np.float64, mode="r+", shape=(4,))
    >>> file_span(one[1:])[1:] == file_span(two[1:])[1:] == (8, 32)
    True
    """
    obj: Any = arr
    mapped: Any = None
    for _ in range(_MAX_DEPTH):
        if isinstance(obj, np.memmap) and mapped is None and obj.filename is not None:
            mapped = obj
        if isinstance(obj, mmap.mmap):
            break
        base = getattr(obj, "base", None) if isinstance(obj, np.ndarray) or hasattr(
            obj, "__array_interface__") else None
        if base is None:
            return None
        obj = base
    else:
        return None
    if mapped is None:
        return None
    span = _buffer_span(obj)
    if span is None:
        return None
    offset = int(mapped.offset)
    start = offset - offset % mmap.ALLOCATIONGRANULARITY  # where np.memmap's mapping begins
    try:
        st = os.stat(mapped.filename)
        key: Any = (st.st_dev, st.st_ino)
    except (OSError, TypeError, ValueError):
        key = str(mapped.filename)
    low, high = np.lib.array_utils.byte_bounds(arr)
    return key, start + int(low) - span[0], start + int(high) - span[0]


def describe_owner(arr: np.ndarray) -> str:
    """Name of the object where the ownership chain of ``arr`` ends (for error messages)."""
    return type(_owner(arr)[0]).__name__
