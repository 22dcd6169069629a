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
#include <stdlib.h>
#include <string.h>

/* Terms per block of a dot: each block's eight running sums go into the dot's total. */
#define STREAM_DOT_BLOCK 2048
/* Dots shorter than this go four rows of M at a time where V is the same for the rows: their
 * loads of V and additions of running sums cost as much as their products (mgzsb,bgmz->gs, runs
 * of 27: 0.8x the time); longer ones (520) ran 1.8x slower that way than one row at a time. */
#define STREAM_ROWS4_MAX 64
/* A short batch run innermost (M, V and D at unit stride) continued in M and D by a label of
 * D's (V the same along it) goes as one run of M and D against V's run repeated in a buffer of
 * this many numbers: as the spread pack (analysis.program._stream_spread) without V's copies
 * (sekfnpw,efsw->nwpk, F64, runs of 5 under 8: 13.5 -> 9.4 ms; the spread pack, 9 MB of V
 * copies, 8.9); complex streams hold alpha op(V) there (crep_*: alpha applied once per number
 * of V, not per product, and no loop per row; the 21 complex streams of seeds 0-11999 that take
 * it 1.68x, 1.07-3.37x: livcghn,vlcn->gihn, C128, 30.1 -> 12.1 ms). The buffer is filled by
 * copies of the run, and again only where V's run moves: filled number by number, each index
 * taken modulo the run's length, it had cost a division per number on every pass
 * (iklxb,bk->xbi, F32, runs of 18 under 20: 2.40 -> 0.92 ms; the 28 real streams of seeds
 * 0-11999 that take it 1.63x, 0.97-4.0x). */
#define STREAM_REP 64
/* Longest innermost batch run whose products a stream sums over the next (summed) label in
 * running sums of its own (batch_c64, batch_c128; the real streams' `sums`). */
#define STREAM_ACC_MAX 32

/* The complex pass kernels below (stream_c64, stream_c128, batch_*) are built once more for
 * AVX2, which the CPU picks at load time where it has it (GCC's target_clones), with the
 * helpers they inline: the same operations in the same order (C11 does not contract a * b + c
 * into one rounding). On 7 seeded complex streams (2-core Xeon, runs of separate processes,
 * least of several) 0.78-2.8x the baseline build's speed, five above 1.1x (kfiwxa,xkf->wa, C128,
 * 224 MB: 24.7 -> 11.9 ms; ckntv,ktv->cvn 29.0 -> 10.4), wfman,wfm->a (C128) 0.78-0.90x. The
 * real streams ran 0.77-1.68x so (16 products, 7 below 1.0x): built for the baseline, as the
 * tuning of their running sums assumed. An AVX-512 clone was no faster on the complex ones and
 * lost to 0.35x on the real ones. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define STREAM_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define STREAM_CLONES
#endif
/* Their helpers are always inlined: an (AVX-512) clone calling one built for the baseline ran
 * its SSE code with the wide registers' upper halves in use, each instruction stalled
 * (gikjd,ijk->g, F32: 1.4 -> 31 ms). */
#if defined(__GNUC__)
#define STREAM_INLINE static inline __attribute__((always_inline))
#else
#define STREAM_INLINE static inline
#endif

/* The nest's odometer over labels [0, last), label 0 up to `stop` (the labels from `last` in
 * are the caller's plain loops); `o` holds the three byte offsets. Returns 1 when done. */
