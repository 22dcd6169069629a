"""Out of core on a Dask cluster: a product whose operand does not fit in a worker's memory.

A (192 MiB) lives in a ``.npy`` file; the one worker of a ``LocalCluster`` may use 160 MiB
(about half of which Python, NumPy and Dask need to run at all). ``TensorProduct.execute``
with a Dask executor validates the operands, then each worker reads A's blocks from the file
itself, runs one pytapp plan per block, and D's blocks stream back into a ``.npy`` memmap
with a progress bar. Checked against NumPy on the same data.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from distributed import Client, LocalCluster

import pytapp


def make_operand(path: Path, rows: int, cols: int) -> np.memmap:
    """A random (rows, cols) float64 ``.npy`` file, written in slabs, opened read-only."""
    a = np.lib.format.open_memmap(path, mode="w+", shape=(rows, cols))
    rng = np.random.default_rng(0)
    for start in range(0, rows, 4096):
        a[start:start + 4096] = rng.uniform(-1, 1, (min(4096, rows - start), cols))
    a.flush()
    del a
    return np.load(path, mmap_mode="r")


def progress_bar() -> tuple[object, object]:
    """A rich progress bar, or plain lines without rich."""
    try:
        from rich.progress import Progress
    except ImportError:
        return (lambda done, total: print(f"block {done}/{total}") if done == total else None,
                None)
    bar = Progress(transient=True)
    task = bar.add_task("writing D", total=None)
    return (lambda done, total: bar.update(task, completed=done, total=total)), bar


def main() -> float:
    rows, k, n = 24576, 1024, 16
    with tempfile.TemporaryDirectory() as tmp:
        a = make_operand(Path(tmp) / "a.npy", rows, k)
        b = np.random.default_rng(1).uniform(-1, 1, (k, n))
        d = np.lib.format.open_memmap(Path(tmp) / "d.npy", mode="w+", shape=(rows, n))
        with LocalCluster(n_workers=1, threads_per_worker=1, memory_limit="160MiB",
                          dashboard_address=":0") as cluster, Client(cluster) as client:
            limit = next(iter(client.scheduler_info()["workers"].values()))["memory_limit"]
            print(f"A: {a.nbytes / 2**20:.0f} MiB on disk; worker memory limit: "
                  f"{limit / 2**20:.0f} MiB")
            info = pytapp.TensorInfo.from_array
            update, bar = progress_bar()
            with pytapp.Handle("blas") as handle:
                plan = pytapp.TensorProduct(handle, info(a), "ik", info(b), "kj", None, None,
                                            info(d), "ij")
                ex = handle.create_executor(dask=client, progress=update)
                if bar is not None:
                    with bar:  # type: ignore[attr-defined]
                        status = plan.execute(1.0, a, b, 0.0, None, d, ex)
                else:
                    status = plan.execute(1.0, a, b, 0.0, None, d, ex)
        rows_checked = np.random.default_rng(2).choice(rows, 2000, replace=False)
        want = np.asarray(a[rows_checked]) @ b
        error = float(np.max(np.abs(d[rows_checked] - want)) / np.max(np.abs(want)))
        print(f"{status.backend}: D ({d.nbytes / 2**20:.1f} MiB) written block by block; "
              f"relative error vs NumPy on 2000 rows: {error:.1e}")
        del a, d
    assert error < 1e-12
    return error


if __name__ == "__main__":
    main()
