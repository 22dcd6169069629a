"""The result layout tried both ways on an auto einsum's own calls (wisdom.Trial).

A free result layout is the last GEMM's (A's free labels, then B's); the transposed GEMM
writes B's first. auto expressions whose last step is large alternate the two over the calls
the program makes, keep the faster, and record it in the machine's wisdom. Every result is
checked against numpy.einsum on exact integer data, whichever layout wrote it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import pytapp
from pytapp import direct, machine, network, numpy_api, wisdom
from pytapp.datatypes import datatype_of
from pytapp.expression import EinsumExpression, forget_expressions


def _ints(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-4, 5, shape).astype(np.float64)


@pytest.fixture(autouse=True)
def _small_trials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Trials on small products, a wisdom file of this test's own, no remembered calls, a
    machine whose BLAS writes thin results as fast either way (so thin ones are tried too)."""
    from pytapp.machine import Machine

    monkeypatch.setattr(machine, "constants", lambda: Machine("even"))
    monkeypatch.setattr(network, "FLIP_MIN_FLOPS", 1)
    monkeypatch.setattr(direct, "DIRECT_MAX_FLOPS", 0)  # planned at once, as large products are
    monkeypatch.setenv("PYTAPP_WISDOM", str(tmp_path / "wisdom.json"))
    monkeypatch.delenv("PYTAPP_AUTOTUNE", raising=False)
    monkeypatch.delenv("PYTAPP_BACKEND", raising=False)
    wisdom.forget()
    forget_expressions()
    for name in ("_pairs", "_thin", "_chains", "_tensordot_calls"):
        monkeypatch.setattr(numpy_api, name, {})


def _run_trial(trial: wisdom.Trial, seconds: dict[int, float]) -> list[int]:
    picks = []
    while trial.winner is None:
        k = trial.pick()
        picks.append(k)
        trial.add(k, seconds[k])
    return picks


def test_trial_alternates_after_the_model_choice_and_keeps_the_least() -> None:
    close = 1.05  # within TRIAL_MARGIN: every candidate gets all its timed calls
    assert close < wisdom.TRIAL_MARGIN
    picks = _run_trial(wisdom.Trial(2), {0: 1e-3, 1: close * 1e-3})
    after = wisdom.TRIAL_AFTER
    assert picks[:after] == [0] * after  # the model's choice first, no other plan yet
    assert picks[after] == 1  # then the other, whose first call plans it
    assert picks[after:] == [1, 0] * wisdom.TRIAL_SAMPLES + [1]
    trial = wisdom.Trial(2)
    _run_trial(trial, {0: 1e-3, 1: close * 1e-3})
    assert trial.winner == 0
    trial = wisdom.Trial(2)
    _run_trial(trial, {0: close * 1e-3, 1: 1e-3})
    assert trial.winner == 1
    assert trial.pick() == 1 and trial.add(0, 0.0) == 1  # decided: nothing changes it


@pytest.mark.parametrize("slow", [0, 1])
def test_trial_drops_a_clearly_slower_candidate_on_its_first_timed_call(slow: int) -> None:
    seconds = {slow: 1.4e-3, 1 - slow: 1e-3}  # the 1.35-1.6x a transposed GEMM measured
    trial = wisdom.Trial(2)
    picks = _run_trial(trial, seconds)
    assert trial.winner == 1 - slow
    after = wisdom.TRIAL_AFTER
    # the other's planning call, then one timed call of each: no more slow calls
    assert picks == [0] * after + [1, 0, 1]
    assert trial.best == [seconds[0], seconds[1]]


def test_trial_ignores_the_calls_that_plan() -> None:
    trial = wisdom.Trial(2)
    # candidate 1's first call plans it, slowly; then each alternates, 1 just inside the margin
    near = 0.95 * wisdom.TRIAL_MARGIN * 5e-4
    times = iter([1e-3, 1e-3, 9.0] + [5e-4, near] * wisdom.TRIAL_SAMPLES)
    while trial.winner is None:
        trial.add(trial.pick(), next(times))
    assert trial.winner == 0
    assert trial.best == [5e-4, near]
    assert next(times, None) is None  # decided on the last timed call