static int stream_step(const StreamNest *n, int last, int64_t *idx, int64_t stop, int64_t *o) {
    for (int l = last - 1; l >= 0; --l) {
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

/* Vectors of 16 bytes (the baseline's registers: wider ones the compiler splits through
 * memory), loaded from wherever the numbers lie (no alignment assumed). Running sums kept in
 * arrays of scalars, four rows of them, the compiler vectorised across the loop over terms
 * instead: it may not reorder a sum, so each lane was added in turn as a scalar (ysja,a->sj,
 * F32, 36 MB: 1.95 ms, numpy's GEMV 0.85); held as vectors the additions are those of the
 * scalar code, lane by lane, and the same 36 MB take 0.81 ms. */
typedef float f32x4 __attribute__((vector_size(16), aligned(4), may_alias));
typedef double f64x2 __attribute__((vector_size(16), aligned(8), may_alias));

#define REAL_STREAM(NAME, T, V)                                                                 \
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
    /* One run of the innermost label: a dot into one element of D where it is summed (D's   \
     * stride 0), a scaled row of M where it is one of M's free labels (V's stride 0), else  \
     * products added elementwise (a batch label). */                                        \
    static inline void run_##NAME(const char *pm, const char *pv, char *pd, int64_t e0,       \
                                  int64_t sm, int64_t sv, int64_t sd, T alpha) {              \
        const int64_t z = (int64_t)sizeof(T);                                                   \
        if (sd == 0) {                                                                          \
            T s = 0;                                                                            \
            if (sm == z && sv == z) {                                                           \
                s = dot_##NAME((const T *)pm, (const T *)pv, e0);                               \
            } else if (sm == z && sv == 0) { /* a label of M's only: summed, then scaled */     \
                s = sum_##NAME((const T *)pm, e0) * *(const T *)pv;                             \
            } else {                                                                            \
                for (int64_t i = 0; i < e0; ++i)                                                \
                    s += *(const T *)(pm + i * sm) * *(const T *)(pv + i * sv);                 \
            }                                                                                   \
            *(T *)pd += alpha * s;                                                              \
        } else if (sv == 0) {                                                                   \
            const T w = alpha * *(const T *)pv;                                                 \
            if (sm == z && sd == z) {                                                           \
                const T *m = (const T *)pm;                                                     \
                T *d = (T *)pd;                                                                 \
                for (int64_t i = 0; i < e0; ++i) d[i] += w * m[i];                              \
            } else {                                                                            \
                for (int64_t i = 0; i < e0; ++i)                                                \
                    *(T *)(pd + i * sd) += w * *(const T *)(pm + i * sm);                       \
            }                                                                                   \
        } else if (sm == z && sv == z && sd == z) {                                             \
            const T *m = (const T *)pm, *v = (const T *)pv;                                     \
            T *d = (T *)pd;                                                                     \
            for (int64_t i = 0; i < e0; ++i) d[i] += alpha * (m[i] * v[i]);                     \
        } else {                                                                                \
            for (int64_t i = 0; i < e0; ++i)                                                    \
                *(T *)(pd + i * sd) +=                                                          \
                    alpha * (*(const T *)(pm + i * sm) * *(const T *)(pv + i * sv));           \
        }                                                                                       \
    }                                                                                           \
    /* Four rows of M (rs bytes apart) dotted with one run of V: V's elements loaded once for  \
     * four sums (a short dot's loads and its running sums' addition cost as much as its     \
     * products). */                                                                          \
    static inline void dot4_##NAME(const char *pm, int64_t rs, const T *v, int64_t e, T *out) { \
        enum { W = (int)(16 / sizeof(T)), NV = 4 / W }; /* vectors of 16 bytes per 4 lanes */  \
        const T *a[4] = {(const T *)pm, (const T *)(pm + rs), (const T *)(pm + 2 * rs),         \
                         (const T *)(pm + 3 * rs)};                                             \
        V s[4][NV];                                                                             \
        for (int r = 0; r < 4; ++r)                                                             \
            for (int k = 0; k < NV; ++k) s[r][k] = (V){0};                                      \
        int64_t i = 0;                                                                          \
        for (; i + 4 <= e; i += 4)                                                              \
            for (int k = 0; k < NV; ++k) {                                                      \
                const V b = *(const V *)(v + i + k * W);                                        \
                for (int r = 0; r < 4; ++r) s[r][k] += *(const V *)(a[r] + i + k * W) * b;      \
            }                                                                                   \
        T t[4][4];                                                                              \
        for (int r = 0; r < 4; ++r)                                                             \
            for (int l = 0; l < 4; ++l) t[r][l] = s[r][l / W][l % W];                           \
        for (; i < e; ++i)                                                                      \
            for (int r = 0; r < 4; ++r) t[r][0] += a[r][i] * v[i];                              \
        for (int r = 0; r < 4; ++r) out[r] = (t[r][0] + t[r][1]) + (t[r][2] + t[r][3]);         \
    }                                                                                           \
    /* The two innermost labels as plain loops, the odometer over the others. Where the inner \
     * one is a unit-stride dot and the next one of D's (V constant along it: rows of M       \
     * against one run of V), rows go four at a time. */                                      \
    static void stream_##NAME(const StreamNest *n, int64_t start, int64_t stop, const char *M,  \
                              const char *V, char *D, T alpha) {                                \
        int64_t idx[STREAM_MAXL] = {0};                                                         \
        const int li = n->nl - 1, l2 = li - 1;                                                  \
        const int64_t e = n->ext[li], sm = n->sm[li], sv = n->sv[li], sd = n->sd[li];           \
        const int64_t z = (int64_t)sizeof(T);                                                   \
        if (li == 0) {                                                                          \
            run_##NAME(M + start * sm, V + start * sv, D + start * sd, stop - start, sm, sv, sd, \
                       alpha);                                                                  \
            return;                                                                             \
        }                                                                                       \
        const int64_t sm2 = n->sm[l2], sv2 = n->sv[l2], sd2 = n->sd[l2];                        \
        const int64_t j0 = l2 == 0 ? start : 0, j1 = l2 == 0 ? stop : n->ext[l2];               \
        const int rows4 = sd == 0 && sm == z && sv == z && sv2 == 0 && sd2 != 0 &&              \
                          e < STREAM_ROWS4_MAX;                                                 \
        const int sums = sm == z && sv == z && sd == z && sd2 == 0 && e <= STREAM_ACC_MAX;      \
        const int rep = sm == z && sv == z && sd == z && sv2 == 0 && sm2 == e * z &&             \
                        sd2 == e * z && 2 * e <= STREAM_REP;                                     \
        idx[0] = start;                                                                         \
        int64_t o[3] = {0, 0, 0};                                                               \
        if (l2 > 0) o[0] = start * n->sm[0], o[1] = start * n->sv[0], o[2] = start * n->sd[0];  \
        T vb[STREAM_REP]; /* (rep: V's run repeated, for the run of V at vb_of) */             \
        const T *vb_of = NULL;                                                                  \
        do {                                                                                    \
            const char *pm = M + o[0], *pv = V + o[1];                                          \
            char *pd = D + o[2];                                                                \
            int64_t j = j0;                                                                     \
            if (rep) { /* rows of D and M in one run against V's run repeated (see STREAM_REP) */ \
                const T *v = (const T *)(pv + j * sv2);                                         \
                const int64_t len = STREAM_REP / e * e, all = (j1 - j) * e;                     \
                if (v != vb_of) /* (rebuilt only where V moves: no division per number) */     \
                    for (int64_t r = 0; r < len; r += e)                                        \
                        for (int64_t i = 0; i < e; ++i) vb[r + i] = v[i];                       \
                vb_of = v;                                                                      \
                const T *m = (const T *)(pm + j * sm2);                                         \
                T *d = (T *)(pd + j * sd2);                                                     \
                for (int64_t i0 = 0; i0 < all; i0 += len) {                                     \
                    const int64_t l = all - i0 < len ? all - i0 : len;                          \
                    for (int64_t i = 0; i < l; ++i) d[i0 + i] += alpha * (m[i0 + i] * vb[i]);   \
                }                                                                               \
                j = j1;                                                                         \
            }                                                                                   \
            if (sums) { /* see batch_c128 */                                                    \
                T s[STREAM_ACC_MAX] = {0};                                                      \
                for (; j < j1; ++j) {                                                           \
                    const T *m = (const T *)(pm + j * sm2), *v = (const T *)(pv + j * sv2);     \
                    for (int64_t i = 0; i < e; ++i) s[i] += m[i] * v[i];                        \
                }                                                                               \
                for (int64_t i = 0; i < e; ++i) ((T *)pd)[i] += alpha * s[i];                   \
            }                                                                                   \
            if (rows4) {                                                                        \
                for (; j + 4 <= j1; j += 4) {                                                   \
                    T s4[4];                                                                    \
                    dot4_##NAME(pm + j * sm2, sm2, (const T *)pv, e, s4);                       \
                    for (int r = 0; r < 4; ++r) *(T *)(pd + (j + r) * sd2) += alpha * s4[r];    \
                }                                                                               \
            }                                                                                   \
            for (; j < j1; ++j)                                                                 \
                run_##NAME(pm + j * sm2, pv + j * sv2, pd + j * sd2, e, sm, sv, sd, alpha);     \
        } while (l2 > 0 && !stream_step(n, l2, idx, stop, o));                                  \
    }

