"""Compiled einsum expressions: operands in any array library, one network of TAPP plans.

:class:`EinsumExpression` holds a :class:`~pytapp.network.Network` (path, steps, per-step plans
and intermediate buffers) and is called with new arrays many times. Arrays come back in the
library they came from (NumPy in, NumPy out; torch in, torch out, sharing memory through
DLPack). Autograd is the job of :mod:`pytapp.interop.torch_op`.

Examples
--------
>>> import numpy as np
>>> expr = EinsumExpression("ij,jk->ik", (2, 3), (3, 4), backend="blas")
>>> expr(np.ones((2, 3)), np.ones((3, 4)))[0].tolist()
[3.0, 3.0, 3.0, 3.0]
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from pytapp import backends, wisdom
from pytapp.analysis.subscripts import Equation, from_sublists, parse_subscripts
from pytapp.contraction import backend_name, leased_handle, shared_handle
from pytapp.datatypes import (
    Datatype,
    as_array,
    datatype_of,
    datatype_of_data,
    promote,
    torch_view,
)
from pytapp.errors import ErrorCode, TappError, error_for
from pytapp.handle import Handle
from pytapp.network import Network, PathInfo, machine_layout
from pytapp.operands import to_ndarray, torch_bits

__all__ = ["EinsumExpression", "cached_expression", "is_torch", "normalize_call", "path_key",
           "plain_out", "result_datatype", "to_library", "to_numpy"]

#: Most expressions :func:`cached_expression` keeps.
EXPRESSION_CACHE_SIZE = 128
#: Most input layouts an expression keeps a compiled network for.
CHAIN_CACHE = 16

#: Backends an ``auto`` expression may time on its whole network, besides per-step ``auto``
#: (not tblis: timed alone, it hides what its spinning pool costs the calls after it).
NETWORK_CANDIDATES = ("blas", "torch")

#: Timed runs of each candidate when an ``auto`` network is timed (the best counts).
NETWORK_TUNE_ROUNDS = 3

#: An ``auto`` network below this many flops whose every step is a compiled program is
#: settled on it at once: the executor's microsecond call is what such a network costs, and
#: another library's dispatch (tens of microseconds a step) cannot win. Above, the library's
#: GEMM decides and the network is timed within its budget like any other: a two-GEMM CCSD
#: term of 4.8e8 flops ran in 4.5 ms compiled on OpenBLAS and 3.7 ms on torch's MKL (Xeon).
COMPILED_SETTLES_BELOW = 1 << 26

_cache: OrderedDict[Hashable, EinsumExpression] = OrderedDict()
_cache_lock = threading.Lock()


#: Types already seen to be torch tensors (``torch.Tensor`` and its subclasses), for the
#: one-lookup answer of :func:`is_torch` on every call with tensors.
_TORCH_TYPES: set[type] = set()


def is_torch(x: Any) -> bool:
    """Whether ``x`` is a torch tensor (checked without importing torch)."""
    kind = type(x)
    if kind is np.ndarray:
        return False
    if kind in _TORCH_TYPES:
        return True
    if kind.__module__.startswith("torch") and hasattr(x, "requires_grad"):
        _TORCH_TYPES.add(kind)
        return True
    return False


class _TensorMemory:
    """An array interface over a tensor's memory that keeps the tensor alive.

    The tensor becomes the array's base, so bounds checks reach the tensor's storage (a
    DLPack capsule vouches for nothing).
    """

    def __init__(self, view: np.ndarray, tensor: Any) -> None:
        self.__array_interface__ = dict(view.__array_interface__)
        self.base = tensor


def to_numpy(x: Any, role: str, *, writable: bool = False) -> np.ndarray:
    """Return a NumPy view of array data.

    Torch tensors are shared through DLPack; scalars and sequences go through ``np.asarray``.

    Raises
    ------
    OperandMismatchError
        Code 20 for data NumPy cannot read, or a tensor on another device; with
        ``writable``, a torch view with the conjugate or negative bit.
    """
    if isinstance(x, np.ndarray):
        return x
    if is_torch(x):
        if writable and any(torch_bits(x)):  # a resolved copy would be written, then lost
            raise error_for(ErrorCode.OPERAND_MISMATCH,
                            f"{role} is a torch view with the conjugate or negative bit set, "
                            "which pytapp cannot write through; pass a plain tensor")
        if x.is_conj():
            x = x.resolve_conj()
        if x.is_neg():
            x = x.resolve_neg()
        x = x.detach()
        view = to_ndarray(x, datatype_of_data(x, role), role)
        return np.asarray(_TensorMemory(view, x)).view(view.dtype)
    return as_array(x, role)


def plain_out(out: Any, shape: tuple[int, ...]) -> bool:
    """Whether ``out`` can receive a repeated call's result directly (the thin paths).

    A writable NumPy array of the result's ``shape``. One that shares memory with an operand
    is fine: a step whose output overlaps its inputs leaves its compiled program for its
    plan, which copies them first (as the general path does).

    Examples
    --------
    >>> import numpy as np
    >>> plain_out(np.empty((2, 2)), (2, 2)), plain_out(np.empty((2, 2)), (2, 3))
    (True, False)
    """
    return type(out) is np.ndarray and out.shape == shape and out.flags.writeable


def to_library(result: np.ndarray, like: Any) -> Any:
    """Return ``result`` in ``like``'s array library (a torch tensor sharing its memory)."""
    if like is None or not is_torch(like):
        return result
    return torch_view(result)


