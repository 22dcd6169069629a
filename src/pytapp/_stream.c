/* GEMV-like products streamed through their matrix operand.
 *
 * A product whose one side has no free labels (the vector operand V) and whose other (the
 * matrix operand M) holds D's labels interleaved with summed ones in memory maps to no GEMV
 * on views (``mgzsb,bgmz->gs``). Such a product is bound by reading M: the executor packs V
 * (small: it has no free labels) as M holds their labels, sets D to beta op_C(C), then walks M
 * once in its memory order, adding into D: where the innermost label is summed each run is a
 * dot (both operands at unit stride after the packing), where it is one of D's a scaled row.
 * The plain loops below are what the compiler vectorises; several running sums keep a dot from
 * waiting on each addition, and long dots add their blocks' sums up (as accurate as blocked
 * dots). */
#include "_stream.h"

#include <stddef.h>

/* Terms per block of a dot: each block's eight running sums go into the dot's total. */
#define STREAM_DOT_BLOCK 2048

/* The nest's odometer over labels [1, nl - 1) and label 0 from `start` (the innermost label is
 * the caller's plain loop); `o` holds the three byte offsets. Returns 1 when done. */
static int stream_step(const StreamNest *n, int64_t *idx, int64_t stop, int64_t *o) {
    for (int l = n->nl - 2; l >= 0; --l) {
        const int64_t end = l == 0 ? stop : n->ext[l];
        if (++idx[l] < end) {
            o[0] += n->sm[l], o[1] += n->sv[l], o[2] += n->sd[l];
            return 0;
        }
        if (l == 0) return 1;
        const int64_t back = n->ext[l] - 1;
        idx[l] = 0;
        o[0] -= back * n->sm[l], o[1] -= back * n->sv[l], o[2] -= back * n->sd[l];
    }
    return 1;
}

#define REAL_STREAM(NAME, T)                                                                    \
    static T dot_##NAME(const T *a, const T *b, int64_t e) {                                    \
        T tot = 0;                                                                              \
        for (int64_t i = 0; i < e;) {                                                           \
            const int64_t i1 = e - i > STREAM_DOT_BLOCK ? i + STREAM_DOT_BLOCK : e;             \
            T s[8] = {0, 0, 0, 0, 0, 0, 0, 0}, r = 0;                                           \
            for (; i + 8 <= i1; i += 8)                                                         \
                for (int j = 0; j < 8; ++j) s[j] += a[i + j] * b[i + j];                        \
            for (; i < i1; ++i) r += a[i] * b[i];                                               \
            tot += ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])) + r;       \
        }                                                                                       \
        return tot;                                                                             \
    }                                                                                           \
    static T sum_##NAME(const T *a, int64_t e) {                                                \
        T tot = 0;                                                                              \
        for (int64_t i = 0; i < e;) {                                                           \
            const int64_t i1 = e - i > STREAM_DOT_BLOCK ? i + STREAM_DOT_BLOCK : e;             \
            T s[8] = {0, 0, 0, 0, 0, 0, 0, 0}, r = 0;                                           \
            for (; i + 8 <= i1; i += 8)                                                         \
                for (int j = 0; j < 8; ++j) s[j] += a[i + j];                                   \
            for (; i < i1; ++i) r += a[i];                                                      \
            tot += ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])) + r;       \
        }                                                                                       \
        return tot;                                                                             \
    }                                                                                           \
    static void stream_##NAME(const StreamNest *n, int64_t start, int64_t stop, const char *M,  \
                              const char *V, char *D, T alpha) {                                \
        int64_t idx[STREAM_MAXL] = {0};                                                         \
        const int li = n->nl - 1;                                                               \
        const int64_t e = n->ext[li], sm = n->sm[li], sv = n->sv[li], sd = n->sd[li];           \
        const int64_t z = (int64_t)sizeof(T);                                                   \
        idx[0] = start;                                                                         \
        int64_t o[3] = {start * n->sm[0], start * n->sv[0], start * n->sd[0]};                  \
        const int64_t e0 = li == 0 ? stop - start : e; /* a one-label nest: the range itself */ \
        do {                                                                                    \
            const char *pm = M + o[0], *pv = V + o[1];                                          \
            char *pd = D + o[2];                                                                \
            if (sd == 0) { /* a summed label: one dot into one element of D */                  \
                T s = 0;                                                                        \
                if (sm == z && sv == z) {                                                       \
                    s = dot_##NAME((const T *)pm, (const T *)pv, e0);                           \
                } else if (sm == z && sv == 0) { /* a label of M's only: summed, then scaled */ \
                    s = sum_##NAME((const T *)pm, e0) * *(const T *)pv;                         \
                } else {                                                                        \
                    for (int64_t i = 0; i < e0; ++i)                                            \
                        s += *(const T *)(pm + i * sm) * *(const T *)(pv + i * sv);             \
                }                                                                               \
                *(T *)pd += alpha * s;                                                          \
            } else if (sv == 0) { /* one of M's free labels: a scaled row of M into D */        \
                const T w = alpha * *(const T *)pv;                                             \
                if (sm == z && sd == z) {                                                       \
                    const T *m = (const T *)pm;                                                 \
                    T *d = (T *)pd;                                                             \
                    for (int64_t i = 0; i < e0; ++i) d[i] += w * m[i];                          \
                } else {                                                                        \
                    for (int64_t i = 0; i < e0; ++i)                                            \
                        *(T *)(pd + i * sd) += w * *(const T *)(pm + i * sm);                   \
                }                                                                               \
            } else if (sm == z && sv == z && sd == z) { /* a batch label, all at unit stride */  \
                const T *m = (const T *)pm, *v = (const T *)pv;                                 \
                T *d = (T *)pd;                                                                 \
                for (int64_t i = 0; i < e0; ++i) d[i] += alpha * (m[i] * v[i]);                 \
            } else { /* a batch label: products added elementwise */                            \
                for (int64_t i = 0; i < e0; ++i)                                                \
                    *(T *)(pd + i * sd) +=                                                      \
                        alpha * (*(const T *)(pm + i * sm) * *(const T *)(pv + i * sv));       \
            }                                                                                   \
        } while (li > 0 && !stream_step(n, idx, stop, o));                                      \
    }

