"""Differential conformance: two TAPP implementations run the same seeded instances.

``pytapp check --library A --against B`` runs every instance on both sides, each case in child
processes (:mod:`pytapp.conformance.isolated`), and compares what only can be compared across
libraries (error codes differ between correct libraries, SPEC section 8): success against
failure, and D's values within SPEC section 7's tolerance. Each side's code and text are shown
side by side.

Examples
--------
>>> result = run_differential("reference", "reference", cases=[2], seeds=1, timeout=120)
>>> result.counts()
(1, 0, 0)
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytapp.conformance.cases import CASES
from pytapp.conformance.isolated import DEFAULT_TIMEOUT, d_file, run_keys
from pytapp.conformance.oracle import expected_result
from pytapp.errors import ErrorCode
from pytapp.precision import within_tolerance

__all__ = ["AGREE", "DISAGREE", "UNSUPPORTED", "Comparison", "Differential", "backend_for",
           "compare", "run_differential"]

AGREE, DISAGREE, UNSUPPORTED = "agree", "disagree", "unsupported"
_DECLINED = (int(ErrorCode.UNSUPPORTED), int(ErrorCode.UNKNOWN_PRECISION))


def backend_for(target: str) -> str:
    """Return the backend name for a ``--library`` or ``--against`` value.

    ``pytapp`` is pytapp's reference backend; an existing file is a C library through
    ``clib``; anything else is a backend name.
    """
    if target == "pytapp":
        return "reference"
    if os.path.isfile(target):
        return f"clib:{target}"
    return target


@dataclass
class Comparison:
    """The verdict on one instance, with both sides' records."""

    case: int
    seed: int
    verdict: str
    why: str
    a: dict[str, Any]
    b: dict[str, Any]


@dataclass
class Differential:
    """Every comparison of a differential run."""

    a: str
    b: str
    comparisons: list[Comparison] = field(default_factory=list)

    def counts(self) -> tuple[int, int, int]:
        """(agree, disagree, unsupported)."""
        return tuple(sum(1 for c in self.comparisons if c.verdict == v)  # type: ignore[return-value]
                     for v in (AGREE, DISAGREE, UNSUPPORTED))

    @property
    def ok(self) -> bool:
        """True when nothing disagrees."""
        return self.counts()[1] == 0


def _side(record: dict[str, Any]) -> str:
    outcome = record.get("outcome")
    if outcome == "success":
        return "success"
    if outcome in ("crashed", "hung"):
        return f"{outcome}: {record.get('text', '')}"
    code = record.get("code")
    lib = record.get("library_code")
    own = f" (library code {lib})" if lib is not None and lib != code else ""
    changed = "; D CHANGED" if record.get("d_changed") else ""
    return f"error {code}{own}: {record.get('text', '')}{changed}"


