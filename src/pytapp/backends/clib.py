"""The ``clib`` backend: a ctypes bridge to any shared library exporting the TAPP C API.

Supported ABI (TAPP C API with integer error codes): ``TAPP_create_handle(uint64_t,
TAPP_handle*)``, ``TAPP_create_executor(TAPP_executor*)``, ``TAPP_create_tensor_info(info*,
datatype, nmode, const int64_t* extents, const int64_t* strides)``,
``TAPP_create_tensor_product(plan*, handle, op_A, A, idx_A, ..., op_D, D, idx_D, prec)``,
``TAPP_execute_product(plan, exec, status*, alpha*, A*, B*, beta*, C*, D*)``,
``TAPP_explain_error(error, maxlen, char*)`` and the destroy functions; datatype, precision and
op values as in pytapp. Handles are ``intptr_t``; strides are in elements.

pytapp validates every product itself before the library sees it (so codes are those of
SPEC section 5 whatever the library checks), binds the data with its bounds checks, and
translates the library's own error codes and texts into :class:`TappError`; a code the library
explains with an empty text is reported with a note saying so.

Select it with ``Handle("clib", library=PATH)``, ``Handle("clib:PATH")`` or the environment
variable ``PYTAPP_LIBRARY``.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from pytapp.analysis.spec import ContractionSpec, OperandSpec
from pytapp.backends.base import Capabilities
from pytapp.errors import ErrorCode, error_for
from pytapp.executor import Executor
from pytapp.operands import BoundProduct
from pytapp.status import Status

__all__ = ["ClibBackend", "ClibPlan", "Library"]

_i64p = ctypes.POINTER(ctypes.c_int64)
_ptr = ctypes.c_void_p
_handle_t = ctypes.c_ssize_t  # intptr_t


def _int64s(values: Sequence[int]) -> Any:
    return (ctypes.c_int64 * max(len(values), 1))(*values)


class Library:
    """A loaded TAPP library with typed entry points."""

    def __init__(self, path: str) -> None:
        if not path:
            raise error_for(
                ErrorCode.UNSUPPORTED,
                "backend 'clib' needs a library: Handle('clib', library=PATH) or set "
                "PYTAPP_LIBRARY",
            )
        try:
            self.dll = ctypes.CDLL(os.path.abspath(path))
        except OSError as exc:
            raise error_for(ErrorCode.UNSUPPORTED, f"cannot load TAPP library {path!r}: {exc}") \
                from exc
        self.path = path
        need = ["TAPP_create_handle", "TAPP_create_executor", "TAPP_create_tensor_info",
                "TAPP_destroy_tensor_info", "TAPP_create_tensor_product",
                "TAPP_destroy_tensor_product", "TAPP_execute_product", "TAPP_explain_error"]
        missing = [n for n in need if not hasattr(self.dll, n)]
        if missing:
            raise error_for(
                ErrorCode.UNSUPPORTED,
                f"{path!r} does not export the TAPP C API (missing {', '.join(missing)})",
            )
        d = self.dll
        d.TAPP_create_handle.argtypes = [ctypes.c_uint64, ctypes.POINTER(_handle_t)]
        d.TAPP_create_executor.argtypes = [ctypes.POINTER(_handle_t)]
        d.TAPP_create_tensor_info.argtypes = [ctypes.POINTER(_handle_t), ctypes.c_int,
                                              ctypes.c_int, _i64p, _i64p]
        d.TAPP_destroy_tensor_info.argtypes = [_handle_t]
        d.TAPP_create_tensor_product.argtypes = [
            ctypes.POINTER(_handle_t), _handle_t,
            ctypes.c_int, _handle_t, _i64p, ctypes.c_int, _handle_t, _i64p,
            ctypes.c_int, _handle_t, _i64p, ctypes.c_int, _handle_t, _i64p, ctypes.c_int]
        d.TAPP_destroy_tensor_product.argtypes = [_handle_t]
        d.TAPP_execute_product.argtypes = [_handle_t, _handle_t, ctypes.POINTER(_handle_t),
                                           _ptr, _ptr, _ptr, _ptr, _ptr, _ptr]
        d.TAPP_explain_error.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p]
        d.TAPP_explain_error.restype = ctypes.c_size_t
        for name in [*need, "TAPP_destroy_status"]:
            fn = getattr(d, name, None)
            if fn is not None and name != "TAPP_explain_error":
                fn.restype = ctypes.c_int
        if hasattr(d, "TAPP_destroy_status"):
            d.TAPP_destroy_status.argtypes = [_handle_t]
        self.handle = _handle_t(0)
        self.check(d.TAPP_create_handle(0, ctypes.byref(self.handle)), "TAPP_create_handle")
        self.executor = _handle_t(0)
        self.check(d.TAPP_create_executor(ctypes.byref(self.executor)), "TAPP_create_executor")
        self.lock = threading.Lock()

    def explain(self, code: int) -> str:
        """The library's text for ``code`` ("" when it has none)."""
        buf = ctypes.create_string_buffer(512)
        n = int(self.dll.TAPP_explain_error(int(code), len(buf), buf))
        return buf.value[: max(0, min(n, len(buf) - 1))].decode("utf-8", "replace").strip()

    def check(self, code: int, call: str) -> None:
        """Raise the TappError for a non-zero code returned by ``call``."""
        if code == 0:
            return
        text = self.explain(code)
        if not text:
            text = "the library gave no explanation for this code"
        # Codes 1-14 mean the same in every TAPP implementation; any other code is the
        # library's own, reported as "not supported" with its number and text.
        mapped = code if 1 <= code <= 14 else ErrorCode.UNSUPPORTED
        err = error_for(mapped, f"{os.path.basename(self.path)}: {call} returned {code}: {text}")
        err.library_code = code  # type: ignore[attr-defined]
        raise err


