"""The conformance cases (SPEC section 6): the paper's appendix list (1-28) and more (29-39).

Each case is a seeded generator: ``CASES[n].make(seed)`` gives one random :class:`Instance`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from pytapp.conformance.generators import Options, make_instance, make_operand, random_values
from pytapp.conformance.instance import Instance, OperandData, Operands
from pytapp.datatypes import Datatype, ElementOp
from pytapp.errors import ErrorCode
from pytapp.precision import Prectype

__all__ = ["CASES", "Case"]

F32, F64, C32, C64, F16, BF16 = (
    Datatype.F32, Datatype.F64, Datatype.C32, Datatype.C64, Datatype.F16, Datatype.BF16,
)
REAL_AND_COMPLEX = (F32, F64, C32, C64)
SUB = ("sub",)
SUB_FEWER = ("sub_fewer",)


@dataclass(frozen=True)
class Case:
    """One named conformance case."""

    number: int
    name: str
    description: str
    make: Callable[[int], Instance]


def _counts(**kw: tuple[int, int]) -> dict[str, tuple[int, int]]:
    base = {c: (0, 0) for c in ("H", "P", "FA", "FB", "IA", "IB", "IC")}
    base.update(kw)
    return base


BASIC = _counts(P=(1, 3), FA=(1, 2), FB=(1, 2))
WIDE = _counts(H=(0, 2), P=(0, 3), FA=(0, 2), FB=(0, 2))


def _simple(number: int, **kw: Any) -> Callable[[int], Instance]:
    def make(seed: int) -> Instance:
        opts = Options(**{"counts": BASIC, "datatypes": REAL_AND_COMPLEX, **kw})
        return make_instance(number, seed, opts)

    return make


def _retag(inst: Instance, **changes: Any) -> Instance:
    return replace(inst, **changes)


# ----------------------------------------------------------------------- error cases
def _extent_error(seed: int) -> Instance:
    """Codes 1, 2, 3, 9, 10: one mode whose extent disagrees with its label's other modes."""
    rng = np.random.default_rng([26, seed])
    code = int(rng.choice([1, 2, 3, 9, 10]))
    counts = _counts(H=(0, 1), P=(1, 2), FA=(1, 2), FB=(1, 2))
    inst = make_instance(26, seed, Options(counts=counts, datatypes=(F64,),
                                           beta_zero_prob=0.0, extent_range=(2, 4)))
    item = inst.items[0]
    labels = dict(inst.labels)
    la, lb, ld = labels["A"], labels["B"], labels["D"]
    if code in (9, 10):  # one more mode with a repeated label (B: one that A lacks)
        role = "A" if code == 9 else "B"
        label = la[0] if code == 9 else next(x for x in lb if x not in la)
        labels[role] = (*labels[role], label)
        pos = len(labels[role]) - 1
        data = item.need(role)
        shape = [*np.asarray(data.view).shape, 0]
        shape[pos] = shape[labels[role].index(label)] + 1
    else:
        if code == 1:  # shared by A and B, changed in B
            label, role = next(x for x in lb if x in la), "B"
        elif code == 2:  # in A and D only, changed in D
            label, role = next(x for x in ld if x in la and x not in lb), "D"
        else:  # in B and D only, changed in D
            label, role = next(x for x in ld if x in lb and x not in la), "D"
        pos = labels[role].index(label)
        data = item.need(role)
        shape = list(np.asarray(data.view).shape)
        shape[pos] += 1
    item.set(role, make_operand(rng, shape, inst.datatypes[role], "row"))
    if role == "D":
        item.c = make_operand(rng, shape, inst.datatypes["C"], "row")
    return _retag(inst, labels=labels, expected_code=code)


