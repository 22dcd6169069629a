"""The pytapp conformance kit: named cases, an independent oracle, and a runner.

Any TAPP implementation reachable from pytapp (a backend or a C library through ``clib``) can be
checked with :func:`run` or ``pytapp check --backend NAME``, compared with another one case by
case (:mod:`pytapp.conformance.differential`, ``pytapp check --library A --against B``), and
the kit's instances can be written as data with :func:`export` for other implementations to
replay (``docs/fixtures.md``).

Examples
--------
>>> from pytapp.conformance import run
>>> summary = run("reference", cases=[2], seeds=2)
>>> summary.ok
True
"""

from pytapp.conformance.cases import CASES, Case
from pytapp.conformance.fixtures import export, load
from pytapp.conformance.instance import Instance, OperandData
from pytapp.conformance.oracle import check_result, expected_result
from pytapp.conformance.runner import Outcome, Summary, run, run_case, run_instance

__all__ = [
    "CASES",
    "Case",
    "Instance",
    "OperandData",
    "Outcome",
    "Summary",
    "check_result",
    "expected_result",
    "export",
    "load",
    "run",
    "run_case",
    "run_instance",
]
