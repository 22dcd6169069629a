"""Command line: ``pytapp info | explain CODE | check | bench | demo``.

Examples
--------
>>> main(["explain", "19"])
19: an operand's layout reaches outside its memory
0
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Sequence

from pytapp import backends
from pytapp.errors import ErrorCode, explain_error

__all__ = ["main"]


def _cmd_info(args: argparse.Namespace) -> int:
    import numpy as np

    rows = []
    for name, (ok, why) in backends.available().items():
        rows.append({"backend": name, "available": ok, "reason": why})
    record: dict[str, object] = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
        "default_backend": backends.DEFAULT_BACKEND,
        "backends": rows,
    }
    try:
        from threadpoolctl import threadpool_info

        record["threadpools"] = [
            {k: v for k, v in pool.items() if k in ("internal_api", "version", "num_threads",
                                                    "architecture")}
            for pool in threadpool_info()
        ]
    except ImportError:  # pragma: no cover - threadpoolctl is a dependency
        pass
    if args.json:
        print(json.dumps(record, indent=2))
        return 0
    print(f"pytapp on Python {record['python']}, NumPy {record['numpy']}, {record['machine']}")
    print(f"default backend: {record['default_backend']}")
    for row in rows:
        state = "available" if row["available"] else f"unavailable: {row['reason']}"
        print(f"  {row['backend']:<10} {state}")
    for pool in record.get("threadpools", []):  # type: ignore[attr-defined]
        print(f"  threads: {pool}")
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    codes = [int(c) for c in args.codes] if args.codes else [int(c) for c in ErrorCode]
    for code in codes:
        print(f"{code}: {explain_error(code)}")
    return 0


def _parse_cases(text: str | None) -> list[int] | None:
    if not text:
        return None
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def _cmd_check(args: argparse.Namespace) -> int:
    from pytapp.conformance import CASES, run

    cases = _parse_cases(args.cases)
    unknown = [c for c in cases or [] if c not in CASES]
    if unknown:
        print(f"unknown case numbers {unknown}; cases are 1-{max(CASES)}", file=sys.stderr)
        return 2
    try:
        backends.get(args.backend)
    except Exception as exc:
        print(str(exc), file=sys.stderr)
        return 2
    print(f"conformance of backend {args.backend!r}: {args.seeds} seeds per case")
    summary = run(args.backend, cases, args.seeds, report=print)
    return 0 if summary.ok else 1


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pytapp", description="TAPP tensor products: backends, conformance, benchmarks"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="backends available, versions, BLAS and threads")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_info)
    p = sub.add_parser("explain", help="text of TAPP error codes")
    p.add_argument("codes", nargs="*", help="codes (default: all)")
    p.set_defaults(func=_cmd_explain)
    p = sub.add_parser("check", help="run the conformance kit against a backend")
    p.add_argument("--backend", default="reference", help="backend name (default reference)")
    p.add_argument("--cases", help="case numbers, e.g. '1-5,12' (default: all)")
    p.add_argument("--seeds", type=int, default=20, help="random instances per case")
    p.set_defaults(func=_cmd_check)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
