"""Bind user data to tensor descriptors as safe strided views (SPEC section 2).

Accepted data: NumPy arrays (any strides), objects with the buffer protocol, and DLPack
producers such as CPU torch tensors. The data's element [0, ..., 0] is the descriptor's element
[0, ..., 0]; the data either has the descriptor's shape or is one-dimensional (flat storage, as a
C pointer would be). Before anything is read or written, the whole footprint of the descriptor
must lie inside the memory the object owns (error 19), dtypes must match (20) and D must be
writable (22). Inputs that overlap D are copied first, so the result is the out-of-place one.

Examples
--------
>>> import numpy as np
>>> from pytapp.analysis import merge_modes
>>> a = np.arange(6.0)
>>> view = bind_array(a, Datatype.F64, (2, 3), (3, 1), merge_modes("ij", (2, 3), (3, 1)), "A")
>>> view.shape
(2, 3)
"""

from __future__ import annotations

import bisect
import cmath
import itertools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.array_utils import byte_bounds

from pytapp.allocation import describe_owner, file_span, owning_span
from pytapp.analysis.labels import Modes
from pytapp.analysis.layout import footprint
from pytapp.analysis.spec import ContractionSpec, OperandSpec
from pytapp.datatypes import Datatype, numpy_view
from pytapp.errors import ErrorCode, error_for

__all__ = [
    "Binder",
    "BoundProduct",
    "bind_array",
    "bind_batch",
    "byte_span",
    "check_inside",
    "convert_scalar",
    "same_layout",
    "to_ndarray",
    "torch_bits",
]

_RAW_FORMATS = {"B", "b", "c"}


def torch_bits(data: Any) -> tuple[bool, bool]:
    """Return ``(conjugate bit, negative bit)`` of a torch tensor; both false for anything else.

    A torch view with such a bit (``z.conj()``, ``torch._neg_view(x)``, ``z.conj().imag``)
    means the conjugate or the negative of the memory it shares; DLPack exports the memory.

    Examples
    --------
    >>> torch_bits(np.ones(2))
    (False, False)
    """
    is_conj = getattr(data, "is_conj", None)
    if not callable(is_conj) or type(data).__module__.split(".")[0] != "torch":
        return False, False
    return bool(is_conj()), bool(data.is_neg())


def _memory_of(data: Any) -> Any:
    """Return a torch view of the same memory without pending conjugate or negative bits."""
    conj, neg = torch_bits(data)
    if conj:
        data = data.conj()  # conj of a conj view is the memory as stored
    if neg:
        data = sys.modules["torch"]._neg_view(data)  # clears the bit, shares the memory
    return data


def to_ndarray(data: Any, datatype: Datatype, role: str) -> np.ndarray:
    """Return an ndarray over ``data``'s memory without copying.

    A torch tensor with the conjugate or negative bit gives its memory as stored (the bits
    are applied by :func:`bind_array`).

    Raises
    ------
    OperandMismatchError
        Code 20 when the object is not array data, lives on another device, or its dtype is
        not the descriptor's.
    """
    want = datatype.numpy_dtype
    if isinstance(data, np.ndarray):
        arr = data
    elif getattr(data, "requires_grad", False) is True:
        raise error_for(
            ErrorCode.UNSUPPORTED,
            f"{role} requires grad, and pytapp does not record products for autograd yet; "
            "pass tensor.detach() (the values are used as they are, without gradients)",
        )
    elif hasattr(data, "__dlpack__") and not isinstance(data, (bytes, bytearray, memoryview)):
        try:
            # torch's bfloat16 only when bfloat16 is wanted; any other dtype is refused below.
            bf16 = want.name == "bfloat16"
            memory = _memory_of(data)
            arr = numpy_view(memory, dlpack=True) if bf16 else np.from_dlpack(memory)
        except (BufferError, RuntimeError, TypeError, ValueError) as exc:
            raise error_for(
                ErrorCode.OPERAND_MISMATCH,
                f"{role}: cannot view {type(data).__name__} through DLPack ({exc}); pass a "
                "CPU tensor (detached, without pending conjugation), or a NumPy array",
            ) from exc
    else:
        try:
            mv = memoryview(data)
        except TypeError as exc:
            raise error_for(
                ErrorCode.OPERAND_MISMATCH,
                f"{role}: {type(data).__name__} is not array data; pass a NumPy array, a "
                "buffer or a DLPack tensor",
            ) from exc
        if mv.format in _RAW_FORMATS and mv.itemsize == 1 and mv.contiguous:
            count = mv.nbytes // want.itemsize
            arr = np.frombuffer(mv, dtype=want, count=count)
        else:
            arr = np.asarray(mv)
    if arr.dtype != want:
        raise error_for(
            ErrorCode.OPERAND_MISMATCH,
            f"{role} has dtype {arr.dtype} but its tensor info says {datatype.name} "
            f"({want}); convert the data or describe it with the matching datatype",
        )
    return arr


