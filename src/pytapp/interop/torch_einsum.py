"""``pytapp.einsum`` on torch tensors: torch operations on views, planned once per layout.

A call is planned once for its equation, options and the operands' shapes, strides, dtypes
and devices: the contraction path and pairwise steps of :class:`~pytapp.network.Network`,
each step lowered by the TTGT layout shared with the TAPP backends
(:func:`~pytapp.analysis.ttgt.gemm_layout`) to a few torch calls on views (``permute``,
``reshape``, ``mm``/``bmm``/``matmul``/``mv``/``dot``, ``mul``, ``sum``). The result is a
:class:`TorchProgram`, kept in a bounded cache; a repeated call costs one dictionary lookup
and those torch calls. Nothing goes
through NumPy, so CPU and CUDA tensors both stay where they are, torch's own thread pool is
the only one at work, and autograd differentiates the program like any torch code (its
backward is that of ``mm``/``bmm`` on views, as for ``torch.einsum``). Under ``torch.compile``
the call becomes the ``pytapp::einsum`` operator (:mod:`pytapp.interop.torch_op`), whose
forward and backward run these programs.

Examples
--------
>>> import torch
>>> a, b = torch.ones(2, 3), torch.ones(3, 4)
>>> einsum("ij,jk->ik", [a, b]).tolist()[0]
[3.0, 3.0, 3.0, 3.0]
>>> plan("bhqd,bhkd->bhqk", [torch.ones(1, 2, 3, 4), torch.ones(1, 2, 5, 4)]).calls()
['b: permute(0, 1, 3, 2)', 'matmul']
>>> plan("bqd,bkd->bqk", [torch.ones(2, 3, 4), torch.ones(2, 5, 4)]).calls()
['b: permute(0, 2, 1)', 'bmm']
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from math import prod
from typing import Any

import numpy as np
import torch

from pytapp.analysis.spec import build_spec
from pytapp.analysis.subscripts import Equation, parse_subscripts
from pytapp.analysis.ttgt import GemmLayout, Kind, gemm_layout
from pytapp.datatypes import Datatype, as_array, datatype_of_data
from pytapp.errors import ErrorCode, error_for
from pytapp.expression import is_torch, result_datatype
from pytapp.network import Network
from pytapp.precision import Prectype

__all__ = ["MATMUL_MAX_MADDS", "PROGRAM_CACHE_SIZE", "TorchProgram", "clear_cache", "einsum",
           "plan", "run", "torch_dtype"]

#: Most programs the cache keeps (the oldest goes first).
PROGRAM_CACHE_SIZE = 256
#: Largest batched product (multiply-adds) on the CPU that keeps several batch axes for one
#: matmul instead of reshaping them into one for bmm (see ``_gemm``; on a CUDA device matmul
#: keeps them at every size).
MATMUL_MAX_MADDS = 1 << 19

#: One torch call of a program: a function of the tensor (or tensors) and fixed arguments.
Call = tuple[Callable[..., Any], tuple[Any, ...]]
#: A lowered product: A's and B's target shapes, the combining call, the shape it returns.
_Lowered = tuple[tuple[int, ...], tuple[int, ...], Call, tuple[int, ...]]

_programs: dict[Hashable, TorchProgram] = {}
_lock = threading.Lock()
_PLAIN = (str, bool, type(None))


def torch_dtype(dt: Datatype) -> torch.dtype:
    """Return the torch dtype of a TAPP datatype."""
    found: torch.dtype = getattr(torch, dt.numpy_dtype.name)
    return found


def _mm_swapped(x: Any, y: Any) -> Any:
    """``D^T = B^T A^T``: the operands come transposed, the result lies in D's order."""
    return torch.mm(y, x)


def _matmul_swapped(x: Any, y: Any) -> Any:
    """Batched ``D^T = B^T A^T`` over several batch axes."""
    return torch.matmul(y, x)


def _bmm_swapped(x: Any, y: Any) -> Any:
    """Batched ``D^T = B^T A^T``."""
    return torch.bmm(y, x)


def _mul(x: Any, y: Any) -> Any:
    return torch.mul(x, y)


def _mul_sum(x: Any, y: Any, dims: tuple[int, ...]) -> Any:
    return torch.mul(x, y).sum(dims)


