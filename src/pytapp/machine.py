"""Measured machine constants for the cost model, measured once per machine and cached.

The planner predicts seconds from a few constants: GEMM rates per datatype for NumPy's BLAS
and for torch (large and small matrices), and the copy bandwidth. They depend on the CPU (the
machine may be an AVX-512 Xeon one day and an EPYC the next) and on the library builds, so
they are measured on first use (about two seconds) and kept in a JSON file keyed by CPU model,
core count and library versions: ``$PYTAPP_MACHINE_FILE``, else
``~/.cache/pytapp/machine.json``. ``PYTAPP_MACHINE=defaults`` skips the measurement and uses
conservative defaults (the decisions then do not depend on timings).

Examples
--------
>>> import os
>>> os.environ["PYTAPP_MACHINE"] = "defaults"
>>> constants().gemm_rate("numpy", "f64") > 0
True
>>> del os.environ["PYTAPP_MACHINE"]
"""

from __future__ import annotations

import json
import os
import platform
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Machine", "constants"]

#: Datatypes whose GEMM rates are measured (compute types; bf16/f16 as torch-native inputs).
MEASURED = ("f32", "f64", "c64", "c128", "bf16", "f16")
_DEFAULT_RATES = {"f32": 1.2e11, "f64": 6e10, "c64": 1.2e11, "c128": 6e10, "bf16": 3e10,
                  "f16": 3e10}


@dataclass(frozen=True)
class Machine:
    """Return GEMM rates per library and datatype, and the copy bandwidth.

    GEMM rates (flop/s) per library and datatype, for large (``big``) and small matrices,
    and the copy bandwidth (bytes/s).
    """

    key: str
    bandwidth: float = 8e9
    big: dict[str, dict[str, float]] = field(default_factory=dict)
    small: dict[str, dict[str, float]] = field(default_factory=dict)
    measured: bool = False

    def gemm_rate(self, library: str, dtype: str, small: bool = False) -> float:
        """Flop/s of a GEMM by ``library`` ('numpy' or 'torch') in ``dtype``; 0 if unknown."""
        table = self.small if small else self.big
        return float(table.get(library, {}).get(dtype, 0.0))


def _key() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")),
                       cpu)
    except OSError:
        pass
    versions = [np.__version__]
    try:
        from importlib.metadata import version

        versions.append(version("torch"))
    except Exception:
        versions.append("-")
    return f"{cpu}|{os.cpu_count()}|{'|'.join(versions)}"


def _best(fn: Callable[[], object], repeats: int = 3) -> float:
    fn()
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _measure(key: str) -> Machine:
    rng = np.random.default_rng(0)
    big: dict[str, dict[str, float]] = {"numpy": {}, "torch": {}}
    small: dict[str, dict[str, float]] = {"numpy": {}, "torch": {}}
    torch: Any
    try:
        import torch
    except ImportError:
        torch = None
    inputs: dict[str, np.ndarray] = {}
    kinds = {"f32": np.float32, "f64": np.float64, "c64": np.complex64, "c128": np.complex128}
    for dt, kind in kinds.items():
        for n in (512, 64):
            inputs[f"{dt}/{n}"] = rng.standard_normal((n, n)).astype(kind)
    # One library at a time, after a pause: the spinning workers of the other would steal
    # the cores (OpenBLAS and OpenMP keep spinning for a while after each call).
    for library in ("numpy", "torch"):
        if library == "torch" and torch is None:
            continue
        time.sleep(0.3)
        for dt in MEASURED:
            for n, table in ((512, big), (64, small)):
                flops = (8 if dt.startswith("c") else 2) * n**3
                x = inputs.get(f"{dt}/{n}")
                if library == "numpy":
                    if x is not None:
                        table["numpy"][dt] = flops / _best(partial(np.matmul, x, x))
                    continue
                tdt = {"bf16": torch.bfloat16, "f16": torch.float16}.get(dt)
                t = torch.from_numpy(x) if x is not None else torch.randn(n, n).to(tdt)
                table["torch"][dt] = flops / _best(partial(torch.matmul, t, t))
    src = np.ones(4 << 20)
    dst = np.empty_like(src)
    bandwidth = 2 * src.nbytes / _best(lambda: np.copyto(dst, src))
    return Machine(key, bandwidth, big, small, measured=True)


def _file() -> Path:
    env = os.environ.get("PYTAPP_MACHINE_FILE")
    if env:
        return Path(env)
    return Path(os.path.expanduser("~")) / ".cache" / "pytapp" / "machine.json"


def _defaults(key: str) -> Machine:
    return Machine(key, 8e9, {"numpy": dict(_DEFAULT_RATES)}, {"numpy": {
        k: v / 4 for k, v in _DEFAULT_RATES.items()}})


_cached: Machine | None = None
_lock = threading.Lock()


def constants() -> Machine:
    """Return this machine's constants: from the cache file, else measured now and saved."""
    global _cached
    if os.environ.get("PYTAPP_MACHINE") == "defaults":
        return _defaults("defaults")
    with _lock:
        if _cached is not None:
            return _cached
        key = _key()
        path = _file()
        try:
            data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            if data.get("key") == key:
                _cached = Machine(key, float(data["bandwidth"]), data["big"], data["small"],
                                  measured=True)
                return _cached
        except (OSError, ValueError, KeyError, TypeError):
            pass
        _cached = _measure(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"key": key, "bandwidth": _cached.bandwidth,
                                       "big": _cached.big, "small": _cached.small}),
                           encoding="utf-8")
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only home: measure again next time
        return _cached
