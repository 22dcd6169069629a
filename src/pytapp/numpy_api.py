"""``pytapp.einsum``: numpy.einsum's language over TAPP products, in any array library.

Every call becomes a network of pairwise TAPP products along a contraction path (opt_einsum,
cotengra, or yours), compiled once per equation and shapes and reused; a repeated call on NumPy
arrays of the same layouts runs the network's compiled chain in one C call. One-operand einsums
(transposes, traces, diagonals, sums) are TAPP products with a scalar one, or NumPy's view when
they only relabel. Dtypes TAPP lacks (integers, bool, long double, object) and foreign arrays
run through numpy.einsum. Torch tensors (with the default, ``auto`` or ``torch`` backend) run
as torch calls on views along the same path (:mod:`pytapp.interop.torch_einsum`), which
autograd differentiates; ``torch.compile`` sees the ``pytapp::einsum`` operator.

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

import dataclasses
import functools
import math
import sys
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from pytapp import backends
from pytapp.analysis.letters import LETTERS
from pytapp.analysis.subscripts import Equation, parse_subscripts
from pytapp.datatypes import Datatype, datatype_of, datatype_of_data, torch_view
from pytapp.direct import (
    DirectCalls,
    TensordotModes,
    first_tensordot,
    matmul_pair,
    tensordot_pair,
)
from pytapp.errors import ErrorCode, TappError, error_for
from pytapp.expression import (
    EinsumExpression,
    cached_expression,
    forget_expressions,
    is_torch,
    normalize_call,
    path_key,
    plain_out,
    result_datatype,
    to_library,
    to_numpy,
)
from pytapp.handle import default_backend_name
from pytapp.kernels.program import layout_key as _key_of
from pytapp.network import PathInfo, result_shape
from pytapp.operands import torch_bits
from pytapp.typing import ArrayLike, BackendName

__all__ = ["einsum", "einsum_expression", "einsum_path", "tensordot", "transpose"]

#: Most calls :func:`einsum` remembers for its thin path (raw arguments -> expression).
THIN_CACHE_SIZE = 256
_thin: dict[Any, EinsumExpression] = {}
#: Raw arguments with the operands' layouts -> the network as compiled programs.
_chains: dict[Any, Any] = {}
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


#: numpy.einsum's ``order=`` values (any case) and ``casting=`` values.
ORDERS = ("K", "A", "C", "F")
CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")


def _deliver(found: np.ndarray | None, out: np.ndarray | None) -> Any:
    """Return a thin path's result as einsum returns it, or ``None`` (the general path).

    With ``out``: copied into it when of its exact shape and dtype (the general path judges
    any other ``out``: broadcasting, casts, errors).
    """
    if found is None:
        return None
    if out is None:
        return found[()] if found.ndim == 0 else found
    if found.shape != out.shape or found.dtype != out.dtype:
        return None
    np.copyto(out, found)
    return out


def _out_key(layout_key: tuple[Any, ...], out: np.ndarray) -> tuple[Any, ...]:
    """Return the key of the compiled network that writes the result into ``out``'s layout."""
    return (layout_key, out.dtype.char, out.shape, out.strides)


def _learn_chain(layout_key: tuple[Any, ...], expr: EinsumExpression, ops: Sequence[Any],
                 out: np.ndarray | None) -> None:
    """Keep the network ``expr`` compiled for these layouts (and ``out``'s), once it has one.

    A network is compiled when its choice settles, which may be a later call than the one
    that remembered ``expr``: the thin path asks again after each call it serves.
    """
    found_chain = expr.chain_for(ops, out)
    if found_chain is not None:
        with _thin_lock:
            _chains[layout_key if out is None else _out_key(layout_key, out)] = found_chain
            while len(_chains) > THIN_CACHE_SIZE:
                _chains.pop(next(iter(_chains)))


def _remember_thin(thin_key: tuple[Any, ...], layout_key: tuple[Any, ...] | None,
                   expr: EinsumExpression, ops: Sequence[Any],
                   out: np.ndarray | None = None) -> None:
    """Keep ``expr`` (and its compiled network, once built) for the thin path of later calls.

    With ``out`` (see :func:`pytapp.expression.plain_out`): the network that writes into
    arrays of ``out``'s layout.
    """
    with _thin_lock:
        _thin[thin_key] = expr
        while len(_thin) > THIN_CACHE_SIZE:
            _thin.pop(next(iter(_thin)))
    if layout_key is not None:
        _learn_chain(layout_key, expr, ops, out)


