"""The ``tblis`` backend: products run by TBLIS through ``pytblis`` (extra ``tblis``).

TBLIS contracts strided tensors without explicit transposition and applies alpha, beta (with
the output as C) and conjugation of A and B natively. What it cannot do is declared as
capabilities, so a plan outside them raises error 18 (or 16) with the reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pytapp.analysis.spec import ContractionSpec
from pytapp.backends.base import Capabilities, OptionalModule, Stateless, thread_setting
from pytapp.datatypes import Datatype
from pytapp.errors import ErrorCode, error_for
from pytapp.executor import Executor
from pytapp.operands import BoundProduct, same_layout
from pytapp.precision import Prectype
from pytapp.status import Status

__all__ = ["TblisBackend", "TblisPlan"]


class TblisPlan(Stateless):
    """One ``pytblis.contract`` call per execution, plus C and op_D handling around it."""

    def __init__(self, spec: ContractionSpec, module: Any) -> None:
        self.spec = spec
        self._tblis = module
        a, b, d = spec.einsum_words("tblis")
        self.expr = f"{a},{b}->{d}"
        self.conja = spec.a.conjugates
        self.conjb = spec.b.conjugates
        self.conjc = spec.c.conjugates
        self.conjd = spec.d.conjugates
        self.algorithm = f"tblis contract {self.expr!r}"
        self.workspace_bytes = 0  # C is copied into D itself

    def run(self, bound: BoundProduct, executor: Executor | None) -> Status:
        """Compute D in place of ``bound.d`` (TBLIS's thread count restored afterwards)."""
        threads = None if executor is None else executor.threads
        with thread_setting(self._tblis.get_num_threads, self._tblis.set_num_threads, threads):
            return self._run(bound)

    def _run(self, bound: BoundProduct) -> Status:
        d = bound.d
        status = Status(backend="tblis", algorithm=self.algorithm, flops=self.spec.flops)
        if d.size == 0:
            return status
        # TBLIS gives wrong results when a conjugation flag meets beta != 0 (seen with
        # extent-1 contracted modes): then beta * op_C(C) is added after a beta = 0 call.
        c_term = None
        beta: Any = 0.0
        if bound.c is not None:
            if self.conja or self.conjb:
                c_term = np.conjugate(bound.c) if self.conjc else np.array(bound.c)
                c_term *= bound.beta
                status.bytes_allocated += c_term.nbytes
            else:
                beta = bound.beta
                if not same_layout(bound.c, d):
                    np.copyto(d, bound.c)
                    status.bytes_copied += d.nbytes
                if self.conjc:
                    np.conjugate(d, out=d)
        alpha: Any = bound.alpha
        if np.iscomplexobj(d):
            alpha, beta = complex(alpha), complex(beta)
        else:
            alpha, beta = float(alpha), float(beta)
        self._tblis.contract(self.expr, bound.a, bound.b, alpha=alpha, beta=beta, out=d,
                             conja=self.conja, conjb=self.conjb, allow_partial_trace=True)
        if c_term is not None:
            d += c_term
        if self.conjd:
            np.conjugate(d, out=d)
        return status


class TblisBackend(Stateless):
    """TBLIS via pytblis: F32/F64/C32/C64, one datatype per product, no broadcast."""

    name = "tblis"
    # TBLIS kernels: one datatype per product, no F16/BF16, no broadcast labels.
    capabilities = Capabilities(
        datatypes=frozenset({Datatype.F32, Datatype.F64, Datatype.C32, Datatype.C64}),
        prectypes=frozenset({Prectype.DEFAULT, Prectype.F32F32_ACCUM_F32,
                             Prectype.F64F64_ACCUM_F64}),
        mixed_datatypes=False,
        broadcast=False,
    )

    def __init__(self) -> None:
        self._lib = OptionalModule("pytblis", "tblis")

    def available(self) -> tuple[bool, str]:
        """Whether pytblis is installed (imported on first plan)."""
        return self._lib.available()

    def plan(self, spec: ContractionSpec, executor: Executor | None) -> TblisPlan:
        """Check capabilities and precision, then build the einsum string."""
        self.capabilities.require(spec, self.name)
        rule = spec.rule
        if rule.input_round is not None and rule.input_round is not spec.a.datatype.real:
            raise error_for(
                ErrorCode.UNKNOWN_PRECISION,
                f"backend 'tblis' computes in the storage type; precision {spec.prec.name} "
                f"differs from {spec.a.datatype.name}; use DEFAULT or another backend",
            )
        return TblisPlan(spec, self._lib.load())
