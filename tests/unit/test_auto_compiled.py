"""auto's plan of a small product the compiled executor runs (``CompiledPlan``), against
numpy.einsum on integer-valued data (exact).

A small product on ``Handle("auto")`` runs compiled without pricing any candidate; operands the
program does not take (misaligned, another layout of the same shape, as_strided views, torch
tensors, any executor) run on blas's plan, made on the first such call only; ``explain()``
says what happens. The handle's MEMORY_LIMIT is checked against blas's real workspace, not the
upper bound the unplanned product reports; an autotuning executor times every candidate; and
``PYTAPP_AUTOTUNE=1`` at plan time prices the candidates at once (an ordinary auto plan).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pytapp
from pytapp import Attr, Handle, TensorInfo, TensorProduct, backends, wisdom
from pytapp.backends import auto
from pytapp.kernels import program

pytestmark = pytest.mark.skipif(not program.available(),
                                reason="the compiled extension pytapp._cexec was not built")

COMPILED = "auto -> blas: compiled"
DTYPES = (np.float32, np.float64, np.complex64, np.complex128)
#: Small products (equation, extents): plain and batched GEMMs, permuted operands, a
#: contraction of two labels at once.
PRODUCTS = {
    "matmul": ("ik,kj->ij", {"i": 4, "j": 3, "k": 5}),
    "batched": ("bik,bkj->bij", {"b": 3, "i": 4, "j": 2, "k": 5}),
    "permuted": ("kib,jkb->jib", {"b": 3, "i": 4, "j": 2, "k": 5}),
    "two summed": ("ijk,jkl->il", {"i": 6, "j": 7, "k": 8, "l": 9}),
}


@pytest.fixture(autouse=True)
def _no_wisdom(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Nothing remembered: auto decides from the product alone."""
    monkeypatch.setenv("PYTAPP_WISDOM", str(tmp_path / "wisdom.json"))
    monkeypatch.delenv("PYTAPP_AUTOTUNE", raising=False)
    wisdom.forget()
    yield
    wisdom.forget()


@pytest.fixture
def blas_plans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the plans the blas backend makes (one entry per plan)."""
    made: list[int] = []
    blas = type(backends.get("blas"))
    original = blas.plan

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        made.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(blas, "plan", counted)
    return made


def _ints(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    x = rng.integers(-3, 4, shape).astype(dtype)
    if np.dtype(dtype).kind == "c":
        x = (x + 1j * rng.integers(-3, 4, shape)).astype(dtype)
    return x


def _operands(name: str, dtype: Any = np.float64, seed: int = 0) -> tuple[
        str, np.ndarray, np.ndarray, np.ndarray]:
    """The product's equation, A, B and numpy.einsum's result (float64 or complex128)."""
    equation, extent = PRODUCTS[name]
    ta, tb = equation.split("->")[0].split(",")
    rng = np.random.default_rng(seed)
    a = _ints(rng, tuple(extent[x] for x in ta), dtype)
    b = _ints(rng, tuple(extent[x] for x in tb), dtype)
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    return equation, a, b, np.einsum(equation, a.astype(wide), b.astype(wide))


def _plan(equation: str, a: np.ndarray, b: np.ndarray, d: np.ndarray,
          handle: Handle | None = None) -> TensorProduct:
    ins, out = equation.split("->")
    la, lb = ins.split(",")
    info = TensorInfo.from_array
    return TensorProduct(handle or Handle("auto"), info(a), la, info(b), lb, None, None,
                         info(d), out)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("name", list(PRODUCTS))
def test_small_products_run_compiled_unpriced(name: str, dtype: Any,
                                              blas_plans: list[int]) -> None:
    equation, a, b, want = _operands(name, dtype)
    d = np.zeros(want.shape, dtype=dtype)
    plan = _plan(equation, a, b, d)
    assert plan.algorithm.startswith(COMPILED), plan.algorithm
    for _ in range(2):
        d[...] = 7
        status = plan.execute(1.0, a, b, 0.0, None, d)
        assert status.algorithm.startswith(COMPILED), status.algorithm
        np.testing.assert_array_equal(d, want)
    assert blas_plans == []  # nothing else planned, nothing priced
    text = plan.explain()
    assert text.startswith(f"{equation} (") and "on auto" in text.splitlines()[0]
    assert "auto chose blas:" in text and "not priced, not timed" in text
    assert "predicted" not in text


def _misaligned(x: np.ndarray) -> np.ndarray:
    raw = np.zeros(x.nbytes + 1, dtype=np.uint8)
    odd = raw[1:].view(x.dtype).reshape(x.shape)
    odd[...] = x
    assert not odd.flags.aligned
    return odd


def _other_layout(x: np.ndarray) -> np.ndarray:
    """The same shape, stored with the axes reversed (the plan's descriptor still says C
    order: it reads this memory as :func:`_as_read`)."""
    return np.ascontiguousarray(x.transpose()).transpose()


def _as_read(x: np.ndarray) -> np.ndarray:
    """What a C-order descriptor addresses in :func:`_other_layout`'s memory."""
    return np.ascontiguousarray(x.transpose()).reshape(x.shape)