def compare(number: int, seed: int, ra: dict[str, Any], rb: dict[str, Any], dir_a: str,
            dir_b: str) -> Comparison:
    """Judge one instance from both sides' records (and D files, for two successes)."""
    key = f"{number}:{seed}"

    def result(verdict: str, why: str) -> Comparison:
        return Comparison(number, seed, verdict, why, ra, rb)

    broken = [f"{side} {r['outcome']}" for side, r in (("A", ra), ("B", rb))
              if r.get("outcome") in ("crashed", "hung")]
    if broken:  # a crash or a hang is a defect even when both sides have it
        return result(DISAGREE, " and ".join(broken))
    for side, r in (("A", ra), ("B", rb)):
        if r.get("outcome") == "error" and r.get("d_changed"):
            return result(DISAGREE, f"{side} failed but changed D")
    sa, sb = ra.get("outcome"), rb.get("outcome")
    if sa == "error" and sb == "error":
        return result(AGREE, "both refuse")
    if sa != sb:
        failed = ra if sa == "error" else rb
        own = failed.get("library_code")
        # pytapp declining (18, 16), or a library answering 18/16 itself; a library's other
        # own codes (reported by the bridge as 18) are failures.
        if failed.get("code") in _DECLINED and (own is None or own in _DECLINED):
            return result(UNSUPPORTED, f"{'A' if failed is ra else 'B'} does not support it")
        return result(DISAGREE, "one succeeds, the other fails")
    inst = CASES[number].make(seed)
    if inst.batched:
        return result(AGREE, "both succeed (batched: values not compared)")
    parent = inst.items[0].d.parent
    try:
        da, db = (np.load(d_file(d, key)).view(parent.dtype).reshape(parent.shape)
                  for d in (dir_a, dir_b))
    except (OSError, ValueError) as exc:
        return result(DISAGREE, f"cannot read a side's D: {exc}")
    exp = expected_result(inst, inst.items[0])
    # Each side may be off the exact result by the tolerance: twice that between them.
    close = within_tolerance(da, db.astype(np.complex128), exp.bound, 2 * exp.tol,
                             2 * exp.store_eps, 2 * exp.store_tiny)
    same_outside = da.tobytes() == db.tobytes() if not exp.written.any() else bool(
        np.all(np.where(exp.written, True, (da == db) | (np.isnan(da) & np.isnan(db)))))
    ok = np.where(exp.written, close, True)
    if np.all(ok) and same_outside:
        return result(AGREE, "values agree")
    if not same_outside:
        return result(DISAGREE, "outside D, the two allocations differ")
    bad = np.argwhere(~ok)
    first = tuple(int(i) for i in bad[0])
    return result(DISAGREE, f"values differ beyond tolerance at {len(bad)} of {ok.size} "
                            f"elements; first at {first}: A {da[first]} vs B {db[first]} "
                            f"(bound {exp.bound[first]:.3g}, tol {exp.tol:.3g})")


def _compare_safely(number: int, seed: int, ra: dict[str, Any], rb: dict[str, Any],
                    dir_a: str, dir_b: str) -> Comparison:
    """:func:`compare`, with a failure of the comparison itself reported, never raised."""
    try:
        return compare(number, seed, ra, rb, dir_a, dir_b)
    except Exception as exc:  # a report line, never the end of the run
        return Comparison(number, seed, DISAGREE,
                          f"the comparison failed: {type(exc).__name__}: {exc}", ra, rb)


def run_differential(a: str, b: str, cases: Sequence[int] | None = None, seeds: int = 20,
                     report: Callable[[str], None] | None = None,
                     timeout: float = DEFAULT_TIMEOUT) -> Differential:
    """Run ``cases`` x ``seeds`` on backends ``a`` and ``b`` (each case in children); compare.

    ``report`` gets one line per case, the disagreements with the instance to reproduce them
    and each side's code and text, and the summary ``N agree, M disagree, K unsupported``.
    """
    out = Differential(a, b)
    say = report or (lambda _line: None)
    with tempfile.TemporaryDirectory(prefix="pytapp-diff-") as tmp:
        dir_a, dir_b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
        os.makedirs(dir_a)
        os.makedirs(dir_b)
        try:
            for number in cases or sorted(CASES):
                keys = [f"{number}:{s}" for s in range(seeds)]
                rec_a = run_keys("instance", a, keys, dir_a, timeout)
                rec_b = run_keys("instance", b, keys, dir_b, timeout)
                found = [_compare_safely(number, s, rec_a[k], rec_b[k], dir_a, dir_b)
                         for s, k in enumerate(keys)]
                out.comparisons.extend(found)
                n = {v: sum(1 for c in found if c.verdict == v)
                     for v in (AGREE, DISAGREE, UNSUPPORTED)}
                say(f"case {number:2d} {CASES[number].name:<26} {n[AGREE]:3d} agree, "
                    f"{n[DISAGREE]} disagree, {n[UNSUPPORTED]} unsupported")
                for c in [c for c in found if c.verdict == DISAGREE][:3]:
                    say(f"    seed {c.seed}: {c.why}\n"
                        f"      instance: {CASES[number].make(c.seed).describe()}\n"
                        f"      reproduce: pytapp.conformance.CASES[{number}].make({c.seed})\n"
                        f"      A {a}: {_side(c.a)}\n      B {b}: {_side(c.b)}")
        finally:
            agree, disagree, unsupported = out.counts()
            say(f"{agree} agree, {disagree} disagree, {unsupported} unsupported")
    return out
