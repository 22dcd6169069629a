"""Handle: the library state and the backend choice (Multi-TAPP).

Examples
--------
>>> with Handle("reference") as h:
...     h.backend_name
'reference'
"""

from __future__ import annotations

import os
from typing import Any

from pytapp import backends
from pytapp.attributes import Attr, TappObject
from pytapp.backends.base import Backend
from pytapp.errors import ErrorCode, error_for
from pytapp.executor import Executor

__all__ = ["Handle", "default_backend_name"]


def default_backend_name() -> str:
    """``PYTAPP_BACKEND`` when set, else the registry's default."""
    return os.environ.get("PYTAPP_BACKEND", "").strip() or backends.DEFAULT_BACKEND


class Handle(TappObject):
    """Library handle: selects the backend that every product created through it uses.

    Parameters
    ----------
    backend
        Backend name (``'reference'``, ``'blas'``, ``'tblis'``, ``'torch'``, ``'clib'``,
        ``'auto'``); ``None`` reads ``PYTAPP_BACKEND`` and falls back to the default backend.
        ``'clib:PATH'`` is short for ``backend='clib', library=PATH``.
    library
        Path of a shared library exporting the TAPP C API (backend ``'clib'``; default
        ``PYTAPP_LIBRARY``).
    allow_broadcast
        Default of the ALLOW_BROADCAST attribute for products created through this handle.

    Raises
    ------
    UnsupportedError
        Code 18 for an unknown or unavailable backend; the message lists the valid names.
    """

    _attr_keys = frozenset({Attr.BACKEND, Attr.ALLOW_BROADCAST, Attr.MEMORY_LIMIT, Attr.LIBRARY})
    _attr_readonly = frozenset({Attr.BACKEND, Attr.LIBRARY})

    def __init__(
        self,
        backend: str | None = None,
        *,
        library: str | None = None,
        allow_broadcast: bool = False,
    ) -> None:
        super().__init__()
        name = backend if backend is not None else default_backend_name()
        if name.startswith("clib:"):
            name, library = "clib", name[len("clib:"):]
        if library is not None and name != "clib":
            raise error_for(
                ErrorCode.UNSUPPORTED,
                f"library= is for backend 'clib', not {name!r}; use Handle('clib', "
                f"library={library!r})",
            )
        self._backend: Backend = backends.get(name, library=library)
        if library is not None:
            self._set_attr_internal(Attr.LIBRARY, library)
        self._set_attr_internal(Attr.BACKEND, self._backend.name)
        self.set_attr(Attr.ALLOW_BROADCAST, bool(allow_broadcast))

    @property
    def backend(self) -> Backend:
        """The backend object."""
        self.check_alive()
        return self._backend

    @property
    def backend_name(self) -> str:
        """The backend's name."""
        return self._backend.name


    def create_executor(self, **kwargs: Any) -> Executor:
        """An :class:`Executor` bound to this handle (keywords as for Executor)."""
        self.check_alive()
        return Executor(self, **kwargs)




    def __repr__(self) -> str:
        state = ", destroyed" if self._destroyed else ""
        return f"Handle(backend={self._backend.name!r}{state})"
