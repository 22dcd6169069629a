"""pytapp: the Tensor Algebra Processing Primitives (TAPP) for Python.

``D := op_D(alpha op_A(A) op_B(B) + beta op_C(C))`` over labelled, strided tensors, through
reusable plans and interchangeable backends.

Examples
--------
>>> import numpy as np, pytapp
>>> a, b = np.ones((2, 3)), np.ones((3, 4))
>>> pytapp.contract("ik,kj->ij", a, b, alpha=0.5).tolist()[0]
[1.5, 1.5, 1.5, 1.5]
"""

from __future__ import annotations

import logging

from pytapp.attributes import BACKEND_KEYS, Attr
from pytapp.backends import available as available_backends
from pytapp.contraction import clear_plan_cache, contract, parse_expression
from pytapp.datatypes import Datatype, ElementOp
from pytapp.errors import (
    AliasingError,
    AttributeKeyError,
    BatchLengthError,
    DestroyedError,
    ElementOpError,
    ErrorCode,
    ExecutorError,
    ExtentMismatchError,
    HandleMismatchError,
    InvalidDescriptorError,
    LabelError,
    MissingOperandError,
    OperandMismatchError,
    OutOfBoundsError,
    PrecisionError,
    ReadOnlyError,
    ScalarError,
    StructureMismatchError,
    TappError,
    UnsupportedError,
    VerificationError,
    check_success,
    explain_error,
)
from pytapp.executor import Executor
from pytapp.handle import Handle
from pytapp.numpy_api import einsum, einsum_expression, einsum_path, tensordot, transpose
from pytapp.precision import Prectype
from pytapp.product import TensorProduct
from pytapp.status import Completion, Status
from pytapp.tensor import TensorInfo

__version__ = "0.1.0"

logging.getLogger("pytapp").addHandler(logging.NullHandler())

__all__ = [
    "BACKEND_KEYS",
    "AliasingError",
    "Attr",
    "AttributeKeyError",
    "BatchLengthError",
    "Completion",
    "Datatype",
    "DestroyedError",
    "ElementOp",
    "ElementOpError",
    "ErrorCode",
    "Executor",
    "ExecutorError",
    "ExtentMismatchError",
    "Handle",
    "HandleMismatchError",
    "InvalidDescriptorError",
    "LabelError",
    "MissingOperandError",
    "OperandMismatchError",
    "OutOfBoundsError",
    "PrecisionError",
    "Prectype",
    "ReadOnlyError",
    "ScalarError",
    "Status",
    "StructureMismatchError",
    "TappError",
    "TensorInfo",
    "TensorProduct",
    "UnsupportedError",
    "VerificationError",
    "__version__",
    "available_backends",
    "check_success",
    "clear_plan_cache",
    "contract",
    "einsum",
    "einsum_expression",
    "einsum_path",
    "explain_error",
    "parse_expression",
    "tensordot",
    "transpose",
]
