"""A conformance instance: one product with its data, or one misuse with its expected error.

Every array an instance hands to a backend is a view into a larger *parent* allocation that the
instance owns, so the runner can check afterwards that nothing outside the views changed.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytapp.analysis.letters import einsum_text
from pytapp.datatypes import Datatype, ElementOp
from pytapp.precision import Prectype

__all__ = ["Instance", "OperandData", "Operands"]


@dataclass
class OperandData:
    """One operand: the view handed to the backend and the allocation it lives in."""

    view: Any
    parent: np.ndarray

    @property
    def offset_bytes(self) -> int:
        """Byte offset of the view's element [0, ..., 0] inside its parent."""
        start = int(np.asarray(self.view).__array_interface__["data"][0])
        return start - int(self.parent.__array_interface__["data"][0])


@dataclass
class Operands:
    """The operands of one product: A, B and D always, C when the product is given one."""

    a: OperandData
    b: OperandData
    c: OperandData | None
    d: OperandData

    def get(self, role: str) -> OperandData | None:
        """Return the operand of ``role`` (``'A'``, ``'B'``, ``'C'`` or ``'D'``)."""
        data: OperandData | None = getattr(self, role.lower())
        return data

    def need(self, role: str) -> OperandData:
        """Return the operand of ``role``, which must be present.

        Raises
        ------
        ValueError
            When ``role`` is C and the product has none.
        """
        data = self.get(role)
        if data is None:
            raise ValueError(f"this instance has no {role}")
        return data

    def set(self, role: str, data: OperandData | None) -> None:
        """Replace the operand of ``role`` (only C may become ``None``)."""
        if data is None and role != "C":
            raise ValueError(f"{role} cannot be absent")
        setattr(self, role.lower(), data)

    def view(self, role: str) -> Any:
        """Return the view handed to the backend for ``role`` (``None`` for an absent C)."""
        data = self.get(role)
        return None if data is None else data.view

    def roles(self) -> dict[str, OperandData | None]:
        """Every role with its operand, in the order A, B, C, D."""
        return {r: self.get(r) for r in "ABCD"}


@dataclass
class Instance:
    """Everything needed to run one product and judge the result.

    ``items`` holds one :class:`Operands` per batch item (one item unless ``batched``).
    ``expected_code`` is the TAPP error the run must raise (``None``: it must succeed), and
    ``scenario`` names a misuse the runner performs (see :mod:`pytapp.conformance.runner`).
    """

    case: int
    seed: int
    labels: dict[str, tuple[Hashable, ...]]
    datatypes: dict[str, Datatype]
    items: list[Operands]
    ops: dict[str, ElementOp] = field(default_factory=dict)
    prec: Prectype = Prectype.DEFAULT
    alpha: complex | float = 1.0
    beta: complex | float = 0.0
    allow_broadcast: bool = False
    batched: bool = False
    expected_code: int | None = None
    scenario: str | None = None
    c_is_d: bool = False
    note: str = ""

    def describe(self) -> str:
        """One line: labels, datatypes, precision, scalars."""
        dts = "/".join(self.datatypes[r].name for r in "ABCD")
        ops = "".join("c" if self.ops.get(r) is ElementOp.CONJUGATE else "-" for r in "ABCD")
        text = (
            f"{einsum_text((self.labels['A'], self.labels['B']), self.labels['D'])} "
            f"{dts} ops={ops} prec={self.prec.name} alpha={self.alpha} beta={self.beta}"
        )
        if self.expected_code is not None:
            text += f" expect error {self.expected_code}"
        if self.scenario:
            text += f" ({self.scenario})"
        return text + (f" [{self.note}]" if self.note else "")