REAL_STREAM(f32, float, f32x4)
REAL_STREAM(f64, double, f64x2)

/* Complex numbers as (re, im) pairs; `cs` is -1 where each run's product is conjugated. */
#define COMPLEX_STREAM(NAME, T)                                                                 \
    STREAM_INLINE void cdot_##NAME(const T *a, const T *b, int64_t e, T *re, T *im) {           \
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
    /* a[2 e]: (re, im) pairs */                                                                \
    STREAM_INLINE void csum_##NAME(const T *a, int64_t e, T *re, T *im) {                       \
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
    /* A batch label innermost (M, V and D at unit stride, at most STREAM_ACC_MAX long) inside \
     * a summed one: the products summed over the summed label in running sums, added into D  \
     * once per row (dmpkqu,qpum->ku, C128, runs of 7: each run added into D and the odometer  \
     * stepped per run, 4.7 GB/s from 185 MB of M). */                                        \
    STREAM_CLONES static void batch_##NAME(const StreamNest *n, int64_t start, int64_t stop,    \
                                           const char *M, const char *V, char *D, T ar, T ai,   \
                                           T cs) {                                              \
        int64_t idx[STREAM_MAXL] = {0};                                                         \
        const int li = n->nl - 1, l2 = li - 1;                                                  \
        const int64_t e = n->ext[li], sm2 = n->sm[l2], sv2 = n->sv[l2];                         \
        const int64_t j0 = l2 == 0 ? start : 0, j1 = l2 == 0 ? stop : n->ext[l2];               \
        idx[0] = start;                                                                         \
        int64_t o[3] = {0, 0, 0};                                                               \
        if (l2 > 0) o[0] = start * n->sm[0], o[1] = start * n->sv[0], o[2] = start * n->sd[0];  \
        do {                                                                                    \
            T sr[STREAM_ACC_MAX] = {0}, si[STREAM_ACC_MAX] = {0};                               \
            for (int64_t j = j0; j < j1; ++j) {                                                 \
                const T *x = (const T *)(M + o[0] + j * sm2), *y = (const T *)(V + o[1] + j * sv2); \
                for (int64_t i = 0; i < e; ++i) {                                               \
                    sr[i] += x[2 * i] * y[2 * i] - x[2 * i + 1] * y[2 * i + 1];                 \
                    si[i] += x[2 * i] * y[2 * i + 1] + x[2 * i + 1] * y[2 * i];                 \
                }                                                                               \
            }                                                                                   \
            T *d = (T *)(D + o[2]);                                                             \
            for (int64_t i = 0; i < e; ++i) {                                                   \
                const T pi = cs * si[i];                                                        \
                d[2 * i] += ar * sr[i] - ai * pi;                                               \
                d[2 * i + 1] += ar * pi + ai * sr[i];                                           \
            }                                                                                   \
        } while (l2 > 0 && !stream_step(n, l2, idx, stop, o));                                  \
    }                                                                                           \
    /* A batch run innermost (M, V, D at unit stride) continued in M and D by a label of D's  \
     * (V the same along it): the rows go as one run of M and D against V's run repeated in a  \
     * buffer, alpha op(V) filled in by copies where V moves (see STREAM_REP). */              \
    STREAM_CLONES static void crep_##NAME(const StreamNest *n, int64_t start, int64_t stop,     \
                                          const char *M, const char *V, char *D, T ar, T ai,    \
                                          T cs) {                                               \
        int64_t idx[STREAM_MAXL] = {0};                                                         \
        const int l2 = n->nl - 2;                                                               \
        const int64_t e = n->ext[l2 + 1], len = STREAM_REP / e * e;                             \
        const int64_t j0 = l2 == 0 ? start : 0, j1 = l2 == 0 ? stop : n->ext[l2];               \
        const int64_t all = (j1 - j0) * e;                                                      \
        idx[0] = start;                                                                         \
        int64_t o[3] = {0, 0, 0};                                                               \
        if (l2 > 0) o[0] = start * n->sm[0], o[1] = start * n->sv[0], o[2] = start * n->sd[0];  \
        T vb[2 * STREAM_REP];                                                                   \
        const T *vb_of = NULL;                                                                  \
        do {                                                                                    \
            const T *v = (const T *)(V + o[1]);                                                 \
            if (v != vb_of)                                                                     \
                for (int64_t r = 0; r < len; r += e)                                            \
                    for (int64_t i = 0; i < e; ++i) {                                           \
                        const T yr = v[2 * i], yi = cs * v[2 * i + 1];                          \
                        vb[2 * (r + i)] = ar * yr - ai * yi;                                    \
                        vb[2 * (r + i) + 1] = ar * yi + ai * yr;                                \
                    }                                                                           \
            vb_of = v;                                                                          \
            const T *x = (const T *)(M + o[0] + j0 * n->sm[l2]);                                \
            T *d = (T *)(D + o[2] + j0 * n->sd[l2]);                                            \
            for (int64_t i0 = 0; i0 < all; i0 += len) {                                         \
                const int64_t l = all - i0 < len ? all - i0 : len;                              \
                const T *xs = x + 2 * i0;                                                       \
                T *ds = d + 2 * i0;                                                             \
                for (int64_t i = 0; i < l; ++i) {                                               \
                    const T xr = xs[2 * i], xi = cs * xs[2 * i + 1];                            \
                    const T wr = vb[2 * i], wi = vb[2 * i + 1];                                 \
                    ds[2 * i] += wr * xr - wi * xi;                                             \
                    ds[2 * i + 1] += wr * xi + wi * xr;                                         \
                }                                                                               \
            }                                                                                   \
        } while (l2 > 0 && !stream_step(n, l2, idx, stop, o));                                  \
    }                                                                                           \
    STREAM_CLONES static void stream_##NAME(const StreamNest *n, int64_t start, int64_t stop,   \
                                            const char *M, const char *V, char *D, T ar, T ai,  \
                                            T cs) {                                             \
        int64_t idx[STREAM_MAXL] = {0};                                                         \
        const int li = n->nl - 1;                                                               \
        const int64_t e = n->ext[li], sm = n->sm[li], sv = n->sv[li], sd = n->sd[li];           \
        const int64_t z = 2 * (int64_t)sizeof(T);                                               \
        idx[0] = start;                                                                         \
        if (li > 0 && sm == z && sv == z && sd == z && e <= STREAM_ACC_MAX &&                   \
            n->sd[li - 1] == 0) {                                                               \
            batch_##NAME(n, start, stop, M, V, D, ar, ai, cs);                                  \
            return;                                                                             \
        }                                                                                       \
        if (li > 0 && sm == z && sv == z && sd == z && n->sv[li - 1] == 0 &&                    \
            n->sm[li - 1] == e * z && n->sd[li - 1] == e * z && 2 * e <= STREAM_REP) {          \
            crep_##NAME(n, start, stop, M, V, D, ar, ai, cs);                                   \
            return;                                                                             \
        }                                                                                       \
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
        } while (li > 0 && !stream_step(n, li, idx, stop, o));                                  \
    }

