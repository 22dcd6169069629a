"""Multi-TAPP: the same user code on every backend; torch tensors; clib; auto; autotuning."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pytapp
from pytapp import Datatype, Handle, TensorInfo, TensorProduct, backends

SCRIPT = """
import numpy as np, pytapp, sys
rng = np.random.default_rng(0)
a = rng.standard_normal((6, 5, 4))
b = rng.standard_normal((5, 7, 6))
c = rng.standard_normal((7, 4))
d = pytapp.contract("abc,bda->dc", a, b, c, alpha=0.5, beta=2.0)
np.save(sys.argv[1], d)
"""


def test_same_script_same_results_on_every_backend(tmp_path: Path,
                                                   every_backend: list[str]) -> None:
    results = {}
    for name in every_backend:
        env = dict(os.environ, PYTAPP_BACKEND=name)
        out = tmp_path / f"{name.split(':')[0]}.npy"
        subprocess.run([sys.executable, "-c", SCRIPT, str(out)], env=env, check=True)
        results[name] = np.load(out)
    rng = np.random.default_rng(0)
    a, b, c = rng.standard_normal((6, 5, 4)), rng.standard_normal((5, 7, 6)), \
        rng.standard_normal((7, 4))
    want = 0.5 * np.einsum("abc,bda->dc", a, b) + 2.0 * c
    assert len(results) >= 5
    for name, got in results.items():
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=name)


@pytest.mark.skipif(not backends.available()["torch"][0], reason="torch not installed")
def test_torch_tensors_are_accepted_zero_copy() -> None:
    import torch

    a = torch.randn(4, 3, dtype=torch.float64)
    b = torch.randn(3, 5, dtype=torch.float64)
    d = torch.zeros(4, 5, dtype=torch.float64)
    for name in ("torch", "blas"):
        pytapp.contract("ik,kj->ij", a, b, out=d, backend=name)
        np.testing.assert_allclose(d.numpy(), (a @ b).numpy(), rtol=1e-12)
        d.zero_()


@pytest.mark.skipif(not backends.available()["torch"][0], reason="torch not installed")
def test_torch_native_bf16_precision() -> None:
    import ml_dtypes

    rng = np.random.default_rng(1)
    a = rng.standard_normal((16, 32)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((32, 8)).astype(ml_dtypes.bfloat16)
    d = np.zeros((16, 8), dtype=ml_dtypes.bfloat16)  # native: the one rounding is into D
    h = Handle("torch")
    plan = TensorProduct(h, TensorInfo.from_array(a), "ik", TensorInfo.from_array(b), "kj",
                         None, None, TensorInfo.from_array(d), "ij",
                         prec=pytapp.Prectype.BF16BF16_ACCUM_F32)
    assert "bfloat16" in plan.algorithm
    plan.execute(1.0, a, b, 0.0, None, d)
    want = a.astype(np.float64) @ b.astype(np.float64)
    bound = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    assert np.all(np.abs(d.astype(np.float64) - want) <= 4 * 7.8e-3 * (32 + 4) * bound)
    # into F32 there is no native GEMM (it would round to BF16 first): F32 products instead
    wide = TensorProduct(h, TensorInfo.from_array(a), "ik", TensorInfo.from_array(b), "kj",
                         None, None, TensorInfo(Datatype.F32, (16, 8)), "ij",
                         prec=pytapp.Prectype.BF16BF16_ACCUM_F32)
    assert "bfloat16" not in wide.algorithm


def test_unsupported_products_are_declared() -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 4)).astype(np.float16)
    for name in ("tblis",):
        if not backends.available()[name][0]:
            continue
        with pytest.raises(pytapp.UnsupportedError) as err:
            pytapp.contract("ik,kj->ij", a, a.T.copy(), backend=name)
        assert "F16" in str(err.value)
    with pytest.raises(pytapp.PrecisionError):
        if backends.available()["torch"][0]:
            TensorProduct(Handle("torch"), TensorInfo(Datatype.F16, (2,)), "i",
                          TensorInfo(Datatype.F16, (2,)), "i", None, None,
                          TensorInfo(Datatype.F16, ()), "", prec=pytapp.Prectype.F16F16_ACCUM_F16)
        else:
            raise pytapp.PrecisionError("torch missing", 16)


def test_clib_bridge_runs_and_translates_errors(test_library: str) -> None:
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    d = np.zeros((3, 2))
    h = Handle("clib", library=test_library)
    assert h.get_attr(pytapp.Attr.LIBRARY) == test_library
    plan = TensorProduct(h, TensorInfo.from_array(a), "ik", TensorInfo.from_array(b), "kj",
                         None, None, TensorInfo.from_array(d), "ij")
    plan.execute(2.0, a, b, 0.0, None, d)
    np.testing.assert_allclose(d, 2 * a @ b, rtol=1e-13)
    f32 = TensorInfo(Datatype.F32, (3, 4))
    with pytest.raises(pytapp.UnsupportedError) as err:
        TensorProduct(h, f32, "ik", f32.with_extents((4, 2)), "kj", None, None,
                      f32.with_extents((3, 2)), "ij")
    assert "Only F64 and C64" in str(err.value)  # the library's own text


def test_clib_without_library_is_unavailable() -> None:
    env_free = {k: v for k, v in os.environ.items() if k != "PYTAPP_LIBRARY"}
    code = "import pytapp; pytapp.Handle('clib')"
    out = subprocess.run([sys.executable, "-c", code], env=env_free, capture_output=True,
                         text=True)
    assert out.returncode != 0 and "PYTAPP_LIBRARY" in out.stderr
    with pytest.raises(pytapp.UnsupportedError):
        Handle("clib", library="/no/such/libtapp.so")
    with pytest.raises(pytapp.UnsupportedError):
        Handle("blas", library="x.so")


def test_auto_records_choice_and_autotunes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytapp import wisdom
    from pytapp.backends import auto

    cache = tmp_path / "tune.json"
    monkeypatch.setenv("PYTAPP_WISDOM", str(cache))
    wisdom.forget()  # nothing remembered from earlier tests: this product is tuned here
    # every capable backend is a candidate, whatever this machine's measured constants predict
    monkeypatch.setattr(auto, "TUNE_WITHIN", float("inf"))
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((20, 30)), rng.standard_normal((30, 10))
    d = np.zeros((20, 10))
    h = Handle("auto")
    plan = TensorProduct(h, TensorInfo.from_array(a), "ik", TensorInfo.from_array(b), "kj",
                         None, None, TensorInfo.from_array(d), "ij")
    # The first choice follows this machine's measured constants; tuning then measures.
    assert plan.algorithm.split(":")[0] in ("auto -> blas", "auto -> torch", "auto -> tblis")
    status = plan.execute(1.0, a, b, 0.0, None, d, h.create_executor(autotune=True))
    np.testing.assert_allclose(d, a @ b, rtol=1e-12)
    chosen = status.backend
    assert chosen in ("blas", "torch", "tblis")
    saved = json.loads(cache.read_text())["entries"]["product"]
    assert [entry["choice"] for entry in saved.values()] == [chosen]
    wisdom.forget()  # a new process: reads the file
    again = TensorProduct(h, TensorInfo.from_array(a), "ik", TensorInfo.from_array(b), "kj",
                          None, None, TensorInfo.from_array(d), "ij")
    assert again.algorithm.startswith(f"auto -> {chosen}")


def _model_machine(monkeypatch: pytest.MonkeyPatch, rates: dict[str, dict[str, float]]) -> None:
    """auto's cost model on a machine of these GEMM rates and 10 GB/s; torch imported (its
    import cost is not what decides here), no wisdom file. Skips without torch."""
    if not backends.available()["torch"][0]:
        pytest.skip("torch not installed")
    import torch  # noqa: F401

    from pytapp.backends import auto
    from pytapp.machine import Machine

    monkeypatch.setattr(auto, "machine_constants", lambda: Machine("test", 1e10, rates, rates))
    monkeypatch.setenv("PYTAPP_WISDOM", "off")
    pytapp.wisdom.forget()


@pytest.mark.parametrize("native_faster", [True, False])
def test_auto_low_precision_follows_measured_rates(native_faster: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    torch_rates = {"bf16": 4e11 if native_faster else 2e10, "f32": 1e11}
    _model_machine(monkeypatch, {"numpy": {"f32": 1e11}, "torch": torch_rates})
    # Large enough that the rates decide, not each backend's per-call cost.
    n = 512
    info = TensorInfo(Datatype.BF16, (n, n))
    plan = TensorProduct(Handle("auto"), info, "ik", info, "kj", info, "ij", info, "ij")
    want = "torch" if native_faster else "blas"
    assert plan.algorithm.startswith(f"auto -> {want}"), plan.algorithm
    # torch's native product is exact only up to one rounding into D: calls with C or alpha
    # other than 1 go to blas. Small integers: every sum exact in F32, one rounding to BF16.
    bf16 = Datatype.BF16.numpy_dtype
    rng = np.random.default_rng(2)
    a, b, c = (rng.integers(-4, 5, (n, n)).astype(bf16) for _ in range(3))
    exact = np.einsum("ik,kj->ij", a.astype(np.float64), b.astype(np.float64))
    for alpha, beta, with_c, runs_on in ((1.0, 0.0, False, want), (2.0, 0.0, False, "blas"),
                                         (1.0, -3.0, True, "blas")):
        d = np.full((n, n), np.nan, bf16)
        status = plan.execute(alpha, a, b, beta, c if with_c else None, d)
        assert status.backend == runs_on and status.algorithm.startswith(f"auto -> {runs_on}")
        oracle = alpha * exact + (beta * c.astype(np.float64) if with_c else 0.0)
        np.testing.assert_array_equal(d.astype(np.float64), oracle.astype(bf16).astype(np.float64))


def test_auto_prices_low_precision_into_f32_at_torchs_f32_rate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """BF16 inputs with an F32 D: torch converts them and multiplies in F32 (no native GEMM)."""
    _model_machine(monkeypatch, {"numpy": {"f32": 1e11}, "torch": {"bf16": 1e13, "f32": 1e11}})
    info = TensorInfo(Datatype.BF16, (512, 512))
    plan = TensorProduct(Handle("auto"), info, "ik", info, "kj", None, None,
                         TensorInfo(Datatype.F32, (512, 512)), "ij")
    assert plan.algorithm.startswith("auto -> blas"), plan.algorithm


def test_auto_prices_torchs_conversion_of_what_blas_sums_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """BF16 A with an isolated label, and C: torch converts all of A to F32 (about a
    nanosecond a number, TORCH_CONVERT_SECONDS) then sums it; blas sums A straight from BF16
    and converts the sums. At equal F32 rates blas is the cheaper, and computes it exactly."""
    _model_machine(monkeypatch, {"numpy": {"f32": 1e11}, "torch": {"bf16": 1e10, "f32": 1e11}})
    bf16 = Datatype.BF16.numpy_dtype
    rng = np.random.default_rng(4)
    a = rng.integers(-4, 5, (96, 64, 48)).astype(bf16)
    b, c = rng.integers(-4, 5, (64, 80)).astype(bf16), rng.integers(-4, 5, (96, 80)).astype(bf16)
    d = np.full((96, 80), np.nan, bf16)
    info = TensorInfo.from_array
    plan = TensorProduct(Handle("auto"), info(a), "ikx", info(b), "kj", info(c), "ij",
                         info(d), "ij")
    assert plan.algorithm.startswith("auto -> blas"), plan.explain()
    plan.execute(0.5, a, b, -2.0, c, d)
    wide = np.float64
    want = 0.5 * np.einsum("ikx,kj->ij", a.astype(wide), b.astype(wide)) - 2.0 * c.astype(wide)
    np.testing.assert_array_equal(d.astype(wide), want.astype(bf16).astype(wide))


def test_tblis_conjugation_with_beta() -> None:
    """Regression: TBLIS mishandles conjugation flags with beta != 0 (extent-1 modes)."""
    if not backends.available()["tblis"][0]:
        pytest.skip("pytblis not installed")
    rng = np.random.default_rng(3)

    def cplx(*shape: int) -> np.ndarray:
        return (rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape)).astype(np.complex64)

    a, b, c = cplx(2, 1, 2, 1), cplx(1, 1, 2, 1), cplx(2, 1, 2)
    for op_a, op_b in ((1, 0), (0, 1), (1, 1)):
        d = np.zeros((2, 1, 2), dtype=np.complex64)
        pytapp.contract("npcd,DyNd->cyn", a, b, c, alpha=0.166 - 0.801j, beta=1.0, out=d,
                        op_a=op_a, op_b=op_b, backend="tblis")
        want = (0.166 - 0.801j) * np.einsum("npcd,DyNd->cyn", a.conj() if op_a else a,
                                             b.conj() if op_b else b) + c
        np.testing.assert_allclose(d, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["torch", "tblis"])
def test_executor_threads_are_restored(name: str) -> None:
    """An executor's thread count applies to its product only: the library's global setting
    is the same after the call as before."""
    if not backends.available()[name][0]:
        pytest.skip(f"{name} not installed")
    if name == "torch":
        import torch

        get = torch.get_num_threads
    else:
        import pytblis

        get = pytblis.get_num_threads
    before = get()
    a = np.arange(12.0).reshape(3, 4)
    b = np.arange(8.0).reshape(4, 2)
    d = np.zeros((3, 2))
    info = TensorInfo.from_array
    with Handle(name) as h:
        plan = TensorProduct(h, info(a), "ik", info(b), "kj", None, None, info(d), "ij")
        plan.execute(1.0, a, b, 0.0, None, d, h.create_executor(threads=1))
    np.testing.assert_array_equal(d, a @ b)
    assert get() == before


@pytest.mark.parametrize("prec", [pytapp.Prectype.DEFAULT, pytapp.Prectype.BF16BF16_ACCUM_F32])
@pytest.mark.parametrize("c_is_d", [True, False])
def test_torch_gemm_with_beta_fused(prec: pytapp.Prectype, c_is_d: bool) -> None:
    """torch's GEMM with C runs addmm with beta on D; C is rounded like A and B when the
    precision rounds inputs, also when C is D itself."""
    import ml_dtypes

    if not backends.available()["torch"][0]:
        pytest.skip("torch is not installed")
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 16, 24)).astype(np.float32)
    b = rng.standard_normal((3, 24, 8)).astype(np.float32)
    c = rng.standard_normal((3, 16, 8)).astype(np.float32)
    d = c.copy() if c_is_d else np.zeros_like(c)
    info = TensorInfo.from_array
    with Handle("torch") as h:
        plan = TensorProduct(h, info(a), "bik", info(b), "bkj", info(c), "bij", info(d), "bij",
                             prec=prec)
        plan.execute(0.75, a, b, -0.5, d if c_is_d else c, d)

    def rounded(x: np.ndarray) -> np.ndarray:
        if prec is pytapp.Prectype.DEFAULT:
            return x.astype(np.float64)
        return x.astype(ml_dtypes.bfloat16).astype(np.float64)

    want = 0.75 * np.einsum("bik,bkj->bij", rounded(a), rounded(b)) - 0.5 * rounded(c)
    np.testing.assert_allclose(d, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(("torch_rate", "want"), [(1.5e11, "blas"), (8e11, "torch")])
def test_auto_takes_another_pool_only_when_far_faster(torch_rate: float, want: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A TTGT product goes to torch's pool only when predicted OTHER_POOL_MARGIN times faster
    than on blas: a workload's other products run on OpenBLAS, whose idle threads and torch's
    slow each other."""
    if not backends.available()["torch"][0]:
        pytest.skip("torch not installed")
    import torch  # noqa: F401  (imported: its import cost is not what decides here)

    from pytapp.backends import auto
    from pytapp.machine import Machine

    assert 1.5 < auto.OTHER_POOL_MARGIN < 4
    rates = {"numpy": {"f64": 1e11}, "torch": {"f64": torch_rate}}
    # copies at 1e11 B/s: the GEMM rates decide (1.3 ms of GEMM on blas)
    monkeypatch.setattr(auto, "machine_constants", lambda: Machine("test", 1e11, rates, rates))
    monkeypatch.setenv("PYTAPP_WISDOM", "off")
    pytapp.wisdom.forget()
    shapes = {"ijab": (16, 32, 16, 32), "kjcb": (16, 32, 16, 32), "ikac": (16, 16, 16, 16)}
    infos = {k: TensorInfo(Datatype.F64, s) for k, s in shapes.items()}
    plan = TensorProduct(Handle("auto"), infos["ijab"], "ijab", infos["kjcb"], "kjcb", None,
                         None, infos["ikac"], "ikac")
    assert plan.algorithm.startswith(f"auto -> {want}"), plan.algorithm
    rng = np.random.default_rng(5)
    a, b = (rng.integers(-3, 4, shapes[k]).astype(np.float64) for k in ("ijab", "kjcb"))
    d = np.empty(shapes["ikac"])
    plan.execute(1.0, a, b, 0.0, None, d)
    assert np.array_equal(d, np.einsum("ijab,kjcb->ikac", a, b))


