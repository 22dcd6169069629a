"""Command line: ``pytapp info | explain CODE | check | plan | bench | tune | report | demo``.

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
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

from pytapp import backends
from pytapp.errors import ErrorCode, TappError, explain_error
from pytapp.handle import Handle

__all__ = ["main"]

#: The ``--abi`` values (backends.clib.ABIS and "auto"; not imported: clib loads ctypes).
ABI_CHOICES = ["released", "multi-tapp", "cutensor_bindings", "auto"]


def _cmd_info_library(args: argparse.Namespace) -> int:
    """``pytapp info --library PATH``: what a TAPP C library is, probed in child processes."""
    from pytapp.backends.clib_probe import describe

    record = describe(args.library, args.abi)
    if args.json:
        print(json.dumps(record, indent=2))
        return 0 if record["probe_ok"] else 1
    print(f"library: {record['path']}")
    if record["name"]:
        print(f"implementation name: {record['name']}")
    print(f"ABI: {record['abi'] or 'none of ' + ', '.join(p['abi'] for p in record['probes'])}")
    if record["missing"]:
        print(f"missing required symbols: {', '.join(record['missing'])}")
    print(f"optional symbols: {', '.join(record['optional']) or '(none)'}")
    for probe in record["probes"]:
        state = "ran the probe product right" if probe.get("ok") else (
            probe.get("text") or f"returned {probe.get('code')}")
        ended = "survived" if probe.get("survived") else "did not survive"
        print(f"probe as {probe['abi']}: {ended}; {state}")
    if record["null_executor"] is not None:
        print("NULL executor and status: "
              + ("accepted" if record["null_executor"] else "refused"))
    if "TAPP_explain_error" not in record["optional"]:
        print("error texts: none (the library exports no TAPP_explain_error)")
        return 0 if record["probe_ok"] else 1
    print("error texts:")
    for code, text in record["texts"].items():
        print(f"  {code:3d}: {text or '(no text)'}")
    return 0 if record["probe_ok"] else 1


def _cmd_info(args: argparse.Namespace) -> int:
    import numpy as np

    if args.library:
        return _cmd_info_library(args)

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
    if args.matrix:
        print(backends.matrix_markdown())
        return 0
    if args.json:
        print(json.dumps(record, indent=2))
        return 0
    print(f"pytapp on Python {record['python']}, NumPy {record['numpy']}, {record['machine']}")
    print(f"default backend: {record['default_backend']}")
    for row in rows:
        state = "available" if row["available"] else f"unavailable: {row['reason']}"
        print(f"  {row['backend']:<10} {state}")
    print("capabilities:")
    print(backends.matrix_markdown())
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
    import os

    from pytapp.conformance import CASES, run

    cases = _parse_cases(args.cases)
    unknown = [c for c in cases or [] if c not in CASES]
    if unknown:
        print(f"unknown case numbers {unknown}; cases are 1-{max(CASES)}", file=sys.stderr)
        return 2
    if args.export:
        return _check_export(args.export, cases, args.seeds)
    backend = f"clib:{args.library}" if args.library else args.backend
    if args.abi:
        os.environ["PYTAPP_CLIB_ABI"] = args.abi  # children inherit it
    if args.fixtures:
        return _check_fixtures(args.fixtures, backend, args.timeout)
    if args.against:
        return _check_against(backend, args.against, cases, args.seeds, args.timeout)
    # A C library may crash the process: isolate its cases unless told otherwise.
    isolate = args.isolate if args.isolate is not None else bool(args.library)
    if not isolate:
        try:
            Handle(backend).destroy()
        except TappError as exc:
            print(str(exc), file=sys.stderr)
            return 2
    print(f"conformance of backend {backend!r}: {args.seeds} seeds per case"
          + (" (each case in its own process)" if isolate else ""), flush=True)
    if isolate:
        return _check_isolated(backend, cases or sorted(CASES), args.seeds, args.timeout)
    summary = run(backend, cases, args.seeds, report=print)
    return 0 if summary.ok else 1


def _check_export(directory: str, cases: list[int] | None, seeds: int) -> int:
    """``pytapp check --export DIR``: write the kit's instances as fixture files."""
    from pytapp.conformance.fixtures import FORMAT, VERSION, export

    index = export(directory, cases, seeds)
    print(f"wrote {len(index['fixtures'])} fixtures ({FORMAT} version {VERSION}) to "
          f"{directory}; {len(index['skipped'])} instances left out (see index.json)")
    return 0


