"""Verification: a plan wrapper that checks every result against the reference backend.

An executor created with ``verify=True`` runs each product's own plan, then the reference
loop nest on the same operands, and compares the two within SPEC section 7's tolerance. On
disagreement D is restored and error 137 is raised, so a wrong backend never leaves a wrong
result behind.

Examples
--------
>>> import numpy as np
>>> from pytapp import Handle, TensorInfo, TensorProduct
>>> x = np.ones((2, 2))
>>> info = TensorInfo.from_array(x)
>>> with Handle("blas") as h, h.create_executor(verify=True) as ex:
...     plan = TensorProduct(h, info, "ik", info, "kj", None, None, info, "ij")
...     d = np.zeros((2, 2))
...     _ = plan.execute(1.0, x, x, 0.0, None, d, executor=ex)
>>> float(d[0, 0])
2.0
"""

from __future__ import annotations

import logging
import time

import numpy as np

from pytapp.analysis.letters import words
from pytapp.analysis.spec import ContractionSpec
from pytapp.backends.base import BackendPlan
from pytapp.backends.reference import ReferencePlan
from pytapp.errors import ErrorCode, error_for
from pytapp.executor import Executor
from pytapp.operands import BoundProduct
from pytapp.precision import tiny_floor, tolerance_factor, within_tolerance
from pytapp.status import Status

__all__ = ["VerifiedPlan", "error_bound"]

_log = logging.getLogger("pytapp")


def error_bound(spec: ContractionSpec, bound: BoundProduct) -> np.ndarray:
    """``|alpha| sum |A||B| + |beta| |C|`` in float64, in D's merged shape (SPEC section 7).

    Labels only in D (Case 5) broadcast; empty sums give 0. ``bound.c`` is ``None`` when C is
    not read (beta == 0).
    """
    la, lb, ld = spec.a.modes.labels, spec.b.modes.labels, spec.d.modes.labels
    ld_in = tuple(x for x in ld if x in la or x in lb)
    expr = "{},{}->{}".format(*words((la, lb, ld_in), "verification"))
    with np.errstate(invalid="ignore", over="ignore"):
        terms = np.einsum(expr, np.abs(bound.a).astype(np.float64),
                          np.abs(bound.b).astype(np.float64), optimize=True)  # BLAS if it can
        # ld_in keeps D's order, so a reshape inserts the broadcast (D-only) axes.
        shape = tuple(e if x in ld_in else 1 for x, e in zip(ld, spec.d.modes.extents,
                                                              strict=True))
        out = abs(complex(bound.alpha)) * np.broadcast_to(terms.reshape(shape),
                                                           spec.d.modes.extents)
        if bound.c is not None:
            out = out + abs(complex(bound.beta)) * np.abs(bound.c).astype(np.float64)
    return np.asarray(out, dtype=np.float64)


class VerifiedPlan:
    """``plan``, checked after every run against the reference (error 137 on disagreement).

    ``Status.seconds`` is the time of ``plan``'s run only; the check is not counted.
    """

    def __init__(self, plan: BackendPlan, spec: ContractionSpec, backend: str) -> None:
        self.plan = plan
        self.spec = spec
        self.backend = backend
        self.algorithm = plan.algorithm
        self.workspace_bytes = plan.workspace_bytes

    def release(self) -> None:
        """Release the wrapped plan."""
        self.plan.release()

    def run(self, bound: BoundProduct, executor: Executor | None) -> Status:
        """Run the wrapped plan, then compare D with the reference.

        Raises
        ------
        VerificationError
            Code 137 when D disagrees; D is then restored to its value before the run.
        """
        before = bound.d.copy()
        # C that shares D's memory (C is D) is overwritten by the run: keep its value.
        c = bound.c
        if c is not None and np.may_share_memory(c, bound.d):
            c = c.copy()
        start = time.perf_counter()
        status = self.plan.run(bound, executor)
        status.seconds = time.perf_counter() - start
        inputs = BoundProduct(bound.alpha, bound.beta, bound.a, bound.b, c, before.copy())
        self._check(inputs, bound.d, before)
        return status

    def _check(self, inputs: BoundProduct, got: np.ndarray, before: np.ndarray) -> None:
        spec = self.spec
        ReferencePlan(spec).run(inputs, None)
        expected = inputs.d
        n_terms = spec.size(spec.classes.P + spec.classes.IA + spec.classes.IB)
        ok = within_tolerance(
            got, expected, error_bound(spec, inputs),
            tolerance_factor(spec.rule, n_terms), spec.d.datatype.eps,
            tiny_floor(spec.rule, n_terms, spec.d.datatype),
        )
        if np.all(ok):
            _log.debug("verified %s on %s against the reference", spec.einsum(), self.backend)
            return
        diff = np.asarray(got).astype(np.complex128) - expected.astype(np.complex128)
        worst = float(np.nanmax(np.abs(diff), initial=0.0))
        got[...] = before
        raise error_for(
            ErrorCode.VERIFICATION_FAILED,
            f"backend {self.backend!r} disagrees with the reference on "
            f"{int(np.size(ok) - np.count_nonzero(ok))} of {np.size(ok)} elements of D "
            f"(largest difference {worst:.3g}); D was left unchanged",
        )
