"""Operation counts of a product, for Status, benchmarks and backend choice."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from math import prod
from typing import Any

__all__ = ["MachineModel", "Route", "flop_count", "gemm_seconds", "least_flops", "ttgt_seconds",
           "view_gemm_seconds"]


def flop_count(distinct_extents: Iterable[int], is_complex: bool = False) -> int:
    """Floating-point operations: 2 per multiply-add over all distinct labels.

    A complex multiply-add counts as 8 real operations.

    Examples
    --------
    >>> flop_count([10, 20, 30])
    12000
    """
    n = prod(int(e) for e in distinct_extents)
    return (8 if is_complex else 2) * n


def least_flops(labels: tuple[Sequence[Hashable], Sequence[Hashable], Sequence[Hashable]],
                extents: Mapping[Any, int], is_complex: bool = False) -> int:
    """Least floating-point work of ``alpha A B + beta C`` (the benchmarks' rate).

    Isolated labels are summed first (one add per element of the operand, two when complex),
    then 2 per multiply-add over the other distinct labels (8 for complex), then the
    epilogue (3 per element of D, 6 for complex). :func:`flop_count` is the simpler count that
    Status reports.

    Examples
    --------
    >>> least_flops(("ik", "kj", "ij"), {"i": 2, "j": 3, "k": 4})
    66
    """
    la, lb, ld = labels
    isolated_a = set(la) - set(lb) - set(ld)
    isolated_b = set(lb) - set(la) - set(ld)
    core = set(la) | set(lb) | set(ld)
    core -= isolated_a | isolated_b
    sums = sum(prod(extents[x] for x in set(lab)) for lab, iso in
               ((la, isolated_a), (lb, isolated_b)) if iso)
    d = prod(extents[x] for x in set(ld))
    return (2 if is_complex else 1) * sums + (8 if is_complex else 2) * prod(
        extents[x] for x in core) + (6 if is_complex else 3) * d


class Route(str, Enum):
    """A product blas computes without packing, as one pass or as GEMMs on views.

    Recorded in blas's plan profile, which the cost model of ``auto`` prices.
    """

    #: Hadamard and outer products: one compiled pass writing D.
    ELEMENTWISE = "elementwise"
    #: GEMV-like products: one compiled multiply-reduce pass over the large operand.
    REDUCE = "reduce"
    #: GEMMs straight on strided views, looping over the free labels that do not fuse.
    VIEW_GEMM = "view-gemm"


@dataclass(frozen=True)
class MachineModel:
    """Constants of the cost model (seconds are predicted from these alone).

    ``gemm_flops`` is the rate of a large GEMM in the compute type, ``bandwidth`` the bytes per
    second of a large copy, ``call_seconds`` the fixed cost of one GEMM call, ``half_size`` the
    matrix dimension at which a GEMM reaches half its large-matrix rate.
    """

    gemm_flops: float = 8e10
    bandwidth: float = 8e9
    call_seconds: float = 2e-6
    half_size: float = 24.0


def gemm_seconds(m: int, n: int, k: int, machine: MachineModel, is_complex: bool = False) -> float:
    """Predicted time of one ``(m x k) (k x n)`` GEMM: small dimensions run below peak.

    Examples
    --------
    >>> model = MachineModel(gemm_flops=1e11, half_size=0.0, call_seconds=0.0)
    >>> round(gemm_seconds(1000, 1000, 1000, model) * 1e3, 3)
    20.0
    """
    flops = (8 if is_complex else 2) * m * n * k  # flop_count of (m, n, k), without the loop
    h = machine.half_size
    eff = (m / (m + h)) * (n / (n + h)) * (k / (k + h)) if flops else 1.0
    return machine.call_seconds + flops / (machine.gemm_flops * max(eff, 1e-6))


def ttgt_seconds(m: int, n: int, k: int, calls: int, copied_bytes: int, stored_bytes: int,
                 machine: MachineModel, is_complex: bool = False) -> float:
    """TTGT: copy the operands that do not fuse, ``calls`` GEMMs, store a temporary into D."""
    return (2 * (copied_bytes + stored_bytes) / machine.bandwidth
            + calls * gemm_seconds(m, n, k, machine, is_complex))


def view_gemm_seconds(m: int, n: int, k: int, calls: int, machine: MachineModel,
                      is_complex: bool = False) -> float:
    """Time ``calls`` GEMMs on views: no copies, a call cost per GEMM."""
    return calls * gemm_seconds(m, n, k, machine, is_complex)