COMPLEX_STREAM(c64, float)
COMPLEX_STREAM(c128, double)

/* The pass over a nest without `own` labels (see stream_accumulate). */
static void stream_run(int dt, const StreamNest *n, int64_t start, int64_t stop, const char *M,
                       const char *V, char *D, const double alpha[2], double cs) {
    switch (dt) {
        case 0: stream_f32(n, start, stop, M, V, D, (float)alpha[0]); break;
        case 1: stream_f64(n, start, stop, M, V, D, alpha[0]); break;
        case 2:
            stream_c64(n, start, stop, M, V, D, (float)alpha[0], (float)alpha[1], (float)cs);
            break;
        default: stream_c128(n, start, stop, M, V, D, alpha[0], alpha[1], cs); break;
    }
}

/* Neighbouring labels whose three strides run on from each other as one label. */
static void stream_coalesce(StreamNest *n) {
    int k = 0;
    for (int l = 1; l < n->nl; ++l) {
        const int64_t e = n->ext[l];
        if (n->sm[k] == n->sm[l] * e && n->sv[k] == n->sv[l] * e && n->sd[k] == n->sd[l] * e) {
            n->ext[k] *= e, n->sm[k] = n->sm[l], n->sv[k] = n->sv[l], n->sd[k] = n->sd[l];
        } else {
            ++k;
            n->ext[k] = e, n->sm[k] = n->sm[l], n->sv[k] = n->sv[l], n->sd[k] = n->sd[l];
        }
    }
    n->nl = n->nl ? k + 1 : 0;
}

