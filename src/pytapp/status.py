"""Status: what one execution did, and whether it has finished (SPEC section 4).

Synchronous executors return a completed Status. An asynchronous executor (a Dask cluster
with ``blocking=False``) returns the Status at once: :meth:`Status.check_completion` tells,
without blocking, whether it is still running, finished, or failed, and :meth:`Status.wait`
blocks until it is done and raises the execution's error.

Examples
--------
>>> st = Status(backend="reference", algorithm="loop nest", flops=48)
>>> st.check_completion() is Completion.COMPLETE, st.wait() is st
(True, True)
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import IntEnum
from types import MappingProxyType
from typing import ClassVar

from pytapp.attributes import Attr, TappObject

__all__ = ["Completion", "Status"]


class Completion(IntEnum):
    """State of an execution, as upstream TAPP's ``TAPP_status_check_completion`` gives it."""

    INCOMPLETE = 0
    COMPLETE = 1
    FAILED = 2


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
    #: The running execution of an asynchronous executor (``None``: already complete).
    _future: Future[object] | None = field(default=None, repr=False, compare=False)

    _attr_keys = frozenset({Attr.BACKEND, Attr.ALGORITHM})
    _attr_readonly = frozenset({Attr.BACKEND, Attr.ALGORITHM})
    _attr_fields: ClassVar[Mapping[int, str]] = MappingProxyType(
        {Attr.BACKEND: "backend", Attr.ALGORITHM: "algorithm"})

    @classmethod
    def pending(cls, future: Future[object], **fields: object) -> Status:
        """Return a Status for an execution still running in ``future``.

        Parameters
        ----------
        future
            Completes (its result ignored) when the execution is done, or holds its error.
        **fields
            The Status's counters (``backend``, ``algorithm``, ``flops`` ...).

        Examples
        --------
        >>> from concurrent.futures import Future
        >>> f: Future[object] = Future()
        >>> st = Status.pending(f, backend="dask:reference")
        >>> st.check_completion().name
        'INCOMPLETE'
        >>> f.set_result(None)
        >>> st.check_completion().name
        'COMPLETE'
        """
        status = cls(**fields)  # type: ignore[arg-type]
        status._future = future
        return status

    @property
    def gflops_per_second(self) -> float:
        """Achieved GFLOP/s (0 when no time was measured)."""
        return self.flops / self.seconds / 1e9 if self.seconds > 0 else 0.0

    def check_completion(self) -> Completion:
        """Tell, without blocking, whether the execution is running, complete or failed.

        Returns
        -------
        Completion
            ``INCOMPLETE`` while it runs (D must not be read yet), ``COMPLETE`` when D holds
            the result, ``FAILED`` when it ended with an error (:meth:`wait` raises it).

        Examples
        --------
        >>> Status().check_completion().name
        'COMPLETE'
        """
        future = self._future
        if future is None:
            return Completion.COMPLETE
        if not future.done():
            return Completion.INCOMPLETE
        return Completion.FAILED if future.exception() is not None else Completion.COMPLETE

    def error(self) -> BaseException | None:
        """Return the execution's error once it failed (``None`` while running or when fine).

        Examples
        --------
        >>> Status().error() is None
        True
        """
        future = self._future
        if future is None or not future.done():
            return None
        return future.exception()

    def wait(self) -> Status:
        """Block until the execution is complete; raise its error if it failed.

        Returns
        -------
        Status
            ``self``, complete.

        Raises
        ------
        TappError
            The execution's own error (the same one each time ``wait`` is called).

        Examples
        --------
        >>> Status(backend="blas").wait().backend
        'blas'
        """
        future = self._future
        if future is None:
            return self
        error = future.exception()  # blocks until done
        if error is not None:
            raise error
        return self

    def merge(self, other: Status) -> None:
        """Add another run's counters to this one (batched execution)."""
        self.seconds += other.seconds
        self.flops += other.flops
        self.bytes_copied += other.bytes_copied
        self.bytes_allocated = max(self.bytes_allocated, other.bytes_allocated)
        self.products += other.products