def _c_d_error(seed: int) -> Instance:
    """Codes 5, 6, 7: C's labels or extents differ from D's."""
    rng = np.random.default_rng([27, seed])
    code = int(rng.choice([5, 6, 7]))
    inst = make_instance(27, seed, Options(counts=_counts(P=(1, 2), FA=(1, 2), FB=(1, 2)),
                                           datatypes=(F64,), beta_zero_prob=0.0,
                                           extent_range=(2, 4)))
    item = inst.items[0]
    ld = list(inst.labels["D"])
    d_shape = list(np.asarray(item.d.view).shape)
    labels_c, shape_c = list(ld), list(d_shape)
    if code == 5:
        labels_c.append("Z" if isinstance(ld[0], str) else 99999)
        shape_c.append(2)
    elif code == 6:
        if len(ld) >= 2:
            labels_c[0], labels_c[1] = labels_c[1], labels_c[0]
            shape_c[0], shape_c[1] = shape_c[1], shape_c[0]
        else:
            labels_c[0] = "Z" if isinstance(ld[0], str) else 99999
    else:
        shape_c[int(rng.integers(0, len(shape_c)))] += 1
    item.c = make_operand(rng, shape_c, inst.datatypes["C"], "row")
    labels = dict(inst.labels)
    labels["C"] = tuple(labels_c)
    return _retag(inst, labels=labels, expected_code=code)


def _alias_error(seed: int) -> Instance:
    """Code 8: D with a zero stride or overlapping strides."""
    rng = np.random.default_rng([28, seed])
    inst = make_instance(28, seed, Options(counts=_counts(P=(1, 2), FA=(1, 2), FB=(1, 2)),
                                           datatypes=(F64,), extent_range=(2, 4),
                                           beta_zero_prob=1.0, c_none_when_beta_zero=True))
    item = inst.items[0]
    d = item.d
    view = np.asarray(d.view)
    strides = list(view.strides)
    if len(strides) >= 2 and rng.random() < 0.5:  # two modes with the same stride
        i, j = (int(x) for x in rng.choice(len(strides), size=2, replace=False))
        strides[i] = strides[j]
    else:
        strides[int(rng.integers(0, len(strides)))] = 0
    aliased = np.lib.stride_tricks.as_strided(view, view.shape, strides)
    item.d = replace(d, view=aliased)
    item.c = None
    return _retag(inst, expected_code=int(ErrorCode.D_ALIASING))


_SCENARIOS = {
    4: "label_not_in_inputs", 11: "repeated_d_extent", 12: "c_missing", 13: "label_count",
    14: "negative_extent", 15: "bad_datatype", 16: "bad_prec", 17: "bad_op",
    18: "unknown_backend", 20: "dtype_mismatch", 21: "bad_scalar", 22: "readonly_d",
    23: "destroyed", 24: "foreign_executor", 25: "batch_length", 26: "attr_key",
    33: "bad_executor",
}


def _other_errors(seed: int) -> Instance:
    """Every remaining error code: misuse scenarios performed by the runner."""
    codes = sorted(_SCENARIOS)
    code = codes[seed % len(codes)]
    inst = make_instance(38, seed, Options(counts=BASIC, datatypes=(F32, F64, C64),
                                           beta_zero_prob=0.0))
    return _retag(inst, expected_code=code, scenario=_SCENARIOS[code])


