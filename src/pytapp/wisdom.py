"""Tuning results kept per machine on disk (like FFTW's wisdom), and the tuning budget.

What the tuners measured (the fastest backend of a product or of a whole einsum network, each
backend's per-call cost) is kept in one JSON file: ``$PYTAPP_WISDOM``, else ``wisdom.json``
in :func:`pytapp.machine.cache_dir` (``PYTAPP_WISDOM=off`` keeps it in memory only). The file
is valid for one :func:`pytapp.machine.fingerprint` (CPU model and flags, core count, numpy,
torch, pytblis and pytapp versions, the compiled executor's build): when that changes, its
entries are ignored and replaced.
Two processes may write at once: each write takes a lock file where the platform has one,
merges the entries already on disk with its own, writes a temporary file and renames it over
the old one, so a reader sees one whole version or the other.

:class:`Budget` is the rule both tuners follow: the cost model decides by default, and a
product (or network) is timed only once it has run :data:`MIN_RUNS` times and the timing
costs at most :data:`TUNE_SHARE` of the time it has run and is predicted to run. A
:class:`Trial` adds no call at all: it spreads the calls a product makes anyway over
candidates that compute the same result (a GEMM and its transpose), then keeps the fastest.

Examples
--------
>>> b = Budget()
>>> for _ in range(MIN_RUNS):
...     b.add(1e-3)
>>> b.allows(1e-3), b.allows(1.0)
(True, False)
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytapp.machine import cache_dir, fingerprint

__all__ = ["MIN_RUNS", "POOL_SETTLE_SECONDS", "TRIAL_AFTER", "TRIAL_COLD_MARGIN", "TRIAL_MARGIN",
           "TRIAL_SAMPLES",
           "TUNE_SHARE", "Budget", "Trial", "forget", "lookup", "path", "pause_seconds",
           "record", "recorded", "time_candidates"]

#: Share of a product's past and predicted run time that timing it may cost.
TUNE_SHARE = 0.1
#: Fewest executions before a product is timed (a product run a few times never is).
MIN_RUNS = 50
#: Calls a product runs as the model chose before a :class:`Trial` alternates its candidates.
TRIAL_AFTER = 2
#: Timed calls of each candidate in a :class:`Trial` (after one untimed call that plans it).
TRIAL_SAMPLES = 3
#: A :class:`Trial` candidate whose least timed call is this many times the leader's is dropped
#: at once: run-to-run noise of one product's calls is a few percent, so more calls would not
#: change the verdict, and each one would cost what the slower layout loses (a transposed
#: 144x2304x2304 GEMM took 1.35-1.6x the other on one machine: three more slow calls each
#: loop cost 4% of a coupled-cluster iteration).
TRIAL_MARGIN = 1.15
#: A :class:`Trial` candidate whose first call (untimed) takes more than this many times the
#: least call of another (timed or not) is dropped at once, where the trial says its
#: candidates' first calls plan nothing (compiled routes): ``vynsr,ns->rvny`` (F64) streamed
#: through A ran 8.7x its GEMVs on views (78 ms against 9), and a second call would only
#: confirm it. A first call costs its buffers' first touch and cold caches: about 2x (cc's
#: ``abcj,ic->ijab``, its alternative's first call 1.59 ms against 0.82 for the model's).
TRIAL_COLD_MARGIN = 4.0
#: Most entries kept per section (the oldest are dropped first).
SECTION_SIZE = 4096
#: File format version (a file of another version is ignored).
FORMAT = 1


#: Seconds the tuners wait before timing candidates on another thread pool than the calls
#: before them: OpenBLAS's idle workers spin for about 0.1 s after each call, and a torch
#: network timed right after NumPy's GEMMs took 1.5-1.9x its time alone (a tensor-train
#: product: 18.5 ms against 9.2), so the tuner kept OpenBLAS where torch was 24% faster.
POOL_SETTLE_SECONDS = 0.15


#: How the tuners wait (a hook: tests count the pauses without sleeping).
_sleep = time.sleep


def pause_seconds(pools: Mapping[str, str], after: str | None) -> float:
    """Seconds :func:`time_candidates` pauses for these candidates' ``pools``.

    One :data:`POOL_SETTLE_SECONDS` before each pool other than ``after`` (the pool of the
    calls just before); the tuners' budgets count it.

    Examples
    --------
    >>> pause_seconds({"blas": "blas", "auto": "blas", "torch": "torch"}, "blas")
    0.15
    """
    return POOL_SETTLE_SECONDS * len(set(pools.values()) - {after})


def time_candidates(runs: Mapping[str, Callable[[], object]], repeats: int,
                    pools: Mapping[str, str] | None = None,
                    after: str | None = None, warm_up: bool = False) -> dict[str, float]:
    """Return each candidate's least seconds over ``repeats`` runs, timed back to back.

    The tuners' one timing rule. ``warm_up``: each candidate first runs once untimed (plans,
    buffers, compiled kernels), right before its timed runs; otherwise the caller has run
    every candidate once. A candidate's runs follow one another rather than alternate with
    the others': a library's thread pool keeps spinning for a while after its calls (OpenBLAS
    for about 0.1 s), so a run of another pool right after it is timed against those threads
    (warm-ups of every candidate first, then the timed runs, timed torch at 7-16 ms where it
    takes 4.4, OpenBLAS's threads still spinning). ``pools`` names each candidate's thread
    pool and ``after`` the pool of the calls just before: the candidates of ``after`` run
    first, then each other pool's after a pause of :data:`POOL_SETTLE_SECONDS`
    (:func:`pause_seconds` in all). A candidate that raises is left out.

    Examples
    --------
    >>> t = time_candidates({"sum": lambda: sum(range(1000)), "bad": lambda: 1 / 0}, 3)
    >>> sorted(t), t["sum"] > 0
    (['sum'], True)
    """
    order = list(runs)
    if pools is not None:  # the current pool's first, then the others grouped by pool
        order.sort(key=lambda n: (pools[n] != after, pools[n]))
    previous = after
    times: dict[str, float] = {}
    for name in order:
        if pools is not None and pools[name] != previous:
            previous = pools[name]
            _sleep(POOL_SETTLE_SECONDS)
        run = runs[name]
        best = float("inf")
        try:
            if warm_up:
                run()
            for _ in range(max(repeats, 1)):
                start = time.perf_counter()
                run()
                best = min(best, time.perf_counter() - start)
        except Exception:  # cannot run these operands after all: not a candidate
            continue
        times[name] = best
    return times


@dataclass
class Budget:
    """Runs and seconds of one product (or network) so far: what timing it may cost.

    A product that ran ``runs`` times for ``seconds`` is predicted to run about as long
    again; timing its candidates may cost :data:`TUNE_SHARE` of both together.
    """

    runs: int = 0
    seconds: float = 0.0

    def add(self, seconds: float) -> None:
        """Count one execution that took ``seconds``."""
        self.runs += 1
        self.seconds += seconds

    def allows(self, cost: float) -> bool:
        """Whether timing that costs ``cost`` seconds fits the budget now."""
        return self.runs >= MIN_RUNS and cost <= TUNE_SHARE * 2 * self.seconds


class Trial:
    """Candidates of one product alternated over the calls it makes anyway, then the fastest.

    No call is added: where the candidates compute the same result at costs the model does
    not tell apart (a square GEMM and its transpose), the calls the program makes are spread over
    them, after :data:`TRIAL_AFTER` calls of the model's choice (candidate 0). Each
    candidate's first call plans it and is not timed; after :data:`TRIAL_SAMPLES` timed calls
    of each, the one with the least time wins. A candidate whose least timed call is more
    than :data:`TRIAL_MARGIN` times the leader's is dropped as soon as each one has a timed
    call (the last one left wins). What it can cost is what the slower candidate loses on its
    few calls. ``cold``: the candidates' first calls plan nothing (they are compiled
    already), so one that takes more than ``cold`` times another's least call is dropped then
    (see :data:`TRIAL_COLD_MARGIN`).

    Examples
    --------
    >>> t = Trial(2)
    >>> picks = []
    >>> while t.winner is None:
    ...     k = t.pick()
    ...     picks.append(k)
    ...     _ = t.add(k, 2e-3 if k == 0 else 1e-3)
    >>> picks, t.winner
    ([0, 0, 1, 0, 1], 1)
    """

    def __init__(self, count: int, cold: float | None = None) -> None:
        self.count = count
        self.cold = cold
        self.calls = 0
        self.seen = [0] * count
        self.timed = [0] * count
        self.best = [float("inf")] * count
        #: Each candidate's least call, its first (untimed) one included.
        self.any_best = [float("inf")] * count
        #: Candidates still in the trial (dropped: clearly slower than the leader).
        self.alive = list(range(count))
        #: The fastest candidate, once every one has been timed (``None`` until then).
        self.winner: int | None = None
        self._lock = threading.Lock()

    def pick(self) -> int:
        """Return the candidate the next call runs."""
        if self.winner is not None:
            return self.winner
        if self.calls < TRIAL_AFTER:
            return 0
        alive = self.alive
        return alive[(self.calls - TRIAL_AFTER + 1) % len(alive)]

    def add(self, which: int, seconds: float) -> int | None:
        """Count a call of candidate ``which`` that took ``seconds``; return the winner if known."""
        with self._lock:
            if self.winner is not None:
                return self.winner
            self.calls += 1
            self.seen[which] += 1
            if self.seen[which] > 1 and self.calls > TRIAL_AFTER:  # not the call that planned it
                self.best[which] = min(self.best[which], seconds)
                self.timed[which] += 1
            elif self.cold is not None and self.seen[which] == 1 and self.calls > TRIAL_AFTER:
                others = [self.any_best[k] for k in self.alive if k != which]
                if others and seconds > self.cold * min(others):  # hopeless from its first call
                    self.alive = [k for k in self.alive if k != which]
            self.any_best[which] = min(self.any_best[which], seconds)
            best = self.best
            if all(self.timed[k] for k in self.alive):
                lead = min(best[k] for k in self.alive)
                # a new list: pick() reads the old one without the lock
                self.alive = [k for k in self.alive if best[k] <= TRIAL_MARGIN * lead]
            alive = self.alive
            if len(alive) == 1 or min(self.timed[k] for k in alive) >= TRIAL_SAMPLES:
                self.winner = min(alive, key=lambda k: best[k])
            return self.winner


def path() -> Path | None:
    """Return the wisdom file (``None`` when ``PYTAPP_WISDOM=off``).

    ``PYTAPP_WISDOM``, else the older ``PYTAPP_AUTOTUNE_CACHE``, else ``wisdom.json`` in the
    user cache directory.
    """
    env = os.environ
    return _path_for(env.get("PYTAPP_WISDOM"), env.get("PYTAPP_AUTOTUNE_CACHE"),
                     env.get("XDG_CACHE_HOME"), env.get("HOME"))


@functools.lru_cache(maxsize=8)
def _path_for(wisdom: str | None, legacy: str | None, cache_home: str | None,
              home: str | None) -> Path | None:
    """Return the file those environment values name (what :func:`path` reads, resolved once)."""
    del cache_home, home  # cache_dir() reads them; they are part of the cache key
    chosen = (wisdom or legacy or "").strip()
    if chosen.lower() in ("off", "0", "none"):
        return None
    return Path(chosen) if chosen else cache_dir() / "wisdom.json"


_lock = threading.Lock()
_loaded: str | None = None  # the file ("off": none) whose entries _entries holds
_entries: dict[str, dict[str, Any]] = {}


def _read(file: Path) -> dict[str, dict[str, Any]]:
    """Return the sections of ``file`` when it is valid for this machine, else nothing."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if (not isinstance(data, dict) or data.get("format") != FORMAT
            or data.get("fingerprint") != fingerprint()
            or not isinstance(data.get("entries"), dict)):
        return {}
    return {str(k): dict(v) for k, v in data["entries"].items() if isinstance(v, dict)}


