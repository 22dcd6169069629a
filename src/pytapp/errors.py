"""Error codes, their texts and the :class:`TappError` hierarchy.

This module is the single source of truth for TAPP error numbers (SPEC section 5). Codes 1-14
keep the meanings of the C reference implementation; 33 and 137 keep its numbers.

Examples
--------
>>> from pytapp.errors import ErrorCode, explain_error, check_success
>>> explain_error(ErrorCode.C_MISSING)
'C is missing while beta is not zero'
>>> check_success(0)
True
"""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "AliasingError",
    "AttributeKeyError",
    "BatchLengthError",
    "DestroyedError",
    "ElementOpError",
    "ErrorCode",
    "ExecutorError",
    "ExtentMismatchError",
    "HandleMismatchError",
    "InvalidDescriptorError",
    "LabelError",
    "MissingOperandError",
    "OperandMismatchError",
    "OutOfBoundsError",
    "PrecisionError",
    "ReadOnlyError",
    "ScalarError",
    "StructureMismatchError",
    "TappError",
    "UnsupportedError",
    "VerificationError",
    "check_success",
    "error_for",
    "explain_error",
]


class ErrorCode(IntEnum):
    """Numbered TAPP errors (C-compatible numbers)."""

    SUCCESS = 0
    EXTENT_MISMATCH_AB = 1
    EXTENT_MISMATCH_AD = 2
    EXTENT_MISMATCH_BD = 3
    LABEL_NOT_IN_INPUTS = 4
    C_D_NMODES = 5
    C_D_LABELS = 6
    C_D_EXTENTS = 7
    D_ALIASING = 8
    REPEATED_EXTENT_A = 9
    REPEATED_EXTENT_B = 10
    REPEATED_EXTENT_D = 11
    C_MISSING = 12
    NEGATIVE_NMODES = 13
    NEGATIVE_EXTENT = 14
    UNKNOWN_DATATYPE = 15
    UNKNOWN_PRECISION = 16
    UNKNOWN_ELEMENT_OP = 17
    UNSUPPORTED = 18
    OUT_OF_BOUNDS = 19
    OPERAND_MISMATCH = 20
    SCALAR_NOT_REPRESENTABLE = 21
    READ_ONLY = 22
    DESTROYED = 23
    HANDLE_MISMATCH = 24
    BATCH_LENGTH = 25
    ATTRIBUTE_KEY = 26
    INVALID_EXECUTOR = 33
    VERIFICATION_FAILED = 137


_TEXTS: dict[int, str] = {
    0: "success",
    1: "a label shared by A and B has different extents",
    2: "a label shared by A and D has different extents",
    3: "a label shared by B and D has different extents",
    4: "a label of D is in neither A nor B (and broadcasting is not enabled)",
    5: "C and D have different numbers of modes",
    6: "C and D have different labels at some position",
    7: "C and D have different extents at some position",
    8: "D aliases itself",
    9: "a label repeated in A has different extents",
    10: "a label repeated in B has different extents",
    11: "a label repeated in D has different extents",
    12: "C is missing while beta is not zero",
    13: "invalid number of modes (negative, or labels that do not match the modes)",
    14: "negative extent",
    15: "unknown datatype",
    16: "unknown precision, or a precision this backend cannot honour",
    17: "unknown element operation",
    18: "the chosen backend does not support this product",
    19: "an operand's layout reaches outside its memory",
    20: "an operand's dtype, shape or device does not match its tensor info",
    21: "alpha or beta cannot be represented in D's datatype",
    22: "D is read-only",
    23: "the object was destroyed",
    24: "objects from different handles were mixed",
    25: "batched operand lists differ in length",
    26: "attribute key not set or not valid for this object",
    33: "invalid executor",
    137: "verification against the reference failed",
}


def explain_error(code: int) -> str:
    """Return the plain-text explanation of a TAPP error code.

    Unlike the C reference, every integer has a text: unknown codes say so.

    Parameters
    ----------
    code
        Any integer, usually an :class:`ErrorCode`.

    Returns
    -------
    str
        The explanation, ``"unknown error code N"`` for numbers TAPP does not define.

    Examples
    --------
    >>> explain_error(8)
    'D aliases itself'
    >>> explain_error(999)
    'unknown error code 999'
    """
    try:
        number = int(code)
    except (TypeError, ValueError, OverflowError):
        return f"unknown error code {code!r}"
    return _TEXTS.get(number, f"unknown error code {number}")


def check_success(code: int) -> bool:
    """Return ``True`` when ``code`` means success (it is 0).

    Examples
    --------
    >>> check_success(ErrorCode.D_ALIASING)
    False
    """
    try:
        return int(code) == 0
    except (TypeError, ValueError, OverflowError):
        return False


