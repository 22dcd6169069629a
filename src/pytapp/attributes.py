"""Key-value attributes shared by every TAPP object (SPEC section 4).

Keys below ``0x1000`` are standard (:class:`Attr`); keys from ``0x1000`` up are free for
backends. Each object class declares which standard keys it accepts and which are read-only.

Examples
--------
>>> store = AttributeStore()
>>> store.set_attr(0x1001, "tile=64")
>>> store.get_attr(0x1001)
'tile=64'
>>> store.clear_attr(0x1001)
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from types import MappingProxyType, TracebackType
from typing import Any, ClassVar, TypeVar

from pytapp.errors import ErrorCode, error_for

__all__ = ["BACKEND_KEYS", "Attr", "AttributeStore", "TappObject"]

#: First key that backends may use freely.
BACKEND_KEYS = 0x1000


class Attr(IntEnum):
    """Standard attribute keys."""

    ALLOW_BROADCAST = 1
    NUM_THREADS = 2
    DEVICE = 3
    VERIFY = 4
    ALGORITHM = 5
    BACKEND = 6
    MEMORY_LIMIT = 7
    AUTOTUNE = 8
    LIBRARY = 9


class AttributeStore:
    """Mixin: ``set_attr``, ``get_attr``, ``clear_attr`` with per-class key validation.

    Standard keys listed in ``_attr_fields`` are views of the object's typed fields (the
    fields are the source of truth; ``None`` means not set); every other key lives in a
    dictionary.
    """

    #: Standard keys this object accepts.
    _attr_keys: ClassVar[frozenset[int]] = frozenset()
    #: Standard keys that are set by the object itself and cannot be changed.
    _attr_readonly: ClassVar[frozenset[int]] = frozenset()
    #: Standard keys kept in typed fields: key -> field name.
    _attr_fields: ClassVar[Mapping[int, str]] = MappingProxyType({})

    def _attr_store(self) -> dict[int, Any]:
        # Created on first use: dataclass subclasses (Status) never call this __init__.
        try:
            store: dict[int, Any] = self.__dict__["_attrs"]
        except KeyError:
            store = self.__dict__["_attrs"] = {}
        return store

    def _check_key(self, key: int) -> int:
        if not isinstance(key, int) or isinstance(key, bool) or key < 0:
            raise error_for(
                ErrorCode.ATTRIBUTE_KEY,
                f"attribute key {key!r} is not a non-negative integer; use pytapp.Attr or a "
                f"backend key >= {BACKEND_KEYS:#x}",
            )
        if key < BACKEND_KEYS and key not in self._attr_keys:
            valid = ", ".join(Attr(k).name for k in sorted(self._attr_keys)) or "none"
            raise error_for(
                ErrorCode.ATTRIBUTE_KEY,
                f"attribute key {key} is not valid for {type(self).__name__}; standard keys "
                f"valid here: {valid}; backend keys start at {BACKEND_KEYS:#x}",
            )
        return int(key)

    def _writable_key(self, key: int) -> int:
        k = self._check_key(key)
        if k in self._attr_readonly:
            raise error_for(
                ErrorCode.ATTRIBUTE_KEY,
                f"attribute {Attr(k).name} of {type(self).__name__} is read-only; "
                "pass it when creating the object",
            )
        return k

    def _set_attr_internal(self, key: int, value: Any) -> None:
        if key in self._attr_fields:
            setattr(self, self._attr_fields[key], value)
        else:
            self._attr_store()[int(key)] = value

    def set_attr(self, key: int, value: Any) -> None:
        """Set attribute ``key`` to ``value``.

        Raises
        ------
        AttributeKeyError
            Code 26 for a key not valid for this object or read-only here.
        """
        k = self._writable_key(key)
        self._on_set_attr(k, value)
        self._set_attr_internal(k, value)

    def _on_set_attr(self, key: int, value: Any) -> None:
        """Validate a value before it is stored (a hook for subclasses)."""

    def get_attr(self, key: int) -> Any:
        """Return the value of attribute ``key``.

        Raises
        ------
        AttributeKeyError
            Code 26 when the key is not set or not valid for this object.
        """
        k = self._check_key(key)
        value = self.attributes().get(k)
        if value is None:
            name = Attr(k).name if k < BACKEND_KEYS else f"{k:#x}"
            raise error_for(
                ErrorCode.ATTRIBUTE_KEY, f"attribute {name} is not set on {type(self).__name__}"
            )
        return value

    def clear_attr(self, key: int) -> None:
        """Remove attribute ``key`` (no error when it was not set).

        Raises
        ------
        AttributeKeyError
            Code 26 for a key not valid for this object or read-only here.
        """
        k = self._writable_key(key)
        if k in self._attr_fields:
            setattr(self, self._attr_fields[k], None)
        else:
            self._attr_store().pop(k, None)

    def attributes(self) -> dict[int, Any]:
        """Return a copy of every attribute that is set."""
        out = {k: v for k, v in self._attr_store().items() if v is not None}
        for k, name in self._attr_fields.items():
            value = getattr(self, name)
            if value is not None:
                out[k] = value
        return out


_T = TypeVar("_T", bound="TappObject")


class TappObject(AttributeStore):
    """Lifecycle shared by handles, executors, plans and statuses.

    ``destroy()`` is idempotent; use after destroy raises code 23; objects are context
    managers that destroy themselves on exit.
    """

    _destroyed: bool = False

    def check_alive(self) -> None:
        """Raise code 23 when the object was destroyed."""
        if self._destroyed:
            name = type(self).__name__
            raise error_for(ErrorCode.DESTROYED, f"this {name} was destroyed; create a new one")

    @property
    def destroyed(self) -> bool:
        """Whether :meth:`destroy` was called."""
        return self._destroyed

    def destroy(self) -> None:
        """Release the object and what it holds (idempotent); later use raises code 23."""
        if self._destroyed:
            return
        self._destroyed = True
        self._release()

    def _release(self) -> None:
        """Free what the object holds (called once, by :meth:`destroy`)."""

    def __enter__(self: _T) -> _T:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.destroy()