def _check_fixtures(directory: str, backend: str, timeout: float) -> int:
    """``pytapp check --fixtures DIR``: replay fixture files, each judged in a child process."""
    import tempfile
    from pathlib import Path

    from pytapp.conformance.isolated import run_keys

    try:
        index = json.loads((Path(directory) / "index.json").read_text(encoding="utf-8"))
        names = [str(f["file"]) for f in index["fixtures"]]
    except (OSError, ValueError, KeyError, TypeError):  # no usable index: every fixture file
        names = sorted(p.name for p in Path(directory).glob("case*-seed*.json"))
    if not names:
        print(f"no fixtures in {directory}; write some with pytapp check --export DIR",
              file=sys.stderr)
        return 2
    print(f"replaying {len(names)} fixtures from {directory} on {backend!r} "
          "(in child processes)", flush=True)
    counts = {"pass": 0, "fail": 0, "unsupported": 0}

    def show(key: str, record: dict[str, Any]) -> None:
        verdict = str(record.get("verdict", "fail"))
        counts["pass" if verdict == "pass" else
               "unsupported" if verdict == "unsupported" else "fail"] += 1
        if verdict != "pass":
            print(f"  {Path(key).name}: {verdict}: {record.get('text', '')}", flush=True)
            if record.get("description"):
                print(f"      {record['description']}", flush=True)

    paths = [str(Path(directory) / n) for n in names]
    try:
        with tempfile.TemporaryDirectory(prefix="pytapp-fixtures-") as tmp:
            run_keys("fixture", backend, paths, tmp, timeout, on_record=show)
    finally:
        tail = f", {counts['unsupported']} unsupported" if counts["unsupported"] else ""
        print(f"{counts['pass']} passed, {counts['fail']} failed{tail}", flush=True)
    return 0 if counts["fail"] == 0 else 1


def _check_against(backend: str, against: str, cases: list[int] | None, seeds: int,
                   timeout: float) -> int:
    """``pytapp check --library A --against B``: differential run, case by case."""
    from pytapp.conformance.differential import backend_for, run_differential

    other = backend_for(against)
    print(f"differential conformance: A = {backend!r}, B = {other!r}, {seeds} seeds per "
          "case (each side in child processes)", flush=True)
    result = run_differential(backend, other, cases, seeds, report=lambda t: print(
        t, flush=True), timeout=timeout)
    return 0 if result.ok else 1


def _check_isolated(backend: str, cases: list[int], seeds: int, timeout: float) -> int:
    """One child process per case: a crashing or hanging library fails that case, not the run.

    The summary line is printed whatever happened, even when the run is interrupted.
    """
    import re
    import subprocess

    from pytapp.conformance import CASES

    passed = failed = unsupported = 0
    try:
        for number in cases:
            try:
                child = subprocess.run(
                    [sys.executable, "-m", "pytapp", "check", "--no-isolate", "--backend",
                     backend, "--cases", str(number), "--seeds", str(seeds)],
                    capture_output=True, text=True, timeout=timeout * seeds)
            except subprocess.TimeoutExpired:
                failed += seeds
                print(f"case {number:2d} {CASES[number].name:<26} hung (no result within "
                      f"{timeout * seeds:g} s; killed)", flush=True)
                continue
            lines = child.stdout.strip().splitlines()
            match = re.match(r"(\d+) passed, (\d+) failed(?:, (\d+) unsupported)?",
                             lines[-1]) if lines else None
            if child.returncode < 0 or match is None:
                failed += seeds
                why = f"signal {-child.returncode}" if child.returncode < 0 else (
                    (child.stderr.strip().splitlines() or ["no result"])[-1])
                print(f"case {number:2d} {CASES[number].name:<26} crashed ({why})", flush=True)
                continue
            passed += int(match.group(1))
            failed += int(match.group(2))
            unsupported += int(match.group(3) or 0)
            print("\n".join(lines[1:-1]), flush=True)
    finally:
        tail = f", {unsupported} unsupported" if unsupported else ""
        print(f"{passed} passed, {failed} failed{tail}", flush=True)
    return 0 if failed == 0 else 1


