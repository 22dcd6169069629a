"""Autograd through pytapp.einsum: fit a rank-R CP decomposition of a 3-way tensor with torch.

The model einsum("ir,jr,kr->ijk", A, B, C) runs on TAPP products forward and backward (the
pytapp::einsum operator); gradients are checked against torch.einsum's, then a few steps of
Adam lower the reconstruction error.
"""

from __future__ import annotations

import torch

import pytapp


def main() -> float:
    gen = torch.Generator().manual_seed(0)
    shape, rank = (12, 10, 8), 4
    factors = [torch.randn(n, rank, generator=gen, dtype=torch.float64) for n in shape]
    target = torch.einsum("ir,jr,kr->ijk", *factors)
    params = [torch.randn(n, rank, generator=gen, dtype=torch.float64, requires_grad=True)
              for n in shape]

    loss = (pytapp.einsum("ir,jr,kr->ijk", *params) - target).square().sum()
    grads = torch.autograd.grad(loss, params)
    ref_loss = (torch.einsum("ir,jr,kr->ijk", *params) - target).square().sum()
    ref_grads = torch.autograd.grad(ref_loss, params)
    grad_error = max(float((g - r).abs().max() / r.abs().max())
                     for g, r in zip(grads, ref_grads, strict=True))
    print(f"gradients vs torch.einsum: largest relative difference {grad_error:.1e}")

    opt = torch.optim.Adam(params, lr=0.05)
    first = None
    for _ in range(60):
        opt.zero_grad()
        loss = (pytapp.einsum("ir,jr,kr->ijk", *params) - target).square().sum()
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
    print(f"reconstruction loss {first:.3e} -> {loss.item():.3e} after 60 Adam steps")
    assert grad_error < 1e-12 and loss.item() < first
    return grad_error


if __name__ == "__main__":
    main()