def byte_span(arr: np.ndarray) -> tuple[int, int]:
    """Byte range [low, high) that the elements of ``arr`` occupy."""
    low, high = byte_bounds(arr)
    return int(low), int(high)


def check_inside(
    arr: np.ndarray, data: Any, span: tuple[int, int], item: int, role: str,
    layout: Callable[[], str],
) -> None:
    """Raise 19 unless element offsets ``span`` from ``arr``'s first element lie in its owner.

    Raises
    ------
    OutOfBoundsError
        Code 19 when the bytes fall outside the owning allocation, or when the owner's extent
        cannot be established (the view's own span is never trusted).
    """
    owner = owning_span(arr, data)
    if owner is None:
        raise error_for(
            ErrorCode.OUT_OF_BOUNDS,
            f"{role}: cannot establish which memory owns this {type(data).__name__} (its "
            f"ownership chain ends in a {describe_owner(arr)}), so its bounds cannot be "
            "checked; pass a NumPy array that owns its memory or a view of one (for example "
            "np.ascontiguousarray(x)), a torch tensor, or a buffer such as bytes, bytearray, "
            "mmap or a ctypes array",
        )
    low, high = owner
    start = int(arr.__array_interface__["data"][0])
    first, last = start + span[0] * item, start + (span[1] + 1) * item
    if first < low or last > high:
        raise error_for(
            ErrorCode.OUT_OF_BOUNDS,
            f"{role}: {layout()} reach element offsets {span[0]}..{span[1]}, bytes "
            f"[{first - low}, {last - low}) of an allocation of {high - low} bytes; fix the "
            "strides or pass the whole array",
        )


def bind_array(
    data: Any,
    datatype: Datatype,
    extents: Sequence[int],
    strides: Sequence[int],
    modes: Modes,
    role: str,
    *,
    writable: bool = False,
) -> np.ndarray:
    """View ``data`` through a descriptor, as an array over the merged modes.

    Raises
    ------
    OperandMismatchError
        Code 20 for a dtype or shape that does not match the descriptor.
    OutOfBoundsError
        Code 19 when the layout reaches outside the memory the object owns.
    ReadOnlyError
        Code 22 when ``writable`` and the data is read-only.
    """
    arr = to_ndarray(data, datatype, role)
    ext = tuple(extents)
    if arr.shape != ext and arr.ndim != 1:
        raise error_for(
            ErrorCode.OPERAND_MISMATCH,
            f"{role} has shape {arr.shape} but its tensor info has extents {ext}; pass data "
            "of that shape, or one-dimensional storage whose first element is element [0,...,0]",
        )
    if writable and not arr.flags.writeable:
        raise error_for(
            ErrorCode.READ_ONLY,
            f"{role} is read-only; pass a writable array (for example a copy) as the output",
        )
    conj, neg = torch_bits(data)
    if writable and (conj or neg):
        raise error_for(
            ErrorCode.OPERAND_MISMATCH,
            f"{role} is a torch view with the {'conjugate' if conj else 'negative'} bit set "
            "(its values are the memory's conjugate or negative), which pytapp cannot write "
            "through; pass a plain tensor (for z.conj(): z with op_d conjugated; for a "
            "negative view: the tensor it negates, with alpha and beta negated)",
        )
    item = datatype.itemsize
    span = footprint(ext, strides)
    if span is not None:
        check_inside(arr, data, span, item, role, lambda: (
            f"extents {ext} with strides {tuple(strides)}"))
    shape = modes.extents
    byte_strides = tuple(s * item for s in modes.strides)
    if span is None:  # empty: never dereferenced, any strides do
        return np.empty(shape, dtype=arr.dtype)
    view = np.lib.stride_tricks.as_strided(
        arr, shape=shape, strides=byte_strides, writeable=writable
    )
    if conj:  # the values the tensor means, in a private copy of what is read
        view = np.conjugate(view)
    return np.negative(view) if neg else view


def _finite(value: Any) -> bool:
    """Whether a number is finite; Python ints of any size are (NumPy sees them as objects)."""
    try:
        return cmath.isfinite(complex(value))
    except OverflowError:  # an int beyond float64: finite, and too large for any datatype
        return True


#: Datatypes that hold any finite Python float: the conversion cannot overflow.
_WIDE_REAL_OK = frozenset({Datatype.F64, Datatype.C64})