def test_trial_of_three_candidates() -> None:
    trial = wisdom.Trial(3)
    picks = _run_trial(trial, {0: 1.1e-3, 1: 1.05e-3, 2: 1e-3})
    assert trial.winner == 2
    assert {picks.count(k) for k in (1, 2)} == {wisdom.TRIAL_SAMPLES + 1}


def test_trial_of_three_drops_the_slow_one_and_goes_on_with_the_rest() -> None:
    trial = wisdom.Trial(3)
    picks = _run_trial(trial, {0: 1.05e-3, 1: 5e-3, 2: 1e-3})
    assert trial.winner == 2
    assert trial.alive == [0, 2]
    assert picks.count(1) == 2  # its planning call and one timed call
    assert picks.count(2) == wisdom.TRIAL_SAMPLES + 1


def _labels_of(result: np.ndarray) -> tuple[int, ...]:
    return tuple(np.argsort(result.strides)[::-1])


def test_flipped_network_writes_the_transposed_gemm() -> None:
    from pytapp.analysis.subscripts import parse_subscripts

    eq = parse_subscripts("ijk,kl->lij", [3, 2])
    net = network.Network(eq, [(4, 5, 6), (6, 7)], free_layout=True)
    other = net.flipped()
    assert other is not None and other.flip_final
    assert net.steps[-1].out_labels == "ijl" and other.steps[-1].out_labels == "lij"
    assert other.path == net.path
    assert other.flipped() is not None and not other.flipped().flip_final  # type: ignore[union-attr]
    # nothing to flip: fixed layout, a GEMV, a one-operand network
    assert network.Network(eq, [(4, 5, 6), (6, 7)]).flipped() is None
    gemv = parse_subscripts("ijk,k->ij", [3, 1])
    assert network.Network(gemv, [(4, 5, 6), (6,)], free_layout=True).flipped() is None
    one = parse_subscripts("ij->ji", [2])
    assert network.Network(one, [(4, 5)], free_layout=True).flipped() is None