#: Operands the program does not take: (A, B as passed) and (A, B as the descriptors read them).
FALLBACKS: dict[str, Callable[[np.ndarray, np.ndarray], tuple[Any, Any, Any, Any]]] = {
    "misaligned A": lambda a, b: (_misaligned(a), b, a, b),
    "B in another layout": lambda a, b: (a, _other_layout(b), a, _as_read(b)),
    "as_strided A": lambda a, b: (np.lib.stride_tricks.as_strided(a, a.shape, a.strides), b,
                                  a, b),
    "both": lambda a, b: (_misaligned(a), _other_layout(b), a, _as_read(b)),
}


@pytest.mark.parametrize("name", ["matmul", "permuted"])
def test_operands_the_program_does_not_take_run_blas_planned_once(
        name: str, blas_plans: list[int]) -> None:
    equation, a, b, want = _operands(name, seed=1)
    d = np.zeros(want.shape)
    plan = _plan(equation, a, b, d)
    plan.execute(1.0, a, b, 0.0, None, d)
    assert blas_plans == []
    for why, make in FALLBACKS.items():
        aa, bb, a_read, b_read = make(a, b)
        d[...] = 7
        status = plan.execute(1.0, aa, bb, 0.0, None, d)
        assert status.algorithm.startswith("auto -> blas: "), (why, status.algorithm)
        assert not status.algorithm.startswith(COMPILED), (why, status.algorithm)
        np.testing.assert_array_equal(d, np.einsum(equation, a_read, b_read), err_msg=why)
        assert blas_plans == [1], why  # made on the first call that needed it, then reused
    status = plan.execute(2.0, a, b, 0.0, None, d)  # the program again
    assert status.algorithm.startswith(COMPILED)
    np.testing.assert_array_equal(d, 2 * want)
    # an executor runs the backend's plan
    d[...] = 7
    status = plan.execute(1.0, a, b, 0.0, None, d, plan.handle.create_executor())
    assert status.algorithm.startswith("auto -> blas: ") and not status.algorithm.startswith(
        COMPILED)
    np.testing.assert_array_equal(d, want)
    assert blas_plans == [1]


def test_torch_tensors_run_blas() -> None:
    torch = pytest.importorskip("torch")
    equation, a, b, want = _operands("batched", seed=2)
    plan = _plan(equation, a, b, np.zeros(want.shape))
    d = torch.full(want.shape, 7.0, dtype=torch.float64)
    status = plan.execute(1.0, torch.from_numpy(a), torch.from_numpy(b), 0.0, None, d)
    assert status.algorithm.startswith("auto -> blas: ") and not status.algorithm.startswith(
        COMPILED)
    np.testing.assert_array_equal(d.numpy(), want)


def test_explain_before_any_fallback_and_after() -> None:
    equation, a, b, want = _operands("two summed", seed=3)
    d = np.zeros(want.shape)
    plan = _plan(equation, a, b, d)
    first = plan.explain()
    plan.execute(1.0, _misaligned(a), b, 0.0, None, d)
    np.testing.assert_array_equal(d, want)
    assert plan.explain() == first
    lines = first.splitlines()
    assert lines[1].startswith(COMPILED) and "exact layouts" in lines[1]
    assert lines[2].startswith("auto chose blas: ") and "not priced, not timed" in lines[2]
    assert lines[-1].startswith("workspace: ") and "flops: 6048" in lines[-1]


def _needs(name: str) -> tuple[int, int]:
    """(blas's real workspace, the upper bound an unplanned auto product reports)."""
    equation, a, b, want = _operands(name)
    real = _plan(equation, a, b, np.zeros(want.shape), Handle("blas")).workspace_bytes
    bound = 8 * (a.size + b.size + 2 * want.size)  # copies of A, B and D, and C converted
    return real, bound


