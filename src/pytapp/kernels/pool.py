"""The threads that run kernel blocks: the BLAS's own, else a small pool of Python threads.

Kernels release the GIL, so blocks of one call run in parallel. They run on OpenBLAS's
threads where the extension can hand them over (:func:`pytapp.kernels.program.pool_map`):
those threads busy-wait for a while after every BLAS call, so threads of our own would
compete with them for the cores. Otherwise on a pool of Python threads (created on first
use), whose idle threads sleep on a queue.

Examples
--------
>>> seen = []
>>> run_blocks(lambda lo, hi: seen.append((lo, hi)), 10, threads=2, min_blocks=1)
>>> sorted(seen)
[(0, 5), (5, 10)]
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

__all__ = ["cores", "executor", "run_blocks"]

_pool: ThreadPoolExecutor | None = None
_size = 0
_lock = threading.Lock()


_affinity: dict[int, int] = {}  # process id -> cores of its CPU affinity, read once


def cores() -> int:
    """Cores this process may use.

    Its CPU affinity (read once per process, as the BLAS and OpenMP pools do), capped by
    ``OMP_NUM_THREADS`` when set (Dask workers, job schedulers and users set it to keep
    processes from oversubscribing the machine; pytapp's own threads follow it like the BLAS
    and OpenMP pools do).
    """
    pid = os.getpid()  # a forked child reads its own
    n = _affinity.get(pid)
    if n is None:
        try:
            n = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not on Linux
            n = os.cpu_count() or 1
        _affinity.clear()
        _affinity[pid] = n
    text = os.environ.get("OMP_NUM_THREADS")
    if not text:
        return n
    try:
        limit = int(text)
    except ValueError:
        return n
    return max(1, min(n, limit)) if limit > 0 else n


def executor(threads: int) -> ThreadPoolExecutor:
    """Return the shared pool, with at least ``threads`` workers (pytapp's only thread pool)."""
    global _pool, _size
    with _lock:
        if _pool is None or _size < threads:
            _pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="pytapp")
            _size = threads
        return _pool


def run_blocks(work: Callable[[int, int], object], blocks: int, threads: int,
               min_blocks: int = 2) -> None:
    """Run ``work(lo, hi)`` over ``[0, blocks)`` split into ``threads`` contiguous ranges.

    One range (on the calling thread) when ``threads`` is 1 or there are fewer than
    ``min_blocks`` blocks per thread.
    """
    n = max(1, min(threads, blocks // max(min_blocks, 1)))
    if n <= 1:
        work(0, blocks)
        return
    bounds = [blocks * i // n for i in range(n + 1)]
    ranges = [(lo, hi) for lo, hi in itertools.pairwise(bounds) if hi > lo]
    from pytapp.kernels.program import pool_map  # the extension's module: on first use

    if pool_map(lambda i: work(*ranges[i]), len(ranges)):  # the BLAS's threads, else ours
        return
    futures = [executor(n).submit(work, lo, hi) for lo, hi in ranges[1:]]
    work(*ranges[0])  # the caller works too
    for f in futures:
        f.result()