def test_flipped_needs_a_large_last_step(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytapp.analysis.subscripts import parse_subscripts

    eq = parse_subscripts("ik,kj->ij", [2, 2])
    net = network.Network(eq, [(8, 8), (8, 8)], free_layout=True)
    monkeypatch.setattr(network, "FLIP_MIN_FLOPS", 2 * 8**3)
    assert net.flipped() is not None
    monkeypatch.setattr(network, "FLIP_MIN_FLOPS", 2 * 8**3 + 1)
    assert net.flipped() is None


@pytest.mark.parametrize(("eq", "shapes"), [
    ("ik,jk->ij", [(24, 16), (20, 16)]),
    ("ijef,abef->ijab", [(3, 4, 5, 6), (7, 2, 5, 6)]),
    ("bij,bjk->kbi", [(3, 8, 5), (3, 5, 9)]),
    ("ij,jk,kl->li", [(6, 7), (7, 8), (8, 9)]),
    ("ac,ijcb->ijab", [(5, 6), (3, 4, 6, 7)]),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_einsum_right_in_both_layouts_and_settles(eq: str, shapes: list[tuple[int, ...]],
                                                  dtype: type) -> None:
    ops = [_ints(s, i).astype(dtype) for i, s in enumerate(shapes)]
    if np.iscomplexobj(ops[0]):
        ops = [x + 1j * _ints(x.shape, 9 + i) for i, x in enumerate(ops)]
    wide = np.complex128 if np.iscomplexobj(ops[0]) else np.float64
    want = np.einsum(eq, *[x.astype(wide) for x in ops])
    layouts = set()
    for _ in range(wisdom.TRIAL_AFTER + 2 * (wisdom.TRIAL_SAMPLES + 1) + 3):
        got = pytapp.einsum(eq, *ops)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, want.astype(dtype))
        layouts.add(_labels_of(got))
    assert len(layouts) == 2  # both layouts ran
    expr = numpy_api._thin[next(iter(numpy_api._thin))]
    assert expr._trial is None  # decided
    known = wisdom.lookup("layout", expr._key(datatype_of(dtype)))
    assert known["flipped"] is expr.network.flip_final
    # from now on the winner's layout, through the compiled chain where there is one
    final = {_labels_of(pytapp.einsum(eq, *ops)) for _ in range(3)}
    assert len(final) == 1


def test_expression_with_out_runs_no_trial() -> None:
    a, b = _ints((12, 8), 0), _ints((10, 8), 1)
    expr = EinsumExpression("ik,jk->ij", a.shape, b.shape)
    out = np.empty((12, 10))
    for _ in range(10):
        expr(a, b, out=out)
        np.testing.assert_array_equal(out, a @ b.T)
    assert expr._trial is not None and expr._trial.calls == 0


@pytest.mark.parametrize("how", ["backend", "autotune-off"])
def test_no_trial_when_a_backend_is_forced_or_tuning_is_off(
        how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if how == "autotune-off":
        monkeypatch.setenv("PYTAPP_AUTOTUNE", "0")
    backend = "blas" if how == "backend" else None
    expr = EinsumExpression("ik,jk->ij", (12, 8), (10, 8), backend=backend)
    assert expr._trial is None
    a, b = _ints((12, 8), 0), _ints((10, 8), 1)
    for _ in range(8):
        got = expr(a, b)
        np.testing.assert_array_equal(got, a @ b.T)
        assert got.strides == (80, 8)  # always the natural layout


def test_recorded_layout_is_used_without_a_trial() -> None:
    a, b = _ints((12, 8), 0), _ints((10, 8), 1)
    first = EinsumExpression("ik,jk->ij", a.shape, b.shape)
    key = first._key(pytapp.Datatype.F64)
    wisdom.record("layout", key, {"flipped": True, "seconds": [1.0, 0.5]})
    wisdom.forget()  # read back from the file, as another process would
    expr = EinsumExpression("ik,jk->ij", a.shape, b.shape)
    got = expr(a, b)
    np.testing.assert_array_equal(got, a @ b.T)
    assert got.strides == (8, 96)  # j first: the transposed GEMM's layout
    assert expr._trial is None and expr.network.flip_final


def test_threads_sharing_one_expression_during_its_trial() -> None:
    from concurrent.futures import ThreadPoolExecutor

    a, b = _ints((40, 30), 0), _ints((50, 30), 1)
    want = a @ b.T
    expr = EinsumExpression("ik,jk->ij", a.shape, b.shape)

    def call(_: int) -> bool:
        return bool(np.array_equal(expr(a, b), want))

    with ThreadPoolExecutor(16) as pool:
        assert all(pool.map(call, range(400)))
    assert expr._trial is None


@pytest.mark.parametrize("tall_over_wide", [1.5, 0.6, 1.05])
@pytest.mark.parametrize(("eq", "shapes", "thin", "rows_if_tall", "rows_if_wide"), [
    ("ik,kj->ij", [(8, 5), (5, 40)], True, 40, 8),  # natural: 8 rows of 40, wide
    ("ik,kj->ij", [(40, 5), (5, 8)], True, 40, 8),  # natural: 40 rows of 8, tall
    ("ik,kj->ij", [(20, 5), (5, 30)], False, None, None),  # 20 x 30: not thin
])
def test_thin_result_takes_the_machine_layout_without_a_trial(
        tall_over_wide: float, eq: str, shapes: list[tuple[int, ...]], thin: bool,
        rows_if_tall: int | None, rows_if_wide: int | None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A thin last GEMM (one free extent FLIP_ASPECT times the other) writes its result in
    the orientation the machine's BLAS measured faster, from the first call, when the
    measurement is clear (tall_over_wide outside 1/1.1 .. 1.1); otherwise both are tried."""
    from pytapp.machine import Machine

    monkeypatch.setattr(machine, "constants",
                        lambda: Machine("test", orientation={"f64": tall_over_wide}))
    ops = [_ints(s, i) for i, s in enumerate(shapes)]
    want = np.einsum(eq, *ops)
    expr = EinsumExpression(eq, *shapes)
    got = expr(*ops)
    np.testing.assert_array_equal(got, want)
    decided = thin and tall_over_wide != 1.05
    assert (expr._trial is None) is decided  # decided on the first call, or tried
    for _ in range(3):
        got = expr(*ops)
        np.testing.assert_array_equal(got, want)
    if decided:
        rows = got.shape[int(np.argmax(got.strides))]  # the axis of the larger stride
        assert rows == (rows_if_tall if tall_over_wide < 1 else rows_if_wide)


def test_a_recorded_layout_wins_over_the_machine_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a trial measured and kept in the wisdom file decides before the machine constant."""
    from pytapp.machine import Machine

    eq, shapes = "ik,kj->ij", [(8, 5), (5, 40)]
    ops = [_ints(s, i) for i, s in enumerate(shapes)]
    monkeypatch.setattr(machine, "constants", lambda: Machine("even"))
    first = EinsumExpression(eq, *shapes)
    while first._trial is not None:  # the trial decides and records its layout
        first(*ops)
    kept_rows = first(*ops).shape[int(np.argmax(first(*ops).strides))]
    for ratio in (1.5, 0.6):  # either clear preference: the recorded layout still wins
        monkeypatch.setattr(machine, "constants",
                            lambda ratio=ratio: Machine("test", orientation={"f64": ratio}))
        again = EinsumExpression(eq, *shapes)
        got = again(*ops)
        np.testing.assert_array_equal(got, np.einsum(eq, *ops))
        assert got.shape[int(np.argmax(got.strides))] == kept_rows


@pytest.mark.parametrize(("tall_over_wide", "out_labels"), [
    (1.5, "ijab"),   # wide written faster: B's free label (12) first, then A's (jab)
    (0.6, "jabi"),   # tall written faster: A's free labels first, then B's
    (1.05, "jabi"),  # no clear preference: the GEMM's natural order, A's first
])
def test_thin_last_gemm_of_any_size_takes_the_machine_orientation(
        tall_over_wide: float, out_labels: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A free layout's thin last GEMM (kjab,ki->ijab: 12 rows against 360) is written in the
    orientation the machine's BLAS measured faster in its datatype, at any size (no trial);
    another datatype's measurement does not count."""
    from pytapp.analysis.subscripts import parse_subscripts
    from pytapp.machine import Machine

    monkeypatch.setattr(machine, "constants", lambda: Machine(
        "test", orientation={"f64": tall_over_wide, "f32": 1 / tall_over_wide}))
    monkeypatch.setattr(network, "FLIP_MIN_FLOPS", 1 << 30)  # this module's fixture lowers it
    eq, shapes = "kjab,ki->ijab", [(4, 3, 10, 12), (4, 12)]
    parsed = parse_subscripts(eq, [4, 2])
    net = network.Network(parsed, shapes, free_layout=True, layout_dtype=pytapp.Datatype.F64)
    assert net.flipped() is None  # far below FLIP_MIN_FLOPS: no trial either way
    assert net.steps[-1].out_labels == out_labels
    assert net.flip_final is (out_labels == "ijab")
    f32 = network.Network(parsed, shapes, free_layout=True, layout_dtype=pytapp.Datatype.F32)
    assert f32.flip_final is (tall_over_wide == 0.6)  # F32's preference is the other one
    unknown = network.Network(parsed, shapes, free_layout=True)  # no datatype: natural
    assert unknown.steps[-1].out_labels == "jabi"
    fixed = network.Network(parsed, shapes)  # the layout asked for
    assert fixed.steps[-1].out_labels == "ijab" and not fixed.flip_final
    ops = [_ints(s, i) for i, s in enumerate(shapes)]
    for got in (EinsumExpression(eq, *ops)(*ops), pytapp.einsum(eq, *ops)):
        np.testing.assert_array_equal(got, np.einsum(eq, *ops))
        rows = got.shape[int(np.argmax(got.strides))]
        assert rows == (12 if out_labels == "ijab" else 3)  # i, or j of jab
    f32_ops = [x.astype(np.float32) for x in ops]  # the same call in F32: its own layout
    got = pytapp.einsum(eq, *f32_ops)
    np.testing.assert_array_equal(got, np.einsum(eq, *ops).astype(np.float32))
    assert got.shape[int(np.argmax(got.strides))] == (12 if tall_over_wide == 0.6 else 3)


def test_batched_thin_last_gemm_keeps_its_natural_orientation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The orientation probe measured a plain GEMM; batched ones (bqd,bvd->bqv) differ: they
    keep the GEMM's natural order unless a trial measures them."""
    from pytapp.analysis.subscripts import parse_subscripts
    from pytapp.machine import Machine

    monkeypatch.setattr(machine, "constants",
                        lambda: Machine("test", orientation={"f64": 2.0}))
    eq = parse_subscripts("bqd,bvd->bqv", [3, 3])
    net = network.Network(eq, [(3, 64, 8), (3, 4, 8)], free_layout=True,
                          layout_dtype=pytapp.Datatype.F64)
    assert net.final_batched() and not net.flip_final


@pytest.mark.parametrize(("k", "out_labels"), [
    (4, "jabi"),     # short sum: tall measured faster, A's free labels (jab: 360) first
    (2000, "ijab"),  # long sum: wide measured faster, B's free label (i: 12) first
])
def test_the_orientation_follows_the_length_of_the_sum(
        k: int, out_labels: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The preference measured for the last GEMM's sum decides: a short sum here prefers the
    tall result, a long one the wide."""
    from pytapp.analysis.subscripts import parse_subscripts
    from pytapp.machine import Machine

    monkeypatch.setattr(machine, "constants", lambda: Machine(
        "test", orientation={"f64": 1.5, "f64@16": 0.5, "f64@64": 0.6, "f64@256": 1.5}))
    monkeypatch.setattr(network, "FLIP_MIN_FLOPS", 1 << 40)  # no trial: the machine decides
    eq, shapes = "kjab,ki->ijab", [(k, 3, 10, 12), (k, 12)]
    net = network.Network(parse_subscripts(eq, [4, 2]), shapes, free_layout=True,
                          layout_dtype=pytapp.Datatype.F64)
    assert net.final_sum() == k
    assert net.steps[-1].out_labels == out_labels


def test_a_trial_of_compiled_routes_drops_a_hopeless_candidate_on_its_first_call() -> None:
    """With ``cold`` (routes compiled beforehand: a first call plans nothing), a candidate
    whose first call takes more than that many times another's least call is dropped then:
    one slow call, not two. Within the margin, or without ``cold``, it gets its timed calls."""
    cold = wisdom.TRIAL_COLD_MARGIN
    after = wisdom.TRIAL_AFTER
    trial = wisdom.Trial(2, cold=cold)
    picks = _run_trial(trial, {0: 1e-3, 1: 1.2 * cold * 1e-3})
    assert trial.winner == 0 and trial.alive == [0]
    assert picks == [0] * after + [1]
    trial = wisdom.Trial(2, cold=cold)
    picks = _run_trial(trial, {0: 1e-3, 1: 0.8 * cold * 1e-3})  # slow, yet within the margin
    assert trial.winner == 0 and picks == [0] * after + [1, 0, 1]
    trial = wisdom.Trial(2)  # first calls that plan (expressions): never judged
    picks = _run_trial(trial, {0: 1e-3, 1: 1.2 * cold * 1e-3})
    assert trial.winner == 0 and picks == [0] * after + [1, 0, 1]
    trial = wisdom.Trial(2, cold=cold)  # the other one faster: as before
    _run_trial(trial, {0: 1e-3, 1: 0.5e-3})
    assert trial.winner == 1