@pytest.mark.parametrize(("factor", "want"), [(1.2, "blas"), (0.8, "torch")])
def test_tuning_keeps_numpys_pool_unless_another_is_far_faster(factor: float, want: str) -> None:
    from pytapp.backends.auto import OTHER_POOL_MARGIN, pool_choice

    pools = {"blas": backends.pool_of("blas"), "torch": backends.pool_of("torch")}
    assert pools == {"blas": "blas", "torch": "torch"}
    torch_s = factor * 1e-3 / OTHER_POOL_MARGIN  # just outside / inside the margin
    assert pool_choice({"blas": 1e-3, "torch": torch_s}, pools) == want
    # blas on the home pool wins as soon as it is the faster
    assert pool_choice({"blas": 0.99e-3, "torch": 1e-3}, pools) == "blas"
    assert pool_choice({"torch": 1e-3}, pools) == "torch"  # nothing on the home pool


def test_model_prices_an_unimported_library_but_tuning_still_times_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The model's choice counts a library's import (torch: seconds) at any size; the
    predictions the tuner ranks its candidates by do not (its budget counts the import)."""
    from pytapp.analysis.spec import build_spec
    from pytapp.backends import auto
    from pytapp.datatypes import ElementOp
    from pytapp.machine import Machine
    from pytapp.precision import Prectype

    rates = {"numpy": {"f64": 1e11}, "torch": {"f64": 1e12}}  # torch 10x faster
    machine = Machine("test", 1e11, rates, rates)
    monkeypatch.setattr(backends, "import_seconds", lambda name: 2.0 if name == "torch" else 0.0)
    item = (Datatype.F64, (1024, 1024), (1024, 1))  # 2.1 ms of GEMM on torch, 21 on blas
    spec = build_spec(*(((*item, labels, ElementOp.IDENTITY)) for labels in
                        (("a", "b"), ("b", "c"), ("a", "c"), ("a", "c"))),
                      Prectype.DEFAULT, False)
    profile = backends.get("blas").plan(spec, None).profile  # what blas would do
    profile = dataclasses.replace(profile, route=None)  # priced as TTGT, not kept on blas
    per_call = auto.predictions(spec, ["blas", "torch"], profile, machine)
    assert 1e-3 < per_call["torch"] < 1e-2 < per_call["blas"] < 1.0  # no import in it
    priced = auto.predictions(spec, ["blas", "torch"], profile, machine, imports=True)
    assert priced["torch"] > 2.0 and priced["blas"] == per_call["blas"]
    assert auto.model_choice(spec, ["blas", "torch"], profile, machine) == "blas"
    monkeypatch.setattr(backends, "import_seconds", lambda name: 0.0)  # imported since
    assert auto.model_choice(spec, ["blas", "torch"], profile, machine) == "torch"