def _cmd_plan(args: argparse.Namespace) -> int:
    import numpy as np

    from pytapp.contraction import parse_expression
    from pytapp.datatypes import Datatype
    from pytapp.product import TensorProduct
    from pytapp.tensor import TensorInfo

    try:
        la, lb, ld = parse_expression(args.expr)
        dt = Datatype.from_name(args.dtype)
        shapes = [tuple(int(e) for e in s.lower().split("x") if e) for s in args.shapes]
        if len(shapes) != 2:
            raise ValueError("give two shapes, for A and B, like 64x32 32x16")
        extents = dict(zip(la + lb, shapes[0] + shapes[1], strict=False))
        missing = [x for x in ld if x not in extents]
        if missing or len(shapes[0]) != len(la) or len(shapes[1]) != len(lb):
            raise ValueError(f"the shapes {args.shapes} do not match {args.expr!r}")
        infos = [TensorInfo(dt, shapes[0]), TensorInfo(dt, shapes[1]),
                 TensorInfo(dt, tuple(extents[x] for x in ld))]
        with Handle(args.backend) as handle:
            plan = TensorProduct(handle, infos[0], la, infos[1], lb, None, None, infos[2], ld)
            if args.run:
                rng = np.random.default_rng(0)
                data = [rng.uniform(-1, 1, i.extents).astype(dt.numpy_dtype) for i in infos]
                plan.execute(1.0, data[0], data[1], 0.0, None, data[2],
                             handle.create_executor(autotune=True))
            print(plan.explain())
    except (TappError, ValueError) as exc:
        print(str(exc), file=sys.stderr)
        return 2
    return 0


def _progress_printer() -> tuple[Any, Any]:
    """Return (callback, context) showing a rich progress bar (plain lines without rich)."""
    try:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    except ImportError:
        def plain(name: str, i: int, total: int) -> None:
            if name != "done":
                print(f"[{i + 1}/{total}] {name}", file=sys.stderr, flush=True)

        return plain, nullcontext()
    bar = Progress(TextColumn("{task.description:<28}"), BarColumn(),
                   TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                   transient=True)
    task = bar.add_task("benchmarking", total=None)

    def update(name: str, i: int, total: int) -> None:
        bar.update(task, description=name, completed=i, total=total)

    return update, bar


def _print_table(result: Any) -> None:
    from pytapp.bench.report import table_rows, table_text

    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(table_text(result))
        return
    header, rows, notes = table_rows(result)
    table = Table(title=f"pytapp bench --suite {result.suite} (GFLOP/s; ratio to best peer)")
    for h in header:
        table.add_column(h, justify="left" if h in ("case", "dtype") else "right")
    for r in rows:
        table.add_row(*r)
    console = Console(width=max(120, 12 * len(header)))
    console.print(table)
    for n in notes:
        console.print(f"note: {n}")