def einsum(*operands: Any, out: ArrayLike | None = None, optimize: Any = "auto",
           memory_limit: Any = None, backend: BackendName | None = None, dtype: Any = None,
           order: str = "K", casting: str = "safe") -> ArrayLike:
    """Evaluate an Einstein summation the way ``numpy.einsum`` does, on TAPP products.

    Called as ``einsum(subscripts, *operands, ...)``: the subscripts are ``'ij,jk->ik'``,
    implicit output (``'ij,jk'``), ellipses (``'...ij,...jk'``), as a string or bytes; or the
    sublist form ``einsum(a, [0, 1], b, [1, 2], [0, 2])``.

    What runs where: operands whose compute dtype is a TAPP datatype (float16, bfloat16,
    float32, float64, complex64, complex128) run as TAPP products; every other dtype numpy
    accepts (integers and bool, exactly; long double, object...) runs through
    ``numpy.einsum``, with the same arguments. One-operand calls that only relabel or take a
    diagonal return numpy's view, as ``numpy.einsum`` does. Operands that are neither arrays
    nor tensors but implement ``__array_function__`` or only duck-type an array (lazy arrays)
    go to ``numpy.einsum``, which dispatches to their library.

    Parameters
    ----------
    *operands
        The subscripts, then arrays (NumPy, torch, anything NumPy reads) and Python or NumPy
        scalars.
    out
        Array to write the result into: a NumPy array (a torch tensor for torch operands),
        whose shape is the result's (or broadcasts it, where the result has extent 1); the
        result is cast to its dtype under ``casting``.
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
    order
        Memory layout of a new result, as for NumPy: ``"K"`` (C order unless the largest
        operand is laid out otherwise, then its order), ``"A"``, ``"C"`` or ``"F"``.
    casting
        Which casts of operands to the compute dtype, and of the result to ``out``, are
        allowed: ``"no"``, ``"equiv"``, ``"safe"`` (default), ``"same_kind"``, ``"unsafe"``.

    Returns
    -------
    The result in the operands' library: a NumPy array (a NumPy scalar when 0-d), a torch
    tensor when an operand is one, a lazy dask array when an operand is one
    (:func:`pytapp.dask.einsum`); ``out`` when given.

    Raises
    ------
    TappError
        13 malformed subscripts of any type, unknown ``order`` or ``casting`` (also a
        ``TypeError`` where NumPy raises one); 4 an output label no input has; 1 extents that
        differ (and are not 1); 20 a ``dtype`` that is not one, a cast ``casting`` forbids, an
        ``out`` that is not an array of the operands' library or has another shape (also a
        ``ValueError`` then); 22 a read-only ``out``; 18 an unknown optimizer or an invalid
        path.

    Examples
    --------
    >>> import numpy as np
    >>> einsum("i,i", np.arange(3.0), np.arange(3.0)).item()
    5.0
    >>> einsum(np.ones((2, 2)), [0, 1], [1, 0]).shape
    (2, 2)
    >>> int(einsum("i,i->", np.arange(4), np.arange(4)))  # integers: numpy.einsum, exact
    14
    """
    thin_key: tuple[Any, ...] | None = None
    layout_key: tuple[Any, ...] | None = None
    if (out is None or (type(out) is np.ndarray and out.flags.writeable)) and order == "K" and \
            casting == "safe" and len(operands) > 1 and \
            type(operands[0]) is str and type(operands[1]) is np.ndarray:  # (tensors: traced)
        # an explicit path (a list) as a tuple: a reused path hits these caches too
        opt = optimize if type(optimize) is str else path_key(optimize)
        # None unless every operand is exactly an ndarray
        layout_key = _key_of((operands[0], opt, memory_limit, backend, dtype), operands, 1)
        # out that takes the result directly (else a result is computed and copied into it)
        into = out if type(out) is np.ndarray and layout_key is not None else None
        chain = None
        if layout_key is not None:
            try:
                chain = _chains.get(layout_key if into is None else _out_key(layout_key, into))
                passed = None if out is not None else _numpy_calls.get(layout_key)
            except TypeError:  # an unhashable optimizer: the general path, never remembered
                layout_key = passed = None
            if passed is not None:  # numpy.einsum's own call (integers, views), as decided
                numpy_eq, numpy_dtype, numpy_opt = passed
                return _numpy_einsum_call(numpy_eq, operands[1:], numpy_dtype, numpy_opt)
        if chain is not None:  # the whole network as compiled programs for these layouts
            found = _deliver(chain(*operands[1:]), out) if into is None else chain(
                *operands[1:], into)
            if found is not None:
                return found
        if layout_key is not None:
            inputs = operands[1:]
            # C-contiguous inputs: one expression for every dtype; other layouts decide the
            # result's layout (order="K"), so they are part of the key
            thin_key = (operands[0], opt, memory_limit, backend, dtype,
                        *(x.shape for x in inputs)) if all(
                x.flags.c_contiguous for x in inputs) else layout_key
            cached = _thin.get(thin_key)
            if cached is not None:
                if into is not None and into.shape == cached.network.output_shape():
                    found = cached._fast_numpy(inputs, into)
                else:
                    found = _deliver(cached._fast_numpy(inputs), out)
                    into = None
                if found is not None:
                    if into is not None or out is None:  # compiled since: later calls take it
                        _learn_chain(layout_key, cached, inputs, into)
                    return found
            else:
                direct = _pairs.get(layout_key)
                found = None if direct is None else _deliver(direct.run(*inputs), out)
                if found is not None:  # not worth a plan yet (pytapp.direct)
                    return found
    if out is not None and is_torch(out):
        _refuse_bits(out)
    if (len(operands) > 1 and type(operands[0]) is str and is_torch(operands[1])
            and backend in _TORCH_CALLS and _torch_datatypes(operands[1:])):
        return _torch_calls()(operands[0], operands[1:], out=out, optimize=optimize,
                              memory_limit=memory_limit, dtype=dtype)
    subs, ops = _normalize(operands)
    layout, casting, want = _options(order, casting, dtype)
    if any(_is_foreign(x) for x in ops):
        lazy = next((f for f in (_lazy_function("einsum", x) for x in ops) if f), None)
        if lazy is not None and out is None:
            return lazy(subs, *ops)
        return _numpy_einsum(subs, ops, out, optimize, want, layout, casting)
    if backend in _TORCH_CALLS and any(is_torch(x) for x in ops) and _torch_datatypes(ops):
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
    arrays = [_plain_numpy(x, f"operand {i}") for i, x in enumerate(ops)]
    equation = parse_subscripts(subs, [a.ndim for a in arrays])
    shape = result_shape(equation, [a.shape for a in arrays])
    like = next((x for x in ops if is_torch(x)), None)
    target = _check_out(out, like, shape)
    compute = _compute_dtype(arrays, want)
    # numpy.einsum's optimized path assigns a 0-d result to out without checking the cast
    _check_casts(arrays, compute, None if shape == () and optimize is not False else target,
                 casting)
    tapp = _tapp_datatype(compute)
    if tapp is None or (len(arrays) == 1 and target is None and compute == arrays[0].dtype
                        and (_relabels_only(equation) or _small_pass(equation, arrays[0]))):
        numpy_eq, numpy_opt = _ascii(equation), _numpy_optimize(optimize, len(arrays))
        numpy_einsum: Any = np.einsum  # its overloads do not cover run-time options
        result = numpy_einsum(numpy_eq, *arrays, out=target, dtype=want, order=layout,
                              casting=casting, optimize=numpy_opt)
        if out is not None:
            return out
        if layout_key is not None and like is None:  # later calls: straight to numpy.einsum
            with _thin_lock:
                if len(_numpy_calls) >= THIN_CACHE_SIZE:
                    _numpy_calls.clear()
                _numpy_calls[layout_key] = (numpy_eq, want, numpy_opt)
        return result if like is None else to_library(np.asarray(result), like)
    final = tapp
    if tapp in (Datatype.F16, Datatype.BF16) and _lacks(backend_name_of(backend), tapp):
        # the backend has no 16-bit product (tblis): compute in float32, where numpy.einsum
        # accumulates float16 too, and round the result once
        want, tapp = np.dtype(np.float32), Datatype.F32
    folded = _fold_broadcast_sums(equation, arrays, tapp.numpy_dtype)
    if folded is not None:
        subs, arrays = folded
        ops = arrays if like is None else [torch_view(a) for a in arrays]
    if (layout_key is not None and folded is None and target is None and final is tapp
            and len(arrays) == 2 and arrays[0].dtype == tapp.numpy_dtype
            and layout_key not in _pairs and backend_name_of(backend) in _MATMUL_BACKENDS
            and _allocate(shape, tapp, layout, equation, arrays) is None):
        pair = matmul_pair(equation, arrays[0], arrays[1])
        if pair is not None:  # seen once: not worth a plan yet (pytapp.direct)
            direct = _remember_direct(layout_key, DirectCalls(pair))
            found = direct.run(arrays[0], arrays[1])
            assert found is not None  # a first call always runs
            return found[()] if found.ndim == 0 else found
    expr = cached_expression(subs, arrays, optimize, memory_limit, backend, want)
    if target is not None and target.shape == shape and target.dtype == tapp.numpy_dtype:
        expr(*ops, out=target)
        if thin_key is not None and folded is None and final is tapp and out is target:
            # later calls: one lookup, then written into out (or computed and copied there)
            _remember_thin(thin_key, layout_key, expr, ops,
                           target if plain_out(target, shape) else None)
        return out
    into = _allocate(shape, tapp, layout, equation, arrays)
    if into is None and target is None and final is tapp:
        result = expr(*ops)
        if thin_key is not None and folded is None:
            _remember_thin(thin_key, layout_key, expr, ops)
        return result
    if into is None:
        into = np.empty(shape, dtype=tapp.numpy_dtype)
    expr(*ops, out=into)
    if target is not None:
        np.copyto(target, into, casting="unsafe")  # the cast was checked above
        return out
    if final is not tapp:
        into = into.astype(final.numpy_dtype, order="K")
    if like is None and into.ndim == 0:
        return into[()]
    return to_library(into, like)


