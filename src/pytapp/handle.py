"""Handle: the library state and the backend choice (Multi-TAPP).

Examples
--------
>>> with Handle("reference") as h:
...     h.backend_name
'reference'
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from pytapp import backends
from pytapp.attributes import Attr, TappObject
from pytapp.backends.base import Backend
from pytapp.errors import ErrorCode, error_for
from pytapp.executor import Executor, default_memory_limit
from pytapp.typing import BackendName

if TYPE_CHECKING:
    from pytapp.attributes import TappObject as _Owned

__all__ = ["CachedPlan", "Handle", "PlanCache", "default_backend_name"]


#: ``os.environ``'s own store (POSIX: encoded keys and values), read without the mapping's
#: encode and decode (1.2-1.6 us a call, the largest part of a cached einsum's key).
_ENVIRON: dict[Any, Any] | None = getattr(os.environ, "_data", None)
_BACKEND_KEY: Any = (os.environ.encodekey("PYTAPP_BACKEND")
                     if _ENVIRON is not None and hasattr(os.environ, "encodekey") else None)
_backend_values: dict[Any, str] = {}


def default_backend_name() -> str:
    """``PYTAPP_BACKEND`` when set, else the registry's default (read on every call)."""
    if _BACKEND_KEY is None:
        return os.environ.get("PYTAPP_BACKEND", "").strip() or backends.DEFAULT_BACKEND
    raw = _ENVIRON.get(_BACKEND_KEY)  # type: ignore[union-attr]
    if raw is None:
        return backends.DEFAULT_BACKEND
    name = _backend_values.get(raw)
    if name is None:
        if len(_backend_values) > 16:
            _backend_values.clear()
        name = _backend_values[raw] = os.environ.decodevalue(raw).strip()
    return name or backends.DEFAULT_BACKEND


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
    abi
        The C ABI of that library: ``'released'`` (default, or ``PYTAPP_CLIB_ABI``),
        ``'multi-tapp'``, ``'cutensor_bindings'``, or ``'auto'`` (detected by a probe run in a
        child process).
    allow_broadcast
        Default of the ALLOW_BROADCAST attribute for products created through this handle.

    Raises
    ------
    UnsupportedError
        Code 18 for an unknown or unavailable backend; the message lists the valid names.

    Notes
    -----
    ``destroy()`` destroys every plan created through the handle, then releases what the
    backend holds for it (for ``clib``: the C executor and handle).
    """

    _attr_keys = frozenset({Attr.BACKEND, Attr.ALLOW_BROADCAST, Attr.MEMORY_LIMIT, Attr.LIBRARY})
    _attr_readonly = frozenset({Attr.BACKEND, Attr.LIBRARY})
    _attr_fields: ClassVar[Mapping[int, str]] = MappingProxyType({
        Attr.BACKEND: "backend_name", Attr.ALLOW_BROADCAST: "_allow_broadcast",
        Attr.MEMORY_LIMIT: "_memory_limit", Attr.LIBRARY: "_library"})

    # The settings; changed only through set_attr, which validates them.
    _allow_broadcast: bool | None
    _library: str | None
    _memory_limit: int | None

    def __init__(
        self,
        backend: BackendName | None = None,
        *,
        library: str | os.PathLike[str] | None = None,
        abi: str | None = None,
        allow_broadcast: bool = False,
    ) -> None:
        super().__init__()
        self._plans: weakref.WeakSet[_Owned] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._users = 0  # calls using the handle now (see lease)
        self._retired = False
        self.plan_cache = PlanCache(self)
        self._default_limit: int | None = None
        self._memory_limit = None
        name = backend if backend is not None else default_backend_name()
        if not isinstance(name, str) or not name:
            raise error_for(
                ErrorCode.UNSUPPORTED,
                f"backend={name!r}; give a backend name such as 'auto', 'blas' or 'clib:PATH'",
            )
        if name.startswith("clib:"):
            name, library = "clib", name[len("clib:"):]
        if library is not None:
            if not isinstance(library, str | os.PathLike):
                raise error_for(
                    ErrorCode.UNSUPPORTED,
                    f"library={library!r}; give the path of a shared library as a string",
                )
            library = os.fspath(library)
            if name != "clib":
                raise error_for(
                    ErrorCode.UNSUPPORTED,
                    f"library= is for backend 'clib', not {name!r}; use Handle('clib', "
                    f"library={library!r})",
                )
        if abi is not None and name != "clib":
            raise error_for(ErrorCode.UNSUPPORTED, f"abi= is for backend 'clib', not {name!r}")
        self._backend: Backend = backends.get(name, library=library, abi=abi)
        self._library = library
        self.set_attr(Attr.ALLOW_BROADCAST, bool(allow_broadcast))

    def _on_set_attr(self, key: int, value: Any) -> None:
        if key == Attr.MEMORY_LIMIT and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            raise error_for(
                ErrorCode.ATTRIBUTE_KEY,
                f"MEMORY_LIMIT={value!r} is not valid; give a number of bytes (int >= 0)",
            )
        if key == Attr.ALLOW_BROADCAST and not isinstance(value, bool | int):
            raise error_for(
                ErrorCode.ATTRIBUTE_KEY,
                f"ALLOW_BROADCAST={value!r} is not valid; give True or False",
            )

    def _register(self, owned: _Owned) -> None:
        """Remember a plan made through this handle, so that :meth:`destroy` destroys it."""
        self._plans.add(owned)

    def _release(self) -> None:
        for owned in list(self._plans):
            owned.destroy()
        self._backend.release()

    @property
    def backend(self) -> Backend:
        """The backend object."""
        self.check_alive()
        return self._backend

    @property
    def backend_name(self) -> str:
        """The backend's name."""
        return self._backend.name


    @property
    def allow_broadcast(self) -> bool:
        """Default of ALLOW_BROADCAST for products created through this handle."""
        return bool(self._allow_broadcast)

    @property
    def library(self) -> str | None:
        """The shared library of backend ``clib`` (``None`` for other backends)."""
        return self._library

    def memory_limit(self) -> int:
        """Return the workspace limit of plans made through this handle (bytes).

        MEMORY_LIMIT when set, else half the memory available when the handle first needed
        it (read once).

        Examples
        --------
        >>> with Handle("reference") as h:
        ...     h.set_attr(Attr.MEMORY_LIMIT, 1 << 20)
        ...     h.memory_limit()
        1048576
        """
        if self._memory_limit is not None:
            return int(self._memory_limit)
        if self._default_limit is None:
            self._default_limit = default_memory_limit()
        return self._default_limit

    def create_executor(self, **kwargs: Any) -> Executor:
        """Return an :class:`Executor` bound to this handle (keywords as for Executor)."""
        self.check_alive()
        return Executor(self, **kwargs)




    # ------------------------------------------------------------------ shared use
    def lease(self) -> bool:
        """Count a call that uses this handle's plans; ``False`` when it is destroyed.

        A handle that a cache let go (:meth:`retire`) is destroyed by the last call that
        leased it, never under one. Pair every ``True`` with :meth:`unlease`.
        """
        with self._lock:
            if self._destroyed:
                return False
            self._users += 1
            return True

    def unlease(self) -> None:
        """End a call counted by :meth:`lease` (destroying a retired handle left unused)."""
        with self._lock:
            self._users -= 1
            last = self._retired and self._users == 0
        if last:
            self.destroy()

    def retire(self) -> None:
        """Let go of the handle: drop its cached plans and destroy it once no call uses it.

        Plans in use by a call are destroyed by their last user.
        """
        self.plan_cache.clear()
        with self._lock:
            self._retired = True
            idle = self._users == 0
        if idle:
            self.destroy()

    def __repr__(self) -> str:
        state = ", destroyed" if self._destroyed else ""
        return f"Handle(backend={self._backend.name!r}{state})"


