"""A real two-process dask.distributed cluster, shared by the dask tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """A cluster per module, closed after its last test (a session's would keep its IO loop
    and worker processes running, and allocating, through every later test; a package scope
    is the session's for a folder without ``__init__.py``, and this folder's name is dask's)."""
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       memory_limit="2GB", dashboard_address=":0")
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()
