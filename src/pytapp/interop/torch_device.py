"""TAPP products on a torch device: ``Executor(device="cuda:0")`` runs plans as torch calls there.

An executor whose ``device`` is not ``'cpu'`` hands :meth:`pytapp.TensorProduct.execute` (and
``execute_batched``) to :class:`DeviceRunner`. Operands are torch tensors on that device, bound
to their descriptors as the host path binds arrays (data of the descriptor's extents, or
one-dimensional storage, whose first element is element [0, ..., 0], read with the
descriptor's strides and checked against the tensor's storage), or host data (NumPy arrays,
CPU tensors), bound and checked by the host path and copied to the device; a host D receives
the result back. The product runs as one ``torch.einsum`` on the merged (diagonal) modes in the
precision's compute type, then alpha, broadcast labels, beta C, op_D and the rounding to D's
datatype; D is written only when the whole result exists, so an error leaves it unchanged.
The executor is synchronous: ``execute`` returns once D holds the result.

Rounding is exact as SPEC section 7 states it: F64 data rounded to F16 or BF16 (inputs under
the 16-bit precisions, and results into 16-bit D) go through F32 rounded to odd, so the two
roundings give the correctly rounded value (a plain cast rounds twice). TF32 is switched off
for F32 products on CUDA while they run.

Examples
--------
>>> import numpy as np, torch, pytapp
>>> info = pytapp.TensorInfo(pytapp.Datatype.F64, (2, 2))
>>> plan = pytapp.TensorProduct(pytapp.Handle(backend="torch"), info, "ij", info, "jk", None,
...                             None, info, "ik")
>>> d = torch.zeros(2, 2, dtype=torch.float64)
>>> runner = DeviceRunner(pytapp.Executor(), device="cpu")  # any torch device
>>> runner.execute(plan, 1.0, torch.eye(2, dtype=torch.float64), np.full((2, 2), 3.0), 0.0,
...                None, d).backend
'torch'
>>> d.tolist()
[[3.0, 3.0], [3.0, 3.0]]
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pytapp.analysis.spec import ContractionSpec, OperandSpec
from pytapp.backends.torch import TorchBackend
from pytapp.datatypes import numpy_view, torch_view
from pytapp.errors import ErrorCode, error_for
from pytapp.executor import Executor, register_runner
from pytapp.expression import is_torch
from pytapp.interop.torch_einsum import torch_dtype
from pytapp.operands import bind_array, convert_scalar
from pytapp.status import Status

__all__ = ["DeviceRunner", "round_exactly"]

#: Backends whose products a device executor runs (with torch, on the device).
DEVICE_BACKENDS = ("torch", "auto")

_tf32_lock = threading.Lock()
#: What torch raises when a device allocation fails.
_OUT_OF_MEMORY: type[BaseException] = getattr(torch, "OutOfMemoryError", MemoryError)


def _odd_f32(x: Any) -> Any:
    """``x`` (float64) rounded to float32 to odd: truncated, the last bit set when inexact."""
    y = x.to(torch.float32)
    back = y.to(torch.float64)
    inexact = back != x
    y = torch.where(inexact & (back.abs() > x.abs()), torch.nextafter(y, torch.zeros_like(y)),
                    y)
    return torch.where(inexact, (y.view(torch.int32) | 1).view(torch.float32), y)


def round_exactly(x: Any, target: torch.dtype) -> Any:
    """Return real tensor ``x`` correctly rounded (to nearest, ties to even) to ``target``.

    A float64 tensor bound for float16 or bfloat16 goes through float32 rounded to odd (24
    bits, more than two beyond either target's), which makes the second rounding the correct
    one; every other conversion is a single rounding already.

    >>> x = torch.tensor([1 + 2.0 ** -11 + 2.0 ** -40], dtype=torch.float64)  # just above a tie
    >>> float(round_exactly(x, torch.float16)), float(x.to(torch.float16))
    (1.0009765625, 1.0)
    """
    if x.dtype == target:
        return x
    if x.dtype == torch.float64 and target in (torch.float16, torch.bfloat16):
        x = _odd_f32(x)
    return x.to(target)


def _round_parts(x: Any, target: torch.dtype) -> Any:
    """Round a real or complex tensor's parts to the real ``target``."""
    if x.is_complex():
        return torch.complex(round_exactly(x.real, target).to(x.real.dtype),
                             round_exactly(x.imag, target).to(x.real.dtype))
    return round_exactly(x, target)


@contextlib.contextmanager
def _no_tf32(device: torch.device) -> Iterator[None]:
    """Keep F32 products in F32 on CUDA (TF32 rounds their inputs to 10 bits)."""
    if device.type != "cuda" or not torch.backends.cuda.matmul.allow_tf32:
        yield
        return
    with _tf32_lock:
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32 = True


@dataclass
class _Operand:
    """One bound operand: a device view over its merged modes, or a host view."""

    view: Any  # a tensor on the device (positive strides) or, for a host D, an ndarray
    flipped: tuple[int, ...] = ()  # modes of negative stride, read reversed

    def values(self) -> Any:
        """Return the values in mode order (a copy where modes run backwards)."""
        return self.view.flip(self.flipped) if self.flipped else self.view


@dataclass
class _Bound:
    alpha: Any
    beta: Any
    a: _Operand | None
    b: _Operand | None
    c: _Operand | None
    d: _Operand


class DeviceRunner:
    """Runs TAPP products on a torch device (the runner of executors whose device is not CPU).

    Parameters
    ----------
    executor
        The executor (its ``verify`` mode is refused: the reference runs on the host).
    device
        The torch device; the executor's by default. Tests pass ``'cpu'`` to run this path on
        CPU tensors.

    Raises
    ------
    ExecutorError
        Code 33 when torch cannot use the device (no CUDA, a device index that does not exist).
    """

    def __init__(self, executor: Executor, device: str | None = None) -> None:
        name = executor.device if device is None else device
        try:
            self.device = torch.device(name)
            if self.device.type == "cuda":
                if not torch.cuda.is_available():
                    raise RuntimeError("CUDA is not available to torch here")
                index = 0 if self.device.index is None else self.device.index
                if index >= torch.cuda.device_count():
                    raise RuntimeError(f"torch sees {torch.cuda.device_count()} CUDA devices")
                self.device = torch.device("cuda", index)
            elif self.device.type == "meta":
                raise RuntimeError("a meta device holds no values")
        except RuntimeError as exc:
            raise error_for(ErrorCode.INVALID_EXECUTOR,
                            f"device {name!r} cannot run products here ({exc}); use device "
                            "'cpu' or a CUDA device torch sees ('cuda:0')") from exc
        self.executor = executor

    # -- binding ------------------------------------------------------------------------------

    def _device_tensor(self, x: Any, op: OperandSpec, writable: bool) -> _Operand:
        role = op.role
        want = torch_dtype(op.datatype)
        if x.device != self.device:
            raise error_for(ErrorCode.OPERAND_MISMATCH,
                            f"{role} is on device {x.device} but the executor runs on "
                            f"{self.device}; move it there (x.to('{self.device}'))")
        if x.dtype != want:
            raise error_for(ErrorCode.OPERAND_MISMATCH,
                            f"{role} has dtype {x.dtype} but its tensor info says "
                            f"{op.datatype.name} ({want}); convert it or describe it as it is")
        if tuple(x.shape) != op.extents and x.dim() != 1:
            raise error_for(ErrorCode.OPERAND_MISMATCH,
                            f"{role} has shape {tuple(x.shape)} but its tensor info has extents "
                            f"{op.extents}; pass data of that shape, or one-dimensional storage "
                            "whose first element is element [0,...,0]")
        if x.requires_grad and torch.is_grad_enabled():
            raise error_for(ErrorCode.UNSUPPORTED,
                            f"{role} requires grad, and TAPP products are not recorded for "
                            "autograd; pass tensor.detach() (or use pytapp.einsum)")
        if writable and (x.is_conj() or x.is_neg()):
            raise error_for(ErrorCode.OPERAND_MISMATCH,
                            f"{role} is a torch view with the conjugate or negative bit set, "
                            "which pytapp cannot write through; pass a plain tensor")
        ext, st = op.modes.extents, op.modes.strides
        if op.footprint is None:  # empty: nothing is read or written
            return _Operand(torch.empty(ext, dtype=want, device=self.device))
        low, high = op.footprint
        first = x.storage_offset()
        room = x.untyped_storage().nbytes() // x.element_size()
        if first + low < 0 or first + high >= room:
            raise error_for(ErrorCode.OUT_OF_BOUNDS,
                            f"{role}: extents {op.extents} with strides {op.strides} reach "
                            f"element offsets {low}..{high} from its first element, outside "
                            f"its storage of {room} elements (the first at {first}); fix the "
                            "strides or pass the whole tensor")
        flipped = tuple(i for i, (e, s) in enumerate(zip(ext, st, strict=True))
                        if s < 0 and e > 1)
        start = first + sum((e - 1) * s for e, s in zip(ext, st, strict=True) if s < 0)
        view = x.as_strided(ext, tuple(abs(s) for s in st), start)
        return _Operand(view, flipped)

    def _operand(self, x: Any, op: OperandSpec, writable: bool = False) -> _Operand:
        """Bind one operand.

        A tensor on the device is used as it lies; host data goes through the host path and
        is copied to the device (unless it is D, which receives the result back).
        """
        if is_torch(x) and x.device.type != "cpu":
            return self._device_tensor(x, op, writable)
        if self.device.type == "cpu" and is_torch(x):
            return self._device_tensor(x, op, writable)
        view = bind_array(x, op.datatype, op.extents, op.strides, op.modes, op.role,
                          writable=writable)
        if writable:
            return _Operand(view)
        return _Operand(_to_device(view, self.device))

    def bind(self, product: Any, alpha: Any, a: Any, b: Any, beta: Any, c: Any,
             d: Any) -> _Bound:
        """Check and bind one execution's operands (the host path's order and codes)."""
        spec: ContractionSpec = product.spec
        if product.backend_name not in DEVICE_BACKENDS:
            raise error_for(ErrorCode.INVALID_EXECUTOR,
                            f"backend {product.backend_name!r} runs on the CPU; run on device "
                            f"{self.executor.device!r} with Handle(backend='torch') (or "
                            "'auto'), or use an executor on device 'cpu'")
        TorchBackend.capabilities.require(spec, "torch")
        if self.executor.verify:
            raise error_for(ErrorCode.UNSUPPORTED,
                            "verify=True runs the reference backend on the host; verify with "
                            "an executor on device 'cpu'")
        va: _Operand | None = self._operand(a, spec.a)
        vb: _Operand | None = self._operand(b, spec.b)
        vc = None if c is None else self._operand(c, spec.c)
        vd = self._operand(d, spec.d, writable=True)
        al = convert_scalar(alpha, spec.d.datatype, "alpha")
        be = convert_scalar(beta, spec.d.datatype, "beta")
        if be == 0:
            vc = None
        elif vc is None:
            raise error_for(ErrorCode.C_MISSING,
                            "beta is not zero but C is None; pass C or set beta to 0")
        if spec.empty_sum or al == 0:
            va = vb = None
        return _Bound(al, be, va, vb, vc, vd)

    # -- running ------------------------------------------------------------------------------

    def _input(self, op: _Operand, spec: OperandSpec, rule: Any, compute: torch.dtype) -> Any:
        x = op.values()
        if rule.input_round is not None and spec.datatype.real is not rule.input_round:
            x = _round_parts(x, torch_dtype(rule.input_round))
        x = x.to(compute)
        return x.conj() if spec.conjugates else x

    def _result(self, spec: ContractionSpec, bound: _Bound) -> Any:
        """Return the product in D's merged-mode order and datatype (op_D applied)."""
        rule = spec.rule
        real = torch_dtype(rule.real)
        compute = {torch.float32: torch.complex64, torch.float64: torch.complex128}[real] \
            if rule.is_complex else real
        labels = spec.d.modes.labels
        ic = spec.classes.IC
        perm = [i for i, x in enumerate(labels) if x not in ic] + [
            i for i, x in enumerate(labels) if x in ic]
        shape = tuple(spec.d.modes.extents[i] for i in perm)
        cplx = compute.is_complex
        if bound.a is None or bound.b is None:  # alpha 0 or an empty sum: no A B term
            r = torch.zeros(shape, dtype=compute, device=self.device)
        else:
            wa, wb, wd = spec.einsum_words("torch", [x for x in labels if x not in ic])
            a = self._input(bound.a, spec.a, rule, compute)
            b = self._input(bound.b, spec.b, rule, compute)
            r = torch.einsum(f"{wa},{wb}->{wd}", a, b)
            if bound.alpha != 1:
                r = r * (complex(bound.alpha) if cplx else float(bound.alpha))
            r = r.reshape(tuple(r.shape) + (1,) * len(ic)).expand(shape)
        if bound.c is not None:
            c = self._input(bound.c, spec.c, rule, compute).permute(perm)
            r = r + c * (complex(bound.beta) if cplx else float(bound.beta))
        if spec.d.conjugate and r.is_complex():
            r = r.conj()
        if r.is_complex() and not spec.d.datatype.is_complex:
            r = r.real
        r = r.permute([perm.index(i) for i in range(len(perm))])
        target = torch_dtype(spec.d.datatype)
        return _round_parts(r, _real_of(target)).to(target).resolve_conj()

    def _store(self, d: _Operand, r: Any) -> None:
        if isinstance(d.view, np.ndarray):
            host = r.cpu()
            np.copyto(d.view, numpy_view(host), casting="unsafe")
            return
        d.view.copy_(r.flip(d.flipped) if d.flipped else r)

    def run(self, product: Any, bound: _Bound) -> Status:
        """Compute D for operands :meth:`bind` checked; returns once D holds the result."""
        spec: ContractionSpec = product.spec
        status = Status(backend="torch", algorithm=f"torch.einsum on {self.device}",
                        flops=spec.flops)
        start = time.perf_counter()
        if spec.d.size:
            with _no_tf32(self.device):
                try:
                    result = self._result(spec, bound)
                except _OUT_OF_MEMORY as exc:
                    raise error_for(ErrorCode.UNSUPPORTED,
                                    f"the product does not fit in {self.device}'s memory "
                                    f"({exc}); split it or run it on the host") from exc
                self._store(bound.d, result)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        status.seconds = time.perf_counter() - start
        return status

    def execute(self, product: Any, alpha: Any, a: Any, b: Any, beta: Any, c: Any,
                d: Any) -> Status:
        """Bind, check and run one product (see :meth:`pytapp.TensorProduct.execute`)."""
        return self.run(product, self.bind(product, alpha, a, b, beta, c, d))

    def execute_batched(self, product: Any, alpha: Any, a: Sequence[Any], b: Sequence[Any],
                        beta: Any, c: Sequence[Any], d: Sequence[Any]) -> Status:
        """Bind every item first (an error leaves every D unchanged), then run each."""
        bounds = [self.bind(product, alpha, ai, bi, beta, ci, di)
                  for ai, bi, ci, di in zip(a, b, c, d, strict=True)]
        total = Status(backend="torch", algorithm=f"torch.einsum on {self.device}", products=0)
        for bound in bounds:
            total.merge(self.run(product, bound))
        return total


def _real_of(dtype: torch.dtype) -> torch.dtype:
    return {torch.complex64: torch.float32, torch.complex128: torch.float64}.get(dtype, dtype)


def _to_device(view: np.ndarray, device: torch.device) -> Any:
    """Return a host view's values as a tensor on ``device`` (a copy)."""
    if any(s < 0 for s in view.strides) or not view.flags.writeable:
        view = np.array(view, copy=True)
    return torch_view(view).to(device)


def _runner(executor: Executor) -> DeviceRunner:
    return DeviceRunner(executor)


register_runner("device", _runner)