class ClibPlan:
    """A C-side tensor product per operand layout; descriptors in merged (diagonal) form."""

    def __init__(self, spec: ContractionSpec, lib: Library) -> None:
        self.spec, self.lib = spec, lib
        ids: dict[Hashable, int] = {}
        for op in spec.operands:
            for x in op.modes.labels:
                ids.setdefault(x, len(ids))
        self.ids = ids
        self.algorithm = f"C library {os.path.basename(lib.path)}"
        self.workspace_bytes = 0  # whatever the library allocates is its own affair
        self._products: dict[tuple[tuple[int, ...], ...], int] = {}
        self._product(tuple(tuple(op.modes.strides) for op in spec.operands))

    def _info(self, op: OperandSpec, strides: Sequence[int]) -> Any:
        info = _handle_t(0)
        self.lib.check(self.lib.dll.TAPP_create_tensor_info(
            ctypes.byref(info), int(op.datatype), len(op.modes.extents),
            _int64s(op.modes.extents), _int64s(strides)), "TAPP_create_tensor_info")
        return info

    def _product(self, strides: tuple[tuple[int, ...], ...]) -> int:
        """The C product for these (merged) strides, created once."""
        if strides in self._products:
            return self._products[strides]
        spec, lib = self.spec, self.lib
        infos = [self._info(op, s) for op, s in zip(spec.operands, strides, strict=True)]
        try:
            labels = [_int64s([self.ids[x] for x in op.modes.labels]) for op in spec.operands]
            plan = _handle_t(0)
            args: list[Any] = [ctypes.byref(plan), lib.handle]
            for op, info, lab in zip(spec.operands, infos, labels, strict=True):
                args += [int(op.op), info, lab]
            args.append(int(spec.prec))
            lib.check(lib.dll.TAPP_create_tensor_product(*args), "TAPP_create_tensor_product")
        finally:
            for info in infos:
                lib.dll.TAPP_destroy_tensor_info(info)
        self._products[strides] = int(plan.value)
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
        plan = self._product(tuple(self._strides(v) for v in views))
        dtype = spec.d.datatype.numpy_dtype
        alpha = np.array(bound.alpha, dtype=dtype)
        beta = np.array(0 if bound.c is None else bound.beta, dtype=dtype)
        ptr = [int(v.__array_interface__["data"][0]) for v in views]
        c_ptr = None if bound.c is None else ptr[2]
        st = _handle_t(0)
        with lib.lock:
            code = lib.dll.TAPP_execute_product(
                _handle_t(plan), lib.executor, ctypes.byref(st), alpha.ctypes.data, ptr[0],
                ptr[1], beta.ctypes.data, c_ptr, ptr[3])
        lib.check(code, "TAPP_execute_product")
        if st.value and hasattr(lib.dll, "TAPP_destroy_status"):
            lib.dll.TAPP_destroy_status(st)
        return status


_LIBRARIES: dict[str, Library] = {}


class ClibBackend:
    """A C library exporting the TAPP C API, loaded with ctypes."""

    name = "clib"
    capabilities = Capabilities(
        broadcast=False,
        notes="whatever the C library supports (its errors are reported with its own "
              "texts); no broadcast labels: the TAPP C API has no Case 5",
    )

    def __init__(self, library: str | None = None) -> None:
        self.library = library or os.environ.get("PYTAPP_LIBRARY", "")
        self._lib: Library | None = None
        self._why = ""
        if not self.library:
            self._why = "no library given (Handle('clib', library=PATH) or PYTAPP_LIBRARY)"

    def lib(self) -> Library:
        """The loaded library (loaded once per path)."""
        if self._lib is None:
            path = os.path.abspath(self.library)
            if path not in _LIBRARIES:
                _LIBRARIES[path] = Library(self.library)
            self._lib = _LIBRARIES[path]
        return self._lib

    def available(self) -> tuple[bool, str]:
        """Whether a library is configured and loads."""
        if not self.library:
            return False, self._why
        try:
            self.lib()
        except Exception as exc:
            return False, str(getattr(exc, "message", exc))
        return True, ""

    def plan(self, spec: ContractionSpec, executor: Executor | None) -> ClibPlan:
        """Create the C-side descriptors and product."""
        self.capabilities.require(spec, self.name)
        return ClibPlan(spec, self.lib())