def _transpose(x: Any) -> Any:
    return x.mT


def _einsum1(x: Any, equation: str) -> Any:
    return torch.einsum(equation, x)


def _strided(x: Any, size: tuple[int, ...], stride: tuple[int, ...]) -> Any:
    """Return the view a chain of permutes, reshapes and transposes makes (same offset)."""
    return x.as_strided(size, stride)


#: Calls that a chain may fold into one ``as_strided`` when together they make a view.
_VIEW_CALLS = (torch.Tensor.permute, torch.Tensor.reshape, _transpose)


_NAMES: dict[Any, str] = {
    torch.Tensor.permute: "permute", torch.Tensor.reshape: "reshape", torch.Tensor.sum: "sum",
    torch.Tensor.squeeze: "squeeze", torch.Tensor.to: "to", _einsum1: "einsum",
    _transpose: "mT", torch.matmul: "matmul", torch.mm: "mm", torch.bmm: "bmm", torch.mv: "mv",
    torch.dot: "dot", _mm_swapped: "mm (swapped)", _bmm_swapped: "bmm (swapped)",
    _matmul_swapped: "matmul (swapped)", _mul: "mul",
    _mul_sum: "mul+sum", _strided: "as_strided",
}


@dataclass(frozen=True)
class TorchStep:
    """One pairwise step: the calls on each operand's view, the combination, the result's."""

    a: int
    b: int | None
    a_calls: tuple[Call, ...]
    b_calls: tuple[Call, ...]
    combine: Call | None
    out_calls: tuple[Call, ...]


@dataclass(frozen=True)
class TorchProgram:
    """An einsum lowered to torch calls for one set of operand layouts (immutable).

    ``prepare`` holds each operand's calls (cast, broadcast axes dropped, diagonal taken);
    ``steps`` the pairwise products, each appending its result to the list of slots. ``run``
    makes these calls in order, as one generated Python function (nothing is interpreted
    per call). ``folded`` (when given) are the same steps with each chain of view calls
    (permute, reshape, transpose) that stays a view replaced by one ``as_strided`` to the
    view it makes: one torch call instead of several, run when no operand needs gradients
    (autograd differentiates the chains themselves, whose backward is cheaper).
    """

    equation: str
    prepare: tuple[tuple[Call, ...], ...]
    steps: tuple[TorchStep, ...]
    folded: tuple[TorchStep, ...] | None = None
    run: Callable[[Sequence[Any]], Any] = field(init=False, repr=False, compare=False)
    run_folded: Callable[[Sequence[Any]], Any] | None = field(init=False, repr=False,
                                                              compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "run", _compile(self.prepare, self.steps))
        object.__setattr__(self, "run_folded", None if self.folded is None else
                           _compile(self.prepare, self.folded))

    def __call__(self, operands: Sequence[Any]) -> Any:
        """Run the program on tensors of the layouts it was planned for."""
        fast = self.run_folded
        if fast is None or (torch.is_grad_enabled() and any(t.requires_grad for t in operands)):
            return self.run(operands)
        return fast(operands)

    def calls(self) -> list[str]:
        """Return the torch calls of the program, in order, as text (for reading plans)."""
        def show(calls: tuple[Call, ...], who: str) -> list[str]:
            lines = []
            for fn, args in calls:
                inner = args[0] if len(args) == 1 and isinstance(args[0], tuple) else args
                shown = f"({', '.join(map(repr, inner))})" if args else ""
                lines.append(f"{who}{_NAMES.get(fn, getattr(fn, '__name__', '?'))}{shown}")
            return lines

        text: list[str] = []
        for i, calls in enumerate(self.prepare):
            text += show(calls, f"operand {i}: ")
        for st in self.steps:
            text += show(st.a_calls, "a: ") + show(st.b_calls, "b: ")
            if st.combine is not None:
                text += show(((st.combine[0], ()),), "")
            text += show(st.out_calls, "")
        return text

    def folded_calls(self) -> list[str]:
        """Return the calls run without gradients (:meth:`calls` when nothing folds)."""
        if self.folded is None:
            return self.calls()
        return dataclasses.replace(self, steps=self.folded, folded=None).calls()


