"""pytapp.dask on a two-process LocalCluster: every label class and chunking, datatypes,
alpha/beta/C, the distributed executor into NumPy, memmap and zarr, errors before any block
runs, and an out-of-core product, all against numpy.einsum."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pytapp

da = pytest.importorskip("dask.array")
from pytapp import dask as tapp_dask  # noqa: E402  (needs dask)

WIDE = {np.float32: np.float64, np.float64: np.float64, np.complex64: np.complex128,
        np.complex128: np.complex128}
TOL = {np.float32: 1e-5, np.complex64: 1e-5, np.float64: 1e-12, np.complex128: 1e-12}

# expression, shapes of A, B (and C when the product has broadcast labels), chunks
CASES = [
    ("ik,kj->ij", [(30, 20), (20, 25)], [(7, 6), (9, 8)]),            # free, contracted split
    ("ik,kj->ij", [(30, 20), (20, 25)], [(30, 20), (20, 25)]),        # one block each
    ("bik,bkj->bij", [(6, 10, 8), (6, 8, 9)], [(4, 3, 5), (2, 8, 4)]),  # Hadamard split
    ("ikl,kj->ij", [(10, 8, 6), (8, 7)], [(4, 3, 4), (5, 7)]),        # isolated l (Case 4)
    ("iik,k->i", [(9, 9, 6), (6,)], [(4, 4, 4), (3,)]),               # repeated i (Case 3)
    ("abc,cd->dba", [(5, 6, 7), (7, 4)], [(2, 3, 3), (4, 2)]),        # permuted output
    ("i,j->ij", [(12,), (9,)], [(5,), (4,)]),                         # outer product
    ("ij,ij->", [(11, 13), (11, 13)], [(4, 5), (3, 6)]),              # full reduction
]


def values(shape: tuple[int, ...], dtype: Any, rng: np.random.Generator) -> np.ndarray:
    x = rng.uniform(-1, 1, shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.uniform(-1, 1, shape)
    return x.astype(dtype)


def close(got: Any, want: np.ndarray, dtype: Any) -> None:
    np.testing.assert_allclose(np.asarray(got), want, rtol=TOL[dtype] * 10,
                               atol=TOL[dtype] * 10 * max(1.0, float(np.max(np.abs(want)))))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}:{i}" for i, c in enumerate(CASES)])
def test_label_classes_and_chunkings(case: tuple[str, Any, Any], dtype: Any,
                                     client: Any) -> None:
    expr, shapes, chunks = case
    rng = np.random.default_rng(len(expr))
    a, b = (values(s, dtype, rng) for s in shapes)
    la, lb, ld = pytapp.parse_expression(expr)
    d_shape = tuple(dict(zip(la + lb, a.shape + b.shape, strict=True))[x] for x in ld)
    c = values(d_shape, dtype, rng)
    wide = WIDE[dtype]
    want = 0.5 * np.einsum(expr, a.astype(wide), b.astype(wide)) - 2 * c.astype(wide)
    lazy = tapp_dask.contract(expr, da.from_array(a, chunks=chunks[0]),
                              da.from_array(b, chunks=chunks[1]), da.from_array(c),
                              alpha=0.5, beta=-2, backend="blas", split_every=2)
    got = client.compute(lazy).result()
    assert got.dtype == dtype
    close(got, want, dtype)


def test_broadcast_labels_and_conjugation(client: Any) -> None:
    rng = np.random.default_rng(3)
    a, b = values((8, 6), np.complex128, rng), values((6, 5), np.complex128, rng)
    c = values((8, 5, 3), np.complex128, rng)
    lazy = tapp_dask.contract("ik,kj->ijx", da.from_array(a, chunks=3),
                              da.from_array(b, chunks=4), da.from_array(c, chunks=2), alpha=2,
                              beta=1, op_a=pytapp.ElementOp.CONJUGATE,
                              op_c=pytapp.ElementOp.CONJUGATE, allow_broadcast=True)
    want = 2 * (np.conj(a) @ b)[:, :, None] + np.conj(c)
    close(client.compute(lazy).result(), want, np.complex128)


def test_numpy_inputs_are_chunked_by_budget() -> None:
    rng = np.random.default_rng(4)
    a, b = rng.random((400, 300)), rng.random((300, 200))
    lazy = tapp_dask.contract("ik,kj->ij", a, b, chunk_bytes=200_000)
    assert lazy.numblocks[0] > 1
    close(lazy.compute(), a @ b, np.float64)


def test_errors_come_before_any_block() -> None:
    x = da.ones((4, 5), chunks=2)
    with pytest.raises(pytapp.ExtentMismatchError):
        tapp_dask.contract("ik,kj->ij", x, da.ones((4, 3)))
    with pytest.raises(pytapp.TappError) as err:
        tapp_dask.contract("ik,kj->ij", x, da.ones((5, 3), dtype=np.int64))
    assert err.value.code == 20
    with pytest.raises(pytapp.TappError) as err:
        tapp_dask.contract("ik,kj->ii", x, da.ones((5, 4)))
    assert err.value.code == 18
    with pytest.raises(pytapp.LabelError):
        tapp_dask.contract("ik,kj->ijz", x, da.ones((5, 3)))


@pytest.mark.parametrize("target", ["numpy", "memmap", "zarr"])
def test_distributed_executor_streams_into_d(target: str, client: Any, tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    a, b, c = rng.random((90, 70)), rng.random((70, 40)), rng.random((90, 40))
    if target == "numpy":
        d: Any = np.zeros((90, 40))
    elif target == "memmap":
        d = np.lib.format.open_memmap(tmp_path / "d.npy", mode="w+", shape=(90, 40))
    else:
        zarr = pytest.importorskip("zarr")
        d = zarr.open_array(str(tmp_path / "d.zarr"), mode="w", shape=(90, 40),
                            chunks=(30, 40), dtype="f8")
    info = pytapp.TensorInfo.from_array
    with pytapp.Handle("blas") as h:
        plan = pytapp.TensorProduct(h, info(a), "ik", info(b), "kj", info(c), "ij", info(c),
                                    "ij")
        seen: list[tuple[int, int]] = []
        ex = h.create_executor(dask=client, progress=lambda i, n: seen.append((i, n)))
        status = plan.execute(0.5, a, b, 2.0, c, d, ex)
        assert status.backend == "dask:blas" and seen and seen[-1][0] == seen[-1][1]
        np.testing.assert_allclose(np.asarray(d[:]), 0.5 * a @ b + 2 * c, rtol=1e-12)
        before = np.array(d[:])
        with pytest.raises(pytapp.OperandMismatchError):
            plan.execute(1.0, a[:, :60], b, 0, None, d, ex)
        with pytest.raises(pytapp.TappError):
            plan.execute(1.0, a, b, 1.0, None, d, ex)  # beta without C: 12
        assert np.array_equal(np.asarray(d[:]), before)


def test_einsum_on_dask_arrays(client: Any) -> None:
    rng = np.random.default_rng(6)
    a, b, c = rng.random((20, 30)), rng.random((30, 25)), rng.random((25, 20))
    lazy = pytapp.einsum("ij,jk,ki->", *(da.from_array(x, chunks=8) for x in (a, b, c)))
    close(client.compute(lazy).result(), np.einsum("ij,jk,ki->", a, b, c), np.float64)
    x = rng.random((6, 6, 4))
    lazy = pytapp.einsum("ii...->...i", da.from_array(x, chunks=4))
    close(lazy.compute(), np.einsum("ii...->...i", x), np.float64)


def test_out_of_core_product(client: Any, tmp_path: Path) -> None:
    """A of 192 MiB on disk, a worker limited to 160 MiB (about 80 of which it needs to
    run at all): A's blocks stream through it and D's blocks stream back."""
    import distributed

    rows, k, n = 24576, 1024, 16
    a = np.lib.format.open_memmap(tmp_path / "a.npy", mode="w+", shape=(rows, k))
    rng = np.random.default_rng(7)
    for start in range(0, rows, 2048):
        a[start:start + 2048] = rng.uniform(-1, 1, (2048, k))
    a.flush()
    b = rng.uniform(-1, 1, (k, n))
    a_disk = np.load(tmp_path / "a.npy", mmap_mode="r")
    assert a_disk.nbytes == 192 << 20
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                       memory_limit="160MiB", dashboard_address=":0")
    with distributed.Client(cluster) as small:
        limit = next(iter(small.scheduler_info()["workers"].values()))["memory_limit"]
        assert limit < a_disk.nbytes
        d = np.lib.format.open_memmap(tmp_path / "d.npy", mode="w+", shape=(rows, n))
        lazy = tapp_dask.contract("ik,kj->ij", a_disk, b, backend="blas",
                                  chunk_bytes=8 << 20)
        tapp_dask.store(lazy, d, small)
    cluster.close()
    want = np.asarray(a_disk) @ b
    np.testing.assert_allclose(d, want, rtol=1e-10, atol=1e-10)


def test_memmaps_whole_and_sliced(tmp_path: Path) -> None:
    """A whole .npy memmap is read by the workers from its file; a slice of one is data."""
    a = np.lib.format.open_memmap(tmp_path / "a.npy", mode="w+", shape=(10, 4))
    a[...] = np.arange(40.0).reshape(10, 4)
    a.flush()
    m = np.load(tmp_path / "a.npy", mmap_mode="r")
    np.testing.assert_array_equal(tapp_dask.as_dask(m).compute(),
                                  np.arange(40.0).reshape(10, 4))
    np.testing.assert_array_equal(tapp_dask.as_dask(m[3:5]).compute(), m[3:5])
    got = tapp_dask.contract("ik,k->i", m[3:7], np.ones(4)).compute()
    np.testing.assert_array_equal(got, np.asarray(m[3:7]).sum(axis=1))
