"""Status: what one execution did.

Examples
--------
>>> st = Status(backend="reference", algorithm="loop nest", flops=48)
>>> st.wait() is st, st.gflops_per_second
(True, 0.0)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from pytapp.attributes import Attr, TappObject

__all__ = ["Status"]


@dataclass
class Status(TappObject):
    """Record of one execution (or one batch of executions).

    Attributes
    ----------
    backend
        Name of the backend that ran.
    algorithm
        What the backend did (e.g. ``'gemm'``, ``'ttgt'``, ``'loop nest'``).
    seconds
        Wall time of the run, binding included.
    flops
        Floating-point operations of the product (times the batch size).
    bytes_copied
        Bytes copied into temporaries (transpositions, overlap copies).
    bytes_allocated
        Peak bytes of workspace allocated.
    products
        Number of products run (more than 1 for batched execution).
    """

    backend: str = ""
    algorithm: str = ""
    seconds: float = 0.0
    flops: int = 0
    bytes_copied: int = 0
    bytes_allocated: int = 0
    products: int = 1

    _attr_keys = frozenset({Attr.BACKEND, Attr.ALGORITHM})
    _attr_readonly = frozenset({Attr.BACKEND, Attr.ALGORITHM})
    _attr_fields: ClassVar[Mapping[int, str]] = MappingProxyType(
        {Attr.BACKEND: "backend", Attr.ALGORITHM: "algorithm"})

    @property
    def gflops_per_second(self) -> float:
        """Achieved GFLOP/s (0 when no time was measured)."""
        return self.flops / self.seconds / 1e9 if self.seconds > 0 else 0.0

    def wait(self) -> Status:
        """Block until the execution is complete (CPU backends are synchronous)."""
        return self

    def merge(self, other: Status) -> None:
        """Add another run's counters to this one (batched execution)."""
        self.seconds += other.seconds
        self.flops += other.flops
        self.bytes_copied += other.bytes_copied
        self.bytes_allocated = max(self.bytes_allocated, other.bytes_allocated)
        self.products += other.products