@functools.lru_cache(maxsize=32)
def _lacks(name: str, dt: Datatype) -> bool:
    """Whether backend ``name`` states that it has no product of datatype ``dt``."""
    if name.startswith("clib"):
        return False  # a C library says so when a product is created
    try:
        return dt not in backends.get(name).capabilities.datatypes
    except TappError:
        return False  # an unknown backend: the product's creation reports it


#: The backends whose small products run as matmuls before they are planned (pytapp.direct).
_MATMUL_BACKENDS = ("auto", "blas")
#: Raw arguments with the operands' layouts -> the product's matmul and its calls so far
#: (pytapp.direct), kept after it is planned so it is not made again.
_pairs: dict[Any, DirectCalls] = {}


#: Raw arguments with the operands' layouts -> numpy.einsum's call that einsum passed them to
#: (integer and boolean operands, one operand only permuted or viewed along a diagonal): its
#: equation in ASCII letters, ``dtype=`` and ``optimize=`` (order "K", casting "safe").
_numpy_calls: dict[Any, tuple[str, Any, Any]] = {}


def _numpy_einsum_call(eq: str, inputs: Sequence[np.ndarray], dtype: Any, optimize: Any) -> Any:
    """Return ``numpy.einsum``'s result of a call whose arguments were checked before."""
    if dtype is None and optimize is False:  # numpy's defaults: its shortest call
        return np.einsum(eq, *inputs)
    numpy_einsum: Any = np.einsum  # its overloads do not cover run-time options
    return numpy_einsum(eq, *inputs, dtype=dtype, order="K", casting="safe", optimize=optimize)


def _remember_direct(key: Any, direct: DirectCalls) -> DirectCalls:
    """Keep ``direct`` as the matmul of ``key``'s calls (the cache is bounded)."""
    with _thin_lock:
        if len(_pairs) >= 4 * THIN_CACHE_SIZE:
            _pairs.clear()
        _pairs[key] = direct
    return direct


def _layout_key(subscripts: str, inputs: Sequence[np.ndarray], opt: Any, memory_limit: Any,
                backend: Any, dtype: Any) -> tuple[Any, ...] | None:
    """Return the thin path's key of a call on NumPy arrays: arguments, inputs' layouts.

    The key ``einsum`` builds for the same call (``None`` unless every input is exactly an
    ndarray).
    """
    return _key_of((subscripts, opt, memory_limit, backend, dtype), tuple(inputs), 0)


def forget_calls() -> None:
    """Forget the calls einsum and tensordot remembered (thin paths, expressions, budgets).

    For benchmarks that time planning as a new process would pay it; plans themselves are
    dropped by :func:`pytapp.clear_plan_cache`.

    Examples
    --------
    >>> forget_calls()
    """
    with _thin_lock:
        for cache in (_thin, _chains, _pairs, _numpy_calls, _tensordot_calls,
                      _tensordot_modes):
            cache.clear()
    forget_expressions()  # one-shot calls' expressions: their tuning budgets start afresh


def backend_name_of(backend: BackendName | None) -> str:
    """Return the backend name ``backend=`` selects (``None``: the default)."""
    return backend if isinstance(backend, str) and backend else default_backend_name()


def _normalize(operands: Sequence[Any]) -> tuple[str, list[Any]]:
    """Subscripts (a string) and operands of a call in either form.

    Raises
    ------
    InvalidDescriptorError
        Code 13 (also a ``TypeError`` for subscripts of a wrong type) for a call without
        operands, bytes that are not ASCII, or subscripts that are neither a string nor
        the sublist form.
    """
    if not operands:
        raise error_for(ErrorCode.NEGATIVE_NMODES,
                        "einsum takes subscripts and operands, like einsum('ij,jk->ik', a, b)")
    subscripts = operands[0]
    if isinstance(subscripts, (bytes, bytearray)):
        try:
            subscripts = subscripts.decode("ascii")
        except UnicodeDecodeError as exc:
            raise error_for(ErrorCode.NEGATIVE_NMODES,
                            f"subscripts {bytes(subscripts)!r} are not ASCII; give a string "
                            "like 'ij,jk->ik'", also=TypeError) from exc
    if isinstance(subscripts, str):
        return subscripts, list(operands[1:])
    if len(operands) < 2:
        raise error_for(ErrorCode.NEGATIVE_NMODES,
                        f"subscripts must be a string like 'ij,jk->ik' (or the sublist form "
                        f"einsum(a, [0, 1], b, [1, 2])), not {type(subscripts).__name__}",
                        also=TypeError)
    return normalize_call(subscripts, operands[1:])


