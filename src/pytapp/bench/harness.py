"""Timing harness: interleaved rounds, roofline, correctness of every timed result, memory.

Contenders are timed in rounds (:func:`interleaved`): each round runs every contender once, in
a shuffled order, as one sample of repeated calls lasting about :data:`SAMPLE_SECONDS`; the
fastest round is kept. A library whose idle threads still spin, a frequency change or another
process then slows every contender alike instead of the one that happened to be timed at that
moment (timing one contender after the other, after pauses, made ratios swing by 30-50%).

Examples
--------
>>> from pytapp.bench.cases import small_family
>>> result = run_bench(small_family()[:1], backends=["blas"], peers=["numpy"], repeats=2,
...                    measure_peaks=False)
>>> result.cases[0].measurements["blas"].verdict
'ok'
"""

from __future__ import annotations

import functools
import gc
import math
import os
import platform
import random
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from pytapp.analysis.cost import flop_count
from pytapp.bench.cases import BenchCase
from pytapp.bench.peers import (
    ALPHA,
    BETA,
    PEER_LABELS,
    Contender,
    NotApplicable,
    backend_contender,
    peer,
)
from pytapp.datatypes import Datatype
from pytapp.executor import thread_scope
from pytapp.precision import tolerance_for_eps, within_tolerance

__all__ = [
    "BenchResult", "CaseResult", "Measurement", "copy_bandwidth", "environment",
    "geometric_mean", "interleaved", "measure_peaks",
    "permutation_speeds", "run_bench", "summary_lines", "thread_limits", "time_call",
]

Progress = Callable[[str, int, int], None]
#: How long one timed sample of a contender lasts (its call repeated): tens of milliseconds,
#: long enough for the clock and short enough for many rounds.
SAMPLE_SECONDS = 0.02


@dataclass
class Measurement:
    """One contender on one case."""

    name: str
    kind: str
    verdict: str  # "ok", "wrong: ...", "n/a: ..."
    median_s: float = math.nan  # per call, median over rounds (the spread: see min_s)
    min_s: float = math.nan  # per call, fastest round: what rates and ratios use
    repeats: int = 0  # rounds
    gflops: float = math.nan
    ratio_to_best_peer: float = math.nan
    roofline_pct: float = math.nan
    peak_extra_bytes: int | None = None
    algorithm: str = ""

    @property
    def timed(self) -> bool:
        """Whether this contender ran and was timed."""
        return not self.verdict.startswith("n/a")


@dataclass
class CaseResult:
    """Every contender on one case."""

    case: BenchCase
    measurements: dict[str, Measurement] = field(default_factory=dict)
    attainable_gflops: float = math.nan
    bound: str = ""  # "compute" or "memory"


@dataclass
class BenchResult:
    """A whole run."""

    suite: str
    environment: dict[str, Any]
    peaks: dict[str, Any]
    cases: list[CaseResult] = field(default_factory=list)

    def geomean_vs_best_backend(self, name: str) -> float:
        """Geometric mean over cases of (fastest other backend's time / ``name``'s time)."""
        ratios = []
        for c in self.cases:
            m = c.measurements.get(name)
            others = [o.min_s for n, o in c.measurements.items()
                      if n != name and o.kind == "backend" and o.timed]
            if m is not None and m.timed and others:
                ratios.append(min(min(others), m.min_s) / m.min_s)
        return geometric_mean(ratios)

    def geomean_ratio(self, name: str) -> float:
        """Geometric mean over cases of the speed ratio of ``name`` to the best peer."""
        ratios = [c.measurements[name].ratio_to_best_peer for c in self.cases
                  if name in c.measurements and c.measurements[name].timed
                  and c.measurements[name].ratio_to_best_peer > 0]
        return geometric_mean(ratios)


def geometric_mean(values: Sequence[float]) -> float:
    """Return the geometric mean of the finite positive ``values`` (NaN when there are none)."""
    kept = [v for v in values if math.isfinite(v) and v > 0]
    if not kept:
        return math.nan
    return float(math.exp(sum(math.log(v) for v in kept) / len(kept)))


def summary_lines(ratios: Sequence[float], errors: Sequence[float], mean_text: str,
                  error_text: str) -> list[str]:
    """Return the closing lines of a suite's table.

    ``mean_text`` with ``{geo}`` (the geometric mean of ``ratios``, left out when there is none)
    and ``error_text`` with ``{worst}`` (the largest of ``errors``).
    """
    lines = []
    geo = geometric_mean(ratios)
    if math.isfinite(geo):
        lines.append(mean_text.format(geo=geo))
    lines.append(error_text.format(worst=max(errors, default=0.0)))
    return lines