class TappError(Exception):
    """Base of every pytapp error; ``.code`` is the TAPP error number.

    The string form is the message, which names the operand, label and what to change.

    Examples
    --------
    >>> err = error_for(ErrorCode.C_MISSING, "pass C or set beta to 0")
    >>> err.code, isinstance(err, ValueError)
    (12, True)
    """

    code: int = -1

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = int(code)
        self.message = message

    def __str__(self) -> str:
        text = self.message
        if self.args and self.args != (self.message,):
            # a library rewrote ``args`` to add context (opt_einsum does): show what it wrote
            text = str(self.args[0]) if len(self.args) == 1 else ", ".join(map(str, self.args))
        return f"[TAPP error {self.code}: {explain_error(self.code)}] {text}"

    @property
    def explanation(self) -> str:
        """The standard text of :attr:`code`."""
        return explain_error(self.code)


class LabelError(TappError, ValueError):
    """A label of D appears in no input (code 4)."""


class ExtentMismatchError(TappError, ValueError):
    """Modes that share a label have different extents (codes 1, 2, 3, 9, 10, 11)."""


class StructureMismatchError(TappError, ValueError):
    """C and D differ in modes, labels or extents (codes 5, 6, 7)."""


class AliasingError(TappError, ValueError):
    """Two index tuples of D address the same element (code 8)."""


class MissingOperandError(TappError, ValueError):
    """C is missing while beta is not zero (code 12)."""


class InvalidDescriptorError(TappError, ValueError):
    """A tensor descriptor is malformed (codes 13, 14, 15)."""


class PrecisionError(TappError, ValueError):
    """An unknown or unsupported precision (code 16)."""


class ElementOpError(TappError, ValueError):
    """An unknown element operation (code 17)."""


class UnsupportedError(TappError, NotImplementedError):
    """The chosen backend cannot run this product (code 18)."""


class OutOfBoundsError(TappError, ValueError):
    """An operand's layout reaches outside the memory its object owns (code 19)."""


class OperandMismatchError(TappError, TypeError):
    """Data does not match its tensor info: dtype, shape or device (code 20)."""


class ScalarError(TappError, TypeError):
    """alpha or beta cannot be represented in D's datatype (code 21)."""


class ReadOnlyError(TappError, ValueError):
    """D is read-only (code 22)."""


class DestroyedError(TappError, RuntimeError):
    """The object was used after ``destroy()`` (code 23)."""


class HandleMismatchError(TappError, ValueError):
    """Objects created by different handles were mixed (code 24)."""


class BatchLengthError(TappError, ValueError):
    """Batched operand lists differ in length (code 25)."""


class AttributeKeyError(TappError, KeyError):
    """An attribute key is not set, or not valid for this object (code 26)."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return TappError.__str__(self)


class ExecutorError(TappError, ValueError):
    """An invalid executor (code 33)."""


class VerificationError(TappError, ArithmeticError):
    """The product disagrees with the reference beyond tolerance (code 137)."""


_CLASSES: dict[int, type[TappError]] = {
    1: ExtentMismatchError,
    2: ExtentMismatchError,
    3: ExtentMismatchError,
    4: LabelError,
    5: StructureMismatchError,
    6: StructureMismatchError,
    7: StructureMismatchError,
    8: AliasingError,
    9: ExtentMismatchError,
    10: ExtentMismatchError,
    11: ExtentMismatchError,
    12: MissingOperandError,
    13: InvalidDescriptorError,
    14: InvalidDescriptorError,
    15: InvalidDescriptorError,
    16: PrecisionError,
    17: ElementOpError,
    18: UnsupportedError,
    19: OutOfBoundsError,
    20: OperandMismatchError,
    21: ScalarError,
    22: ReadOnlyError,
    23: DestroyedError,
    24: HandleMismatchError,
    25: BatchLengthError,
    26: AttributeKeyError,
    33: ExecutorError,
    137: VerificationError,
}


_ALSO: dict[tuple[type[TappError], type[Exception]], type[TappError]] = {}


def _also(cls: type[TappError], builtin: type[Exception]) -> type[TappError]:
    """Return the subclass of ``cls`` that is also a ``builtin`` (created once, kept here)."""
    if issubclass(cls, builtin):
        return cls
    found = _ALSO.get((cls, builtin))
    if found is None:
        name = f"{cls.__name__}As{builtin.__name__}"
        found = type(name, (cls, builtin), {"__doc__": f"{cls.__doc__} Also a {builtin.__name__}.",
                                            "__module__": __name__})
        globals()[name] = _ALSO[(cls, builtin)] = found  # importable, so it pickles
    return found


def error_for(code: int, message: str, *, also: type[Exception] | None = None) -> TappError:
    """Build the :class:`TappError` subclass that matches ``code``.

    Unknown codes (for example from a C library) give a plain :class:`TappError`. ``also``
    adds a built-in exception class, for a call where NumPy raises another built-in than the
    code's class subclasses (a malformed einsum subscript of the wrong type is code 13 and a
    ``TypeError``), so that code catching NumPy's exceptions keeps working.

    Examples
    --------
    >>> type(error_for(19, "x")).__name__
    'OutOfBoundsError'
    >>> isinstance(error_for(13, "x", also=TypeError), TypeError)
    True
    """
    cls = _CLASSES.get(int(code), TappError)
    if also is not None:
        cls = _also(cls, also)
    return cls(message, int(code))
