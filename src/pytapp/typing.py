"""Types of the public signatures: what each argument accepts, in one place.

These are for annotations (and readers); values are validated where they are used, with
TAPP error codes, so a wrong type fails with a message that says what to change.

Examples
--------
>>> from pytapp.typing import BackendName, Labels
>>> labels: Labels = ("i", ("site", 3), "k")
>>> name: BackendName = "auto"
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Literal, TypeAlias

import numpy as np

from pytapp.datatypes import ElementOp
from pytapp.precision import Prectype

__all__ = ["ArrayLike", "BackendName", "ElementOpLike", "Labels", "PrectypeLike", "Scalar"]

#: Labels of one operand: a string (one label per character) or a sequence of hashables.
Labels: TypeAlias = str | Sequence[Hashable]
#: An element operation: the enum, or its C number (0 identity, 1 conjugate).
ElementOpLike: TypeAlias = ElementOp | int
#: A precision: the enum, or its C number.
PrectypeLike: TypeAlias = Prectype | int
#: Registered backend names; ``'clib:PATH'`` and names registered at run time are strings too.
BackendName: TypeAlias = Literal["auto", "blas", "reference", "tblis", "torch", "clib"] | str
#: alpha and beta: Python or NumPy numbers, or 0-d arrays (complex for complex D).
Scalar: TypeAlias = complex | np.generic | np.ndarray[Any, Any]
#: Operand data: NumPy arrays, buffer-protocol objects, DLPack producers (CPU torch tensors).
ArrayLike: TypeAlias = Any