def _options(order: Any, casting: Any, dtype: Any) -> tuple[str, str, np.dtype[Any] | None]:
    """Validate ``order``, ``casting`` and ``dtype`` as numpy.einsum does."""
    if not isinstance(order, str) or order.upper() not in ORDERS:
        raise error_for(ErrorCode.NEGATIVE_NMODES,
                        f"order={order!r}; give one of 'K', 'A', 'C' or 'F'")
    if not isinstance(casting, str) or casting not in CASTINGS:
        raise error_for(ErrorCode.NEGATIVE_NMODES,
                        f"casting={casting!r}; give one of {', '.join(map(repr, CASTINGS))}")
    want = None
    if dtype is not None:
        try:
            want = np.dtype(dtype)
        except (TypeError, ValueError) as exc:
            raise error_for(ErrorCode.OPERAND_MISMATCH,
                            f"dtype={dtype!r} is not a dtype; give one like 'float64'") from exc
    return order.upper(), casting, want


def _is_foreign(x: Any) -> bool:
    """Whether ``x`` is an array of another library, or a duck-typed (lazy) array.

    NumPy arrays and scalars, Python numbers and sequences, torch tensors and dask arrays are
    not: they run here.
    """
    if isinstance(x, (np.ndarray, np.generic, int, float, complex, list, tuple)) or is_torch(x):
        return False
    if type(x).__module__.startswith("dask.") or hasattr(x, "__cuda_array_interface__"):
        return False  # dask runs here; device arrays are refused (error 20), never copied
    if hasattr(x, "__array_function__"):
        return True
    readable = any(hasattr(x, name) for name in (
        "__array__", "__array_interface__", "__array_struct__", "__dlpack__", "__buffer__"))
    return not readable and hasattr(x, "shape")


def _lazy_function(name: str, x: Any) -> Any:
    """Return ``name`` of ``x``'s own library when numpy cannot dispatch ``x``, else ``None``.

    autoray's lazy arrays (quimb traces contractions with them, and cotengra hands them to the
    functions of its ``implementation=`` hook) have no ``__array_function__``: numpy would
    read each as one object element. When autoray is loaded and knows ``x``'s library, its
    function is the one to call.
    """
    autoray = sys.modules.get("autoray")
    if autoray is None or not _is_foreign(x) or hasattr(x, "__array_function__"):
        return None
    try:
        return autoray.get_lib_fn(autoray.infer_backend(x), name)
    except (ImportError, AttributeError, KeyError, TypeError, ValueError):
        return None  # a library autoray does not know: numpy's function


def _plain_numpy(x: Any, role: str) -> np.ndarray:
    """Return operand data as a NumPy array of any dtype (torch tensors shared, not copied)."""
    if isinstance(x, np.ndarray):
        return x
    if is_torch(x):
        try:
            datatype_of_data(x, role)
        except TappError:  # no TAPP datatype (integers, bool): numpy.einsum reads it
            if x.device.type != "cpu":
                raise
            plain: np.ndarray = x.detach().resolve_conj().resolve_neg().numpy()
            return plain
        return to_numpy(x, role)
    if isinstance(x, (list, tuple)) or not hasattr(x, "dtype"):
        try:
            return np.asarray(x)
        except Exception as exc:  # any foreign object: report it, whatever it raised
            raise error_for(ErrorCode.OPERAND_MISMATCH,
                            f"{role}: {type(x).__name__} is not array data; pass a NumPy "
                            "array or a torch tensor") from exc
    return to_numpy(x, role)


def _torch_datatypes(ops: Sequence[Any]) -> bool:
    """Whether every torch operand has a TAPP datatype (others go through numpy.einsum)."""
    for x in ops:
        if is_torch(x) and x.dtype not in _TORCH_TAPP_DTYPES:
            if not (x.is_floating_point() or x.is_complex()):
                return False
            _TORCH_TAPP_DTYPES.add(x.dtype)
    return True


#: torch dtypes seen to be floating point or complex (the check above, once per dtype).
_TORCH_TAPP_DTYPES: set[Any] = set()


def _refuse_bits(out: Any) -> None:
    """Raise 20 for a torch ``out`` with the conjugate or negative bit (it cannot be written)."""
    conj, neg = torch_bits(out)
    if conj or neg:
        raise error_for(ErrorCode.OPERAND_MISMATCH,
                        f"out is a torch view with the {'conjugate' if conj else 'negative'} bit "
                        "set, which pytapp cannot write through; pass a plain tensor (and "
                        "conjugate or negate the result yourself)")


def _check_out(out: Any, like: Any, shape: tuple[int, ...]) -> np.ndarray | None:
    """Return ``out`` as a NumPy view after numpy.einsum's checks.

    Raises
    ------
    TappError
        20 (a ``TypeError``) when ``out`` is not an array of the operands' library; 20 (a
        ``ValueError``) when its shape neither is nor broadcasts the result's; 22 when it is
        read-only.
    """
    if out is None:
        return None
    if not isinstance(out, np.ndarray) and not (like is not None and is_torch(out)):
        library = "a NumPy array" if like is None else "a NumPy array or a torch tensor"
        raise error_for(ErrorCode.OPERAND_MISMATCH,
                        f"out is a {type(out).__name__}; out= must be {library} (or None)")
    target = _plain_numpy(out, "out")
    if not target.flags.writeable:
        raise error_for(ErrorCode.READ_ONLY,
                        "out is read-only; pass a writeable array (or no out=)")
    if target.ndim != len(shape) or any(t != r and r != 1 for t, r in zip(target.shape, shape,
                                                                          strict=True)):
        raise error_for(ErrorCode.OPERAND_MISMATCH,
                        f"out has shape {target.shape} but the result has shape {shape}; pass "
                        "an out of the result's shape", also=ValueError)
    return target