def convert_scalar(value: Any, datatype: Datatype, name: str) -> Any:
    """Convert alpha or beta to D's datatype.

    Raises
    ------
    ScalarError
        Code 21 for a non-number, a complex value with a real D, or a finite value that
        overflows D's datatype.
    """
    kind = type(value)
    if (kind is float or kind is int) and datatype in _WIDE_REAL_OK:
        try:
            return datatype.numpy_dtype.type(value)
        except OverflowError:
            pass
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (bool, np.timedelta64)) or not isinstance(
            value, (int, float, complex, np.number)):
        raise error_for(
            ErrorCode.SCALAR_NOT_REPRESENTABLE,
            f"{name}={value!r} is not a number; pass an int, float or complex",
        )
    is_complex = isinstance(value, (complex, np.complexfloating))
    if is_complex and not datatype.is_complex and complex(value).imag != 0:
        raise error_for(
            ErrorCode.SCALAR_NOT_REPRESENTABLE,
            f"{name}={value!r} is complex but D is {datatype.name}; use a complex D or a "
            "real scalar",
        )
    if is_complex and not datatype.is_complex:
        value = complex(value).real
    dtype = datatype.numpy_dtype
    with np.errstate(over="ignore", invalid="ignore"):
        try:
            out = np.array(value).astype(dtype)[()]
        except OverflowError as exc:
            raise error_for(
                ErrorCode.SCALAR_NOT_REPRESENTABLE,
                f"{name}={value!r} does not fit in {datatype.name}",
            ) from exc
    if _finite(value) and not np.all(np.isfinite(np.asarray(out))):
        raise error_for(
            ErrorCode.SCALAR_NOT_REPRESENTABLE,
            f"{name}={value!r} overflows D's datatype {datatype.name}; scale the data instead",
        )
    return out


@dataclass
class BoundProduct:
    """The operands of one execution, bound and checked, ready for a backend.

    ``c`` is ``None`` when C must not be read (beta == 0); ``alpha_zero`` is true when A and B
    must not be read (alpha == 0, or an empty sum: SPEC section 1), and D is then
    ``op_D(beta op_C(C))``. Views are over merged modes in the order of the spec's ``modes`` of
    each operand.
    """

    alpha: Any
    beta: Any
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray | None
    d: np.ndarray
    bytes_copied: int = 0
    alpha_zero: bool = False

    def copy_input(self, name: str) -> None:
        """Replace input ``name`` (``'a'``, ``'b'`` or ``'c'``) by a private copy.

        The one way inputs are detached from memory that an output overwrites; the copy is
        counted in ``bytes_copied``.
        """
        x: np.ndarray = getattr(self, name)
        setattr(self, name, x.copy())
        self.bytes_copied += x.nbytes


def _bind(data: Any, spec: OperandSpec, *, writable: bool = False) -> np.ndarray:
    return bind_array(
        data, spec.datatype, spec.extents, spec.strides, spec.modes, spec.role,
        writable=writable,
    )


