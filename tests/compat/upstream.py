"""Run another project's own test module against pytapp, without copying its text.

:func:`load_with` executes an installed test module (numpy's ``test_einsum.py``, opt_einsum's
tests) as a fresh module in which ``import numpy`` gives a proxy: numpy itself except for the
functions replaced (``einsum`` by ``pytapp.einsum``...). Only that module sees the proxy; numpy
and every other module are untouched. The test classes and functions of the loaded module are
then exposed to pytest under new names.
"""

from __future__ import annotations

import builtins
import importlib.util
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


class Proxy(types.ModuleType):
    """A module that forwards every attribute to ``base`` except the replaced ones."""

    def __init__(self, base: types.ModuleType, replaced: Mapping[str, Any]) -> None:
        super().__init__(base.__name__)
        self.__dict__.update(replaced)
        self._base = base

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)


def installed_file(package: str, *parts: str) -> Path:
    """Return the path of a file shipped inside an installed package."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(package)
    return Path(spec.origin).parent.joinpath(*parts)


def load_with(path: Path, name: str, modules: Mapping[str, types.ModuleType]) -> types.ModuleType:
    """Execute the Python file ``path`` as module ``name``.

    ``import X`` (and ``import X as y``) of a module named in ``modules`` gives the module
    given there instead.
    """
    real_import: Callable[..., Any] = builtins.__import__

    def proxied_import(module: str, globals: Any = None, locals: Any = None,
                       fromlist: Any = (), level: int = 0) -> Any:
        if level == 0 and not fromlist and module in modules:
            return modules[module]
        return real_import(module, globals, locals, fromlist, level)

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module.__dict__["__builtins__"] = {**builtins.__dict__, "__import__": proxied_import}
    spec.loader.exec_module(module)
    return module


def expose(module: types.ModuleType, tag: str, into: dict[str, Any]) -> None:
    """Put ``module``'s test classes and functions into ``into``, their names tagged.

    ``TestX`` becomes ``TestX_<tag>`` and ``test_x`` ``test_x_<tag>``.
    """
    for key, value in vars(module).items():
        if key.startswith("Test") and isinstance(value, type):
            into[f"{key}_{tag}"] = type(f"{key}_{tag}", (value,), {})
        elif key.startswith("test_") and callable(value):
            into[f"{key}_{tag}"] = value
