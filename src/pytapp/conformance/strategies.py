"""Hypothesis strategies for TAPP products, importable by any TAPP implementer.

``products()`` draws valid products covering every label class (with repeats), extents
including 0 and 1, strides positive, negative, zero, padded and permuted, sub-tensor views,
every datatype and precision, every op, alpha and beta including 0, NaN and Inf, and C absent.
Inputs carry NaN canaries in their allocations outside the addressed elements, so a backend
that reads outside an operand's footprint produces NaN where the oracle does not.
``misuses()`` draws products turned invalid in one of the ways SPEC section 5 numbers.

Examples
--------
>>> from hypothesis import given, settings
>>> from pytapp.conformance import run_instance
>>> @settings(max_examples=5, database=None)
... @given(products())
... def check(inst):
...     assert run_instance(inst, "reference").verdict == "pass"
>>> check()
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import strategies as st

from pytapp.conformance.cases import CASES
from pytapp.conformance.generators import Options, make_instance, make_operand
from pytapp.conformance.instance import Instance, OperandData
from pytapp.datatypes import Datatype
from pytapp.precision import Prectype

__all__ = ["LAYOUTS", "SPECIAL_SCALARS", "misuses", "products"]

LAYOUTS = ("row", "perm", "sub", "sub_fewer", "neg", "mixed", "sub_neg", "sub_mixed", "zero")
SPECIAL_SCALARS = (0.0, 1.0, -1.0, float("nan"), float("inf"), -float("inf"))
_CLASSES = ("H", "P", "FA", "FB", "IA", "IB", "IC")
#: Error cases whose generators cover SPEC codes: extents, C vs D, aliasing, misuse, bounds.
_ERROR_CASES = (26, 27, 28, 38, 39)


def _addressed(data: OperandData) -> np.ndarray:
    """Boolean mask over the parent: the elements the view addresses."""
    view = np.asarray(data.view)
    mask = np.zeros(data.parent.shape, dtype=bool)
    if view.size == 0:
        return mask
    item = view.dtype.itemsize
    flat = mask.reshape(-1)
    strides = tuple(s // item for s in view.strides)
    target = np.lib.stride_tricks.as_strided(flat[data.offset_bytes // item:], view.shape,
                                             strides)
    target[...] = True
    return mask


def _canaries(inst: Instance) -> None:
    """NaN in every input allocation outside the addressed elements."""
    d_parents = {id(it.d.parent) for it in inst.items}
    for item in inst.items:
        for role in "ABC":
            data = item.get(role)
            if data is None or id(data.parent) in d_parents or data.parent.size == 0:
                continue
            outside = ~_addressed(data)
            if outside.any():
                data.parent[outside] = np.nan


@st.composite
def products(draw: st.DrawFn, datatypes: tuple[Datatype, ...] = tuple(Datatype),
             broadcast: bool = True, specials: bool = True) -> Instance:
    """Return a valid product with data, canaries and the expected behaviour (success)."""
    counts = {c: draw(st.integers(0, 2)) for c in _CLASSES}
    if not broadcast:
        counts["IC"] = 0
    mixed = draw(st.booleans())
    dts = tuple(draw(st.lists(st.sampled_from(datatypes), min_size=1, max_size=4,
                              unique=True)))
    layouts = tuple(draw(st.lists(st.sampled_from(LAYOUTS), min_size=1, max_size=3,
                                  unique=True)))
    opts = Options(
        counts={c: (n, n) for c, n in counts.items()},
        extent_range=(draw(st.integers(0, 2)), draw(st.integers(2, 4))),
        layouts=layouts,
        datatypes=dts,
        mixed_datatypes=mixed,
        random_ops=True,
        prec=draw(st.sampled_from(tuple(Prectype))),
        repeats=tuple(r for r in "ABD" if draw(st.booleans())),
        int_labels=draw(st.booleans()),
        beta_zero_prob=0.5,
    )
    seed = draw(st.integers(0, 2**32 - 1))
    inst = make_instance(0, seed, opts)
    inst = replace(inst, allow_broadcast=True, case=0)
    if specials:
        d_complex = inst.datatypes["D"].is_complex
        scalars = st.sampled_from(SPECIAL_SCALARS) if not d_complex else st.sampled_from(
            (*SPECIAL_SCALARS, 1j, complex(float("nan"), 1.0)))
        if draw(st.integers(0, 4)) == 0:
            inst = replace(inst, alpha=draw(scalars))
        if draw(st.integers(0, 4)) == 0:
            beta = draw(scalars)
            item = inst.items[0]
            if beta != 0 and item.c is None:
                ext = np.asarray(item.d.view).shape
                rng = np.random.default_rng(seed)
                item.c = make_operand(rng, ext, inst.datatypes["C"], "row")
            inst = replace(inst, beta=beta)
    _canaries(inst)
    return inst


@st.composite
def misuses(draw: st.DrawFn) -> Instance:
    """Return an invalid product or call: the instance says which error code it must raise."""
    number = draw(st.sampled_from(_ERROR_CASES))
    return CASES[number].make(draw(st.integers(0, 10_000)))