class Binder:
    """Binding for one plan, with the common case precomputed (the hot path of execute).

    An ndarray whose dtype, shape and strides are exactly the descriptor's (and whose labels do
    not repeat) is its own view, and its footprint is inside its allocation by construction, so
    it is used as it is; anything else takes the general path of :func:`bind_array`.
    """

    def __init__(self, spec: ContractionSpec) -> None:
        self.spec = spec
        self._fast = {op.role: self._signature(op) for op in spec.operands}
        self._empty_sum = spec.empty_sum
        self._d_type = spec.d.datatype
        #: (type, value) of recent alphas and betas -> the value in D's datatype.
        self._scalars: dict[tuple[type, Any], Any] = {}

    def scalar(self, value: Any, name: str) -> Any:
        """``value`` converted to D's datatype (:func:`convert_scalar`), remembered."""
        key = (type(value), value)
        try:
            return self._scalars[key]
        except KeyError:
            remember = True
        except (TypeError, ValueError):  # unhashable (a 0-d array, a generic timedelta64)
            remember = False
        out = convert_scalar(value, self._d_type, name)
        # Not remembered: NaN (never equal to itself) and zeros (0.0 and -0.0 are one key).
        if remember and out == out and out != 0:
            if len(self._scalars) >= 16:
                self._scalars.clear()
            self._scalars[key] = out
        return out

    @staticmethod
    def _signature(op: OperandSpec) -> tuple[Any, tuple[int, ...], tuple[int, ...]] | None:
        if len(op.modes.labels) != len(op.labels):
            return None
        item = op.datatype.itemsize
        return op.datatype.numpy_dtype, op.extents, tuple(s * item for s in op.strides)

    def view(self, data: Any, spec: OperandSpec, writable: bool = False) -> np.ndarray:
        """Bind one operand (fast path first)."""
        fast = self._fast[spec.role]
        if fast is not None and type(data) is np.ndarray:
            dtype, shape, strides = fast
            if data.shape == shape and data.strides == strides and data.dtype == dtype:
                if writable and not data.flags.writeable:
                    raise error_for(
                        ErrorCode.READ_ONLY,
                        f"{spec.role} is read-only; pass a writable array as the output",
                    )
                # An array that owns its memory holds its own elements; any other view (a
                # slice, or an as_strided view that may reach past its base) is checked
                # against the allocation that owns it.
                if (data.base is not None or not data.flags.owndata) and (
                    spec.footprint is not None
                ):
                    check_inside(data, data, spec.footprint, spec.datatype.itemsize, spec.role,
                                 lambda: f"shape {shape} with byte strides {strides}")
                return data
        return _bind(data, spec, writable=writable)

    def bind(self, alpha: Any, a: Any, b: Any, beta: Any, c: Any, d: Any) -> BoundProduct:
        """Bind and check every operand of one execution; nothing is written here.

        Order: A, B, C, D binding (19, 20, 22), then alpha and beta (21), then C missing (12).
        Inputs that share memory with D are copied (C with D's exact layout is left in place).
        """
        spec = self.spec
        va, vb = self.view(a, spec.a), self.view(b, spec.b)
        vc = None if c is None else self.view(c, spec.c)
        vd = self.view(d, spec.d, writable=True)
        al = self.scalar(alpha, "alpha")
        be = self.scalar(beta, "beta")
        alpha_zero = self._empty_sum or al == 0
        if self._empty_sum:  # the alpha term is an empty sum, +0 whatever alpha is
            al = spec.d.datatype.numpy_dtype.type(0)
        if be == 0:
            vc = None
        elif vc is None:
            raise error_for(
                ErrorCode.C_MISSING,
                "beta is not zero but C is None; pass C or set beta to 0",
            )
        bound = BoundProduct(al, be, va, vb, vc, vd, alpha_zero=bool(alpha_zero))
        if vd.size:
            if not alpha_zero and np.may_share_memory(va, vd):
                bound.copy_input("a")
            if not alpha_zero and np.may_share_memory(vb, vd):
                bound.copy_input("b")
            # C with D's exact layout is read element by element before it is overwritten.
            if vc is not None and np.may_share_memory(vc, vd) and not same_layout(vc, vd):
                bound.copy_input("c")
            if vd.base is not None:  # D may be a mapping of a file that an input maps too
                _copy_mapped_inputs(bound)
        return bound


def _copy_mapped_inputs(bound: BoundProduct) -> None:
    """Copy the inputs that map bytes of the file D maps (two memmaps of one file).

    Their addresses differ, so :func:`np.may_share_memory` does not see the overlap.
    """
    target = file_span(bound.d)
    if target is None:
        return
    for name in ("c",) if bound.alpha_zero else ("a", "b", "c"):
        x = getattr(bound, name)
        if x is None or x.size == 0 or x.base is None:
            continue
        span = file_span(x)
        if span is not None and span[0] == target[0] and span[1] < target[2] and (
                target[1] < span[2]):
            bound.copy_input(name)


def bind_batch(binder: Binder, alpha: Any, a: Sequence[Any], b: Sequence[Any], beta: Any,
               c: Sequence[Any], d: Sequence[Any]) -> list[BoundProduct]:
    """Bind every item of a batch, then isolate the items from each other.

    Inputs that another item's D overwrites are copied (each item sees its inputs as they were
    before the batch); D's that overlap each other are error 8. Nothing is written.

    Raises
    ------
    TappError
        As :meth:`Binder.bind` for any item; code 8 when two D's overlap.
    """
    bounds = [binder.bind(alpha, ai, bi, beta, ci, di)
              for ai, bi, ci, di in zip(a, b, c, d, strict=True)]
    # D's sorted by first byte: an input can only overlap the D's that start before it ends.
    ds = sorted((byte_span(x.d), i) for i, x in enumerate(bounds) if x.d.size)
    starts = [s[0][0] for s in ds]
    for (span, i), (nxt, j) in itertools.pairwise(ds):
        if nxt[0] < span[1] and np.may_share_memory(bounds[i].d, bounds[j].d):
            raise error_for(
                ErrorCode.D_ALIASING,
                f"D of batch items {i} and {j} overlap; give every item its own output",
            )
    for i, item in enumerate(bounds):
        for name in ("c",) if item.alpha_zero else ("a", "b", "c"):
            x = getattr(item, name)
            if x is None or x.size == 0:
                continue
            low, high = byte_span(x)
            k = bisect.bisect_left(starts, high)
            if any(j != i and dspan[1] > low and np.may_share_memory(x, bounds[j].d)
                   for dspan, j in ds[:k]):
                item.copy_input(name)
    return bounds


def same_layout(x: np.ndarray, d: np.ndarray) -> bool:
    """Whether two views address the same elements in the same order with one dtype."""
    return (
        x.__array_interface__["data"][0] == d.__array_interface__["data"][0]
        and x.strides == d.strides
        and x.dtype == d.dtype
        and x.shape == d.shape
    )
