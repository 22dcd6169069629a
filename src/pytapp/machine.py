"""Measured machine constants for the cost model, measured once per machine and cached.

The planner predicts seconds from a few constants: GEMM rates per datatype for NumPy's BLAS
and for torch (large and small matrices), the copy bandwidth, and how NumPy's BLAS prefers a
thin GEMM's result laid out (:func:`_orientation`). They depend on the CPU (the
machine may be an AVX-512 Xeon one day and an EPYC the next) and on the library builds, so
they are measured on first use (a few seconds) and kept in a JSON file keyed by CPU model,
CPU flags and library versions (:func:`fingerprint`): ``$PYTAPP_MACHINE_FILE``, else
``machine.json`` in :func:`cache_dir` (``$XDG_CACHE_HOME/pytapp`` or ``~/.cache/pytapp``).
``PYTAPP_MACHINE=defaults`` skips the measurement and uses conservative defaults (the
decisions then do not depend on timings).

Examples
--------
>>> import os
>>> os.environ["PYTAPP_MACHINE"] = "defaults"
>>> constants().gemm_rate("numpy", "f64") > 0
True
>>> del os.environ["PYTAPP_MACHINE"]
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import json
import math
import os
import platform
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Machine", "cache_dir", "constants", "fingerprint"]

#: Datatypes whose GEMM rates are measured (compute types; bf16/f16 as torch-native inputs).
MEASURED = ("f32", "f64", "c64", "c128", "bf16", "f16")
#: Measuring passes over both libraries (each rate keeps its best). One pass costs a few
#: seconds once per machine (torch's import included); three took 11 s on a 2-core EPYC.
ROUNDS = 1
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
    #: NumPy's BLAS, per datatype (:data:`ORIENTED`): seconds of a thin GEMM writing its
    #: result tall (rows of the long extent) over the same GEMM writing it wide
    #: (:func:`_orientation`), for a long sum (key ``'f64'``) and for the short sums of
    #: :data:`ORIENT_SUMS` (key ``'f64@16'``); 1 or absent: no preference.
    orientation: dict[str, float] = field(default_factory=dict)

    def gemm_rate(self, library: str, dtype: str, small: bool = False) -> float:
        """Flop/s of a GEMM by ``library`` in ``dtype``; 0 if unknown.

        'numpy' (its BLAS), 'torch', or 'tiles' (blas's BF16 GEMM on the AMX tiles, or on
        AVX512-BF16 vectors where the CPU has no tiles).
        """
        table = self.small if small else self.big
        return float(table.get(library, {}).get(dtype, 0.0))

    def tall_over_wide(self, dtype: str, k: int | None = None) -> float:
        """How much longer a thin GEMM in ``dtype`` takes written tall than wide (1: unknown).

        ``k``: the GEMM's sum. The preference changes with it (OpenBLAS on an EPYC, F32, 128
        rows: tall 0.50x as long as wide at k = 16, 0.76x at 64, 1.04x at 1536; F64 0.77x,
        1.25x, 1.43x): between the sums measured it is interpolated in log k, beyond them
        the nearest is taken; without ``k``, or without short sums measured, the long one.

        Examples
        --------
        >>> m = Machine("example", orientation={"f64": 1.4, "f64@16": 0.7, "f64@64": 1.0})
        >>> m.tall_over_wide("f64"), m.tall_over_wide("f64", 16), m.tall_over_wide("f64", 32)
        (1.4, 0.7, 0.85)
        >>> m.tall_over_wide("f64", 8), Machine("example").tall_over_wide("f32", 64)
        (0.7, 1.0)
        """
        long = float(self.orientation.get(dtype, 1.0))
        if k is None:
            return long
        points = [(float(s), float(self.orientation[f"{dtype}@{s}"])) for s in ORIENT_SUMS
                  if f"{dtype}@{s}" in self.orientation]
        if not points:
            return long
        points.append((float(ORIENT_LONG), long))
        x = math.log2(max(k, 1))
        for (k0, r0), (k1, r1) in itertools.pairwise(points):
            if x <= math.log2(k1):
                t = min(max((x - math.log2(k0)) / (math.log2(k1) - math.log2(k0)), 0.0), 1.0)
                return r0 + t * (r1 - r0)
        return long


#: A GEMM's result is thin when one of its extents is at least this many times the other.
FLIP_ASPECT = 4
#: How much faster one layout of a thin GEMM's result must be on this machine's BLAS
#: (:meth:`Machine.tall_over_wide`) to be chosen for it.
ORIENT_MARGIN = 1.1


def wide_is_faster(rows: int, cols: int, dtype: str, k: int | None = None) -> bool | None:
    """Whether this machine's BLAS computes a thin ``rows x cols`` GEMM result faster wide.

    Wide: laid out with the longer extent contiguous (row-major ``rows x cols`` with
    ``cols > rows``, or its transpose). ``dtype``: ``'f32'``, ``'f64'``, ``'c64'`` or
    ``'c128'``; ``k``: the GEMM's sum (the preference depends on it). ``None``: the result is
    not thin (:data:`FLIP_ASPECT`), or the machine has no preference clear by
    :data:`ORIENT_MARGIN` in ``dtype`` for such a sum (other datatypes: none measured).

    Examples
    --------
    >>> wide_is_faster(64, 64, "f64") is None  # square: no preference
    True
    """
    if max(rows, cols) < FLIP_ASPECT * min(rows, cols) or dtype not in ORIENTED:
        return None
    ratio = constants().tall_over_wide(dtype, k)
    if 1 / ORIENT_MARGIN < ratio < ORIENT_MARGIN:
        return None
    return ratio >= ORIENT_MARGIN


#: Libraries whose versions change what is fastest (read from their metadata, not imported).
LIBRARIES = ("numpy", "torch", "pytblis", "pytapp")


def _cpu() -> tuple[str, str]:
    """Return the CPU model and a digest of its feature flags (``/proc/cpuinfo`` on Linux)."""
    default = platform.processor() or platform.machine()
    model, flags = default, ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                name, _, value = line.partition(":")
                name = name.strip()
                if name == "model name" and model == default:
                    model = value.strip()
                elif name in ("flags", "Features") and not flags:
                    flags = " ".join(sorted(value.split()))
    except OSError:
        pass
    return model, hashlib.sha1(flags.encode()).hexdigest()[:12]


_fingerprint: str | None = None


def _executor_build() -> str:
    """Return a digest of the compiled executor's file ("-" when it is not built).

    A rebuilt executor (another commit under the same version, another compiler or flags)
    may change what is fastest, as a new library version does.
    """
    from importlib.util import find_spec

    try:
        spec = find_spec("pytapp._cexec")
    except (ImportError, ValueError):
        spec = None
    origin = spec.origin if spec is not None else None
    if not origin or not os.path.isfile(origin):
        return "-"
    digest = hashlib.sha1()
    with open(origin, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:12]


def fingerprint() -> str:
    """Return what measurements on this machine depend on, as one string.

    The CPU model, a digest of its feature flags, the core count, the versions of
    :data:`LIBRARIES` and a digest of the compiled executor's build; measured constants and
    tuning results are valid while it is unchanged.

    Examples
    --------
    >>> fingerprint() == fingerprint()
    True
    """
    global _fingerprint
    if _fingerprint is None:
        from importlib.metadata import PackageNotFoundError, version

        versions = []
        for lib in LIBRARIES:
            try:
                versions.append(f"{lib}={version(lib)}")
            except PackageNotFoundError:
                versions.append(f"{lib}=-")
        model, flags = _cpu()
        _fingerprint = (f"{model}|{flags}|{os.cpu_count()}|{'|'.join(versions)}"
                        f"|executor={_executor_build()}")
    return _fingerprint


def cache_dir() -> Path:
    """Return pytapp's directory in the user cache (``$XDG_CACHE_HOME`` or ``~/.cache``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pytapp"


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
    # the cores (OpenBLAS and OpenMP keep spinning for a while after each call). The passes
    # repeat in rounds and each rate keeps its best: on a machine that other work loads, one
    # pass per library would compare a quiet moment of one with a busy moment of the other.
    for _ in range(ROUNDS):
        for library in ("numpy", "torch"):
            if library == "torch" and torch is None:
                continue
            time.sleep(0.3)
            for dt in MEASURED:
                for n, table in ((512, big), (64, small)):
                    flops = (8 if dt.startswith("c") else 2) * n**3
                    x = inputs.get(f"{dt}/{n}")
                    if library == "numpy":
                        if x is None:
                            continue
                        fn = partial(np.matmul, x, x)
                    else:
                        tdt = {"bf16": torch.bfloat16, "f16": torch.float16}.get(dt)
                        t = torch.from_numpy(x) if x is not None else torch.randn(n, n).to(tdt)
                        fn = partial(torch.matmul, t, t)
                    rate = flops / _best(fn)
                    table[library][dt] = max(rate, table[library].get(dt, 0.0))
        tiles = _tile_rates()
        for table, rate in zip((big, small), tiles, strict=False):
            table.setdefault("tiles", {})["bf16"] = max(rate, table.get("tiles", {}).get(
                "bf16", 0.0))
    src = np.ones(4 << 20)
    dst = np.empty_like(src)
    bandwidth = 2 * src.nbytes / _best(lambda: np.copyto(dst, src))
    time.sleep(0.3)  # torch's pool, measured last, idle again
    return Machine(key, bandwidth, big, small, measured=True, orientation=_orientations())