def _out_of_bounds(seed: int) -> Instance:
    """Code 19: strides that reach past the end or before the start of the allocation."""
    inst = make_instance(39, seed, Options(counts=BASIC, datatypes=(F64, C32),
                                           extent_range=(2, 4)))
    side = ("past_end", "before_start")[seed % 2]
    role = "ABCD"[(seed // 2) % 4]
    if role == "C" and inst.items[0].c is None:
        role = "D"
    return _retag(inst, expected_code=19, scenario=f"oob_{role}_{side}")


# ----------------------------------------------------------------------- special successes
def _zero_mode_operand(seed: int) -> Instance:
    rng = np.random.default_rng([8, seed])
    if rng.random() < 0.5:  # A is a scalar: D = FB
        counts = _counts(FB=(1, 3), IB=(0, 1))
        swap = False
    else:
        counts = _counts(FB=(1, 3))
        swap = True
    return make_instance(8, seed, Options(counts=counts, datatypes=REAL_AND_COMPLEX,
                                          swap_ab=swap))


def _one_mode_operand(seed: int) -> Instance:
    rng = np.random.default_rng([9, seed])
    counts = (_counts(P=(1, 1), FB=(1, 2)) if rng.random() < 0.5
              else _counts(FA=(1, 1), FB=(1, 2)))
    return make_instance(9, seed, Options(counts=counts, datatypes=REAL_AND_COMPLEX,
                                          swap_ab=bool(rng.random() < 0.5)))


def _nan_c(seed: int) -> Instance:
    inst = make_instance(33, seed, Options(counts=WIDE, datatypes=REAL_AND_COMPLEX,
                                           beta_zero_prob=1.0, c_none_when_beta_zero=False))
    item = inst.items[0]
    if seed % 2 == 0:
        item.c = None
    else:
        item.need("C").parent[...] = np.nan
    return _retag(inst, beta=0.0, note="beta=0: C never read")


def _in_place(seed: int) -> Instance:
    inst = make_instance(34, seed, Options(counts=WIDE, datatypes=REAL_AND_COMPLEX,
                                           beta_zero_prob=0.0, layouts=("row", "sub", "neg")))
    item = inst.items[0]
    dts = dict(inst.datatypes)
    dts["C"] = dts["D"]
    item.c = item.d
    return _retag(inst, datatypes=dts, c_is_d=True)


def _overlap(seed: int) -> Instance:
    """D shares memory with A (or B): the result must be the out-of-place one."""
    rng = np.random.default_rng([35, seed])
    inst = make_instance(35, seed, Options(counts=_counts(P=(1, 2), FA=(1, 2), FB=(1, 2)),
                                           datatypes=(F64, C64)))
    item = inst.items[0]
    role = "A" if rng.random() < 0.5 else "B"
    src, d = item.need(role), item.d
    a_shape, d_shape = np.asarray(src.view).shape, np.asarray(d.view).shape
    n_a, n_d = int(np.prod(a_shape)), int(np.prod(d_shape))
    shift = int(rng.integers(0, max(n_a, 1)))
    parent = random_values(rng, (n_a + n_d + shift,), inst.datatypes["D"])
    dts = dict(inst.datatypes)
    dts[role] = inst.datatypes["D"]
    item.set(role, OperandData(parent[:n_a].reshape(a_shape), parent))
    item.d = OperandData(parent[shift:shift + n_d].reshape(d_shape), parent)
    return _retag(inst, datatypes=dts, note=f"D overlaps {role}")


def _batched(seed: int) -> Instance:
    first = make_instance(37, seed, Options(counts=WIDE, datatypes=REAL_AND_COMPLEX,
                                            beta_zero_prob=0.3, c_none_when_beta_zero=False))
    rng = np.random.default_rng([37, seed, 1])
    items = [first.items[0]]
    base = first.items[0]

    def fresh(role: str, data: OperandData) -> OperandData:
        return make_operand(rng, np.asarray(data.view).shape, first.datatypes[role], "row")

    for _ in range(int(rng.integers(1, 4))):  # arguments run in order: A, B, C, D as before
        items.append(Operands(fresh("A", base.a), fresh("B", base.b),
                              None if base.c is None else fresh("C", base.c), fresh("D", base.d)))
    return _retag(first, items=items, batched=True)


def _low_precision(seed: int) -> Instance:
    return make_instance(30, seed, Options(
        counts=WIDE, datatypes=(F16, BF16, F32), mixed_datatypes=bool(seed % 2),
        prec=None, precs=tuple(Prectype), random_ops=True))


CASES: dict[int, Case] = {
    c.number: c
    for c in [
        Case(1, "hadamard", "Hadamard product (H labels only)",
             _simple(1, counts=_counts(H=(1, 4)))),
        Case(2, "basic", "basic contractions", _simple(2)),
        Case(3, "commutativity", "A and B swapped", _simple(3, swap_ab=True)),
        Case(4, "permute_d", "permutations of D", _simple(4, layouts=("row", "perm"))),
        Case(5, "equal_extents", "all extents equal", _simple(5, equal_extents=True)),
        Case(6, "outer", "outer product", _simple(6, counts=_counts(FA=(1, 3), FB=(1, 3)))),
        Case(7, "full_contraction", "0-mode D", _simple(7, counts=_counts(P=(1, 4)))),
        Case(8, "zero_mode_operand", "an operand with 0 modes", _zero_mode_operand),
        Case(9, "one_mode_operand", "an operand with 1 mode", _one_mode_operand),
        Case(10, "subtensor", "sub-tensors, same number of modes", _simple(10, layouts=SUB)),
        Case(11, "subtensor_fewer", "sub-tensors of larger tensors",
             _simple(11, layouts=SUB_FEWER)),
        Case(12, "negative_strides", "negative strides", _simple(12, layouts=("neg",))),
        Case(13, "negative_subtensor", "negative strides on sub-tensors",
             _simple(13, layouts=("sub_neg",))),
        Case(14, "negative_subtensor_fewer", "negative strides, sub-tensors with fewer modes",
             _simple(14, layouts=("sub_fewer_neg",))),
        Case(15, "mixed_strides", "mixed-sign strides", _simple(15, layouts=("mixed",))),
        Case(16, "mixed_subtensor", "mixed-sign strides on sub-tensors",
             _simple(16, layouts=("sub_mixed",))),
        Case(17, "mixed_subtensor_fewer", "mixed-sign strides, sub-tensors with fewer modes",
             _simple(17, layouts=("sub_fewer_mixed",))),
        Case(18, "f64", "double precision", _simple(18, datatypes=(F64,))),
        Case(19, "c32_ops", "C32 with random ops", _simple(19, datatypes=(C32,), random_ops=True)),
        Case(20, "c64_ops", "C64 with random ops", _simple(20, datatypes=(C64,), random_ops=True)),
        Case(21, "zero_stride", "a zero stride in an input", _simple(21, layouts=("zero",))),
        Case(22, "isolated", "isolated labels (reductions)",
             _simple(22, counts=_counts(H=(0, 1), P=(0, 2), FA=(0, 2), FB=(0, 2), IA=(1, 2),
                                        IB=(0, 2)))),
        Case(23, "repeated", "repeated labels in A, B and D",
             _simple(23, repeats=("A", "B", "D"), counts=_counts(H=(0, 1), P=(1, 2),
                                                                 FA=(1, 2), FB=(1, 2)))),
        Case(24, "hadamard_free", "Hadamard with free labels",
             _simple(24, counts=_counts(H=(1, 2), FA=(1, 2), FB=(1, 2)))),
        Case(25, "hadamard_contracted", "Hadamard with contracted labels",
             _simple(25, counts=_counts(H=(1, 2), P=(1, 2)))),
        Case(26, "error_extents", "extents mismatch (1, 2, 3, 9, 10)", _extent_error),
        Case(27, "error_c_vs_d", "C differs from D (5, 6, 7)", _c_d_error),
        Case(28, "error_aliasing", "D aliasing (8)", _alias_error),
        Case(29, "broadcast", "broadcast labels (Case 5) with ALLOW_BROADCAST",
             lambda s: _retag(make_instance(29, s, Options(
                 counts=_counts(H=(0, 1), P=(0, 2), FA=(0, 2), FB=(0, 1), IC=(1, 2)),
                 datatypes=REAL_AND_COMPLEX)), allow_broadcast=True)),
        Case(30, "low_precision", "F16 and BF16 under every precision", _low_precision),
        Case(31, "mixed_datatypes", "mixed datatypes",
             _simple(31, counts=WIDE, datatypes=tuple(Datatype), mixed_datatypes=True,
                     random_ops=True)),
        Case(32, "op_d_op_c", "op_D and op_C",
             _simple(32, datatypes=(C32, C64), beta_zero_prob=0.0,
                     ops={"C": ElementOp.CONJUGATE, "D": ElementOp.CONJUGATE})),
        Case(33, "beta_zero", "beta = 0 with NaN in C, and C = None", _nan_c),
        Case(34, "in_place", "C is D (in-place accumulation)", _in_place),
        Case(35, "overlap", "D overlapping A or B", _overlap),
        Case(36, "zero_extent", "extents of 0",
             _simple(36, counts=WIDE, zero_extent=True, extent_range=(1, 4))),
        Case(37, "batched", "batched execution", _batched),
        Case(38, "other_errors", "every remaining error code", _other_errors),
        Case(39, "out_of_bounds", "out-of-bounds layouts (19) never touch memory",
             _out_of_bounds),
    ]
}
