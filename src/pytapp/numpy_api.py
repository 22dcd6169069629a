"""``pytapp.einsum``: numpy.einsum's language over TAPP products, in any array library.

Every call becomes a network of pairwise TAPP products along a contraction path (opt_einsum,
cotengra, or yours), compiled once per equation and shapes and reused. One-operand einsums
(transposes, traces, diagonals, sums) are TAPP products with a scalar one. Torch tensors come
back as torch tensors; tensors that require grad go through the ``pytapp::einsum`` operator,
which autograd and ``torch.compile`` understand.

Examples
--------
>>> import numpy as np, pytapp
>>> a, b, c = np.ones((2, 3)), np.ones((3, 4)), np.ones((4, 5))
>>> pytapp.einsum("ij,jk,kl->il", a, b, c).shape
(2, 5)
>>> float(pytapp.einsum("ii", np.eye(3)))
3.0
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from pytapp.analysis.letters import LETTERS
from pytapp.errors import ErrorCode, error_for
from pytapp.expression import (
    EinsumExpression,
    cached_expression,
    is_torch,
    normalize_call,
    result_datatype,
    to_numpy,
)
from pytapp.network import PathInfo
from pytapp.typing import ArrayLike, BackendName

__all__ = ["einsum", "einsum_expression", "einsum_path", "tensordot", "transpose"]

#: Most calls :func:`einsum` remembers for its thin path (raw arguments -> expression).
THIN_CACHE_SIZE = 256
_thin: dict[Any, EinsumExpression] = {}
_thin_lock = threading.Lock()
#: Backends under which torch tensors run as torch calls (pytapp.interop.torch_einsum).
_TORCH_CALLS = (None, "auto", "torch")
_torch_einsum: Any = None


def _torch_calls() -> Any:
    global _torch_einsum
    if _torch_einsum is None:
        from pytapp.interop.torch_einsum import einsum as found

        _torch_einsum = found
    return _torch_einsum


def _needs_torch_op(operands: Sequence[Any]) -> bool:
    tensors = [x for x in operands if is_torch(x)]
    if not tensors:
        return False
    import torch

    if torch.compiler.is_compiling():
        return True
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def einsum(subscripts: Any, *operands: ArrayLike, out: ArrayLike | None = None,
           optimize: Any = "auto", memory_limit: Any = None,
           backend: BackendName | None = None, dtype: Any = None) -> ArrayLike:
    """Evaluate an Einstein summation the way ``numpy.einsum`` does, on TAPP products.

    Parameters
    ----------
    subscripts
        ``'ij,jk->ik'``, implicit output (``'ij,jk'``), ellipses (``'...ij,...jk'``); or the
        sublist form ``einsum(a, [0, 1], b, [1, 2], [0, 2])``.
    *operands
        Arrays (NumPy, torch, anything NumPy reads) and Python or NumPy scalars.
    out
        Array to write the result into (cast with ``same_kind`` if its dtype differs).
    optimize
        The contraction order: ``"auto"`` (default), ``"greedy"``, ``"optimal"``, ``"dp"``
        and opt_einsum's other names, ``True`` (greedy), ``False`` (left to right), an
        explicit path like ``[(0, 1), (0, 1)]`` (NumPy's ``['einsum_path', ...]`` too), or a
        path optimizer object (opt_einsum's, cotengra's ``HyperOptimizer``...).
    memory_limit
        Largest intermediate, in elements (``"max_input"``: the largest operand).
    backend
        TAPP backend of every product (``None``: the default, ``PYTAPP_BACKEND``).
    dtype
        Compute and result dtype; by default NumPy's promotion of the operands.

    Returns
    -------
    The result in the operands' library: a NumPy array (a NumPy scalar when 0-d), a torch
    tensor when an operand is one, a lazy dask array when an operand is one
    (:func:`pytapp.dask.einsum`).

    Raises
    ------
    TappError
        13 malformed subscripts; 4 an output label no input has; 1 extents that differ (and
        are not 1); 20 datatypes TAPP does not have (integers alone, ...); 18 an unknown
        optimizer or an invalid path.

    Examples
    --------
    >>> import numpy as np
    >>> einsum("i,i", np.arange(3.0), np.arange(3.0)).item()
    5.0
    >>> einsum(np.ones((2, 2)), [0, 1], [1, 0]).shape
    (2, 2)
    """
    if operands and is_torch(operands[0]) and backend in _TORCH_CALLS and type(
            subscripts) is str:
        return _torch_calls()(subscripts, operands, out=out, optimize=optimize,
                              memory_limit=memory_limit, dtype=dtype)
    thin_key: tuple[Any, ...] | None = None
    if out is None and type(subscripts) is str and all(type(x) is np.ndarray
                                                        for x in operands):
        thin_key = (subscripts, optimize, memory_limit, backend, dtype,
                    *(x.shape for x in operands))
        try:
            cached = _thin.get(thin_key)
        except TypeError:  # an unhashable optimizer: the general path, never remembered
            cached = thin_key = None
        if cached is not None:
            found = cached._fast_numpy(operands)
            if found is not None:
                return found
    subs, ops = normalize_call(subscripts, operands)
    if backend in _TORCH_CALLS and any(is_torch(x) for x in ops):
        return _torch_calls()(subs, ops, out=out, optimize=optimize, memory_limit=memory_limit,
                              dtype=dtype)
    if any(type(x).__module__.startswith("dask.") for x in ops):
        if out is not None:
            raise error_for(ErrorCode.UNSUPPORTED,
                            "out= is not supported for dask arrays (the result is lazy); "
                            "store it with dask.array.store or pytapp.dask.store")
        from pytapp import dask as tapp_dask

        return tapp_dask.einsum(subs, *ops, optimize=optimize, memory_limit=memory_limit,
                                backend=backend, dtype=dtype)
    if _needs_torch_op(ops):
        if out is not None:
            raise error_for(ErrorCode.UNSUPPORTED,
                            "out= is not supported for tensors that require grad; assign the "
                            "result instead")
        from pytapp.interop.torch_op import einsum_op

        return einsum_op(subs, ops, backend)
    arrays = [to_numpy(x, f"operand {i}") for i, x in enumerate(ops)]
    expr = cached_expression(subs, arrays, optimize, memory_limit, backend, dtype)
    result = expr(*ops, out=out)
    if thin_key is not None:
        with _thin_lock:
            _thin[thin_key] = expr
            while len(_thin) > THIN_CACHE_SIZE:
                _thin.pop(next(iter(_thin)))
    return result


def einsum_path(subscripts: Any, *operands: Any, optimize: Any = "greedy",
                memory_limit: Any = None, backend: BackendName | None = None,
                dtype: Any = None) -> tuple[list[Any], PathInfo]:
    """Return the contraction path of an einsum and what each step does, without running it.

    Returns NumPy's format (``['einsum_path', (0, 1), ...]``, which :func:`einsum` and
    ``numpy.einsum`` accept as ``optimize=``) and a :class:`~pytapp.network.PathInfo`, whose
    printout lists each pairwise step with its TAPP algorithm, flops and predicted time.

    Examples
    --------
    >>> import numpy as np
    >>> path, info = einsum_path("ij,jk,kl->il", np.ones((2, 3)), np.ones((3, 9)),
    ...                          np.ones((9, 1)))
    >>> path
    ['einsum_path', (1, 2), (0, 1)]
    """
    subs, ops = normalize_call(subscripts, operands)
    arrays = [to_numpy(x, f"operand {i}") for i, x in enumerate(ops)]
    expr = EinsumExpression(subs, *arrays, optimize=optimize, memory_limit=memory_limit,
                            backend=backend, dtype=dtype)
    info = expr.info(result_datatype(arrays, dtype))
    return ["einsum_path", *expr.path], info


def einsum_expression(subscripts: str, *shapes_or_arrays: Any, optimize: Any = "auto",
                      memory_limit: Any = None, backend: BackendName | None = None,
                      dtype: Any = None) -> EinsumExpression:
    """Compile an einsum for operand shapes once; call the result with arrays many times.

    Every pairwise TAPP plan is kept (one per operand layout) and intermediates reuse their
    buffers between calls.

    Examples
    --------
    >>> import numpy as np
    >>> expr = einsum_expression("ij,jk->ik", (2, 3), (3, 2))
    >>> expr(np.ones((2, 3)), np.ones((3, 2))).tolist()
    [[3.0, 3.0], [3.0, 3.0]]
    """
    return EinsumExpression(subscripts, *shapes_or_arrays, optimize=optimize,
                            memory_limit=memory_limit, backend=backend, dtype=dtype)


def _ndim(x: Any) -> int:
    shape = getattr(x, "shape", None)
    return len(shape) if shape is not None else to_numpy(x, "operand").ndim


def tensordot(a: ArrayLike, b: ArrayLike, axes: Any = 2, *,
              backend: BackendName | None = None) -> ArrayLike:
    """``numpy.tensordot`` (and the array API's) on a TAPP product.

    ``axes`` is a count (the last ``axes`` modes of ``a`` with the first of ``b``) or a pair
    of sequences of modes.

    Examples
    --------
    >>> import numpy as np
    >>> tensordot(np.ones((2, 3)), np.ones((3, 4)), axes=1).shape
    (2, 4)
    """
    na, nb = _ndim(a), _ndim(b)
    if na + nb > len(LETTERS):
        raise error_for(ErrorCode.NEGATIVE_NMODES, "tensordot takes at most 52 modes in all")
    if isinstance(axes, (int,)) and not isinstance(axes, bool):
        if not 0 <= axes <= min(na, nb):
            raise error_for(ErrorCode.NEGATIVE_NMODES,
                            f"axes={axes} does not fit operands of {na} and {nb} modes")
        ax_a, ax_b = list(range(na - axes, na)), list(range(axes))
    else:
        try:
            first, second = axes
            ax_a = [first] if isinstance(first, int) else list(first)
            ax_b = [second] if isinstance(second, int) else list(second)
        except (TypeError, ValueError) as exc:
            raise error_for(ErrorCode.NEGATIVE_NMODES,
                            f"axes={axes!r}; give an int or two sequences of modes") from exc
        if len(ax_a) != len(ax_b):
            raise error_for(ErrorCode.NEGATIVE_NMODES,
                            f"axes={axes!r} pairs {len(ax_a)} modes of a with {len(ax_b)} of b")
        ax_a = [x % na if na else x for x in ax_a]
        ax_b = [x % nb if nb else x for x in ax_b]
    la = list(LETTERS[:na])
    lb = list(LETTERS[na:na + nb])
    for i, j in zip(ax_a, ax_b, strict=True):
        lb[j] = la[i]
    out = [ch for ch in la if ch not in lb] + [ch for ch in lb if ch not in la]
    return einsum(f"{''.join(la)},{''.join(lb)}->{''.join(out)}", a, b, backend=backend)


def transpose(a: ArrayLike, axes: Sequence[int] | None = None, *,
              backend: BackendName | None = None) -> ArrayLike:
    """``numpy.transpose`` as a TAPP product (a new array, not a view).

    Examples
    --------
    >>> import numpy as np
    >>> transpose(np.ones((2, 3))).shape
    (3, 2)
    """
    n = _ndim(a)
    if n > len(LETTERS):
        raise error_for(ErrorCode.NEGATIVE_NMODES, "transpose takes at most 52 modes")
    order = list(range(n))[::-1] if axes is None else [int(x) % max(n, 1) for x in axes]
    if sorted(order) != list(range(n)):
        raise error_for(ErrorCode.NEGATIVE_NMODES,
                        f"axes={axes!r} is not a permutation of the {n} modes")
    labels = LETTERS[:n]
    return einsum(f"{labels}->{''.join(labels[i] for i in order)}", a, backend=backend)
