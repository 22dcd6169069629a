"""Contenders timed side by side: pytapp backends and the libraries users would pick instead.

Each contender turns (case, A, B, C, D) into a zero-argument callable that computes the whole
TAPP operation ``D = alpha A B + beta C`` (:data:`ALPHA`, :data:`BETA`) the fastest way that
library allows, plus a function that returns the result as a NumPy array (outside the timed
region). Peers without a fused epilogue do it with the cheapest in-place operations their
library offers, on preallocated buffers where it allows them. A contender that cannot run a
case raises :class:`NotApplicable` with the reason; it is reported as "n/a", never skipped
silently.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytapp.bench.cases import BenchCase
from pytapp.datatypes import torch_view

__all__ = ["ALPHA", "BETA", "PEERS", "PEER_LABELS", "Contender", "NotApplicable",
           "backend_contender", "peer"]

#: The scalars of every timed operation (exact in every datatype, BF16 included).
ALPHA, BETA = 0.75, -0.5

#: How each peer is named in reports (backends keep their own names).
PEER_LABELS = {"numpy": "numpy.einsum", "opt_einsum": "opt_einsum", "tblis": "pytblis",
               "torch": "torch.einsum"}


class NotApplicable(Exception):
    """Raised when a contender cannot run a case; the message says why."""


@dataclass
class Contender:
    """A prepared, timeable computation."""

    name: str
    call: Callable[[], Any]
    result: Callable[[Any], np.ndarray]
    kind: str  # "backend" or "peer"
    algorithm: str = ""
    traced_memory: bool = True  # whether tracemalloc sees this library's allocations
    #: What ran, asked after the timed calls (auto may change its choice when it tunes).
    describe: Callable[[], str] | None = None

    def what_ran(self) -> str:
        """Return the algorithm, as :attr:`describe` reports it now (else as prepared)."""
        return self.describe() if self.describe is not None else self.algorithm


def _numpy_result(x: Any) -> np.ndarray:
    return np.asarray(x)


def backend_contender(name: str, case: BenchCase, a: np.ndarray, b: np.ndarray,
                      c: np.ndarray, d: np.ndarray, threads: int | None = None) -> Contender:
    """Return a reused pytapp plan on backend ``name``: ``D = alpha A B + beta C`` into ``d``."""
    from pytapp.errors import TappError
    from pytapp.handle import Handle
    from pytapp.product import TensorProduct
    from pytapp.tensor import TensorInfo

    la, lb, ld = case.labels
    try:
        handle = Handle(name)
        plan = TensorProduct(handle, TensorInfo.from_array(a), la, TensorInfo.from_array(b), lb,
                             TensorInfo.from_array(c), ld, TensorInfo.from_array(d), ld)
        executor = handle.create_executor(threads=threads) if threads else None
    except TappError as exc:
        raise NotApplicable(exc.message) from exc

    try:  # auto times its candidates at the second execution: the timed calls' warm-up
        plan.execute(ALPHA, a, b, BETA, c, d, executor)
    except Exception as exc:  # reported like a failing timed call
        raise NotApplicable(f"failed: {exc}") from exc

    def call() -> np.ndarray:
        plan.execute(ALPHA, a, b, BETA, c, d, executor)
        return d

    return Contender(name, call, _numpy_result, "backend", algorithm=plan.algorithm,
                     describe=lambda: plan.algorithm)


def _numpy_epilogue(d: np.ndarray, c: np.ndarray) -> Callable[[], None]:
    """``d = alpha d + beta c`` with NumPy's in-place ufuncs and a preallocated temporary."""
    tmp = np.empty_like(d)

    def finish() -> None:
        np.multiply(d, d.dtype.type(ALPHA), out=d)
        np.multiply(c, c.dtype.type(BETA), out=tmp)
        np.add(d, tmp, out=d)

    return finish


def _into_d(name: str, product: Callable[[], object], d: np.ndarray,
            c: np.ndarray) -> Contender:
    """Return a peer that writes ``A B`` into ``d`` (``product``), then runs the epilogue."""
    finish = _numpy_epilogue(d, c)

    def call() -> np.ndarray:
        product()
        finish()
        return d

    return Contender(name, call, _numpy_result, "peer")


def _numpy(case: BenchCase, a: np.ndarray, b: np.ndarray, c: np.ndarray,
           d: np.ndarray) -> Contender:
    expr = case.einsum
    return _into_d("numpy.einsum", lambda: np.einsum(expr, a, b, optimize=True, out=d), d, c)


def _opt_einsum(case: BenchCase, a: np.ndarray, b: np.ndarray, c: np.ndarray,
                d: np.ndarray) -> Contender:
    oe = importlib.import_module("opt_einsum")
    expr = case.einsum
    return _into_d("opt_einsum", lambda: oe.contract(expr, a, b, out=d), d, c)


def _pytblis(case: BenchCase, a: np.ndarray, b: np.ndarray, c: np.ndarray,
             d: np.ndarray) -> Contender:
    tblis = importlib.import_module("pytblis")
    if case.dtype not in ("f32", "f64", "c64", "c128"):
        raise NotApplicable(f"TBLIS has no {case.dtype} kernels")
    expr = case.einsum

    def call() -> np.ndarray:  # TBLIS fuses alpha and beta with the output as C
        np.copyto(d, c)
        tblis.contract(expr, a, b, alpha=ALPHA, beta=BETA, out=d, allow_partial_trace=True)
        return d

    return Contender("pytblis", call, _numpy_result, "peer", traced_memory=False)


def _torch(case: BenchCase, a: np.ndarray, b: np.ndarray, c: np.ndarray,
           d: np.ndarray) -> Contender:
    torch = importlib.import_module("torch")

    ta, tb, tc = torch_view(a), torch_view(b), torch_view(c)
    expr = case.einsum

    def call() -> Any:
        r = torch.einsum(expr, ta, tb)
        r.mul_(ALPHA).add_(tc, alpha=BETA)  # in place, beta fused into the add
        return r

    def result(x: Any) -> np.ndarray:
        if x.dtype == torch.bfloat16:
            return np.asarray(x.float().numpy())
        return np.asarray(x.numpy())

    return Contender("torch.einsum", call, result, "peer", traced_memory=False)


PEERS: dict[str, tuple[str | None, Callable[..., Contender]]] = {
    "numpy": (None, _numpy),
    "opt_einsum": ("opt_einsum", _opt_einsum),
    "tblis": ("pytblis", _pytblis),
    "torch": ("torch", _torch),
}


def peer(name: str, case: BenchCase, a: np.ndarray, b: np.ndarray, c: np.ndarray,
         d: np.ndarray) -> Contender:
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
    return make(case, a, b, c, d)