#: Called before the tiles' rate is measured (:func:`before_tile_probe`).
_BEFORE_TILES: list[Callable[[], object]] = []


def before_tile_probe(prepare: Callable[[], object]) -> None:
    """Have ``prepare`` run before blas's BF16 GEMM rate is measured.

    The compiled executor's module registers the binding of the BLAS's thread pool: the
    kernel shares its work over that pool only once bound, and measured before it ran on
    one thread (135 GFLOP/s against 232 on two cores).
    """
    _BEFORE_TILES.append(prepare)


def _tile_rates() -> tuple[float, ...]:
    """Return blas's BF16 GEMM rates (flop/s) at n = 512 and 64; () where it has none.

    On the AMX tiles or, without them, on AVX512-BF16 vectors, shared over the BLAS's pool.
    """
    try:
        _cexec: Any = importlib.import_module("pytapp._cexec")
    except ImportError:
        return ()
    if not _cexec.amx_ready():
        return ()
    for prepare in _BEFORE_TILES:
        prepare()
    rates = []
    rng = np.random.default_rng(0)
    for n in (512, 64):
        x = rng.standard_normal((1, n, n)).astype(np.float32)
        bits = (x.view(np.uint32) >> 16).astype(np.uint16)  # BF16 numbers, truncated
        out = np.empty((1, n, n), np.float32)
        rates.append(2 * n**3 / _best(partial(_cexec.amx_gemm, bits, bits, out, None, 1.0, 0.0)))
    return tuple(rates)