def _cmd_bench_networks(args: argparse.Namespace) -> int:
    from pytapp.bench import networks
    from pytapp.bench.harness import SETTLE_SECONDS

    backend = args.backend[0] if args.backend != ["auto", "blas"] else None
    cases = networks.network_cases(args.size, quick=args.quick)
    if args.case:
        cases = [c for c in cases if any(k in c.name for k in args.case)]
    callback, bar = _progress_printer()
    with bar:
        done = iter(range(len(cases)))
        results = networks.run_networks(
            cases, repeats=args.repeats, backend=backend, roof=not args.quick,
            threads=args.threads,
            sample_seconds=networks.SAMPLE_SECONDS / (10 if args.quick else 1),
            settle_seconds=0.0 if args.quick else SETTLE_SECONDS,
            progress=lambda what: callback(what, next(done), len(cases)))
    print(networks.networks_table(results))
    return _write_reports(args, results, networks.networks_json(results),
                          networks.networks_plot, networks.networks_markdown)


def _write_reports(args: argparse.Namespace, results: Any, data: Any,
                   plot: Callable[[Any, str], None], markdown: Callable[[Any, str | None], str],
                   ) -> int:
    """--json, --plot and --markdown of a suite with its own report; 1 on a wrong result."""
    from pathlib import Path

    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=1))
        print(f"wrote {args.json}")
    if args.plot:
        plot(results, args.plot)
        print(f"wrote {args.plot}")
    if args.markdown:
        Path(args.markdown).write_text(
            markdown(results, Path(args.plot).name if args.plot else None))
        print(f"wrote {args.markdown}")
    # A row may carry its own bound (low-precision results round to 8 or 11 bits).
    wrong = [e for r in results for e in r.errors.values()
             if e > getattr(r, "tolerance", 1e-3)]
    return 1 if wrong else 0


def _cmd_bench_dask(args: argparse.Namespace) -> int:
    try:
        from pytapp.bench import dask_suite
    except ImportError:
        print("the dask suite needs dask and distributed: pip install 'pytapp[dask]'",
              file=sys.stderr)
        return 2
    cases = dask_suite.dask_cases(args.size)
    if args.case:
        cases = [c for c in cases if any(k in c.name for k in args.case)]
    callback, bar = _progress_printer()
    with bar:
        total = len(cases) * 3
        done = iter(range(total))
        results = dask_suite.run_dask(cases, repeats=args.repeats,
                                      progress=lambda what: callback(what, next(done), total))
    print(dask_suite.dask_table(results))
    data = {"suite": "dask", "cases": [
        {"name": r.case.name, "expr": r.case.expr, "seconds": r.times, "errors": r.errors,
         "ratio": r.ratio} for r in results]}
    return _write_reports(args, results, data, dask_suite.dask_plot, dask_suite.dask_markdown)


def _cmd_bench_targets(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from pytapp.bench import targets

    callback, bar = _progress_printer()
    with bar:
        steps = iter(range(4))
        rows = targets.run_targets(repeats=args.repeats,
                                   progress=lambda what: callback(what, next(steps), 4))
    print(targets.targets_table(rows))
    data = {"suite": "targets", "rows": [asdict(r) | {"ratio": r.ratio, "met": r.met}
                                         for r in rows]}
    return _write_reports(args, rows, data, targets.targets_plot, targets.targets_markdown)


def _write_text_reports(args: argparse.Namespace, data: dict[str, Any], markdown: str) -> None:
    """Write ``--json`` and ``--markdown`` when asked, and say so."""
    from pathlib import Path

    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=1))
        print(f"wrote {args.json}")
    if args.markdown:
        Path(args.markdown).write_text(markdown)
        print(f"wrote {args.markdown}")


def _cmd_bench_cc(args: argparse.Namespace) -> int:
    from pytapp.bench import ccsd

    callback, bar = _progress_printer()
    rounds = max(args.repeats, 1)
    with bar:
        done = iter(range(rounds))
        result = ccsd.run_cc(args.size, rounds=rounds, iterations=ccsd.ITERATIONS,
                             threads=args.threads,
                             progress=lambda what: callback(what, next(done), rounds))
    print(ccsd.cc_table(result))
    _write_text_reports(args, ccsd.cc_json(result), ccsd.cc_markdown(result))
    return 1 if any(e > 1e-10 for e in result.errors.values()) else 0


