"""Objects that are arrays only by duck typing, for the tests of what goes to other libraries."""

from __future__ import annotations

from typing import Any

import numpy as np


class Duck:
    """An array by duck typing only (shape, no __array__), of a library autoray does not know."""

    def __init__(self, data: np.ndarray) -> None:
        self.data = data
        self.shape = data.shape

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, key: Any) -> Any:
        return self.data[key]


class Dispatched:
    """An array of another library: numpy's functions dispatch to it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.shape = (2, 2)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        return (func.__name__, self.name)
