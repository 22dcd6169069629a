"""``pytapp.einsum`` against ``torch.einsum`` on torch tensors (``pytapp bench --suite torch``).

Matrix products from 8x8 to 2048x2048 and batched attention products (scores
``bhqd,bhkd->bhqk`` and values ``bhqk,bhkd->bhqd``), in float32, forward and forward +
backward (``torch.autograd.grad`` of both operands), on the CPU or on a CUDA device
(``--device cuda``). The contenders are interleaved in rounds: each round times each contender
once, in shuffled order, over a sample of calls lasting about :data:`SAMPLE_SECONDS`; the
fastest sample per call is kept. On a CUDA device each sample ends with a synchronisation, so a
sample counts the device's work and the host's launches, whichever is longer. The target of
each row is a ratio ``torch.einsum``'s time / ``pytapp.einsum``'s of at least 1. Every pytapp
result and gradient is compared with torch.einsum's, computed in float64 on the same data.

Examples
--------
>>> rows = torch_rows(rounds=1, cases=[TorchCase("matmul 8", "ij,jk->ik", ((8, 8), (8, 8)))],
...                   sample_seconds=0.001)
>>> [r.name for r in rows], all(e < 1e-5 for r in rows for e in r.errors.values())
(['matmul 8 forward', 'matmul 8 forward+backward'], True)
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pytapp.bench.targets import TargetRow, targets_table

__all__ = ["SAMPLE_SECONDS", "TorchCase", "interleaved", "run_torch", "torch_cases",
           "torch_markdown", "torch_rows", "torch_table"]

#: About how long one timed sample of one contender lasts (several calls when they are short).
SAMPLE_SECONDS = 0.02

#: Largest relative error accepted (float32 results against float64 ones).
TOLERANCE = 1e-4


@dataclass(frozen=True)
class TorchCase:
    """One einsum and its operand shapes (float32 operands, random normal data)."""

    name: str
    equation: str
    shapes: tuple[tuple[int, ...], ...]


def torch_cases() -> list[TorchCase]:
    """Square matrix products from 8 to 2048, and attention scores and values at three sizes."""
    cases = [TorchCase(f"matmul {n}", "ij,jk->ik", ((n, n), (n, n)))
             for n in (8, 16, 32, 64, 128, 256, 512, 1024, 2048)]
    for b, h, s, d in ((2, 4, 32, 16), (4, 8, 128, 64), (4, 12, 256, 64)):
        cases.append(TorchCase(f"attention scores {b}x{h}x{s}x{d}", "bhqd,bhkd->bhqk",
                               ((b, h, s, d), (b, h, s, d))))
        cases.append(TorchCase(f"attention values {b}x{h}x{s}x{d}", "bhqk,bhkd->bhqd",
                               ((b, h, s, s), (b, h, s, d))))
    return cases


def interleaved(contenders: dict[str, Callable[[], Any]], rounds: int,
                sample_seconds: float = SAMPLE_SECONDS, seed: int = 0,
                sync: Callable[[], Any] | None = None) -> dict[str, float]:
    """Return each contender's fastest time per call, timed in interleaved rounds.

    Each contender runs once first (plans, caches, allocations), then ``rounds`` times in a
    shuffled order, each time as a sample of the same number of calls (enough for the slowest
    contender's sample to last about ``sample_seconds``). ``sync`` (e.g.
    ``torch.cuda.synchronize``) runs before each sample starts and before it is read, so that
    asynchronous work is inside the sample that launched it.
    """
    wait = sync if sync is not None else _nothing
    once = {}
    for name, fn in contenders.items():
        fn()
        wait()
        start = time.perf_counter()
        fn()
        wait()
        once[name] = time.perf_counter() - start
    number = max(1, int(sample_seconds / max(max(once.values()), 1e-9)))
    best = {name: float("inf") for name in contenders}
    order = list(contenders)
    rng = random.Random(seed)
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            fn = contenders[name]
            wait()
            start = time.perf_counter()
            for _ in range(number):
                fn()
            wait()
            best[name] = min(best[name], (time.perf_counter() - start) / number)
    return best


def _nothing() -> None:
    return None


def _error(got: Any, want: Any) -> float:
    scale = float(want.abs().max()) or 1.0
    return float((got.double() - want).abs().max()) / scale


def _case_rows(case: TorchCase, rounds: int, sample_seconds: float, seed: int,
               device: str = "cpu") -> list[TargetRow]:
    import torch

    import pytapp

    gen = torch.Generator().manual_seed(seed)
    ops = [torch.randn(s, generator=gen).to(device) for s in case.shapes]
    sync = torch.cuda.synchronize if ops[0].is_cuda else None
    eq = case.equation
    wide = [t.double() for t in ops]
    want = torch.einsum(eq, *wide)
    forward: dict[str, Callable[[], Any]] = {"pytapp": lambda: pytapp.einsum(eq, *ops),
                                             "torch": lambda: torch.einsum(eq, *ops)}
    got = forward["pytapp"]()
    times = interleaved(forward, rounds, sample_seconds, seed, sync)
    rows = [TargetRow("torch", f"{case.name} forward", "torch.einsum", times["pytapp"],
                      times["torch"], 1.0, False, errors={"pytapp": _error(got, want)},
                      tolerance=TOLERANCE)]
    leaves = [t.clone().requires_grad_(True) for t in ops]
    wide_leaves = [t.clone().requires_grad_(True) for t in wide]
    grad_out = torch.randn(tuple(want.shape), generator=gen).to(device)
    wants = torch.autograd.grad(torch.einsum(eq, *wide_leaves), wide_leaves, grad_out.double())

    def both(fn: Callable[..., Any]) -> Callable[[], Any]:
        return lambda: torch.autograd.grad(fn(eq, *leaves), leaves, grad_out)

    backward = {"pytapp": both(pytapp.einsum), "torch": both(torch.einsum)}
    grads = backward["pytapp"]()
    times = interleaved(backward, rounds, sample_seconds, seed, sync)
    errors = {f"grad {i}": _error(g, w) for i, (g, w) in enumerate(zip(grads, wants,
                                                                       strict=True))}
    rows.append(TargetRow("torch", f"{case.name} forward+backward", "torch.einsum",
                          times["pytapp"], times["torch"], 1.0, False, errors=errors,
                          tolerance=TOLERANCE))
    return rows


def torch_rows(rounds: int = 5, cases: Sequence[TorchCase] | None = None,
               sample_seconds: float = SAMPLE_SECONDS,
               progress: Callable[[str], None] | None = None,
               device: str = "cpu") -> list[TargetRow]:
    """Time every case forward and forward + backward on ``device``; one row each."""
    rows: list[TargetRow] = []
    for seed, case in enumerate(cases if cases is not None else torch_cases()):
        if progress is not None:
            progress(case.name)
        rows += _case_rows(case, rounds, sample_seconds, seed, device)
    return rows


def run_torch(repeats: int = 5, progress: Callable[[str], None] | None = None,
              ) -> list[TargetRow]:
    """Run the whole suite: ``repeats`` interleaved rounds per case and direction."""
    return torch_rows(rounds=repeats, progress=progress)


def torch_table(rows: Sequence[TargetRow]) -> str:
    """Return a plain-text table (the targets suite's)."""
    return targets_table(rows)


def _fmt_s(s: float) -> str:
    return f"{s * 1e6:.1f} us" if s < 1e-3 else f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s"


def torch_markdown(rows: Sequence[TargetRow], plot: str | None = None,
                   device: str = "cpu") -> str:
    """Return a Markdown report: each case with both times and the ratio."""
    import torch

    where = (f"{torch.get_num_threads()} threads" if device == "cpu" else
             f"device {device} ({torch.cuda.get_device_name(device)}), each sample ended by a "
             "synchronisation")
    lines = ["# pytapp.einsum against torch.einsum on torch tensors", "",
             f"`pytapp bench --suite torch{'' if device == 'cpu' else ' --device ' + device}`: "
             "float32 tensors, contenders interleaved in rounds "
             "(each round times each once, in shuffled order; the fastest sample is kept). "
             "Ratio: torch.einsum's time over pytapp.einsum's (at least 1 meets the target). "
             f"torch {torch.__version__}, {where}.", ""]
    if plot:
        lines += [f"![torch]({plot})", ""]
    lines += ["| case | pytapp.einsum | torch.einsum | ratio | met | largest error |",
              "|---|---|---|---|---|---|"]
    for r in rows:
        err = max(r.errors.values(), default=0.0)
        lines.append(f"| {r.name} | {_fmt_s(r.pytapp_s)} | {_fmt_s(r.baseline_s)} | "
                     f"{r.ratio:.2f}x | {'yes' if r.met else '**no**'} | {err:.1e} |")
    met = sum(r.met for r in rows)
    lines += ["", f"{met} of {len(rows)} targets met.", ""]
    return "\n".join(lines)