def _cmd_bench_dmrg(args: argparse.Namespace) -> int:
    from pytapp.bench import dmrg
    from pytapp.bench.harness import thread_limits

    callback, bar = _progress_printer()
    rounds = max(args.repeats, 1)
    sites = 10 if args.quick else 32
    with bar:
        total = rounds * len(dmrg.MODES)
        done = iter(range(total))
        with thread_limits(args.threads or 1):  # see pytapp.bench.dmrg on threads
            result = dmrg.run_dmrg(sites=sites, rounds=rounds,
                                   progress=lambda what: callback(what, next(done), total))
    print(dmrg.dmrg_table(result))
    _write_text_reports(args, dmrg.dmrg_json(result), dmrg.dmrg_markdown(result))
    numpy_energy = result.energy.get("numpy")
    wrong = numpy_energy is not None and any(
        abs(e - numpy_energy) > 1e-10 for e in result.energy.values())
    return 1 if wrong else 0


def _cmd_bench_torch(args: argparse.Namespace) -> int:
    from dataclasses import asdict
    from functools import partial

    from pytapp.bench import targets, torch_suite

    device = args.device or "cpu"
    if device != "cpu":
        import torch

        if not device.startswith("cuda") or not torch.cuda.is_available():
            print(f"device {device!r} is not available to torch here (CUDA available: "
                  f"{torch.cuda.is_available()}); use --device cpu", file=sys.stderr)
            return 2

    cases = torch_suite.torch_cases()
    if args.case:
        cases = [c for c in cases if any(k in c.name for k in args.case)]
    if not cases:
        print(f"no torch case matches {args.case}", file=sys.stderr)
        return 2
    callback, bar = _progress_printer()
    with bar:
        steps = iter(range(len(cases)))
        rows = torch_suite.torch_rows(rounds=args.repeats, cases=cases,
                                      progress=lambda what: callback(what, next(steps),
                                                                     len(cases)),
                                      device=device)
    print(torch_suite.torch_table(rows))
    data = {"suite": "torch", "device": device,
            "rows": [asdict(r) | {"ratio": r.ratio, "met": r.met} for r in rows]}
    return _write_reports(args, rows, data, targets.targets_plot,
                          partial(torch_suite.torch_markdown, device=device))


def _cmd_bench(args: argparse.Namespace) -> int:
    from pytapp.bench import report

    if args.suite == "cc":
        return _cmd_bench_cc(args)
    if args.suite == "dmrg":
        return _cmd_bench_dmrg(args)
    if args.suite == "torch":
        return _cmd_bench_torch(args)
    if args.suite == "targets":
        return _cmd_bench_targets(args)
    if args.suite == "networks":
        return _cmd_bench_networks(args)
    if args.suite == "dask":
        return _cmd_bench_dask(args)
    from pytapp.bench.cases import generate, suite
    from pytapp.bench.harness import run_bench
    from pytapp.bench.peers import PEERS

    try:
        cases = suite(args.suite)
        if args.generate:
            cases += [generate(d, seed=s, size=args.size) for d in args.generate
                      for s in range(args.generate_count)]
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if args.size != 1.0:
        cases = [c.scaled(args.size) for c in cases]
    if args.case:
        cases = [c for c in cases if any(k in c.name for k in args.case)]
    if args.dtype:
        cases = [c for c in cases if c.dtype in args.dtype]
    if not cases:
        print("no benchmark case matches --case/--dtype", file=sys.stderr)
        return 2
    if args.library:
        args.backend = [*args.backend, f"clib:{args.library}"]
    bad = [p for p in args.peers if p not in PEERS]
    if bad:
        print(f"unknown peers {bad}; choose from {', '.join(PEERS)}", file=sys.stderr)
        return 2
    for name in args.backend:
        try:
            Handle(name).destroy()
        except TappError as exc:
            print(str(exc), file=sys.stderr)
            return 2
    callback, bar = _progress_printer()
    with bar:
        result = run_bench(cases, backends=args.backend, peers=args.peers, threads=args.threads,
                           repeats=args.repeats, suite=args.suite, progress=callback,
                           min_seconds=args.min_seconds)
    _print_table(result)
    if args.json:
        report.write_json(result, args.json)
        print(f"wrote {args.json}")
    if args.plot:
        report.write_plot(result, args.plot)
        print(f"wrote {args.plot}")
    if args.markdown:
        plot_ref = None
        if args.plot:
            from pathlib import Path

            plot_ref = Path(args.plot).name
        report.write_markdown(result, args.markdown, plot_ref)
        print(f"wrote {args.markdown}")
    wrong = [n for c in result.cases for n, m in c.measurements.items()
             if m.verdict.startswith("wrong") and m.kind == "backend"]
    return 1 if wrong else 0


