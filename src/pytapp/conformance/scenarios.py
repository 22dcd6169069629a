"""Misuse scenarios: how the runner turns a valid product into each error of SPEC section 5.

A :class:`Scenario` changes a :class:`Call` (the descriptors, labels, options and data about to
be passed) before the plan is created, after it is created, or replaces the execution. Cases
name their scenario (``Instance.scenario``); :data:`SCENARIOS` maps every name to its steps.

Examples
--------
>>> SCENARIOS["bad_prec"].name
'bad_prec'
>>> sorted(SCENARIOS)[:3]
['attr_key', 'bad_datatype', 'bad_executor']
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytapp.attributes import Attr
from pytapp.conformance.instance import Instance, OperandData, Operands
from pytapp.executor import Executor
from pytapp.handle import Handle
from pytapp.product import TensorProduct
from pytapp.tensor import TensorInfo

__all__ = ["SCENARIOS", "Call", "Scenario"]


@dataclass
class Call:
    """One product call being prepared, by role (``'A'`` .. ``'D'``): what a scenario changes."""

    inst: Instance
    item: Operands
    backend: str
    infos: dict[str, TensorInfo | None]
    labels: dict[str, tuple[Hashable, ...]]
    options: dict[str, Any]
    data: dict[str, Any]
    alpha: Any
    beta: Any
    executor: Any = None
    #: Set by the runner once the plan exists (for the steps after creation).
    plan: TensorProduct | None = None

    def the_plan(self) -> TensorProduct:
        """Return the plan (only for steps that run after it was created)."""
        if self.plan is None:
            raise RuntimeError("this scenario step needs the plan, which is not created yet")
        return self.plan

    def info(self, role: str) -> TensorInfo:
        """Return the descriptor of ``role``, which must be present."""
        found = self.infos[role]
        if found is None:
            raise RuntimeError(f"this scenario needs a {role} descriptor")
        return found


def _nothing(call: Call) -> None:
    """No change."""


@dataclass(frozen=True)
class Scenario:
    """A misuse: steps applied to a :class:`Call` around plan creation.

    ``run`` replaces the execution when the misuse is in the execute call itself.
    """

    name: str
    before_plan: Callable[[Call], None] = _nothing
    after_plan: Callable[[Call], None] = _nothing
    run: Callable[[Call], None] | None = field(default=None)


# ----------------------------------------------------------------- before the plan exists
def _unknown_backend(call: Call) -> None:
    Handle("no-such-backend")


def _out_of_bounds(role: str, side: str) -> Callable[[Call], None]:
    def step(call: Call) -> None:
        call.infos[role] = _oob_info(call.item.need(role), side)

    return step


def _oob_info(data: OperandData, side: str) -> TensorInfo:
    """Return the operand's descriptor with a stride that leaves the allocation.

    Needs a mode of extent > 1 (the case draws extents of at least 2).
    """
    info = TensorInfo.from_array(np.asarray(data.view))
    m = max(range(info.nmodes), key=lambda i: info.extents[i])
    strides = list(info.strides)
    strides[m] = (data.parent.size + 1) * (1 if side == "past_end" else -1)
    return info.with_strides(strides)


def _label_not_in_inputs(call: Call) -> None:
    d = call.labels["D"]
    call.labels["D"] = call.labels["C"] = (*d[:-1], "__nowhere__") if d else d
    call.options["allow_broadcast"] = False


def _repeated_d_extent(call: Call) -> None:
    """Return a broadcast label twice in D, with two extents."""
    d_info = call.info("D")
    call.infos["D"] = call.infos["C"] = TensorInfo(d_info.datatype, (*d_info.extents, 2, 3))
    call.labels["D"] = call.labels["C"] = (*call.labels["D"], "__bcast__", "__bcast__")
    call.options["allow_broadcast"] = True


def _label_count(call: Call) -> None:
    call.labels["A"] = (*call.labels["A"], "extra")


def _negative_extent(call: Call) -> None:
    call.infos["A"] = TensorInfo(call.info("A").datatype, (-1,))


def _bad_datatype(call: Call) -> None:
    call.infos["A"] = TensorInfo(99, call.info("A").extents)


def _bad_prec(call: Call) -> None:
    call.options["prec"] = 99


def _bad_op(call: Call) -> None:
    call.options["op_b"] = 7


# ----------------------------------------------------------------- after the plan exists
def _c_missing(call: Call) -> None:
    call.data["C"], call.beta = None, 1.0


def _dtype_mismatch(call: Call) -> None:
    a = np.asarray(call.data["A"])
    swap = {"float32": np.float64, "complex64": np.complex128, "complex128": np.complex64}
    call.data["A"] = a.astype(swap.get(a.dtype.name, np.float32))


def _bad_scalar(call: Call) -> None:
    """Return a scalar D's datatype cannot hold: too large, complex for real D, or not a number."""
    d_type = call.inst.datatypes["D"]
    call.alpha = 1e300 if d_type.is_complex else complex(1, 2)
    if d_type.itemsize >= 16:
        call.alpha = "one"


def _readonly_d(call: Call) -> None:
    view = np.asarray(call.data["D"]).view()
    view.flags.writeable = False
    call.data["D"] = view


def _destroyed(call: Call) -> None:
    call.the_plan().destroy()


def _foreign_executor(call: Call) -> None:
    call.executor = Executor(Handle(call.backend))


def _bad_executor(call: Call) -> None:
    call.executor = "cpu"


def _attr_key(call: Call) -> None:
    call.the_plan().get_attr(Attr.NUM_THREADS)


def _batch_length(call: Call) -> None:
    d = call.data
    call.the_plan().execute_batched(call.alpha, [d["A"]] * 2, [d["B"]], call.beta, None,
                                    [d["D"]])


def _registry() -> dict[str, Scenario]:
    scenarios = [
        Scenario("unknown_backend", before_plan=_unknown_backend),
        Scenario("label_not_in_inputs", before_plan=_label_not_in_inputs),
        Scenario("repeated_d_extent", before_plan=_repeated_d_extent),
        Scenario("label_count", before_plan=_label_count),
        Scenario("negative_extent", before_plan=_negative_extent),
        Scenario("bad_datatype", before_plan=_bad_datatype),
        Scenario("bad_prec", before_plan=_bad_prec),
        Scenario("bad_op", before_plan=_bad_op),
        Scenario("c_missing", after_plan=_c_missing),
        Scenario("dtype_mismatch", after_plan=_dtype_mismatch),
        Scenario("bad_scalar", after_plan=_bad_scalar),
        Scenario("readonly_d", after_plan=_readonly_d),
        Scenario("destroyed", after_plan=_destroyed),
        Scenario("foreign_executor", after_plan=_foreign_executor),
        Scenario("bad_executor", after_plan=_bad_executor),
        Scenario("attr_key", after_plan=_attr_key),
        Scenario("batch_length", run=_batch_length),
    ]
    scenarios += [Scenario(f"oob_{role}_{side}", before_plan=_out_of_bounds(role, side))
                  for role in "ABCD" for side in ("past_end", "before_start")]
    return {s.name: s for s in scenarios}


#: Every misuse scenario by name.
SCENARIOS: dict[str, Scenario] = _registry()
