"""quimb's two-site DMRG with its contractions routed to pytapp, against quimb on NumPy.

Routes: autoray's registry (``tensordot``, ``einsum`` and ``transpose`` of NumPy arrays
registered to pytapp's: every call quimb makes through autoray), cotengra's implementation hook
(``set_default_implementation((pytapp.einsum, pytapp.tensordot))``: every contraction cotengra
runs), and both. Each route's energy agrees with quimb's on NumPy to 1e-10, NumPy's agrees
with exact diagonalization of the chain, every route really calls pytapp, and everything is
restored afterwards.
"""

from __future__ import annotations

import importlib
import itertools
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import autoray
import numpy as np
import pytest
import quimb.tensor as qtn

import pytapp

SITES = 10
ROUTED = ("tensordot", "einsum", "transpose")
#: cotengra's contract module (``cotengra.contract`` the attribute is its function).
HOOK = importlib.import_module("cotengra.contract")
INTERFACE = importlib.import_module("cotengra.interface")


def _solve() -> float:
    ham = qtn.MPO_ham_heis(L=SITES)
    dmrg = qtn.DMRG2(ham, p0=qtn.MPS_rand_state(SITES, bond_dim=8, seed=7), bond_dims=[8, 16],
                     cutoffs=1e-10)
    dmrg.solve(max_sweeps=4, tol=1e-12, verbosity=0)
    return float(np.real(dmrg.energy))


def _exact_energy() -> float:
    """Ground energy of the open Heisenberg chain (S = 1/2, J = 1), from its Sz = 0 sector
    (the ground state of an even chain is a singlet): 252 states, diagonalized densely."""
    states = [s for s in itertools.product((0, 1), repeat=SITES) if sum(s) == SITES // 2]
    index = {s: k for k, s in enumerate(states)}
    h = np.zeros((len(states), len(states)))
    for k, s in enumerate(states):
        for i in range(SITES - 1):
            if s[i] == s[i + 1]:
                h[k, k] += 0.25
            else:
                h[k, k] -= 0.25
                flipped = list(s)
                flipped[i], flipped[i + 1] = s[i + 1], s[i]
                h[index[tuple(flipped)], k] += 0.5
    return float(np.linalg.eigvalsh(h)[0])


@pytest.fixture(scope="module")
def numpy_energy() -> float:
    return _solve()


def _counted(name: str, calls: Counter[str]) -> Callable[..., Any]:
    function = getattr(pytapp, name)

    def call(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return function(*args, **kwargs)

    return call


@contextmanager
def _registry(calls: Counter[str]) -> Iterator[None]:
    saved = {name: autoray.get_lib_fn("numpy", name) for name in ROUTED}
    for name in ROUTED:
        autoray.register_function("numpy", name, _counted(name, calls))
    try:
        yield
    finally:
        for name, function in saved.items():
            autoray.register_function("numpy", name, function)


@contextmanager
def _cotengra(calls: Counter[str]) -> Iterator[None]:
    """The hook set, and a fresh cache of cotengra's contraction expressions: each keeps the
    implementation it was built with (the hook's when built here; NumPy's when an earlier
    run of the same shapes built it), so both hook and cache are restored afterwards."""
    saved = HOOK.get_default_implementation()
    saved_cache = INTERFACE._CONTRACT_EXPR_CACHE
    INTERFACE._CONTRACT_EXPR_CACHE = {}
    HOOK.set_default_implementation((_counted("einsum", calls), _counted("tensordot", calls)))
    try:
        yield
    finally:
        HOOK.set_default_implementation(saved)
        INTERFACE._CONTRACT_EXPR_CACHE = saved_cache


def test_numpy_energy_is_the_chains(numpy_energy: float) -> None:
    """The reference run converged: the comparisons below are of ground energies."""
    assert abs(numpy_energy - _exact_energy()) < 1e-7


@pytest.mark.parametrize("route", ["registry", "cotengra", "both"])
def test_dmrg_routed_to_pytapp(route: str, numpy_energy: float) -> None:
    before = ({name: autoray.get_lib_fn("numpy", name) for name in ROUTED},
              HOOK.get_default_implementation())
    calls: Counter[str] = Counter()
    with ExitStack() as routes:
        if route != "cotengra":
            routes.enter_context(_registry(calls))
        if route != "registry":
            routes.enter_context(_cotengra(calls))
        energy = _solve()
    assert abs(energy - numpy_energy) < 1e-10
    if route != "cotengra":  # quimb's own calls: tensordot and transpose
        assert calls["tensordot"] > 0 and calls["transpose"] > 0, calls
    if route != "registry":  # cotengra's contractions: pairwise tensordots here
        assert calls["tensordot"] + calls["einsum"] > 0, calls
    after = ({name: autoray.get_lib_fn("numpy", name) for name in ROUTED},
             HOOK.get_default_implementation())
    assert after == before  # restored
    assert after[0]["tensordot"] is np.tensordot and after[1] == "auto"
    settled = sum(calls.values())
    _solve()  # quimb on NumPy again: nothing reaches pytapp
    assert sum(calls.values()) == settled