def _tune_workload(args: argparse.Namespace) -> list[tuple[str, list[tuple[int, ...]], str]]:
    """(equation, shapes, dtype) of every product ``pytapp tune`` was asked for."""
    from pathlib import Path

    work: list[tuple[str, list[tuple[int, ...]], str]] = []
    if args.file:
        entries = json.loads(Path(args.file).read_text(encoding="utf-8"))
        if not isinstance(entries, list):
            raise ValueError(f"{args.file}: give a JSON list of "
                             '{"equation": ..., "shapes": [...], "dtype": ...}')
        for e in entries:
            work.append((str(e["equation"]), [tuple(int(n) for n in s) for s in e["shapes"]],
                         str(e.get("dtype", "float64"))))
    if args.suite == "cc":
        from pytapp.bench.ccsd import cc_shapes

        work += [(eq, shapes, "float64") for eq, shapes in cc_shapes(args.size)]
    elif args.suite:
        from pytapp.bench.cases import suite

        for case in suite(args.suite):
            if args.size != 1.0:
                case = case.scaled(args.size)
            la, lb, _ = case.labels
            work.append((case.einsum, [case.shape(la), case.shape(lb)],
                         case.datatype.numpy_dtype.name))
    return work


def _tune_one(eq: str, shapes: list[tuple[int, ...]], dtype: str) -> dict[str, Any] | None:
    """Time one product's network and its steps on every backend; ``None`` on an error."""
    import numpy as np

    from pytapp.datatypes import datatype_of
    from pytapp.expression import EinsumExpression

    try:
        dt = datatype_of(dtype, "dtype")
        rng = np.random.default_rng(0)
        arrays = [rng.uniform(-1, 1, s).astype(dt.numpy_dtype) for s in shapes]
        expr = EinsumExpression(eq, *arrays, backend="auto")
        expr(*arrays)  # plans each step on auto, which times its candidates
        choice = expr.tune(expr.network.prepare(arrays), dt)
    except TappError as exc:
        print(f"{eq} {shapes}: {exc}", file=sys.stderr)
        return None
    print(f"{eq:<24} {shapes!s:<40} {dtype:<10} -> {choice}")
    return {"equation": eq, "shapes": shapes, "dtype": dtype, "choice": choice}


