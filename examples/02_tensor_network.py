"""A tensor network: the norm of a matrix product state (MPS), contracted with a chosen path.

<psi|psi> for an open-boundary MPS of L sites, physical dimension d and bond dimension chi,
as one einsum of 2L tensors. The path comes from opt_einsum ("greedy" here); pytapp runs each
pairwise step as a TAPP product. Timed against opt_einsum with NumPy on the same path, and
checked against numpy.einsum.
"""

from __future__ import annotations

import string
import time

import numpy as np
import opt_einsum

import pytapp


def mps_network(sites: int, d: int, chi: int,
                rng: np.random.Generator) -> tuple[str, list[np.ndarray]]:
    """The equation and the tensors of <psi|psi> (the ket and its conjugate bra)."""
    letters = iter(string.ascii_letters)
    bonds_ket = [next(letters) for _ in range(sites - 1)]
    bonds_bra = [next(letters) for _ in range(sites - 1)]
    phys = [next(letters) for _ in range(sites)]
    terms, tensors = [], []
    for side, bonds in (("ket", bonds_ket), ("bra", bonds_bra)):
        for i in range(sites):
            left = bonds[i - 1] if i > 0 else ""
            right = bonds[i] if i < sites - 1 else ""
            terms.append(left + phys[i] + right)
            shape = [chi] * (i > 0) + [d] + [chi] * (i < sites - 1)
            t = rng.standard_normal(shape) + 1j * rng.standard_normal(shape) if side == "ket" \
                else np.empty(shape, dtype=complex)
            tensors.append(t)
    half = len(tensors) // 2
    tensors[half:] = [t.conj() for t in tensors[:half]]
    return ",".join(terms) + "->", tensors


def best_of(fn: object, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> float:
    rng = np.random.default_rng(0)
    equation, tensors = mps_network(sites=10, d=2, chi=24, rng=rng)
    path, info = pytapp.einsum_path(equation, *tensors, optimize="greedy")
    print(f"{len(tensors)} tensors, {len(path) - 1} pairwise TAPP products")
    print("\n".join(str(info).splitlines()[:12]))
    expr = pytapp.einsum_expression(equation, *tensors, optimize=path)
    norm = expr(*tensors)
    ref = np.einsum(equation, *tensors, optimize=path)
    error = abs(norm - ref) / abs(ref)
    t_pytapp = best_of(lambda: expr(*tensors))
    t_oe = best_of(lambda: opt_einsum.contract(equation, *tensors, optimize=path[1:]))
    print(f"<psi|psi> = {norm.real:.6e}   relative error vs numpy.einsum: {error:.1e}")
    print(f"pytapp {t_pytapp * 1e3:.2f} ms, opt_einsum (numpy) {t_oe * 1e3:.2f} ms, same path")
    assert error < 1e-10
    return float(error)


if __name__ == "__main__":
    main()
