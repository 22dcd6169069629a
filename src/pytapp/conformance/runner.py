"""Run conformance cases against a backend and judge every result.

Usable from pytest (``run_instance`` raises nothing; it returns an :class:`Outcome`) and from the
command line (``pytapp check``). A product that must succeed is compared with the oracle over
D's whole allocation; a misuse must raise the expected :class:`TappError` code and leave every
byte of D's allocation unchanged. A backend that declares a product unsupported (code 18, or 16
for a precision) is reported as ``unsupported``, never as passed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytapp.attributes import Attr
from pytapp.conformance.cases import CASES
from pytapp.conformance.instance import Instance, OperandData
from pytapp.conformance.oracle import Expected, check_result, expected_result
from pytapp.errors import ErrorCode, TappError
from pytapp.executor import Executor
from pytapp.handle import Handle
from pytapp.product import TensorProduct
from pytapp.tensor import TensorInfo

__all__ = ["Outcome", "Summary", "execute_instance", "run", "run_case", "run_instance"]

PASS, FAIL, UNSUPPORTED = "pass", "fail", "unsupported"


@dataclass
class Outcome:
    """Verdict on one instance."""

    case: int
    seed: int
    verdict: str
    message: str = ""
    description: str = ""

    @property
    def passed(self) -> bool:
        """Whether the backend did what TAPP requires."""
        return self.verdict == PASS


@dataclass
class Summary:
    """Verdicts of a whole run."""

    backend: str
    outcomes: list[Outcome] = field(default_factory=list)

    def count(self, verdict: str) -> int:
        """How many instances got ``verdict``."""
        return sum(1 for o in self.outcomes if o.verdict == verdict)

    @property
    def ok(self) -> bool:
        """True when nothing failed."""
        return self.count(FAIL) == 0


def _info(data: OperandData | None) -> TensorInfo | None:
    return None if data is None else TensorInfo.from_array(np.asarray(data.view))


def _oob_info(data: OperandData, side: str) -> TensorInfo:
    """The operand's descriptor with one stride changed so its footprint leaves the allocation.

    Needs a mode of extent > 1 (the case draws extents of at least 2).
    """
    view = np.asarray(data.view)
    info = TensorInfo.from_array(view)
    m = max(range(info.nmodes), key=lambda i: info.extents[i])
    strides = list(info.strides)
    if side == "past_end":
        strides[m] = data.parent.size + 1
    else:
        strides[m] = -(data.parent.size + 1)
    return info.with_strides(strides)


def execute_instance(inst: Instance, backend: str, threads: int | None = None) -> None:
    """Create the plan and run it as the instance (and its scenario) says.

    ``threads`` runs it on an executor with that thread count.
    """
    sc = inst.scenario or ""
    item = inst.items[0]
    if sc == "unknown_backend":
        Handle("no-such-backend")
    handle = Handle(backend)
    infos = {r: _info(item[r]) for r in "ABCD"}
    data = {r: (None if item[r] is None else item[r].view) for r in "ABCD"}  # type: ignore[union-attr]
    labels = dict(inst.labels)
    alpha, beta = inst.alpha, inst.beta
    kwargs: dict[str, Any] = {f"op_{r.lower()}": inst.ops.get(r, 0) for r in "ABCD"}
    kwargs["prec"] = inst.prec
    kwargs["allow_broadcast"] = inst.allow_broadcast
    if sc.startswith("oob_"):
        _, role, side = sc.split("_", 2)
        src = item[role]
        assert src is not None
        infos[role] = _oob_info(src, side)
    if sc == "label_not_in_inputs":
        labels["D"] = (*labels["D"][:-1], "__nowhere__") if labels["D"] else labels["D"]
        labels["C"] = labels["D"]
        kwargs["allow_broadcast"] = False
    if sc == "repeated_d_extent":  # a broadcast label twice in D, with two extents
        d_info = infos["D"]
        assert d_info is not None
        infos["D"] = infos["C"] = TensorInfo(d_info.datatype, (*d_info.extents, 2, 3))
        labels["D"] = labels["C"] = (*labels["D"], "__bcast__", "__bcast__")
        kwargs["allow_broadcast"] = True
    if sc == "label_count":
        labels["A"] = (*labels["A"], "extra")
    if sc == "negative_extent":
        infos["A"] = TensorInfo(infos["A"].datatype, (-1,))  # type: ignore[union-attr]
    if sc == "bad_datatype":
        infos["A"] = TensorInfo(99, infos["A"].extents)  # type: ignore[union-attr]
    if sc == "bad_prec":
        kwargs["prec"] = 99
    if sc == "bad_op":
        kwargs["op_b"] = 7
    c_info = infos["C"]
    c_labels = labels["C"] if c_info is not None else None
    plan = TensorProduct(
        handle,
        infos["A"], labels["A"], infos["B"], labels["B"],  # type: ignore[arg-type]
        c_info, c_labels, infos["D"], labels["D"],  # type: ignore[arg-type]
        **kwargs,
    )
    executor: Any = None if threads is None else Executor(threads=threads)
    if sc == "c_missing":
        data["C"], beta = None, 1.0
    if sc == "dtype_mismatch":
        a = np.asarray(data["A"])
        swap = {"float32": np.float64, "complex64": np.complex128, "complex128": np.complex64}
        data["A"] = a.astype(swap.get(a.dtype.name, np.float32))
    if sc == "bad_scalar":
        alpha = 1e300 if inst.datatypes["D"].is_complex else complex(1, 2)
        if inst.datatypes["D"].itemsize >= 16:
            alpha = "one"  # type: ignore[assignment]
    if sc == "readonly_d":
        view = np.asarray(data["D"]).view()
        view.flags.writeable = False
        data["D"] = view
    if sc == "destroyed":
        plan.destroy()
    if sc == "foreign_executor":
        executor = Executor(Handle(backend))
    if sc == "bad_executor":
        executor = "cpu"
    if sc == "attr_key":
        plan.get_attr(Attr.NUM_THREADS)
    if sc == "batch_length":
        plan.execute_batched(alpha, [data["A"]] * 2, [data["B"]], beta, None, [data["D"]])
        return
    if inst.batched:
        plan.execute_batched(
            alpha,
            [it["A"].view for it in inst.items],  # type: ignore[union-attr]
            [it["B"].view for it in inst.items],  # type: ignore[union-attr]
            beta,
            [None if it["C"] is None else it["C"].view for it in inst.items],
            [it["D"].view for it in inst.items],  # type: ignore[union-attr]
            executor,
        )
        return
    plan.execute(alpha, data["A"], data["B"], beta, data["C"], data["D"], executor)


def _snapshot(inst: Instance) -> list[np.ndarray]:
    return [it["D"].parent.copy() for it in inst.items]  # type: ignore[union-attr]


def _unchanged(inst: Instance, before: list[np.ndarray]) -> bool:
    for it, old in zip(inst.items, before, strict=True):
        new = it["D"].parent  # type: ignore[union-attr]
        if new.tobytes() != old.tobytes():
            return False
    return True


def run_instance(inst: Instance, backend: str, threads: int | None = None) -> Outcome:
    """Run one instance on ``backend`` and judge it (never raises for a backend's fault)."""
    desc = inst.describe()
    before = _snapshot(inst)
    expected: list[Expected] = []
    if inst.expected_code is None:
        expected = [expected_result(inst, it) for it in inst.items]
    try:
        execute_instance(inst, backend, threads)
    except TappError as exc:
        if inst.expected_code is not None and exc.code == inst.expected_code:
            if not _unchanged(inst, before):
                return Outcome(inst.case, inst.seed, FAIL,
                               f"raised {exc.code} as expected but changed D", desc)
            return Outcome(inst.case, inst.seed, PASS, "", desc)
        unsupported = exc.code in (ErrorCode.UNSUPPORTED, ErrorCode.UNKNOWN_PRECISION)
        if unsupported and inst.expected_code not in (ErrorCode.UNSUPPORTED,
                                                      ErrorCode.UNKNOWN_PRECISION):
            # The backend declined the product before the expected check could happen.
            if not _unchanged(inst, before):
                return Outcome(inst.case, inst.seed, FAIL, f"unsupported but changed D: {exc}",
                               desc)
            return Outcome(inst.case, inst.seed, UNSUPPORTED, exc.message, desc)
        want = "success" if inst.expected_code is None else f"error {inst.expected_code}"
        return Outcome(inst.case, inst.seed, FAIL, f"expected {want}, got {exc}", desc)
    except Exception as exc:
        return Outcome(inst.case, inst.seed, FAIL,
                       f"raised {type(exc).__name__}: {exc} (not a TappError)", desc)
    if inst.expected_code is not None:
        return Outcome(inst.case, inst.seed, FAIL,
                       f"expected error {inst.expected_code}, but it succeeded", desc)
    for k, (it, exp) in enumerate(zip(inst.items, expected, strict=True)):
        ok, why = check_result(it["D"].parent, exp)  # type: ignore[union-attr]
        if not ok:
            prefix = f"batch item {k}: " if inst.batched else ""
            return Outcome(inst.case, inst.seed, FAIL, prefix + why, desc)
    return Outcome(inst.case, inst.seed, PASS, "", desc)


def run_case(number: int, backend: str, seeds: Iterable[int]) -> list[Outcome]:
    """Run case ``number`` for every seed."""
    case = CASES[number]
    return [run_instance(case.make(seed), backend) for seed in seeds]


def run(
    backend: str,
    cases: Sequence[int] | None = None,
    seeds: int = 20,
    report: Callable[[str], None] | None = None,
) -> Summary:
    """Run ``cases`` (default: all) with ``seeds`` seeds each; print one line per case.

    The last line is ``N passed, M failed`` (instances), with ``, K unsupported`` when any.
    """
    summary = Summary(backend)
    numbers = sorted(CASES) if not cases else list(cases)
    for number in numbers:
        outcomes = run_case(number, backend, range(seeds))
        summary.outcomes.extend(outcomes)
        if report is not None:
            case = CASES[number]
            fails = [o for o in outcomes if o.verdict == FAIL]
            unsup = [o for o in outcomes if o.verdict == UNSUPPORTED]
            line = (
                f"case {number:2d} {case.name:<26} {len(outcomes) - len(fails) - len(unsup):3d} "
                f"passed, {len(fails)} failed"
            )
            if unsup:
                line += f", {len(unsup)} unsupported: {unsup[0].message}"
            report(line)
            for o in fails[:3]:
                report(f"    seed {o.seed}: {o.message}\n      {o.description}")
    if report is not None:
        tail = f", {summary.count(UNSUPPORTED)} unsupported" if summary.count(UNSUPPORTED) else ""
        report(f"{summary.count(PASS)} passed, {summary.count(FAIL)} failed{tail}")
    return summary