def test_memory_limit_is_checked_against_the_real_workspace() -> None:
    name = "permuted"  # blas's plan copies: a real workspace, below the bound
    real, bound = _needs(name)
    assert 0 < real < bound
    equation, a, b, want = _operands(name, seed=4)
    h = Handle("auto")
    h.set_attr(Attr.MEMORY_LIMIT, (real + bound) // 2)  # below the bound, above the need
    d = np.zeros(want.shape)
    plan = _plan(equation, a, b, d, h)
    assert plan.algorithm.startswith(COMPILED)
    assert plan.workspace_bytes == real
    plan.execute(1.0, a, b, 0.0, None, d)
    np.testing.assert_array_equal(d, want)
    plan.execute(1.0, _misaligned(a), b, 0.0, None, d)  # blas's plan, within the limit
    np.testing.assert_array_equal(d, want)
    h.set_attr(Attr.MEMORY_LIMIT, real - 1)
    with pytest.raises(pytapp.TappError) as err:
        _plan(equation, a, b, d, h)
    assert err.value.code == 18 and "MEMORY_LIMIT" in str(err.value)


def test_memory_limit_without_copies() -> None:
    """A product blas runs on the operands where they lie: no workspace at all."""
    real, bound = _needs("matmul")
    assert real == 0 < bound
    equation, a, b, want = _operands("matmul", seed=5)
    h = Handle("auto")
    h.set_attr(Attr.MEMORY_LIMIT, 0)
    d = np.zeros(want.shape)
    plan = _plan(equation, a, b, d, h)
    assert plan.workspace_bytes == 0
    plan.execute(1.0, a, b, 0.0, None, d)
    np.testing.assert_array_equal(d, want)


def test_an_autotuning_executor_times_the_candidates(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    tunable = [n for n in auto.CANDIDATES
               if n != "reference" and pytapp.available_backends().get(n, (False,))[0]]
    if len(tunable) < 2:
        pytest.skip("one backend besides reference: nothing to time")
    monkeypatch.setattr(auto, "TUNE_WITHIN", float("inf"))  # every backend a candidate
    equation, a, b, want = _operands("batched", seed=6)
    d = np.zeros(want.shape)
    h = Handle("auto")
    plan = _plan(equation, a, b, d, h)
    assert plan.algorithm.startswith(COMPILED)
    status = plan.execute(1.0, a, b, 0.0, None, d, h.create_executor(autotune=True))
    np.testing.assert_array_equal(d, want)
    saved = json.loads((tmp_path / "wisdom.json").read_text())["entries"]["product"]
    [entry] = saved.values()
    assert entry["choice"] in tunable
    assert "blas" in entry["seconds"] and len(entry["seconds"]) >= 2  # timed, not only blas
    assert status.algorithm.startswith(f"auto -> {entry['choice']}: ")
    # later executions with the executor run the choice; without one, the program
    d[...] = 7
    again = plan.execute(1.0, a, b, 0.0, None, d, h.create_executor(autotune=True))
    assert again.algorithm.startswith(f"auto -> {entry['choice']}: ")
    np.testing.assert_array_equal(d, want)
    assert plan.execute(1.0, a, b, 0.0, None, d).algorithm.startswith(COMPILED)
    np.testing.assert_array_equal(d, want)


def test_autotune_policy_at_plan_time_prices_the_candidates(
        monkeypatch: pytest.MonkeyPatch) -> None:
    equation, a, b, want = _operands("matmul", seed=7)
    d = np.zeros(want.shape)
    monkeypatch.setenv("PYTAPP_AUTOTUNE", "auto")  # the default
    unpriced = _plan(equation, a, b, d).explain()
    assert "not priced, not timed" in unpriced and "predicted" not in unpriced
    monkeypatch.setenv("PYTAPP_AUTOTUNE", "1")
    plan = _plan(equation, a, b, d)
    text = plan.explain()
    assert "not priced" not in text and "predicted" in text
    status = plan.execute(1.0, a, b, 0.0, None, d)
    assert status.algorithm.startswith("auto -> ")
    np.testing.assert_array_equal(d, want)


def test_a_remembered_choice_is_planned_as_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wisdom about the product (an earlier tuning): an ordinary auto plan of that choice."""
    if not pytapp.available_backends()["torch"][0]:
        pytest.skip("torch is not installed")
    equation, a, b, want = _operands("matmul", seed=8)
    d = np.zeros(want.shape)
    plan = _plan(equation, a, b, d)
    wisdom.record("product", auto._key(plan.spec), {"choice": "torch", "seconds": {}})
    again = _plan(equation, a, b, d)
    assert again.algorithm.startswith("auto -> torch: ")
    status = again.execute(1.0, a, b, 0.0, None, d)
    assert status.algorithm.startswith("auto -> torch: ")
    np.testing.assert_allclose(d, want, rtol=1e-12, atol=1e-12)


def test_a_remembered_tblis_is_not_followed() -> None:
    """An older wisdom file's tblis: the model decides instead (tblis runs only when forced)."""
    equation, a, b, want = _operands("matmul", seed=9)
    d = np.zeros(want.shape)
    plan = _plan(equation, a, b, d)
    wisdom.record("product", auto._key(plan.spec), {"choice": "tblis", "seconds": {}})
    again = _plan(equation, a, b, d)
    assert not again.algorithm.startswith("auto -> tblis")
    again.execute(1.0, a, b, 0.0, None, d)
    np.testing.assert_array_equal(d, want)