def result_datatype(arrays: Sequence[np.ndarray], dtype: Any = None) -> Datatype:
    """Return the datatype of an einsum of ``arrays``.

    ``dtype`` when given, else NumPy's promotion (TAPP's datatypes promote among themselves, F16
    with BF16 to F32).

    Raises
    ------
    OperandMismatchError
        Code 20 when the result would not be a TAPP datatype (integers alone, float128, ...).
    """
    if dtype is not None:
        return datatype_of(dtype, "dtype=")
    dts = []
    for a in arrays:
        try:
            dts.append(datatype_of(a.dtype))
        except Exception:
            break
    else:
        return promote(*dts)
    try:
        common = np.result_type(*arrays)
    except TypeError as exc:
        raise error_for(
            ErrorCode.OPERAND_MISMATCH,
            f"operands of dtypes {[str(a.dtype) for a in arrays]} have no common dtype; convert "
            "them to float32, float64, complex64, complex128, float16 or bfloat16",
        ) from exc
    return datatype_of(common, f"the result (from {sorted({str(a.dtype) for a in arrays})})")


def _layout_dtype(operands: Sequence[Any]) -> Datatype | None:
    """Return the datatype of an einsum of ``operands`` when all are arrays, for its layout.

    ``None`` when any is a shape, a torch tensor or of no TAPP datatype's promotion.
    """
    if not operands or any(_is_shape(x) or is_torch(x) or not isinstance(x, np.ndarray)
                           for x in operands):
        return None
    try:
        return result_datatype(operands)
    except TappError:
        return None


def normalize_call(subscripts: Any, operands: Sequence[Any]) -> tuple[str, list[Any]]:
    """Subscripts and operands of either einsum form (the string or the sublist form)."""
    if isinstance(subscripts, str):
        return subscripts, list(operands)
    return from_sublists([subscripts, *operands])


def _is_shape(x: Any) -> bool:
    return isinstance(x, (tuple, list)) and all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in x)