class CachedPlan:
    """A plan in a :class:`PlanCache`: how many calls use it, and whether the cache dropped it.

    Attributes
    ----------
    plan
        The cached plan (a :class:`~pytapp.TensorProduct`).
    users
        Calls using it now.
    dropped
        Whether the cache let go of it (its last user destroys it).
    """

    __slots__ = ("cache", "dropped", "plan", "users")

    def __init__(self, cache: PlanCache, plan: Any) -> None:
        self.cache, self.plan, self.users, self.dropped = cache, plan, 0, False


class PlanCache:
    """A handle's bounded cache of plans, safe against calls in flight.

    Entries are keyed structurally (descriptors, labels, ops, precision) and leased: a call
    takes one with :meth:`lookup`, :meth:`insert` or :meth:`lease` and gives it back with
    :meth:`unlease`. What the cache drops (least recently used beyond its size, or
    :meth:`clear`) is destroyed at once when no call uses it, else by its last user. Leasing
    a plan also leases the handle (:meth:`Handle.lease`).

    Examples
    --------
    >>> with Handle("reference") as h:
    ...     len(h.plan_cache)
    0
    """

    def __init__(self, handle: Handle) -> None:
        self._handle = handle
        self._entries: OrderedDict[Hashable, CachedPlan] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def _take(self, entry: CachedPlan) -> bool:
        """Lease ``entry`` and its handle (the caller holds the handle's lock)."""
        handle = self._handle
        if entry.dropped or handle._destroyed or entry.plan.destroyed:
            return False
        entry.users += 1
        handle._users += 1
        return True

    def lookup(self, key: Hashable) -> CachedPlan | None:
        """Return the leased entry of ``key`` (``None`` when there is none to use)."""
        with self._handle._lock:
            entry = self._entries.get(key)
            if entry is None or not self._take(entry):
                return None
            self._entries.move_to_end(key)
            return entry

    def lease(self, entry: CachedPlan) -> bool:
        """Lease an entry found before; ``False`` when the cache has dropped it since."""
        with self._handle._lock:
            return self._take(entry)

    def insert(self, key: Hashable, plan: Any, size: int) -> CachedPlan:
        """Add ``plan`` under ``key`` and return its entry, leased; keep at most ``size``."""
        entry = CachedPlan(self, plan)
        idle = []
        handle = self._handle
        with handle._lock:
            entry.users = 1
            handle._users += 1
            old = self._entries.pop(key, None)
            if old is not None:
                idle += self._drop(old)
            self._entries[key] = entry
            while len(self._entries) > max(size, 1):
                idle += self._drop(self._entries.popitem(last=False)[1])
        for plan_ in idle:
            plan_.destroy()
        return entry

    @staticmethod
    def _drop(entry: CachedPlan) -> list[Any]:
        entry.dropped = True
        return [entry.plan] if entry.users == 0 else []

    def unlease(self, entry: CachedPlan) -> None:
        """Give back a leased entry.

        Its last user destroys a dropped plan, and a retired handle left unused.
        """
        handle = self._handle
        with handle._lock:
            entry.users -= 1
            handle._users -= 1
            destroy_plan = entry.dropped and entry.users == 0
            destroy_handle = handle._retired and handle._users == 0
        if destroy_plan:
            entry.plan.destroy()
        if destroy_handle:
            handle.destroy()

    def clear(self) -> None:
        """Drop every entry (each destroyed now, or by its last user)."""
        with self._handle._lock:
            idle = [p for entry in self._entries.values() for p in self._drop(entry)]
            self._entries.clear()
        for plan in idle:
            plan.destroy()
