"""Random building blocks for conformance instances: labels, extents, layouts, data.

Layout kinds (applied to every operand of an instance unless stated):
``row`` (row-major), ``perm`` (transposed), ``sub`` (sub-tensor of a larger parent with the
same number of modes), ``sub_fewer`` (sub-tensor of a parent with more modes), each of the
sub-kinds ``*_neg`` (every mode reversed) and ``*_mixed`` (some modes reversed), ``neg``,
``mixed``, and ``zero`` (one input mode with stride 0).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from math import prod
from typing import Any

import numpy as np

from pytapp.analysis.letters import LETTERS
from pytapp.conformance.instance import Instance, OperandData, Operands
from pytapp.datatypes import Datatype, ElementOp
from pytapp.precision import Prectype

__all__ = ["Options", "make_instance", "make_operand", "random_values"]

#: Upper bound on the product of all distinct extents (keeps the reference fast).
BUDGET = 3000
#: Upper bound on the number of elements of D.
D_BUDGET = 600
CLASSES = ("H", "P", "FA", "FB", "IA", "IB", "IC")


@dataclass
class Options:
    """How to draw one random product.

    ``counts`` maps a label class to an inclusive (min, max) number of labels.
    """

    counts: dict[str, tuple[int, int]] = field(
        default_factory=lambda: {
            "H": (0, 1), "P": (1, 2), "FA": (1, 2), "FB": (1, 2),
            "IA": (0, 0), "IB": (0, 0), "IC": (0, 0),
        }
    )
    extent_range: tuple[int, int] = (1, 5)
    equal_extents: bool = False
    zero_extent: bool = False
    layouts: Sequence[str] = ("row",)
    layout_each: bool = True
    datatypes: Sequence[Datatype] = (Datatype.F32,)
    mixed_datatypes: bool = False
    random_ops: bool = False
    ops: dict[str, ElementOp] = field(default_factory=dict)
    prec: Prectype | None = Prectype.DEFAULT
    precs: Sequence[Prectype] = ()
    repeats: Sequence[str] = ()
    int_labels: bool = False
    beta_zero_prob: float = 0.3
    c_none_when_beta_zero: bool = True
    swap_ab: bool = False


def random_values(rng: np.random.Generator, shape: Sequence[int], datatype: Datatype) -> Any:
    """Uniform values in [-1, 1) (both parts for complex), stored in ``datatype``."""
    vals = np.asarray(rng.uniform(-1.0, 1.0, size=tuple(shape)))
    if datatype.is_complex:
        vals = vals + 1j * rng.uniform(-1.0, 1.0, size=tuple(shape))
    return np.array(vals, dtype=datatype.numpy_dtype)


def _flip(view: np.ndarray, modes: Sequence[int]) -> np.ndarray:
    if not list(modes):
        return view
    index = [slice(None)] * view.ndim
    for m in modes:
        index[m] = slice(None, None, -1)
    return view[tuple(index)]


def make_operand(
    rng: np.random.Generator, extents: Sequence[int], datatype: Datatype, kind: str
) -> OperandData:
    """Return a view with the given extents, of layout ``kind``, inside a random parent array."""
    ext = tuple(int(e) for e in extents)
    n = len(ext)
    base = kind
    for prefix in ("sub_fewer", "sub", "zero", "perm"):
        if kind.startswith(prefix):
            base = prefix
            break
    else:
        base = "row"
    variant = "neg" if kind.endswith("neg") else "mixed" if kind.endswith("mixed") else ""
    if base == "zero":
        movable = [i for i, e in enumerate(ext) if e > 1]
        parent = random_values(rng, ext, datatype)
        if not movable:
            return OperandData(parent, parent)
        m = int(rng.choice(movable))
        strides = list(parent.strides)
        strides[m] = 0
        view = np.lib.stride_tricks.as_strided(parent, ext, strides, writeable=False)
        return OperandData(view, parent)
    if base == "perm" and n > 1:
        order = rng.permutation(n)
        parent = random_values(rng, [ext[i] for i in order], datatype)
        view = parent.transpose(np.argsort(order))
    elif base in ("sub", "sub_fewer"):
        pad = [e + int(rng.integers(0, 3)) for e in ext]
        extra: list[tuple[int, int, int]] = []  # (position, extent, fixed index)
        if base == "sub_fewer":
            for _ in range(int(rng.integers(1, 3))):
                pe = int(rng.integers(1, 4))
                extra.append((int(rng.integers(0, len(pad) + 1)), pe, int(rng.integers(0, pe))))
        shape = list(pad)
        index: list[Any] = [
            slice(o, o + e) for o, e in (
                (int(rng.integers(0, p - e + 1)), e) for p, e in zip(pad, ext, strict=True)
            )
        ]
        for pos, pe, fixed in extra:
            shape.insert(pos, pe)
            index.insert(pos, fixed)
        parent = random_values(rng, shape, datatype)
        view = parent[(*index, Ellipsis)]
    else:
        parent = random_values(rng, ext, datatype)
        view = parent
    if variant == "neg":
        view = _flip(view, range(n))
    elif variant == "mixed" and n:
        if n == 1:
            chosen = [0] if rng.random() < 0.5 else []
        else:
            k = int(rng.integers(1, n))
            chosen = list(rng.choice(n, size=k, replace=False))
        view = _flip(view, chosen)
    return OperandData(view, parent)


def _labels(rng: np.random.Generator, count: int, int_labels: bool) -> list[Hashable]:
    if int_labels:
        return [int(x) for x in rng.choice(1000, size=count, replace=False)]
    return [str(x) for x in rng.choice(list(LETTERS), size=count, replace=False)]


def _shrink(extents: dict[Hashable, int], d_labels: Sequence[Hashable]) -> None:
    """Lower the largest extents until the product fits the budgets."""
    while prod(extents.values()) > BUDGET or prod(extents[x] for x in d_labels) > D_BUDGET:
        big = max(extents, key=lambda x: extents[x])
        if extents[big] <= 1:
            return
        extents[big] -= 1


def _with_repeats(
    rng: np.random.Generator, modes: list[Hashable], repeat: bool
) -> list[Hashable]:
    if not repeat or not modes:
        return modes
    out = list(modes)
    for _ in range(int(rng.integers(1, 3))):
        out.insert(int(rng.integers(0, len(out) + 1)), out[int(rng.integers(0, len(out)))])
    return out


def make_instance(case: int, seed: int, opts: Options) -> Instance:
    """Draw one random product following ``opts`` (successful unless the case edits it)."""
    rng = np.random.default_rng([case, seed])
    counts = {c: int(rng.integers(lo, hi + 1)) for c, (lo, hi) in opts.counts.items()}
    total = sum(counts.values())
    names = _labels(rng, total, opts.int_labels)
    cls: dict[str, list[Hashable]] = {}
    for c in CLASSES:
        k = counts.get(c, 0)
        cls[c], names = names[:k], names[k:]
    lo, hi = opts.extent_range
    if opts.equal_extents:
        e = int(rng.integers(lo, hi + 1))
        extents = {x: e for c in CLASSES for x in cls[c]}
    else:
        extents = {x: int(rng.integers(lo, hi + 1)) for c in CLASSES for x in cls[c]}
    d_modes = cls["H"] + cls["FA"] + cls["FB"] + cls["IC"]
    _shrink(extents, d_modes)
    if opts.zero_extent and extents:
        extents[list(extents)[int(rng.integers(0, len(extents)))]] = 0
    a_modes = [x for x in rng.permutation(np.array(cls["H"] + cls["P"] + cls["FA"] + cls["IA"],
                                                   dtype=object))]
    b_modes = [x for x in rng.permutation(np.array(cls["H"] + cls["P"] + cls["FB"] + cls["IB"],
                                                   dtype=object))]
    d_perm = [x for x in rng.permutation(np.array(d_modes, dtype=object))]
    labels = {
        "A": tuple(_with_repeats(rng, a_modes, "A" in opts.repeats)),
        "B": tuple(_with_repeats(rng, b_modes, "B" in opts.repeats)),
        "D": tuple(_with_repeats(rng, d_perm, "D" in opts.repeats)),
    }
    if opts.swap_ab:
        labels["A"], labels["B"] = labels["B"], labels["A"]
    labels["C"] = labels["D"]
    if opts.mixed_datatypes:
        dts = {r: Datatype(int(rng.choice([int(x) for x in opts.datatypes]))) for r in "ABCD"}
    else:
        dt = Datatype(int(rng.choice([int(x) for x in opts.datatypes])))
        dts = dict.fromkeys("ABCD", dt)
    ops = {r: ElementOp.IDENTITY for r in "ABCD"}
    if opts.random_ops:
        ops = {r: ElementOp(int(rng.integers(0, 2))) for r in "ABCD"}
    ops.update(opts.ops)
    prec = opts.prec if opts.prec is not None else Prectype(int(rng.choice(
        [int(p) for p in opts.precs])))
    d_complex = dts["D"].is_complex
    alpha = _scalar(rng, d_complex)
    beta = 0.0 if rng.random() < opts.beta_zero_prob else _scalar(rng, d_complex)
    layouts = list(opts.layouts)
    shared = str(rng.choice(layouts))
    items: dict[str, OperandData] = {}
    for role in "ABCD":
        kind = str(rng.choice(layouts)) if opts.layout_each else shared
        if role in "CD" and kind.startswith("zero"):
            kind = "row"
        ext = [extents[x] for x in labels[role]]
        items[role] = make_operand(rng, ext, dts[role], kind)
    operands = Operands(items["A"], items["B"], items["C"], items["D"])
    if beta == 0 and opts.c_none_when_beta_zero and rng.random() < 0.5:
        operands.c = None
    return Instance(
        case=case, seed=seed, labels=labels, datatypes=dts, items=[operands], ops=ops,
        prec=prec, alpha=alpha, beta=beta,
    )


def _scalar(rng: np.random.Generator, is_complex: bool) -> complex | float:
    re = round(float(rng.uniform(-2, 2)), 3)
    if is_complex:
        return complex(re, round(float(rng.uniform(-2, 2)), 3))
    return re