class EinsumExpression:
    """An einsum compiled once for operand shapes and called with arrays many times.

    Parameters
    ----------
    subscripts
        numpy.einsum subscripts (``'ij,jk->ik'``, ellipses allowed).
    *shapes_or_arrays
        One shape (tuple of ints) or array per operand.
    optimize, memory_limit, backend, dtype
        As for :func:`pytapp.einsum`.

    Examples
    --------
    >>> import numpy as np
    >>> expr = EinsumExpression("i,i->", (3,), (3,))
    >>> float(expr(np.arange(3.0), np.ones(3)))
    3.0
    """

    def __init__(self, subscripts: str, *shapes_or_arrays: Any, optimize: Any = "auto",
                 memory_limit: Any = None, backend: str | None = None,
                 dtype: Any = None) -> None:
        # a tensor's shape without viewing its memory (which may be on a device)
        shapes = [tuple(int(v) for v in x) if _is_shape(x) else tuple(x.shape) if is_torch(x)
                  else to_numpy(x, f"operand {i}").shape for i, x in enumerate(shapes_or_arrays)]
        self.subscripts = subscripts
        self.equation: Equation = parse_subscripts(subscripts, [len(s) for s in shapes])
        # The result in the layout its last product writes (numpy.einsum returns such views
        # too): no permuting copy of the result
        self.dtype = None if dtype is None else datatype_of(dtype, "dtype=")
        self.network = Network(self.equation, shapes, optimize=optimize,
                               memory_limit=memory_limit, free_layout=True,
                               layout_dtype=self.dtype or _layout_dtype(shapes_or_arrays))
        self.backend = backend_name(backend)
        #: For ``backend="auto"``: the backend of the whole network per datatype (``"auto"``:
        #: each step's own choice, the default until a timing within budget says otherwise).
        self.choices: dict[Datatype, str] = {}
        self._budgets: dict[Datatype, wisdom.Budget] = {}
        self._settled: set[Datatype] = set()  # datatypes whose choice is final
        # PYTAPP_AUTOTUNE=0 never times (read once, as auto plans do)
        self._never_time = os.environ.get("PYTAPP_AUTOTUNE", "").strip().lower() in (
            "0", "off", "never")
        self._fast_dtypes: dict[tuple[Any, ...], tuple[Datatype, Handle]] = {}
        #: Input (dtype, strides) -> the network as compiled programs (False: it does not lower).
        self._chains: dict[tuple[Any, ...], Any] = {}
        #: For ``auto``: the network and the one whose last GEMM writes the transposed result,
        #: tried on the calls the program makes (:class:`pytapp.wisdom.Trial`) until one wins.
        self._layouts: tuple[Network, Network] | None = None
        self._trial: wisdom.Trial | None = None
        flipped = (self.network.flipped() if self.backend == "auto" and not self._never_time
                   else None)
        if flipped is not None:
            self._layouts, self._trial = (self.network, flipped), wisdom.Trial(2)

    @property
    def path(self) -> list[tuple[int, ...]]:
        """The contraction path (opt_einsum's format)."""
        return list(self.network.path)

    def info(self, dtype: Any = Datatype.F64) -> PathInfo:
        """Each pairwise step with its TAPP plan's algorithm, flops and predicted time."""
        dt = self.dtype or datatype_of(dtype, "dtype")
        return self.network.info(shared_handle(self.backend), dt)

    def __repr__(self) -> str:
        chosen = "".join(f", {dt.name} on {name}" for dt, name in self.choices.items())
        return (f"EinsumExpression({self.subscripts!r}, shapes={list(self.network.shapes)}, "
                f"path={self.path}, backend={self.backend!r}{chosen})")

    def __call__(self, *operands: Any, out: Any = None) -> Any:
        """Contract ``operands`` (same shapes as compiled) into a new array or ``out``.

        Raises
        ------
        TappError
            20 for a shape or datatype that does not fit, and as for
            :meth:`pytapp.TensorProduct.execute`.
        """
        net = self.network
        if all(type(x) is np.ndarray for x in operands) and (
                out is None or plain_out(out, net.output_shape())):
            fast = self._fast_numpy(operands, out)
            if fast is not None:
                return fast
        if len(operands) != len(net.shapes):
            raise error_for(ErrorCode.OPERAND_MISMATCH,
                            f"the expression takes {len(net.shapes)} operands, not "
                            f"{len(operands)}")
        arrays = [to_numpy(x, f"operand {i}") for i, x in enumerate(operands)]
        for i, (arr, shape) in enumerate(zip(arrays, net.shapes, strict=True)):
            if arr.shape != shape:
                raise error_for(ErrorCode.OPERAND_MISMATCH,
                                f"operand {i} has shape {arr.shape} but the expression was "
                                f"compiled for {shape}; compile another expression")
        dt = result_datatype(arrays, self.dtype)
        want = dt.numpy_dtype
        views = [v if v.dtype == want else v.astype(want) for v in net.prepare(arrays)]
        like = next((x for x in (*operands, out) if is_torch(x)), None)
        target = None if out is None else to_numpy(out, "out", writable=True)
        if target is not None and target.shape != net.output_shape():
            raise error_for(ErrorCode.OPERAND_MISMATCH,
                            f"out has shape {target.shape} but the result has shape "
                            f"{net.output_shape()}")
        handle = self._handle(dt)
        while not handle.lease():  # destroyed since (clear_plan_cache): the new shared one
            handle = self._handle(dt)
        try:
            numpy_inputs = all(type(x) is np.ndarray for x in operands)
            if numpy_inputs:
                self._fast_dtypes[tuple(a.dtype for a in arrays)] = (dt, handle)
            start = time.perf_counter()
            which = -1
            if target is not None and target.dtype == want:
                net.run(views, dt, handle, target)  # out's layout: nothing to try
                result = target
            else:
                net, which = self._layout(dt)
                result = net.run(views, dt, handle)
            seconds = time.perf_counter() - start
            self._tried(which, dt, seconds)
        finally:
            handle.unlease()
        if dt not in self._settled:
            self._count(views, dt, seconds)
        if numpy_inputs:
            self._remember_chain(arrays, dt, out if result is target and plain_out(
                out, net.output_shape()) else None)
        if result is target:
            return out
        if target is not None:
            np.copyto(target, result, casting="same_kind")
            return out
        if like is None and result.ndim == 0:
            return result[()]
        return to_library(result, like)

    def _chain_key(self, arrays: Sequence[np.ndarray], out: np.ndarray | None) -> tuple[Any, ...]:
        """Return the inputs' (dtype, strides), and out's when the chain writes into it."""
        key = tuple((a.dtype, a.strides) for a in arrays)
        return key if out is None else (*key, ("out", out.dtype, out.strides))

    def _remember_chain(self, arrays: Sequence[np.ndarray], dt: Datatype,
                        out: np.ndarray | None = None) -> None:
        """Build the compiled chain of these input layouts (and of ``out``'s, when given).

        A network of fewer than :data:`COMPILED_SETTLES_BELOW` flops whose every step is a
        compiled program has nothing left to tune: its choice is settled with the chain. Until
        an ``auto`` expression's choice is settled otherwise (wisdom, or tuning within its
        budget), its chain runs this expression's own calls, timed and counted towards tuning,
        and :meth:`chain_for` withholds it from callers that would not count them; tuning drops
        it (its plans are the old choice's).
        """
        key = self._chain_key(arrays, out)
        if key in self._chains or self._trial is not None:  # a chain runs one layout
            return
        settled = dt in self._settled
        handle = self._handle(dt)
        if not handle.lease():
            return
        try:
            chain = None
            if not settled and self.network.flops < COMPILED_SETTLES_BELOW:
                chain = self.network.compiled_chain(arrays, dt, handle, programs_only=True,
                                                    out=out)
                if chain is not None:  # all compiled and small: nothing worth tuning
                    self._settled.add(dt)
            if chain is None:
                chain = self.network.compiled_chain(arrays, dt, handle, out=out)
        finally:
            handle.unlease()
        if len(self._chains) >= CHAIN_CACHE:
            self._chains.clear()
        self._chains[key] = (chain, dt) if chain is not None else False

    def chain_for(self, arrays: Sequence[Any], out: np.ndarray | None = None) -> Any:
        """Return the network compiled for these arrays' layouts, once a call built it.

        With ``out``: the chain that writes into an array of ``out``'s layout (it takes that
        array as its last operand). ``None`` too while the expression's choice is not settled
        (its calls are counted).
        """
        if not all(type(a) is np.ndarray for a in arrays):
            return None
        entry = self._chains.get(self._chain_key(arrays, out))
        return entry[0] if entry and entry[1] in self._settled else None

    def _fast_numpy(self, arrays: Sequence[np.ndarray], out: np.ndarray | None = None) -> Any:
        """Return the thin path of a repeated call on NumPy arrays of the compiled shapes.

        The network compiled for these layouts runs when there is one; else the datatype and
        handle found for these dtypes before are reused (``None``: take the general path,
        which also reports every error). ``out`` (a writable NumPy array of the result's
        shape, see :func:`plain_out`) receives the result, which is then ``out`` itself; one
        of another datatype takes the general path.
        """
        net = self.network
        if tuple(a.shape for a in arrays) != net.shapes:
            return None
        entry = self._chains.get(self._chain_key(arrays, out))
        if entry:
            chain, dt = entry
            args = arrays if out is None else (*arrays, out)
            if dt in self._settled:
                found = chain(*args)
            else:  # timed and counted towards tuning
                start = time.perf_counter()
                found = chain(*args)
                if found is not None:
                    self._count_and_settle(arrays, dt, time.perf_counter() - start, out)
            if found is not None:
                return found[()] if found.ndim == 0 and out is None else found
        key = tuple(a.dtype for a in arrays)
        hit = self._fast_dtypes.get(key)
        if hit is None:
            return None
        dt, handle = hit
        want = dt.numpy_dtype
        if out is not None and out.dtype != want:  # a cast into out: the general path
            return None
        if not handle.lease():  # destroyed (clear_plan_cache): the general path
            return None
        try:
            views = [v if v.dtype == want else v.astype(want) for v in net.prepare(arrays)]
            start = time.perf_counter()
            trying = self._trial is not None and out is None
            if out is not None:  # out's layout: nothing to try
                result = net.run(views, dt, handle, out)
                which = -1
            else:
                net, which = self._layout(dt)
                result = net.run(views, dt, handle)
            seconds = time.perf_counter() - start
            self._tried(which, dt, seconds)
        finally:
            handle.unlease()
        if dt not in self._settled:
            self._count_and_settle(arrays, dt, seconds, out)
        elif (trying and self._trial is None) or out is not None:
            self._remember_chain(arrays, dt, out)  # just chosen: compile the winner's layouts
        return result[()] if result.ndim == 0 and out is None else result

    def _count_and_settle(self, arrays: Sequence[np.ndarray], dt: Datatype,
                          seconds: float, out: np.ndarray | None = None) -> None:
        """Count an unsettled call; once that settles the choice, compile it for these layouts."""
        self._count(self.network.prepare(arrays), dt, seconds)
        if dt in self._settled:
            self._remember_chain(arrays, dt, out)

    def _layout(self, dt: Datatype) -> tuple[Network, int]:
        """Return the network this call runs and its candidate number (-1: no trial).

        While the two result layouts are tried, the trial's pick; a layout this machine's
        wisdom holds for the network, or the one its BLAS writes faster when the result is
        thin (:func:`pytapp.network.machine_layout`), is taken without a trial.
        """
        trial, layouts = self._trial, self._layouts
        if trial is None or layouts is None:
            return self.network, -1
        if trial.calls == 0:
            known = wisdom.lookup("layout", self._key(dt))
            if isinstance(known, dict) and isinstance(known.get("flipped"), bool):
                self._settle(next(n for n in layouts if n.flip_final is known["flipped"]))
                return self.network, -1
            chosen = machine_layout(*layouts, dt)  # a thin result: the machine's measured one
            if chosen is not None:
                self._settle(chosen)
                return self.network, -1
        which = trial.pick()
        return layouts[which], which

    def _tried(self, which: int, dt: Datatype, seconds: float) -> None:
        """Count a call of candidate ``which``; keep the winner once the trial has one."""
        trial, layouts = self._trial, self._layouts
        if which < 0 or trial is None or layouts is None:
            return
        winner = trial.add(which, seconds)
        if winner is not None:
            self._settle(layouts[winner])
            wisdom.record("layout", self._key(dt), {
                "flipped": layouts[winner].flip_final, "seconds": trial.best,
                "equation": str(self.equation)})

    def _settle(self, network: Network) -> None:
        """Run ``network`` from now on (the other is dropped, not destroyed: a call may hold it)."""
        self.network = network
        self._trial = self._layouts = None

    def _handle(self, dt: Datatype) -> Handle:
        """Return the handle of this call.

        The named backend; for ``auto``, the backend this machine's wisdom says is fastest on
        this network, else ``auto`` itself (each step chosen by the cost model). A network of
        one product is settled on ``auto`` at once: timing the backends on it is what that
        product's ``auto`` plan does within its own budget (one tuner, not two).
        """
        if self.backend != "auto":
            self._settled.add(dt)
            return shared_handle(self.backend)
        choice = self.choices.get(dt)
        if choice is None:
            known = (wisdom.lookup("network", self._key(dt)) if wisdom.recorded("network")
                     else None)
            choice = known.get("choice") if isinstance(known, dict) else None
            if choice not in (*NETWORK_CANDIDATES, "auto"):  # an older file's tblis
                choice = None
            if choice is None:
                choice = "auto"
                if len(self.network.steps) <= 1:  # one product: its auto plan's own tuner
                    self._settled.add(dt)
            else:
                self._settled.add(dt)
            self.choices[dt] = str(choice)
        return shared_handle(self.choices[dt])

    def _key(self, dt: Datatype) -> str:
        """Return the network's key in the wisdom file (equation, shapes, path, datatype)."""
        text = repr((str(self.equation), self.network.shapes, self.path, dt.name))
        return hashlib.sha1(text.encode()).hexdigest()

    def _count(self, views: list[np.ndarray], dt: Datatype, seconds: float) -> None:
        """Count one ``auto`` run; time the backends once the budget allows it."""
        budget = self._budgets.setdefault(dt, wisdom.Budget())
        budget.add(seconds)
        if budget.runs < wisdom.MIN_RUNS:
            return
        if self._never_time:
            self._settled.add(dt)
            return
        # every candidate: one warm-up and the timed rounds, at about this network's pace
        cost = (budget.seconds / budget.runs * (1 + NETWORK_TUNE_ROUNDS)
                * (1 + len(NETWORK_CANDIDATES)))
        if not budget.allows(cost):
            return
        names = ("auto", *NETWORK_CANDIDATES)
        cost += wisdom.pause_seconds({n: backends.pool_of(n) for n in names},
                                     backends.pool_of(self.choices.get(dt, "auto")))
        if budget.allows(cost + sum(backends.import_seconds(n) for n in NETWORK_CANDIDATES)):
            self.tune(views, dt)

    def tune(self, views: Sequence[np.ndarray], dt: Datatype) -> str:
        """Time the whole network on each backend and on per-step ``auto``; keep the fastest.

        Each candidate runs once (planning, buffers, compiled kernels), then is timed
        :data:`NETWORK_TUNE_ROUNDS` times in a row (:func:`pytapp.wisdom.time_candidates`:
        a pause before the candidates of another thread pool, each warm-up right before its
        candidate's timed runs); the best time of each counts.
        The winner is used from now on for ``dt`` and kept in this machine's wisdom
        (:mod:`pytapp.wisdom`). ``views``: operands as :meth:`Network.prepare` returns them,
        of datatype ``dt``.

        Returns
        -------
        str
            The winning backend name.
        """
        handles: dict[str, Handle] = {}
        try:
            for name in ("auto", *NETWORK_CANDIDATES):
                try:
                    handles[name] = leased_handle(name)
                except TappError:  # not available here
                    continue
            # a backend that cannot run some step raises: not a candidate
            times = wisdom.time_candidates(
                {name: functools.partial(self.network.run, views, dt, handle)
                 for name, handle in handles.items()}, NETWORK_TUNE_ROUNDS,
                pools={name: backends.pool_of(name) for name in handles},
                after=backends.pool_of(self.choices.get(dt, "auto")), warm_up=True)
        finally:
            for handle in handles.values():
                handle.unlease()
        choice = min(times, key=lambda n: times[n]) if times else "auto"
        self.choices[dt] = choice
        self._settled.add(dt)
        self._chains.clear()  # built on the old choice's plans
        for key, (kind, _) in list(self._fast_dtypes.items()):
            if kind is dt:
                self._fast_dtypes[key] = (dt, shared_handle(choice))
        wisdom.record("network", self._key(dt), {"choice": choice, "seconds": times,
                                                 "equation": str(self.equation)})
        return choice

    def release(self) -> None:
        """Destroy the expression's plans and buffers (it can still be called)."""
        self.network.release()


