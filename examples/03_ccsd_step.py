"""A CCSD-like amplitude update: the particle-particle ladder and ring terms of the doubles
residual, as einsums over TAPP products.

    R[a,b,i,j] = sum_{c,d} V[a,b,c,d] T2[c,d,i,j]                      (ladder)
               + sum_{k,c} W[k,b,c,j] T2[a,c,i,k]                      (ring)
               + sum_{k,l,c,d} V[k,l,c,d] T2[c,d,i,j] T2[a,b,k,l] / 4   (quadratic)

then the update T2 += R / D with the orbital-energy denominators. Checked against numpy.einsum
on each term.
"""

from __future__ import annotations

import numpy as np

import pytapp


def main() -> float:
    rng = np.random.default_rng(1)
    no, nv = 6, 14  # occupied and virtual orbitals
    t2 = 0.01 * rng.standard_normal((nv, nv, no, no))
    v_vvvv = rng.standard_normal((nv, nv, nv, nv))
    w_ovvo = rng.standard_normal((no, nv, nv, no))
    v_oovv = rng.standard_normal((no, no, nv, nv))
    eps_o, eps_v = -1 - rng.random(no), 1 + rng.random(nv)
    terms = [
        ("abcd,cdij->abij", [v_vvvv, t2], 1.0),
        ("kbcj,acik->abij", [w_ovvo, t2], 1.0),
        ("klcd,cdij,abkl->abij", [v_oovv, t2, t2], 0.25),
    ]
    residual = np.zeros_like(t2)
    worst = 0.0
    for equation, ops, factor in terms:
        got = pytapp.einsum(equation, *ops, optimize="greedy")
        want = np.einsum(equation, *ops, optimize="greedy")
        err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
        worst = max(worst, err)
        path, _ = pytapp.einsum_path(equation, *ops)
        print(f"{equation:<24} path {path[1:]}  relative error {err:.1e}")
        residual += factor * got
    denominators = (eps_o[None, None, :, None] + eps_o[None, None, None, :]
                    - eps_v[:, None, None, None] - eps_v[None, :, None, None])
    t2_new = t2 + residual / denominators
    print(f"|T2| {np.linalg.norm(t2):.4f} -> {np.linalg.norm(t2_new):.4f}")
    assert worst < 1e-12
    return worst


if __name__ == "__main__":
    main()
