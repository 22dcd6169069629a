"""TAPP plans on a torch device (pytapp.interop.torch_device): Executor(device=...) runs the
conformance cases on device tensors and on host data, binding errors keep their codes with D
untouched, and 16-bit rounding is exact. Oracle: the conformance kit's float64 oracle; for
rounding, values built on either side of ties. Where no CUDA device exists the same runner is
exercised on CPU tensors (the executors routed to it); the CUDA variants run on a GPU."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import pytapp

torch = pytest.importorskip("torch")
from pytapp.conformance.cases import CASES  # noqa: E402
from pytapp.conformance.runner import FAIL, PASS, UNSUPPORTED, run_instance  # noqa: E402
from pytapp.interop import torch_device  # noqa: E402

CUDA = torch.cuda.is_available()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not CUDA,
                                                                reason="needs a CUDA device"))]


def _route_everything(ex: Any) -> str | None:
    if ex is None:
        return None
    return "dask" if ex.dask is not None else "device"


@pytest.fixture
def device(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The device under test; on "cpu", executors are routed to the device runner too."""
    name: str = request.param
    if name == "cpu":
        monkeypatch.setattr(pytapp.product, "runner_kind", _route_everything)
        monkeypatch.setattr(pytapp.executor, "runner_kind", _route_everything)
    return name


def _plain_instances(seeds: range) -> list[Any]:
    found = []
    for number in sorted(CASES):
        for seed in seeds:
            inst = CASES[number].make(seed)
            if inst.scenario is None and inst.expected_code is None:
                found.append(inst)
    return found


@pytest.mark.parametrize("device", DEVICES, indirect=True)
@pytest.mark.parametrize("tensors", [True, False], ids=["device tensors", "host data"])
def test_conformance_cases(device: str, tensors: bool) -> None:
    verdicts: dict[str, int] = {PASS: 0, UNSUPPORTED: 0}
    for inst in _plain_instances(range(3)):
        outcome = run_instance(inst, "torch", device=device, tensors=tensors)
        assert outcome.verdict != FAIL, (outcome.case, outcome.seed, outcome.message,
                                         outcome.description)
        if outcome.verdict == UNSUPPORTED:  # only what the host torch plan declines too
            host = run_instance(inst, "torch")
            assert host.verdict == UNSUPPORTED, (outcome.case, outcome.message)
        verdicts[outcome.verdict] += 1
    assert verdicts[PASS] > 5 * verdicts[UNSUPPORTED] > 0


def _plan(backend: str = "torch", dt: Any = pytapp.Datatype.F64) -> Any:
    info = pytapp.TensorInfo(dt, (3, 4))
    other = pytapp.TensorInfo(dt, (4, 2))
    out = pytapp.TensorInfo(dt, (3, 2))
    return pytapp.TensorProduct(pytapp.Handle(backend), info, "ij", other, "jk", out, "ik",
                                out, "ik")


def _operands(device: str) -> tuple[Any, Any, Any, Any]:
    gen = torch.Generator().manual_seed(0)
    a, b, c = (torch.rand(s, dtype=torch.float64, generator=gen).to(device)
               for s in ((3, 4), (4, 2), (3, 2)))
    return a, b, c, torch.full((3, 2), 7.0, dtype=torch.float64, device=device)


