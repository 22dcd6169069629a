"""A real two-process dask.distributed cluster, shared by the dask tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="session")
def client() -> Iterator[Any]:
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       memory_limit="2GB", dashboard_address=":0")
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()