def time_call(fn: Callable[[], Any], warmup: int = 1, repeats: int = 5,
              max_seconds: float = 3.0, min_seconds: float = 0.0,
              max_repeats: int = 50) -> list[float]:
    """Wall times (s) of timed calls after ``warmup`` calls, with ``perf_counter_ns``.

    At least ``repeats`` calls (fewer, but at least 2, once ``max_seconds`` are spent), and
    more, up to ``max_repeats``, until ``min_seconds`` are spent: fast calls get enough
    repeats for a stable median.
    """
    for _ in range(warmup):
        fn()
    times: list[float] = []
    spent = 0.0
    while len(times) < max(repeats, 1) or (spent < min_seconds and len(times) < max_repeats):
        start = time.perf_counter_ns()
        fn()
        elapsed = (time.perf_counter_ns() - start) / 1e9
        times.append(elapsed)
        spent += elapsed
        if spent > max_seconds and len(times) >= 2:
            break
    return times


def _sample(fn: Callable[[], Any], number: int) -> float:
    """Seconds per call of ``number`` back-to-back calls of ``fn``."""
    start = time.perf_counter_ns()
    for _ in range(number):
        fn()
    return (time.perf_counter_ns() - start) / 1e9 / number


def shuffled_rounds(names: Sequence[str], rounds: int,
                    progress: Callable[[str], None] | None = None,
                    seed: int = 0) -> Iterator[tuple[int, str]]:
    """Yield ``(round, name)``: every name once per round, in an order shuffled each round.

    ``progress`` hears ``"round R: NAME"`` before each. For contenders too long to sample
    many times (whole workloads), each run is one timing.

    Examples
    --------
    >>> sorted(shuffled_rounds(["a", "b"], 2))
    [(0, 'a'), (0, 'b'), (1, 'a'), (1, 'b')]
    """
    order = list(names)
    shuffle = random.Random(seed)
    for r in range(rounds):
        shuffle.shuffle(order)
        for name in order:
            if progress is not None:
                progress(f"round {r + 1}: {name}")
            yield r, name


#: Pause between two samples that run on different thread pools. A BLAS or OpenMP pool keeps
#: its threads spinning for a while after each call (OpenBLAS for 2^28 cycles, about 0.1 s),
#: so a sample on another pool right after competes with them for the cores: torch.einsum
#: on a linear-attention network took 9.6 ms right after a NumPy GEMM and 5.4 ms after a
#: pause, and pytapp on NumPy's BLAS 6.1 ms right after a torch call, 4.8 ms after a pause.
SETTLE_SECONDS = 0.2


def settle(previous: str | None, pool: str, seconds: float = SETTLE_SECONDS) -> None:
    """Sleep ``seconds`` when ``pool`` is not the ``previous`` sample's pool (``None``: none).

    Examples
    --------
    >>> settle(None, "openblas"); settle("openblas", "openblas")  # no pause
    """
    if previous is not None and previous != pool and seconds > 0:
        time.sleep(seconds)