#: Extents of the orientation probe: a GEMM of (THIN x LONG) by (LONG x LONG).
ORIENT_THIN, ORIENT_LONG = 128, 1536
#: Short sums the orientation is measured at too: (THIN x k) by (k x ORIENT_WIDE).
ORIENT_SUMS = (16, 64, 256)
ORIENT_WIDE = 4096
#: Datatypes whose orientation is measured.
ORIENTED = ("f32", "f64", "c64", "c128")
#: Every orientation key: the long sum per datatype, then the short ones.
ORIENT_KEYS = ORIENTED + tuple(f"{dt}@{k}" for dt in ORIENTED for k in ORIENT_SUMS)


def _orientations(keys: Iterable[str] = ORIENT_KEYS) -> dict[str, float]:
    return {key: _orientation(*key.split("@")) for key in keys}


def _orientation(dtype: str = "f64", k: str | None = None) -> float:
    """Return how much longer NumPy's BLAS takes to write a thin GEMM's result tall than wide.

    One GEMM in ``dtype``, C = A B with A of ``ORIENT_THIN x ORIENT_LONG``, run as ``A @ B``
    into a wide C-ordered result and as ``B.T @ A.T`` into a tall one (the same GEMM
    transposed, what an einsum's free result layout chooses between). The preference differs
    by datatype: OpenBLAS's Sapphire Rapids kernels took 1.21-1.96x as long tall in F64 on
    thin GEMMs of several shapes, but 0.84-0.94x in F32 (C128: 0.87-1.20); on a Zen 3 EPYC
    the tall layout was the faster of F64 CCSD terms. ``k``: a short sum of
    :data:`ORIENT_SUMS` instead, by ``ORIENT_WIDE`` columns. About 0.5 s once per machine.
    """
    kind = {"f32": np.float32, "f64": np.float64, "c64": np.complex64,
            "c128": np.complex128}[dtype]
    rng = np.random.default_rng(1)
    inner, width = (ORIENT_LONG, ORIENT_LONG) if k is None else (int(k), ORIENT_WIDE)
    a = rng.standard_normal((ORIENT_THIN, inner)).astype(kind)
    b = rng.standard_normal((inner, width)).astype(kind)
    wide = np.empty((ORIENT_THIN, width), kind)
    tall = np.empty((width, ORIENT_THIN), kind)
    times = [_best(partial(np.matmul, a, b, out=wide)),
             _best(partial(np.matmul, b.T, a.T, out=tall))]
    times[0] = min(times[0], _best(partial(np.matmul, a, b, out=wide)))  # either may go first
    return times[1] / times[0]


def _file() -> Path:
    env = os.environ.get("PYTAPP_MACHINE_FILE")
    if env:
        return Path(env)
    return cache_dir() / "machine.json"


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
        key = fingerprint()
        path = _file()
        try:
            data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            if data.get("key") == key:
                found = data.get("orientation")
                orientation = ({str(k): float(v) for k, v in found.items()}
                               if isinstance(found, dict) else {})
                fresh = [key for key in ORIENT_KEYS if key not in orientation]
                orientation.update(_orientations(fresh))
                _cached = Machine(key, float(data["bandwidth"]), data["big"], data["small"],
                                  measured=True, orientation=orientation)
                if fresh:  # a file from before these constants: add them
                    _save(path, _cached)
                return _cached
        except (OSError, ValueError, KeyError, TypeError):
            pass
        _cached = _measure(key)
        _save(path, _cached)
        return _cached


def _save(path: Path, m: Machine) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")  # two processes may write at once
        tmp.write_text(json.dumps({"key": m.key, "bandwidth": m.bandwidth, "big": m.big,
                                   "small": m.small, "orientation": m.orientation}),
                       encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: measure again next time