def _compute_dtype(arrays: Sequence[np.ndarray], want: np.dtype[Any] | None) -> np.dtype[Any]:
    """Return the compute dtype: ``dtype=``, else NumPy's (TAPP's) promotion."""
    if want is not None:
        return want
    try:
        return result_datatype(arrays).numpy_dtype
    except TappError:
        pass
    try:
        return np.result_type(*arrays)
    except TypeError as exc:
        raise error_for(ErrorCode.OPERAND_MISMATCH,
                        f"operands of dtypes {[str(a.dtype) for a in arrays]} have no common "
                        "dtype; convert them to one") from exc


def _check_casts(arrays: Sequence[np.ndarray], compute: np.dtype[Any],
                 target: np.ndarray | None, casting: str) -> None:
    """Raise error 20 (a ``TypeError``) for a cast that ``casting`` forbids."""
    casts = [(f"operand {i}", a.dtype, compute) for i, a in enumerate(arrays)]
    if target is not None:
        casts.append(("the result", compute, target.dtype))
    for who, source, dest in casts:
        try:
            allowed = np.can_cast(source, dest, casting)  # type: ignore[arg-type]
        except TypeError:  # dtypes numpy cannot compare (extension types): numpy decides
            continue
        if not allowed:
            raise error_for(ErrorCode.OPERAND_MISMATCH,
                            f"{who} would be cast from {source} to {dest}, which "
                            f"casting={casting!r} forbids; pass casting='same_kind' or "
                            "'unsafe', or a matching dtype=/out=")


def _tapp_datatype(dtype: np.dtype[Any]) -> Datatype | None:
    try:
        return datatype_of(dtype)
    except TappError:
        return None


def _relabels_only(equation: Equation) -> bool:
    """Whether a one-operand equation only permutes or takes diagonals (a view in NumPy)."""
    return set(equation.inputs[0]) == set(equation.output)


#: One operand whose labels span at most this many elements (a trace, a short sum) is
#: numpy.einsum's single pass: 3000 diagonal elements of a 3000 x 3000 F64 matrix summed in
#: 21 us, where a TAPP product's planned call cost 76 us.
ONE_PASS_MAX = 1 << 16
_ONE_PASS_DTYPES = frozenset(np.dtype(t) for t in ("f4", "f8", "c8", "c16"))


def _small_pass(equation: Equation, a: np.ndarray) -> bool:
    """Whether a one-operand equation reads few elements of ``a`` (its labels' extents)."""
    if a.dtype not in _ONE_PASS_DTYPES:
        return False
    extents = dict(zip(equation.inputs[0], a.shape, strict=True))
    return bool(math.prod(extents.values()) <= ONE_PASS_MAX)


def _ascii(equation: Equation) -> str:
    """Return the equation in ASCII letters, explicit (what numpy.einsum reads)."""
    rename = equation.letter_map()
    terms = ["".join(rename[ch] for ch in term) for term in equation.inputs]
    return ",".join(terms) + "->" + "".join(rename[ch] for ch in equation.output)


def _numpy_optimize(optimize: Any, n: int) -> Any:
    """``optimize=`` as numpy.einsum takes it (a path pytapp computes for other optimizers)."""
    if isinstance(optimize, bool) or optimize in ("greedy", "optimal"):
        return optimize
    if isinstance(optimize, (list, tuple)) and optimize and not isinstance(optimize[0], str):
        return ["einsum_path", *optimize]
    if isinstance(optimize, (list, tuple)) and optimize and optimize[0] == "einsum_path":
        return list(optimize)
    if isinstance(optimize, tuple) and len(optimize) == 2:
        return optimize
    return n > 2  # "auto" and other optimizers: numpy's greedy path beyond two operands


def _numpy_einsum(subs: str, ops: Sequence[Any], out: Any, optimize: Any,
                  want: np.dtype[Any] | None, layout: str, casting: str) -> Any:
    """numpy.einsum on operands of another library (it dispatches to their einsum)."""
    kwargs: dict[str, Any] = {"dtype": want, "order": layout, "casting": casting}
    if out is not None:
        kwargs["out"] = out
    return np.einsum(subs, *ops, optimize=_numpy_optimize(optimize, len(ops)), **kwargs)


def _fold_broadcast_sums(equation: Equation, arrays: Sequence[np.ndarray],
                         compute: np.dtype[Any]) -> tuple[str, list[np.ndarray]] | None:
    """Sum over a broadcast (zero-stride) mode as one multiplication by its extent.

    A label that only one operand has, once, on a zero-stride mode, and that the output
    lacks, adds the same values ``extent`` times: the operand is read at index 0 of that mode
    and the result is multiplied by the extent (one rounding instead of ``extent`` additions,
    and no copy of the broadcast). ``None`` when no mode folds.
    """
    counts: dict[str, int] = {}
    for term in equation.inputs:
        for ch in term:
            counts[ch] = counts.get(ch, 0) + 1
    factor = 1
    terms: list[str] = []
    views: list[np.ndarray] = []
    for term, arr in zip(equation.inputs, arrays, strict=True):
        drop = [axis for axis, ch in enumerate(term) if arr.strides[axis] == 0
                and arr.shape[axis] > 1 and counts[ch] == 1 and ch not in equation.output]
        for axis in drop:
            factor *= arr.shape[axis]
        views.append(arr[(*(0 if axis in drop else slice(None) for axis in range(arr.ndim)),
                          Ellipsis)])
        terms.append("".join(ch for axis, ch in enumerate(term) if axis not in drop))
    if factor == 1:
        return None
    folded = Equation((*terms, ""), equation.output)
    return _ascii(folded), [*views, np.asarray(factor, dtype=compute)]


