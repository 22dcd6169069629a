"""A worker killed while a distributed execute writes D (SPEC section 5).

The failure is a TappError listing the blocks written; every other block keeps its old value;
the failed run's futures are cancelled, so the same execute again rewrites every block.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import pytapp

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")
from pytapp import dask as tapp_dask  # noqa: E402  (needs dask)


@pytest.fixture
def fragile_client() -> Iterator[Any]:
    """A cluster of its own where one lost worker fails its tasks (no retry elsewhere)."""
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           memory_limit="1GB", dashboard_address=":0")
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def _blocks_of(d: np.ndarray, err: tapp_dask.PartialWriteError) -> np.ndarray:
    mask = np.zeros(d.shape, dtype=bool)
    for where in err.blocks_written:
        mask[where] = True
    return mask


def test_worker_killed_mid_execute(fragile_client: Any) -> None:
    rng = np.random.default_rng(11)
    a, b, c = rng.random((240, 60)), rng.random((60, 160)), rng.random((240, 160))
    want = 0.5 * a @ b + 2.0 * c
    d = np.full((240, 160), -1.0)
    pids = list(fragile_client.run(os.getpid).values())
    info = pytapp.TensorInfo.from_array
    killed: list[int] = []

    def kill_one(done: int, total: int) -> None:
        if done == 1:
            os.kill(pids[0], signal.SIGKILL)  # a worker process this test's cluster started
            killed.append(pids[0])

    with pytapp.Handle("blas") as h:
        plan = pytapp.TensorProduct(h, info(a), "ik", info(b), "kj", info(c), "ij", info(d),
                                    "ij")
        runner = tapp_dask.DaskRunner(fragile_client, chunk_bytes=8 * 60 * 60,
                                      progress=kill_one)
        with pytest.raises(tapp_dask.PartialWriteError) as err:
            runner.execute(plan, 0.5, a, b, 2.0, c, d)
        assert isinstance(err.value, pytapp.TappError) and err.value.code == 33
        assert killed and "blocks written: D[" in str(err.value)
        written = _blocks_of(d, err.value)
        assert written.any() and not written.all()
        np.testing.assert_allclose(d[written], want[written], rtol=1e-12)
        assert np.all(d[~written] == -1.0)  # untouched
        # Nothing of the failed run is left in the scheduler; the same execute rewrites all.
        fragile_client.wait_for_workers(2, timeout=20)
        d[...] = np.nan
        runner.progress = None
        status = runner.execute(plan, 0.5, a, b, 2.0, c, d)
        assert status.backend == "dask:blas"
        np.testing.assert_allclose(d, want, rtol=1e-12)


def test_failed_block_without_a_cluster_lists_the_blocks_written() -> None:
    da = pytest.importorskip("dask.array")
    x = da.arange(16.0, chunks=2).reshape(4, 4).rechunk(2)

    def disk_full(block: np.ndarray) -> np.ndarray:
        if block.size and block.min() == 10:  # the last block, D[2:4, 2:4]
            raise OSError("disk full")
        return block

    target = np.full((4, 4), -1.0)
    with pytest.raises(tapp_dask.PartialWriteError) as err:
        tapp_dask.store(x.map_blocks(disk_full), target)
    assert err.value.code == 33 and "3 of 4 blocks" in str(err.value)
    assert err.value.blocks_written == ((slice(0, 2), slice(0, 2)), (slice(0, 2), slice(2, 4)),
                                        (slice(2, 4), slice(0, 2)))
    want = np.arange(16.0).reshape(4, 4)
    assert np.array_equal(target[:2], want[:2]) and np.array_equal(target[2:, :2], want[2:, :2])
    assert np.all(target[2:, 2:] == -1.0)