/* Labels M sums on its own (V's and D's strides 0) outside others: each product of the labels
 * inside them was made once per index of theirs (riedysa,rae->ysi, F32, 56 MB: 13 dots of 6
 * numbers into each element of D against one run of V, 2.85 ms; summed first, 1.67). For each
 * index of the labels outside the block (from n->own), M's block is summed over them into a
 * zeroed buffer S (the block's other labels, laid out in M's order: one walk of M's block in
 * its memory order, adding each number in), and the nest's other labels stream S as they
 * would have streamed M, once. Which nests do so: analysis.program._own_block. */
static void stream_own(int dt, const StreamNest *n, int64_t start, int64_t stop, const char *M,
                       const char *V, char *D, const double alpha[2], double cs) {
    static const double one[2] = {1.0, 0.0};
    static const float onef[2] = {1.0f, 0.0f};
    const int b = n->own, nl = n->nl;
    const int64_t z = dt == 0 ? 4 : dt == 3 ? 16 : 8;
    StreamNest walk, inner;
    walk.nl = nl - b, walk.own = 0, inner.nl = 0, inner.own = 0;
    int64_t bytes = z;
    for (int l = nl - 1; l >= b; --l) { /* S's strides, innermost first */
        const int mine = n->sv[l] == 0 && n->sd[l] == 0;
        walk.ext[l - b] = n->ext[l], walk.sm[l - b] = n->sm[l], walk.sv[l - b] = 0;
        walk.sd[l - b] = mine ? 0 : bytes;
        if (!mine) bytes *= n->ext[l];
    }
    for (int l = b; l < nl; ++l) {
        if (walk.sd[l - b] == 0) continue;
        const int i = inner.nl++;
        inner.ext[i] = n->ext[l], inner.sm[i] = walk.sd[l - b];
        inner.sv[i] = n->sv[l], inner.sd[i] = n->sd[l];
    }
    stream_coalesce(&walk);
    stream_coalesce(&inner);
    char *S = inner.nl ? malloc((size_t)bytes) : NULL;
    if (!S) { /* the nest as it is */
        StreamNest plain = *n;
        plain.own = 0;
        stream_run(dt, &plain, start, stop, M, V, D, alpha, cs);
        return;
    }
    const char *unit = dt == 0 || dt == 2 ? (const char *)onef : (const char *)one;
    int64_t idx[STREAM_MAXL] = {0};
    idx[0] = start;
    int64_t o[3] = {start * n->sm[0], start * n->sv[0], start * n->sd[0]};
    do {
        memset(S, 0, (size_t)bytes);
        stream_run(dt, &walk, 0, walk.ext[0], M + o[0], unit, S, one, 1.0);
        stream_run(dt, &inner, 0, inner.ext[0], S, V + o[1], D + o[2], alpha, cs);
    } while (!stream_step(n, b, idx, stop, o));
    free(S);
}

void stream_accumulate(int dt, const StreamNest *n, int64_t start, int64_t stop, const char *M,
                       const char *V, char *D, const double alpha[2], int conj_m) {
    if (n->nl < 1 || start >= stop) return;
    for (int l = 1; l < n->nl; ++l)
        if (n->ext[l] < 1) return;
    const double cs = conj_m ? -1.0 : 1.0;
    if (n->own > 0 && n->own < n->nl)
        stream_own(dt, n, start, stop, M, V, D, alpha, cs);
    else
        stream_run(dt, n, start, stop, M, V, D, alpha, cs);
}