REAL_STREAM(f32, float)
REAL_STREAM(f64, double)

/* Complex numbers as (re, im) pairs; `cs` is -1 where each run's product is conjugated. */
#define COMPLEX_STREAM(NAME, T)                                                                 \
    static void cdot_##NAME(const T *a, const T *b, int64_t e, T *re, T *im) {                  \
        T tr = 0, ti = 0;                                                                       \
        for (int64_t i = 0; i < e;) {                                                           \
            const int64_t i1 = e - i > STREAM_DOT_BLOCK ? i + STREAM_DOT_BLOCK : e;             \
            T sr[4] = {0, 0, 0, 0}, si[4] = {0, 0, 0, 0};                                       \
            for (; i + 4 <= i1; i += 4)                                                         \
                for (int j = 0; j < 4; ++j) {                                                   \
                    const T ar = a[2 * (i + j)], ai = a[2 * (i + j) + 1];                       \
                    const T br = b[2 * (i + j)], bi = b[2 * (i + j) + 1];                       \
                    sr[j] += ar * br - ai * bi;                                                 \
                    si[j] += ar * bi + ai * br;                                                 \
                }                                                                               \
            for (; i < i1; ++i) {                                                               \
                const T ar = a[2 * i], ai = a[2 * i + 1], br = b[2 * i], bi = b[2 * i + 1];     \
                sr[0] += ar * br - ai * bi;                                                     \
                si[0] += ar * bi + ai * br;                                                     \
            }                                                                                   \
            tr += (sr[0] + sr[1]) + (sr[2] + sr[3]);                                            \
            ti += (si[0] + si[1]) + (si[2] + si[3]);                                            \
        }                                                                                       \
        *re = tr, *im = ti;                                                                     \
    }                                                                                           \
    static void csum_##NAME(const T *a, int64_t e, T *re, T *im) { /* a[2 e]: (re, im) pairs */\
        T tr = 0, ti = 0;                                                                       \
        for (int64_t i = 0; i < 2 * e;) {                                                       \
            const int64_t i1 = 2 * e - i > 2 * STREAM_DOT_BLOCK ? i + 2 * STREAM_DOT_BLOCK      \
                                                                : 2 * e;                        \
            T s[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                                  \
            for (; i + 8 <= i1; i += 8)                                                         \
                for (int j = 0; j < 8; ++j) s[j] += a[i + j];                                   \
            for (; i < i1; i += 2) s[0] += a[i], s[1] += a[i + 1];                              \
            tr += (s[0] + s[2]) + (s[4] + s[6]);                                                \
            ti += (s[1] + s[3]) + (s[5] + s[7]);                                                \
        }                                                                                       \
        *re = tr, *im = ti;                                                                     \
    }                                                                                           \
    static void stream_##NAME(const StreamNest *n, int64_t start, int64_t stop, const char *M,  \
                              const char *V, char *D, T ar, T ai, T cs) {                       \
        int64_t idx[STREAM_MAXL] = {0};                                                         \
        const int li = n->nl - 1;                                                               \
        const int64_t e = n->ext[li], sm = n->sm[li], sv = n->sv[li], sd = n->sd[li];           \
        const int64_t z = 2 * (int64_t)sizeof(T);                                               \
        idx[0] = start;                                                                         \
        int64_t o[3] = {start * n->sm[0], start * n->sv[0], start * n->sd[0]};                  \
        const int64_t e0 = li == 0 ? stop - start : e;                                          \
        do {                                                                                    \
            const char *pm = M + o[0], *pv = V + o[1];                                          \
            char *pd = D + o[2];                                                                \
            if (sd == 0) {                                                                      \
                T sr = 0, si = 0;                                                               \
                if (sm == z && sv == z) {                                                       \
                    cdot_##NAME((const T *)pm, (const T *)pv, e0, &sr, &si);                    \
                } else if (sm == z && sv == 0) { /* a label of M's only: summed, then scaled */ \
                    T mr, mi;                                                                   \
                    const T *y = (const T *)pv;                                                 \
                    csum_##NAME((const T *)pm, e0, &mr, &mi);                                   \
                    sr = mr * y[0] - mi * y[1];                                                 \
                    si = mr * y[1] + mi * y[0];                                                 \
                } else {                                                                        \
                    for (int64_t i = 0; i < e0; ++i) {                                          \
                        const T *x = (const T *)(pm + i * sm), *y = (const T *)(pv + i * sv);   \
                        sr += x[0] * y[0] - x[1] * y[1];                                        \
                        si += x[0] * y[1] + x[1] * y[0];                                        \
                    }                                                                           \
                }                                                                               \
                si *= cs;                                                                       \
                T *d = (T *)pd;                                                                 \
                d[0] += ar * sr - ai * si;                                                      \
                d[1] += ar * si + ai * sr;                                                      \
            } else if (sv == 0) { /* a row of M, scaled: alpha op(y) op(x[i]) into D */         \
                const T *y = (const T *)pv;                                                     \
                const T yr = y[0], yi = cs * y[1];                                              \
                const T wr = ar * yr - ai * yi, wi = ar * yi + ai * yr;                         \
                if (sm == z && sd == z) {                                                       \
                    const T *x = (const T *)pm;                                                 \
                    T *d = (T *)pd;                                                             \
                    for (int64_t i = 0; i < e0; ++i) {                                          \
                        const T xr = x[2 * i], xi = cs * x[2 * i + 1];                          \
                        d[2 * i] += wr * xr - wi * xi;                                          \
                        d[2 * i + 1] += wr * xi + wi * xr;                                      \
                    }                                                                           \
                } else {                                                                        \
                    for (int64_t i = 0; i < e0; ++i) {                                          \
                        const T *x = (const T *)(pm + i * sm);                                  \
                        const T xr = x[0], xi = cs * x[1];                                      \
                        T *d = (T *)(pd + i * sd);                                              \
                        d[0] += wr * xr - wi * xi;                                              \
                        d[1] += wr * xi + wi * xr;                                              \
                    }                                                                           \
                }                                                                               \
            } else if (sm == z && sv == z && sd == z) { /* a batch label, all at unit stride */  \
                const T *x = (const T *)pm, *y = (const T *)pv;                                 \
                T *d = (T *)pd;                                                                 \
                for (int64_t i = 0; i < e0; ++i) {                                              \
                    const T pr = x[2 * i] * y[2 * i] - x[2 * i + 1] * y[2 * i + 1];             \
                    const T pi = cs * (x[2 * i] * y[2 * i + 1] + x[2 * i + 1] * y[2 * i]);      \
                    d[2 * i] += ar * pr - ai * pi;                                              \
                    d[2 * i + 1] += ar * pi + ai * pr;                                          \
                }                                                                               \
            } else {                                                                            \
                for (int64_t i = 0; i < e0; ++i) {                                              \
                    const T *x = (const T *)(pm + i * sm), *y = (const T *)(pv + i * sv);       \
                    const T pr = x[0] * y[0] - x[1] * y[1];                                     \
                    const T pi = cs * (x[0] * y[1] + x[1] * y[0]);                              \
                    T *d = (T *)(pd + i * sd);                                                  \
                    d[0] += ar * pr - ai * pi;                                                  \
                    d[1] += ar * pi + ai * pr;                                                  \
                }                                                                               \
            }                                                                                   \
        } while (li > 0 && !stream_step(n, idx, stop, o));                                      \
    }

COMPLEX_STREAM(c64, float)
COMPLEX_STREAM(c128, double)

void stream_accumulate(int dt, const StreamNest *n, int64_t start, int64_t stop, const char *M,
                       const char *V, char *D, const double alpha[2], int conj_m) {
    if (n->nl < 1 || start >= stop) return;
    for (int l = 1; l < n->nl; ++l)
        if (n->ext[l] < 1) return;
    const double cs = conj_m ? -1.0 : 1.0;
    switch (dt) {
        case 0: stream_f32(n, start, stop, M, V, D, (float)alpha[0]); break;
        case 1: stream_f64(n, start, stop, M, V, D, alpha[0]); break;
        case 2:
            stream_c64(n, start, stop, M, V, D, (float)alpha[0], (float)alpha[1], (float)cs);
            break;
        default: stream_c128(n, start, stop, M, V, D, alpha[0], alpha[1], cs); break;
    }
}