def _allocate(shape: tuple[int, ...], dt: Datatype, layout: str, equation: Equation,
              arrays: Sequence[np.ndarray]) -> np.ndarray | None:
    """Return a new result array in the memory order ``order=`` asks for (``None``: any).

    ``K``: any order (``None``: the layout the last product writes, as numpy.einsum returns
    tensordot's transposed view) when the largest operand is C-contiguous, else that
    operand's memory order for the labels it has (the others innermost); ``C``; ``A``: F when
    every operand is F-contiguous, else C.
    """
    if layout == "A":
        f_order = all(a.flags.f_contiguous for a in arrays) and not all(
            a.flags.c_contiguous for a in arrays)
        layout = "F" if f_order else "C"
    if layout == "C":
        return np.empty(shape, dtype=dt.numpy_dtype)
    if layout == "F":
        return np.empty(shape, dtype=dt.numpy_dtype, order="F")
    big = max(range(len(arrays)), key=lambda i: arrays[i].size, default=None)
    if big is None or arrays[big].flags.c_contiguous:
        return None
    term, arr = equation.inputs[big], arrays[big]
    stride = {ch: abs(arr.strides[axis]) for axis, ch in enumerate(term) if arr.shape[axis] > 1}
    out = equation.output
    # slowest first: labels of the big operand by falling stride, then the others
    ranked = sorted(range(len(out)), key=lambda k: (out[k] not in stride,
                                                    -stride.get(out[k], 0)))
    base = np.empty(tuple(shape[k] for k in ranked), dtype=dt.numpy_dtype)
    return base.transpose(np.argsort(ranked))


def einsum_path(subscripts: Any, *operands: Any, optimize: Any = "greedy",
                memory_limit: Any = None, backend: BackendName | None = None,
                dtype: Any = None) -> tuple[list[Any], PathInfo]:
    """Return the contraction path of an einsum and what each step does, without running it.

    Returns NumPy's format (``['einsum_path', (0, 1), ...]``, which :func:`einsum` and
    ``numpy.einsum`` accept as ``optimize=``) and a :class:`~pytapp.network.PathInfo`, whose
    printout lists each pairwise step with its TAPP algorithm, flops and predicted time; for
    a dtype TAPP lacks (integers, bool, long double, object) each step says that
    ``numpy.einsum`` runs it.

    Examples
    --------
    >>> import numpy as np
    >>> path, info = einsum_path("ij,jk,kl->il", np.ones((2, 3)), np.ones((3, 9)),
    ...                          np.ones((9, 1)))
    >>> path
    ['einsum_path', (1, 2), (0, 1)]
    >>> _, info = einsum_path("ij,jk->ik", np.ones((2, 3), int), np.ones((3, 4), int))
    >>> info.algorithms
    ('numpy.einsum (int64 has no TAPP datatype)',)
    """
    subs, ops = _normalize((subscripts, *operands))
    arrays = [_plain_numpy(x, f"operand {i}") for i, x in enumerate(ops)]
    compute = _compute_dtype(arrays, _options("K", "safe", dtype)[2])
    tapp = _tapp_datatype(compute)
    expr = EinsumExpression(subs, *(a.shape for a in arrays), optimize=optimize,
                            memory_limit=memory_limit, backend=backend,
                            dtype=None if tapp is None else tapp)
    if tapp is not None:
        return ["einsum_path", *expr.path], expr.info(tapp)
    info = expr.info(Datatype.F64)
    where = f"numpy.einsum ({compute} has no TAPP datatype)"
    info = dataclasses.replace(info, algorithms=(where,) * len(info.steps),
                               predicted=(None,) * len(info.steps))
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
    return _UserExpression(subscripts, *shapes_or_arrays, optimize=optimize,
                           memory_limit=memory_limit, backend=backend, dtype=dtype)


class _UserExpression(EinsumExpression):
    """The expression :func:`einsum_expression` returns: torch tensors as :func:`einsum` runs them.

    With the default, ``auto`` or ``torch`` backend, tensors of floating or complex dtypes run
    as torch calls on views along the expression's path (CPU and CUDA alike, differentiated by
    autograd); with another backend, tensors that require grad go through the
    ``pytapp::einsum`` operator. Everything else runs the expression's TAPP network. (The
    expressions the front ends keep for themselves are plain :class:`EinsumExpression`: the
    operator's forward runs one of them on tensors that no longer require grad.)
    """

    def __init__(self, subscripts: str, *shapes_or_arrays: Any, optimize: Any = "auto",
                 memory_limit: Any = None, backend: str | None = None,
                 dtype: Any = None) -> None:
        super().__init__(subscripts, *shapes_or_arrays, optimize=optimize,
                         memory_limit=memory_limit, backend=backend, dtype=dtype)
        self._requested, self._requested_dtype = backend, dtype
        #: The torch programs of this expression's path, per operand layout (shape, strides,
        #: dtype, device of each tensor).
        self._programs: dict[tuple[Any, ...], Any] = {}

    def __call__(self, *operands: Any, out: Any = None) -> Any:
        """Contract the operands (see :meth:`EinsumExpression.__call__`)."""
        if any(is_torch(x) for x in operands):
            shapes = self.network.shapes
            for i, x in enumerate(operands[:len(shapes)]):
                if is_torch(x) and tuple(x.shape) != shapes[i]:
                    raise error_for(ErrorCode.OPERAND_MISMATCH,
                                    f"operand {i} has shape {tuple(x.shape)} but the expression "
                                    f"was compiled for {shapes[i]}; compile another expression")
            if (len(operands) == len(shapes) and self._requested in _TORCH_CALLS
                    and _torch_datatypes(operands)):
                if out is None and all(is_torch(x) for x in operands):
                    program = self._torch_program(operands)
                    if program is not None:
                        return program(operands)
                return _torch_calls()(self.subscripts, operands, out=out, optimize=self.path,
                                      dtype=self._requested_dtype)
            if _needs_torch_op(operands):
                if out is not None:
                    raise error_for(ErrorCode.UNSUPPORTED,
                                    "out= is not supported for tensors that require grad; "
                                    "assign the result instead")
                from pytapp.interop.torch_op import einsum_op

                return einsum_op(self.subscripts, list(operands), self._requested)
        return super().__call__(*operands, out=out)

    def _torch_program(self, tensors: Sequence[Any]) -> Any:
        """Return the torch program of these layouts (``None`` under ``torch.compile``)."""
        import torch

        if torch.compiler.is_compiling():  # the pytapp::einsum operator (through einsum)
            return None
        key = tuple((t.shape, t.stride(), t.dtype, t.device) for t in tensors)
        found = self._programs.get(key)
        if found is None:
            from pytapp.interop.torch_einsum import plan

            found = plan(self.subscripts, tensors, optimize=self.path,
                         dtype=self._requested_dtype)
            if len(self._programs) >= THIN_CACHE_SIZE:
                self._programs.clear()
            self._programs[key] = found
        return found


def _ndim(x: Any) -> int:
    shape = getattr(x, "shape", None)
    return len(shape) if shape is not None else _plain_numpy(x, "operand").ndim


