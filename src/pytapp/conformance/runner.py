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

from pytapp.conformance.cases import CASES
from pytapp.conformance.instance import Instance, OperandData
from pytapp.conformance.oracle import Expected, check_result, expected_result
from pytapp.conformance.scenarios import SCENARIOS, Call, Scenario
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


def _scenario(inst: Instance) -> Scenario | None:
    if not inst.scenario:
        return None
    try:
        return SCENARIOS[inst.scenario]
    except KeyError:
        raise ValueError(f"unknown scenario {inst.scenario!r}; known: "
                         f"{', '.join(sorted(SCENARIOS))}") from None


class _Tensors:
    """An instance's operands as torch tensors on a device, over copies of their allocations.

    Each allocation (parent) becomes one flat tensor on the device; an operand is the view
    its NumPy view is (the descriptor's extents and strides at the same offset), or, where
    strides are negative, the flat storage from its element [0, ..., 0] on (TAPP's other way
    to pass data). :meth:`write_back` copies D's allocations back for judging.
    """

    def __init__(self, inst: Instance, device: str) -> None:
        import torch

        from pytapp.datatypes import torch_view

        self.torch, self.device = torch, device
        self._view = torch_view
        self._flat: dict[int, tuple[np.ndarray, Any]] = {}
        self.items = [{r: self.tensor(it.get(r)) for r in "ABCD"} for it in inst.items]
        self._outputs = [it.d.parent for it in inst.items]

    def tensor(self, data: OperandData | None) -> Any:
        if data is None:
            return None
        key = id(data.parent)
        if key not in self._flat:
            copy = np.array(data.parent, copy=True).reshape(-1)
            self._flat[key] = (data.parent, self._view(copy).to(self.device))
        flat = self._flat[key][1]
        view = np.asarray(data.view)
        item = view.itemsize
        first = data.offset_bytes // item
        if any(s < 0 for s in view.strides):
            return flat[first:]
        return self.torch.as_strided(flat, view.shape, [s // item for s in view.strides], first)

    def write_back(self) -> None:
        from pytapp.datatypes import numpy_view

        for parent in self._outputs:
            flat = self._flat[id(parent)][1]
            np.copyto(parent, numpy_view(flat.cpu()).reshape(parent.shape), casting="unsafe")


def execute_instance(inst: Instance, backend: str, threads: int | None = None,
                     device: str | None = None, tensors: bool = False) -> None:
    """Create the plan and run it as the instance (and its scenario) says.

    ``threads`` runs it on an executor with that thread count, ``device`` on an executor on
    that device; ``tensors`` hands the operands as torch tensors on ``device`` (default CPU)
    instead of NumPy views (the allocations are copied there, and D's copied back).
    """
    item = inst.items[0]
    roles = item.roles()
    options: dict[str, Any] = {f"op_{r.lower()}": inst.ops.get(r, 0) for r in "ABCD"}
    options.update(prec=inst.prec, allow_broadcast=inst.allow_broadcast)
    moved = _Tensors(inst, device or "cpu") if tensors else None
    call = Call(inst, item, backend, infos={r: _info(x) for r, x in roles.items()},
                labels=dict(inst.labels), options=options,
                data=moved.items[0] if moved else {r: item.view(r) for r in "ABCD"},
                alpha=inst.alpha, beta=inst.beta,
                executor=None if threads is None and device is None else Executor(
                    threads=threads, device=device or "cpu"))
    try:
        _execute(inst, call, moved)
    finally:
        if moved is not None:
            moved.write_back()


def _execute(inst: Instance, call: Call, moved: _Tensors | None) -> None:
    scenario = _scenario(inst)
    if scenario is not None:
        scenario.before_plan(call)
    c_info = call.infos["C"]
    call.plan = TensorProduct(
        Handle(call.backend),
        call.info("A"), call.labels["A"], call.info("B"), call.labels["B"],
        c_info, call.labels["C"] if c_info is not None else None,
        call.info("D"), call.labels["D"],
        **call.options,
    )
    if scenario is not None:
        scenario.after_plan(call)
        if scenario.run is not None:
            scenario.run(call)
            return
    if inst.batched:
        items: list[dict[str, Any]] = (moved.items if moved is not None else
                                       [{r: it.view(r) for r in "ABCD"} for it in inst.items])
        call.plan.execute_batched(
            call.alpha, [it["A"] for it in items], [it["B"] for it in items], call.beta,
            [it["C"] for it in items], [it["D"] for it in items], call.executor)
        return
    d = call.data
    call.plan.execute(call.alpha, d["A"], d["B"], call.beta, d["C"], d["D"], call.executor)


def _snapshot(inst: Instance) -> list[np.ndarray]:
    return [it.d.parent.copy() for it in inst.items]


def _unchanged(inst: Instance, before: list[np.ndarray]) -> bool:
    for it, old in zip(inst.items, before, strict=True):
        new = it.d.parent
        if new.tobytes() != old.tobytes():
            return False
    return True


def run_instance(inst: Instance, backend: str, threads: int | None = None,
                 expected: list[Expected] | None = None, device: str | None = None,
                 tensors: bool = False) -> Outcome:
    """Run one instance on ``backend`` and judge it (never raises for a backend's fault).

    ``expected``: the expectation of each batch item when it comes from elsewhere (a fixture
    file); by default the oracle computes it. ``device`` and ``tensors``: as for
    :func:`execute_instance`.
    """
    desc = inst.describe()
    before = _snapshot(inst)
    if expected is None:
        expected = []
        if inst.expected_code is None:
            expected = [expected_result(inst, it) for it in inst.items]
    try:
        execute_instance(inst, backend, threads, device, tensors)
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
        ok, why = check_result(it.d.parent, exp)
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
