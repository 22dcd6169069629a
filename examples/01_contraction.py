"""Worked example: the TAPP paper's Case 1 and Case 2 examples, two ways.

Case 1:  D[d,c] = alpha * sum_{a,b} A[a,b,c] * B[b,d,a] + beta * C[d,c]
Case 2:  D[d,a] = alpha * sum_{b}   A[a,b]   * B[b,d,a] + beta * C[d,a]   (a is a Hadamard label)

First through the object API (handle, tensor infos, a plan executed twice), then through
``pytapp.contract``; both are checked against numpy.einsum.
"""

from __future__ import annotations

import numpy as np

import pytapp
from pytapp import Handle, TensorInfo, TensorProduct


def case1_object_api(rng: np.random.Generator) -> float:
    """Case 1 through Handle / TensorInfo / TensorProduct; returns the largest error."""
    na, nb, nc, nd = 4, 5, 6, 3
    a = rng.standard_normal((na, nb, nc))
    b = rng.standard_normal((nb, nd, na))
    c = rng.standard_normal((nd, nc))
    d = np.empty((nd, nc))
    alpha, beta = 0.5, 2.0
    with Handle() as handle:
        plan = TensorProduct(
            handle,
            TensorInfo.from_array(a), "abc",
            TensorInfo.from_array(b), "bda",
            TensorInfo.from_array(c), "dc",
            TensorInfo.from_array(d), "dc",
        )
        print(f"  plan: {plan!r}")
        worst = 0.0
        for _ in range(2):  # a plan is built once and executed many times
            status = plan.execute(alpha, a, b, beta, c, d)
            want = alpha * np.einsum("abc,bda->dc", a, b) + beta * c
            worst = max(worst, float(np.abs(d - want).max()))
            a = rng.standard_normal(a.shape)
        print(f"  status: backend={status.backend} algorithm={status.algorithm} "
              f"flops={status.flops}")
    return worst


def case2_contract(rng: np.random.Generator) -> float:
    """Case 2 (Hadamard label a) through pytapp.contract, complex with conjugated A."""
    a = rng.standard_normal((4, 5)) + 1j * rng.standard_normal((4, 5))
    b = rng.standard_normal((5, 3, 4)) + 1j * rng.standard_normal((5, 3, 4))
    c = rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))
    d = pytapp.contract("ab,bda->da", a, b, c, alpha=1 - 2j, beta=0.5,
                        op_a=pytapp.ElementOp.CONJUGATE)
    want = (1 - 2j) * np.einsum("ab,bda->da", a.conj(), b) + 0.5 * c
    return float(np.abs(d - want).max())


def main() -> None:
    """Run both examples and fail loudly if a result is wrong."""
    rng = np.random.default_rng(2024)
    print("Case 1 (simple contraction), object API:")
    err1 = case1_object_api(rng)
    print(f"  largest difference from numpy.einsum: {err1:.2e}")
    print("Case 2 (Hadamard + contraction), pytapp.contract, complex, conj(A):")
    err2 = case2_contract(rng)
    print(f"  largest difference from numpy.einsum: {err2:.2e}")
    if max(err1, err2) > 1e-12:
        raise SystemExit("results differ from numpy.einsum")
    print("both agree with numpy.einsum")


if __name__ == "__main__":
    main()