def path_key(optimize: Any) -> Any:
    """Return ``optimize`` hashable when it is an explicit path.

    A path (``[(0, 1), (0, 1)]``, NumPy's ``['einsum_path', ...]``) becomes a tuple of tuples;
    anything else comes back as it is (the same object).

    Examples
    --------
    >>> path_key([(0, 1), [0, 1]]), path_key("greedy")
    (((0, 1), (0, 1)), 'greedy')
    """
    if isinstance(optimize, (list, tuple)) and all(
            isinstance(s, (str, tuple, list)) for s in optimize):
        return tuple(tuple(s) if isinstance(s, list) else s for s in optimize)
    return optimize


def forget_expressions() -> None:
    """Drop the one-shot calls' cached expressions (their plans, buffers and tuning budgets).

    A call that is running one keeps it until it returns.
    """
    with _cache_lock:
        _cache.clear()


def cached_expression(subscripts: str, arrays: Sequence[np.ndarray], optimize: Any,
                      memory_limit: Any, backend: str | None, dtype: Any) -> EinsumExpression:
    """Return an expression for these operand shapes.

    From a bounded cache when the arguments are hashable (optimizer objects are not cached:
    they may be stateful).
    """
    shapes = tuple(a.shape for a in arrays)
    key: Hashable | None = None
    opt_key = path_key(optimize)
    if optimize is None or isinstance(optimize, (bool, str)) or opt_key is not optimize:
        # the result layout may depend on the datatype (a thin GEMM's orientation)
        key = (subscripts, shapes, opt_key, str(memory_limit), backend_name(backend),
               None if dtype is None else datatype_of(dtype, "dtype="),
               None if dtype is not None else _layout_dtype(arrays))
        with _cache_lock:
            hit = _cache.get(key)
            if hit is not None:
                _cache.move_to_end(key)
                return hit
    expr = EinsumExpression(subscripts, *arrays, optimize=optimize, memory_limit=memory_limit,
                            backend=backend, dtype=dtype)
    if key is not None:
        with _cache_lock:
            _cache[key] = expr
            while len(_cache) > EXPRESSION_CACHE_SIZE:
                # let go only: another thread may be running it (its plans go with it)
                _cache.popitem(last=False)
    return expr