@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_values_scalars_and_layouts(device: str) -> None:
    a, b, c, d = _operands(device)
    ex = pytapp.Executor(device=device)
    status = _plan().execute(2.0, a, b, 0.5, c, d, ex)
    assert status.backend == "torch" and device in status.algorithm
    want = 2.0 * a.cpu().numpy() @ b.cpu().numpy() + 0.5 * c.cpu().numpy()
    np.testing.assert_allclose(d.cpu().numpy(), want, rtol=1e-13)
    # one-dimensional storage whose first element is element [0,...,0], strides of the info
    storage = torch.zeros(40, dtype=torch.float64, device=device)
    strided = storage[5:]
    info = pytapp.TensorInfo(pytapp.Datatype.F64, (3, 2), (1, 3))  # column-major D
    plan = pytapp.TensorProduct(pytapp.Handle("torch"), pytapp.TensorInfo.from_array(
        a.cpu().numpy()), "ij", pytapp.TensorInfo.from_array(b.cpu().numpy()), "jk", None, None,
        info, "ik")
    plan.execute(1.0, a, b.cpu().numpy(), 0.0, None, strided, ex)  # B from the host
    got = storage.cpu().numpy()
    np.testing.assert_allclose(got[5:11].reshape(2, 3).T, a.cpu().numpy() @ b.cpu().numpy(),
                               rtol=1e-13)
    assert not got[:5].any() and not got[11:].any()  # nothing outside D's elements


@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_host_d_receives_the_result(device: str) -> None:
    a, b, c, _ = _operands(device)
    d = np.zeros((3, 2))
    _plan().execute(1.0, a, b, 1.0, c.cpu().numpy(), d, pytapp.Executor(device=device))
    np.testing.assert_allclose(d, a.cpu().numpy() @ b.cpu().numpy() + c.cpu().numpy(),
                               rtol=1e-13)


@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_batched(device: str) -> None:
    ops = [_operands(device) for _ in range(3)]
    for k, (_, _, _, d) in enumerate(ops):
        d.fill_(k)
    _plan().execute_batched(1.0, [o[0] for o in ops], [o[1] for o in ops], 0.0, None,
                            [o[3] for o in ops], pytapp.Executor(device=device))
    for a, b, _, d in ops:
        np.testing.assert_allclose(d.cpu().numpy(), a.cpu().numpy() @ b.cpu().numpy())


def _errors(device: str) -> dict[str, tuple[int, Callable[[Any, Any, Any, Any, Any], None]]]:
    def run(plan: Any, ex: Any, *ops: Any, alpha: Any = 1.0, beta: Any = 0.0) -> None:
        a, b, c, d = ops
        plan.execute(alpha, a, b, beta, c, d, ex)

    return {
        "A on another device": (20, lambda p, ex, a, b, d: run(
            p, ex, torch.empty(3, 4, dtype=torch.float64, device="meta"), b, None, d)),
        "A of another dtype": (20, lambda p, ex, a, b, d: run(p, ex, a.float(), b, None, d)),
        "B of another shape": (20, lambda p, ex, a, b, d: run(p, ex, a, b.mT, None, d)),
        "storage too short": (19, lambda p, ex, a, b, d: run(
            p, ex, torch.rand(10, dtype=torch.float64, device=device), b, None, d)),
        "D with the conjugate bit": (20, lambda p, ex, a, b, d: run(
            _plan(dt=pytapp.Datatype.C64), ex, a.to(torch.complex128), b.to(torch.complex128),
            None, torch.zeros(3, 2, dtype=torch.complex128, device=device).conj())),
        "A requires grad": (18, lambda p, ex, a, b, d: run(
            p, ex, a.clone().requires_grad_(True), b, None, d)),
        "C missing": (12, lambda p, ex, a, b, d: run(p, ex, a, b, None, d, beta=1.0)),
        "complex alpha, real D": (21, lambda p, ex, a, b, d: run(p, ex, a, b, None, d,
                                                                  alpha=1j)),
        "a CPU-only backend": (33, lambda p, ex, a, b, d: run(_plan("blas"), ex, a, b, None,
                                                               d)),
        "verify": (18, lambda p, ex, a, b, d: run(p, pytapp.Executor(device=device,
                                                                    verify=True), a, b, None,
                                                   d)),
    }


@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_errors_keep_codes_and_leave_d_untouched(device: str) -> None:
    ex = pytapp.Executor(device=device)
    for what, (code, call) in _errors(device).items():
        a, b, _, d = _operands(device)
        before = d.clone()
        with pytest.raises(pytapp.TappError) as err:
            call(_plan(), ex, a, b, d)
            raise AssertionError(f"{what}: no error")
        assert err.value.code == code, (what, err.value)
        assert torch.equal(d, before), what


