"""The numba kernels. Imported only when a kernel first runs (never by ``import pytapp``).

Every kernel is rank-generic: operands arrive as flat buffers with an offset and one stride per
loop dimension (see :mod:`pytapp.kernels.layout`), dimension 0 is the output's fastest. A
kernel computes the blocks ``[lo, hi)`` of its outer loop, releasing the GIL: callers split the
blocks over a small pool of Python threads (:mod:`pytapp.kernels.pool`). Numba's own threading
is not used: its OpenMP workers spin after every kernel and halve the speed of the BLAS call
that follows (measured: a reduction then a GEMM took 5.0 ms instead of 1.6 ms), and its default
layer is unsafe when plans run from many Python threads. Compiled code is cached on disk, so a
new process pays the compilation once per machine.

Mode bits (runtime flags, so that one compiled specialisation serves every combination):
1 ``y`` present, 2 ``c`` present, 4 conjugate x, 8 conjugate y, 16 conjugate c, 32 conjugate
the result.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["elementwise_blocks", "fused_elementwise", "fused_reduce", "stream_accumulate"]

HAS_Y, HAS_C, CONJ_X, CONJ_Y, CONJ_C, CONJ_OUT = 1, 2, 4, 8, 16, 32
#: Edge of the square tiles a transposing loop walks (elements).
TILE = 32


def elementwise_blocks(shape: np.ndarray, tdim: int) -> int:
    """Return number of blocks of :func:`fused_elementwise`'s outer loop."""
    n0 = int(shape[0])
    if tdim > 0:
        outer = int(np.prod(shape)) // (n0 * int(shape[tdim]))
        return outer * -(-int(shape[tdim]) // TILE) * -(-n0 // TILE)
    return int(np.prod(shape)) // n0


@njit(cache=True, inline="always")
def _u(i):  # type: ignore[no-untyped-def]
    # Indices into the flat buffers are never negative: as unsigned integers they skip
    # numba's wraparound test, which otherwise keeps the inner loops from vectorising.
    return np.uint64(i)


@njit(cache=True, inline="always")
def _conj(v, flag):  # type: ignore[no-untyped-def]
    return np.conj(v) if flag else v


@njit(cache=True, nogil=True)
def fused_elementwise(out, o_off, o_st, x, x_off, x_st, y, y_off, y_st, c, c_off, c_st,  # type: ignore[no-untyped-def]
                      shape, tdim, alpha, beta, mode, lo, hi):
    """Out = op(alpha * op(x) * op(y) + beta * op(c)) elementwise over ``shape``.

    Dimension 0 is walked innermost; dimension ``tdim`` (x's fastest, when it is not 0) is
    walked in tiles of TILE together with dimension 0, so that a transposition reads and
    writes whole cache lines. Every other dimension is an outer loop; blocks ``[lo, hi)`` of
    (outer index, tile) pairs are computed.
    """
    nd = shape.shape[0]
    n0 = shape[0]
    nt = shape[tdim] if tdim > 0 else 1
    tile0 = TILE if tdim > 0 else n0
    tilet = TILE if tdim > 0 else 1
    b0 = (n0 + tile0 - 1) // tile0
    bt = (nt + tilet - 1) // tilet
    has_y = (mode & HAS_Y) != 0
    has_c = (mode & HAS_C) != 0
    cx = (mode & CONJ_X) != 0
    cy = (mode & CONJ_Y) != 0
    cc = (mode & CONJ_C) != 0
    co = (mode & CONJ_OUT) != 0
    # Strides in locals: loads from the stride arrays could alias the output for LLVM.
    so0, sx0, sy0, sc0 = o_st[0], x_st[0], y_st[0], c_st[0]
    sot = o_st[tdim] if tdim > 0 else 0
    sxt = x_st[tdim] if tdim > 0 else 0
    syt = y_st[tdim] if tdim > 0 else 0
    sct = c_st[tdim] if tdim > 0 else 0
    plain = mode == 0
    axpby = mode == HAS_C  # the epilogue of a product: no conjugation, no second factor
    for block in range(lo, hi):
        j0 = block % b0
        rest = block // b0
        jt = rest % bt
        rest //= bt
        oo, xo, yo, co_ = o_off, x_off, y_off, c_off
        for d in range(1, nd):
            if d == tdim:
                continue
            q = rest % shape[d]
            rest //= shape[d]
            oo += q * o_st[d]
            xo += q * x_st[d]
            yo += q * y_st[d]
            co_ += q * c_st[d]
        t_lo = jt * tilet
        t_hi = min(nt, t_lo + tilet)
        i_lo = j0 * tile0
        i_hi = min(n0, i_lo + tile0)
        for t in range(t_lo, t_hi):
            ot = oo + t * sot
            xt = xo + t * sxt
            if plain:  # copy and scale: the permutation kernel
                for i in range(i_lo, i_hi):
                    out[_u(ot + i * so0)] = alpha * x[_u(xt + i * sx0)]
                continue
            yt = yo + t * syt
            ct = co_ + t * sct
            if axpby:  # branch-free, so that it vectorises
                for i in range(i_lo, i_hi):
                    out[_u(ot + i * so0)] = (alpha * x[_u(xt + i * sx0)]
                                             + beta * c[_u(ct + i * sc0)])
                continue
            for i in range(i_lo, i_hi):
                v = alpha * _conj(x[_u(xt + i * sx0)], cx)
                if has_y:
                    v = v * _conj(y[_u(yt + i * sy0)], cy)
                if has_c:
                    v = v + beta * _conj(c[_u(ct + i * sc0)], cc)
                out[_u(ot + i * so0)] = _conj(v, co)


@njit(cache=True, nogil=True)
def fused_reduce(out, o_off, o_st, x, x_off, x_st, y, y_off, y_st, c, c_off, c_st,  # type: ignore[no-untyped-def]
                 shape, nkeep, inner_keep, alpha, beta, mode, acc_zero, lo, hi):
    """out[m] = op(alpha * sum_k op(x[m, k]) * op(y[m, k]) + beta * op(c[m])).

    ``shape`` lists the kept dimensions (those of ``out``; ``nkeep`` of them, dimension 0
    fastest in ``out``) then the summed ones (``out``/``c`` strides 0 there). With
    ``inner_keep`` the kept dimension 0 is the innermost loop (x streams along an output
    dimension: axpy form, a row of partial sums per task); otherwise the first summed
    dimension is (x streams along a summed dimension: dot form). Sums run in the type of
    ``acc_zero``. At least one dimension is summed. Rows ``[lo, hi)`` are computed: the
    kept dimensions but dimension 0 (axpy form) or all of them (dot form), flattened.
    """
    nd = shape.shape[0]
    has_y = (mode & HAS_Y) != 0
    has_c = (mode & HAS_C) != 0
    cx = (mode & CONJ_X) != 0
    cy = (mode & CONJ_Y) != 0
    cc = (mode & CONJ_C) != 0
    co = (mode & CONJ_OUT) != 0
    n_sum = 1
    for d in range(nkeep, nd):
        n_sum *= shape[d]
    sx0, sy0 = x_st[0], y_st[0]
    if inner_keep:
        n0 = shape[0]
        for r in range(lo, hi):
            div = 1
            oo, xo, yo, co_ = o_off, x_off, y_off, c_off
            for d in range(1, nkeep):
                q = (r // div) % shape[d]
                div *= shape[d]
                oo += q * o_st[d]
                xo += q * x_st[d]
                yo += q * y_st[d]
                co_ += q * c_st[d]
            acc = np.full(n0, acc_zero)
            idx = np.zeros(nd, dtype=np.int64)
            xk, yk = xo, yo
            for k in range(n_sum):
                if k > 0:  # odometer over the summed dimensions: no division per step
                    for d in range(nkeep, nd):
                        idx[d] += 1
                        xk += x_st[d]
                        yk += y_st[d]
                        if idx[d] < shape[d]:
                            break
                        xk -= shape[d] * x_st[d]
                        yk -= shape[d] * y_st[d]
                        idx[d] = 0
                if has_y and sy0 == 0:  # GEMV: one element of y per step
                    yv = _conj(y[_u(yk)], cy)
                    if sx0 == 1 and not cx:
                        for i in range(n0):
                            acc[_u(i)] += x[_u(xk + i)] * yv
                    else:
                        for i in range(n0):
                            acc[_u(i)] += _conj(x[_u(xk + i * sx0)], cx) * yv
                elif has_y:
                    for i in range(n0):
                        acc[_u(i)] += (_conj(x[_u(xk + i * sx0)], cx)
                                       * _conj(y[_u(yk + i * sy0)], cy))
                elif sx0 == 1 and not cx:
                    for i in range(n0):
                        acc[_u(i)] += x[_u(xk + i)]
                else:
                    for i in range(n0):
                        acc[_u(i)] += _conj(x[_u(xk + i * sx0)], cx)
            so0, sc0 = o_st[0], c_st[0]
            for i in range(n0):
                v = alpha * acc[_u(i)]
                if has_c:
                    v = v + beta * _conj(c[_u(co_ + i * sc0)], cc)
                out[_u(oo + i * so0)] = _conj(v, co)
        return
    nk0 = shape[nkeep] if nkeep < nd else 1
    n_rest = n_sum // nk0 if nk0 > 0 else 0
    sx = x_st[nkeep] if nkeep < nd else 0
    sy = y_st[nkeep] if nkeep < nd else 0
    for r2 in range(lo, hi):
        div2 = 1
        oo, xo, yo, co_ = o_off, x_off, y_off, c_off
        for d in range(nkeep):
            q = (r2 // div2) % shape[d]
            div2 *= shape[d]
            oo += q * o_st[d]
            xo += q * x_st[d]
            yo += q * y_st[d]
            co_ += q * c_st[d]
        acc = acc_zero
        idx2 = np.zeros(nd, dtype=np.int64)
        xk, yk = xo, yo
        for k2 in range(n_rest):
            if k2 > 0:  # the odometer of the axpy form, from the next dimension on (an
                # inlined helper shared by both forms measured slower: 12-15 ms vs 9-11 ms)
                for d in range(nkeep + 1, nd):
                    idx2[d] += 1
                    xk += x_st[d]
                    yk += y_st[d]
                    if idx2[d] < shape[d]:
                        break
                    xk -= shape[d] * x_st[d]
                    yk -= shape[d] * y_st[d]
                    idx2[d] = 0
            if has_y and sx == 1 and sy == 1 and not cx and not cy:
                # Four partial sums: one running sum is a chain of dependent adds.
                p0 = p1 = p2 = p3 = acc_zero
                j4 = nk0 - nk0 % 4
                for j in range(0, j4, 4):
                    p0 += x[_u(xk + j)] * y[_u(yk + j)]
                    p1 += x[_u(xk + j + 1)] * y[_u(yk + j + 1)]
                    p2 += x[_u(xk + j + 2)] * y[_u(yk + j + 2)]
                    p3 += x[_u(xk + j + 3)] * y[_u(yk + j + 3)]
                for j in range(j4, nk0):
                    p0 += x[_u(xk + j)] * y[_u(yk + j)]
                acc += (p0 + p1) + (p2 + p3)
            elif has_y:
                for j in range(nk0):
                    acc += _conj(x[_u(xk + j * sx)], cx) * _conj(y[_u(yk + j * sy)], cy)
            elif sx == 1 and not cx:
                p0 = p1 = p2 = p3 = acc_zero
                j4 = nk0 - nk0 % 4
                for j in range(0, j4, 4):
                    p0 += x[_u(xk + j)]
                    p1 += x[_u(xk + j + 1)]
                    p2 += x[_u(xk + j + 2)]
                    p3 += x[_u(xk + j + 3)]
                for j in range(j4, nk0):
                    p0 += x[_u(xk + j)]
                acc += (p0 + p1) + (p2 + p3)
            else:
                for j in range(nk0):
                    acc += _conj(x[_u(xk + j * sx)], cx)
        v = alpha * acc
        if has_c:
            v = v + beta * _conj(c[_u(co_)], cc)
        out[_u(oo)] = _conj(v, co)


@njit(cache=True, nogil=True)
def stream_accumulate(acc, a_st, x, x_off, x_st, y, y_off, y_st, shape, mode, lo, hi):  # type: ignore[no-untyped-def]
    """Acc += op(x) * op(y), walking x in its memory order.

    ``shape`` lists every dimension, dimension 0 fastest in x; ``acc`` is a small dense
    accumulator (strides ``a_st``, 0 on summed dimensions) that stays in cache while x streams
    from memory. At least three dimensions (callers pad with extent 1). Dimensions 0 and 1 are
    the inner loops, the outermost dimension is split into blocks ``[lo, hi)`` (each caller's
    thread owns its own ``acc``), the ones between are walked by an odometer.
    """
    nd = shape.shape[0]
    has_y = (mode & HAS_Y) != 0
    cx = (mode & CONJ_X) != 0
    cy = (mode & CONJ_Y) != 0
    n0, n1, top = shape[0], shape[1], nd - 1
    sa0, sx0, sy0 = a_st[0], x_st[0], y_st[0]
    sa1, sx1, sy1 = a_st[1], x_st[1], y_st[1]
    n_mid = 1
    for d in range(2, top):
        n_mid *= shape[d]
    idx = np.zeros(nd, dtype=np.int64)
    for r in range(lo, hi):
        ab, xb, yb = r * a_st[top], x_off + r * x_st[top], y_off + r * y_st[top]
        for d in range(2, top):
            idx[d] = 0
        for m in range(n_mid):
            if m > 0:  # the odometer over the middle dimensions (inlined as in fused_reduce)
                for d in range(2, top):
                    idx[d] += 1
                    ab += a_st[d]
                    xb += x_st[d]
                    yb += y_st[d]
                    if idx[d] < shape[d]:
                        break
                    ab -= shape[d] * a_st[d]
                    xb -= shape[d] * x_st[d]
                    yb -= shape[d] * y_st[d]
                    idx[d] = 0
            for j in range(n1):
                a1, x1, y1 = ab + j * sa1, xb + j * sx1, yb + j * sy1
                if has_y:
                    for i in range(n0):
                        acc[_u(a1 + i * sa0)] += (_conj(x[_u(x1 + i * sx0)], cx)
                                                  * _conj(y[_u(y1 + i * sy0)], cy))
                else:
                    for i in range(n0):
                        acc[_u(a1 + i * sa0)] += _conj(x[_u(x1 + i * sx0)], cx)
