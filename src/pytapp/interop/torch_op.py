"""``pytapp::einsum`` as a torch custom operator, with autograd and ``torch.compile`` support.

``pytapp.einsum`` on torch tensors runs torch calls (:mod:`pytapp.interop.torch_einsum`),
which autograd differentiates as they are; this operator is what ``torch.compile`` sees of
such a call, and what runs when a TAPP backend other than torch's is named for tensors that
require grad. The forward pass runs the einsum's torch program (with a named TAPP backend: its
TAPP network on the tensors' memory). The backward pass of
operand ``i`` is itself an einsum (the output gradient with the conjugated other operands),
then broadcast over labels only ``i`` has, embedded in the diagonal of repeated labels and
reshaped over size-1 broadcast dimensions. A fake implementation gives shapes and dtypes to
``torch.compile``, so compiled graphs keep the operator whole (``fullgraph=True`` works).

Examples
--------
>>> import torch
>>> a = torch.ones(2, 3, dtype=torch.float64, requires_grad=True)
>>> einsum_op("ij,j->i", [a, torch.ones(3, dtype=torch.float64)]).sum().backward()
>>> a.grad.tolist()
[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
"""

from __future__ import annotations

from typing import Any

import torch

from pytapp.analysis.subscripts import Equation, parse_subscripts
from pytapp.datatypes import datatype_of_data, promote
from pytapp.errors import ErrorCode, error_for
from pytapp.expression import cached_expression, to_numpy
from pytapp.interop.torch_einsum import run, torch_dtype
from pytapp.network import prepare_labels, result_shape

__all__ = ["einsum_op", "torch_dtype"]

#: Backend names whose forward pass is the torch program ("": none named).
TORCH_PROGRAM = ("", "auto", "torch")


def _equation(subscripts: str, operands: list[torch.Tensor]) -> Equation:
    return parse_subscripts(subscripts, [t.dim() for t in operands])


@torch.library.custom_op("pytapp::einsum", mutates_args=())
def _einsum(subscripts: str, operands: list[torch.Tensor], backend: str) -> torch.Tensor:
    if backend in TORCH_PROGRAM:
        # contiguous like the fake result, and never an input's memory (an operator's result
        # may not alias its inputs)
        found: torch.Tensor = run(subscripts, operands).contiguous()
        if any(found.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
               for t in operands):
            found = found.clone()
        return found
    arrays = [to_numpy(t, f"operand {i}") for i, t in enumerate(operands)]
    expr = cached_expression(subscripts, arrays, "auto", None, backend or None, None)
    result = expr(*operands)
    if not isinstance(result, torch.Tensor):  # pragma: no cover - operands are tensors
        raise error_for(ErrorCode.UNSUPPORTED, "the torch operator got no tensor back")
    return result


@_einsum.register_fake
def _einsum_fake(subscripts: str, operands: list[torch.Tensor], backend: str) -> torch.Tensor:
    eq = _equation(subscripts, operands)
    shape = result_shape(eq, [tuple(t.shape) for t in operands])
    dt = promote(*(datatype_of_data(t, f"operand {i}") for i, t in enumerate(operands)))
    device = operands[0].device if operands else None
    return torch.empty(shape, dtype=torch_dtype(dt), device=device)


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    subscripts, operands, backend = inputs
    ctx.subscripts, ctx.backend = subscripts, backend
    ctx.needs = [t.requires_grad for t in operands]
    ctx.save_for_backward(*operands)


def _operand_grad(eq: Equation, rename: dict[str, str], i: int,
                  operands: tuple[torch.Tensor, ...], grad: torch.Tensor,
                  backend: str) -> torch.Tensor:
    """d(sum(grad * einsum))/d(operand i), conjugated as torch expects for complex."""
    shapes = [tuple(t.shape) for t in operands]
    prepared = prepare_labels(eq, shapes)[i]
    others = [j for j in range(len(operands)) if j != i]
    elsewhere = set(eq.output).union(*(eq.inputs[j] for j in others))
    kept = "".join(ch for ch in prepared.labels if ch in elsewhere)
    terms = [eq.output, *(eq.inputs[j] for j in others)]
    sub = ",".join("".join(rename[ch] for ch in t) for t in terms) + "->" + "".join(
        rename[ch] for ch in kept)
    tensors = [grad, *(operands[j].conj() if operands[j].is_complex() else operands[j]
                       for j in others)]
    g = _einsum(sub, tensors, backend)
    full_sizes = result_shape(Equation(tuple(eq.inputs), prepared.labels), shapes)
    g = g.reshape([g.shape[kept.index(ch)] if ch in kept else 1 for ch in prepared.labels])
    g = g.expand(full_sizes)
    term = "".join(ch for axis, ch in enumerate(eq.inputs[i]) if axis not in prepared.drop)
    if prepared.diagonal:
        kept_shape = [full_sizes[prepared.labels.index(ch)] for ch in term]
        base = g.new_zeros(kept_shape)
        contiguous = base.stride()
        strides = [sum(contiguous[a] for a, c in enumerate(term) if c == ch)
                   for ch in prepared.labels]
        base.as_strided(full_sizes, strides).copy_(g)
        g = base
    g = g.reshape(shapes[i])
    target = operands[i]
    if g.is_complex() and not target.is_complex():
        g = g.real
    converted: torch.Tensor = g.to(target.dtype)
    return converted


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[None, list[torch.Tensor | None], None]:
    operands = ctx.saved_tensors
    eq = _equation(ctx.subscripts, list(operands))
    rename = eq.letter_map()
    grads: list[torch.Tensor | None] = [
        _operand_grad(eq, rename, i, operands, grad, ctx.backend) if need else None
        for i, need in enumerate(ctx.needs)
    ]
    return None, grads, None


_einsum.register_autograd(_backward, setup_context=_setup)


def einsum_op(subscripts: str, operands: list[Any], backend: str | None = None) -> Any:
    """Run an einsum on torch tensors through the ``pytapp::einsum`` operator.

    Autograd and ``torch.compile`` see one operator. Non-tensor operands become tensors
    first.

    Raises
    ------
    TappError
        As for :func:`pytapp.einsum`.
    """
    like = next(t for t in operands if isinstance(t, torch.Tensor))
    tensors = [t if isinstance(t, torch.Tensor) else torch.as_tensor(t, device=like.device)
               for t in operands]
    return _einsum(subscripts, tensors, backend or "")