@pytest.mark.skipif(CUDA, reason="checks the message where torch sees no CUDA device")
def test_a_cuda_executor_without_cuda_is_code_33() -> None:
    a, b, _, d = _operands("cpu")
    with pytest.raises(pytapp.ExecutorError) as err:
        _plan().execute(1.0, a, b, 0.0, None, d, pytapp.Executor(device="cuda:0"))
    assert err.value.code == 33 and "CUDA" in str(err.value)
    assert torch.equal(d, torch.full((3, 2), 7.0, dtype=torch.float64))


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_a_device_torch_does_not_see_is_code_33() -> None:
    a, b, _, d = _operands("cuda")
    with pytest.raises(pytapp.ExecutorError) as err:
        _plan().execute(1.0, a, b, 0.0, None, d, pytapp.Executor(device="cuda:99"))
    assert err.value.code == 33


@pytest.mark.parametrize(("target", "step", "mantissa"), [
    ("float16", 2.0 ** -10, 10), ("bfloat16", 2.0 ** -7, 7)])
def test_rounding_of_float64_to_16_bits_is_correct(target: str, step: float,
                                                   mantissa: int) -> None:
    rng = np.random.default_rng(0)
    values, want = [], []
    for _ in range(400):
        exponent = int(rng.integers(-8, 8))
        k = int(rng.integers(0, 2 ** mantissa))
        lo = (1 + k * step) * 2.0 ** exponent
        hi = (1 + (k + 1) * step) * 2.0 ** exponent
        gap = hi - lo
        for t, to in ((0.25, lo), (0.5 - 2.0 ** -30, lo), (0.5 + 2.0 ** -30, hi), (0.75, hi),
                      (0.5, lo if k % 2 == 0 else hi)):  # a tie goes to the even mantissa
            sign = -1.0 if rng.random() < 0.5 else 1.0
            values.append(sign * (lo + gap * t))
            want.append(sign * to)
    x = torch.tensor(values, dtype=torch.float64)
    got = torch_device.round_exactly(x, getattr(torch, target)).double().numpy()
    np.testing.assert_array_equal(got, np.array(want))
    plain = x.to(getattr(torch, target)).double().numpy()  # a cast rounds twice
    assert (plain != np.array(want)).any()


def test_tensor_info_from_a_tensor_reads_its_layout_not_its_memory() -> None:
    info = pytapp.TensorInfo.from_array(torch.empty(3, 4, device="meta").mT)
    assert (info.datatype, info.extents, info.strides) == (pytapp.Datatype.F32, (4, 3), (1, 4))


def test_contract_runs_device_tensors_on_their_device() -> None:
    meta = torch.empty(3, 4, dtype=torch.float64, device="meta")
    with pytest.raises(pytapp.ExecutorError) as err:  # routed to a device executor: refused
        pytapp.contract("ij,jk->ik", meta, torch.empty(4, 2, dtype=torch.float64, device="meta"))
    assert err.value.code == 33 and "meta" in str(err.value)


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_contract_on_cuda_tensors() -> None:
    a, b, c, d = _operands("cuda")
    got = pytapp.contract("ij,jk->ik", a, b, c, alpha=2.0, beta=0.5)
    assert got.is_cuda and got.dtype == torch.float64
    np.testing.assert_allclose(got.cpu().numpy(), 2.0 * a.cpu().numpy() @ b.cpu().numpy()
                               + 0.5 * c.cpu().numpy(), rtol=1e-13)
    assert pytapp.contract("ij,jk->ik", a, b, out=d) is d
    np.testing.assert_allclose(d.cpu().numpy(), a.cpu().numpy() @ b.cpu().numpy(), rtol=1e-13)
    with pytest.raises(pytapp.TappError) as err:
        pytapp.contract("ij,jk->ik", a, b, backend="blas")
    assert err.value.code == 33
