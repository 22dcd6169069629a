"""Contenders timed side by side: pytapp backends and the libraries users would pick instead.

Each contender turns (case, A, B, D) into a zero-argument callable that computes
``D = A B`` the fastest way that library allows, plus a function that returns the result as a
NumPy array (outside the timed region). A contender that cannot run a case raises
:class:`NotApplicable` with the reason; it is reported as "n/a", never skipped silently.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytapp.bench.cases import BenchCase

__all__ = ["PEERS", "PEER_LABELS", "Contender", "NotApplicable", "backend_contender", "peer"]

#: How each peer is named in reports (backends keep their own names).
PEER_LABELS = {"numpy": "numpy.einsum", "opt_einsum": "opt_einsum", "tblis": "pytblis",
               "torch": "torch.einsum"}


class NotApplicable(Exception):
    """This contender cannot run this case; the message says why."""


@dataclass
class Contender:
    """A prepared, timeable computation."""

    name: str
    call: Callable[[], Any]
    result: Callable[[Any], np.ndarray]
    kind: str  # "backend" or "peer"
    algorithm: str = ""
    traced_memory: bool = True  # whether tracemalloc sees this library's allocations


def _numpy_result(x: Any) -> np.ndarray:
    return np.asarray(x)


def backend_contender(name: str, case: BenchCase, a: np.ndarray, b: np.ndarray,
                      d: np.ndarray, threads: int | None = None) -> Contender:
    """A reused pytapp plan on backend ``name`` writing into ``d``."""
    from pytapp.errors import TappError
    from pytapp.handle import Handle
    from pytapp.product import TensorProduct
    from pytapp.tensor import TensorInfo

    la, lb, ld = case.labels
    try:
        handle = Handle(name)
        plan = TensorProduct(handle, TensorInfo.from_array(a), la, TensorInfo.from_array(b), lb,
                             None, None, TensorInfo.from_array(d), ld)
        executor = handle.create_executor(threads=threads) if threads else None
    except TappError as exc:
        raise NotApplicable(exc.message) from exc

    def call() -> np.ndarray:
        plan.execute(1.0, a, b, 0.0, None, d, executor)
        return d

    return Contender(name, call, _numpy_result, "backend", algorithm=plan.algorithm)


def _numpy(case: BenchCase, a: np.ndarray, b: np.ndarray, d: np.ndarray) -> Contender:
    expr = case.einsum
    return Contender("numpy.einsum", lambda: np.einsum(expr, a, b, optimize=True), _numpy_result,
                     "peer")


def _opt_einsum(case: BenchCase, a: np.ndarray, b: np.ndarray, d: np.ndarray) -> Contender:
    oe = importlib.import_module("opt_einsum")
    expr = case.einsum
    return Contender("opt_einsum", lambda: oe.contract(expr, a, b), _numpy_result, "peer")


def _pytblis(case: BenchCase, a: np.ndarray, b: np.ndarray, d: np.ndarray) -> Contender:
    tblis = importlib.import_module("pytblis")
    if case.dtype not in ("f32", "f64", "c64", "c128"):
        raise NotApplicable(f"TBLIS has no {case.dtype} kernels")
    expr, out = case.einsum, np.zeros_like(d)

    def call() -> np.ndarray:
        tblis.contract(expr, a, b, out=out)
        return out

    return Contender("pytblis", call, _numpy_result, "peer", traced_memory=False)


def _torch(case: BenchCase, a: np.ndarray, b: np.ndarray, d: np.ndarray) -> Contender:
    torch = importlib.import_module("torch")
    if case.dtype == "bf16":
        ta = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        tb = torch.from_numpy(b.view(np.int16)).view(torch.bfloat16)
    else:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    expr = case.einsum

    def result(x: Any) -> np.ndarray:
        if x.dtype == torch.bfloat16:
            return np.asarray(x.float().numpy())
        return np.asarray(x.numpy())

    return Contender("torch.einsum", lambda: torch.einsum(expr, ta, tb), result, "peer",
                     traced_memory=False)


PEERS: dict[str, tuple[str | None, Callable[..., Contender]]] = {
    "numpy": (None, _numpy),
    "opt_einsum": ("opt_einsum", _opt_einsum),
    "tblis": ("pytblis", _pytblis),
    "torch": ("torch", _torch),
}


def peer(name: str, case: BenchCase, a: np.ndarray, b: np.ndarray, d: np.ndarray) -> Contender:
    """Prepare peer ``name`` for ``case``.

    Raises
    ------
    NotApplicable
        When the library is missing or cannot run this case.
    """
    if name not in PEERS:
        raise NotApplicable(f"unknown peer {name!r}; choose from {', '.join(PEERS)}")
    module, make = PEERS[name]
    if module is not None:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise NotApplicable(f"{module} is not installed (pip install {module})") from exc
    return make(case, a, b, d)
