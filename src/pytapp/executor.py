"""Executor: where products run (thread count, device) and whether they are verified.

Examples
--------
>>> with Executor(threads=1, verify=True) as ex:
...     ex.threads, ex.device, ex.verify
(1, 'cpu', True)
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from types import MappingProxyType
from typing import Any, ClassVar

from pytapp.attributes import Attr, TappObject
from pytapp.errors import ErrorCode, error_for
from pytapp.status import Completion

__all__ = ["Executor", "default_memory_limit", "register_runner", "runner_for", "runner_kind",
           "thread_scope"]

#: Runners by kind ("dask": a cluster, "device": a torch device), registered by the module
#: that implements them.
_RUNNERS: dict[str, Callable[[Any], Any]] = {}
_RUNNER_MODULES = {"dask": "pytapp.dask", "device": "pytapp.interop.torch_device"}
_RUNNER_NEEDS = {"dask": ("executors on a dask cluster need dask and distributed",
                          "pytapp[dask]"),
                 "device": ("executors on a device need torch", "pytapp[torch]")}


def register_runner(kind: str, factory: Callable[[Any], Any]) -> None:
    """Register a distributed runner factory for executors of ``kind``.

    Register ``factory(executor) -> runner`` for executors of ``kind`` (plug-in point:
    :mod:`pytapp.dask` registers ``"dask"`` when imported).
    """
    _RUNNERS[kind] = factory


def runner_kind(executor: Executor | None) -> str | None:
    """Return the kind of runner ``executor`` needs (``None``: it runs in this process's CPU).

    >>> runner_kind(Executor()), runner_kind(Executor(device="cuda:0"))
    (None, 'device')
    """
    if executor is None:
        return None
    if executor.dask is not None:
        return "dask"
    return None if executor.device == "cpu" else "device"


def runner_for(executor: Executor) -> Any:
    """Return the runner of ``executor``: a cluster's or a device's, imported on first use.

    Raises
    ------
    UnsupportedError
        Code 18 when the runner's library is not installed.
    """
    kind = runner_kind(executor) or "dask"
    if kind not in _RUNNERS:
        try:
            importlib.import_module(_RUNNER_MODULES[kind])
        except ImportError as exc:
            what, extra = _RUNNER_NEEDS[kind]
            raise error_for(ErrorCode.UNSUPPORTED,
                            f"{what}: pip install '{extra}'") from exc
    return _RUNNERS[kind](executor)


def thread_scope(threads: int | None) -> AbstractContextManager[Any]:
    """Limit the BLAS/OpenMP thread pools inside a ``with`` block.

    The pools get ``threads`` threads and are restored afterwards; ``None`` changes nothing.

    Examples
    --------
    >>> with thread_scope(None):
    ...     pass
    """
    if threads is None:
        return nullcontext()
    from threadpoolctl import threadpool_limits  # imported on first use, not with pytapp

    scope: AbstractContextManager[Any] = threadpool_limits(limits=threads)
    return scope


def default_memory_limit() -> int:
    """Half of the memory the system reports as available (bytes); 8 GiB when unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 // 2
    except (OSError, ValueError, IndexError):
        pass
    return 8 << 30


class Executor(TappObject):
    """Resources that execute products.

    Parameters
    ----------
    handle
        The handle that owns this executor (``None``: usable with any handle).
    threads
        Threads for BLAS/OpenMP pools during a product; ``None`` keeps the libraries' setting.
    device
        ``'cpu'``, or a torch device (``'cuda:0'``): products then run there as torch calls
        (:mod:`pytapp.interop.torch_device`), on device tensors or host data.
    verify
        Also run the reference backend and raise error 137 on disagreement.
    autotune
        Let ``auto`` time candidate backends once per plan.
    dask
        A ``distributed.Client``: ``TensorProduct.execute`` then runs block by block on its
        cluster (:mod:`pytapp.dask`) and streams D's blocks into D.
    progress
        With ``dask``: ``progress(done, total)`` after each block of D is written.
    blocking
        With ``dask``: ``False`` makes ``execute`` return as soon as the operands are checked;
        the returned :class:`~pytapp.Status` reports completion and errors
        (``check_completion``, ``wait``), and :meth:`wait` waits for every such execution.
        Executors that run in this process are synchronous whatever this says.

    Raises
    ------
    ExecutorError
        Code 33 for a thread count below 1 or a device that is not a string.
    """

    _attr_keys = frozenset(
        {Attr.NUM_THREADS, Attr.DEVICE, Attr.VERIFY, Attr.AUTOTUNE, Attr.MEMORY_LIMIT}
    )
    _attr_fields: ClassVar[Mapping[int, str]] = MappingProxyType({
        Attr.NUM_THREADS: "_threads", Attr.DEVICE: "_device", Attr.VERIFY: "_verify",
        Attr.AUTOTUNE: "_autotune", Attr.MEMORY_LIMIT: "_memory_limit"})

    # The settings; changed only through set_attr, which validates them.
    _threads: int | None
    _memory_limit: int | None
    _device: str | None
    _verify: bool | None
    _autotune: bool | None

    def __init__(
        self,
        handle: Any = None,
        *,
        threads: int | None = None,
        device: str = "cpu",
        verify: bool = False,
        autotune: bool = False,
        dask: Any = None,
        progress: Callable[[int, int], None] | None = None,
        blocking: bool = True,
    ) -> None:
        super().__init__()
        self.handle = handle
        if dask is not None and not callable(getattr(dask, "compute", None)):
            raise error_for(ErrorCode.INVALID_EXECUTOR,
                            f"dask={type(dask).__name__}; pass a distributed.Client")
        #: The ``distributed.Client`` products run on (``None``: this process).
        self.dask = dask
        self.progress = progress
        #: Whether ``execute`` on a cluster waits for the result (see ``blocking`` above).
        self.blocking = bool(blocking)
        self._pending: list[Any] = []
        self._pending_lock = threading.Lock()
        self._memory_limit = None
        self.set_attr(Attr.NUM_THREADS, threads)
        self.set_attr(Attr.DEVICE, device)
        self.set_attr(Attr.VERIFY, bool(verify))
        self.set_attr(Attr.AUTOTUNE, bool(autotune))

    def _on_set_attr(self, key: int, value: Any) -> None:
        if key == Attr.NUM_THREADS and value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise error_for(
                ErrorCode.INVALID_EXECUTOR,
                f"threads={value!r}; give a positive integer or None",
            )
        if key == Attr.MEMORY_LIMIT and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            raise error_for(
                ErrorCode.INVALID_EXECUTOR,
                f"MEMORY_LIMIT={value!r}; give a number of bytes (int >= 0)",
            )
        if key == Attr.DEVICE and not isinstance(value, str):
            raise error_for(
                ErrorCode.INVALID_EXECUTOR, f"device={value!r}; give a string such as 'cpu'"
            )

    @property
    def threads(self) -> int | None:
        """Threads for BLAS/OpenMP pools during a product (``None``: the libraries' own)."""
        return self._threads

    @property
    def memory_limit(self) -> int | None:
        """Workspace limit checked at execution (bytes; ``None``: the handle's, at creation)."""
        return self._memory_limit

    @property
    def device(self) -> str:
        """Device string (``'cpu'`` unless set)."""
        return self._device or "cpu"

    @property
    def verify(self) -> bool:
        """Whether products are checked against the reference backend."""
        return bool(self._verify)

    @property
    def autotune(self) -> bool:
        """Whether ``auto`` may time candidate backends."""
        return bool(self._autotune)

    def track(self, status: Any) -> None:
        """Remember an execution still running on this executor, for :meth:`wait`."""
        with self._pending_lock:
            # Completed ones are forgotten; failed ones stay until wait() reports them.
            self._pending = [s for s in self._pending
                             if s.check_completion() is not Completion.COMPLETE]
            self._pending.append(status)

    def wait(self) -> None:
        """Block until every execution submitted to this executor is complete.

        Raises
        ------
        TappError
            The error of the first execution (in submission order) that failed, once all
            are done; each execution's own Status also reports its error.

        Examples
        --------
        >>> Executor().wait()  # nothing submitted: returns at once
        """
        with self._pending_lock:
            pending, self._pending = self._pending, []
        first: BaseException | None = None
        for status in pending:
            try:
                status.wait()
            except BaseException as exc:  # every execution is waited for before raising
                first = first or exc
        if first is not None:
            raise first

    def __repr__(self) -> str:
        return (
            f"Executor(threads={self.threads}, device={self.device!r}, verify={self.verify})"
        )