def _compile(prepare: tuple[tuple[Call, ...], ...],
             steps: tuple[TorchStep, ...]) -> Callable[[Sequence[Any]], Any]:
    """Return a function making a program's calls in order, generated from its steps.

    The generated text holds only slot and constant names; the callables and their
    arguments are bound to those names, never written into the text.
    """
    names: dict[str, Any] = {}

    def bind(value: Any) -> str:
        name = f"k{len(names)}"
        names[name] = value
        return name

    def line(target: str, sources: tuple[str, ...], call: Call) -> str:
        fn, args = call
        return f"    {target} = {bind(fn)}({', '.join((*sources, *map(bind, args)))})"

    n = len(prepare)
    lines = ["def run(ops):", f"    {''.join(f's{i}, ' for i in range(n))}= ops"]
    for i, calls in enumerate(prepare):
        lines += [line(f"s{i}", (f"s{i}",), c) for c in calls]
    for k, st in enumerate(steps):
        lines.append(f"    x = s{st.a}")
        lines += [line("x", ("x",), c) for c in st.a_calls]
        if st.b is not None and st.combine is not None:
            lines.append(f"    y = s{st.b}")
            lines += [line("y", ("y",), c) for c in st.b_calls]
            lines.append(line("x", ("x", "y"), st.combine))
        lines += [line("x", ("x",), c) for c in st.out_calls]
        lines.append(f"    s{n + k} = x")
    lines.append(f"    return s{n + len(steps) - 1}")
    exec(compile("\n".join(lines), "<pytapp torch program>", "exec"), names)
    found: Callable[[Sequence[Any]], Any] = names["run"]
    return found


