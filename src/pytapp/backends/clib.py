"""The ``clib`` backend: a ctypes bridge to any shared library exporting the TAPP C API.

The bridge speaks the **released** TAPP C ABI (SPEC section 8; the headers of the official
reference implementation) by default. The in-flight "multi-tapp" variant, whose
``TAPP_create_handle`` takes a library id and whose executor and tensor-info constructors take
the handle, is used only when asked for: ``Handle("clib", library=PATH, abi="multi-tapp")`` or
the environment variable ``PYTAPP_CLIB_ABI=multi-tapp``.

Only ``TAPP_create_handle``, ``TAPP_create_tensor_info``, ``TAPP_create_tensor_product`` and
``TAPP_execute_product`` are required; every other symbol is optional (no executor is passed
when ``TAPP_create_executor`` is missing, objects are not destroyed when their destroy function
is missing, codes are reported without text when ``TAPP_explain_error`` is missing).

Lifetimes follow the official reference, which keeps the *handles* of the tensor infos inside a
product and reads them at every execute: the infos of a product live exactly as long as that
product. Each pytapp :class:`~pytapp.Handle` owns one C handle and executor; each plan owns its
C products and their infos. Destroying (or garbage-collecting) a plan destroys its products,
then their infos; destroying the handle destroys its plans first, then the executor, then the
C handle.

pytapp validates every product itself before the library sees it (so codes are those of SPEC
section 5 whatever the library checks) and binds the data with its bounds checks. Codes 1-14
returned by the library keep their TAPP meaning; any other code is the library's own and is
reported as error 18 with its number and the library's text.

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
from pytapp.errors import ErrorCode, error_for
from pytapp.executor import Executor
from pytapp.operands import BoundProduct
from pytapp.status import Status

__all__ = ["ABIS", "ClibBackend", "ClibPlan", "Library", "Session", "library"]

#: C ABIs the bridge speaks; the first is the default.
ABIS = ("released", "multi-tapp")
#: The symbols every TAPP library must export.
REQUIRED = ("TAPP_create_handle", "TAPP_create_tensor_info", "TAPP_create_tensor_product",
            "TAPP_execute_product")
#: Most C products (one per distinct operand layout) a plan keeps; older ones are destroyed.
MAX_PRODUCTS = 8

_i64p = ctypes.POINTER(ctypes.c_int64)
_ptr = ctypes.c_void_p
_obj = ctypes.c_ssize_t  # intptr_t: every TAPP object handle
_objp = ctypes.POINTER(_obj)
_int = ctypes.c_int


def _int64s(values: Sequence[int]) -> Any:
    return (ctypes.c_int64 * max(len(values), 1))(*values)


def _signatures(abi: str) -> dict[str, tuple[list[Any], Any]]:
    """(argtypes, restype) of every TAPP symbol in ``abi``."""
    multi = abi == "multi-tapp"
    return {
        "TAPP_create_handle": ([ctypes.c_uint64, _objp] if multi else [_objp], _int),
        "TAPP_destroy_handle": ([_obj], _int),
        "TAPP_create_executor": ([_objp, _obj] if multi else [_objp], _int),
        "TAPP_destroy_executor": ([_obj, _obj] if multi else [_obj], _int),
        "TAPP_create_tensor_info": (
            [_objp, *([_obj] if multi else []), _int, _int, _i64p, _i64p], _int),
        "TAPP_destroy_tensor_info": ([_obj], _int),
        "TAPP_create_tensor_product": (
            [_objp, _obj, _int, _obj, _i64p, _int, _obj, _i64p, _int, _obj, _i64p, _int, _obj,
             _i64p, _int], _int),
        "TAPP_destroy_tensor_product": ([_obj], _int),
        "TAPP_execute_product": ([_obj, _obj, _objp, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr], _int),
        "TAPP_destroy_status": ([_obj], _int),
        "TAPP_explain_error": ([_int, ctypes.c_size_t, ctypes.c_char_p], ctypes.c_size_t),
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
                f"unknown TAPP C ABI {abi!r}; choose one of {', '.join(ABIS)}",
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

    def explain(self, code: int) -> str:
        """Return the library's text for ``code`` ("" when it has none)."""
        if not self.has("TAPP_explain_error"):
            return ""
        buf = ctypes.create_string_buffer(512)
        n = int(self.fn["TAPP_explain_error"](int(code), len(buf), buf))
        return buf.value[: max(0, min(n, len(buf) - 1))].decode("utf-8", "replace").strip()

    def check(self, code: int, call: str) -> None:
        """Raise the TappError for a non-zero code returned by ``call``."""
        if code == 0:
            return
        text = self.explain(code) or (
            "the library gave no explanation for this code" if self.has("TAPP_explain_error")
            else "the library exports no TAPP_explain_error")
        # Codes 1-14 mean the same in every TAPP implementation; any other code is the
        # library's own (other libraries already use 15 for other meanings), reported as
        # "not supported" with its number and text.
        mapped = code if 1 <= code <= 14 else ErrorCode.UNSUPPORTED
        err = error_for(mapped, f"{self.name}: {call} returned {code}: {text}")
        err.library_code = code  # type: ignore[attr-defined]
        raise err

    def call(self, name: str, *args: Any) -> None:
        """Call entry point ``name`` under the library lock; raise on a non-zero code."""
        with self.lock:
            code = self.fn[name](*args)
        self.check(int(code), name)

    def destroy(self, name: str, *args: Any) -> None:
        """Call an optional destroy function; its failure is ignored (nothing to recover)."""
        if self.has(name):
            with self.lock:
                self.fn[name](*args)


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
    del session  # kept alive until now: the C handle outlives the products
    for plan, infos in products.values():
        lib.destroy("TAPP_destroy_tensor_product", plan)
        for info in infos:
            lib.destroy("TAPP_destroy_tensor_info", info)
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
        head = [self.session.handle] if self.lib.abi == "multi-tapp" else []
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
            lib.call("TAPP_create_tensor_product", *args)
        except BaseException:
            for info in infos:
                lib.destroy("TAPP_destroy_tensor_info", info)
            raise
        self._products[strides] = (int(plan.value), infos)
        while len(self._products) > MAX_PRODUCTS:
            old, old_infos = self._products.popitem(last=False)[1]
            lib.destroy("TAPP_destroy_tensor_product", old)
            for info in old_infos:
                lib.destroy("TAPP_destroy_tensor_info", info)
        return int(plan.value)

    @staticmethod
    def _strides(x: np.ndarray) -> tuple[int, ...]:
        return tuple(s // x.itemsize for s in x.strides)

    def run(self, bound: BoundProduct, executor: Executor | None) -> Status:
        """Call ``TAPP_execute_product`` with pointers to element [0, ..., 0]."""
        spec, lib = self.spec, self.lib
        status = Status(backend="clib", algorithm=self.algorithm, flops=spec.flops)
        c = bound.c if bound.c is not None else bound.d
        views = (bound.a, bound.b, c, bound.d)
        dtype = spec.d.datatype.numpy_dtype
        alpha = np.array(bound.alpha, dtype=dtype)
        beta = np.array(0 if bound.c is None else bound.beta, dtype=dtype)
        ptr = [int(v.__array_interface__["data"][0]) for v in views]
        c_ptr = None if bound.c is None else ptr[2]
        st = _obj(0)
        with lib.lock:
            plan = self._product(tuple(self._strides(v) for v in views))
            code = lib.fn["TAPP_execute_product"](
                plan, self.session.executor, ctypes.byref(st), alpha.ctypes.data, ptr[0],
                ptr[1], beta.ctypes.data, c_ptr, ptr[3])
        lib.check(int(code), "TAPP_execute_product")
        if st.value:
            lib.destroy("TAPP_destroy_status", st.value)
        return status

    def release(self) -> None:
        """Destroy every C product, then its infos (idempotent)."""
        self._finalizer()

    @property
    def live_products(self) -> int:
        """How many C products this plan holds."""
        return len(self._products)


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
        self.abi = abi or os.environ.get("PYTAPP_CLIB_ABI", "") or ABIS[0]
        self._session: Session | None = None
        self._lock = threading.Lock()

    def lib(self) -> Library:
        """Return the loaded library (loaded once per path and ABI)."""
        return library(self.library, self.abi)

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