def _current(file: Path | None) -> dict[str, dict[str, Any]]:
    """Return the entries of ``file``, read once per file (the caller holds the lock)."""
    global _loaded, _entries
    name = "off" if file is None else str(file)
    if name != _loaded:
        _entries = {} if file is None else _read(file)
        _loaded = name
    return _entries


def lookup(section: str, key: str) -> Any:
    """Return what was recorded under ``section`` and ``key`` (``None`` when nothing was).

    Examples
    --------
    >>> lookup("example", "never recorded") is None
    True
    """
    with _lock:
        return _current(path()).get(section, {}).get(key)


def recorded(section: str) -> bool:
    """Tell whether anything was recorded under ``section`` (a key need not be computed).

    Examples
    --------
    >>> recorded("a section never written")
    False
    """
    with _lock:
        return bool(_current(path()).get(section))


@contextlib.contextmanager
def _file_lock(file: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``file``'s lock file while merging (where fcntl exists)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX: the rename alone keeps files whole
        yield
        return
    with open(f"{file}.lock", "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _bounded(section: dict[str, Any]) -> dict[str, Any]:
    items = list(section.items())[-SECTION_SIZE:]
    return dict(items)


def record(section: str, key: str, value: Any) -> None:
    """Remember ``value`` (JSON data) under ``section`` and ``key``, and merge it to disk.

    A file that cannot be written (read-only home) is not an error: the value stays in this
    process.
    """
    file = path()
    with _lock:
        entries = _current(file)
        mine = entries.setdefault(section, {})
        mine.pop(key, None)
        mine[key] = value
        entries[section] = _bounded(mine)
        if file is None:
            return
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
            with _file_lock(file):
                merged = _read(file)
                for name, values in entries.items():
                    merged[name] = _bounded({**merged.get(name, {}), **values})
                fd, tmp = tempfile.mkstemp(prefix=f".{file.name}.", dir=file.parent)
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    json.dump({"format": FORMAT, "fingerprint": fingerprint(),
                               "entries": merged}, fh)
                os.replace(tmp, file)
        except OSError:
            return
        entries.update(merged)


def forget() -> None:
    """Drop what this process remembers; the file is read again on the next lookup."""
    global _loaded, _entries
    with _lock:
        _loaded, _entries = None, {}