def interleaved(calls: Mapping[str, Callable[[], Any]], rounds: int = 5,
                sample_seconds: float = SAMPLE_SECONDS, min_seconds: float = 0.0,
                max_rounds: int = 50, max_seconds: float = 60.0, seed: int = 0,
                max_calls: int = 50, pool_of: Callable[[str], str] | None = None,
                settle_seconds: float = SETTLE_SECONDS) -> dict[str, list[float]]:
    """Time ``calls`` in interleaved rounds; return each one's seconds per call, per round.

    Every call is warmed up once and calibrated (its repeats doubled until they last half of
    ``sample_seconds``): a sample repeats it as often as fits in ``sample_seconds`` (once when
    a single call takes longer). Each round then times one sample of every call, in an order
    shuffled anew (seeded by ``seed``). At least ``rounds`` rounds (at least 1) run, more (up
    to ``max_rounds``) until every call has been timed for ``min_seconds`` or ``max_calls``
    times (a fast call's samples suffice); once a whole run has spent ``max_seconds`` it
    stops after at least 2 rounds. The caller keeps the minimum over rounds (the run least
    disturbed). ``pool_of`` names the thread pool a call runs on (asked before each sample):
    a sample on another pool than the one before waits ``settle_seconds`` first (see
    :data:`SETTLE_SECONDS`).

    Examples
    --------
    >>> times = interleaved({"sum": lambda: sum(range(100)), "len": lambda: len("ab")},
    ...                     rounds=3, sample_seconds=0.001)
    >>> sorted(times), len(times["sum"])
    (['len', 'sum'], 3)
    """
    names = list(calls)
    numbers: dict[str, int] = {}
    for name in names:
        calls[name]()  # warm-up: first-call costs (plans, imports, compiled kernels)
        number = 1  # doubled until a sample lasts half the target (one slow call misleads less)
        while (per_call := _sample(calls[name], number)) * number < sample_seconds / 2 \
                and number < 1_000_000:
            number *= 2
        numbers[name] = max(1, min(1_000_000, int(sample_seconds / max(per_call, 1e-9))))
    times: dict[str, list[float]] = {name: [] for name in names}
    order = random.Random(seed)
    started = time.perf_counter()
    previous: str | None = None
    while True:
        order.shuffle(names)
        for name in names:
            if pool_of is not None:
                pool = pool_of(name)
                settle(previous, pool, settle_seconds)
                previous = pool
            times[name].append(_sample(calls[name], numbers[name]))
        done = len(times[names[0]]) if names else max_rounds
        if done >= max_rounds or (done >= 2 and time.perf_counter() - started > max_seconds):
            break
        if done >= max(rounds, 1) and all(
                sum(t) * numbers[n] >= min_seconds or done * numbers[n] >= max_calls
                for n, t in times.items()):
            break
    return times


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(threads: int | None = None) -> dict[str, Any]:
    """CPU, cores, BLAS (as threadpoolctl reports it), thread setting, library versions."""
    from threadpoolctl import threadpool_info

    import pytapp

    versions: dict[str, str] = {"python": platform.python_version(), "numpy": np.__version__,
                                "pytapp": pytapp.__version__}
    for module in ("opt_einsum", "pytblis", "torch", "ml_dtypes"):
        try:
            versions[module] = str(__import__(module).__version__)
        except (ImportError, AttributeError):
            versions[module] = "not installed"
    pools = [{k: v for k, v in p.items() if k in ("internal_api", "version", "num_threads",
                                                   "architecture", "threading_layer")}
             for p in threadpool_info()]
    return {"cpu": _cpu_model(), "machine": platform.machine(), "cores": os.cpu_count(),
            "threads": threads, "threadpools": pools, "versions": versions,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def measure_peaks(datatypes: Sequence[Datatype]) -> dict[str, Any]:
    """Roofline constants.

    The best GEMM rate per compute datatype that NumPy or torch reach on several square sizes,
    and the best copy bandwidth (NumPy's single-threaded copy or pytapp's multi-threaded copy
    kernel) on 128 MiB.
    """
    gemm: dict[str, float] = {}
    rng = np.random.default_rng(0)
    torch: Any
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is an extra
        torch = None
    for dt in sorted({_compute(d) for d in datatypes}):
        best = 0.0
        for n in (512, 1024, 2048) if not dt.is_complex else (512, 1024):
            x = rng.standard_normal((n, n)).astype(dt.numpy_dtype)
            flops = flop_count((n, n, n), dt.is_complex)
            runs = [partial(np.matmul, x, x)]
            if torch is not None:
                tx = torch.from_numpy(x)
                runs.append(partial(torch.matmul, tx, tx))
            for run in runs:
                best = max(best, flops / min(time_call(run, warmup=1, repeats=3)))
        gemm[dt.short_name] = best / 1e9
    src = np.ones(16 * 2**20)  # 128 MiB
    dst = np.empty_like(src)
    copies = [lambda: np.copyto(dst, src)]
    from pytapp import kernels

    if kernels.available():
        copies.append(lambda: kernels.fused(dst, src))
    best = min(min(time_call(f, warmup=1, repeats=5)) for f in copies)
    return {"gemm_gflops": gemm, "copy_gbytes_per_s": 2 * src.nbytes / best / 1e9,
            "permute_pct_of_copy": permutation_speeds()}


def permutation_speeds(mib: int = 64) -> dict[str, float]:
    """Measure pytapp's permute against a contiguous copy.

    Speed of a permute (SPEC 9: the one-operand ``pytapp.einsum("abc->cba", x, out=y)``,
    what ``contract`` and ``einsum`` run for a transpose) of ``mib`` MiB tensors with every
    mode reversed, in % of a contiguous copy of the same bytes measured in the same run
    (F32, F64, C128), where the compiled extension is built.

    The contiguous copy is NumPy's (single-threaded) ``copyto``: the bandwidth a user gets
    from a plain copy.
    """
    from pytapp.kernels import program
    from pytapp.numpy_api import einsum

    out: dict[str, float] = {}
    if not program.available():
        return out
    for name, dtype in (("f32", np.float32), ("f64", np.float64), ("c128", np.complex128)):
        n = round((mib * 2**20 / np.dtype(dtype).itemsize) ** (1 / 3))
        src = np.ones((n, n, n), dtype=dtype)
        dst = np.empty_like(src)
        contiguous = min(time_call(partial(np.copyto, dst, src), warmup=1, repeats=5))
        permuted = min(time_call(partial(einsum, "abc->cba", src, out=dst), warmup=1,
                                 repeats=5))
        out[name] = 100.0 * contiguous / permuted
    return out


@functools.lru_cache(maxsize=64)
def _bandwidth_of(size_class: int) -> float:
    src = np.ones(max(size_class // 16, 64))
    dst = np.empty_like(src)
    copies = [lambda: np.copyto(dst, src)]
    from pytapp import kernels

    rates = []
    if kernels.available():
        copies.append(lambda: kernels.fused(dst, src))
        sums = np.empty(64)  # a read-only stream (GEMV-like products only read): 64 rows
        read = min(time_call(lambda: kernels.reduce(sums, src.reshape(64, -1)), warmup=2,
                             repeats=5, min_seconds=0.02))
        rates.append(src.nbytes / read)
    best = min(min(time_call(f, warmup=2, repeats=5, min_seconds=0.02)) for f in copies)
    rates.append(2 * src.nbytes / best)
    return max(rates) / 1e9


def copy_bandwidth(bytes_moved: int) -> float:
    """Return the GB/s of the best copy of a working set of ``bytes_moved``.

    GB/s of the best copy (or read-only stream) whose buffers together hold
    ``bytes_moved`` (the working set of a case: from caches when it fits there, so that the
    memory roof of a small case is the cache's).
    """
    return _bandwidth_of(1 << max(12, min(30, int(bytes_moved).bit_length())))


def _compute(dt: Datatype) -> Datatype:
    return Datatype.F32 if dt in (Datatype.F16, Datatype.BF16) else dt


def _check(case: BenchCase, results: dict[str, np.ndarray], fastest: str,
           a: np.ndarray, b: np.ndarray, c: np.ndarray) -> dict[str, str]:
    """Compare every result with the fastest peer's, within SPEC tolerances (doubled)."""
    ref = results[fastest]
    la, lb, ld = case.labels
    bound = abs(ALPHA) * np.einsum(case.einsum, np.abs(a).astype(np.float64),
                                   np.abs(b).astype(np.float64), optimize=True)
    bound = bound + abs(BETA) * np.abs(c).astype(np.float64)
    n_terms = math.prod(case.extents[x] for x in set(la + lb) - set(ld))
    dt = case.datatype
    # Peers compute F16/BF16 in their own type: their epsilon, not F32's.
    eps = dt.eps if dt in (Datatype.F16, Datatype.BF16) else _compute(dt).eps
    tol = 2 * tolerance_for_eps(eps, n_terms)
    verdicts = {}
    for name, res in results.items():
        if res.shape != ref.shape:
            verdicts[name] = f"wrong: shape {res.shape}, expected {ref.shape}"
            continue
        ok = within_tolerance(res, ref, bound, tol, 2 * dt.eps, 2 * dt.subnormal_spacing)
        bad = int(ok.size - np.count_nonzero(ok))
        verdicts[name] = "ok" if bad == 0 else (
            f"wrong: {bad} of {ok.size} elements differ from {fastest}")
    return verdicts


def _peak_extra(contender: Contender) -> int | None:
    if not contender.traced_memory:
        return None
    gc.collect()
    tracemalloc.start()
    try:
        contender.call()
        return int(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()


def thread_limits(threads: int | None) -> ExitStack:
    """Give every library's pool ``threads`` threads inside a ``with`` block (None: as is).

    BLAS and OpenMP pools (threadpoolctl), and torch's and TBLIS's own.
    """
    stack = ExitStack()
    if threads:
        stack.enter_context(thread_scope(threads))
        # Peers' own pools too (torch, TBLIS): every contender gets the same thread count.
        for module, setter in (("torch", "set_num_threads"), ("pytblis", "set_num_threads")):
            try:
                mod = __import__(module)
            except ImportError:
                continue
            getattr(mod, setter)(threads)
    return stack


def run_case(case: BenchCase, backends: Sequence[str], peers: Sequence[str],
             peaks: dict[str, Any], repeats: int, threads: int | None,
             extra: dict[str, Callable[..., Contender]] | None = None,
             min_seconds: float = 0.0, sample_seconds: float = SAMPLE_SECONDS) -> CaseResult:
    """Time every contender on ``case`` and judge every result."""
    out = CaseResult(case)
    a, b, c, d = case.arrays(seed=zlib.crc32(case.name.encode()))
    contenders: list[Contender] = []
    makers: list[tuple[str, Callable[[], Contender]]] = []
    for name in backends:
        makers.append((name, partial(backend_contender, name, case, a, b, c, d.copy(),
                                     threads)))
    for name in peers:
        makers.append((PEER_LABELS.get(name, name), partial(peer, name, case, a, b, c,
                                                            d.copy())))
    for name, maker in (extra or {}).items():
        makers.append((name, partial(maker, case, a, b, c, d.copy())))
    for name, make in makers:
        try:
            contenders.append(make())
        except NotApplicable as exc:
            out.measurements[name] = Measurement(name, "?", f"n/a: {exc}")
    results: dict[str, np.ndarray] = {}
    timeable: dict[str, Contender] = {}
    for who in contenders:
        try:  # a contender that fails is reported, never timed
            who.call()
            timeable[who.name] = who
        except Exception as exc:
            out.measurements[who.name] = Measurement(who.name, who.kind, f"n/a: failed: {exc}")
    rounds = interleaved({name: who.call for name, who in timeable.items()}, rounds=repeats,
                         sample_seconds=sample_seconds, min_seconds=min_seconds,
                         seed=zlib.crc32(case.name.encode()))
    for name, who in timeable.items():
        # the result of the algorithm timed (auto may have changed its choice while timed)
        results[name] = who.result(who.call())
        best = min(rounds[name])
        out.measurements[name] = Measurement(
            name, who.kind, "ok", float(np.median(rounds[name])), best, len(rounds[name]),
            case.flops / best / 1e9, peak_extra_bytes=_peak_extra(who),
            algorithm=who.what_ran())
    timed_peers = [m for m in out.measurements.values() if m.kind == "peer" and m.timed]
    reference = min(timed_peers or [m for m in out.measurements.values() if m.timed],
                    key=lambda m: m.min_s, default=None)
    if reference is not None:
        verdicts = _check(case, results, reference.name, a, b, c)
        for name, verdict in verdicts.items():
            out.measurements[name].verdict = verdict
    best_peer = min((m.min_s for m in timed_peers), default=math.nan)
    peak = peaks.get("gemm_gflops", {}).get(_compute(case.datatype).short_name, math.nan)
    bandwidth = max(peaks.get("copy_gbytes_per_s", math.nan),
                    copy_bandwidth(case.bytes_moved) if peaks else math.nan)
    intensity = case.flops / case.bytes_moved
    attainable = min(peak, intensity * bandwidth)
    out.bound = "compute" if attainable == peak else "memory"
    # A rate some contender reached on this very case is attainable on this machine, even
    # when it beats the peaks measured on square GEMMs and copies (a read-only stream, a
    # friendlier GEMM shape): the roof is never below it, so no case is above 100%.
    reached = max((m.gflops for m in out.measurements.values() if m.timed), default=0.0)
    attainable = max(attainable, reached)
    out.attainable_gflops = attainable
    for m in out.measurements.values():
        if m.timed:
            m.ratio_to_best_peer = best_peer / m.min_s
            m.roofline_pct = 100.0 * m.gflops / attainable
    return out


def run_bench(cases: Sequence[BenchCase], backends: Sequence[str] = ("blas",),
              peers: Sequence[str] = ("numpy", "opt_einsum", "tblis", "torch"),
              threads: int | None = None, repeats: int = 5, suite: str = "custom",
              progress: Progress | None = None, measure_peaks_: bool = True,
              extra: dict[str, Callable[..., Contender]] | None = None,
              min_seconds: float = 0.0, sample_seconds: float = SAMPLE_SECONDS,
              **kwargs: Any) -> BenchResult:
    """Run ``cases`` for every backend and peer; see :class:`BenchResult`.

    Per case, the contenders are timed in ``repeats`` interleaved rounds (more until each
    has run ``min_seconds``) of samples of ``sample_seconds`` (see :func:`interleaved`).

    ``extra`` adds contenders built by callables ``(case, a, b, d) -> Contender`` (tests use
    it to inject a deliberately wrong one).
    """
    do_peaks = kwargs.get("measure_peaks", measure_peaks_)
    with thread_limits(threads):
        env = environment(threads)
        peaks = measure_peaks([c.datatype for c in cases]) if do_peaks else {}
        result = BenchResult(suite, env, peaks)
        for i, case in enumerate(cases):
            if progress is not None:
                progress(case.name, i, len(cases))
            result.cases.append(run_case(case, backends, peers, peaks, repeats, threads, extra,
                                         min_seconds, sample_seconds))
        if progress is not None:
            progress("done", len(cases), len(cases))
    return result
