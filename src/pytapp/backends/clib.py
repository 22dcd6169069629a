"""The ``clib`` backend: a ctypes bridge to any shared library exporting the TAPP C API.

The bridge speaks every TAPP C ABI in circulation (SPEC section 8):

- ``released`` (the default): the headers of the official reference implementation;
- ``multi-tapp``: ``TAPP_create_handle`` takes a library id; executors and tensor infos are
  created with the handle;
- ``cutensor_bindings``: ``TAPP_create_tensor_info(info, handle, type, nmode, extents,
  strides)`` takes the handle second, and ``TAPP_attr_get`` returns through ``void**``;
- ``auto``: the ABI is detected by a probe call run in a child process for each candidate
  (:func:`detect`), so a wrong guess crashes the child, never the caller.

Choose with ``Handle("clib", library=PATH, abi=...)`` or the environment variable
``PYTAPP_CLIB_ABI``.

Only ``TAPP_create_handle``, ``TAPP_create_tensor_info``, ``TAPP_create_tensor_product`` and
``TAPP_execute_product`` are required; every other symbol is optional (:data:`OPTIONAL`): no
executor is passed when ``TAPP_create_executor`` is missing, objects are not destroyed when
their destroy function is missing, codes are reported without text when
``TAPP_explain_error`` is missing. When the library exports the asynchronous symbols of
upstream's proposal, the bridge waits on the executor (``TAPP_executor_wait``) and asks the
status (``TAPP_status_check_completion``) before it reports the execution complete.

Lifetimes follow the official reference, which keeps the *handles* of the tensor infos inside a
product and reads them at every execute: the infos of a product live exactly as long as that
product. Each pytapp :class:`~pytapp.Handle` owns one C handle and executor; each plan owns its
C products and their infos. Destroying (or garbage-collecting) a plan destroys its products,
then their infos; destroying the handle destroys its plans first, then the executor, then the
C handle.

pytapp validates every product itself before the library sees it (so codes are those of SPEC
section 5 whatever the library checks) and binds the data with its bounds checks. Codes 1-14
returned by the library keep their TAPP meaning; any other code is the library's own and is
reported as error 18 with its number and the library's text. An error never changes D: the
bytes of D's elements are saved before each call and restored when the library fails after
writing them (one copy of D per execute). With ``alpha == 0`` the library is not called: A and
B are not read (SPEC section 1), D = op_D(beta op_C(C)).

Select it with ``Handle("clib", library=PATH)``, ``Handle("clib:PATH")`` or the environment
variable ``PYTAPP_LIBRARY``.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from pytapp.analysis.spec import ContractionSpec, OperandSpec
from pytapp.backends.base import Capabilities
from pytapp.datatypes import ElementOp
from pytapp.errors import ErrorCode, error_for
from pytapp.executor import Executor
from pytapp.operands import BoundProduct
from pytapp.status import Status

__all__ = ["ABIS", "AUTO", "OPTIONAL", "REQUIRED", "ClibBackend", "ClibPlan", "Library",
           "Session", "library"]

#: C ABIs the bridge speaks; the first is the default.
ABIS = ("released", "multi-tapp", "cutensor_bindings")
#: The ``abi`` value that asks for detection (:func:`detect`).
AUTO = "auto"
#: The symbols every TAPP library must export.
REQUIRED = ("TAPP_create_handle", "TAPP_create_tensor_info", "TAPP_create_tensor_product",
            "TAPP_execute_product")
#: Optional symbols the bridge uses when a library exports them.
OPTIONAL = ("TAPP_destroy_handle", "TAPP_create_executor", "TAPP_destroy_executor",
            "TAPP_destroy_tensor_info", "TAPP_destroy_tensor_product", "TAPP_destroy_status",
            "TAPP_explain_error", "TAPP_check_success", "TAPP_execute_batched_product",
            "TAPP_attr_set", "TAPP_attr_get", "TAPP_attr_clear", "TAPP_executor_get_status",
            "TAPP_executor_wait", "TAPP_status_check_completion", "TAPP_status_get_error",
            "TAPP_implementation_name")
#: Completion values of ``TAPP_status_check_completion`` (upstream's status.h proposal).
_INCOMPLETE, _COMPLETE, _FAILED = 0, 1, 2
#: Most C products (one per distinct operand layout) a plan keeps; older ones are destroyed.
MAX_PRODUCTS = 8

_i64p = ctypes.POINTER(ctypes.c_int64)
_ptr = ctypes.c_void_p
_obj = ctypes.c_ssize_t  # intptr_t: every TAPP object handle
_objp = ctypes.POINTER(_obj)
_int = ctypes.c_int


def _int64s(values: Sequence[int]) -> Any:
    return (ctypes.c_int64 * max(len(values), 1))(*values)


#: Functions that take the handle as their second argument in the multi-tapp ABI (its branch of
#: the reference: every call names the library through its handle).
_HANDLE_SECOND = frozenset({
    "TAPP_destroy_tensor_info", "TAPP_destroy_tensor_product", "TAPP_execute_product",
    "TAPP_destroy_status", "TAPP_explain_error", "TAPP_check_success", "TAPP_attr_set",
    "TAPP_attr_get", "TAPP_attr_clear"})


def _signatures(abi: str) -> dict[str, tuple[list[Any], Any]]:
    """(argtypes, restype) of every TAPP symbol in ``abi``."""
    table = _released_signatures(abi)
    if abi == "multi-tapp":
        for name in _HANDLE_SECOND:
            argtypes, restype = table[name]
            table[name] = ([argtypes[0], _obj, *argtypes[1:]], restype)
    return table


def _released_signatures(abi: str) -> dict[str, tuple[list[Any], Any]]:
    """Return the signatures with the handle where the released ABI (or ``abi``) has it."""
    multi = abi == "multi-tapp"
    info_handle = abi in ("multi-tapp", "cutensor_bindings")
    # The released attributes.h declares attr_get(attr, key, void* value); cutensor_bindings
    # returns the value through void** (both are one pointer-sized argument in the C ABI).
    attr_value = ctypes.POINTER(_ptr) if abi == "cutensor_bindings" else _ptr
    return {
        "TAPP_create_handle": ([ctypes.c_uint64, _objp] if multi else [_objp], _int),
        "TAPP_destroy_handle": ([_obj], _int),
        "TAPP_create_executor": ([_objp, _obj] if multi else [_objp], _int),
        "TAPP_destroy_executor": ([_obj, _obj] if multi else [_obj], _int),
        "TAPP_create_tensor_info": (
            [_objp, *([_obj] if info_handle else []), _int, _int, _i64p, _i64p], _int),
        "TAPP_destroy_tensor_info": ([_obj], _int),
        "TAPP_create_tensor_product": (
            [_objp, _obj, _int, _obj, _i64p, _int, _obj, _i64p, _int, _obj, _i64p, _int, _obj,
             _i64p, _int], _int),
        "TAPP_destroy_tensor_product": ([_obj], _int),
        "TAPP_execute_product": ([_obj, _obj, _objp, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr], _int),
        "TAPP_destroy_status": ([_obj], _int),
        "TAPP_explain_error": ([_int, ctypes.c_size_t, ctypes.c_char_p], ctypes.c_size_t),
        "TAPP_check_success": ([_int], ctypes.c_bool),
        "TAPP_attr_set": ([_obj, _int, _ptr], _int),
        "TAPP_attr_get": ([_obj, _int, attr_value], _int),
        "TAPP_attr_clear": ([_obj, _int], _int),
        "TAPP_executor_get_status": ([_obj, _objp], _int),
        "TAPP_executor_wait": ([_obj], _int),
        "TAPP_status_check_completion": (
            [_obj, ctypes.POINTER(_int), ctypes.POINTER(_int)], _int),
        "TAPP_status_get_error": ([_obj], _int),
        "TAPP_implementation_name": ([], ctypes.c_char_p),
    }


class Library:
    """A loaded TAPP library: its typed entry points (``None`` for optional ones it lacks).

    One per (path, ABI), loaded once and never unloaded; calls into it are serialised by
    :attr:`lock`, because a TAPP library need not be thread-safe.
    """

    def __init__(self, path: str, abi: str = "released") -> None:
        if not path:
            raise error_for(
                ErrorCode.UNSUPPORTED,
                "backend 'clib' needs a library: Handle('clib', library=PATH) or set "
                "PYTAPP_LIBRARY",
            )
        if abi not in ABIS:
            raise error_for(
                ErrorCode.UNSUPPORTED,
                f"unknown TAPP C ABI {abi!r}; choose one of {', '.join(ABIS)} or {AUTO!r}",
            )
        try:
            self.dll = ctypes.CDLL(os.path.abspath(path))
        except OSError as exc:
            raise error_for(ErrorCode.UNSUPPORTED, f"cannot load TAPP library {path!r}: {exc}") \
                from exc
        self.path, self.abi = path, abi
        self.name = os.path.basename(path)
        missing = [n for n in REQUIRED if not hasattr(self.dll, n)]
        if missing:
            raise error_for(
                ErrorCode.UNSUPPORTED,
                f"{path!r} does not export the TAPP C API (missing {', '.join(missing)})",
            )
        self.fn: dict[str, Any] = {}
        for name, (argtypes, restype) in _signatures(abi).items():
            fn = getattr(self.dll, name, None)
            if fn is not None:
                fn.argtypes, fn.restype = argtypes, restype
            self.fn[name] = fn
        self.lock = threading.RLock()

    def has(self, name: str) -> bool:
        """Whether the library exports ``name``."""
        return self.fn.get(name) is not None

    def optional_symbols(self) -> list[str]:
        """Return the optional TAPP symbols (:data:`OPTIONAL`) this library exports."""
        return [n for n in OPTIONAL if hasattr(self.dll, n)]

    def implementation_name(self) -> str:
        """``TAPP_implementation_name()`` when exported (a non-standard extension), else ""."""
        if not self.has("TAPP_implementation_name"):
            return ""
        with self.lock:
            raw = self.fn["TAPP_implementation_name"]()
        return raw.decode("utf-8", "replace") if raw else ""

    def args(self, name: str, handle: int, *args: Any) -> tuple[Any, ...]:
        """Return the arguments of ``name`` with the handle where this ABI wants it."""
        if self.abi == "multi-tapp" and name in _HANDLE_SECOND:
            return (args[0], handle, *args[1:])
        return args

    def explain(self, code: int, handle: int = 0) -> str:
        """Return the library's text for ``code`` ("" when it has none)."""
        if not self.has("TAPP_explain_error"):
            return ""
        buf = ctypes.create_string_buffer(512)
        n = int(self.fn["TAPP_explain_error"](
            *self.args("TAPP_explain_error", handle, int(code), len(buf), buf)))
        return buf.value[: max(0, min(n, len(buf) - 1))].decode("utf-8", "replace").strip()

    def check(self, code: int, call: str, handle: int = 0) -> None:
        """Raise the TappError for a non-zero code returned by ``call``."""
        if code == 0:
            return
        text = self.explain(code, handle) or (
            "the library gave no explanation for this code" if self.has("TAPP_explain_error")
            else "the library exports no TAPP_explain_error")
        # Codes 1-14 mean the same in every TAPP implementation; any other code is the
        # library's own (other libraries already use 15 for other meanings), reported as
        # "not supported" with its number and text.
        mapped = code if 1 <= code <= 14 else ErrorCode.UNSUPPORTED
        err = error_for(mapped, f"{self.name}: {call} returned {code}: {text}")
        err.library_code = code  # type: ignore[attr-defined]
        raise err

    def call(self, name: str, *args: Any, handle: int = 0) -> None:
        """Call entry point ``name`` under the library lock; raise on a non-zero code."""
        with self.lock:
            code = self.fn[name](*self.args(name, handle, *args))
        self.check(int(code), name, handle)

    def destroy(self, name: str, *args: Any, handle: int = 0) -> None:
        """Call an optional destroy function; its failure is ignored (nothing to recover)."""
        if self.has(name):
            with self.lock:
                self.fn[name](*self.args(name, handle, *args))


