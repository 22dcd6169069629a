"""pytapp as a backend of opt_einsum and cotengra, and their optimizers as pytapp's."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from einsum_cases import OPT_EINSUM, shapes_for
from einsum_oracle import make_operands

import pytapp

oe = pytest.importorskip("opt_einsum")

NETWORK = "acdf,jbje,gihb,hfac,gfac,gifabc,hfac->bj"


def test_opt_einsum_contract_with_backend_pytapp(check: Callable[..., None],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"tensordot": 0, "einsum": 0, "transpose": 0}
    for name in calls:
        original = getattr(pytapp, name)

        def counted(*args: object, _f: Callable[..., object] = original, _n: str = name,
                    **kwargs: object) -> object:
            calls[_n] += 1
            return _f(*args, **kwargs)

        monkeypatch.setattr(pytapp, name, counted)
    rng = np.random.default_rng(1)
    for equation, shapes in OPT_EINSUM:
        if any(s is None for s in shapes):
            continue  # opt_einsum's backends take arrays
        ops = make_operands(shapes, np.float64, rng)
        check(oe.contract(equation, *ops, backend="pytapp"), equation, ops, 1e-12)
    assert calls["tensordot"] > 0 and calls["einsum"] > 0


def test_opt_einsum_expression_with_backend_pytapp(check: Callable[..., None]) -> None:
    shapes = shapes_for(NETWORK)
    expr = oe.contract_expression(NETWORK, *shapes)
    rng = np.random.default_rng(2)
    for _ in range(2):
        ops = [rng.uniform(-1, 1, s) for s in shapes]
        check(expr(*ops, backend="pytapp"), NETWORK, ops, 1e-12)


def test_tensordot_and_transpose_match_numpy() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.uniform(size=(2, 3, 4)), rng.uniform(size=(4, 3, 5))
    for axes in (0, 1, ([1, 2], [1, 0]), (2, 0), ([-1], [0])):
        np.testing.assert_allclose(pytapp.tensordot(a, b, axes=axes),
                                   np.tensordot(a, b, axes=axes))
    for axes in (None, (2, 0, 1), (1, 2, 0)):
        np.testing.assert_array_equal(pytapp.transpose(a, axes), np.transpose(a, axes))
    with pytest.raises(pytapp.TappError):
        pytapp.transpose(a, (0, 0, 1))
    with pytest.raises(pytapp.TappError):
        pytapp.tensordot(a, b, axes=([0, 1], [0]))


def test_opt_einsum_path_optimizer_objects(check: Callable[..., None]) -> None:
    rng = np.random.default_rng(4)
    ops = [rng.uniform(-1, 1, s) for s in shapes_for(NETWORK)]
    for optimizer in (oe.paths.DynamicProgramming(), oe.RandomGreedy(max_repeats=8),
                      oe.paths.BranchBound(nbranch=2)):
        check(pytapp.einsum(NETWORK, *ops, optimize=optimizer), NETWORK, ops, 1e-12)


def test_cotengra_optimizer_and_implementation_hook(check: Callable[..., None]) -> None:
    ctg = pytest.importorskip("cotengra")
    rng = np.random.default_rng(5)
    shapes = shapes_for(NETWORK)
    ops = [rng.uniform(-1, 1, s) for s in shapes]
    opt = ctg.HyperOptimizer(max_repeats=4, methods=["greedy"], progbar=False)
    check(pytapp.einsum(NETWORK, *ops, optimize=opt), NETWORK, ops, 1e-12)
    inputs, output = NETWORK.split("->")
    tree = ctg.array_contract_tree(inputs.split(","), output, shapes=shapes)
    used = {"einsum": 0, "tensordot": 0}

    def einsum(*args: object, **kwargs: object) -> object:
        used["einsum"] += 1
        return pytapp.einsum(*args, **kwargs)

    def tensordot(*args: object, **kwargs: object) -> object:
        used["tensordot"] += 1
        return pytapp.tensordot(*args, **kwargs)

    got = tree.contract(ops, implementation=(einsum, tensordot))
    check(got, NETWORK, ops, 1e-12)
    assert used["einsum"] + used["tensordot"] >= len(shapes) - 1
    got = ctg.einsum(NETWORK, *ops, implementation=(pytapp.einsum, pytapp.tensordot))
    check(got, NETWORK, ops, 1e-12)


def test_einsum_expression_reuses_plans_and_buffers(check: Callable[..., None]) -> None:
    shapes = shapes_for(NETWORK)
    expr = pytapp.einsum_expression(NETWORK, *shapes)
    rng = np.random.default_rng(6)
    first = [rng.uniform(-1, 1, s) for s in shapes]
    check(expr(*first), NETWORK, first, 1e-12)
    buffers = {k: v.ctypes.data for k, v in expr.network._buffers.items()}
    for _ in range(3):
        ops = [rng.uniform(-1, 1, s) for s in shapes]
        check(expr(*ops), NETWORK, ops, 1e-12)
    assert {k: v.ctypes.data for k, v in expr.network._buffers.items()} == buffers
    c64 = [x.astype(np.complex64) for x in ops]
    check(expr(*c64), NETWORK, c64, 2e-5)
    with pytest.raises(pytapp.OperandMismatchError):
        expr(*ops[:-1])
    with pytest.raises(pytapp.OperandMismatchError):
        expr(*ops[:-1], np.ones((9, 9)))
    assert "path=" in repr(expr) and len(expr.path) == len(shapes) - 1


def test_one_expression_from_many_threads(check: Callable[..., None]) -> None:
    from concurrent.futures import ThreadPoolExecutor

    shapes = shapes_for(NETWORK)
    expr = pytapp.einsum_expression(NETWORK, *shapes)
    rng = np.random.default_rng(8)
    calls = [[rng.uniform(-1, 1, s) for s in shapes] for _ in range(16)]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda ops: expr(*ops), calls))
    for got, ops in zip(results, calls, strict=True):
        check(got, NETWORK, ops, 1e-12)


@pytest.mark.parametrize(("equation", "shapes"), [
    ("dacb,cdba,cabd,ad->cd", [(32, 96, 3, 64), (3, 32, 64, 96), (3, 96, 64, 32), (96, 32)]),
    (NETWORK, None),
])
def test_default_path_costs_no_more_than_greedy(check: Callable[..., None], equation: str,
                                                shapes: list[tuple[int, ...]] | None) -> None:
    # opt_einsum's 'auto' searched the first exhaustively and kept a path of 2.4M multiply-adds
    # where greedy finds 1.8M: the default takes the cheaper of the two
    shapes = shapes or shapes_for(equation)
    ops = make_operands(shapes, np.float64, np.random.default_rng(2))
    ours = pytapp.einsum_expression(equation, *shapes).path
    greedy = oe.contract_path(equation, *ops, optimize="greedy")[1].opt_cost
    mine = oe.contract_path(equation, *ops, optimize=ours)[1].opt_cost
    assert mine <= greedy
    check(pytapp.einsum(equation, *ops), equation, ops, 1e-12)
