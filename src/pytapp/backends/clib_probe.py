"""Probing a TAPP C library in a child process: which ABI it speaks, and whether it survives.

C symbols carry no signatures, so the ABI of a library cannot be read from its exports. The
probe loads the library under one candidate ABI in a **child process** and runs one small,
known product (a 2x3 by 3x2 F64 matrix product) through the required entry points; a wrong
guess may crash or hang that child, never the caller. :func:`detect` tries the ABIs in the
order of :data:`~pytapp.backends.clib.ABIS` and keeps the first whose product is right.

Run as ``python -m pytapp.backends.clib_probe PATH ABI``: prints one JSON object.

Examples
--------
>>> probe_in_child("/nonexistent/libtapp.so", "released")["survived"]
True
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import threading
from typing import Any

import numpy as np

from pytapp.backends.clib import ABIS, AUTO, REQUIRED, Library
from pytapp.errors import ErrorCode, error_for

__all__ = ["PROBE_SECONDS", "describe", "detect", "error_texts", "probe", "probe_in_child"]

#: Seconds a probe child may run before it counts as hung.
PROBE_SECONDS = 30.0

_DETECTED: dict[str, str] = {}
_detect_lock = threading.Lock()


def _i64(values: list[int]) -> Any:
    return (ctypes.c_int64 * max(len(values), 1))(*values)


def probe(path: str, abi: str) -> dict[str, Any]:
    """Run the probe product in this process (the child's side of :func:`probe_in_child`).

    Returns a record: ``ok`` (the product ran and its values are right), ``code`` and
    ``text`` of the first failing call, ``null_executor`` (whether the library also accepts
    a NULL executor and status).
    """
    lib = Library(path, abi)
    # Printed first, so the parent has them even when the product below crashes the child.
    print(json.dumps({"optional": lib.optional_symbols(), "name": lib.implementation_name()}),
          flush=True)
    obj = ctypes.c_ssize_t
    handle, executor = obj(0), obj(0)
    multi = abi == "multi-tapp"
    record: dict[str, Any] = {"abi": abi, "ok": False, "code": 0, "text": "", "call": ""}

    def call(name: str, *args: Any) -> bool:
        code = int(lib.fn[name](*lib.args(name, handle.value, *args)))
        if code != 0:
            record.update(code=code, text=lib.explain(code, handle.value), call=name)
            return False
        return True

    if not call("TAPP_create_handle", *([0] if multi else []), ctypes.byref(handle)):
        return record
    if lib.has("TAPP_create_executor") and not call(
            "TAPP_create_executor", ctypes.byref(executor), *([handle.value] if multi else [])):
        return record
    rng = np.random.default_rng(0)
    a, b = rng.integers(-3, 4, (2, 3)).astype(np.float64), rng.integers(-3, 4, (3, 2)) * 1.0
    d = np.zeros((2, 2))
    shapes = [(a, [0, 1]), (b, [1, 2]), (d, [0, 2]), (d, [0, 2])]
    head = [handle.value] if abi in ("multi-tapp", "cutensor_bindings") else []
    infos: list[int] = []
    for x, _ in shapes:
        info = obj(0)
        strides = [s // 8 for s in x.strides]
        if not call("TAPP_create_tensor_info", ctypes.byref(info), *head, 1, x.ndim,
                    _i64(list(x.shape)), _i64(strides)):
            return record
        infos.append(info.value)
    plan = obj(0)
    args: list[Any] = [ctypes.byref(plan), handle.value]
    for info_value, (_, labels) in zip(infos, shapes, strict=True):
        args += [0, info_value, _i64(labels)]
    if not call("TAPP_create_tensor_product", *args, -1):
        return record
    one, zero = np.array(1.0), np.array(0.0)
    status = obj(0)
    if not call("TAPP_execute_product", plan.value, executor.value, ctypes.byref(status),
                one.ctypes.data, a.ctypes.data, b.ctypes.data, zero.ctypes.data, None,
                d.ctypes.data):
        return record
    if executor.value and lib.has("TAPP_executor_wait"):
        lib.fn["TAPP_executor_wait"](executor.value)
    record["ok"] = bool(np.array_equal(d, a @ b))
    if not record["ok"]:
        record.update(text="the probe product gave wrong values", call="TAPP_execute_product")
        return record
    d[...] = 0
    record["null_executor"] = int(lib.fn["TAPP_execute_product"](*lib.args(
        "TAPP_execute_product", handle.value, plan.value, 0, None, one.ctypes.data,
        a.ctypes.data, b.ctypes.data, zero.ctypes.data, None, d.ctypes.data))) == 0 and bool(
        np.array_equal(d, a @ b))
    return record


def probe_in_child(path: str, abi: str, timeout: float = PROBE_SECONDS) -> dict[str, Any]:
    """Run :func:`probe` in a child process; report a crash or a hang instead of suffering it.

    Returns the probe's record with ``survived`` (the child ended by itself, without a
    signal) and, when it did not, ``text`` saying what happened.
    """
    lines, ended = _child_lines([path, abi], timeout)
    record: dict[str, Any] = {"abi": abi, "ok": False}
    for line in lines[:-1] if isinstance(ended, str) else lines:
        record.update(line)
    if isinstance(ended, str):  # crashed or hung: what it printed before still counts
        record.update(ok=False, survived=False, text=ended)
        return record
    record["survived"] = True
    if "call" not in record and not record.get("text"):
        record["text"] = "the probe gave no result"
    return record


def _child_lines(args: list[str], timeout: float) -> tuple[list[dict[str, Any]], str | int]:
    """Run this module in a child; return its JSON lines and how it ended.

    The second item is the exit status, or a sentence when the child crashed or hung (then
    the last element of the list is a placeholder, so callers can drop it uniformly).
    """
    cmd = [sys.executable, "-m", "pytapp.backends.clib_probe", *args]
    try:
        child = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return [*_parse(out), {}], f"the probe did not finish within {timeout:g} s (hung)"
    parsed = _parse(child.stdout)
    if child.returncode < 0:
        return [*parsed, {}], f"the probe crashed (signal {-child.returncode})"
    return parsed, child.returncode


def _parse(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.strip().splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def error_texts(path: str, abi: str, codes: range = range(41),
                timeout: float = PROBE_SECONDS) -> dict[int, str]:
    """Return the library's ``TAPP_explain_error`` text for each code, read in children.

    Some libraries crash for codes they have no text for (the official reference does): such
    a code gets ``"(crashed)"`` and the next child goes on after it. Without
    ``TAPP_explain_error`` every text is ``""``.
    """
    texts: dict[int, str] = {}
    todo = list(codes)
    while todo:
        lines, ended = _child_lines([path, abi, "--texts", ",".join(map(str, todo))], timeout)
        for line in lines:
            if "code" in line:
                texts[int(line["code"])] = str(line["text"])
        todo = [c for c in todo if c not in texts]
        if not isinstance(ended, str) or not todo:
            break
        texts[todo.pop(0)] = "(crashed)" if "crashed" in ended else "(hung)"
    return texts


def detect(path: str) -> str:
    """Return the ABI that ``path`` speaks, found by probing each in a child (remembered).

    Raises
    ------
    UnsupportedError
        Code 18 when no ABI runs the probe product right; the message gives each attempt.
    """
    with _detect_lock:
        if path in _DETECTED:
            return _DETECTED[path]
    tried = []
    for abi in ABIS:
        record = probe_in_child(path, abi)
        if record.get("ok"):
            with _detect_lock:
                _DETECTED[path] = abi
            return abi
        tried.append(f"{abi}: {record.get('text') or record.get('code')}")
    raise error_for(ErrorCode.UNSUPPORTED,
                    f"cannot tell which TAPP C ABI {path!r} speaks ({'; '.join(tried)}); "
                    f"pass abi= one of {', '.join(ABIS)} instead of {AUTO!r}")


def describe(path: str, abi: str | None = None) -> dict[str, Any]:
    """Everything ``pytapp info --library`` shows about a library, probed in children.

    Returns ``path``, ``abi`` (the one asked for, else the first that runs the probe product
    right; ``None`` when none does), ``probes`` (each attempt's record), ``required`` (which
    mandatory symbols are missing: ``missing``), ``optional`` symbols, the implementation
    ``name``, ``survived`` (whether the chosen probe ended by itself) and ``texts`` (the
    library's texts for codes 0-40).
    """
    probes = []
    chosen = None
    for candidate in [abi] if abi else list(ABIS):
        record = probe_in_child(path, candidate)
        probes.append(record)
        if record.get("ok") or abi:
            chosen = record
            break
    best = chosen or (probes[0] if probes else {})
    try:
        missing = [n for n in REQUIRED if not hasattr(ctypes.CDLL(os.path.abspath(path)), n)]
    except OSError as exc:
        missing = [f"(cannot load: {exc})"]
    result: dict[str, Any] = {
        "path": path,
        "abi": best.get("abi") if chosen is not None and chosen.get("ok") else abi,
        "survived": bool(best.get("survived")),
        "probe_ok": bool(best.get("ok")),
        "probe_text": best.get("text", ""),
        "null_executor": best.get("null_executor"),
        "missing": missing,
        "optional": best.get("optional", []),
        "name": best.get("name", ""),
        "probes": probes,
    }
    result["texts"] = error_texts(path, result["abi"] or ABIS[0]) if not missing else {}
    return result


def _main(argv: list[str]) -> int:
    path, abi = argv[:2]
    if argv[2:3] == ["--texts"]:
        lib = Library(path, abi)
        for code in argv[3].split(","):
            print(json.dumps({"code": int(code), "text": lib.explain(int(code))}), flush=True)
        return 0
    try:
        record = probe(path, abi)
    except Exception as exc:  # reported to the parent, which judges the library
        record = {"abi": abi, "ok": False, "text": str(getattr(exc, "message", exc))}
    print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover - run in the probe's child process
    raise SystemExit(_main(sys.argv[1:]))