_LIBRARIES: dict[tuple[str, str], Library] = {}
_libraries_lock = threading.Lock()


def library(path: str, abi: str = "released") -> Library:
    """Return the :class:`Library` for ``path`` and ``abi`` (loaded once per process)."""
    key = (os.path.abspath(path) if path else "", abi)
    with _libraries_lock:
        if key not in _LIBRARIES:
            _LIBRARIES[key] = Library(path, abi)
        return _LIBRARIES[key]


def _close_session(lib: Library, handle: int, executor: int) -> None:
    if executor:
        if lib.abi == "multi-tapp":
            lib.destroy("TAPP_destroy_executor", executor, handle)
        else:
            lib.destroy("TAPP_destroy_executor", executor)
    lib.destroy("TAPP_destroy_handle", handle)


class Session:
    """One C handle and executor, owned by one :class:`ClibBackend` (one pytapp Handle).

    Plans keep a reference to their session, so the C handle outlives every product made
    through it, even when Python collects the objects instead of destroying them.
    """

    def __init__(self, lib: Library) -> None:
        self.lib = lib
        handle = _obj(0)
        if lib.abi == "multi-tapp":
            lib.call("TAPP_create_handle", 0, ctypes.byref(handle))
        else:
            lib.call("TAPP_create_handle", ctypes.byref(handle))
        self.handle = int(handle.value)
        executor = _obj(0)
        if lib.has("TAPP_create_executor"):
            try:
                if lib.abi == "multi-tapp":
                    lib.call("TAPP_create_executor", ctypes.byref(executor), self.handle)
                else:
                    lib.call("TAPP_create_executor", ctypes.byref(executor))
            except BaseException:
                lib.destroy("TAPP_destroy_handle", self.handle)
                raise
        self.executor = int(executor.value)
        self._finalizer = weakref.finalize(self, _close_session, lib, self.handle,
                                           self.executor)

    @property
    def closed(self) -> bool:
        """Whether the C handle was destroyed."""
        return not self._finalizer.alive

    def close(self) -> None:
        """Destroy the executor, then the C handle (idempotent)."""
        self._finalizer()