def _cmd_tune(args: argparse.Namespace) -> int:
    import os

    from pytapp import wisdom

    try:
        work = _tune_workload(args)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"cannot read the workload: {exc}", file=sys.stderr)
        return 2
    if not work:
        print("nothing to tune: give --suite and/or --file", file=sys.stderr)
        return 2
    rows = []
    saved = os.environ.get("PYTAPP_AUTOTUNE")
    os.environ["PYTAPP_AUTOTUNE"] = "1"  # every auto plan times its candidates on first use
    try:
        for eq, shapes, dtype in work:
            row = _tune_one(eq, shapes, dtype)
            if row is not None:
                rows.append(row)
    finally:
        if saved is None:
            del os.environ["PYTAPP_AUTOTUNE"]
        else:
            os.environ["PYTAPP_AUTOTUNE"] = saved
    print(f"wisdom: {wisdom.path() or 'in memory only (PYTAPP_WISDOM=off)'}")
    if args.json:
        from pathlib import Path

        Path(args.json).write_text(json.dumps(rows, indent=1))
        print(f"wrote {args.json}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pytapp.bench import report

    try:
        result = report.from_json(json.loads(Path(args.json_file).read_text()))
    except (OSError, ValueError, KeyError) as exc:
        print(f"cannot read {args.json_file}: {exc}", file=sys.stderr)
        return 2
    _print_table(result)
    if args.plot:
        report.write_plot(result, args.plot)
        print(f"wrote {args.plot}")
    if args.markdown:
        report.write_markdown(result, args.markdown,
                              Path(args.plot).name if args.plot else None)
        print(f"wrote {args.markdown}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    import runpy
    from pathlib import Path

    examples = Path(__file__).resolve().parents[2] / "examples"
    scripts = sorted(examples.glob("*.py")) if examples.is_dir() else []
    for script in scripts:
        print(f"== {script.name}")
        runpy.run_path(str(script), run_name="__main__")
    if not scripts:
        print("(examples are in the source repository; running the benchmark only)")
    return _cmd_bench(_build_parser().parse_args(["bench", "--suite", "quick"]))


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pytapp", description="TAPP tensor products: backends, conformance, benchmarks"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="backends available, versions, BLAS and threads")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--matrix", action="store_true",
                   help="print the backends x features table (Markdown) only")
    p.add_argument("--library", help="describe a TAPP C library instead: its ABI, optional "
                                     "symbols, name, error texts (probed in child processes)")
    p.add_argument("--abi", choices=ABI_CHOICES,
                   help="C ABI of --library (default: detected by probing each)")
    p.set_defaults(func=_cmd_info)
    p = sub.add_parser("explain", help="text of TAPP error codes")
    p.add_argument("codes", nargs="*", help="codes (default: all)")
    p.set_defaults(func=_cmd_explain)
    p = sub.add_parser("check", help="run the conformance kit against a backend")
    p.add_argument("--backend", default="reference", help="backend name (default reference)")
    p.add_argument("--cases", help="case numbers, e.g. '1-5,12' (default: all)")
    p.add_argument("--seeds", type=int, default=20, help="random instances per case")
    p.add_argument("--library", help="check a C library exporting the TAPP C API (clib)")
    p.add_argument("--abi", choices=ABI_CHOICES,
                   help="C ABI of --library (default: released; auto: detected by a probe)")
    p.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                   help="run every case in a child process, so a crash is reported as that "
                        "case's failure (default: on with --library, off otherwise)")
    p.add_argument("--against", metavar="B",
                   help="differential run: compare --library (or --backend) with B, "
                        "'pytapp' (pytapp's reference backend), a C library path or a "
                        "backend name; prints 'N agree, M disagree, K unsupported'")
    p.add_argument("--export", metavar="DIR",
                   help="write the kit's instances as fixture files (docs/fixtures.md)")
    p.add_argument("--fixtures", metavar="DIR",
                   help="replay fixture files from DIR against --library or --backend")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds one instance may run in a child before it counts as hung "
                        "(default 120)")
    p.set_defaults(func=_cmd_check)
    p = sub.add_parser("plan", help="show the plan of a product: candidates, predicted times")
    p.add_argument("expr", help="einsum-style expression, e.g. 'ijql,kq->ijkl'")
    p.add_argument("--shapes", nargs=2, required=True, metavar="SHAPE",
                   help="shapes of A and B, e.g. 48x48x24x48 48x24")
    p.add_argument("--dtype", default="f64", help="datatype of every operand (default f64)")
    p.add_argument("--backend", default="auto", help="backend (default auto)")
    p.add_argument("--run", action="store_true",
                   help="execute once on random data first (auto then shows measured times)")
    p.set_defaults(func=_cmd_plan)
    p = sub.add_parser("bench", help="time backends against numpy, opt_einsum, tblis, torch")
    p.add_argument("--suite", default="quick",
                   help="quick (default), full, random, small, networks (whole einsum "
                        "networks against opt_einsum, cotengra and torch.einsum), dask "
                        "(pytapp.dask against dask.array.einsum on a LocalCluster), cc (a "
                        "coupled-cluster-like loop: ~30 contractions x 20 iterations, default "
                        "backend against each backend forced, numpy.einsum and pytblis; "
                        "--repeats rounds), dmrg (quimb's DMRG on NumPy against quimb "
                        "routed to pytapp through autoray's registry and cotengra's hook; "
                        "--repeats rounds, --quick: 10 sites), or "
                        "targets (per-call overhead, GEMM-shaped products against the flat "
                        "matmul, permutations, cold start), or torch (pytapp.einsum "
                        "against torch.einsum on torch tensors, forward and backward)")
    p.add_argument("--backend", nargs="+", default=["auto", "blas"],
                   help="pytapp backends to time (default: auto blas)")
    p.add_argument("--library", help="also time a C library exporting the TAPP C API")
    p.add_argument("--peers", nargs="*", default=["numpy", "opt_einsum", "tblis", "torch"],
                   help="peer libraries (default: all)")
    p.add_argument("--case", nargs="+", help="only cases whose name contains one of these")
    p.add_argument("--dtype", nargs="+", help="only these dtypes (f32 f64 c64 c128 f16 bf16)")
    p.add_argument("--threads", type=int, help="threads for every library (default: all)")
    p.add_argument("--device", help="torch suite: the tensors' device (cpu, cuda, cuda:1...)")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per contender (least)")
    p.add_argument("--min-seconds", type=float, default=0.5,
                   help="keep timing in rounds (up to 50) until each contender ran this long")
    p.add_argument("--size", type=float, default=1.0, help="scale every extent by this")
    p.add_argument("--quick", action="store_true",
                   help="networks suite: tiny networks, short samples, no roof (smoke runs)")
    p.add_argument("--generate", nargs="+", metavar="DOMAIN",
                   help="add randomized cases of these domains")
    p.add_argument("--generate-count", type=int, default=2, help="randomized cases per domain")
    p.add_argument("--json", help="write results as JSON")
    p.add_argument("--plot", help="write a PNG bar chart")
    p.add_argument("--markdown", help="write a Markdown report")
    p.set_defaults(func=_cmd_bench)
    p = sub.add_parser("tune", help="time a workload's products on every backend and keep "
                                    "the winners in this machine's wisdom file")
    p.add_argument("--suite", help="the products of a bench suite (quick, full, small, cc...)")
    p.add_argument("--file", help='a JSON list of {"equation": "ij,jk->ik", "shapes": '
                                  '[[2, 3], [3, 4]], "dtype": "float64"}')
    p.add_argument("--size", type=float, default=1.0, help="scale the suite's extents")
    p.add_argument("--json", help="write the choices as JSON")
    p.set_defaults(func=_cmd_tune)
    p = sub.add_parser("report", help="redraw table, plot and Markdown from a bench JSON file")
    p.add_argument("json_file", help="a file written by pytapp bench --json")
    p.add_argument("--plot", help="write a PNG bar chart")
    p.add_argument("--markdown", help="write a Markdown report")
    p.set_defaults(func=_cmd_report)
    p = sub.add_parser("demo", help="run the worked examples and the quick benchmark")
    p.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
