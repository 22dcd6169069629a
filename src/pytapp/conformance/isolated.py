"""Conformance work in child processes: a library that crashes or hangs fails one item only.

The parent hands a child a list of keys; the child prints one JSON line per key as it finishes
it. When the child dies (a signal) or stays silent longer than the per-item timeout, the key
it was working on is recorded as ``crashed`` or ``hung`` and a new child goes on with the rest.

Keys are ``CASE:SEED`` (run a kit instance and keep D for a differential comparison) or the
path of a fixture file (replay it and judge it against the fixture's expectation).

Child command: ``python -m pytapp.conformance.isolated MODE BACKEND OUTDIR KEY...``.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from typing import IO, Any, cast

import numpy as np

from pytapp.conformance.cases import CASES
from pytapp.conformance.instance import Instance
from pytapp.conformance.runner import execute_instance, run_instance
from pytapp.errors import TappError

__all__ = ["DEFAULT_TIMEOUT", "attempt", "d_file", "run_keys"]

#: Seconds one item may run in a child before it counts as hung.
DEFAULT_TIMEOUT = 120.0


def d_file(outdir: str, key: str) -> str:
    """Where a child keeps D's allocation after running instance ``key`` successfully."""
    return os.path.join(outdir, key.replace(":", "-") + ".npy")


def attempt(inst: Instance, backend: str) -> dict[str, Any]:
    """Run ``inst`` on ``backend``; return its outcome as data (never raises).

    ``outcome`` is ``success`` or ``error``; an error carries pytapp's ``code``, the
    library's own ``library_code`` (for ``clib``), its ``text``, and ``d_changed``.
    """
    before = [it.d.parent.copy() for it in inst.items]
    try:
        execute_instance(inst, backend)
    except Exception as exc:
        changed = any(it.d.parent.tobytes() != old.tobytes()
                      for it, old in zip(inst.items, before, strict=True))
        if isinstance(exc, TappError):
            return {"outcome": "error", "code": int(exc.code), "text": exc.message,
                    "library_code": getattr(exc, "library_code", None), "d_changed": changed}
        return {"outcome": "error", "code": None, "library_code": None, "d_changed": changed,
                "text": f"raised {type(exc).__name__}: {exc} (not a TappError)"}
    return {"outcome": "success"}


def _run_one(mode: str, backend: str, outdir: str, key: str) -> dict[str, Any]:
    if mode == "instance":
        number, seed = (int(x) for x in key.split(":"))
        inst = CASES[number].make(seed)
        record = attempt(inst, backend)
        if record["outcome"] == "success" and not inst.batched:
            # As bytes: NumPy's file format cannot name extension dtypes such as bfloat16.
            np.save(d_file(outdir, key), np.ascontiguousarray(inst.items[0].d.parent).view(
                np.uint8))
        return record
    from pytapp.conformance.fixtures import CorruptFixture, load

    try:
        inst, expected = load(key)
    except CorruptFixture as exc:
        return {"verdict": "corrupt", "text": str(exc), "description": ""}
    outcome = run_instance(inst, backend, expected=None if expected is None else [expected])
    return {"verdict": outcome.verdict, "text": outcome.message,
            "description": outcome.description}


def _reader(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def run_keys(mode: str, backend: str, keys: Sequence[str], outdir: str,
             timeout: float = DEFAULT_TIMEOUT,
             env: dict[str, str] | None = None,
             on_record: Callable[[str, dict[str, Any]], None] | None = None,
             ) -> dict[str, dict[str, Any]]:
    """Run ``keys`` in child processes; return each key's record.

    A key whose child crashed gets ``{"outcome": "crashed", "text": ...}``, one that ran
    longer than ``timeout`` seconds ``{"outcome": "hung", ...}`` (the child is killed); the
    remaining keys go to a new child. ``on_record(key, record)`` is called as records arrive.
    """
    results: dict[str, dict[str, Any]] = {}
    todo = list(keys)
    while todo:
        cmd = [sys.executable, "-m", "pytapp.conformance.isolated", mode, backend, outdir,
               *todo]
        hung, returncode, stderr = _child(cmd, env, timeout, todo, results, on_record)
        if not todo:
            break
        key = todo.pop(0)
        if hung:
            record = {"outcome": "hung", "verdict": "hung",
                      "text": f"no result within {timeout:g} s (killed)"}
        elif returncode < 0:
            record = {"outcome": "crashed", "verdict": "crashed",
                      "text": f"crashed (signal {-returncode})"}
        else:
            last = (stderr.strip().splitlines() or [f"exit status {returncode}"])[-1]
            record = {"outcome": "crashed", "verdict": "crashed", "text": last}
        results[key] = record
        if on_record is not None:
            on_record(key, record)
    return results


def _child(cmd: list[str], env: dict[str, str] | None, timeout: float, todo: list[str],
           results: dict[str, dict[str, Any]],
           on_record: Callable[[str, dict[str, Any]], None] | None) -> tuple[bool, int, str]:
    """Run one child, moving each key it reports from ``todo`` into ``results``.

    Returns (hung, exit status, stderr).
    """
    # stderr goes to a file: a chatty child must never block on a full pipe.
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as errors:
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errors, text=True,
                                 env=env)
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_reader, args=(cast(IO[str], child.stdout), lines),
                         daemon=True).start()
        hung = False
        while True:
            try:
                line = lines.get(timeout=timeout)
            except queue.Empty:
                hung = True
                child.kill()
                break
            if line is None:
                break
            try:
                record = json.loads(line)
            except ValueError:
                continue
            key = str(record.pop("key", ""))
            if key in todo:
                results[key] = record
                todo.remove(key)
                if on_record is not None:
                    on_record(key, record)
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
        errors.seek(0)
        return hung, child.returncode, errors.read()


def _main(argv: list[str]) -> int:
    mode, backend, outdir, *keys = argv
    for key in keys:
        record = _run_one(mode, backend, outdir, key)
        print(json.dumps({"key": key, **record}), flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover - the child's side
    raise SystemExit(_main(sys.argv[1:]))