def _destroy_products(lib: Library, products: dict[Any, tuple[int, list[int]]],
                      session: Session) -> None:
    """Destroy every product, then its infos (the product may read them until destroyed)."""
    handle = session.handle  # the session is kept alive until now: the C handle outlives
    for plan, infos in products.values():  # the products
        lib.destroy("TAPP_destroy_tensor_product", plan, handle=handle)
        for info in infos:
            lib.destroy("TAPP_destroy_tensor_info", info, handle=handle)
    products.clear()


class ClibPlan:
    """C-side tensor products, one per operand layout; descriptors in merged (diagonal) form.

    The layout of the plan's descriptors gets its product at creation; other layouts (inputs
    copied because they overlap D) get theirs on first use, at most :data:`MAX_PRODUCTS`.
    """

    def __init__(self, spec: ContractionSpec, session: Session) -> None:
        self.spec, self.session, self.lib = spec, session, session.lib
        ids: dict[Hashable, int] = {}
        for op in spec.operands:
            for x in op.modes.labels:
                ids.setdefault(x, len(ids))
        self.ids = ids
        self.algorithm = f"C library {self.lib.name}"
        self.workspace_bytes = 0  # whatever the library allocates is its own affair
        self._products: OrderedDict[tuple[tuple[int, ...], ...], tuple[int, list[int]]] = (
            OrderedDict())
        self._finalizer = weakref.finalize(self, _destroy_products, self.lib, self._products,
                                           session)
        self._product(tuple(tuple(op.modes.strides) for op in spec.operands))

    def _info(self, op: OperandSpec, strides: Sequence[int]) -> int:
        info = _obj(0)
        head = [self.session.handle] if self.lib.abi in ("multi-tapp", "cutensor_bindings") \
            else []
        self.lib.call("TAPP_create_tensor_info", ctypes.byref(info), *head, int(op.datatype),
                      len(op.modes.extents), _int64s(op.modes.extents), _int64s(strides))
        return int(info.value)

    def _product(self, strides: tuple[tuple[int, ...], ...]) -> int:
        """Return the C product for these (merged) strides, created once."""
        found = self._products.get(strides)
        if found is not None:
            self._products.move_to_end(strides)
            return found[0]
        spec, lib = self.spec, self.lib
        infos: list[int] = []
        try:
            for op, s in zip(spec.operands, strides, strict=True):
                infos.append(self._info(op, s))
            labels = [_int64s([self.ids[x] for x in op.modes.labels]) for op in spec.operands]
            plan = _obj(0)
            args: list[Any] = [ctypes.byref(plan), self.session.handle]
            for op, info, lab in zip(spec.operands, infos, labels, strict=True):
                args += [int(op.op), info, lab]
            args.append(int(spec.prec))
            lib.call("TAPP_create_tensor_product", *args, handle=self.session.handle)
        except BaseException:
            for info in infos:
                lib.destroy("TAPP_destroy_tensor_info", info, handle=self.session.handle)
            raise
        self._products[strides] = (int(plan.value), infos)
        while len(self._products) > MAX_PRODUCTS:
            old, old_infos = self._products.popitem(last=False)[1]
            lib.destroy("TAPP_destroy_tensor_product", old, handle=self.session.handle)
            for info in old_infos:
                lib.destroy("TAPP_destroy_tensor_info", info, handle=self.session.handle)
        return int(plan.value)

    @staticmethod
    def _strides(x: np.ndarray) -> tuple[int, ...]:
        return tuple(s // x.itemsize for s in x.strides)

    def run(self, bound: BoundProduct, executor: Executor | None) -> Status:
        """Call ``TAPP_execute_product`` with pointers to element [0, ..., 0].

        D's elements are saved first and restored if the library reports an error (through
        its return code or, for asynchronous libraries, through the status), so an error
        never changes D. With ``alpha == 0`` the library is not called (SPEC section 1).
        """
        spec, lib = self.spec, self.lib
        status = Status(backend="clib", algorithm=self.algorithm, flops=spec.flops)
        if bound.alpha == 0:
            _beta_term(bound, spec)
            status.algorithm = "alpha == 0: beta op_C(C) without the library"
            return status
        c = bound.c if bound.c is not None else bound.d
        views = (bound.a, bound.b, c, bound.d)
        dtype = spec.d.datatype.numpy_dtype
        alpha = np.array(bound.alpha, dtype=dtype)
        beta = np.array(0 if bound.c is None else bound.beta, dtype=dtype)
        ptr = [int(v.__array_interface__["data"][0]) for v in views]
        c_ptr = None if bound.c is None else ptr[2]
        handle = self.session.handle
        saved = bound.d.copy()  # what the library may write, restored if it then fails
        status.bytes_copied = saved.nbytes
        st = _obj(0)
        with lib.lock:
            plan = self._product(tuple(self._strides(v) for v in views))
            code = int(lib.fn["TAPP_execute_product"](*lib.args(
                "TAPP_execute_product", handle, plan, self.session.executor, ctypes.byref(st),
                alpha.ctypes.data, ptr[0], ptr[1], beta.ctypes.data, c_ptr, ptr[3])))
            if code == 0:
                code = self._finish(int(st.value))
            if st.value:
                lib.destroy("TAPP_destroy_status", st.value, handle=handle)
        if code != 0:
            np.copyto(bound.d, saved)
            lib.check(code, "TAPP_execute_product", handle)
        return status

    def _finish(self, status: int) -> int:
        """Wait for an asynchronous library; return the execution's error code (0: success).

        Called under the library lock, only when the library exports the asynchronous
        symbols: ``TAPP_executor_wait`` (D may be read only after it), then
        ``TAPP_status_check_completion`` on the execution's status.
        """
        lib, executor = self.lib, self.session.executor
        if executor and lib.has("TAPP_executor_wait"):
            code = int(lib.fn["TAPP_executor_wait"](executor))
            if code != 0:
                return code
        if status and lib.has("TAPP_status_check_completion"):
            completion, error = _int(_COMPLETE), _int(0)
            code = int(lib.fn["TAPP_status_check_completion"](
                status, ctypes.byref(completion), ctypes.byref(error)))
            if code != 0:
                return code
            if completion.value == _FAILED:
                return int(error.value) or _library_error(lib, status)
            if completion.value == _INCOMPLETE:  # waited for, yet not done: not TAPP's rules
                return int(ErrorCode.UNSUPPORTED)
        return 0

    def release(self) -> None:
        """Destroy every C product, then its infos (idempotent)."""
        self._finalizer()

    @property
    def live_products(self) -> int:
        """How many C products this plan holds."""
        return len(self._products)


def _library_error(lib: Library, status: int) -> int:
    """Return a failed execution's code from ``TAPP_status_get_error`` (18 if none)."""
    if lib.has("TAPP_status_get_error"):
        code = int(lib.fn["TAPP_status_get_error"](status))
        if code:
            return code
    return int(ErrorCode.UNSUPPORTED)


def _beta_term(bound: BoundProduct, spec: ContractionSpec) -> None:
    """D = op_D(beta op_C(C)), or +0 when C is not read: the product with ``alpha == 0``.

    Computed in NumPy without the library, which might read A and B (the official reference
    multiplies by alpha, so NaN in A would reach D).
    """
    d = bound.d
    if bound.c is None:
        d[...] = 0
        return
    c = bound.c
    if spec.c.op == ElementOp.CONJUGATE:
        c = np.conjugate(c)
    value = np.multiply(bound.beta, c)
    if spec.d.op == ElementOp.CONJUGATE:
        value = np.conjugate(value)
    if d.dtype.kind != "c" and np.iscomplexobj(value):
        value = value.real  # a complex value stored in a real D keeps its real part
    np.copyto(d, value, casting="unsafe")


class ClibBackend:
    """A C library exporting the TAPP C API, loaded with ctypes; one per pytapp Handle."""

    name = "clib"
    # Whatever the C library supports (its errors are reported with its own texts); no
    # broadcast labels: the TAPP C API has no Case 5.
    capabilities = Capabilities(
        broadcast=False,
    )

    def __init__(self, library: str | None = None, abi: str | None = None) -> None:
        self.library = library or os.environ.get("PYTAPP_LIBRARY", "")
        #: The ABI asked for: one of :data:`ABIS`, or :data:`AUTO` (detected on first use).
        self.abi = abi or os.environ.get("PYTAPP_CLIB_ABI", "") or ABIS[0]
        self._session: Session | None = None
        self._lock = threading.Lock()

    def lib(self) -> Library:
        """Return the loaded library (loaded once per path and ABI; ``auto`` probes first)."""
        abi = self.abi
        if abi == AUTO and self.library:
            from pytapp.backends.clib_probe import detect

            abi = self.abi = detect(os.path.abspath(self.library))
        return library(self.library, abi)

    def session(self) -> Session:
        """Return this backend's C handle and executor (created on first use)."""
        with self._lock:
            if self._session is None or self._session.closed:
                self._session = Session(self.lib())
            return self._session

    def available(self) -> tuple[bool, str]:
        """Whether a library is configured and loads."""
        if not self.library:
            return False, "no library given (Handle('clib', library=PATH) or PYTAPP_LIBRARY)"
        try:
            self.lib()
        except Exception as exc:
            return False, str(getattr(exc, "message", exc))
        return True, ""

    def plan(self, spec: ContractionSpec, executor: Executor | None) -> ClibPlan:
        """Create the C-side descriptors and product."""
        self.capabilities.require(spec, self.name)
        return ClibPlan(spec, self.session())

    def release(self) -> None:
        """Destroy the executor and the C handle (plans hold the session until released)."""
        with self._lock:
            session, self._session = self._session, None
        if session is not None:
            session.close()
