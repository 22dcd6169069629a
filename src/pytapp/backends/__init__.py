"""Registry of backends, by name, imported lazily.

Examples
--------
>>> "reference" in names()
True
>>> get("reference").name
'reference'
"""

from __future__ import annotations

import importlib
from typing import Any, cast

from pytapp.backends.base import (
    Backend,
    BackendPlan,
    Capabilities,
    setup_seconds,
    thread_pool,
)
from pytapp.datatypes import Datatype
from pytapp.errors import ErrorCode, TappError, error_for
from pytapp.precision import Prectype

__all__ = [
    "DEFAULT_BACKEND",
    "Backend",
    "BackendPlan",
    "Capabilities",
    "available",
    "get",
    "import_seconds",
    "matrix_markdown",
    "names",
    "pool_of",
    "register",
]

#: Backend used when neither the handle nor ``PYTAPP_BACKEND`` names one.
DEFAULT_BACKEND = "auto"

_FACTORIES: dict[str, str] = {
    "reference": "pytapp.backends.reference:ReferenceBackend",
    "blas": "pytapp.backends.blas:BlasBackend",
    "tblis": "pytapp.backends.tblis:TblisBackend",
    "torch": "pytapp.backends.torch:TorchBackend",
    "clib": "pytapp.backends.clib:ClibBackend",
    "auto": "pytapp.backends.auto:AutoBackend",
}
_INSTANCES: dict[str, Backend] = {}


def register(name: str, factory: str) -> None:
    """Register a backend class as ``'module:ClassName'`` under ``name`` (lazy import)."""
    _FACTORIES[name] = factory
    _INSTANCES.pop(name, None)


def names() -> list[str]:
    """Names of every registered backend, available or not."""
    return list(_FACTORIES)


def get(name: str, *, library: str | None = None, abi: str | None = None) -> Backend:
    """Return the backend called ``name``.

    ``library`` and ``abi`` configure backend ``clib`` (default: ``PYTAPP_LIBRARY`` and the
    released C ABI); every call for ``clib`` gives a new backend object, which owns its own C
    handle, while the other backends are shared.

    Raises
    ------
    UnsupportedError
        Code 18 for an unknown name (the message lists the valid ones) or a backend that cannot
        run here (the message says why).
    """
    if name not in _FACTORIES:
        raise error_for(
            ErrorCode.UNSUPPORTED,
            f"unknown backend {name!r}; choose one of {', '.join(names())}",
        )
    if name == "clib":
        module_name, _, attr = _FACTORIES[name].partition(":")
        # Imported by name like every backend: the registry is the only way in (lazy import).
        backend: Backend = getattr(importlib.import_module(module_name), attr)(library, abi)
        ok, why = backend.available()
        if not ok:
            raise error_for(ErrorCode.UNSUPPORTED, f"backend 'clib' is not available: {why}")
        return backend
    if name not in _INSTANCES:
        module_name, _, attr = _FACTORIES[name].partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise error_for(
                ErrorCode.UNSUPPORTED,
                f"backend {name!r} cannot be imported ({exc}); install its extra: "
                f"pip install 'pytapp[{name}]'",
            ) from exc
        _INSTANCES[name] = cast(Backend, getattr(module, attr)())
    cached = _INSTANCES[name]
    ok, why = cached.available()
    if not ok:
        raise error_for(ErrorCode.UNSUPPORTED, f"backend {name!r} is not available: {why}")
    return cached


def available() -> dict[str, tuple[bool, str]]:
    """For every registered backend: (available, reason when not)."""
    out: dict[str, tuple[bool, str]] = {}
    for name in names():
        try:
            get(name)
            out[name] = (True, "")
        except Exception as exc:
            out[name] = (False, getattr(exc, "message", str(exc)))
    return out


#: Features of the backends matrix, as (column title, capability test).
_FEATURES: list[tuple[str, Any]] = [
    ("F32/F64", lambda c: {Datatype.F32, Datatype.F64} <= c.datatypes),
    ("C32/C64", lambda c: {Datatype.C32, Datatype.C64} <= c.datatypes),
    ("F16", lambda c: Datatype.F16 in c.datatypes),
    ("BF16", lambda c: Datatype.BF16 in c.datatypes),
    ("mixed types", lambda c: c.mixed_datatypes),
    ("all precisions", lambda c: c.prectypes == frozenset(Prectype)),
    ("F16 accum.", lambda c: Prectype.F16F16_ACCUM_F16 in c.prectypes),
    ("broadcast (Case 5)", lambda c: c.broadcast),
    ("isolated (Case 4)", lambda c: c.isolated_labels),
    ("repeated labels", lambda c: c.repeated_labels),
    ("negative strides", lambda c: c.negative_strides),
    ("conjugation", lambda c: c.conjugation),
    ("batched", lambda c: c.batched),
]


def matrix_markdown() -> str:
    """Return the backends x features table of the README, from the declared capabilities."""
    header = ["backend", *[f for f, _ in _FEATURES]]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for name, factory in _FACTORIES.items():
        module_name, _, attr = factory.partition(":")
        caps = getattr(importlib.import_module(module_name), attr).capabilities
        cells = ["yes" if test(caps) else "no" for _, test in _FEATURES]
        lines.append("| " + " | ".join([f"`{name}`", *cells]) + " |")
    return "\n".join(lines)


def import_seconds(name: str) -> float:
    """Seconds backend ``name``'s first plan would spend importing its library (0: imported).

    0 as well for a backend that is not available here (it is never planned).

    Examples
    --------
    >>> import_seconds("blas")
    0.0
    """
    try:
        return setup_seconds(get(name))
    except TappError:
        return 0.0


def pool_of(name: str) -> str:
    """Name the thread pool backend ``name`` runs on (:func:`~pytapp.backends.base.thread_pool`).

    Examples
    --------
    >>> pool_of("blas")
    'blas'
    """
    try:
        return thread_pool(get(name))
    except TappError:
        return thread_pool(None)
