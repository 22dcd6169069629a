"""The ``torch`` backend: products run by ``torch.einsum`` (extra ``torch``, torch==2.13.0).

NumPy arrays and CPU torch tensors (through DLPack) are viewed without copying; the result is
written into D in place. BF16BF16_ACCUM_F32 and F16F16_ACCUM_F32 on BF16/F16 storage use torch's
native low-precision matmul (AMX/AVX-512 where the CPU has them), which accumulates in F32.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import numpy as np

from pytapp.analysis.spec import ContractionSpec, OperandSpec
from pytapp.backends.base import ALL_DATATYPES, Capabilities
from pytapp.backends.labels import einsum_words
from pytapp.datatypes import Datatype
from pytapp.errors import ErrorCode, error_for
from pytapp.executor import Executor
from pytapp.operands import BoundProduct
from pytapp.precision import Prectype
from pytapp.status import Status

__all__ = ["TorchBackend", "TorchPlan"]


class TorchPlan:
    """``torch.einsum`` on the merged (diagonal) views, then alpha, beta, C and op_D."""

    def __init__(self, spec: ContractionSpec, torch: Any, device: str) -> None:
        self.spec, self.torch, self.device = spec, torch, device
        cls = spec.classes
        in_inputs = [x for x in spec.d.modes.labels if x not in cls.IC]
        a, b, d = einsum_words(spec, "torch", in_inputs)
        self.expr = f"{a},{b}->{d}"
        # Where the broadcast (D-only) axes go: result axes are D's labels without them.
        self.expand = [x in cls.IC for x in spec.d.modes.labels]
        rule = spec.rule
        real = {Datatype.F32: torch.float32, Datatype.F64: torch.float64}[rule.real]
        self.compute = {torch.float32: torch.complex64, torch.float64: torch.complex128}[
            real] if rule.is_complex else real
        # Native low precision: both inputs stored in the rounding type itself.
        low = {Datatype.BF16: torch.bfloat16, Datatype.F16: torch.float16}
        # Products of two F16 (BF16) numbers are exact in F32 and torch accumulates them in
        # F32: under DEFAULT and the *_ACCUM_F32 precisions the native matmul is exact up to
        # its final rounding to the storage type.
        storage = spec.a.datatype
        self.native_type: Datatype | None = None
        # Isolated labels are reduced by torch in the storage type first: not exact.
        isolated = spec.classes.IA or spec.classes.IB
        if (storage in low and spec.b.datatype is storage and not rule.is_complex
                and rule.input_round in (None, storage) and rule.real is Datatype.F32
                and not isolated):
            self.native_type = storage
        self.native = self.native_type is not None
        self.input_dtype = low[self.native_type] if self.native_type else self.compute
        # torch.einsum may copy both inputs and builds the result before D is written.
        self.workspace_bytes = 16 * (spec.a.size + spec.b.size + 2 * spec.d.size)
        self.algorithm = f"torch.einsum {self.expr!r}" + (
            f" in {str(self.input_dtype).removeprefix('torch.')} when alpha is 1 and C is "
            "absent" if self.native else "")

    def _tensor(self, x: np.ndarray, spec: OperandSpec, dtype: Any, native: bool = False) -> Any:
        """A torch view of ``x`` in ``dtype``, rounded as the precision says, op applied."""
        torch = self.torch
        if any(s < 0 for s in x.strides):
            x = np.array(x, order="C", copy=True)  # also for extent-1 modes
        if not x.flags.writeable:  # torch wants writable memory; it only reads it here
            x = x.copy()
        if x.dtype.name == "bfloat16":
            t = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
        else:
            t = torch.from_numpy(x)
        rule = self.spec.rule
        if rule.input_round is not None and not native:
            low = rule.input_round.numpy_dtype.name
            target = {"bfloat16": torch.bfloat16, "float16": torch.float16,
                      "float32": torch.float32, "float64": torch.float64}[low]
            if t.is_complex():
                parts = torch.view_as_real(t.to(self._complex_of(t.dtype)))
                t = torch.view_as_complex(parts.to(target).to(self._real(dtype)).contiguous())
            else:
                t = t.to(target)
        t = t.to(device=self.device, dtype=dtype)
        if spec.conjugate and spec.datatype.is_complex:
            t = t.conj()
        return t

    def _real(self, dtype: Any) -> Any:
        torch = self.torch
        return {torch.complex64: torch.float32, torch.complex128: torch.float64}.get(dtype, dtype)

    def _complex_of(self, dtype: Any) -> Any:
        return dtype

    def run(self, bound: BoundProduct, executor: Executor | None) -> Status:
        """Compute D in place of ``bound.d``."""
        torch, spec = self.torch, self.spec
        status = Status(backend="torch", algorithm=self.algorithm, flops=spec.flops)
        if bound.d.size == 0:
            return status
        if executor is not None and executor.threads:
            torch.set_num_threads(executor.threads)
        # The native low-precision product is rounded once to its storage type: exact only
        # when that rounding is the final one (D of that type, alpha 1, no C).
        native = (self.native and bound.c is None and bound.alpha == 1
                  and spec.d.datatype is self.native_type)
        dtype = self.input_dtype if native else self.compute
        a = self._tensor(bound.a, spec.a, dtype, native)
        b = self._tensor(bound.b, spec.b, dtype, native)
        r = torch.einsum(self.expr, a, b)
        if not native:  # the native result is already final (and in D's type)
            r = r.to(self.compute)
        if bound.alpha != 1:
            r = r * torch.tensor(complex(bound.alpha) if r.is_complex() else float(bound.alpha),
                                 dtype=self.compute)
        shape = [1 if ic else n for ic, n in zip(self.expand, bound.d.shape, strict=True)]
        r = r.reshape(shape).expand(bound.d.shape) if bound.d.ndim else r.reshape(())
        if bound.c is not None:
            c = self._tensor(bound.c, spec.c, self.compute)
            beta = complex(bound.beta) if c.is_complex() else float(bound.beta)
            r = r + c * torch.tensor(beta, dtype=self.compute)
        if spec.d.conjugate and r.is_complex():
            r = r.conj()
        if r.is_complex() and not spec.d.datatype.is_complex:
            r = r.real
        self._store(bound.d, r.resolve_conj())
        return status

    def _store(self, d: np.ndarray, r: Any) -> None:
        """Copy (and round) ``r`` into D's memory, in place."""
        torch = self.torch
        if any(s < 0 for s in d.strides):  # torch has no negative strides: go through NumPy
            host = r.to("cpu")
            if d.dtype.name == "bfloat16":
                bits = host.to(torch.bfloat16).view(torch.int16).numpy()
                np.copyto(d.view(np.int16), bits)
            else:
                np.copyto(d, host.numpy(), casting="unsafe")
            return
        if d.dtype.name == "bfloat16":
            torch.from_numpy(d.view(np.int16)).view(torch.bfloat16).copy_(r)
        else:
            torch.from_numpy(d).copy_(r)