def _axes_of(axes: Any, na: int, nb: int) -> tuple[list[int], list[int]]:
    """numpy.tensordot's ``axes``: the modes of ``a`` and of ``b`` it pairs."""
    plain = _plain_axes(axes, na, nb)
    if plain is not None:
        return plain
    if isinstance(axes, (int, np.integer)) and not isinstance(axes, bool):
        count = int(axes)
        if not 0 <= count <= min(na, nb):
            raise error_for(ErrorCode.NEGATIVE_NMODES,
                            f"axes={axes} does not fit operands of {na} and {nb} modes")
        return list(range(na - count, na)), list(range(count))
    try:
        first, second = axes
        ax_a = [int(first)] if isinstance(first, (int, np.integer)) else [int(x) for x in first]
        ax_b = [int(second)] if isinstance(second, (int, np.integer)) else [
            int(x) for x in second]
    except (TypeError, ValueError) as exc:
        raise error_for(ErrorCode.NEGATIVE_NMODES,
                        f"axes={axes!r}; give an int or two sequences of modes") from exc
    if len(ax_a) != len(ax_b):
        raise error_for(ErrorCode.NEGATIVE_NMODES,
                        f"axes={axes!r} pairs {len(ax_a)} modes of a with {len(ax_b)} of b")
    out = []
    for modes, n, name in ((ax_a, na, "a"), (ax_b, nb, "b")):
        if modes and (min(modes) < -n or max(modes) >= n or len(set(modes)) != len(modes)
                      or (min(modes) < 0 and len({x % n for x in modes}) != len(modes))):
            raise error_for(ErrorCode.NEGATIVE_NMODES,
                            f"axes={axes!r} names modes {modes} of {name}, which has {n} "
                            "modes; give distinct modes in range")
        out.append(modes if not modes or min(modes) >= 0 else [x % n for x in modes])
    return out[0], out[1]


def _plain_axes(axes: Any, na: int, nb: int) -> tuple[list[int], list[int]] | None:
    """``axes`` as two lists of distinct modes in range, given as such (or a count), else None.

    The common spellings, checked in a few operations; anything else (negative modes, NumPy
    integers, errors) is left to :func:`_axes_of`'s general reading.
    """
    if type(axes) is int:
        return (list(range(na - axes, na)), list(range(axes))) if 0 <= axes <= min(na, nb) else None
    if (type(axes) is not tuple and type(axes) is not list) or len(axes) != 2:
        return None
    first, second = axes
    ax_a = [first] if type(first) is int else list(first) if type(first) in _SEQUENCES else None
    ax_b = [second] if type(second) is int else list(second) if type(second) in _SEQUENCES else None
    if ax_a is None or ax_b is None or len(ax_a) != len(ax_b):
        return None
    for modes, n in ((ax_a, na), (ax_b, nb)):
        for x in modes:
            if type(x) is not int or not 0 <= x < n:
                return None
        if len(set(modes)) != len(modes):
            return None
    return ax_a, ax_b


_SEQUENCES = (tuple, list)


def _tensordot_subscripts(na: int, nb: int, ax_a: Sequence[int], ax_b: Sequence[int]) -> str:
    """Return the einsum of ``tensordot`` pairing ``ax_a`` of an ``na``-mode ``a`` with ``ax_b``."""
    la = list(LETTERS[:na])
    lb = list(LETTERS[na:na + nb])
    for i, j in zip(ax_a, ax_b, strict=True):
        lb[j] = la[i]
    out = [ch for ch in la if ch not in lb] + [ch for ch in lb if ch not in la]
    return f"{''.join(la)},{''.join(lb)}->{''.join(out)}"


def tensordot(a: ArrayLike, b: ArrayLike, axes: Any = 2, *,
              backend: BackendName | None = None) -> ArrayLike:
    """``numpy.tensordot`` on a TAPP product, with numpy's results and errors.

    ``axes`` is a count (the last ``axes`` modes of ``a`` with the first of ``b``) or a pair
    of sequences of modes. Paired modes must have equal extents (no size-1 broadcasting, as
    in NumPy); the result is an array, 0-d for a full contraction. Operands that are not
    arrays or tensors (duck-typed, lazy arrays) go to ``numpy.tensordot``; dtypes TAPP lacks
    run through ``numpy.einsum`` (see :func:`einsum`).

    Raises
    ------
    TappError
        13 ``axes`` that do not fit the operands; 1 paired modes of different extents.

    Examples
    --------
    >>> import numpy as np
    >>> tensordot(np.ones((2, 3)), np.ones((3, 4)), axes=1).shape
    (2, 4)
    """
    key: Any = None
    if type(a) is np.ndarray and type(b) is np.ndarray:
        try:
            key = (a.shape, a.strides, b.shape, b.strides, a.dtype.num, b.dtype.num,
                   _axes_key(axes), backend_name_of(backend))
            call = _tensordot_calls.get(key)
        except (TypeError, ValueError):  # malformed axes: the general path says what is wrong
            call = key = None
        if call is _SEEN_ONCE:  # its second call (numpy checked the first): worth its matmul
            call = None
            modes = _modes_of(a.ndim, b.ndim, key[6], axes)
            pair = None if modes is None else modes.pair(a, b)
            if modes is not None and pair is not None:
                direct = DirectCalls(pair)
                _remember_tensordot(key, _TensordotCall(a.ndim, b.ndim, modes.axes_a,
                                                        modes.axes_b, direct))
                return direct.run(a, b)
        elif call is None and key is not None and key[-1] in _MATMUL_BACKENDS:
            found = first_tensordot(a, b, key[6])
            if found is not None:  # a first call: numpy's own tensordot is that matmul
                _remember_tensordot(key, _SEEN_ONCE)
                return found
        if call is not None:
            chain = call.chain
            if chain is not None:  # planned and compiled: one C call
                found = chain(a, b)
                if found is not None:
                    return found
            if call.direct is not None:
                found = call.direct.run(a, b)
                if found is not None:  # pytapp.direct
                    return found
                # worth a plan now: einsum plans on seeing its key's calls spent
                _remember_direct(_layout_key(call.subscripts, (a, b), path_key("auto"), None,
                                             backend, None), call.direct)
                call.direct = None
            result = einsum(call.subscripts, a, b, backend=backend)
            call.chain = _chains.get(_layout_key(call.subscripts, (a, b), path_key("auto"),
                                                 None, backend, None))
            return np.asarray(result) if isinstance(result, np.generic) else result
    if _is_foreign(a) or _is_foreign(b):
        lazy = _lazy_function("tensordot", a) or _lazy_function("tensordot", b)
        if lazy is not None:
            return lazy(a, b, axes)
        return np.tensordot(a, b, axes)
    if not hasattr(a, "shape"):
        a = _plain_numpy(a, "a")
    if not hasattr(b, "shape"):
        b = _plain_numpy(b, "b")
    na, nb = _ndim(a), _ndim(b)
    if na + nb > len(LETTERS):
        raise error_for(ErrorCode.NEGATIVE_NMODES, "tensordot takes at most 52 modes in all")
    ax_a, ax_b = _axes_of(axes, na, nb)
    shape_a, shape_b = tuple(a.shape), tuple(b.shape)
    for i, j in zip(ax_a, ax_b, strict=True):
        if shape_a[i] != shape_b[j]:
            raise error_for(ErrorCode.EXTENT_MISMATCH_AB,
                            f"shape-mismatch for sum: mode {i} of a has extent {shape_a[i]} "
                            f"but mode {j} of b has {shape_b[j]}; paired modes must be equal")
    if key is not None:
        pair = tensordot_pair(a, b, ax_a, ax_b) if key[-1] in _MATMUL_BACKENDS else None
        call = _TensordotCall(na, nb, ax_a, ax_b, None if pair is None else DirectCalls(pair))
        _remember_tensordot(key, call)
        found = None if call.direct is None else call.direct.run(a, b)
        if found is not None:
            return found
    result = einsum(_tensordot_subscripts(na, nb, ax_a, ax_b), a, b, backend=backend)
    return np.asarray(result) if isinstance(result, np.generic) else result