def _contiguous(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


class _Builder:
    """Lowers a :class:`Network`'s steps to torch calls, tracking each slot's labels."""

    def __init__(self, equation: Equation, network: Network,
                 matmul_max_madds: float = MATMUL_MAX_MADDS) -> None:
        self.equation, self.network = equation, network
        self.matmul_max_madds = matmul_max_madds
        self.sizes = network.sizes
        self.labels: list[str] = []
        self.strides: list[tuple[int, ...]] = []

    def ext(self, labels: Sequence[Hashable]) -> tuple[int, ...]:
        """Return the extents of ``labels``."""
        return tuple(self.sizes[str(ch)] for ch in labels)

    def prepare(self, i: int, t: Any, compute: torch.dtype) -> tuple[Call, ...]:
        """Return the calls that make operand ``i`` a view with distinct labels in ``compute``."""
        prepared = self.network.prepared[i]
        term = self.equation.inputs[i]
        calls: list[Call] = []
        if t.dtype != compute:
            calls.append((torch.Tensor.to, (compute,)))
        strides = list(t.stride())
        kept = term
        if prepared.drop:
            calls.append((torch.Tensor.squeeze, (prepared.drop,)))
            kept = "".join(ch for axis, ch in enumerate(term) if axis not in prepared.drop)
            strides = [s for axis, s in enumerate(strides) if axis not in prepared.drop]
        if prepared.diagonal:
            rename = self.equation.letter_map()
            text = "".join(rename[ch] for ch in kept) + "->" + "".join(
                rename[ch] for ch in prepared.labels)
            calls.append((_einsum1, (text,)))
            strides = [sum(s for ch, s in zip(kept, strides, strict=True) if ch == label)
                       for label in prepared.labels]
        self.labels.append(prepared.labels)
        self.strides.append(tuple(strides))
        return tuple(calls)

    def step(self, a: int, b: int | None, out_set: str, last: bool) -> TorchStep:
        """Lower one step; its result becomes the next slot (labels and strides tracked).

        The TTGT layout orders the labels of each class as the operands lie in memory (D of
        an intermediate: as :class:`Network` would order it; of the result: the output's).
        """
        if b is None:
            return self._unary(a, out_set, last)
        al, bl = self.labels[a], self.labels[b]
        d_labels = self.equation.output if last else out_set
        f64 = Datatype.F64
        d_item = (f64, self.ext(d_labels), _contiguous(self.ext(d_labels)), tuple(d_labels), 0)
        spec = build_spec(a=(f64, self.ext(al), self.strides[a], tuple(al), 0),
                          b=(f64, self.ext(bl), self.strides[b], tuple(bl), 0),
                          c=d_item, d=d_item, prec=Prectype.DEFAULT)
        lay = gemm_layout(spec)
        a_rest = self.ext([x for i, x in enumerate(al) if i not in lay.a_reduce])
        b_rest = self.ext([x for i, x in enumerate(bl) if i not in lay.b_reduce])
        a_target, b_target, combine, natural = (
            _gemm(lay, self.matmul_max_madds) if lay.kind is Kind.GEMM else self._elementwise(lay)
            if lay.kind is Kind.ELEMENTWISE else self._dot(lay))
        a_calls = self._reduce(lay.a_reduce) + _view(lay.a_perm, a_rest, a_target, lay.swap)
        b_calls = self._reduce(lay.b_reduce) + _view(lay.b_perm, b_rest, b_target, lay.swap)
        produced = "".join(str(x) for x in lay.d_target)
        shape = self.ext(produced)
        out_calls: tuple[Call, ...] = ()
        if natural != shape:
            out_calls += ((torch.Tensor.reshape, (shape,)),)
        out_calls += self._finish(produced, last)
        return TorchStep(a, b, a_calls, b_calls, combine, out_calls)

    def _elementwise(self, lay: GemmLayout) -> _Lowered:
        """Hadamard and outer products: a broadcasting multiplication."""
        h, fa, fb = lay.h_shape, self.ext(lay.fa), self.ext(lay.fb)
        return ((*h, *fa, *(1,) * len(fb)), (*h, *(1,) * len(fa), *fb), (_mul, ()),
                (*h, *fa, *fb))

    def _dot(self, lay: GemmLayout) -> _Lowered:
        """Contracted labels only: a dot product, or a multiplication summed per batch."""
        h, p = lay.h_shape, self.ext(lay.p)
        if not h:
            return (lay.k,), (lay.k,), (torch.dot, ()), ()
        return (*h, *p), (*h, *p), (_mul_sum, (tuple(range(len(h), len(h) + len(p))),)), h

    @staticmethod
    def _reduce(dims: tuple[int, ...]) -> tuple[Call, ...]:
        """Sum over labels only this operand has (before the product)."""
        return ((torch.Tensor.sum, (dims,)),) if dims else ()

    def _unary(self, a: int, out_set: str, last: bool) -> TorchStep:
        al = self.labels[a]
        keep = self.equation.output if last else out_set
        reduce = tuple(i for i, ch in enumerate(al) if ch not in keep)
        calls = self._reduce(reduce)
        produced = "".join(ch for ch in al if ch in keep)
        return TorchStep(a, None, calls, (), None, self._finish(produced, last))

    def _finish(self, produced: str, last: bool) -> tuple[Call, ...]:
        """Record the new slot's labels; on the last step, permute them into the output's."""
        out = self.equation.output
        calls: tuple[Call, ...] = ()
        if last and produced != out:
            calls = ((torch.Tensor.permute, (tuple(produced.index(ch) for ch in out),)),)
            produced = out
        self.labels.append(produced)
        self.strides.append(_contiguous(self.ext(produced)))
        return calls


def _gemm(lay: GemmLayout, matmul_max_madds: float = MATMUL_MAX_MADDS) -> _Lowered:
    """Lower a (batched) matrix product; vectors where A or B has no free label nor batch."""
    # Batch labels fuse into one axis (a view when their strides allow, as in torch.einsum):
    # bmm, where matmul would loop over the batch on some layouts. Small products with several
    # batch labels and one label per matrix axis keep them: matmul folds them itself, in C++,
    # which saves the operands' and the result's reshapes (Python-level torch calls: an
    # attention-score product of 2x4x32x16 took 12.0 us against 12.6 as reshapes and bmm).
    # On larger ones bmm on the fused views is the faster kernel (3.33 against 3.51 ms at
    # 4x12x256x64 on the CPU): see MATMUL_MAX_MADDS. On a CUDA device matmul folds the batch
    # labels into the same bmm at every size, and the host's time per torch call is what
    # such a product costs: matmul always (attention scores of 4x12x256x64 on an H100: 26.6 us
    # as reshapes and bmm against 26.0 us for torch.einsum).
    fn: Callable[..., Any]
    if (len(lay.h) > 1 and len(lay.fa) == len(lay.fb) == len(lay.p) == 1
            and prod(lay.h_shape) * lay.m * lay.n * lay.k <= matmul_max_madds):
        fn = _matmul_swapped if lay.swap else torch.matmul
        natural = (*lay.h_shape, *((lay.n, lay.m) if lay.swap else (lay.m, lay.n)))
        return (*lay.h_shape, lay.m, lay.k), (*lay.h_shape, lay.k, lay.n), (fn, ()), natural
    batch = (prod(lay.h_shape),) if lay.h_shape else ()
    if batch:
        fn = _bmm_swapped if lay.swap else torch.bmm
    elif not lay.fa:  # a vector times a matrix
        return (lay.k,), (lay.k, lay.n), (torch.matmul, ()), (lay.n,)
    elif not lay.fb:  # a matrix times a vector
        return (lay.m, lay.k), (lay.k,), (torch.mv, ()), (lay.m,)
    else:
        fn = _mm_swapped if lay.swap else torch.mm
    natural = (*batch, *((lay.n, lay.m) if lay.swap else (lay.m, lay.n)))
    return (*batch, lay.m, lay.k), (*batch, lay.k, lay.n), (fn, ()), natural


def _view(perm: tuple[int, ...], shape: tuple[int, ...], target: tuple[int, ...],
          transpose: bool) -> tuple[Call, ...]:
    """Return the calls that permute a view by ``perm`` and reshape it to ``target``.

    ``transpose`` swaps the last two axes afterwards (folded into the permutation when the
    reshape changes nothing). Identity permutations and no-op reshapes are left out.
    """
    permuted = tuple(shape[i] for i in perm)
    calls: list[Call] = []
    if permuted == target:
        order = list(perm)
        if transpose:
            order[-2], order[-1] = order[-1], order[-2]
        if order != sorted(order):
            calls.append((torch.Tensor.permute, (tuple(order),)))
        return tuple(calls)
    if list(perm) != sorted(perm):
        calls.append((torch.Tensor.permute, (perm,)))
    calls.append((torch.Tensor.reshape, (target,)))
    if transpose:
        calls.append((_transpose, ()))
    return tuple(calls)


def _result_dtype(operands: Sequence[Any], dtype: Any) -> torch.dtype:
    """NumPy's promotion of the operands (as for NumPy arrays), as a torch dtype."""
    arrays = [np.empty(0, dtype=datatype_of_data(x, f"operand {i}").numpy_dtype)
              if is_torch(x) else as_array(x, f"operand {i}") for i, x in enumerate(operands)]
    return torch_dtype(result_datatype(arrays, dtype))


def _device(operands: Sequence[Any]) -> torch.device:
    devices: set[torch.device] = {t.device for t in operands if is_torch(t)}
    if len(devices) != 1:
        raise error_for(ErrorCode.OPERAND_MISMATCH,
                        f"the operands lie on devices {sorted(map(str, devices))}; move them "
                        "to one device")
    return devices.pop()


def _tensors(operands: Sequence[Any], dtype: Any) -> list[Any]:
    """Non-tensor operands (Python and NumPy numbers) as tensors of the result's dtype."""
    compute, device = _result_dtype(operands, dtype), _device(operands)
    return [x if is_torch(x) else torch.as_tensor(as_array(x, f"operand {i}"), device=device)
            .to(compute) for i, x in enumerate(operands)]


def _build(subscripts: str, tensors: Sequence[Any], optimize: Any, memory_limit: Any,
           dtype: Any) -> TorchProgram:
    compute = _result_dtype(tensors, dtype)
    device = _device(tensors)
    equation = parse_subscripts(subscripts, [t.dim() for t in tensors])
    network = Network(equation, [tuple(t.shape) for t in tensors], optimize=optimize,
                      memory_limit=memory_limit)
    builder = _Builder(equation, network,
                       MATMUL_MAX_MADDS if device.type == "cpu" else float("inf"))
    prepare = tuple(builder.prepare(i, t, compute) for i, t in enumerate(tensors))
    last = len(network.steps) - 1
    steps = tuple(builder.step(st.a, st.b, st.out_labels, k == last)
                  for k, st in enumerate(network.steps))
    return TorchProgram(subscripts, prepare, steps, _fold_views(tensors, prepare, steps))


def _apply(x: Any, calls: tuple[Call, ...]) -> Any:
    for fn, args in calls:
        x = fn(x, *args)
    return x


def _fold_chain(x: Any, calls: tuple[Call, ...]) -> tuple[tuple[Call, ...], Any]:
    """Return ``calls``, folded into one ``as_strided`` where they make a view of ``x``.

    Also returns what they give on ``x``.
    """
    result = _apply(x, calls)
    root = x if x._base is None else x._base
    if (len(calls) > 1 and all(fn in _VIEW_CALLS for fn, _ in calls) and result._base is root
            and result.storage_offset() == x.storage_offset()):
        return ((_strided, (tuple(result.shape), tuple(result.stride()))),), result
    return calls, result


def _fold_views(tensors: Sequence[Any], prepare: tuple[tuple[Call, ...], ...],
                steps: tuple[TorchStep, ...]) -> tuple[TorchStep, ...] | None:
    """Return ``steps`` with their operands' view chains folded (``None``: nothing folds).

    The program runs once on meta tensors of the operands' exact layouts: each chain's input
    then has the strides torch gives it on real data (meta kernels compute strides as the
    real ones do), and a chain folds only when its result is a view of that input.
    """
    try:
        slots = [_apply(torch.empty_strided(tuple(t.shape), t.stride(), dtype=t.dtype,
                                            device="meta"), calls)
                 for t, calls in zip(tensors, prepare, strict=True)]
        folded, changed = [], False
        for st in steps:
            a_calls, x = _fold_chain(slots[st.a], st.a_calls)
            b_calls = st.b_calls
            if st.b is not None and st.combine is not None:
                b_calls, y = _fold_chain(slots[st.b], st.b_calls)
                fn, args = st.combine
                x = fn(x, y, *args)
            slots.append(_apply(x, st.out_calls))
            changed |= a_calls != st.a_calls or b_calls != st.b_calls
            folded.append(dataclasses.replace(st, a_calls=a_calls, b_calls=b_calls))
    except Exception:  # an op without a meta kernel: the calls run unfolded (never wrong)
        return None
    return tuple(folded) if changed else None


def _key(subscripts: Any, operands: Sequence[Any], optimize: Any, memory_limit: Any,
         dtype: Any) -> Hashable | None:
    """Return the cache key of a call (``None``: not cached, e.g. a path optimizer object).

    Raises AttributeError when an operand is not a tensor, TypeError when an option is not
    hashable.
    """
    if optimize.__class__ not in _PLAIN:
        if not isinstance(optimize, (list, tuple)):
            return None  # an optimizer object may be stateful: never cached by identity
        optimize = tuple(tuple(s) if isinstance(s, (list, tuple)) else s for s in optimize)
    key: list[Any] = [subscripts, optimize, memory_limit, dtype]
    for t in operands:
        key += (t.shape, t.stride(), t.dtype, t.device)
    return tuple(key)


def _find(subscripts: str, operands: Sequence[Any], optimize: Any, memory_limit: Any,
          dtype: Any) -> tuple[TorchProgram, Sequence[Any]]:
    """Return the program of a call (planned now unless cached) and its operands as tensors."""
    try:
        key = _key(subscripts, operands, optimize, memory_limit, dtype)
    except AttributeError:  # numbers among the operands: as tensors, they have a key
        operands = _tensors(operands, dtype)
        key = _key(subscripts, operands, optimize, memory_limit, dtype)
    try:
        found = None if key is None else _programs.get(key)
    except TypeError:  # an unhashable option: planned on every call
        key = found = None
    if found is not None:
        return found, operands
    program = _build(subscripts, operands, optimize, memory_limit, dtype)
    if key is not None:
        with _lock:
            _programs[key] = program
            while len(_programs) > PROGRAM_CACHE_SIZE:
                _programs.pop(next(iter(_programs)))
    return program, operands


def plan(subscripts: str, operands: Sequence[Any], *, optimize: Any = "auto",
         memory_limit: Any = None, dtype: Any = None) -> TorchProgram:
    """Return the program of an einsum on these operands (from the cache when planned before).

    Raises
    ------
    TappError
        As for :func:`pytapp.einsum`; 20 also for operands on different devices.

    Examples
    --------
    >>> import torch
    >>> plan("ij,jk->ki", [torch.ones(2, 3), torch.ones(3, 4)]).calls()
    ['a: permute(1, 0)', 'b: permute(1, 0)', 'mm (swapped)']
    """
    return _find(subscripts, operands, optimize, memory_limit, dtype)[0]


def run(subscripts: str, operands: Sequence[Any], *, optimize: Any = "auto",
        memory_limit: Any = None, dtype: Any = None) -> Any:
    """Plan (or find) and run an einsum as torch calls (no ``out``; what the operator runs).

    Raises
    ------
    TappError
        As for :func:`plan`.
    """
    try:
        program = _programs.get(_key(subscripts, operands, optimize, memory_limit, dtype))
    except (AttributeError, TypeError):  # numbers among the operands, unhashable options
        program = None
    if program is None:
        program, operands = _find(subscripts, operands, optimize, memory_limit, dtype)
    return program(operands)


def einsum(subscripts: str, operands: Sequence[Any], *, out: Any = None,
           optimize: Any = "auto", memory_limit: Any = None, dtype: Any = None) -> Any:
    """``pytapp.einsum`` on torch tensors (at least one operand is one), as torch calls.

    Parameters
    ----------
    subscripts, operands
        The equation and operands (tensors, Python and NumPy numbers).
    out
        A tensor to copy the result into (cast as torch casts, ``same_kind``).
    optimize, memory_limit, dtype
        As for :func:`pytapp.einsum`.

    Returns
    -------
    A tensor on the operands' device; a view of an operand when the einsum is one (a
    transpose, a diagonal), as with ``torch.einsum``.

    Raises
    ------
    TappError
        As for :func:`pytapp.einsum`; 20 for operands on different devices or an ``out`` on
        another device, of another shape or of a dtype the result cannot be cast to; 18 for
        ``out=`` with operands that require grad.

    Examples
    --------
    >>> import torch
    >>> einsum("i,i->", [torch.arange(3.0), torch.ones(3)]).item()
    3.0
    """
    if torch.compiler.is_compiling():
        from pytapp.interop.torch_op import einsum_op

        if dtype is not None:
            compute = _result_dtype(operands, dtype)
            operands = [t.to(compute) if is_torch(t) else t for t in operands]
        result = einsum_op(subscripts, list(operands))
    else:
        result = run(subscripts, operands, optimize=optimize, memory_limit=memory_limit,
                     dtype=dtype)
    if out is None:
        return result
    return _store(out, result, operands)


def _store(out: Any, result: Any, operands: Sequence[Any]) -> Any:
    """Copy ``result`` into ``out`` after checking shape, dtype and autograd."""
    if not is_torch(out):
        raise error_for(ErrorCode.OPERAND_MISMATCH,
                        f"out is a {type(out).__name__}; give a torch tensor for torch operands")
    if torch.is_grad_enabled() and (out.requires_grad or any(
            is_torch(t) and t.requires_grad for t in operands)):
        raise error_for(ErrorCode.UNSUPPORTED,
                        "out= is not supported for tensors that require grad; assign the "
                        "result instead")
    if out.device != result.device:
        raise error_for(ErrorCode.OPERAND_MISMATCH,
                        f"out is on device {out.device} but the operands are on "
                        f"{result.device}; give an out on the operands' device")
    if tuple(out.shape) != tuple(result.shape):
        raise error_for(ErrorCode.OPERAND_MISMATCH,
                        f"out has shape {tuple(out.shape)} but the result has shape "
                        f"{tuple(result.shape)}")
    if not torch.can_cast(result.dtype, out.dtype):
        raise error_for(ErrorCode.OPERAND_MISMATCH,
                        f"out has dtype {out.dtype}, to which the result's {result.dtype} "
                        "cannot be cast; give out a dtype of the same kind")
    if result.untyped_storage().data_ptr() == out.untyped_storage().data_ptr():
        result = result.clone()  # the result is a view of out (e.g. out is an operand)
    out.copy_(result)
    return out


def clear_cache() -> None:
    """Forget every planned program."""
    with _lock:
        _programs.clear()