class TorchBackend:
    """torch.einsum on CPU; native BF16/F16 matmul for the low-precision precisions."""

    name = "torch"
    capabilities = Capabilities(
        datatypes=ALL_DATATYPES,
        prectypes=frozenset(Prectype) - {Prectype.F16F16_ACCUM_F16},
        notes="torch.einsum; native BF16/F16 matmul under BF16/F16 precisions; "
              "no F16 accumulation",
    )

    def __init__(self) -> None:
        self._torch: Any = None
        found = importlib.util.find_spec("torch") is not None
        self._why = "" if found else "torch is not installed; pip install 'pytapp[torch]'"

    def _load(self) -> Any:
        if self._torch is None:
            self._torch = importlib.import_module("torch")
        return self._torch

    def available(self) -> tuple[bool, str]:
        """Whether torch is installed (imported on first plan)."""
        return not self._why, self._why

    def plan(self, spec: ContractionSpec, executor: Executor | None) -> TorchPlan:
        """Check capabilities and the executor's device."""
        self.capabilities.require(spec, self.name)
        torch = self._load()
        device = "cpu" if executor is None else executor.device
        if device != "cpu":
            cuda = torch.cuda.is_available()
            if not device.startswith("cuda") or not cuda:
                raise error_for(
                    ErrorCode.INVALID_EXECUTOR,
                    f"device {device!r} is not available to torch here (CUDA available: "
                    f"{cuda}); use device 'cpu'",
                )
            raise error_for(
                ErrorCode.UNSUPPORTED,
                "CUDA execution needs device-resident operands, which this build binds "
                "only on the CPU; use device 'cpu'",
            )
        return TorchPlan(spec, torch, device)