class _TensordotCall:
    """A checked tensordot call: its einsum, its matmul (pytapp.direct), its chain once planned.

    The einsum's subscripts are spelled only when the call is planned (most are not).
    """

    __slots__ = ("_subscripts", "axes", "chain", "direct", "ndims")

    def __init__(self, na: int, nb: int, ax_a: list[int], ax_b: list[int],
                 direct: DirectCalls | None) -> None:
        self.ndims = (na, nb)
        self.axes = (ax_a, ax_b)
        self.direct = direct
        self.chain: Any = None
        self._subscripts = ""

    @property
    def subscripts(self) -> str:
        """The einsum this tensordot is."""
        if not self._subscripts:
            self._subscripts = _tensordot_subscripts(*self.ndims, *self.axes)
        return self._subscripts


#: (layouts, dtypes, axes, backend) of a checked tensordot call -> what runs it.
_tensordot_calls: dict[Any, _TensordotCall] = {}
#: What a layout seen once (run by numpy's own tensordot) has in ``_tensordot_calls``.
_SEEN_ONCE = _TensordotCall(0, 0, [], [], None)


#: (modes of a, modes of b, axes) of tensordot calls -> their TensordotModes (or None: axes
#: that need the general path's reading).
_tensordot_modes: dict[Any, TensordotModes | None] = {}


def _modes_of(na: int, nb: int, axes_key: Any, axes: Any) -> TensordotModes | None:
    """Return the :class:`TensordotModes` of a tensordot call, made once per (na, nb, axes)."""
    key = (na, nb, axes_key)
    try:
        return _tensordot_modes[key]
    except KeyError:
        pass
    try:
        ax_a, ax_b = _axes_of(axes, na, nb)
        found: TensordotModes | None = TensordotModes(na, nb, ax_a, ax_b)
    except TappError:
        found = None
    with _thin_lock:
        if len(_tensordot_modes) >= THIN_CACHE_SIZE:
            _tensordot_modes.clear()
        _tensordot_modes[key] = found
    return found


def _remember_tensordot(key: Any, call: _TensordotCall) -> None:
    with _thin_lock:
        if len(_tensordot_calls) >= 4 * THIN_CACHE_SIZE:
            _tensordot_calls.clear()
        _tensordot_calls[key] = call


def _axes_key(axes: Any) -> Any:
    """Return ``axes`` as a hashable value (raises when it is not a count or two sequences)."""
    if type(axes) is int:
        return axes
    first, second = axes
    return (first if type(first) is int else tuple(first),
            second if type(second) is int else tuple(second))


def transpose(a: ArrayLike, axes: Sequence[int] | None = None, *,
              backend: BackendName | None = None) -> ArrayLike:
    """``numpy.transpose``: a view of ``a`` with its modes permuted (no data moves).

    A torch tensor gives a torch view (``permute``); objects that are not arrays or tensors
    go to ``numpy.transpose``. No TAPP product runs, so ``backend`` is not used (it is
    accepted for the signature opt_einsum's backends share).

    Raises
    ------
    TappError
        13 when ``axes`` is not a permutation of the modes.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.ones((2, 3))
    >>> transpose(x).shape, transpose(x).base is x
    ((3, 2), True)
    """
    del backend  # a view: nothing runs
    if type(a) is np.ndarray:
        try:  # numpy's own checks; its errors become TAPP errors below
            return a.transpose() if axes is None else a.transpose(axes)
        except (TypeError, ValueError, IndexError):
            pass
    if _is_foreign(a):
        lazy = _lazy_function("transpose", a)
        if lazy is not None:
            return lazy(a, axes)
        return np.transpose(a, axes)
    data: Any = a if is_torch(a) or isinstance(a, np.ndarray) else _plain_numpy(a, "a")
    n = _ndim(data)
    if axes is None:
        order = list(range(n))[::-1]
    else:
        try:
            order = [int(x) for x in axes]
        except (TypeError, ValueError) as exc:
            raise error_for(ErrorCode.NEGATIVE_NMODES,
                            f"axes={axes!r}; give a permutation of the {n} modes") from exc
        if any(not -n <= x < n for x in order) or sorted(x % n for x in order) != list(
                range(n)):
            raise error_for(ErrorCode.NEGATIVE_NMODES,
                            f"axes={axes!r} is not a permutation of the {n} modes")
        order = [x % n for x in order]
    if is_torch(data):
        return data.permute(order)
    return np.transpose(data, order)
