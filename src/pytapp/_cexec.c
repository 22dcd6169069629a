/*
 * pytapp._cexec: the compiled executor of lowered TAPP products.
 *
 * A Program is built once per plan from pure data (pytapp.analysis.program lowers a
 * ContractionSpec into it): what every operand must be (numpy type, shape, byte strides) and the
 * steps (a loop nest over the merged labels, or batched GEMMs on strided views followed by the
 * epilogue). Calling a Program checks the bound operands against it and runs every step without
 * returning to Python. Whatever it does not cover exactly (another dtype or layout, a view whose
 * memory owner it cannot see, operands that overlap D, a scalar that needs a TAPP error) makes
 * it return NotImplemented before anything is written, and the caller takes the general
 * (Python) path, which raises the right TAPP error or copies what must be copied.
 *
 * BLAS: the GEMM entry points are the very ones NumPy uses (their addresses are handed over by
 * pytapp.kernels.program), so there is one BLAS library and one thread pool in the process.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_2_0_API_VERSION
#include <numpy/arrayobject.h>

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "_amx.h"
#include "_stream.h"
#include "_tilegemm.h"

#define MAXL 32 /* most merged labels a program loops over */
#define MAX_WORKERS 64 /* most threads one blocked product splits over */
#define SUMMED_MIN_ROWS 64 /* fewest rows of D a worker of summed_gemm takes */
#define SUMMED_SPLIT_MIN_FLOPS (1 << 21) /* least work per worker splitting summed GEMMs */
/* Batches of GEMMs of at least this many flops share their elements (or D's rows) out over the
 * BLAS's pool, each GEMM on one thread; smaller ones call the GEMMs one after the other. */
#define BATCH_SPLIT_MIN_FLOPS (1 << 22)

enum { DT_F32 = 0, DT_F64 = 1, DT_C64 = 2, DT_C128 = 3 };
enum { K_LOOP = 0, K_GEMM = 1, K_TTGT = 2, K_STREAM = 3 };
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112, CONJ_TRANS = 113 };

/* Step timing (set_step_timing, step_times): the seconds programs spend in each step while it
 * is on, summed over calls, as the calling thread sees them (a step split over the pool counts
 * once, from its start to its last worker's end). Off by default: one branch per step. Meant
 * for one calling thread at a time (concurrent programs add without a lock). */
enum { STEP_PACK, STEP_GEMM, STEP_STORE, STEP_BLOCKED, STEP_STREAM, STEP_LOOP, STEP_COUNT };
static int g_step_timing = 0;
static double g_step_seconds[STEP_COUNT];

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double step_clock(void) { return g_step_timing ? now() : 0.0; }

/* Count the seconds since `since` (a step_clock() reading) toward `step`; the next start. */
static double step_done(int step, double since) {
    if (!g_step_timing) return 0.0;
    const double t = now();
    g_step_seconds[step] += t - since;
    return t;
}

/* CBLAS GEMM signatures, ILP64 (int64 dimensions) or LP64 (int). */
typedef void (*sgemm64_t)(int, int, int, int64_t, int64_t, int64_t, float, const float *, int64_t,
                          const float *, int64_t, float, float *, int64_t);
typedef void (*dgemm64_t)(int, int, int, int64_t, int64_t, int64_t, double, const double *,
                          int64_t, const double *, int64_t, double, double *, int64_t);
typedef void (*zgemm64_t)(int, int, int, int64_t, int64_t, int64_t, const void *, const void *,
                          int64_t, const void *, int64_t, const void *, void *, int64_t);
typedef void (*sgemm32_t)(int, int, int, int, int, int, float, const float *, int,
                          const float *, int, float, float *, int);
typedef void (*dgemm32_t)(int, int, int, int, int, int, double, const double *, int,
                          const double *, int, double, double *, int);
typedef void (*zgemm32_t)(int, int, int, int, int, int, const void *, const void *, int,
                          const void *, int, const void *, void *, int);

/* CBLAS GEMV signatures, ILP64 or LP64. */
typedef void (*sgemv64_t)(int, int, int64_t, int64_t, float, const float *, int64_t,
                          const float *, int64_t, float, float *, int64_t);
typedef void (*dgemv64_t)(int, int, int64_t, int64_t, double, const double *, int64_t,
                          const double *, int64_t, double, double *, int64_t);
typedef void (*zgemv64_t)(int, int, int64_t, int64_t, const void *, const void *, int64_t,
                          const void *, int64_t, const void *, void *, int64_t);
typedef void (*sgemv32_t)(int, int, int, int, float, const float *, int, const float *, int,
                          float, float *, int);
typedef void (*dgemv32_t)(int, int, int, int, double, const double *, int, const double *, int,
                          double, double *, int);
typedef void (*zgemv32_t)(int, int, int, int, const void *, const void *, int, const void *,
                          int, const void *, void *, int);

static void *g_gemm[4] = {NULL, NULL, NULL, NULL};
static void *g_gemv[4] = {NULL, NULL, NULL, NULL};
static int g_ilp64 = 1;

typedef struct {
    double re, im;
} cval; /* a scalar in the compute type, widened */

/* A loop nest over labels: extents and up to four byte strides per label. */
typedef struct {
    int nl, nout;
    npy_intp ext[MAXL];
    npy_intp st[4][MAXL];
} Nest;

/* The summed GEMMs of one worker: GEMMs over the summed batch elements, added into D. */
typedef struct {
    int dt, item, ta, tb, nr, nk;
    int64_t n, k, lda, ldb, ldd;
    npy_intp rext[MAXL], rst[2][MAXL]; /* summed batch axes: extents, L and R byte strides */
    npy_intp kext[MAXL], kst[3][MAXL]; /* kept batch axes: extents, L, R and D byte strides */
    const char *L, *R;
    char *D;
    npy_intp q0, q1;  /* this worker's kept batch elements (flattened) */
    npy_intp r0, r1;  /* and rows of D */
    npy_intp s0, s1;  /* and summed batch elements (flattened) */
    npy_intp lrow, drow; /* bytes from one row of L (of D) to the next */
    cval al, be;         /* alpha of every GEMM; beta of a share's first (then one) */
    /* C lying as D (same byte offsets), added by the GEMMs of kept batch elements: each
     * GEMM's rows of D set to cbe op(C) (cconj) just before it, while they are in cache */
    const char *C;
    cval cbe;
    int cconj;
} SummedJob;

typedef struct {
    PyObject_HEAD int type_num;
    int dtype;
    int item;
    int kind;
    int empty_d;   /* D has no element: nothing to do */
    int empty_sum; /* a summed label has extent 0: the product term is +0 */
    int row_block; /* a loop nest summing D's rows: summed elements per block (0: by element) */
    /* an elementwise nest whose A (bit 0 of plane_mask) or B (bit 1) runs along another label
     * than D's fastest: run block by block, `chunk` indices of each label a block, the
     * operand's block packed in the nest's order first (run_planes) */
    int plane_mask;
    npy_intp chunk[MAXL];
    /* a loop nest that may only move A into D (permute_layout; run_permute checks the rest) */
    int permute;
    int conj[4];   /* A, B, C, D */
    /* what each operand must be: ndim, shape, byte strides; footprint [lo, hi) in bytes */
    int ndim[4];
    npy_intp shape[4][MAXL];
    npy_intp strides[4][MAXL];
    npy_intp lo[4], hi[4];
    int has_foot[4];
    int c_as_d; /* C's strides are D's over every label of D: C's offsets are D's */
    /* the loop nest: nout output labels (D's merged modes), then the summed ones */
    int nl, nout;
    npy_intp ext[MAXL];
    npy_intp st[4][MAXL]; /* byte strides per label, of A, B, C, D (0 where absent) */
    /* GEMM: batch loops, then one CBLAS call per batch element */
    int nb;
    npy_intp bext[MAXL];
    npy_intp bst[3][MAXL]; /* A, B, D byte strides of the batch labels */
    int swap, ta, tb;
    int64_t m, n, k, lda, ldb, ldd;
    int nsum; /* the first nsum batch labels are summed (D's stride 0): summed_run adds them */
    SummedJob sjob; /* with nsum: its job, but for the operands, alpha and beta */
    npy_intp kept;  /* with nsum: the kept batch elements */
    /* TTGT: pack A as [H][M][K] and B as [H][K][N] (summing isolated labels, applying op),
     * GEMMs into T [H][M][N], then D = op_D(alpha T + beta op_C(C)) over D's labels, with
     * T's strides (0 for broadcast labels) in tst. */
    Nest pack_a, pack_b;
    npy_intp tst[MAXL];
    npy_intp bytes_a, bytes_b, bytes_t;
    int d_direct; /* D lies as T would: without C the GEMMs write D, no T */
    /* A thin GEMM's thick operand (0: A, 1: B; -1: none) packed `block` indices of its nest's
     * label `block_axis` at a time (`block_unit` rows or columns of T per index), each block
     * multiplied while in cache (run_ttgt_blocked). */
    int blocked, block_axis;
    npy_intp block, block_unit;
    /* with blocks and a store (C given, or D not lying as T): the blocked label's place in the
     * store nest, each block's rows (columns) of T stored from a worker's buffer of bytes_t
     * (T's strides tst those of that buffer); -1: T whole, then stored */
    int block_store;
    /* with blocks and a store: the lead labels, one index of each per block (the GEMMs'
     * batch labels, then free labels of the thick operand above the blocked one): per label
     * its extent, the thick operand's byte stride, its place in the store nest and the other
     * operand's byte stride (0 for a free label) */
    int nbb;
    npy_intp bbext[MAXL], bbsrc[MAXL], bboth[MAXL];
    int bblab[MAXL];
    /* with blocks and a store, where the batch's labels are not lead labels: the batch's
     * GEMMs, one after another in each block (the thick operand's blocks packed one after
     * another, T's boxes at bytes_t / block_gemms apart); 1 otherwise */
    npy_intp block_gemms;
    /* STREAM (swap: M is B): V packed by spack (bytes_v; 0: read in place), M streamed along
     * `stream` (_stream.h): stream_mode 0 and 1 into D set to beta op_C(C) first (1: shared out
     * along the first label, one of D's), 2 into each worker's zeroed T (bytes_t, strides tst
     * over D's labels), added up and stored into D; 3 into one zeroed T shared out along the
     * first label (one of D's), stored into D. */
    Nest spack;
    npy_intp bytes_v;
    int stream_mode;
    StreamNest stream;
    int v_reduce;     /* V has labels of its own: walked by vsum into the zeroed pack instead, */
    int v_permute;    /* or into a buffer in V's order that spack (a permutation) packs; */
    int v_mode;       /* the walk shared out as the stream's mode says */
    StreamNest vsum;  /* (its sv: 0, the "vector" being the number 1) */
    double release_gil_flops;
    double flops;
    PyObject *status_type;
    PyObject *status_dict; /* the template Status' attributes, copied per call */
    vectorcallfunc vcall;
} Program;

/* ------------------------------------------------------------------ scalars */

/* alpha or beta as the compute type; 0 on success, 1 when the general path must judge it. */
static int to_scalar(PyObject *o, int dtype, cval *out) {
    if (PyFloat_CheckExact(o) || PyFloat_Check(o)) {
        out->re = PyFloat_AS_DOUBLE(o);
        out->im = 0.0;
    } else if (PyLong_CheckExact(o)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 1;
        }
        out->re = (double)v;
        out->im = 0.0;
    } else if (PyComplex_Check(o)) {
        out->re = PyComplex_RealAsDouble(o);
        out->im = PyComplex_ImagAsDouble(o);
    } else {
        return 1; /* numpy scalars of other types, bools, 0-d arrays, non-numbers */
    }
    if (dtype == DT_F32 || dtype == DT_F64) {
        if (out->im != 0.0) return 1; /* error 21: the general path raises it */
    }
    if (dtype == DT_F32 || dtype == DT_C64) {
        /* a finite value that overflows F32 is error 21 */
        if (isfinite(out->re) && !isfinite((double)(float)out->re)) return 1;
        if (isfinite(out->im) && !isfinite((double)(float)out->im)) return 1;
        out->re = (double)(float)out->re;
        out->im = (double)(float)out->im;
    }
    return 0;
}

/* An elementwise nest block by block (Program.plane_mask): 0 done, 1 not (no memory). */
static int run_planes(const Program *p, cval al, cval be, const char *A, const char *B,
                      const char *C, char *D);

/* ------------------------------------------------------------------ kernels */

/* An odometer over labels [first, last) of a program, keeping up to four byte offsets. */
#define ODOMETER_STEP(p, idx, first, last, offs, nst, done)                                      \
    do {                                                                                        \
        int _l = (last)-1;                                                                      \
        for (; _l >= (first); --_l) {                                                           \
            if (++idx[_l] < (p)->ext[_l]) {                                                     \
                for (int _s = 0; _s < (nst); ++_s) offs[_s] += (p)->st[_s][_l];                  \
                break;                                                                          \
            }                                                                                   \
            idx[_l] = 0;                                                                        \
            for (int _s = 0; _s < (nst); ++_s) offs[_s] -= ((p)->ext[_l] - 1) * (p)->st[_s][_l]; \
        }                                                                                       \
        done = _l < (first);                                                                    \
    } while (0)

/* A product that sums nothing: the innermost label as a plain loop (unit or zero strides
 * without C: loops the compiler vectorises), the odometer over the others. */
#define REAL_ELEMENTWISE(NAME, T)                                                               \
    static void elem_##NAME(const Program *p, T alpha, T beta, const char *A, const char *B,    \
                            const char *C, char *D) {                                           \
        npy_intp idx[MAXL] = {0};                                                               \
        npy_intp o[4] = {0, 0, 0, 0};                                                           \
        const int last = p->nout - 1, mid = last - 1;                                           \
        const npy_intp e = p->ext[last], z = (npy_intp)sizeof(T);                               \
        const npy_intp s0 = p->st[0][last], s1 = p->st[1][last];                                \
        const npy_intp s2 = p->st[2][last], s3 = p->st[3][last];                                \
        const int plain = !C && s3 == z && (s0 == z || s0 == 0) && (s1 == z || s1 == 0);        \
        /* the next label out as a plain loop too: short rows pay no odometer step each */     \
        const npy_intp em = mid >= 0 ? p->ext[mid] : 1;                                         \
        const npy_intp m0 = mid >= 0 ? p->st[0][mid] : 0, m1 = mid >= 0 ? p->st[1][mid] : 0;    \
        const npy_intp m2 = mid >= 0 ? p->st[2][mid] : 0, m3 = mid >= 0 ? p->st[3][mid] : 0;    \
        int done = 0;                                                                           \
        while (!done) {                                                                         \
            for (npy_intp j = 0; j < em; ++j) {                                                 \
                const char *pa = A + o[0] + j * m0, *pb = B + o[1] + j * m1;                    \
                const char *pc = C ? C + o[2] + j * m2 : NULL;                                  \
                char *pd = D + o[3] + j * m3;                                                   \
                if (plain) {                                                                    \
                    T *d = (T *)pd;                                                             \
                    const T *a = (const T *)pa, *b = (const T *)pb;                             \
                    if (s0 && s1) {                                                             \
                        for (npy_intp i = 0; i < e; ++i) d[i] = alpha * (a[i] * b[i]);          \
                    } else if (s0) {                                                            \
                        const T bv = b[0];                                                      \
                        for (npy_intp i = 0; i < e; ++i) d[i] = alpha * (a[i] * bv);            \
                    } else if (s1) {                                                            \
                        const T av = a[0];                                                      \
                        for (npy_intp i = 0; i < e; ++i) d[i] = alpha * (av * b[i]);            \
                    } else {                                                                    \
                        const T v = alpha * (a[0] * b[0]);                                      \
                        for (npy_intp i = 0; i < e; ++i) d[i] = v;                              \
                    }                                                                           \
                } else {                                                                        \
                    for (npy_intp i = 0; i < e; ++i) {                                          \
                        T r = alpha * (*(const T *)(pa + i * s0) * *(const T *)(pb + i * s1));  \
                        if (pc) r += beta * *(const T *)(pc + i * s2);                          \
                        *(T *)(pd + i * s3) = r;                                                \
                    }                                                                           \
                }                                                                               \
            }                                                                                   \
            ODOMETER_STEP(p, idx, 0, mid > 0 ? mid : 0, o, 4, done);                            \
        }                                                                                       \
    }

/* Terms per block of an element's sum: each block's sum (in four running sums) goes into the
 * element's total, so that a long sum loses no more accuracy than blocked dots do. */
#define SUM_BLOCK 256

/* Before each summed element of a row sum: once BLOCK have been added into the N values of
 * ACC, they go into the row's totals TOT and ACC starts again (COUNT: elements in the block). */
#define ROW_BLOCK_FLUSH(ACC, TOT, N, COUNT, BLOCK)                                               \
    if ((COUNT)++ == (BLOCK)) {                                                                 \
        for (npy_intp i_ = 0; i_ < (N); ++i_) (TOT)[i_] += (ACC)[i_], (ACC)[i_] = 0;            \
        (COUNT) = 1;                                                                            \
    }

/* D's rows summed one summed element at a time, a plain loop along the row, in blocks of
 * p->row_block summed elements whose sums are then added up (the lowering decides where: a sum
 * that strides through both operands along rows that do not). 1 when out of memory: the
 * caller then sums element by element. */
#define REAL_ROW_SUMS(NAME, T)                                                                  \
    static int rows_##NAME(const Program *p, T alpha, T beta, const char *A, const char *B,     \
                           const char *C, char *D) {                                            \
        const int nl = p->nl, nout = p->nout, li = nout - 1;                                    \
        const npy_intp e = p->ext[li], s2 = p->st[2][li], s3 = p->st[3][li];                    \
        const int ua = p->st[0][li] != 0, ub = p->st[1][li] != 0;                               \
        T *acc = malloc((size_t)e * 2 * sizeof(T)), *tot = acc + e;                             \
        if (!acc) return 1;                                                                     \
        npy_intp idx[MAXL] = {0};                                                               \
        npy_intp o[4] = {0, 0, 0, 0};                                                           \
        int done = 0;                                                                           \
        while (!done) {                                                                         \
            for (npy_intp i = 0; i < e; ++i) acc[i] = tot[i] = 0;                               \
            npy_intp jdx[MAXL];                                                                 \
            for (int l_ = nout; l_ < nl; ++l_) jdx[l_] = 0;                                     \
            npy_intp q[2] = {o[0], o[1]};                                                       \
            int inner_done = 0, in_block = 0;                                                   \
            while (!inner_done) {                                                               \
                ROW_BLOCK_FLUSH(acc, tot, e, in_block, p->row_block)                            \
                const T *a = (const T *)(A + q[0]), *b = (const T *)(B + q[1]);                 \
                if (ua && ub) {                                                                 \
                    for (npy_intp i = 0; i < e; ++i) acc[i] += a[i] * b[i];                     \
                } else if (ua) {                                                                \
                    const T bv = b[0];                                                          \
                    for (npy_intp i = 0; i < e; ++i) acc[i] += a[i] * bv;                       \
                } else {                                                                        \
                    const T av = a[0];                                                          \
                    for (npy_intp i = 0; i < e; ++i) acc[i] += av * b[i];                       \
                }                                                                               \
                ODOMETER_STEP(p, jdx, nout, nl, q, 2, inner_done);                              \
            }                                                                                   \
            for (npy_intp i = 0; i < e; ++i) { /* D's row may stride (s3) */                    \
                T r = alpha * (tot[i] + acc[i]);                                                \
                if (C) r += beta * *(const T *)(C + o[2] + i * s2);                             \
                *(T *)(D + o[3] + i * s3) = r;                                                  \
            }                                                                                   \
            ODOMETER_STEP(p, idx, 0, li, o, 4, done);                                           \
        }                                                                                       \
        free(acc);                                                                              \
        return 0;                                                                               \
    }

/* The dot of two contiguous runs of n numbers: DOT_LANES running sums the compiler keeps in
 * vector registers, in blocks of SUM_BLOCK terms whose sums are added up (as accurate as the
 * strided loop's blocks). */
#define DOT_LANES 16
/* ... for runs of at least this many numbers: shorter ones go through the four running sums
 * of the strided loop (runs of 16, F64: 0.196 ms there, 0.420 in vector lanes). */
#define DOT_LANES_MIN 64
#define REAL_DOT(NAME, T)                                                                       \
    static inline T dot_##NAME(const T *a, const T *b, npy_intp n) {                            \
        T tot = 0;                                                                              \
        for (npy_intp i0 = 0; i0 < n; i0 += SUM_BLOCK) {                                        \
            const npy_intp i1 = n - i0 < SUM_BLOCK ? n : i0 + SUM_BLOCK;                        \
            T acc[DOT_LANES] = {0}, s = 0;                                                      \
            npy_intp i = i0;                                                                    \
            for (; i + DOT_LANES <= i1; i += DOT_LANES)                                         \
                for (int j = 0; j < DOT_LANES; ++j) acc[j] += a[i + j] * b[i + j];              \
            for (; i < i1; ++i) s += a[i] * b[i];                                               \
            for (int w = DOT_LANES / 2; w > 0; w /= 2) /* pairwise */                           \
                for (int j = 0; j < w; ++j) acc[j] += acc[j + w];                               \
            tot += acc[0] + s;                                                                  \
        }                                                                                       \
        return tot;                                                                             \
    }                                                                                           \
    /* Every element of D a dot of runs contiguous in A and B, of DOT_LANES_MIN or more: 1 when \
     * done (0: the nest's strided loop sums them). */                                          \
    /* (not inlined: the strided loop around it then ran 5-8% slower on runs of 16) */         \
    __attribute__((noinline)) static int dots_##NAME(const Program *p, T alpha, T beta,         \
                                                     const char *A, const char *B,              \
                                                     const char *C, char *D) {                  \
        const int nl = p->nl, nout = p->nout;                                                   \
        if (nl <= nout) return 0; /* nothing summed */                                          \
        const npy_intp e = p->ext[nl - 1], z = (npy_intp)sizeof(T);                             \
        if (p->st[0][nl - 1] != z || p->st[1][nl - 1] != z || e < DOT_LANES_MIN) return 0;      \
        npy_intp idx[MAXL] = {0}, o[4] = {0, 0, 0, 0};                                          \
        int done = 0;                                                                           \
        while (!done) {                                                                         \
            npy_intp jdx[MAXL], q[2] = {o[0], o[1]};                                            \
            for (int l_ = nout; l_ < nl - 1; ++l_) jdx[l_] = 0;                                 \
            T tot = 0;                                                                          \
            int inner_done = 0;                                                                 \
            while (!inner_done) {                                                               \
                tot += dot_##NAME((const T *)(A + q[0]), (const T *)(B + q[1]), e);             \
                ODOMETER_STEP(p, jdx, nout, nl - 1, q, 2, inner_done);                          \
            }                                                                                   \
            T r = alpha * tot;                                                                  \
            if (C) r += beta * *(const T *)(C + o[2]);                                          \
            *(T *)(D + o[3]) = r;                                                               \
            ODOMETER_STEP(p, idx, 0, nout, o, 4, done);                                         \
        }                                                                                       \
        return 1;                                                                               \
    }

#define REAL_KERNELS(NAME, T)                                                                   \
    REAL_ELEMENTWISE(NAME, T)                                                                   \
    REAL_DOT(NAME, T)                                                                           \
    REAL_ROW_SUMS(NAME, T)                                                                      \
    static void loop_##NAME(const Program *p, cval al, cval be, const char *A, const char *B,   \
                            const char *C, char *D) {                                           \
        npy_intp idx[MAXL] = {0};                                                               \
        npy_intp o[4] = {0, 0, 0, 0};                                                           \
        const T alpha = (T)al.re, beta = (T)be.re;                                              \
        const int nl = p->nl, nout = p->nout;                                                   \
        if (nl == nout && nout > 0) {                                                           \
            if (p->plane_mask && !run_planes(p, al, be, A, B, C, D)) return;                   \
            elem_##NAME(p, alpha, beta, A, B, C, D);                                            \
            return;                                                                             \
        }                                                                                       \
        if (p->row_block && !rows_##NAME(p, alpha, beta, A, B, C, D))                           \
            return;                                                                             \
        if (dots_##NAME(p, alpha, beta, A, B, C, D)) return;                                    \
        const npy_intp e_in = nl > nout ? p->ext[nl - 1] : 1;                                   \
        const npy_intp sa_in = nl > nout ? p->st[0][nl - 1] : 0;                                \
        const npy_intp sb_in = nl > nout ? p->st[1][nl - 1] : 0;                                \
        int done = 0;                                                                           \
        while (!done) {                                                                         \
            T acc = 0;                                                                          \
            if (nl > nout) {                                                                    \
                /* four running sums: one would wait on each addition's latency */             \
                T acc0 = 0, acc1 = 0, acc2 = 0, acc3 = 0, tot = 0;                              \
                npy_intp jdx[MAXL]; /* only the summed labels' counters are used */             \
                for (int l_ = nout; l_ < nl - 1; ++l_) jdx[l_] = 0;                             \
                npy_intp q[2] = {o[0], o[1]}, since = 0;                                        \
                int inner_done = 0;                                                             \
                while (!inner_done) {                                                           \
                    const char *pa = A + q[0], *pb = B + q[1];                                  \
                    for (npy_intp i0 = 0; i0 < e_in; i0 += SUM_BLOCK) {                         \
                    const npy_intp i1 = e_in - i0 < SUM_BLOCK ? e_in : i0 + SUM_BLOCK;          \
                    npy_intp i = i0;                                                            \
                    for (; i + 4 <= i1; i += 4) {                                               \
                        acc0 += *(const T *)(pa + i * sa_in) * *(const T *)(pb + i * sb_in);    \
                        acc1 += *(const T *)(pa + (i + 1) * sa_in) *                            \
                                *(const T *)(pb + (i + 1) * sb_in);                             \
                        acc2 += *(const T *)(pa + (i + 2) * sa_in) *                            \
                                *(const T *)(pb + (i + 2) * sb_in);                             \
                        acc3 += *(const T *)(pa + (i + 3) * sa_in) *                            \
                                *(const T *)(pb + (i + 3) * sb_in);                             \
                    }                                                                           \
                    for (; i < i1; ++i)                                                         \
                        acc0 += *(const T *)(pa + i * sa_in) * *(const T *)(pb + i * sb_in);    \
                    if ((since += i1 - i0) >= SUM_BLOCK) {                                      \
                        tot += (acc0 + acc1) + (acc2 + acc3);                                   \
                        acc0 = acc1 = acc2 = acc3 = 0, since = 0;                               \
                    }                                                                           \
                    }                                                                           \
                    ODOMETER_STEP(p, jdx, nout, nl - 1, q, 2, inner_done);                      \
                }                                                                               \
                acc = tot + ((acc0 + acc1) + (acc2 + acc3));                                    \
            } else {                                                                            \
                acc = *(const T *)(A + o[0]) * *(const T *)(B + o[1]);                          \
            }                                                                                   \
            T r = alpha * acc;                                                                  \
            if (C) r += beta * *(const T *)(C + o[2]);                                          \
            *(T *)(D + o[3]) = r;                                                               \
            ODOMETER_STEP(p, idx, 0, nout, o, 4, done);                                         \
        }                                                                                       \
    }                                                                                           \
    /* D = beta C (C may be D itself), or +0 when C is NULL: the alpha == 0 case, or the       \
     * prepass of a GEMM whose C lies elsewhere. */                                             \
    static void scale_##NAME(const Program *p, cval be, const char *C, char *D) {               \
        npy_intp idx[MAXL] = {0};                                                               \
        npy_intp o[4] = {0, 0, 0, 0};                                                           \
        const T beta = (T)be.re;                                                                \
        const int last = p->nout - 1; /* D's fastest label: a plain loop (odometer: the rest) */\
        const npy_intp e = last >= 0 ? p->ext[last] : 1, z = (npy_intp)sizeof(T);               \
        const npy_intp s2 = last >= 0 ? p->st[2][last] : 0, s3 = last >= 0 ? p->st[3][last] : 0; \
        int done = 0;                                                                           \
        while (!done) {                                                                         \
            char *d = D + o[3];                                                                 \
            if (!C) {                                                                           \
                for (npy_intp i = 0; i < e; ++i) *(T *)(d + i * s3) = (T)0;                     \
            } else if (s2 == z && s3 == z) {                                                    \
                const T *c = (const T *)(C + o[2]);                                             \
                T *dd = (T *)d;                                                                 \
                for (npy_intp i = 0; i < e; ++i) dd[i] = beta * c[i];                           \
            } else {                                                                            \
                const char *c = C + o[2];                                                       \
                for (npy_intp i = 0; i < e; ++i)                                                \
                    *(T *)(d + i * s3) = beta * *(const T *)(c + i * s2);                       \
            }                                                                                   \
            ODOMETER_STEP(p, idx, 0, last, o, 4, done);                                         \
        }                                                                                       \
    }

REAL_KERNELS(f32, float)
REAL_KERNELS(f64, double)

#define CMUL_RE(ar, ai, br, bi) ((ar) * (br) - (ai) * (bi))
#define CMUL_IM(ar, ai, br, bi) ((ar) * (bi) + (ai) * (br))

/* An odometer, alpha and beta, and the signs of the conjugated operands (op_A ... op_D). */
#define COMPLEX_STATE(T)                                                                        \
    npy_intp idx[MAXL] = {0};                                                                   \
    npy_intp o[4] = {0, 0, 0, 0};                                                               \
    const T ar = (T)al.re, ai = (T)al.im, br = (T)be.re, bi = (T)be.im;                         \
    const T sa = p->conj[0] ? (T)-1 : (T)1, sb = p->conj[1] ? (T)-1 : (T)1;                     \
    const T sc = p->conj[2] ? (T)-1 : (T)1, sd = p->conj[3] ? (T)-1 : (T)1;

/* D = op_D(alpha acc + beta op_C(C)) for one complex element (C read when not NULL). */
#define COMPLEX_FINISH(T, ACR, ACI, CP, DP)                                                     \
    do {                                                                                        \
        T rr_ = CMUL_RE(ar, ai, ACR, ACI), ri_ = CMUL_IM(ar, ai, ACR, ACI);                     \
        if (C) {                                                                                \
            const T *c_ = (const T *)(CP);                                                      \
            const T cr_ = c_[0], ci_ = sc * c_[1];                                              \
            rr_ += CMUL_RE(br, bi, cr_, ci_);                                                   \
            ri_ += CMUL_IM(br, bi, cr_, ci_);                                                   \
        }                                                                                       \
        T *d_ = (T *)(DP);                                                                      \
        d_[0] = rr_;                                                                            \
        d_[1] = sd * ri_;                                                                       \
    } while (0)

/* d[i] = op_D(w x[i]) over n complex elements, all contiguous (w: alpha times the operand that
 * is constant along the run); the sign of x's imaginary part is sx, that of D's sd. */
#define COMPLEX_SCALED_RUN(T, D_, X_, WR, WI, SX, SD, N)                                         \
    for (npy_intp i = 0; i < (N); ++i) {                                                        \
        const T xr = (X_)[2 * i], xi = (SX) * (X_)[2 * i + 1];                                  \
        (D_)[2 * i] = CMUL_RE(WR, WI, xr, xi);                                                  \
        (D_)[2 * i + 1] = (SD) * CMUL_IM(WR, WI, xr, xi);                                       \
    }

#define COMPLEX_KERNELS(NAME, T)                                                                \
    static void elem_##NAME(const Program *p, cval al, cval be, const char *A, const char *B,   \
                            const char *C, char *D) {                                           \
        COMPLEX_STATE(T)                                                                        \
        const int last = p->nout - 1;                                                           \
        const npy_intp e = p->ext[last], z = 2 * (npy_intp)sizeof(T);                           \
        const npy_intp s0 = p->st[0][last], s1 = p->st[1][last];                                \
        const npy_intp s2 = p->st[2][last], s3 = p->st[3][last];                                \
        /* unit or zero strides without C: plain loops the compiler vectorises */               \
        const int plain = !C && s3 == z && (s0 == z || s0 == 0) && (s1 == z || s1 == 0);        \
        /* the next label out as a plain loop too: short rows pay no odometer step each */     \
        const int mid = last - 1;                                                               \
        const npy_intp em = mid >= 0 ? p->ext[mid] : 1;                                         \
        const npy_intp m0 = mid >= 0 ? p->st[0][mid] : 0, m1 = mid >= 0 ? p->st[1][mid] : 0;    \
        const npy_intp m2 = mid >= 0 ? p->st[2][mid] : 0, m3 = mid >= 0 ? p->st[3][mid] : 0;    \
        int done = 0;                                                                           \
        while (!done) {                                                                         \
          for (npy_intp j = 0; j < em; ++j) {                                                   \
            const char *pa = A + o[0] + j * m0, *pb = B + o[1] + j * m1;                        \
            const char *pc = C ? C + o[2] + j * m2 : NULL;                                      \
            char *pd = D + o[3] + j * m3;                                                       \
            if (plain && s0 != s1) { /* one operand constant along the run: fold it in alpha */ \
                const T *c_ = (const T *)(s0 ? pb : pa), *x_ = (const T *)(s0 ? pa : pb);        \
                const T sc_ = s0 ? sb : sa, sx_ = s0 ? sa : sb;                                 \
                const T cr_ = c_[0], ci_ = sc_ * c_[1];                                         \
                const T wr = CMUL_RE(ar, ai, cr_, ci_), wi = CMUL_IM(ar, ai, cr_, ci_);         \
                T *d_ = (T *)pd;                                                                \
                COMPLEX_SCALED_RUN(T, d_, x_, wr, wi, sx_, sd, e)                               \
                continue;                                                                       \
            }                                                                                   \
            if (plain && s0) { /* both run along it: a Hadamard product */                       \
                const T *x_ = (const T *)pa, *y_ = (const T *)pb;                               \
                T *d_ = (T *)pd;                                                                \
                for (npy_intp i = 0; i < e; ++i) {                                              \
                    const T xr = x_[2 * i], xi = sa * x_[2 * i + 1];                            \
                    const T yr = y_[2 * i], yi = sb * y_[2 * i + 1];                            \
                    const T pr = CMUL_RE(xr, xi, yr, yi), pi = CMUL_IM(xr, xi, yr, yi);         \
                    d_[2 * i] = CMUL_RE(ar, ai, pr, pi);                                        \
                    d_[2 * i + 1] = sd * CMUL_IM(ar, ai, pr, pi);                               \
                }                                                                               \
                continue;                                                                       \
            }                                                                                   \
            for (npy_intp i = 0; i < e; ++i) {                                                  \
                const T *x = (const T *)(pa + i * s0);                                          \
                const T *y = (const T *)(pb + i * s1);                                          \
                const T xr = x[0], xi = sa * x[1], yr = y[0], yi = sb * y[1];                   \
                const T accr = CMUL_RE(xr, xi, yr, yi), acci = CMUL_IM(xr, xi, yr, yi);         \
                COMPLEX_FINISH(T, accr, acci, pc + i * s2, pd + i * s3);                        \
            }                                                                                   \
          }                                                                                     \
          ODOMETER_STEP(p, idx, 0, mid > 0 ? mid : 0, o, 4, done);                              \
        }                                                                                       \
    }                                                                                           \
    static int rows_##NAME(const Program *p, cval al, cval be, const char *A, const char *B,    \
                           const char *C, char *D) {                                            \
        COMPLEX_STATE(T)                                                                        \
        const int nl = p->nl, nout = p->nout, li = nout - 1;                                    \
        const npy_intp e = p->ext[li], s2 = p->st[2][li], s3 = p->st[3][li];                    \
        const int ua = p->st[0][li] != 0, ub = p->st[1][li] != 0;                               \
        T *acc = malloc((size_t)e * 4 * sizeof(T)), *tot = acc + 2 * e;                         \
        if (!acc) return 1;                                                                     \
        int done = 0;                                                                           \
        while (!done) {                                                                         \
            for (npy_intp i = 0; i < 2 * e; ++i) acc[i] = tot[i] = 0;                           \
            npy_intp jdx[MAXL];                                                                 \
            for (int l_ = nout; l_ < nl; ++l_) jdx[l_] = 0;                                     \
            npy_intp q[2] = {o[0], o[1]};                                                       \
            int inner_done = 0, in_block = 0;                                                   \
            while (!inner_done) {                                                               \
                ROW_BLOCK_FLUSH(acc, tot, 2 * e, in_block, p->row_block)                        \
                const T *x = (const T *)(A + q[0]), *y = (const T *)(B + q[1]);                 \
                if (ua && ub) {                                                                 \
                    for (npy_intp i = 0; i < e; ++i) {                                          \
                        const T xr = x[2 * i], xi = sa * x[2 * i + 1];                          \
                        const T yr = y[2 * i], yi = sb * y[2 * i + 1];                          \
                        acc[2 * i] += CMUL_RE(xr, xi, yr, yi);                                  \
                        acc[2 * i + 1] += CMUL_IM(xr, xi, yr, yi);                              \
                    }                                                                           \
                } else {                                                                        \
                    const T *v = ua ? y : x, *w = ua ? x : y; /* v constant along the row */   \
                    const T sv = ua ? sb : sa, sw = ua ? sa : sb;                               \
                    const T vr = v[0], vi = sv * v[1];                                          \
                    for (npy_intp i = 0; i < e; ++i) {                                          \
                        const T wr = w[2 * i], wi = sw * w[2 * i + 1];                          \
                        acc[2 * i] += CMUL_RE(vr, vi, wr, wi);                                  \
                        acc[2 * i + 1] += CMUL_IM(vr, vi, wr, wi);                              \
                    }                                                                           \
                }                                                                               \
                ODOMETER_STEP(p, jdx, nout, nl, q, 2, inner_done);                              \
            }                                                                                   \
            for (npy_intp i = 0; i < e; ++i)                                                    \
                COMPLEX_FINISH(T, tot[2 * i] + acc[2 * i], tot[2 * i + 1] + acc[2 * i + 1],     \
                               C + o[2] + i * s2, D + o[3] + i * s3);                           \
            ODOMETER_STEP(p, idx, 0, li, o, 4, done);                                           \
        }                                                                                       \
        free(acc);                                                                              \
        return 0;                                                                               \
    }                                                                                           \
    static void loop_##NAME(const Program *p, cval al, cval be, const char *A, const char *B,   \
                            const char *C, char *D) {                                           \
        COMPLEX_STATE(T)                                                                        \
        const int nl = p->nl, nout = p->nout;                                                   \
        if (nl == nout && nout > 0) {                                                           \
            if (p->plane_mask && !run_planes(p, al, be, A, B, C, D)) return;                   \
            elem_##NAME(p, al, be, A, B, C, D);                                                 \
            return;                                                                             \
        }                                                                                       \
        if (p->row_block && !rows_##NAME(p, al, be, A, B, C, D))                                \
            return;                                                                             \
        const npy_intp e_in = nl > nout ? p->ext[nl - 1] : 1;                                   \
        const npy_intp sa_in = nl > nout ? p->st[0][nl - 1] : 0;                                \
        const npy_intp sb_in = nl > nout ? p->st[1][nl - 1] : 0;                                \
        int done = 0;                                                                           \
        while (!done) {                                                                         \
            T accr = 0, acci = 0;                                                               \
            if (nl > nout) {                                                                    \
                T r0 = 0, i0 = 0, r1 = 0, i1 = 0; /* two running sums of each part */           \
                T totr = 0, toti = 0;                                                           \
                npy_intp jdx[MAXL]; /* only the summed labels' counters are used */             \
                for (int l_ = nout; l_ < nl - 1; ++l_) jdx[l_] = 0;                             \
                npy_intp q[2] = {o[0], o[1]}, since = 0;                                        \
                int inner_done = 0;                                                             \
                while (!inner_done) {                                                           \
                    const char *pa = A + q[0], *pb = B + q[1];                                  \
                    for (npy_intp j0 = 0; j0 < e_in; j0 += SUM_BLOCK) {                         \
                    const npy_intp j1 = e_in - j0 < SUM_BLOCK ? e_in : j0 + SUM_BLOCK;          \
                    npy_intp i = j0;                                                            \
                    for (; i + 2 <= j1; i += 2) {                                               \
                        const T *x = (const T *)(pa + i * sa_in);                               \
                        const T *y = (const T *)(pb + i * sb_in);                               \
                        const T *u = (const T *)(pa + (i + 1) * sa_in);                         \
                        const T *v = (const T *)(pb + (i + 1) * sb_in);                         \
                        const T xr = x[0], xi = sa * x[1], yr = y[0], yi = sb * y[1];           \
                        const T ur = u[0], ui = sa * u[1], vr = v[0], vi = sb * v[1];           \
                        r0 += CMUL_RE(xr, xi, yr, yi);                                          \
                        i0 += CMUL_IM(xr, xi, yr, yi);                                          \
                        r1 += CMUL_RE(ur, ui, vr, vi);                                          \
                        i1 += CMUL_IM(ur, ui, vr, vi);                                          \
                    }                                                                           \
                    for (; i < j1; ++i) {                                                       \
                        const T *x = (const T *)(pa + i * sa_in);                               \
                        const T *y = (const T *)(pb + i * sb_in);                               \
                        const T xr = x[0], xi = sa * x[1], yr = y[0], yi = sb * y[1];           \
                        r0 += CMUL_RE(xr, xi, yr, yi);                                          \
                        i0 += CMUL_IM(xr, xi, yr, yi);                                          \
                    }                                                                           \
                    if ((since += j1 - j0) >= SUM_BLOCK) {                                      \
                        totr += r0 + r1, toti += i0 + i1;                                       \
                        r0 = i0 = r1 = i1 = 0, since = 0;                                       \
                    }                                                                           \
                    }                                                                           \
                    ODOMETER_STEP(p, jdx, nout, nl - 1, q, 2, inner_done);                      \
                }                                                                               \
                accr = totr + (r0 + r1);                                                        \
                acci = toti + (i0 + i1);                                                        \
            } else {                                                                            \
                const T *x = (const T *)(A + o[0]);                                             \
                const T *y = (const T *)(B + o[1]);                                             \
                const T xr = x[0], xi = sa * x[1], yr = y[0], yi = sb * y[1];                   \
                accr = CMUL_RE(xr, xi, yr, yi);                                                 \
                acci = CMUL_IM(xr, xi, yr, yi);                                                 \
            }                                                                                   \
            T rr = CMUL_RE(ar, ai, accr, acci), ri = CMUL_IM(ar, ai, accr, acci);               \
            if (C) {                                                                            \
                const T *c = (const T *)(C + o[2]);                                             \
                const T cr = c[0], ci = sc * c[1];                                              \
                rr += CMUL_RE(br, bi, cr, ci);                                                  \
                ri += CMUL_IM(br, bi, cr, ci);                                                  \
            }                                                                                   \
            T *d = (T *)(D + o[3]);                                                             \
            d[0] = rr;                                                                          \
            d[1] = sd * ri;                                                                     \
            ODOMETER_STEP(p, idx, 0, nout, o, 4, done);                                         \
        }                                                                                       \
    }                                                                                           \
    static void scale_##NAME(const Program *p, cval be, const char *C, char *D) {               \
        npy_intp idx[MAXL] = {0};                                                               \
        npy_intp o[4] = {0, 0, 0, 0};                                                           \
        const T br = (T)be.re, bi = (T)be.im;                                                   \
        const T sc = p->conj[2] ? (T)-1 : (T)1;                                                 \
        const int last = p->nout - 1; /* D's fastest label: a plain loop (odometer: the rest) */\
        const npy_intp e = last >= 0 ? p->ext[last] : 1;                                        \
        const npy_intp s2 = last >= 0 ? p->st[2][last] : 0, s3 = last >= 0 ? p->st[3][last] : 0; \
        int done = 0;                                                                           \
        while (!done) {                                                                         \
            for (npy_intp i = 0; i < e; ++i) {                                                  \
                T *d = (T *)(D + o[3] + i * s3);                                                \
                if (C) {                                                                        \
                    const T *c = (const T *)(C + o[2] + i * s2);                                \
                    const T cr = c[0], ci = sc * c[1];                                          \
                    d[0] = CMUL_RE(br, bi, cr, ci);                                             \
                    d[1] = CMUL_IM(br, bi, cr, ci);                                             \
                } else {                                                                        \
                    d[0] = 0;                                                                   \
                    d[1] = 0;                                                                   \
                }                                                                               \
            }                                                                                   \
            ODOMETER_STEP(p, idx, 0, last, o, 4, done);                                         \
        }                                                                                       \
    }                                                                                           \
    static void conj_##NAME(const Program *p, char *D) {                                        \
        npy_intp idx[MAXL] = {0};                                                               \
        npy_intp o[4] = {0, 0, 0, 0};                                                           \
        const int last = p->nout - 1;                                                           \
        const npy_intp e = last >= 0 ? p->ext[last] : 1;                                        \
        const npy_intp s3 = last >= 0 ? p->st[3][last] : 0;                                     \
        int done = 0;                                                                           \
        while (!done) {                                                                         \
            for (npy_intp i = 0; i < e; ++i) {                                                  \
                T *d = (T *)(D + o[3] + i * s3);                                                \
                d[1] = -d[1];                                                                   \
            }                                                                                   \
            ODOMETER_STEP(p, idx, 0, last, o, 4, done);                                         \
        }                                                                                       \
    }

COMPLEX_KERNELS(c64, float)
COMPLEX_KERNELS(c128, double)


static npy_intp abs_stride(npy_intp s) { return s < 0 ? -s : s; }

/* Elements per side of the square tiles a permuted copy moves through cache. */
#define COPY_TILE 16
/* Fewest bytes of a permuting copy (a pack, a transpose) whose tiles store with streaming
 * stores, past the caches: each line of the destination is then written without being read
 * first, where a plain store reads it (a third more memory traffic) and the source's lines,
 * read COPY_TILE rows at a time, miss the prefetchers. Reversing 256^3 F32 on one thread (an
 * AMD EPYC): 34% of a contiguous copy's speed through AVX2 tiles, 59% streamed; 192^3 and
 * 256^3 F64 and C64: 42-46% -> 79-81%. Smaller copies stay in the cache for what reads them
 * next: reversing 64^3 F32 (1 MiB) and summing the result took 0.26 ms stored, 0.36 streamed;
 * from 8 MiB the two broke even, at 16 MiB streaming won (2.9 against 3.5 ms for F32). */
#define STREAM_COPY_MIN ((npy_intp)8 << 20)
/* Fewest elements in NumPy's innermost copy run for which the tiles pay (see tiled_copy)... */
#define COPY_MIN_RUN 256
/* ... unless the run's source elements lie at least this many bytes apart (a page: each one
 * on its own page, NumPy's short runs miss the TLB; a 15 MB F64 copy swapping the outer 16
 * and inner 12 of 16x200x50x12 took 7.0 ms by NumPy, 1.5 through tiles). */
#define COPY_FAR_STRIDE 4096
/* ... or unless the source is larger than this many bytes and its own fastest axis is a loop
 * of NumPy's around this many bytes of source lines or more: each source line then leaves the
 * cache before NumPy's next step along that axis reads it again (lnijzk's 28 MB of BF16, its
 * unit axis k (31) moved outermost, runs of 32: 18.3 ms by NumPy's loop in two threads). */
#define COPY_REUSE_BYTES (8 << 20)
/* A copy whose two sides run along the same axis goes run by run (run_copy) for runs of fewer
 * than this many bytes: 1.1-1.8x NumPy's speed on 8 MB copies in runs of 2 to 64 numbers (BF16,
 * F32, F64; 0.8-1.0x in one of three runs for F32 runs of 3-5), no faster from 512 bytes
 * (F64 runs of 128: 0.65x, of 256: 0.98x)... */
#define RUN_COPY_BYTES 512
/* ... runs of at most this many numbers copied by a loop, longer ones by memcpy (a loop per
 * run of 16-512 numbers ran at 0.3-0.9x NumPy's speed, a memcpy call per run of 3 F64 0.8x) */
#define RUN_COPY_LOOP 4

/* A full COPY_TILE x COPY_TILE tile of F32 (F64) elements moved through AVX registers:
 * d's row j (ds bytes apart) = s's column j (s's rows ss bytes apart), in 8x8 (4x4) blocks
 * transposed by unpacks and shuffles. The elementwise loop loads one element per source row
 * and cache line; a 48^4 F32 reversal took 17 ms that way, 2.9 through 8x8 blocks (a
 * stand-alone test; memcpy 1.3). Chosen at run time (tile_for), on x86-64 only. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* One 8x8 block of F32: y's row j (ds bytes apart) = x's column j (x's rows ss bytes apart). */
__attribute__((target("avx2"))) static void t8_f32(const char *x, npy_intp ss, char *y,
                                                    npy_intp ds) {
    __m256 r[8], t[8], u[8];
    for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps((const float *)(x + k * ss));
    for (int k = 0; k < 8; k += 2) {
        t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
        t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
    }
    for (int k = 0; k < 8; k += 4) {
        u[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
        u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);
        u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
        u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
    }
    for (int k = 0; k < 4; ++k) {
        _mm256_storeu_ps((float *)(y + k * ds), _mm256_permute2f128_ps(u[k], u[k + 4], 0x20));
        _mm256_storeu_ps((float *)(y + (k + 4) * ds),
                         _mm256_permute2f128_ps(u[k], u[k + 4], 0x31));
    }
}
__attribute__((target("avx2"))) static void tile_f32(const char *s, npy_intp ss, char *d,
                                                      npy_intp ds) {
    for (int i0 = 0; i0 < COPY_TILE; i0 += 8)
        for (int j0 = 0; j0 < COPY_TILE; j0 += 8) t8_f32(s + i0 * ss + j0 * 4, ss, d + j0 * ds + i0 * 4, ds);
}
__attribute__((target("avx2"))) static void tile_f64(const char *s, npy_intp ss, char *d,
                                                      npy_intp ds) {
    for (int i0 = 0; i0 < COPY_TILE; i0 += 4)
        for (int j0 = 0; j0 < COPY_TILE; j0 += 4) {
            const char *x = s + i0 * ss + j0 * 8;
            __m256d r[4];
            for (int k = 0; k < 4; ++k) r[k] = _mm256_loadu_pd((const double *)(x + k * ss));
            const __m256d t0 = _mm256_unpacklo_pd(r[0], r[1]), t1 = _mm256_unpackhi_pd(r[0], r[1]);
            const __m256d t2 = _mm256_unpacklo_pd(r[2], r[3]), t3 = _mm256_unpackhi_pd(r[2], r[3]);
            char *y = d + j0 * ds + i0 * 8;
            _mm256_storeu_pd((double *)y, _mm256_permute2f128_pd(t0, t2, 0x20));
            _mm256_storeu_pd((double *)(y + ds), _mm256_permute2f128_pd(t1, t3, 0x20));
            _mm256_storeu_pd((double *)(y + 2 * ds), _mm256_permute2f128_pd(t0, t2, 0x31));
            _mm256_storeu_pd((double *)(y + 3 * ds), _mm256_permute2f128_pd(t1, t3, 0x31));
        }
}
/* The same tiles through AVX-512 registers: every load reads a whole 64-byte line of s and
 * every store writes a whole line of d (F32: one 16x16 block; F64 and C64: 8x8 blocks; C128:
 * 4x4 blocks). The AVX2 blocks above move half lines: where the rows lie a power of two
 * apart, all of a tile's lines share one cache set, and each half is fetched (and written
 * back) on its own. A 64 MiB F32 tensor of 256^3 reversed: 34% of a contiguous copy's speed
 * through AVX2 blocks, on an AMD EPYC (see pytapp.bench.harness.permutation_speeds).
 * They also move the partial tiles at the edges (the first ni rows of s, nj numbers each):
 * masked loads and stores, where the element loop took 2 ns a number (an 18 x 18 edge left
 * a fifth of a tile's numbers to it); a partial row of d is stored without streaming. */
#define AVX512_TILE __attribute__((target("avx512f")))
/* out[L] = (a[L], b[L], c[L], d[L]) for the four 128-bit lanes L of four registers */
#define LANES4(T, SH, a, b, c, d, o0, o1, o2, o3)                                             \
    do {                                                                                       \
        const T p_ = SH(a, b, 0x44), q_ = SH(a, b, 0xEE), r_ = SH(c, d, 0x44),                \
                s_ = SH(c, d, 0xEE);                                                           \
        o0 = SH(p_, r_, 0x88), o1 = SH(p_, r_, 0xDD), o2 = SH(q_, s_, 0x88),                   \
        o3 = SH(q_, s_, 0xDD);                                                                 \
    } while (0)
/* The first n (0..16) bits */
#define FIRST(n) ((__mmask16)((n) >= 16 ? 0xffffu : (1u << (n)) - 1u))
/* A whole tile (constant bounds: the registers stay registers) and a partial one, from the
 * tile's body. */
#define WHOLE_AND_PART(T, V)                                                                    \
    AVX512_TILE static void tile_##T##_512##V(const char *s, npy_intp ss, char *d, npy_intp ds) { \
        tile_##T##_body##V(s, ss, d, ds, 16, 16);                                               \
    }                                                                                           \
    AVX512_TILE static void part_##T##_512##V(const char *s, npy_intp ss, char *d, npy_intp ds, \
                                              int ni, int nj) {                                 \
        tile_##T##_body##V(s, ss, d, ds, ni, nj);                                               \
    }
/* The AVX-512 tiles, suffixed V, storing whole rows through SPS and SPD (F32, F64 registers). */
#define AVX512_TILES(V, SPS, SPD)                                                               \
AVX512_TILE __attribute__((always_inline)) static inline void                                   \
tile_f32_body##V(const char *s, npy_intp ss, char *d, npy_intp ds, int ni, int nj) {             \
    __m512 r[16], t[16];                                                                        \
    const __mmask16 mi = FIRST(ni), mj = FIRST(nj);                                             \
    for (int k = 0; k < 16; ++k)                                                                \
        r[k] = k < ni ? _mm512_maskz_loadu_ps(mj, (const float *)(s + k * ss))                  \
                      : _mm512_setzero_ps();                                                    \
    for (int k = 0; k < 16; k += 2) {                                                           \
        t[k] = _mm512_unpacklo_ps(r[k], r[k + 1]);                                              \
        t[k + 1] = _mm512_unpackhi_ps(r[k], r[k + 1]);                                          \
    }                                                                                           \
    /* r[4g + j]'s lane L: column 4L + j of rows 4g..4g+3 */                                    \
    for (int k = 0; k < 16; k += 4) {                                                           \
        r[k] = _mm512_shuffle_ps(t[k], t[k + 2], 0x44);                                         \
        r[k + 1] = _mm512_shuffle_ps(t[k], t[k + 2], 0xEE);                                     \
        r[k + 2] = _mm512_shuffle_ps(t[k + 1], t[k + 3], 0x44);                                 \
        r[k + 3] = _mm512_shuffle_ps(t[k + 1], t[k + 3], 0xEE);                                 \
    }                                                                                           \
    for (int j = 0; j < 4; ++j)                                                                 \
        LANES4(__m512, _mm512_shuffle_f32x4, r[j], r[4 + j], r[8 + j], r[12 + j], t[j],         \
               t[4 + j], t[8 + j], t[12 + j]);                                                  \
    if (ni == 16) {                                                                             \
        for (int k = 0; k < nj; ++k) SPS((float *)(d + k * ds), t[k]);                          \
    } else {                                                                                    \
        for (int k = 0; k < nj; ++k) _mm512_mask_storeu_ps((float *)(d + k * ds), mi, t[k]);    \
    }                                                                                           \
}                                                                                               \
WHOLE_AND_PART(f32, V)                                                                          \
AVX512_TILE __attribute__((always_inline)) static inline void                                   \
t8_f64_512##V(const char *s, npy_intp ss, char *d, npy_intp ds, int ni, int nj) {               \
    __m512d r[8], t[8];                                                                         \
    const __mmask8 mi = (__mmask8)FIRST(ni), mj = (__mmask8)FIRST(nj);                          \
    for (int k = 0; k < 8; ++k)                                                                 \
        r[k] = k < ni ? _mm512_maskz_loadu_pd(mj, (const double *)(s + k * ss))                 \
                      : _mm512_setzero_pd();                                                    \
    /* t[2p + j]'s lane L: column 2L + j of rows 2p, 2p+1 */                                    \
    for (int k = 0; k < 8; k += 2) {                                                            \
        t[k] = _mm512_unpacklo_pd(r[k], r[k + 1]);                                              \
        t[k + 1] = _mm512_unpackhi_pd(r[k], r[k + 1]);                                          \
    }                                                                                           \
    for (int j = 0; j < 2; ++j)                                                                 \
        LANES4(__m512d, _mm512_shuffle_f64x2, t[j], t[2 + j], t[4 + j], t[6 + j], r[j], r[2 + j], \
               r[4 + j], r[6 + j]);                                                             \
    if (ni == 8) {                                                                              \
        for (int k = 0; k < nj; ++k) SPD((double *)(d + k * ds), r[k]);                         \
    } else {                                                                                    \
        for (int k = 0; k < nj; ++k) _mm512_mask_storeu_pd((double *)(d + k * ds), mi, r[k]);   \
    }                                                                                           \
}                                                                                               \
AVX512_TILE static void tile_f64_512##V(const char *s, npy_intp ss, char *d, npy_intp ds) {     \
    for (int i0 = 0; i0 < 16; i0 += 8)                                                          \
        for (int j0 = 0; j0 < 16; j0 += 8)                                                      \
            t8_f64_512##V(s + i0 * ss + j0 * 8, ss, d + j0 * ds + i0 * 8, ds, 8, 8);            \
}                                                                                               \
AVX512_TILE static void part_f64_512##V(const char *s, npy_intp ss, char *d, npy_intp ds,       \
                                        int ni, int nj) {                                       \
    for (int i0 = 0; i0 < ni; i0 += 8)                                                          \
        for (int j0 = 0; j0 < nj; j0 += 8)                                                      \
            t8_f64_512##V(s + i0 * ss + j0 * 8, ss, d + j0 * ds + i0 * 8, ds,                   \
                          ni - i0 < 8 ? ni - i0 : 8, nj - j0 < 8 ? nj - j0 : 8);                \
}                                                                                               \
AVX512_TILE __attribute__((always_inline)) static inline void                                   \
tile_c128_body##V(const char *s, npy_intp ss, char *d, npy_intp ds, int ni, int nj) {            \
    for (int i0 = 0; i0 < ni; i0 += 4)                                                          \
        for (int j0 = 0; j0 < nj; j0 += 4) {                                                    \
            const char *x = s + i0 * ss + j0 * 16;                                              \
            char *y = d + j0 * ds + i0 * 16;                                                    \
            const int bi = ni - i0 < 4 ? ni - i0 : 4, bj = nj - j0 < 4 ? nj - j0 : 4;           \
            const __mmask8 mi = (__mmask8)FIRST(2 * bi), mj = (__mmask8)FIRST(2 * bj);          \
            __m512d r[4], o[4];                                                                 \
            for (int k = 0; k < 4; ++k)                                                         \
                r[k] = k < bi ? _mm512_maskz_loadu_pd(mj, (const double *)(x + k * ss))         \
                              : _mm512_setzero_pd();                                            \
            LANES4(__m512d, _mm512_shuffle_f64x2, r[0], r[1], r[2], r[3], o[0], o[1], o[2],     \
                   o[3]);                                                                       \
            for (int k = 0; k < bj; ++k) {                                                      \
                if (bi == 4) SPD((double *)(y + k * ds), o[k]);                                 \
                else _mm512_mask_storeu_pd((double *)(y + k * ds), mi, o[k]);                   \
            }                                                                                   \
        }                                                                                       \
}                                                                                               \
WHOLE_AND_PART(c128, V)
AVX512_TILES(, _mm512_storeu_ps, _mm512_storeu_pd)
/* ... and with streaming stores: every line of d written whole, with no read of it first
 * and past the caches (d aligned to 64 bytes, its rows too). */
AVX512_TILES(_nt, _mm512_stream_ps, _mm512_stream_pd)
/* A tile of 16-bit numbers (BF16, F16): 16 x 16 through 256-bit registers, masked at the
 * edges. Each row moves half a line; two tiles side by side along d's rows complete its
 * lines one after the other. A 33 MB BF16 operand whose batch label was its fastest took
 * 16 ms to permute on one thread element by element. */
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) static inline void
tile_u16_body(const char *s, npy_intp ss, char *d, npy_intp ds, int ni, int nj) {
    __m256i r[16], t[16];
    const __mmask16 mi = FIRST(ni), mj = FIRST(nj);
    for (int k = 0; k < 16; ++k)
        r[k] = k < ni ? _mm256_maskz_loadu_epi16(mj, s + k * ss) : _mm256_setzero_si256();
    /* t[2p], t[2p + 1]: rows 2p and 2p + 1 interleaved, columns 0-3 and 4-7 of each lane */
    for (int k = 0; k < 16; k += 2) {
        t[k] = _mm256_unpacklo_epi16(r[k], r[k + 1]);
        t[k + 1] = _mm256_unpackhi_epi16(r[k], r[k + 1]);
    }
    /* r[4g + c2]: columns 2 c2, 2 c2 + 1 (of each lane) of rows 4g..4g+3 */
    for (int g = 0; g < 16; g += 4) {
        r[g] = _mm256_unpacklo_epi32(t[g], t[g + 2]);
        r[g + 1] = _mm256_unpackhi_epi32(t[g], t[g + 2]);
        r[g + 2] = _mm256_unpacklo_epi32(t[g + 1], t[g + 3]);
        r[g + 3] = _mm256_unpackhi_epi32(t[g + 1], t[g + 3]);
    }
    /* t[8h + c]: column c of each lane (lane 1: column 8 + c), rows 8h..8h+7 */
    for (int h = 0; h < 16; h += 8)
        for (int x = 0; x < 4; ++x) {
            t[h + 2 * x] = _mm256_unpacklo_epi64(r[h + x], r[h + 4 + x]);
            t[h + 2 * x + 1] = _mm256_unpackhi_epi64(r[h + x], r[h + 4 + x]);
        }
    for (int c = 0; c < 8; ++c) {
        r[c] = _mm256_permute2x128_si256(t[c], t[8 + c], 0x20);
        r[8 + c] = _mm256_permute2x128_si256(t[c], t[8 + c], 0x31);
    }
    if (ni == 16) {
        for (int k = 0; k < nj; ++k) _mm256_storeu_si256((__m256i *)(d + k * ds), r[k]);
    } else {
        for (int k = 0; k < nj; ++k) _mm256_mask_storeu_epi16(d + k * ds, mi, r[k]);
    }
}
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void
tile_u16_512(const char *s, npy_intp ss, char *d, npy_intp ds) {
    tile_u16_body(s, ss, d, ds, 16, 16);
}
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void
part_u16_512(const char *s, npy_intp ss, char *d, npy_intp ds, int ni, int nj) {
    tile_u16_body(s, ss, d, ds, ni, nj);
}
static int tile_simd(void) {
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx2");
    }
    return known;
}
/* A whole register tile (16 x 16 numbers) ... */
typedef void (*tile_fn)(const char *, npy_intp, char *, npy_intp);
/* ... and a partial one: the first ni rows of s, nj numbers each (masked loads; d's rows
 * stored through a buffer where they are partial: AVX-512 masked stores took 3.7x the
 * element loop's time on the edges of an 18^5 F32 reversal, AMD EPYC). */
typedef void (*part_fn)(const char *, npy_intp, char *, npy_intp, int, int);
/* 0: no register tiles, 1: AVX2, 2: AVX-512. */
static int tile_isa_level(void) {
    static int isa = -1;
    if (isa < 0) {
        __builtin_cpu_init();
        isa = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    return isa;
}
/* 16-bit numbers' tiles: AVX-512 with BW and VL. */
static int tile_u16_ok(void) {
    static int bw = -1;
    if (bw < 0)
        bw = tile_isa_level() == 2 && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
    return bw;
}
/* The register tile for elements of ``item`` bytes on this CPU, NULL for the element loop;
 * with ``stream``, the one with streaming stores (AVX-512 only: NULL elsewhere). */
static tile_fn tile_for(npy_intp item, int stream) {
    const int isa = tile_isa_level();
    if (stream)
        return isa < 2 ? NULL : item == 4 ? tile_f32_512_nt : item == 8 ? tile_f64_512_nt
                                : item == 16 ? tile_c128_512_nt : NULL;
    if (item == 2) return tile_u16_ok() ? tile_u16_512 : NULL;
    if (item == 4) return isa == 2 ? tile_f32_512 : isa == 1 ? tile_f32 : NULL;
    if (item == 8) return isa == 2 ? tile_f64_512 : isa == 1 ? tile_f64 : NULL;
    if (item == 16) return isa == 2 ? tile_c128_512 : NULL;
    return NULL;
}
/* The partial tile of tile_for (AVX-512 only: NULL elsewhere, the element loop). */
static part_fn part_for(npy_intp item, int stream) {
    if (tile_isa_level() < 2) return NULL;
    if (item == 2) return tile_u16_ok() && !stream ? part_u16_512 : NULL;
    if (stream)
        return item == 4 ? part_f32_512_nt : item == 8 ? part_f64_512_nt
               : item == 16 ? part_c128_512_nt : NULL;
    return item == 4 ? part_f32_512 : item == 8 ? part_f64_512 : item == 16 ? part_c128_512 : NULL;
}
static void stream_fence(void) { _mm_sfence(); }
#else
/* No register tiles on other CPUs: the element loop. */
#define t8_f32(s, ss, d, ds) ((void)(s), (void)(ss), (void)(d), (void)(ds))
static int tile_simd(void) { return 0; }
typedef void (*tile_fn)(const char *, npy_intp, char *, npy_intp);
typedef void (*part_fn)(const char *, npy_intp, char *, npy_intp, int, int);
static part_fn part_for(npy_intp item, int stream) {
    (void)item, (void)stream;
    return NULL;
}
static tile_fn tile_for(npy_intp item, int stream) {
    (void)item, (void)stream;
    return NULL;
}
static void stream_fence(void) {}
#endif

/* Fewest numbers of a partial tile that the registers move (part_for); fewer go one by one. */
#define PART_TILE_MIN (2 * COPY_TILE)

/* dst = src over nd axes (byte strides; no axis of extent < 2), the elements ``item`` bytes
 * each. Axis ``a`` is dst's fastest, axis ``b`` src's fastest (a != b): both are walked in
 * COPY_TILE x COPY_TILE tiles, so that each tile reads whole cache lines of src and writes
 * whole lines of dst; an odometer walks the other axes. The tiles go along dst's fastest axis
 * (dst written in COPY_TILE streams of lines), or, with ``stream`` where dst and its lines
 * allow streaming stores, along src's (src read in COPY_TILE streams; dst's lines each
 * written whole from registers past the caches, none read first; see STREAM_COPY_MIN). */
#define TILED_COPY(NAME, T)                                                                      \
    static void NAME(int nd, const npy_intp *ext, const npy_intp *ds, const npy_intp *ss,       \
                     int a, int b, char *dst, const char *src, int stream) {                    \
        npy_intp idx[NPY_MAXDIMS] = {0};                                                        \
        const npy_intp ea = ext[a], eb = ext[b], dsa = ds[a], dsb = ds[b], ssa = ss[a],         \
                       ssb = ss[b];                                                             \
        /* whole tiles through registers where both runs go forward */                         \
        const int forward = dsa == (npy_intp)sizeof(T) && ssb == (npy_intp)sizeof(T);          \
        if (stream) { /* every row of every tile starts a line of dst */                       \
            stream = forward && ((uintptr_t)dst & 63) == 0 && sizeof(T) * COPY_TILE % 64 == 0; \
            for (int l = 0; l < nd; ++l)                                                        \
                if (l != a && ds[l] % 64) stream = 0;                                           \
        }                                                                                       \
        const tile_fn simd = forward ? tile_for((npy_intp)sizeof(T), stream) : NULL;           \
        const part_fn part = simd ? part_for((npy_intp)sizeof(T), stream) : NULL;               \
        if (!simd) stream = 0;                                                                  \
        const npy_intp outer = stream ? ea : eb, inner = stream ? eb : ea;                      \
        npy_intp od = 0, os = 0;                                                                \
        for (;;) {                                                                              \
            for (npy_intp q0 = 0; q0 < outer; q0 += COPY_TILE) {                                \
                for (npy_intp r0 = 0; r0 < inner; r0 += COPY_TILE) {                            \
                    const npy_intp j0 = stream ? r0 : q0, i0 = stream ? q0 : r0;                \
                    const npy_intp j1 = j0 + COPY_TILE < eb ? j0 + COPY_TILE : eb;              \
                    const npy_intp i1 = i0 + COPY_TILE < ea ? i0 + COPY_TILE : ea;              \
                    if (simd && i1 - i0 == COPY_TILE && j1 - j0 == COPY_TILE) {                 \
                        simd(src + os + i0 * ssa + j0 * ssb, ssa,                              \
                             dst + od + j0 * dsb + i0 * dsa, dsb);                              \
                        continue;                                                               \
                    }                                                                           \
                    if (part && (i1 - i0) * (j1 - j0) >= PART_TILE_MIN) {                      \
                        part(src + os + i0 * ssa + j0 * ssb, ssa,                              \
                             dst + od + j0 * dsb + i0 * dsa, dsb, (int)(i1 - i0),              \
                             (int)(j1 - j0));                                                   \
                        continue;                                                               \
                    }                                                                           \
                    for (npy_intp j = j0; j < j1; ++j) {                                        \
                        char *d = dst + od + j * dsb;                                           \
                        const char *x = src + os + j * ssb;                                     \
                        for (npy_intp i = i0; i < i1; ++i)                                      \
                            *(T *)(d + i * dsa) = *(const T *)(x + i * ssa);                    \
                    }                                                                           \
                }                                                                               \
            }                                                                                   \
            int l = nd - 1;                                                                     \
            for (; l >= 0; --l) {                                                               \
                if (l == a || l == b) continue;                                                 \
                od += ds[l];                                                                    \
                os += ss[l];                                                                    \
                if (++idx[l] < ext[l]) break;                                                   \
                od -= ext[l] * ds[l];                                                           \
                os -= ext[l] * ss[l];                                                           \
                idx[l] = 0;                                                                     \
            }                                                                                   \
            if (l < 0) break;                                                                   \
        }                                                                                       \
        if (stream) stream_fence(); /* the streamed lines reach memory before dst is read */   \
    }

TILED_COPY(tiled_copy2, uint16_t)
TILED_COPY(tiled_copy4, uint32_t)
TILED_COPY(tiled_copy8, uint64_t)
typedef struct {
    uint64_t lo, hi;
} pair64; /* a complex double, moved as a whole */
TILED_COPY(tiled_copy16, pair64)

/* The tiled copy for elements of ``item`` bytes (2, 4, 8 or 16). */
static void tiled_copy_item(npy_intp item, int nd, const npy_intp *ext, const npy_intp *ds,
                            const npy_intp *ss, int a, int b, char *dst, const char *src,
                            int stream) {
    if (item == 2) tiled_copy2(nd, ext, ds, ss, a, b, dst, src, stream);
    else if (item == 4) tiled_copy4(nd, ext, ds, ss, a, b, dst, src, stream);
    else if (item == 8) tiled_copy8(nd, ext, ds, ss, a, b, dst, src, stream);
    else tiled_copy16(nd, ext, ds, ss, a, b, dst, src, stream);
}

/* A packing nest that only permutes (no summed label, no conjugation) through cache tiles
 * where the source's fastest label is not the destination's: 1 when done. The pack of a
 * 9.8 MB F32 operand whose fastest label becomes its outermost (TTGT's batch label) took
 * 15.9 ms element by element. */
static int pack_tiled(const Nest *n, const char *src, char *dst, npy_intp item, int stream) {
    if (n->nl != n->nout || (item != 4 && item != 8 && item != 16)) return 0;
    npy_intp ext[MAXL], ds[MAXL], ss[MAXL], step = item;
    int nd = 0;
    for (int l = n->nout - 1; l >= 0; --l) { /* the destination is contiguous, in nest order */
        if (n->ext[l] == 0) return 1;
        if (n->ext[l] > 1) {
            ext[nd] = n->ext[l], ds[nd] = step, ss[nd] = n->st[0][l];
            ++nd;
        }
        step *= n->ext[l];
    }
    if (nd < 2) return 0;
    int b = 0; /* the source's fastest; the destination's is axis 0 (listed innermost first) */
    for (int i = 1; i < nd; ++i)
        if (abs_stride(ss[i]) < abs_stride(ss[b])) b = i;
    if (b == 0 || abs_stride(ss[b]) != item || ext[0] < COPY_TILE / 2 || ext[b] < COPY_TILE / 2)
        return 0;
    tiled_copy_item(item, nd, ext, ds, ss, 0, b, dst, src, stream);
    return 1;
}

/* The loop order of a pack that copies: the destination's innermost label stays innermost (a
 * plain loop writing a run), the others go outermost first by the smaller of their two strides
 * (source's, destination's: contiguous in the nest's order, in st[1]), so that the labels either
 * side runs along fastest stay inner and both sides touch compact blocks. In the destination's
 * order a label inner in the source but outer in the destination (TTGT's batch label, say)
 * made each pass over the source touch all of it: easzg,nzgikes->ikaen (C64) 38 -> 25 ms,
 * bfsjtlv,lsjgt->sbvgf (F32) 21 -> 18 ms; 39 seeded TTGT products 0.94-1.51x, geomean 1.01. */
/* The byte strides of a pack's destination: contiguous over the nest's kept labels, in order
 * (0 for its summed labels). */
static void pack_strides(const Nest *n, npy_intp item, npy_intp *dst) {
    npy_intp step = item;
    for (int l = n->nout - 1; l >= 0; --l) {
        dst[l] = step;
        step *= n->ext[l];
    }
    for (int l = n->nout; l < n->nl; ++l) dst[l] = 0;
}

static void copy_order(const Nest *n, Nest *m) {
    const int nout = n->nout;
    const npy_intp *dst = n->st[1]; /* the destination's strides */
    npy_intp key[MAXL];
    int order[MAXL];
    for (int l = 0; l < nout - 1; ++l) {
        const npy_intp a = abs_stride(n->st[0][l]), b = abs_stride(dst[l]);
        key[l] = a < b ? a : b;
        int j = l; /* insertion: larger keys first, ties in the destination's order */
        while (j > 0 && key[order[j - 1]] < key[l]) {
            order[j] = order[j - 1];
            --j;
        }
        order[j] = l;
    }
    m->nl = m->nout = nout;
    for (int i = 0; i < nout; ++i) {
        const int l = i < nout - 1 ? order[i] : nout - 1;
        m->ext[i] = n->ext[l];
        m->st[0][i] = n->st[0][l];
        m->st[1][i] = dst[l];
    }
}

/* Fewest elements of the innermost kept label for a pack to sum row by row, and most elements
 * of a row summed at a time (the row stays in L1 while every summed term is added to it). */
#define PACK_ROW_MIN 4
#define PACK_ROW_CHUNK 512
/* ... and fewest where every summed term lies a page or more away (PACK_ROW_FAR bytes): there
 * short rows lost (9 F64 elements summing 531 terms 56 KB apart: 6.3 against 5.3 ms; 12 won,
 * 6.0 -> 4.1) */
#define PACK_ROW_FAR 4096
#define PACK_ROW_FAR_MIN 12
/* Rows of two labels (pack_row_outer) longer than a chunk only where the inner label's rows are
 * shorter than this many bytes (hkrbqn summing r, rows of 148 bytes that became 24.8 KB in
 * chunks of 481 numbers: 2.1 -> 2.4 ms; lixk summing i, 76 bytes that became 4.4 KB: 6.5 ->
 * 2.4 ms). */
#define PACK_ROW_SHORT 128
/* Rows of at most PACK_ROW_LANES_MAX real numbers, contiguous, whose innermost summed label
 * has PACK_ROW_LANES_TERMS terms or more, sum four rows of terms at a time into four sums per
 * element: adding each row into the same sums waits on the last addition's store
 * (hmnujo,ohyu->mnyu summing j, rows of 6 F32 under 92 terms, 58 MB: 4.7 -> 2.5 ms). */
#define PACK_ROW_LANES_MAX 64
#define PACK_ROW_LANES_TERMS 32

/* The label a pack that sums labels sums by rows, or -1: the kept one the source runs along
 * fastest, where it does so faster than along every summed label. Each row of the destination
 * (strided where that label is not its innermost) then adds the source's rows, loops the
 * compiler vectorises, where each element would sum its terms one strided load after another
 * (a 8.2 MB F32 operand summed over a label of 9 between its two fastest, 1.4 -> 0.3 ms). */
static int pack_row_label(const Nest *n) {
    if (n->nl <= n->nout || n->nout < 1) return -1;
    int r = -1;
    for (int l = 0; l < n->nout; ++l)
        if (n->ext[l] > 1 && (r < 0 || abs_stride(n->st[0][l]) < abs_stride(n->st[0][r]))) r = l;
    if (r < 0 || n->ext[r] < PACK_ROW_MIN) return -1;
    npy_intp near = -1; /* the summed labels' smallest stride */
    for (int l = n->nout; l < n->nl; ++l) {
        if (n->ext[l] < 2) continue;
        const npy_intp s = abs_stride(n->st[0][l]);
        if (s <= abs_stride(n->st[0][r])) return -1;
        if (near < 0 || s < near) near = s;
    }
    return near >= PACK_ROW_FAR && n->ext[r] < PACK_ROW_FAR_MIN ? -1 : r;
}

/* A second kept label for the rows of label r (pack_row_label), or -1: one the source steps
 * through right after r's run (its stride r's extent times r's), nearer than every summed label,
 * so that a row of both is one run of the source, summed as one loop and stored into the
 * destination by two; only where the summed terms lie within a page or within the row (the
 * source then streams: rows of a label whose terms lie far apart lost, fxin summing f, 148 KB
 * apart, 3.7 -> 4.5 ms) and the row fits a chunk or r's rows are short (PACK_ROW_SHORT). A
 * destination whose order of the two differs from the source's summed rows of r's extent
 * alone: kecoz summing c into [z][o][k e] (F64, 75 MB) in rows of z (19) where (o z) runs
 * 342 long: 6.8 -> 3.7 ms (with the cut of run_pack_split). */
static int pack_row_outer(const Nest *n, int r) {
    const npy_intp run = n->st[0][r] * n->ext[r];
    if (n->ext[r] * 2 > PACK_ROW_CHUNK) return -1;
    int r2 = -1;
    for (int l = 0; l < n->nout && r2 < 0; ++l)
        if (l != r && n->ext[l] > 1 && n->st[0][l] == run) r2 = l;
    if (r2 < 0) return -1;
    npy_intp near = -1; /* the summed labels' smallest stride */
    for (int l = n->nout; l < n->nl; ++l) {
        if (n->ext[l] < 2) continue;
        const npy_intp st = abs_stride(n->st[0][l]);
        if (st <= abs_stride(run)) return -1;
        if (near < 0 || st < near) near = st;
    }
    const npy_intp row = abs_stride(run) * n->ext[r2]; /* the row's bytes in the source */
    if (near > (row > PACK_ROW_FAR ? row : PACK_ROW_FAR)) return -1;
    /* a row longer than a chunk only where r's own rows are shorter than PACK_ROW_SHORT */
    return n->ext[r] * n->ext[r2] <= PACK_ROW_CHUNK || abs_stride(run) < PACK_ROW_SHORT ? r2 : -1;
}

/* The kept labels of a pack that sums (st[1]: the destination's strides) reordered by the
 * source's strides, largest first (ties in their order): its rows, or its elements, are
 * independent, and walked so they read the source along its memory (rows of the same summed
 * terms next to each other) where the destination's order can jump across it on every row
 * (xmtqspf summing t into [p][x][q][m][s][f], p the source's 136-byte stride: each p a pass
 * over all 92 MB of the source). Elements summed one by one likewise: bdcwev summing v into
 * [w][d][b][c] (d the source's 1.5 KB stride), 10.6 -> 2.5 ms; 117 seeded products whose
 * packs sum, 1.12x (0.98-3.2x). */
static void rows_by_source(Nest *m) {
    for (int l = 1; l < m->nout; ++l) {
        const npy_intp e = m->ext[l], s0 = m->st[0][l], s1 = m->st[1][l];
        int j = l;
        for (; j > 0 && abs_stride(m->st[0][j - 1]) < abs_stride(s0); --j) {
            m->ext[j] = m->ext[j - 1];
            m->st[0][j] = m->st[0][j - 1];
            m->st[1][j] = m->st[1][j - 1];
        }
        m->ext[j] = e;
        m->st[0][j] = s0;
        m->st[1][j] = s1;
    }
}

/* The nest n with its labels of extent 1 dropped and each two neighbours that all of its
 * first `nst` stride sets step through as one merged (the outer one's stride the inner one's
 * times its extent): kept with kept, summed with summed. The loops walk the same elements in
 * the same order, with fewer levels and longer inner runs. A pack that sums gets rows of the
 * merged labels (dst is contiguous in nest order, so only the source's strides, nst = 1, count):
 * fpwdm summing f into the rest, which lies as in the source, summed rows of 16 elements (its
 * innermost label), 43 of them a page apart, where one row of 244k elements is 43 runs; 9.4 ->
 * 3.2 ms (F32, 42 MB). A copy merges only after its loop order is chosen (copy_order): merged
 * first, an outer label moved inward with its partner (ktqmwao's pack 0.78x). */
static void nest_merged(const Nest *n, int nst, Nest *m) {
    for (int l = 0; l < n->nl; ++l)
        if (n->ext[l] == 0) { /* nothing to write, or sums of nothing: as it is */
            *m = *n;
            return;
        }
    int nl = 0, nout = 0;
    for (int l = 0; l < n->nl; ++l) {
        const int group = l < n->nout, last = nl - 1;
        if (n->ext[l] == 1) continue;
        int fuse = nl > 0 && (last < nout) == group;
        for (int s = 0; s < nst && fuse; ++s)
            fuse = m->st[s][last] == n->st[s][l] * n->ext[l];
        if (fuse) {
            m->ext[last] *= n->ext[l];
            for (int s = 0; s < nst; ++s) m->st[s][last] = n->st[s][l];
            continue;
        }
        m->ext[nl] = n->ext[l];
        for (int s = 0; s < nst; ++s) m->st[s][nl] = n->st[s][l];
        nout += group;
        ++nl;
    }
    m->nl = nl;
    m->nout = nout;
}

/* Partial sums a pack keeps per (real) element it sums along a contiguous run of at least
 * PACK_LANES_RUN terms, each term to the next in turn (vectors the compiler makes): one sum
 * waited on each addition before (nuif summing f, 112 F32 terms per element: 4.6 -> 1.9 ms,
 * NumPy 2.2; kfsyx summing x, 45: 2.4 -> 1.1 ms; iptds summing s, 41 F64: 2.6 -> 1.4 ms).
 * Strided runs and complex ones keep one sum: four partial sums over 10 F64 terms 80 bytes
 * apart, or 26 contiguous C64 ones, ran 1.4-2x slower. (Runs of 8 and of 16 gained alike on
 * 10 seeded products once the elements were walked in the source's order; before that,
 * partial sums on runs below 64 lost up to 2x.) */
#define PACK_LANES 8
#define PACK_LANES_RUN 16
/* Where a pack sums one label, innermost and contiguous, the kept label under it (in the
 * source's order) is a plain loop too, and runs shorter than PACK_LANES_RUN keep four partial
 * sums: an odometer step per element (each a run of a few terms) and one chain of dependent
 * additions cost 5x the reading (cixws,wrxc->cir summing s, 13 F32 terms a run, 48 MB: 8.9 ->
 * 1.8 ms). The packs of 98 seeded real products of seeds 0-5999 so: 0.94-5.6x, geometric
 * mean 1.30x (separate processes, least of 2 x 40 calls). */
#define PACK_SHORT_LANES 4

/* A pack that sums labels sums in the source's order first, where the source's kept labels run
 * contiguously far longer than the rows the destination's order lets the sums take (rows of
 * pack_row_label and pack_row_outer, or single elements): blocks of at most PACK_SOURCE_BLOCK
 * bytes of the result are summed into a buffer laid out as the source (each term one long run:
 * vector loops over rows of PACK_ROW_CHUNK numbers), then copied into the destination's order.
 * vpsyuz summing p (41 terms 35 KB apart) into [u][v s y][z] (F32, 11.7 MB): rows of 9 numbers,
 * or every element summed alone, where (s y u z) runs 8910 numbers in the source: 5.2 -> 2.3 ms
 * (the pack of A alone, on two threads, 3.4 -> 0.7). Only where the direct rows are shorter
 * than PACK_SOURCE_ROW bytes (longer ones already read lines whole: on 59 seeded products with
 * rows of 12-576 numbers, 0.56-1.4x, geometric mean 0.97), of numbers of PACK_SOURCE_ITEM
 * bytes or fewer (C128 elements summed one at a time lost 1.2-1.5x on five: each term's 16
 * bytes already feed two running sums), and the source's runs are PACK_SOURCE_GAIN times those
 * rows and PACK_SOURCE_RUN numbers or more. On 77 seeded products whose packs take it (seeds
 * 33000-35999, none of those it was tuned on; old and new in alternating processes, least of 4
 * or 10 each) 0.29-1.15x, geometric mean 0.82x: summed one at a time, each element waited on a
 * chain of additions and read one number of each line it fetched. */
#define PACK_SOURCE_BLOCK (128 * 1024)
#define PACK_SOURCE_GAIN 4
#define PACK_SOURCE_RUN 64
#define PACK_SOURCE_ROW 64
#define PACK_SOURCE_ITEM 8

/* The numbers the source's kept labels of n run contiguously (item bytes each) and every
 * summed label lies outside of, or 0; `g` gets n's labels with the kept ones in the source's
 * order (rows_by_source). */
static npy_intp source_run(const Nest *n, npy_intp item, Nest *g) {
    *g = *n;
    rows_by_source(g);
    for (int l = 0; l < n->nl; ++l)
        if (n->ext[l] < 1) return 0;
    npy_intp run = 1, step = item;
    for (int l = g->nout - 1; l >= 0 && g->st[0][l] == step; --l) {
        run *= g->ext[l];
        step *= g->ext[l];
    }
    for (int l = g->nout; l < g->nl; ++l)
        if (g->ext[l] > 1 && abs_stride(g->st[0][l]) < step) return 0;
    return run;
}

/* Whether the pack of n (merged, st[1]: the destination's strides) sums in the source's order
 * (see PACK_SOURCE_BLOCK), with `g` as source_run gives it. */
static int pack_in_source_order(const Nest *n, npy_intp item, Nest *g) {
    if (n->nl <= n->nout || n->nout < 2 || item > PACK_SOURCE_ITEM) return 0;
    const npy_intp run = source_run(n, item, g);
    if (run < PACK_SOURCE_RUN) return 0;
    npy_intp rows = 1; /* the rows the pack would sum directly */
    const int r = pack_row_label(n);
    if (r >= 0) {
        const int r2 = pack_row_outer(n, r);
        rows = n->ext[r] * (r2 >= 0 ? n->ext[r2] : 1);
    }
    return rows * item < PACK_SOURCE_ROW && run >= PACK_SOURCE_GAIN * rows;
}

/* dst = sum over its summed labels of op(src): contiguous, in the nest's output order, or
 * (`given`) at the byte strides in the nest's st[1] (0 for the summed labels: a worker's part
 * of a pack cut along another label than the first, see run_pack_split). */
#define PACK_KERNEL(NAME, T, CPLX)                                                              \
    static void pack_##NAME(const Nest *n0, const char *src, char *dst, int conj, int given);   \
    /* The pack of n summed in the source's order `g` (see PACK_SOURCE_BLOCK): 0 where the      \
     * buffer could not be had. */                                                             \
    static int pack_source_##NAME(const Nest *g, const char *src, char *dst, int conj) {        \
        const npy_intp item = (CPLX ? 2 : 1) * (npy_intp)sizeof(T);                             \
        const int nout = g->nout, nsum = g->nl - g->nout;                                       \
        int j = nout - 1; /* the label cut into blocks; those after it fit a block whole */     \
        npy_intp inner = item;                                                                  \
        for (; j >= 0 && inner * g->ext[j] <= PACK_SOURCE_BLOCK; --j) inner *= g->ext[j];       \
        const npy_intp chunk = j >= 0 ? PACK_SOURCE_BLOCK / inner : 1;                          \
        const int first = j >= 0 ? j : 0; /* the blocks' labels: first..nout-1, then sums */   \
        char *buf = aligned_alloc(64, (size_t)(j >= 0 ? chunk * inner : inner));                \
        if (!buf) return 0;                                                                     \
        Nest sum_ = *g, put_;                                                                   \
        sum_.nl = nout - first + nsum, sum_.nout = nout - first;                                \
        for (int l = first; l < g->nl; ++l) {                                                   \
            sum_.ext[l - first] = g->ext[l];                                                    \
            sum_.st[0][l - first] = g->st[0][l];                                                \
        }                                                                                       \
        put_.nl = put_.nout = nout - first;                                                     \
        npy_intp idx[MAXL] = {0}, o[2] = {0, 0};                                                \
        int done = 0;                                                                           \
        while (!done) { /* the labels before `first`, each index in turn */                     \
            const npy_intp e = g->ext[first], step = j >= 0 ? chunk : e;                        \
            for (npy_intp i0 = 0; i0 < e; i0 += step) {                                         \
                const npy_intp len = e - i0 < step ? e - i0 : step;                             \
                sum_.ext[0] = len;                                                              \
                pack_##NAME(&sum_, src + o[0] + i0 * g->st[0][first], buf, conj, 0);            \
                npy_intp dense = item; /* the buffer's strides: contiguous, in source order */  \
                for (int l = nout - 1; l >= first; --l) {                                       \
                    put_.ext[l - first] = l == first ? len : g->ext[l];                         \
                    put_.st[0][l - first] = dense;                                              \
                    put_.st[1][l - first] = g->st[1][l];                                        \
                    dense *= put_.ext[l - first];                                               \
                }                                                                               \
                pack_##NAME(&put_, buf, dst + o[1] + i0 * g->st[1][first], 0, 1);               \
            }                                                                                   \
            if (first == 0) break;                                                              \
            ODOMETER_STEP(g, idx, 0, first, o, 2, done);                                        \
        }                                                                                       \
        free(buf);                                                                              \
        return 1;                                                                               \
    }                                                                                           \
    static void pack_##NAME(const Nest *n0, const char *src, char *dst, int conj, int given) {  \
        Nest full_ = *n0, merged_; /* (a copy keeps its labels: see nest_merged) */             \
        if (!given) pack_strides(n0, (CPLX ? 2 : 1) * (npy_intp)sizeof(T), full_.st[1]);        \
        nest_merged(&full_, 2, &merged_);                                                       \
        const Nest *n = merged_.nl > merged_.nout ? &merged_ : &full_;                          \
        npy_intp idx[MAXL] = {0};                                                               \
        npy_intp o[4] = {0, 0, 0, 0};                                                           \
        const int nl = n->nl, nout = n->nout;                                                   \
        T *out;                                                                                 \
        const T sgn = conj ? (T)-1 : (T)1;                                                      \
        int done = 0;                                                                           \
        if (nl == nout && nout > 0) { /* a copy: the innermost label as a plain loop */        \
            Nest m_, o_;                                                                        \
            copy_order(n, &o_);                                                                 \
            nest_merged(&o_, 2, &m_);                                                           \
            if (m_.nout < 1) { /* (a single element) */                                         \
                memcpy(dst, src, (CPLX ? 2 : 1) * sizeof(T));                                   \
                if (CPLX) ((T *)dst)[1] *= sgn;                                                 \
                return;                                                                         \
            }                                                                                   \
            const int mo = m_.nout;                                                             \
            const npy_intp e = m_.ext[mo - 1], s = m_.st[0][mo - 1];                            \
            while (!done) {                                                                     \
                const char *x = src + o[0];                                                     \
                out = (T *)(dst + o[1]);                                                        \
                if (CPLX) {                                                                     \
                    for (npy_intp i = 0; i < e; ++i) {                                          \
                        const T *v = (const T *)(x + i * s);                                    \
                        out[2 * i] = v[0];                                                      \
                        out[2 * i + 1] = sgn * v[1];                                            \
                    }                                                                           \
                } else {                                                                        \
                    if (s == (npy_intp)sizeof(T)) {                                             \
                        memcpy(out, x, (size_t)e * sizeof(T));                                  \
                    } else {                                                                    \
                        for (npy_intp i = 0; i < e; ++i) out[i] = *(const T *)(x + i * s);      \
                    }                                                                           \
                }                                                                               \
                ODOMETER_STEP(&m_, idx, 0, mo - 1, o, 2, done);                                 \
            }                                                                                   \
            return;                                                                             \
        }                                                                                       \
        Nest g_src_; /* the kept labels in the source's order */                                \
        if (pack_in_source_order(n, (CPLX ? 2 : 1) * (npy_intp)sizeof(T), &g_src_) &&          \
            pack_source_##NAME(&g_src_, src, dst, conj))                                        \
            return;                                                                             \
        const int r_ = pack_row_label(n);                                                       \
        if (r_ >= 0) { /* rows of the kept label the source runs along, each summed in place */ \
            Nest m_ = *n; /* st[1]: the destination's strides; the row label out of the odometer */ \
            const npy_intp w = CPLX ? 2 : 1, z = w * (npy_intp)sizeof(T);                       \
            const int r2_ = pack_row_outer(n, r_); /* the row's outer label, or -1 */           \
            const npy_intp e1 = n->ext[r_], s = n->st[0][r_], ds = m_.st[1][r_];                \
            const npy_intp e2 = r2_ >= 0 ? n->ext[r2_] : 1, ds2 = r2_ >= 0 ? m_.st[1][r2_] : 0; \
            const npy_intp e = e1 * e2; /* a row: e elements s apart in the source */           \
            const npy_intp chunk = r2_ >= 0 ? PACK_ROW_CHUNK / e1 * e1 : PACK_ROW_CHUNK;        \
            const npy_intp et = n->ext[nl - 1], st_ = n->st[0][nl - 1]; /* the last summed */  \
            m_.ext[r_] = 1;                                                                     \
            if (r2_ >= 0) m_.ext[r2_] = 1;                                                      \
            rows_by_source(&m_);                                                                \
            T buf[2 * PACK_ROW_CHUNK]; /* a row's sums, contiguous, then stored */              \
            while (!done) {                                                                     \
                for (npy_intp i0 = 0; i0 < e; i0 += chunk) {                                    \
                    const npy_intp len = e - i0 < chunk ? e - i0 : chunk;                       \
                    memset(buf, 0, (size_t)(w * len) * sizeof(T));                              \
                    npy_intp jdx[MAXL];                                                         \
                    for (int l_ = nout; l_ < nl; ++l_) jdx[l_] = 0;                             \
                    npy_intp q[1] = {o[0] + i0 * s};                                            \
                    int inner_done = 0;                                                         \
                    if (!CPLX && s == z && len <= PACK_ROW_LANES_MAX &&                         \
                        et >= PACK_ROW_LANES_TERMS) { /* (see PACK_ROW_LANES_MAX) */            \
                        T p1[PACK_ROW_LANES_MAX], p2[PACK_ROW_LANES_MAX];                       \
                        T p3[PACK_ROW_LANES_MAX];                                               \
                        for (npy_intp i = 0; i < len; ++i) p1[i] = p2[i] = p3[i] = 0;           \
                        while (!inner_done) { /* the innermost summed label a plain loop */    \
                            const char *x = src + q[0];                                         \
                            npy_intp t_ = 0;                                                    \
                            for (; t_ + 4 <= et; t_ += 4) {                                     \
                                const T *v0 = (const T *)(x + t_ * st_);                        \
                                const T *v1 = (const T *)(x + (t_ + 1) * st_);                  \
                                const T *v2 = (const T *)(x + (t_ + 2) * st_);                  \
                                const T *v3 = (const T *)(x + (t_ + 3) * st_);                  \
                                for (npy_intp i = 0; i < len; ++i) {                            \
                                    buf[i] += v0[i], p1[i] += v1[i];                            \
                                    p2[i] += v2[i], p3[i] += v3[i];                             \
                                }                                                               \
                            }                                                                   \
                            for (; t_ < et; ++t_) {                                             \
                                const T *v = (const T *)(x + t_ * st_);                         \
                                for (npy_intp i = 0; i < len; ++i) buf[i] += v[i];              \
                            }                                                                   \
                            ODOMETER_STEP(&m_, jdx, nout, nl - 1, q, 1, inner_done);            \
                        }                                                                       \
                        for (npy_intp i = 0; i < len; ++i) buf[i] += (p1[i] + p2[i]) + p3[i];   \
                    }                                                                           \
                    while (!inner_done) {                                                       \
                        const char *x = src + q[0];                                             \
                        if (s == z) { /* (complex numbers as pairs of reals) */                 \
                            const T *v = (const T *)x;                                          \
                            for (npy_intp i = 0; i < w * len; ++i) buf[i] += v[i];              \
                        } else if (CPLX) {                                                      \
                            for (npy_intp i = 0; i < len; ++i) {                                \
                                const T *v = (const T *)(x + i * s);                            \
                                buf[2 * i] += v[0];                                             \
                                buf[2 * i + 1] += v[1];                                         \
                            }                                                                   \
                        } else {                                                                \
                            for (npy_intp i = 0; i < len; ++i) buf[i] += *(const T *)(x + i * s); \
                        }                                                                       \
                        ODOMETER_STEP(&m_, jdx, nout, nl, q, 1, inner_done);                    \
                    }                                                                           \
                    if (CPLX && conj)                                                           \
                        for (npy_intp i = 0; i < len; ++i) buf[2 * i + 1] = -buf[2 * i + 1];    \
                    /* stored as len / e1 rows of e1 (r2_ < 0: one row, from i0 along r_) */   \
                    const npy_intp rows = r2_ >= 0 ? len / e1 : 1, rl = r2_ >= 0 ? e1 : len;    \
                    for (npy_intp j = 0; j < rows; ++j) {                                       \
                        char *row = dst + o[1] + (r2_ >= 0 ? (i0 / e1 + j) * ds2 : i0 * ds);    \
                        const T *b_ = buf + w * j * rl;                                         \
                        if (ds == z) {                                                          \
                            memcpy(row, b_, (size_t)(w * rl) * sizeof(T));                      \
                        } else {                                                                \
                            for (npy_intp i = 0; i < rl; ++i) {                                 \
                                T *y = (T *)(row + i * ds);                                     \
                                y[0] = b_[w * i];                                               \
                                if (CPLX) y[CPLX] = b_[w * i + CPLX];                           \
                            }                                                                   \
                        }                                                                       \
                    }                                                                           \
                }                                                                               \
                ODOMETER_STEP(&m_, idx, 0, nout, o, 2, done);                                   \
            }                                                                                   \
            return;                                                                             \
        }                                                                                       \
        if (!CPLX && nl == nout + 1 && nout >= 1 && n->st[0][nl - 1] == (npy_intp)sizeof(T)) { \
            /* one summed label, innermost and contiguous: the innermost kept label a plain   \
             * loop too, each element's run summed in lanes (see PACK_SHORT_LANES) */          \
            Nest m_ = *n; /* (the kept labels in the source's order, see rows_by_source) */   \
            rows_by_source(&m_);                                                                \
            const npy_intp et = n->ext[nl - 1], e1 = m_.ext[nout - 1];                          \
            const npy_intp s1 = m_.st[0][nout - 1], d1 = m_.st[1][nout - 1];                    \
            m_.ext[nout - 1] = 1;                                                               \
            while (!done) {                                                                     \
                const char *x = src + o[0];                                                     \
                char *y = dst + o[1];                                                           \
                for (npy_intp j = 0; j < e1; ++j) {                                             \
                    const T *v = (const T *)(x + j * s1);                                       \
                    T acc = 0;                                                                  \
                    npy_intp t_ = 0;                                                            \
                    if (et >= PACK_LANES_RUN) {                                                 \
                        T lane[PACK_LANES] = {0};                                               \
                        for (; t_ + PACK_LANES <= et; t_ += PACK_LANES)                         \
                            for (int j_ = 0; j_ < PACK_LANES; ++j_) lane[j_] += v[t_ + j_];     \
                        for (; t_ < et; ++t_) acc += v[t_];                                     \
                        for (int j_ = 0; j_ < PACK_LANES; ++j_) acc += lane[j_];                \
                    } else {                                                                    \
                        T l0 = 0, l1 = 0, l2 = 0, l3 = 0;                                       \
                        for (; t_ + PACK_SHORT_LANES <= et; t_ += PACK_SHORT_LANES)             \
                            l0 += v[t_], l1 += v[t_ + 1], l2 += v[t_ + 2], l3 += v[t_ + 3];     \
                        for (; t_ < et; ++t_) acc += v[t_];                                     \
                        acc += (l0 + l1) + (l2 + l3);                                           \
                    }                                                                           \
                    *(T *)(y + j * d1) = acc;                                                   \
                }                                                                               \
                ODOMETER_STEP(&m_, idx, 0, nout, o, 2, done);                                   \
            }                                                                                   \
            return;                                                                             \
        }                                                                                       \
        Nest g_ = *n; /* the elements of a sum walked in the source's order (see below) */  \
        if (nl > nout) rows_by_source(&g_);                                                     \
        while (!done) {                                                                         \
            T accr = 0, acci = 0;                                                               \
            if (nl > nout) { /* the innermost summed label a plain loop, the same order of    \
                              * terms (one odometer step per term took twice as long or more: \
                              * 37 seeded products with an isolated label innermost, 1.01-2.9x, \
                              * geometric mean 1.50x; ixlskgt,gzosi->zlkox 15.7 -> 7.8 ms),   \
                              * into partial sums on long runs (see PACK_LANES) */             \
                npy_intp jdx[MAXL]; /* only the summed labels' counters are used */             \
                for (int l_ = nout; l_ < nl; ++l_) jdx[l_] = 0;                                 \
                const npy_intp et = n->ext[nl - 1], st_ = n->st[0][nl - 1];                     \
                npy_intp q[1] = {o[0]};                                                         \
                int inner_done = 0;                                                             \
                if (!CPLX && st_ == (npy_intp)sizeof(T) && et >= PACK_LANES_RUN) {              \
                    T lane[PACK_LANES] = {0};                                                   \
                    while (!inner_done) {                                                       \
                        const T *v = (const T *)(src + q[0]);                                   \
                        npy_intp t_ = 0;                                                        \
                        for (; t_ + PACK_LANES <= et; t_ += PACK_LANES)                         \
                            for (int j_ = 0; j_ < PACK_LANES; ++j_) lane[j_] += v[t_ + j_];     \
                        for (; t_ < et; ++t_) accr += v[t_];                                    \
                        ODOMETER_STEP(n, jdx, nout, nl - 1, q, 1, inner_done);                  \
                    }                                                                           \
                    for (int j_ = 0; j_ < PACK_LANES; ++j_) accr += lane[j_];                   \
                }                                                                               \
                while (!inner_done) {                                                           \
                    const char *x = src + q[0];                                                 \
                    for (npy_intp t_ = 0; t_ < et; ++t_) {                                      \
                        const T *v = (const T *)(x + t_ * st_);                                 \
                        accr += v[0];                                                           \
                        if (CPLX) acci += v[1];                                                 \
                    }                                                                           \
                    ODOMETER_STEP(n, jdx, nout, nl - 1, q, 1, inner_done);                      \
                }                                                                               \
            } else {                                                                            \
                const T *x = (const T *)(src + o[0]);                                           \
                accr = x[0];                                                                    \
                if (CPLX) acci = x[1];                                                          \
            }                                                                                   \
            out = (T *)(dst + o[1]);                                                            \
            out[0] = accr;                                                                      \
            if (CPLX) out[1] = sgn * acci;                                                      \
            ODOMETER_STEP(&g_, idx, 0, nout, o, 2, done);                                       \
        }                                                                                       \
    }

PACK_KERNEL(f32, float, 0)
PACK_KERNEL(f64, double, 0)
PACK_KERNEL(c64, float, 1)
PACK_KERNEL(c128, double, 1)

/* D = op_D(alpha T + beta op_C(C)) over D's labels (st[2] C, st[3] D, tst T). The two
 * innermost labels run as plain loops (an odometer step per row of a few elements cost more
 * than the row: puldr,pULDR->uUlLdDrR stores rows of 8); a row that runs along T, C and D
 * alike is one loop the compiler vectorises. */
#define STORE_KERNEL(NAME, T, CPLX)                                                                \
    static void store_##NAME(const Program *p, cval al, cval be, const char *Tm, const char *C,    \
                             char *D) {                                                            \
        npy_intp idx[MAXL] = {0};                                                                  \
        npy_intp o[4] = {0, 0, 0, 0};                                                              \
        const T ar = (T)al.re, ai = (T)al.im, br = (T)be.re, bi = (T)be.im;                        \
        const T sc = p->conj[2] ? (T)-1 : (T)1, sd = p->conj[3] ? (T)-1 : (T)1;                    \
        const int last = p->nout - 1, next = last - 1;                                             \
        const npy_intp e = last >= 0 ? p->ext[last] : 1;                                           \
        const npy_intp s2 = last >= 0 ? p->st[2][last] : 0, s3 = last >= 0 ? p->st[3][last] : 0;   \
        const npy_intp stt = last >= 0 ? p->tst[last] : 0;                                         \
        const npy_intp e1 = next >= 0 ? p->ext[next] : 1;                                          \
        const npy_intp s21 = next >= 0 ? p->st[2][next] : 0;                                       \
        const npy_intp s31 = next >= 0 ? p->st[3][next] : 0, st1 = next >= 0 ? p->tst[next] : 0;   \
        const npy_intp item = (CPLX ? 2 : 1) * (npy_intp)sizeof(T);                                \
        const int unit = s3 == item && stt == item && (!C || s2 == item);                          \
        npy_intp ot = 0;                                                                           \
        int done = 0;                                                                              \
        while (!done) {                                                                            \
            for (npy_intp j = 0; j < e1; ++j) { /* the two innermost labels as plain loops */      \
                const char *tj = Tm + ot + j * st1;                                                \
                const char *cj = C ? C + o[2] + j * s21 : NULL;                                    \
                char *dj = D + o[3] + j * s31;                                                     \
                if (!CPLX && unit) {                                                               \
                    const T *restrict t = (const T *)tj;                                           \
                    T *restrict d = (T *)dj;                                                       \
                    if (cj) {                                                                      \
                        const T *restrict c = (const T *)cj;                                       \
                        for (npy_intp i = 0; i < e; ++i) d[i] = ar * t[i] + br * c[i];             \
                    } else {                                                                       \
                        for (npy_intp i = 0; i < e; ++i) d[i] = ar * t[i];                         \
                    }                                                                              \
                    continue;                                                                      \
                }                                                                                  \
                if (CPLX && unit) {                                                                \
                    const T *restrict t = (const T *)tj;                                           \
                    T *restrict d = (T *)dj;                                                       \
                    const T *restrict c = (const T *)cj;                                           \
                    for (npy_intp i = 0; i < e; ++i) {                                             \
                        const T tr = t[2 * i], ti = t[2 * i + 1];                                  \
                        T rr = CMUL_RE(ar, ai, tr, ti), ri = CMUL_IM(ar, ai, tr, ti);              \
                        if (c) {                                                                   \
                            const T cr = c[2 * i], ci = sc * c[2 * i + 1];                         \
                            rr += CMUL_RE(br, bi, cr, ci);                                         \
                            ri += CMUL_IM(br, bi, cr, ci);                                         \
                        }                                                                          \
                        d[2 * i] = rr;                                                             \
                        d[2 * i + 1] = sd * ri;                                                    \
                    }                                                                              \
                    continue;                                                                      \
                }                                                                                  \
                for (npy_intp i = 0; i < e; ++i) {                                                 \
                    const T *t = (const T *)(tj + i * stt);                                        \
                    T *d = (T *)(dj + i * s3);                                                     \
                    if (CPLX) {                                                                    \
                        COMPLEX_FINISH(T, t[0], t[1], cj + i * s2, d);                             \
                    } else {                                                                       \
                        T r = ar * t[0];                                                           \
                        if (C) r += br * *(const T *)(cj + i * s2);                                \
                        d[0] = r;                                                                  \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
            {                                                                                      \
                int _l = next - 1;                                                                 \
                for (; _l >= 0; --_l) {                                                            \
                    if (++idx[_l] < p->ext[_l]) {                                                  \
                        o[2] += p->st[2][_l];                                                      \
                        o[3] += p->st[3][_l];                                                      \
                        ot += p->tst[_l];                                                          \
                        break;                                                                     \
                    }                                                                              \
                    idx[_l] = 0;                                                                   \
                    o[2] -= (p->ext[_l] - 1) * p->st[2][_l];                                       \
                    o[3] -= (p->ext[_l] - 1) * p->st[3][_l];                                       \
                    ot -= (p->ext[_l] - 1) * p->tst[_l];                                           \
                }                                                                                  \
                done = _l < 0;                                                                     \
            }                                                                                      \
        }                                                                                          \
    }

STORE_KERNEL(f32, float, 0)
STORE_KERNEL(f64, double, 0)
STORE_KERNEL(c64, float, 1)
STORE_KERNEL(c128, double, 1)

/* ``stream``: the whole pack (of which this may be a worker's part) is of STREAM_COPY_MIN
 * bytes or more. */
static void run_pack(const Program *p, const Nest *n, const char *src, char *dst, int conj,
                     int stream) {
    if (!conj && pack_tiled(n, src, dst, p->item, stream)) return;
    switch (p->dtype) {
        case DT_F32: pack_f32(n, src, dst, conj, 0); break;
        case DT_F64: pack_f64(n, src, dst, conj, 0); break;
        case DT_C64: pack_c64(n, src, dst, conj, 0); break;
        default: pack_c128(n, src, dst, conj, 0); break;
    }
}

static void run_store(const Program *p, cval al, cval be, const char *T, const char *C,
                      char *D) {
    switch (p->dtype) {
        case DT_F32: store_f32(p, al, be, T, C, D); break;
        case DT_F64: store_f64(p, al, be, T, C, D); break;
        case DT_C64: store_c64(p, al, be, T, C, D); break;
        default: store_c128(p, al, be, T, C, D); break;
    }
}

static void run_loop(const Program *p, cval al, cval be, const char *A, const char *B,
                     const char *C, char *D) {
    switch (p->dtype) {
        case DT_F32: loop_f32(p, al, be, A, B, C, D); break;
        case DT_F64: loop_f64(p, al, be, A, B, C, D); break;
        case DT_C64: loop_c64(p, al, be, A, B, C, D); break;
        default: loop_c128(p, al, be, A, B, C, D); break;
    }
}

/* Whether a loop nest's layout may be a permute's copy (defined with the pool, below). */
static int permute_layout(const Program *p);
/* A permute's loop nest as a tiled copy (defined with the pool, below). */
static int run_permute(const Program *p, cval al, const char *A, const char *B, const char *C,
                       char *D);
/* A loop nest split over the BLAS's pool (defined with the pool, below). */
static void run_loop_split(const Program *p, cval al, cval be, const char *A, const char *B,
                           const char *C, char *D);

static void run_scale(const Program *p, cval be, const char *C, char *D) {
    switch (p->dtype) {
        case DT_F32: scale_f32(p, be, C, D); break;
        case DT_F64: scale_f64(p, be, C, D); break;
        case DT_C64: scale_c64(p, be, C, D); break;
        default: scale_c128(p, be, C, D); break;
    }
}

static void run_conj(const Program *p, char *D) {
    if (p->dtype == DT_C64) conj_c64(p, D);
    else if (p->dtype == DT_C128) conj_c128(p, D);
}

/* The blocks cover the nest, each `chunk` indices of every label (fewer at its end); the
 * operands of plane_mask are packed block by block into a buffer in the nest's order (a tiled
 * copy: their fastest label is not D's), and the block's elementwise nest reads them there,
 * the others where they lie. The same elements, multiplied in the same way as unblocked. */
static int run_planes(const Program *p, cval al, cval be, const char *A, const char *B,
                      const char *C, char *D) {
    const int nl = p->nout, mask = p->plane_mask;
    npy_intp cells = 1;
    for (int l = 0; l < nl; ++l) cells *= p->chunk[l];
    const int both = mask == 3;
    char *buf = malloc((size_t)((1 + both) * cells * p->item));
    if (!buf) return 1;
    char *packed[2] = {buf, buf + both * cells * p->item};
    Program sub;
    memcpy(&sub, p, sizeof(Program));
    sub.plane_mask = 0;
    sub.row_block = 0;
    npy_intp idx[MAXL] = {0}; /* each label's first index of the block */
    const char *src[2] = {A, B};
    for (;;) {
        npy_intp o[4] = {0, 0, 0, 0};
        for (int l = 0; l < nl; ++l) {
            sub.ext[l] = p->ext[l] - idx[l] < p->chunk[l] ? p->ext[l] - idx[l] : p->chunk[l];
            for (int k = 0; k < 4; ++k) o[k] += idx[l] * p->st[k][l];
        }
        const char *op[2];
        for (int k = 0; k < 2; ++k) {
            op[k] = src[k] + o[k];
            if (!(mask >> k & 1)) continue;
            Nest n;
            n.nl = n.nout = nl;
            npy_intp step = p->item;
            for (int l = nl - 1; l >= 0; --l) {
                n.ext[l] = sub.ext[l], n.st[0][l] = p->st[k][l];
                sub.st[k][l] = step;
                step *= sub.ext[l];
            }
            run_pack(p, &n, op[k], packed[k], 0, 0);
            op[k] = packed[k];
        }
        run_loop(&sub, al, be, op[0], op[1], C ? C + o[2] : NULL, D + o[3]);
        int l = nl - 1;
        for (; l >= 0; --l) {
            if ((idx[l] += p->chunk[l]) < p->ext[l]) break;
            idx[l] = 0;
        }
        if (l < 0) break;
    }
    free(buf);
    return 0;
}

static int gemv_call(const Program *p, cval al, cval be, const char *L, const char *R,
                     char *D);

/* One CBLAS GEMM: D = alpha op(L) op(R) + beta D, row-major. */
static void gemm_raw(int dtype, int ta, int tb, int64_t m64, int64_t n64, int64_t k64, cval al,
                     const char *L, int64_t lda64, const char *R, int64_t ldb64, cval be,
                     char *D, int64_t ldd64);

static void gemm_call(const Program *p, cval al, cval be, const char *L, const char *R,
                      char *D) {
    if (gemv_call(p, al, be, L, R, D)) return;
    gemm_raw(p->dtype, p->ta, p->tb, p->m, p->n, p->k, al, L, p->lda, R, p->ldb, be, D, p->ldd);
}

static int tile_run(int dtype, int ta, int tb, int64_t m, int64_t n, int64_t k, cval al,
                    const char *L, int64_t lda, const char *R, int64_t ldb, cval be, char *D,
                    int64_t ldd);

static void gemm_raw(int dtype, int ta, int tb, int64_t m64, int64_t n64, int64_t k64, cval al,
                     const char *L, int64_t lda64, const char *R, int64_t ldb64, cval be,
                     char *D, int64_t ldd64) {
    if (tile_run(dtype, ta, tb, m64, n64, k64, al, L, lda64, R, ldb64, be, D, ldd64)) return;
    void *f = g_gemm[dtype];
    if (g_ilp64) {
        switch (dtype) {
            case DT_F32:
                ((sgemm64_t)f)(ROW_MAJOR, ta, tb, m64, n64, k64, (float)al.re,
                               (const float *)L, lda64, (const float *)R, ldb64, (float)be.re,
                               (float *)D, ldd64);
                break;
            case DT_F64:
                ((dgemm64_t)f)(ROW_MAJOR, ta, tb, m64, n64, k64, al.re,
                               (const double *)L, lda64, (const double *)R, ldb64, be.re,
                               (double *)D, ldd64);
                break;
            case DT_C64: {
                float a2[2] = {(float)al.re, (float)al.im}, b2[2] = {(float)be.re, (float)be.im};
                ((zgemm64_t)f)(ROW_MAJOR, ta, tb, m64, n64, k64, a2, L, lda64, R,
                               ldb64, b2, D, ldd64);
                break;
            }
            default: {
                double a2[2] = {al.re, al.im}, b2[2] = {be.re, be.im};
                ((zgemm64_t)f)(ROW_MAJOR, ta, tb, m64, n64, k64, a2, L, lda64, R,
                               ldb64, b2, D, ldd64);
                break;
            }
        }
    } else {
        int m = (int)m64, n = (int)n64, k = (int)k64;
        int lda = (int)lda64, ldb = (int)ldb64, ldd = (int)ldd64;
        switch (dtype) {
            case DT_F32:
                ((sgemm32_t)f)(ROW_MAJOR, ta, tb, m, n, k, (float)al.re, (const float *)L,
                               lda, (const float *)R, ldb, (float)be.re, (float *)D, ldd);
                break;
            case DT_F64:
                ((dgemm32_t)f)(ROW_MAJOR, ta, tb, m, n, k, al.re, (const double *)L, lda,
                               (const double *)R, ldb, be.re, (double *)D, ldd);
                break;
            case DT_C64: {
                float a2[2] = {(float)al.re, (float)al.im}, b2[2] = {(float)be.re, (float)be.im};
                ((zgemm32_t)f)(ROW_MAJOR, ta, tb, m, n, k, a2, L, lda, R, ldb, b2, D, ldd);
                break;
            }
            default: {
                double a2[2] = {al.re, al.im}, b2[2] = {be.re, be.im};
                ((zgemm32_t)f)(ROW_MAJOR, ta, tb, m, n, k, a2, L, lda, R, ldb, b2, D, ldd);
                break;
            }
        }
    }
}

/* One CBLAS GEMV of the registered integer width (SUF 64 or 32, IT int64_t or int). */
#define GEMV_DISPATCH(SUF, IT)                                                                  \
    switch (dtype) {                                                                            \
        case DT_F32:                                                                            \
            ((sgemv##SUF##_t)f)(ROW_MAJOR, trans, (IT)rows, (IT)cols, (float)al.re,             \
                                (const float *)M, (IT)ld, (const float *)x, (IT)incx,           \
                                (float)be.re, (float *)y, (IT)incy);                            \
            break;                                                                              \
        case DT_F64:                                                                            \
            ((dgemv##SUF##_t)f)(ROW_MAJOR, trans, (IT)rows, (IT)cols, al.re, (const double *)M, \
                                (IT)ld, (const double *)x, (IT)incx, be.re, (double *)y,        \
                                (IT)incy);                                                      \
            break;                                                                              \
        case DT_C64:                                                                            \
            ((zgemv##SUF##_t)f)(ROW_MAJOR, trans, (IT)rows, (IT)cols, a2, M, (IT)ld, x,         \
                                (IT)incx, b2, y, (IT)incy);                                     \
            break;                                                                              \
        default:                                                                                \
            ((zgemv##SUF##_t)f)(ROW_MAJOR, trans, (IT)rows, (IT)cols, a4, M, (IT)ld, x,         \
                                (IT)incx, b4, y, (IT)incy);                                     \
            break;                                                                              \
    }

/* y := alpha op(M) x + beta y with M stored rows x cols (row-major, ld). */
static void gemv_raw(int dtype, int trans, int64_t rows, int64_t cols, cval al, const char *M,
                     int64_t ld, const char *x, int64_t incx, cval be, char *y, int64_t incy) {
    void *f = g_gemv[dtype];
    float a2[2] = {(float)al.re, (float)al.im}, b2[2] = {(float)be.re, (float)be.im};
    double a4[2] = {al.re, al.im}, b4[2] = {be.re, be.im};
    if (g_ilp64) {
        GEMV_DISPATCH(64, int64_t)
    } else {
        GEMV_DISPATCH(32, int)
    }
}

/* A row-major GEMM with one row or one column as a GEMV (BLAS's GEMM costs several times more
 * there): 1 when done, 0 when it must stay a GEMM (a conjugated vector, nothing summed). */
static int gemv_try(int dtype, int item, int ta, int tb, int64_t m, int64_t n, int64_t k,
                    cval al, const char *L, int64_t lda, const char *R, int64_t ldb, cval be,
                    char *D, int64_t ldd) {
    if (g_gemv[dtype] == NULL || k == 0 || (m != 1 && n != 1)) return 0;
    const char *mat, *vec;
    int64_t rows, cols, ld, incx, incy, len;
    int trans;
    if (n == 1) { /* D[:, 0] = op(L) op(R)[:, 0] */
        if (tb == CONJ_TRANS) return 0;
        mat = L, vec = R, ld = lda, trans = ta;
        rows = ta == NO_TRANS ? m : k;
        cols = ta == NO_TRANS ? k : m;
        incx = tb == NO_TRANS ? ldb : 1;
        incy = ldd, len = m;
    } else { /* D[0, :] = op(R)^T op(L)[0, :] */
        if (ta == CONJ_TRANS || tb == CONJ_TRANS) return 0;
        mat = R, vec = L, ld = ldb;
        trans = tb == NO_TRANS ? TRANS : NO_TRANS;
        rows = tb == NO_TRANS ? k : n;
        cols = tb == NO_TRANS ? n : k;
        incx = ta == NO_TRANS ? 1 : lda;
        incy = 1, len = n;
    }
    if (be.re == 0.0 && be.im == 0.0) { /* y is not read: clear it (BLAS may scale NaNs) */
        if (incy == 1)
            memset(D, 0, (size_t)len * (size_t)item);
        else
            for (int64_t i = 0; i < len; ++i) memset(D + i * incy * item, 0, (size_t)item);
    }
    gemv_raw(dtype, trans, rows, cols, al, mat, ld, vec, incx, be, D, incy);
    return 1;
}

static int gemv_call(const Program *p, cval al, cval be, const char *L, const char *R,
                     char *D) {
    return gemv_try(p->dtype, p->item, p->ta, p->tb, p->m, p->n, p->k, al, L, p->lda, R, p->ldb,
                    be, D, p->ldd);
}

static void scale_rows(int dt, char *D, const char *C, npy_intp row, npy_intp m, npy_intp n,
                       cval be, int conj);
/* A batch of GEMMs on views adding beta op_C(C) where C lies as D sets each GEMM's D (m x n,
 * contiguous: its rows one after the other) from C just before the GEMM, where that block is
 * at most FUSE_SLAB_MAX bytes, instead of a pass over all of D first: the GEMM then reads D in
 * cache, one pass over D from memory less. ijql,kq->ijkl (2304 GEMMs of 48x48x24, F64) 6.5 ->
 * 4.8 ms, bhqd,bhkd->bhqk (128 of 512x512x64, F32) 35.4 -> 27.8; 100 seeded batches of GEMMs
 * on views 1.01x (geometric mean). Blocks whose rows lie apart were slower so (7 x 12 C128
 * blocks, rows 25 KB apart: 0.55x: each GEMM's rows then miss in C and D in scattered order
 * where the pass streams), as were GEMV-like ones (a column of D, 0.6-0.8x). */
#define FUSE_SLAB_MAX (1 << 20)

/* The GEMMs of a GEMM step over its batch; with C (lying as D), each GEMM's rows of D set to
 * cbe op_C(C) first (scale_rows). */
static void run_gemm(const Program *p, cval al, cval be, const char *A, const char *B,
                     char *D, const char *C, cval cbe) {
    npy_intp idx[MAXL] = {0};
    const char *pa = A, *pb = B;
    char *pd = D;
    for (;;) {
        if (C) scale_rows(p->dtype, pd, C + (pd - D), p->ldd * p->item, p->m, p->n, cbe,
                          p->conj[2]);
        if (p->swap) gemm_call(p, al, be, pb, pa, pd);
        else gemm_call(p, al, be, pa, pb, pd);
        int l = p->nb - 1;
        for (; l >= 0; --l) {
            if (++idx[l] < p->bext[l]) {
                pa += p->bst[0][l];
                pb += p->bst[1][l];
                pd += p->bst[2][l];
                break;
            }
            idx[l] = 0;
            pa -= (p->bext[l] - 1) * p->bst[0][l];
            pb -= (p->bext[l] - 1) * p->bst[1][l];
            pd -= (p->bext[l] - 1) * p->bst[2][l];
        }
        if (l < 0) break;
    }
}


static void *scratch(npy_intp bytes) {
    size_t size = ((size_t)(bytes > 0 ? bytes : 1) + 63) / 64 * 64;
    return aligned_alloc(64, size);
}

/* Large scratch kept for the next call: TTGT's packs and T and a stream's V and T of KEEP_MIN
 * bytes or more are not given back to the system when a call ends (the C library unmaps
 * them), at most KEEP_SLOTS blocks and g_keep_max bytes, so the next call does not fault in
 * and zero every page again (leazc,kea->lackz, 57 MB of packs and T: a fifth of its time in
 * page faults); release_scratch() gives them back (clear_plan_cache calls it). Each block has
 * a 64-byte header holding its size. */
#define KEEP_MIN ((size_t)1 << 20)
#define KEEP_SLOTS 4
static size_t g_keep_max = (size_t)64 << 20; /* set_keep_bytes: scratch.KEEP_BYTES */
static char *g_keep[KEEP_SLOTS];
static unsigned long g_keep_age[KEEP_SLOTS], g_keep_clock; /* when each was kept */
static size_t g_keep_bytes;
static pthread_mutex_t g_keep_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t kept_size(const char *p) { return *(const size_t *)(p - 64); }

/* A block of at least `bytes` (64-byte aligned): a kept one of at most twice that, or new. */
static void *keep_alloc(npy_intp bytes) {
    const size_t need = ((size_t)(bytes > 0 ? bytes : 1) + 63) / 64 * 64;
    if (need >= KEEP_MIN) {
        pthread_mutex_lock(&g_keep_lock);
        int best = -1;
        for (int i = 0; i < KEEP_SLOTS; ++i)
            if (g_keep[i] && kept_size(g_keep[i]) >= need && kept_size(g_keep[i]) <= 2 * need
                && (best < 0 || kept_size(g_keep[i]) < kept_size(g_keep[best])))
                best = i;
        char *got = NULL;
        if (best >= 0) {
            got = g_keep[best];
            g_keep[best] = NULL;
            g_keep_bytes -= kept_size(got);
        }
        pthread_mutex_unlock(&g_keep_lock);
        if (got) return got;
    }
    char *base = aligned_alloc(64, need + 64);
    if (!base) return NULL;
    *(size_t *)base = need;
    return base + 64;
}

/* Give back a block of keep_alloc: kept, the blocks kept longest freed to make room (the
 * product that ran last is the likeliest to run next: a workload of many products filled the
 * room with blocks of sizes its next product could not take), or freed where it alone is
 * over the budget. */
static void keep_free(void *ptr) {
    if (!ptr) return;
    char *p = ptr;
    const size_t size = kept_size(p);
    char *evicted[KEEP_SLOTS];
    int nev = 0;
    if (size >= KEEP_MIN) {
        pthread_mutex_lock(&g_keep_lock);
        if (size <= g_keep_max) {
            for (;;) {
                int slot = -1, oldest = -1;
                for (int i = 0; i < KEEP_SLOTS; ++i) {
                    if (!g_keep[i]) {
                        if (slot < 0) slot = i;
                    } else if (oldest < 0 || g_keep_age[i] < g_keep_age[oldest]) {
                        oldest = i;
                    }
                }
                if (slot >= 0 && g_keep_bytes + size <= g_keep_max) {
                    g_keep[slot] = p;
                    g_keep_age[slot] = ++g_keep_clock;
                    g_keep_bytes += size;
                    p = NULL;
                    break;
                }
                evicted[nev++] = g_keep[oldest];
                g_keep_bytes -= kept_size(g_keep[oldest]);
                g_keep[oldest] = NULL;
            }
        }
        pthread_mutex_unlock(&g_keep_lock);
    }
    for (int i = 0; i < nev; ++i) free(evicted[i] - 64);
    if (p) free(p - 64);
}

/* set_keep_bytes(n): keep at most n bytes of scratch between calls (0: none). */
static PyObject *set_keep_bytes(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "n", &n)) return NULL;
    pthread_mutex_lock(&g_keep_lock);
    g_keep_max = n > 0 ? (size_t)n : 0;
    pthread_mutex_unlock(&g_keep_lock);
    Py_RETURN_NONE;
}

/* release_scratch() -> int: free the kept scratch blocks; the bytes given back. */
static PyObject *release_scratch(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    char *blocks[KEEP_SLOTS];
    size_t bytes;
    pthread_mutex_lock(&g_keep_lock);
    for (int i = 0; i < KEEP_SLOTS; ++i) blocks[i] = g_keep[i], g_keep[i] = NULL;
    bytes = g_keep_bytes;
    g_keep_bytes = 0;
    pthread_mutex_unlock(&g_keep_lock);
    for (int i = 0; i < KEEP_SLOTS; ++i)
        if (blocks[i]) free(blocks[i] - 64);
    return PyLong_FromSize_t(bytes);
}

/* Packs, GEMMs into the scratch T, then the store into D; 1 when memory ran out. Without C,
 * where D lies as T would, the GEMMs write D with alpha (*direct set to 1): no T, no store. */
static void run_pack_split(const Program *p, const Nest *n, const char *src, char *dst,
                           int conj, npy_intp bytes);
static void run_store_split(const Program *p, cval al, cval be, const char *T, const char *C,
                            char *D);
static void run_scale_split(const Program *p, cval be, const char *C, char *D);

static int run_ttgt_blocked(const Program *p, cval al, const char *A, const char *B,
                            const char *pa, const char *pb, char *out, cval sal, cval sbe,
                            const char *C, char *D);
static int run_summed(const Program *p, cval al, cval be, const char *A, const char *B,
                      char *D, const char *C, cval cbe);

/* A GEMM lowered as slabs of its rows (analysis.program._slabs: one batch label, the right
 * operand's stride 0, the left's and D's a slab's rows apart): with C lying as D, each slab is
 * set from C before its GEMM; without C, one GEMM over all the rows writes D (the slabs, each
 * reading all of the right operand on a one-thread BLAS, ran 0.45-0.9x its speed so). */
static int slabbed(const Program *p) {
    if (p->nb != 1 || p->nsum || !p->d_direct) return 0;
    const int sw = p->swap;
    const npy_intp row = p->ta == NO_TRANS ? p->lda * p->item : p->item;
    return p->bst[sw ? 0 : 1][0] == 0 && p->bst[sw ? 1 : 0][0] == p->m * row
           && p->bst[2][0] == p->m * p->ldd * p->item;
}

static int run_ttgt(const Program *p, cval al, cval be, const char *A, const char *B,
                    const char *C, char *D, int *direct) {
    const int into_d = p->d_direct && !C;
    /* blocks of T stored into D each while in cache: no T as large as D */
    const int per_block = p->blocked >= 0 && p->block_store >= 0 && (!into_d || p->nbb);
    /* a blocked thick operand is packed block by block, never whole */
    char *pa = p->bytes_a && p->blocked != 0 ? keep_alloc(p->bytes_a) : NULL;
    char *pb = p->bytes_b && p->blocked != 1 ? keep_alloc(p->bytes_b) : NULL;
    /* a batch of GEMMs shared out over the workers, each on a one-thread BLAS, as a batch on
     * views is (dom,nod->dnm, 336 GEMMs of 34x398x44: 32 -> 21 ms on 2 cores); where D lies
     * as T and as C, each GEMM's block of D set from C just before it, then added into (no
     * T: 21 -> 7.8 ms) */
    const int shared = p->blocked < 0 && p->nb && p->flops >= BATCH_SPLIT_MIN_FLOPS;
    const int fuse = shared && p->d_direct && C && p->c_as_d && p->m >= 2 && p->n >= 2
                     && p->ldd == p->n && p->m * p->n * p->item <= FUSE_SLAB_MAX;
    char *t = into_d || per_block || fuse ? NULL : keep_alloc(p->bytes_t);
    if ((p->bytes_a && p->blocked != 0 && !pa) || (p->bytes_b && p->blocked != 1 && !pb)
        || (!into_d && !per_block && !fuse && !t)) {
        keep_free(pa);
        keep_free(pb);
        keep_free(t);
        return 1;
    }
    double since = step_clock();
    if (pa) run_pack_split(p, &p->pack_a, A, pa, p->conj[0], p->bytes_a);
    if (pb) run_pack_split(p, &p->pack_b, B, pb, p->conj[1], p->bytes_b);
    if (pa || pb) since = step_done(STEP_PACK, since);
    cval one = {1.0, 0.0}, zero = {0.0, 0.0};
    if (p->blocked >= 0) {
        const int gemm_d = into_d && !per_block; /* the GEMMs write D with alpha */
        int failed = run_ttgt_blocked(p, gemm_d ? al : one, A, B, pa, pb, gemm_d ? D : t, al,
                                      be, C, per_block ? D : NULL);
        since = step_done(STEP_BLOCKED, since);
        if (!failed && gemm_d && direct) *direct = 1;
        if (!failed && !into_d && !per_block) {
            run_store_split(p, al, be, t, C, D);
            step_done(STEP_STORE, since);
        }
        keep_free(pa);
        keep_free(pb);
        keep_free(t);
        return failed;
    }
    if (fuse) {
        run_summed(p, al, one, pa ? pa : A, pb ? pb : B, D, C, be);
        step_done(STEP_GEMM, since);
        if (direct) *direct = 1;
    } else if (into_d) {
        if (slabbed(p)) {
            Program whole = *p;
            whole.m = p->m * p->bext[0];
            whole.nb = 0;
            run_gemm(&whole, al, zero, pa ? pa : A, pb ? pb : B, D, NULL, zero);
        } else if (shared) run_summed(p, al, zero, pa ? pa : A, pb ? pb : B, D, NULL, zero);
        else run_gemm(p, al, zero, pa ? pa : A, pb ? pb : B, D, NULL, zero);
        step_done(STEP_GEMM, since);
        if (direct) *direct = 1;
    } else {
        if (shared) run_summed(p, one, zero, pa ? pa : A, pb ? pb : B, t, NULL, zero);
        else run_gemm(p, one, zero, pa ? pa : A, pb ? pb : B, t, NULL, zero);
        since = step_done(STEP_GEMM, since);
        run_store_split(p, al, be, t, C, D);
        step_done(STEP_STORE, since);
    }
    keep_free(pa);
    keep_free(pb);
    keep_free(t);
    return 0;
}

/* ------------------------------------------------------------------ operand checks */

/* Buffer exporters whose buffer may not be their allocation (ctypes objects laid over a
 * pointer): set_untrusted(); until then no exporter is trusted. */
static PyObject *g_untrusted = NULL;

static int untrusted(PyObject *obj) {
    if (!g_untrusted) return 1;
    int found = PyObject_IsInstance(obj, g_untrusted);
    if (found < 0) PyErr_Clear();
    return found != 0;
}

/* [*low, *high): the allocation holding `a`'s memory, found through its chain of bases; 0 when
 * it cannot be proven. The owner is an ndarray that owns its contiguous data or, for inputs
 * (`any_buffer`), any other object exporting a buffer (bytearray, bytes, mmap, numba's
 * allocations...) but the untrusted ones. Subclasses (np.memmap), untrusted exporters and objects
 * without a buffer (as_strided's helper, __array_interface__ providers, DLPack capsules) prove
 * nothing: the general path (pytapp.allocation) binds those. */
static int owner_range(PyArrayObject *a, int any_buffer, int writable, const char **low,
                       const char **high) {
    PyObject *obj = (PyObject *)a;
    while (PyArray_CheckExact(obj) && !(PyArray_FLAGS((PyArrayObject *)obj) & NPY_ARRAY_OWNDATA)) {
        obj = PyArray_BASE((PyArrayObject *)obj);
        if (obj == NULL) return 0;
    }
    if (PyArray_CheckExact(obj)) {
        PyArrayObject *b = (PyArrayObject *)obj;
        int bf = PyArray_FLAGS(b);
        if (!(bf & (NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_F_CONTIGUOUS))) return 0;
        if (writable && !(bf & NPY_ARRAY_WRITEABLE)) return 0;
        *low = PyArray_BYTES(b);
        *high = *low + PyArray_NBYTES(b);
        return 1;
    }
    if (!any_buffer || PyArray_Check(obj)) return 0;
    if (PyMemoryView_Check(obj)) { /* bounded by its own buffer, a part of its exporter's */
        PyObject *exporter = PyMemoryView_GET_BASE(obj);
        Py_buffer *mb = PyMemoryView_GET_BUFFER(obj);
        if (!exporter || PyMemoryView_Check(exporter) || untrusted(exporter) ||
            !PyBuffer_IsContiguous(mb, 'A'))
            return 0;
        *low = (const char *)mb->buf;
        *high = *low + mb->len;
        return 1;
    }
    if (untrusted(obj)) return 0;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) != 0) {
        PyErr_Clear();
        return 0;
    }
    *low = (const char *)view.buf;
    *high = *low + view.len;
    PyBuffer_Release(&view);
    return 1;
}

/* The operand as the program needs it, or NULL (no error set) when the general path must bind
 * it. Exact ndarray, native dtype, aligned, the descriptor's shape and byte strides, writable
 * when it is D, and a whole footprint inside a provable allocation (owner_range): an array that
 * owns its data, or a view whose chain of bases ends in one (for D) or in any buffer (inputs).
 * Memory NumPy allocated cannot be mapped at a second address, so once D is proven an input
 * can share D's memory only at D's own addresses, which overlaps() sees. */
static PyArrayObject *check_operand(const Program *p, PyObject *o, int role, int writable) {
    if (!PyArray_CheckExact(o)) return NULL;
    PyArrayObject *a = (PyArrayObject *)o;
    if (PyArray_TYPE(a) != p->type_num || !PyArray_ISNOTSWAPPED(a)) return NULL;
    int flags = PyArray_FLAGS(a);
    if (!(flags & NPY_ARRAY_ALIGNED)) return NULL;
    if (writable && !(flags & NPY_ARRAY_WRITEABLE)) return NULL;
    int nd = PyArray_NDIM(a);
    if (nd != p->ndim[role]) return NULL;
    const npy_intp *sh = PyArray_DIMS(a), *st = PyArray_STRIDES(a);
    for (int i = 0; i < nd; ++i) {
        if (sh[i] != p->shape[role][i] || st[i] != p->strides[role][i]) return NULL;
    }
    if (flags & NPY_ARRAY_OWNDATA) return a;
    if (!p->has_foot[role]) return a; /* empty: never dereferenced */
    const char *low, *high;
    if (!owner_range(a, !writable, writable, &low, &high)) return NULL;
    const char *first = PyArray_BYTES(a) + p->lo[role], *last = PyArray_BYTES(a) + p->hi[role];
    if (first < low || last > high) return NULL;
    return a;
}

static int overlaps(const Program *p, PyArrayObject *x, int rx, PyArrayObject *y, int ry) {
    if (!p->has_foot[rx] || !p->has_foot[ry]) return 0;
    const char *x0 = PyArray_BYTES(x) + p->lo[rx], *x1 = PyArray_BYTES(x) + p->hi[rx];
    const char *y0 = PyArray_BYTES(y) + p->lo[ry], *y1 = PyArray_BYTES(y) + p->hi[ry];
    return x0 < y1 && y0 < x1;
}

/* ------------------------------------------------------------------ Program */

/* Check the operands against the program and run it: 0 done, 1 not covered (nothing was
 * written; the caller binds them in Python), -1 a Python error is set. */
static int run_summed(const Program *p, cval al, cval be, const char *A, const char *B,
                      char *D, const char *C, cval cbe);

/* The summed GEMMs' job of a GEMM step with summed labels, built once with the Program. */
static void summed_template(Program *p) {
    SummedJob *job = &p->sjob;
    const int sw = p->swap;
    memset(job, 0, sizeof(*job));
    job->dt = p->dtype;
    job->item = p->item;
    job->ta = p->ta;
    job->tb = p->tb;
    job->nr = p->nsum;
    job->nk = p->nb - p->nsum;
    job->n = p->n;
    job->k = p->k;
    job->lda = p->lda;
    job->ldb = p->ldb;
    job->ldd = p->ldd;
    npy_intp kept = 1, sums = 1;
    for (int i = 0; i < p->nb; ++i) {
        const npy_intp sl = p->bst[sw ? 1 : 0][i], sr = p->bst[sw ? 0 : 1][i];
        if (i < p->nsum) {
            job->rext[i] = p->bext[i];
            job->rst[0][i] = sl;
            job->rst[1][i] = sr;
            sums *= p->bext[i];
        } else {
            job->kext[i - p->nsum] = p->bext[i];
            job->kst[0][i - p->nsum] = sl;
            job->kst[1][i - p->nsum] = sr;
            job->kst[2][i - p->nsum] = p->bst[2][i];
            kept *= p->bext[i];
        }
    }
    job->lrow = p->ta == NO_TRANS ? p->lda * p->item : p->item;
    job->drow = p->ldd * p->item;
    job->q1 = kept;
    job->r1 = p->m;
    job->s1 = sums;
    p->kept = kept;
}

static int run_stream(const Program *p, cval al, cval be, const char *A, const char *B,
                      const char *C, char *D);

static int program_run(Program *p, PyObject *alpha_o, PyObject *a_o, PyObject *b_o,
                       PyObject *beta_o, PyObject *c_o, PyObject *d_o, int *direct) {
    cval al, be;
    if (to_scalar(alpha_o, p->dtype, &al) || to_scalar(beta_o, p->dtype, &be)) return 1;
    int beta_zero = be.re == 0.0 && be.im == 0.0;
    PyArrayObject *d = check_operand(p, d_o, 3, 1); /* first: the inputs rely on it */
    PyArrayObject *a = d ? check_operand(p, a_o, 0, 0) : NULL;
    PyArrayObject *b = a ? check_operand(p, b_o, 1, 0) : NULL;
    if (!b) return 1;
    PyArrayObject *c = NULL;
    if (c_o != Py_None) {
        c = check_operand(p, c_o, 2, 0);
        if (!c) return 1;
    } else if (!beta_zero) {
        return 1; /* error 12 */
    }
    if (beta_zero) c = NULL;
    /* Inputs that share memory with D need copies first: the general path makes them. C is
     * fine when it is D with D's exact layout (read element by element before each write). */
    if (overlaps(p, a, 0, d, 3) || overlaps(p, b, 1, d, 3)) return 1;
    int c_is_d = 0;
    if (c && overlaps(p, c, 2, d, 3)) {
        if (PyArray_BYTES(c) != PyArray_BYTES(d)) return 1;
        for (int l = 0; l < p->nout; ++l)
            if (p->st[2][l] != p->st[3][l] && p->ext[l] > 1) return 1;
        c_is_d = 1;
    }
    /* summed GEMMs add into D itself: a conjugated C that is D would be overwritten unread */
    if (p->nsum && c_is_d && p->conj[2]) return 1;
    if (p->empty_d) return 0;
    const char *pa = PyArray_BYTES(a), *pb = PyArray_BYTES(b);
    const char *pc = c ? PyArray_BYTES(c) : NULL;
    char *pd = PyArray_BYTES(d);
    int zero_alpha = p->empty_sum || (al.re == 0.0 && al.im == 0.0);
    int release = p->flops >= p->release_gil_flops;
    int status = 0;
    PyThreadState *ts = release ? PyEval_SaveThread() : NULL;
    double since = step_clock();
    if (zero_alpha) { /* SPEC 1: A and B are not read */
        run_scale_split(p, be, pc, pd);
        if (p->conj[3]) run_conj(p, pd);
        step_done(STEP_STORE, since);
    } else if (p->kind == K_LOOP) {
        if (!run_permute(p, al, pa, pb, pc, pd)) run_loop_split(p, al, be, pa, pb, pc, pd);
        step_done(STEP_LOOP, since);
    } else if (p->kind == K_STREAM) { /* 1: no scratch memory, D untouched */
        status = run_stream(p, al, be, pa, pb, pc, pd);
    } else if (p->kind == K_TTGT) {
        /* 1: no scratch memory, D untouched */
        status = run_ttgt(p, al, be, pa, pb, pc, pd, direct);
    } else if (p->nsum) { /* 1: as for TTGT */
        const cval zero = {0.0, 0.0}, one = {1.0, 0.0};
        if (pc && !c_is_d) { /* the sum into D, then D = op_D(D + beta op_C(C)) in place */
            status = run_summed(p, al, zero, pa, pb, pd, NULL, zero);
            since = step_done(STEP_GEMM, since);
            if (!status) run_store(p, one, be, pd, pc, pd);
            step_done(STEP_STORE, since);
        } else {
            status = run_summed(p, al, pc ? be : zero, pa, pb, pd, NULL, zero);
            if (!status && p->conj[3]) run_conj(p, pd);
            step_done(STEP_GEMM, since);
        }
    } else {
        cval gbeta = {0.0, 0.0};
        const char *fuse = NULL; /* C whose slabs each GEMM's rows of D are set from first */
        if (pc && c_is_d && !p->conj[2]) {
            gbeta = be;
        } else if (pc) {
            if (p->nb && p->c_as_d && p->m >= 2 && p->n >= 2 && p->ldd == p->n
                && p->m * p->n * p->item <= FUSE_SLAB_MAX)
                fuse = pc;
            else {
                run_scale_split(p, be, pc, pd);
                since = step_done(STEP_STORE, since);
            }
            gbeta.re = 1.0;
        }
        if (p->nb && p->flops >= BATCH_SPLIT_MIN_FLOPS)
            status = run_summed(p, al, gbeta, pa, pb, pd, fuse, be); /* never 1 */
        else
            run_gemm(p, al, gbeta, pa, pb, pd, fuse, be);
        if (p->conj[3]) run_conj(p, pd);
        step_done(STEP_GEMM, since);
    }
    if (release) PyEval_RestoreThread(ts);
    return status;
}

static PyObject *Program_call(PyObject *self_obj, PyObject *const *args, size_t nargsf,
                              PyObject *kwnames) {
    Program *p = (Program *)self_obj;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 6 || (kwnames && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError,
                        "a Program takes (alpha, A, B, beta, C, D) positionally");
        return NULL;
    }
    double t0 = now();
    int direct = 0;
    int r = program_run(p, args[0], args[1], args[2], args[3], args[4], args[5], &direct);
    if (r < 0) return NULL;
    if (r > 0) Py_RETURN_NOTIMPLEMENTED;
    /* The Status: a copy of the template's attributes, with this run's time. */
    PyTypeObject *tp = (PyTypeObject *)p->status_type;
    PyObject *st = tp->tp_alloc(tp, 0);
    if (!st) return NULL;
    PyObject *dict = PyDict_Copy(p->status_dict);
    if (!dict) {
        Py_DECREF(st);
        return NULL;
    }
    if (direct) { /* no temporary was made: only the packed operands were allocated */
        PyObject *tmpl = PyDict_GetItemString(dict, "bytes_allocated");
        const Py_ssize_t all = tmpl && PyLong_Check(tmpl) ? PyLong_AsSsize_t(tmpl) : 0;
        PyObject *made = PyLong_FromSsize_t(all > p->bytes_t ? all - (Py_ssize_t)p->bytes_t : 0);
        if (!made || PyDict_SetItemString(dict, "bytes_allocated", made) < 0) {
            Py_XDECREF(made);
            Py_DECREF(dict);
            Py_DECREF(st);
            return NULL;
        }
        Py_DECREF(made);
    }
    PyObject *secs = PyFloat_FromDouble(now() - t0);
    if (!secs || PyDict_SetItemString(dict, "seconds", secs) < 0 ||
        PyObject_GenericSetDict(st, dict, NULL) < 0) {
        Py_XDECREF(secs);
        Py_DECREF(dict);
        Py_DECREF(st);
        return NULL;
    }
    Py_DECREF(secs);
    Py_DECREF(dict);
    return st;
}

static int read_intps(PyObject *seq, npy_intp *out, int max, int *count, const char *what) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (!fast) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n > max) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "%s: more than %d entries", what, max);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; ++i) {
        out[i] = (npy_intp)PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, i));
        if (out[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
    }
    if (count) *count = (int)n;
    Py_DECREF(fast);
    return 0;
}

/* (nout, extents, source byte strides) of a packing nest; the destination is contiguous. */
/* The lead labels of blocks: ((extent, thick byte stride, store label, other byte stride), ...). */
static int read_block_batch(PyObject *t, Program *p) {
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) > MAXL) {
        PyErr_SetString(PyExc_ValueError, "TTGT: malformed batch of blocks");
        return 1;
    }
    p->nbb = (int)PyTuple_GET_SIZE(t);
    for (int b = 0; b < p->nbb; ++b) {
        long long e, st, ot;
        int lab;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(t, b), "LLiL", &e, &st, &lab, &ot)) return 1;
        p->bbext[b] = e;
        p->bbsrc[b] = st;
        p->bboth[b] = ot;
        p->bblab[b] = lab;
    }
    return 0;
}

static int read_nest(PyObject *t, Nest *n) {
    PyObject *ext, *src;
    if (!PyArg_ParseTuple(t, "iOO", &n->nout, &ext, &src)) return -1;
    int count;
    if (read_intps(ext, n->ext, MAXL, &n->nl, "nest extents") ||
        read_intps(src, n->st[0], MAXL, &count, "nest strides"))
        return -1;
    return 0;
}

/* A StreamNest from extents and M's, V's and D's byte strides (V's 0 where `sv` is NULL). */
static int read_stream_nest(PyObject *ext, PyObject *sm, PyObject *sv, PyObject *sd,
                            StreamNest *n) {
    npy_intp tmp[MAXL];
    int count, nl;
    if (read_intps(ext, tmp, STREAM_MAXL, &nl, "stream extents")) return -1;
    n->nl = nl, n->own = 0;
    for (int l = 0; l < nl; ++l) n->ext[l] = tmp[l], n->sv[l] = 0;
    int64_t *dst[3] = {n->sm, n->sv, n->sd};
    PyObject *src[3] = {sm, sv, sd};
    for (int r = 0; r < 3; ++r) {
        if (!src[r]) continue;
        if (read_intps(src[r], tmp, STREAM_MAXL, &count, "stream strides")) return -1;
        if (count != nl) {
            PyErr_SetString(PyExc_ValueError, "stream: one stride per label and operand");
            return -1;
        }
        for (int l = 0; l < nl; ++l) dst[r][l] = tmp[l];
    }
    return 0;
}

/* (swap, V's packing nest, its bytes, mode, T's strides and bytes, extents, M, V and D byte
 * strides, then V's walk: extents, V's and the pack's byte strides, empty where V is packed
 * by the nest, whether the walk's buffer is permuted into the pack, and the walk's mode; then
 * the first label of the block M sums its own labels in first, 0 for none) of a STREAM step. */
static int read_stream(PyObject *t, Program *p) {
    PyObject *pack, *tst, *ext, *sm, *sv, *sd, *wext, *wsrc, *wdst;
    long long bytes, bytes_t;
    int count;
    int own;
    if (!PyArg_ParseTuple(t, "iOLiOLOOOOOOOiii", &p->swap, &pack, &bytes, &p->stream_mode, &tst,
                          &bytes_t, &ext, &sm, &sv, &sd, &wext, &wsrc, &wdst, &p->v_permute,
                          &p->v_mode, &own) ||
        read_nest(pack, &p->spack) || read_intps(tst, p->tst, MAXL, &count, "T strides") ||
        read_stream_nest(ext, sm, sv, sd, &p->stream) ||
        read_stream_nest(wext, wsrc, NULL, wdst, &p->vsum))
        return -1;
    if (p->stream_mode < 0 || p->stream_mode > 3 || (p->stream_mode >= 2 && count != p->nout)) {
        PyErr_SetString(PyExc_ValueError, "stream: mode 0..3, T's strides over D's labels");
        return -1;
    }
    p->bytes_v = bytes;
    p->bytes_t = bytes_t;
    p->v_reduce = p->vsum.nl > 0;
    p->stream.own = own;
    if (p->stream.nl < 1 || (p->v_reduce && !bytes) || (p->v_permute && !p->v_reduce) ||
        p->v_mode < 0 || p->v_mode > 2 || own < 0 || own >= p->stream.nl) {
        PyErr_SetString(PyExc_ValueError,
                        "stream: at least one label; V's walk needs a pack; own inside the nest");
        return -1;
    }
    return 0;
}

static PyObject *Program_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"type_num", "dtype", "kind", "shapes", "strides", "footprints",
                             "conj", "nout", "extents", "label_strides", "gemm", "ttgt", "flops",
                             "release_gil_flops", "empty_sum", "row_sums", "status", "stream",
                             "planes", NULL};
    int type_num, dtype, kind, nout, empty_sum, row_block;
    double flops, release;
    PyObject *shapes, *strides, *foots, *conj, *extents, *lstrides, *gemm, *ttgt, *status;
    PyObject *stream = Py_None, *planes = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iiiOOOOiOOOOddpiO|OO", kwlist, &type_num,
                                     &dtype, &kind, &shapes, &strides, &foots, &conj, &nout,
                                     &extents, &lstrides, &gemm, &ttgt, &flops, &release,
                                     &empty_sum, &row_block, &status, &stream, &planes))
        return NULL;
    if (dtype < 0 || dtype > 3) {
        PyErr_SetString(PyExc_ValueError, "dtype must be 0..3");
        return NULL;
    }
    if (kind < K_LOOP || kind > K_STREAM) {
        PyErr_SetString(PyExc_ValueError, "kind must be 0..3");
        return NULL;
    }
    if (kind != K_LOOP && kind != K_STREAM && g_gemm[dtype] == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "no BLAS GEMM registered for this datatype");
        return NULL;
    }
    Program *p = (Program *)type->tp_alloc(type, 0);
    if (!p) return NULL;
    p->type_num = type_num;
    p->dtype = dtype;
    p->item = (dtype == DT_F32) ? 4 : (dtype == DT_C128 ? 16 : 8);
    p->kind = kind;
    p->nout = nout;
    p->flops = flops;
    p->release_gil_flops = release;
    p->empty_sum = empty_sum;
    p->row_block = row_block < 0 ? 0 : row_block;
    npy_intp tmp[MAXL];
    int n;
    for (int r = 0; r < 4; ++r) {
        if (read_intps(PyTuple_GetItem(shapes, r), p->shape[r], MAXL, &p->ndim[r], "shape") ||
            read_intps(PyTuple_GetItem(strides, r), p->strides[r], MAXL, &n, "strides"))
            goto fail;
        PyObject *f = PyTuple_GetItem(foots, r);
        if (!f) goto fail;
        if (f == Py_None) {
            p->has_foot[r] = 0;
        } else {
            if (read_intps(f, tmp, 2, &n, "footprint")) goto fail;
            p->has_foot[r] = 1;
            p->lo[r] = tmp[0];
            p->hi[r] = tmp[1];
        }
        if (read_intps(PyTuple_GetItem(lstrides, r), p->st[r], MAXL, &n, "label strides"))
            goto fail;
    }
    if (read_intps(conj, tmp, 4, &n, "conj")) goto fail;
    for (int r = 0; r < 4; ++r) p->conj[r] = (int)tmp[r];
    if (read_intps(extents, p->ext, MAXL, &p->nl, "extents")) goto fail;
    p->c_as_d = 1;
    for (int l = 0; l < p->nout; ++l)
        if (p->ext[l] > 1 && p->st[2][l] != p->st[3][l]) p->c_as_d = 0;
    p->empty_d = 0;
    for (int l = 0; l < p->nout; ++l)
        if (p->ext[l] == 0) p->empty_d = 1;
    p->permute = kind == K_LOOP && !p->empty_d && permute_layout(p);
    if (planes != Py_None) { /* (mask, chunks): an elementwise nest run block by block */
        PyObject *chunks;
        int m = 0;
        if (!PyArg_ParseTuple(planes, "iO", &p->plane_mask, &chunks) ||
            read_intps(chunks, p->chunk, MAXL, &m, "chunks"))
            goto fail;
        int bad = kind != K_LOOP || p->nl != p->nout || m != p->nl || p->plane_mask < 0 ||
                  p->plane_mask > 3;
        for (int l = 0; l < m && !bad; ++l) bad = p->chunk[l] < 1;
        if (bad) {
            PyErr_SetString(PyExc_ValueError, "planes: an elementwise loop nest's blocks");
            goto fail;
        }
    }
    if (kind == K_TTGT) {
        PyObject *na, *nbk, *tst;
        long long ba, bb, bt, blk, unit, bgemms = 1;
        PyObject *bbatch;
        if (!PyArg_ParseTuple(ttgt, "OOOLLLiiLLiiO|L", &na, &nbk, &tst, &ba, &bb, &bt,
                              &p->d_direct, &p->blocked, &blk, &unit, &p->block_axis,
                              &p->block_store, &bbatch, &bgemms) ||
            read_block_batch(bbatch, p) ||
            read_nest(na, &p->pack_a) || read_nest(nbk, &p->pack_b) ||
            read_intps(tst, p->tst, MAXL, &n, "T strides"))
            goto fail;
        p->bytes_a = ba;
        p->bytes_b = bb;
        p->bytes_t = bt;
        p->block = blk;
        p->block_unit = unit;
        p->block_gemms = bgemms;
        int bad_batch = (p->nbb || bgemms > 1) && p->block_store < 0;
        for (int b = 0; b < p->nbb && !bad_batch; ++b)
            bad_batch = p->bbext[b] < 1 || p->bboth[b] < 0 || p->bblab[b] < 0
                        || p->bblab[b] >= p->nout
                        || p->ext[p->bblab[b]] != p->bbext[b] || p->bblab[b] == p->block_store;
        if (p->blocked > 1 || (p->blocked >= 0 && (blk < 1 || unit < 1)) || bad_batch
            || bgemms < 1 || bt % bgemms
            || p->block_store >= p->nout || (p->block_store >= 0 && p->blocked < 0)) {
            PyErr_SetString(PyExc_ValueError, "TTGT: malformed blocks");
            goto fail;
        }
    }
    if (kind == K_STREAM && read_stream(stream, p)) goto fail;
    if (kind != K_LOOP && kind != K_STREAM) {
        PyObject *bext, *bsa, *bsb, *bsd;
        long long m, nn, k, lda, ldb, ldd;
        if (!PyArg_ParseTuple(gemm, "OOOOiiiLLLLLLi", &bext, &bsa, &bsb, &bsd, &p->swap, &p->ta,
                              &p->tb, &m, &nn, &k, &lda, &ldb, &ldd, &p->nsum))
            goto fail;
        if (read_intps(bext, p->bext, MAXL, &p->nb, "batch extents") ||
            read_intps(bsa, p->bst[0], MAXL, &n, "batch strides") ||
            read_intps(bsb, p->bst[1], MAXL, &n, "batch strides") ||
            read_intps(bsd, p->bst[2], MAXL, &n, "batch strides"))
            goto fail;
        p->m = m;
        p->n = nn;
        p->k = k;
        p->lda = lda;
        p->ldb = ldb;
        p->ldd = ldd;
        if (kind == K_TTGT && p->blocked >= 0) { /* each block: rows (columns) of T, a box of
                                                    * its labels */
            const Nest *tn = p->blocked ? &p->pack_b : &p->pack_a;
            const int thick_left = (p->blocked == 1) == (p->swap != 0);
            const int ax = p->block_axis;
            npy_intp gemms = 1, listed = 1;
            for (int b = 0; b < p->nb; ++b) gemms *= p->bext[b];
            for (int b = 0; b < p->nbb; ++b) listed *= p->bbext[b];
            const int inner = p->block_gemms > 1; /* the batch inside each block */
            if ((inner && (p->nb != 1 || p->block_gemms != gemms))
                || (!inner && p->nb && (!p->nbb || listed % gemms)) || ax < 0 || ax >= tn->nout
                || tn->ext[ax] * p->block_unit * (inner ? listed : listed / gemms)
                   != (thick_left ? m : nn)
                || (p->block_store >= 0 && p->ext[p->block_store] != tn->ext[ax])
                || (thick_left ? p->ta : p->tb) == CONJ_TRANS) {
                PyErr_SetString(PyExc_ValueError, "TTGT: blocks that are not rows of T");
                goto fail;
            }
        }
        if (p->nsum < 0 || p->nsum > p->nb || (p->nsum && (kind != K_GEMM || p->ta == CONJ_TRANS
                                                         || p->tb == CONJ_TRANS))) {
            PyErr_SetString(PyExc_ValueError, "summed labels: a GEMM step on unconjugated views");
            goto fail;
        }
        if (p->nsum) { /* the epilogue's store reads the sum where D lies */
            summed_template(p);
            for (int l = 0; l < p->nout; ++l) p->tst[l] = p->st[3][l];
        } else if ((kind == K_GEMM || kind == K_TTGT) && p->nb) { /* a batch: shared out
                                                                     * like summed GEMMs' */
            summed_template(p);
        }
    }
    p->vcall = Program_call;
    p->status_type = (PyObject *)Py_TYPE(status);
    Py_INCREF(p->status_type);
    p->status_dict = PyObject_GetAttrString(status, "__dict__");
    if (!p->status_dict || !PyDict_Check(p->status_dict)) goto fail;
    return (PyObject *)p;
fail:
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "malformed program");
    Py_DECREF(p);
    return NULL;
}

static void Program_dealloc(PyObject *self) {
    Program *p = (Program *)self;
    Py_XDECREF(p->status_type);
    Py_XDECREF(p->status_dict);
    Py_TYPE(self)->tp_free(self);
}

static PyTypeObject ProgramType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pytapp._cexec.Program",
    .tp_basicsize = sizeof(Program),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A lowered product: call it with (alpha, A, B, beta, C, D).",
    .tp_new = Program_new,
    .tp_dealloc = Program_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Program, vcall),
};


/* ------------------------------------------------------------------ Chain */

/* A network's pairwise steps for one layout of its inputs: step k reads slots a[k] and b[k]
 * (-1: the scalar one) and writes slot ninputs + k. Each step runs its Program when it has one
 * and the Program takes the operands; otherwise the step's plan.execute runs it in Python.
 * Intermediates live in the chain's buffers unless another call is using them. A chain built
 * with takes_out writes the result into the caller's array (its last operand; the last step's
 * plan and program were made for that array's layout) and returns it. */
typedef struct {
    PyObject_HEAD int nsteps, ninputs, type_num;
    int *a, *b, *ndim;
    npy_intp (*shape)[MAXL];
    PyObject *programs; /* tuple: Program or None per step */
    PyObject *plans;    /* tuple: the step's TensorProduct */
    PyObject *buffers;  /* tuple: an ndarray per step (the last is unused) */
    PyObject *one;      /* 0-d array holding one */
    int nperm;          /* > 0: the result is the last buffer viewed with these axes */
    npy_intp perm[MAXL], iperm[MAXL]; /* iperm: the result's axes in the last step's order */
    int takes_out;      /* 1: the last operand is the caller's out, the last step's D */
    int busy;
    vectorcallfunc vcall;
} Chain;

static PyObject *g_one = NULL, *g_zero = NULL, *g_execute = NULL, *g_destroyed = NULL;

static PyObject *Chain_call(PyObject *self_obj, PyObject *const *args, size_t nargsf,
                            PyObject *kwnames) {
    Chain *ch = (Chain *)self_obj;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != ch->ninputs + ch->takes_out || (kwnames && PyTuple_GET_SIZE(kwnames))) {
        PyErr_Format(PyExc_TypeError, "this chain takes %d operands%s positionally",
                     ch->ninputs, ch->takes_out ? " and out" : "");
        return NULL;
    }
    PyObject *out = ch->takes_out ? args[ch->ninputs] : NULL;
    if (out && !PyArray_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "out must be an ndarray");
        return NULL;
    }
    int shared = !ch->busy;
    if (shared) ch->busy = 1;
    PyObject *local[64];
    PyObject **slots = ch->ninputs + ch->nsteps <= 64
                           ? local
                           : PyMem_Malloc(sizeof(PyObject *) * (ch->ninputs + ch->nsteps));
    PyObject *result = NULL;
    int made = 0; /* intermediates owned by slots[ninputs .. ninputs + made) */
    if (!slots) {
        PyErr_NoMemory();
        goto done;
    }
    for (int i = 0; i < ch->ninputs; ++i) slots[i] = args[i];
    for (int k = 0; k < ch->nsteps; ++k) {
        int last = k == ch->nsteps - 1;
        PyObject *d;
        if (shared && !last) {
            d = PyTuple_GET_ITEM(ch->buffers, k);
            Py_INCREF(d);
        } else if (last && out) { /* out seen in the last step's order of labels */
            if (ch->nperm > 0) {
                PyArray_Dims axes = {ch->iperm, ch->nperm};
                d = PyArray_Transpose((PyArrayObject *)out, &axes);
                if (!d) goto done;
            } else {
                d = out;
                Py_INCREF(d);
            }
        } else {
            d = PyArray_EMPTY(ch->ndim[k], ch->shape[k], ch->type_num, 0);
            if (!d) goto done;
        }
        slots[ch->ninputs + k] = d;
        made = k + 1;
        PyObject *x = slots[ch->a[k]];
        PyObject *y = ch->b[k] < 0 ? ch->one : slots[ch->b[k]];
        PyObject *prog = PyTuple_GET_ITEM(ch->programs, k);
        int r = 1;
        if (prog != Py_None) {
            r = program_run((Program *)prog, g_one, x, y, g_zero, Py_None, d, NULL);
            if (r < 0) goto done;
        }
        if (r > 0) { /* the plan binds these operands itself */
            PyObject *plan = PyTuple_GET_ITEM(ch->plans, k);
            PyObject *gone = PyObject_GetAttr(plan, g_destroyed);
            if (!gone) goto done;
            int is_gone = PyObject_IsTrue(gone);
            Py_DECREF(gone);
            if (is_gone) { /* a cache destroyed it: the caller takes the general path */
                result = Py_None;
                Py_INCREF(result);
                goto done;
            }
            PyObject *st = PyObject_CallMethodObjArgs(plan, g_execute, g_one, x, y, g_zero,
                                                      Py_None, d, NULL);
            if (!st) goto done;
            Py_DECREF(st);
        }
    }
    result = slots[ch->ninputs + ch->nsteps - 1];
    if (out) {
        result = out;
        Py_INCREF(result);
    } else if (ch->nperm > 0) { /* the last step wrote its natural layout: the result is a view */
        PyArray_Dims axes = {ch->perm, ch->nperm};
        result = PyArray_Transpose((PyArrayObject *)result, &axes);
    } else {
        Py_INCREF(result);
    }
done:
    if (slots) {
        for (int k = 0; k < made; ++k) Py_DECREF(slots[ch->ninputs + k]);
        if (slots != local) PyMem_Free(slots);
    }
    if (shared) ch->busy = 0;
    return result;
}

static PyObject *Chain_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"ninputs", "a", "b", "shapes", "type_num", "programs", "plans",
                             "buffers", "one", "perm", "takes_out", NULL};
    int ninputs, type_num, takes_out = 0;
    PyObject *a, *b, *shapes, *programs, *plans, *buffers, *one, *perm = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iOOOiO!O!O!O|Op", kwlist, &ninputs, &a, &b,
                                     &shapes, &type_num, &PyTuple_Type, &programs, &PyTuple_Type,
                                     &plans, &PyTuple_Type, &buffers, &one, &perm, &takes_out))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(programs);
    if (n < 1 || PyTuple_GET_SIZE(plans) != n || PyTuple_GET_SIZE(buffers) != n) {
        PyErr_SetString(PyExc_ValueError, "a chain needs one program, plan and buffer per step");
        return NULL;
    }
    Chain *ch = (Chain *)type->tp_alloc(type, 0);
    if (!ch) return NULL;
    ch->vcall = Chain_call;
    ch->nsteps = (int)n;
    ch->ninputs = ninputs;
    ch->type_num = type_num;
    ch->a = PyMem_Calloc(n, sizeof(int));
    ch->b = PyMem_Calloc(n, sizeof(int));
    ch->ndim = PyMem_Calloc(n, sizeof(int));
    ch->shape = PyMem_Calloc(n, sizeof(*ch->shape));
    if (!ch->a || !ch->b || !ch->ndim || !ch->shape) {
        PyErr_NoMemory();
        goto fail;
    }
    npy_intp *tmp = PyMem_Calloc(n, sizeof(npy_intp));
    int count_a = -1, count_b = -1;
    if (!tmp) {
        PyErr_NoMemory();
        goto fail;
    }
    if (!read_intps(a, tmp, (int)n, &count_a, "a"))
        for (int k = 0; k < n; ++k) ch->a[k] = (int)tmp[k];
    if (!PyErr_Occurred() && !read_intps(b, tmp, (int)n, &count_b, "b"))
        for (int k = 0; k < n; ++k) ch->b[k] = (int)tmp[k];
    PyMem_Free(tmp);
    if (count_a != n || count_b != n) goto fail;
    for (int k = 0; k < n; ++k) {
        PyObject *sh = PySequence_GetItem(shapes, k);
        if (!sh) goto fail;
        int bad = read_intps(sh, ch->shape[k], MAXL, &ch->ndim[k], "shape");
        Py_DECREF(sh);
        if (bad) goto fail;
        PyObject *prog = PyTuple_GET_ITEM(programs, k);
        if (prog != Py_None && !PyObject_TypeCheck(prog, &ProgramType)) {
            PyErr_SetString(PyExc_TypeError, "programs must be Program or None");
            goto fail;
        }
        int hi = ninputs + k;
        if (ch->a[k] < 0 || ch->a[k] >= hi || ch->b[k] >= hi) {
            PyErr_SetString(PyExc_ValueError, "a step reads a slot not yet written");
            goto fail;
        }
    }
    ch->nperm = 0;
    if (perm != Py_None) {
        int count = 0;
        if (read_intps(perm, ch->perm, MAXL, &count, "perm")) goto fail;
        if (count != ch->ndim[n - 1]) {
            PyErr_SetString(PyExc_ValueError, "perm must name every axis of the result");
            goto fail;
        }
        ch->nperm = count;
        int seen[MAXL] = {0};
        for (int i = 0; i < count; ++i) {
            if (ch->perm[i] < 0 || ch->perm[i] >= count || seen[ch->perm[i]]++) {
                PyErr_SetString(PyExc_ValueError, "perm must be a permutation of the axes");
                goto fail;
            }
            ch->iperm[ch->perm[i]] = i;
        }
    }
    ch->takes_out = takes_out;
    Py_INCREF(programs);
    ch->programs = programs;
    Py_INCREF(plans);
    ch->plans = plans;
    Py_INCREF(buffers);
    ch->buffers = buffers;
    Py_INCREF(one);
    ch->one = one;
    return (PyObject *)ch;
fail:
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "malformed chain");
    Py_DECREF(ch);
    return NULL;
}

static void Chain_dealloc(PyObject *self) {
    Chain *ch = (Chain *)self;
    PyMem_Free(ch->a);
    PyMem_Free(ch->b);
    PyMem_Free(ch->ndim);
    PyMem_Free(ch->shape);
    Py_XDECREF(ch->programs);
    Py_XDECREF(ch->plans);
    Py_XDECREF(ch->buffers);
    Py_XDECREF(ch->one);
    Py_TYPE(self)->tp_free(self);
}

static PyTypeObject ChainType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pytapp._cexec.Chain",
    .tp_basicsize = sizeof(Chain),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A network's steps for one input layout: call it with the operands.",
    .tp_new = Chain_new,
    .tp_dealloc = Chain_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Chain, vcall),
};

/* ------------------------------------------------------------------ permuted copies */



/* float16 <-> float32 conversion with the F16C instructions (chosen at run time; NumPy
 * converts one element at a time, 2-4 ns each). Rounding to nearest even, as NumPy does. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
__attribute__((target("avx,f16c"))) static void half_to_float(float *d, const uint16_t *s,
                                                               npy_intp n) {
    npy_intp i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    if (i < n) {
        uint16_t in[8] = {0};
        float out[8];
        memcpy(in, s + i, (size_t)(n - i) * sizeof(uint16_t));
        _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)in)));
        memcpy(d + i, out, (size_t)(n - i) * sizeof(float));
    }
}
__attribute__((target("avx,f16c"))) static void float_to_half(uint16_t *d, const float *s,
                                                               npy_intp n) {
    npy_intp i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(s + i),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (i < n) {
        float in[8] = {0};
        uint16_t out[8];
        memcpy(in, s + i, (size_t)(n - i) * sizeof(float));
        _mm_storeu_si128((__m128i *)out,
                         _mm256_cvtps_ph(_mm256_loadu_ps(in),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        memcpy(d + i, out, (size_t)(n - i) * sizeof(uint16_t));
    }
}
static int f16c_available(void) {
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
    }
    return known;
}
#else
static void half_to_float(float *d, const uint16_t *s, npy_intp n) { (void)d, (void)s, (void)n; }
static void float_to_half(uint16_t *d, const float *s, npy_intp n) { (void)d, (void)s, (void)n; }
static int f16c_available(void) { return 0; }
#endif

/* A float's BF16 bits, rounded to nearest even as ml_dtypes does; a NaN stays a (quiet) NaN
 * of its sign. */
static inline uint16_t float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline float bf16_to_float(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
/* n floats to BF16: eight at a time with AVX2 integer operations where the CPU has them (the
 * scalar loop does not vectorise: 0.9 ns a number in a permuted store, 0.4 for the copy). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2"))) static inline __m128i bf16_pack8(__m256 v) {
    const __m256i u = _mm256_castps_si256(v), hi = _mm256_srli_epi32(u, 16);
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                                             _mm256_and_si256(hi, _mm256_set1_epi32(1)))),
        16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)),
                                         nan);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}
__attribute__((target("avx2"))) static void floats_to_bf16_avx2(uint16_t *d, const float *s,
                                                                 npy_intp n) {
    npy_intp i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i), bf16_pack8(_mm256_loadu_ps(s + i)));
    for (; i < n; ++i) d[i] = float_to_bf16(s[i]);
}
#endif
static void floats_to_bf16(uint16_t *d, const float *s, npy_intp n) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (tile_simd()) {
        floats_to_bf16_avx2(d, s, n);
        return;
    }
#endif
    for (npy_intp i = 0; i < n; ++i) d[i] = float_to_bf16(s[i]);
}

/* ------------------------------------------------------------------ converting stores */

/* The datatypes convert_copy reads and writes: F32, and F16 and BF16 (whose numbers it is given
 * by set_bfloat16: ml_dtypes' type number, fixed at run time). */
enum { CVT_F32 = 0, CVT_F16 = 1, CVT_BF16 = 2 };
static int g_bf16_type = -1;
/* Numbers converted per pass through convert_copy's small buffers. */
#define CVT_CHUNK 64

static int cvt_kind(PyArrayObject *a) {
    const int t = PyArray_TYPE(a);
    if (t == NPY_FLOAT) return CVT_F32;
    if (t == NPY_HALF) return CVT_F16;
    if (t == g_bf16_type && g_bf16_type >= 0 && PyArray_ITEMSIZE(a) == 2) return CVT_BF16;
    return -1;
}

/* n numbers of kind k, s bytes apart from p, into f as F32: at most CVT_CHUNK, any number
 * where s is the unit stride (those in loops of their own: they vectorise). */
static void cvt_load(float *f, const char *p, npy_intp s, npy_intp n, int k) {
    if (k == CVT_F32) {
        if (s == 4) memcpy(f, p, (size_t)n * 4);
        else
            for (npy_intp i = 0; i < n; ++i) f[i] = *(const float *)(p + i * s);
        return;
    }
    uint16_t h[CVT_CHUNK];
    const uint16_t *q = (const uint16_t *)p;
    if (s != 2) {
        for (npy_intp i = 0; i < n; ++i) h[i] = *(const uint16_t *)(p + i * s);
        q = h;
    }
    if (k == CVT_BF16)
        for (npy_intp i = 0; i < n; ++i) f[i] = bf16_to_float(q[i]);
    else
        half_to_float(f, q, n);
}
/* The n numbers of f, rounded to kind k, to p, s bytes apart (an F32 row at unit stride is
 * written by cvt_finish itself). */
static void cvt_store(char *p, npy_intp s, const float *f, npy_intp n, int k) {
    if (k == CVT_F32) {
        for (npy_intp i = 0; i < n; ++i) *(float *)(p + i * s) = f[i];
        return;
    }
    uint16_t h[CVT_CHUNK];
    uint16_t *q = s == 2 ? (uint16_t *)p : h;
    if (k == CVT_BF16)
        floats_to_bf16(q, f, n);
    else
        float_to_half(q, f, n);
    if (s != 2)
        for (npy_intp i = 0; i < n; ++i) *(uint16_t *)(p + i * s) = h[i];
}

/* What one convert_copy computes: d = alpha * x + beta * c, in F32, over nd axes (byte
 * strides; c absent when cp is NULL). */
typedef struct {
    int nd, kd, kx, kc, simd; /* simd: the CPU has AVX2 and F16C (cvt_finish8) */
    float alpha, beta;
    npy_intp ext[MAXL], sd[MAXL], sx[MAXL], sc[MAXL];
} Cvt;

/* cvt_finish over m rows of n numbers in AVX registers (row r at d + r * sd1, f + r * sf1 and
 * c + r * sc1 bytes), where dst (F16 or BF16) and c run along the rows; a row's last n % 8
 * numbers through masked loads. The scalar loops stored numbers one by one that the conversion
 * then loaded eight at a time, each such load waiting for its stores (a BF16 store with alpha:
 * 17.9 ms, 7.8 without); a call per row of 11 numbers made a 23 MB store 49 ms. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* The first n (< 8) numbers of s to d in pieces of 4, 2 and 1 (a loop became a memcpy call,
 * which cost a third of a store in rows of 6). */
static inline void copy_u16_tail(uint16_t *d, const uint16_t *s, npy_intp n) {
    npy_intp k = 0;
    if (n & 4) {
        memcpy(d, s, 8);
        k = 4;
    }
    if (n & 2) {
        memcpy(d + k, s + k, 4);
        k += 2;
    }
    if (n & 1) memcpy(d + k, s + k, 2);
}
__attribute__((target("avx2,f16c"))) static inline __m128i cvt_apply8(const Cvt *g, int has_c,
                                                                      __m256 v, __m256 w) {
    if (g->alpha != 1.0f) v = _mm256_mul_ps(v, _mm256_set1_ps(g->alpha));
    if (has_c) v = _mm256_add_ps(v, _mm256_mul_ps(w, _mm256_set1_ps(g->beta)));
    return g->kd == CVT_BF16 ? bf16_pack8(v)
                             : _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
__attribute__((target("avx2,f16c"))) static inline __m256 cvt_c8(int kc, const char *c) {
    if (kc == CVT_F32) return _mm256_loadu_ps((const float *)c);
    const __m128i h = _mm_loadu_si128((const __m128i *)c);
    return kc == CVT_BF16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                          : _mm256_cvtph_ps(h);
}
__attribute__((target("avx2,f16c"))) static void cvt_finish8(const Cvt *g, char *d,
                                                             npy_intp sd1, const char *f,
                                                             npy_intp sf1, const char *c,
                                                             npy_intp sc1, npy_intp n,
                                                             npy_intp m) {
    const int kc = g->kc, has_c = c != NULL;
    const npy_intp ic = kc == CVT_F32 ? 4 : 2, rest = n % 8;
    const __m256i mask =
        _mm256_cmpgt_epi32(_mm256_set1_epi32((int)rest), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (npy_intp r = 0; r < m; ++r, d += sd1, f += sf1, c = c ? c + sc1 : NULL) {
        const float *x = (const float *)f;
        npy_intp i = 0;
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i *)(d + 2 * i),
                             cvt_apply8(g, has_c, _mm256_loadu_ps(x + i),
                                        c ? cvt_c8(kc, c + ic * i) : _mm256_setzero_ps()));
        if (rest) {
            __m256 w = _mm256_setzero_ps();
            if (c && kc == CVT_F32) {
                w = _mm256_maskload_ps((const float *)c + i, mask);
            } else if (c) { /* pairs of numbers through a masked load, an odd last one blended */
                const uint16_t *q = (const uint16_t *)c + i;
                __m128i hc = _mm_maskload_epi32(
                    (const int *)q,
                    _mm_cmpgt_epi32(_mm_set1_epi32((int)(rest / 2)), _mm_setr_epi32(0, 1, 2, 3)));
                if (rest & 1)
                    hc = _mm_blendv_epi8(
                        hc, _mm_set1_epi16((short)q[rest - 1]),
                        _mm_cmpeq_epi16(_mm_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7),
                                        _mm_set1_epi16((short)(rest - 1))));
                w = kc == CVT_BF16 ? _mm256_castsi256_ps(_mm256_slli_epi32(
                                         _mm256_cvtepu16_epi32(hc), 16))
                                   : _mm256_cvtph_ps(hc);
            }
            uint16_t out[8];
            _mm_storeu_si128((__m128i *)out,
                             cvt_apply8(g, has_c, _mm256_maskload_ps(x + i, mask), w));
            copy_u16_tail((uint16_t *)d + i, out, rest);
        }
    }
}
#else
static void cvt_finish8(const Cvt *g, char *d, npy_intp sd1, const char *f, npy_intp sf1,
                        const char *c, npy_intp sc1, npy_intp n, npy_intp m) {
    (void)g, (void)d, (void)sd1, (void)f, (void)sf1, (void)c, (void)sc1, (void)n, (void)m;
} /* never called: g->simd is 0 */
#endif

/* Whether cvt_finish8 takes rows with these strides along them (dst's sd, c's sc). */
static int cvt_fast(const Cvt *g, npy_intp sd, const char *c, npy_intp sc) {
    return g->simd && g->kd != CVT_F32 && sd == (npy_intp)sizeof(uint16_t) &&
           (!c || sc == (g->kc == CVT_F32 ? 4 : 2));
}

/* d = alpha * f + beta * c for n numbers, f holding x's as F32 (read only): alpha * x first,
 * then beta * c added, as NumPy's epilogue computes them; rounded once, when stored. */
static void cvt_finish(const Cvt *g, char *d, npy_intp sd, const float *f, const char *c,
                       npy_intp sc, npy_intp n) {
    if (cvt_fast(g, sd, c, sc)) {
        cvt_finish8(g, d, 0, (const char *)f, 0, c, 0, n, 1);
        return;
    }
    /* an F32 dst along the row written where it lies (through a buffer and memcpy, the copy's
     * start-up cost was half of a permuted BF16 -> F32 copy in rows of 16) */
    const int direct = g->kd == CVT_F32 && sd == 4;
    for (npy_intp i = 0; i < n; i += CVT_CHUNK) {
        const npy_intp m = n - i < CVT_CHUNK ? n - i : CVT_CHUNK;
        float v[CVT_CHUNK], h[CVT_CHUNK];
        float *o = direct ? (float *)(d + i * sd) : v;
        if (c) {
            cvt_load(h, c + i * sc, sc, m, g->kc); /* (before o is written: C may be D) */
            for (npy_intp k = 0; k < m; ++k) o[k] = f[i + k] * g->alpha + h[k] * g->beta;
        } else {
            for (npy_intp k = 0; k < m; ++k) o[k] = f[i + k] * g->alpha;
        }
        if (!direct) cvt_store(d + i * sd, sd, v, m, g->kd);
    }
}

/* n numbers along one axis from the given offsets (strides sd, sx, sc): an F32 row read where
 * it lies, others converted in chunks. */
static void cvt_row(const Cvt *g, char *d, const char *x, const char *c, npy_intp n,
                    npy_intp sd, npy_intp sx, npy_intp sc) {
    if (g->kd == CVT_F32 && sd == 4 && sx == 2 && !c && g->alpha == 1.0f) {
        cvt_load((float *)d, x, sx, n, g->kx); /* a row widened where it lies (any length) */
        return;
    }
    if (g->kx == CVT_F32 && sx == 4) {
        cvt_finish(g, d, sd, (const float *)x, c, sc, n);
        return;
    }
    float f[CVT_CHUNK];
    for (npy_intp i0 = 0; i0 < n; i0 += CVT_CHUNK) {
        const npy_intp m = n - i0 < CVT_CHUNK ? n - i0 : CVT_CHUNK;
        cvt_load(f, x + i0 * sx, sx, m, g->kx);
        cvt_finish(g, d + i0 * sd, sd, f, c ? c + i0 * sc : NULL, sc, m);
    }
}

/* One point of a permuted convert_copy: the ea x eb plane of dst's fastest axis a and the
 * source's fastest b (strides: d's sda, sdb; x's sxa, sxb; c's sca, scb), in COPY_TILE x
 * COPY_TILE tiles, so that each source line is read once and used whole (a 2048^2 F32
 * transposition into BF16: 3.7 ns a number walking whole columns of 8, each line read twice).
 * A source running along b goes through 8x8 register transposes (t8_f32; an F16 or BF16 one
 * widened to F32 first) where the CPU has AVX2; the rest row by row (cvt_row, gathering). */
static void cvt_plane(const Cvt *g, char *d, const char *x, const char *c, npy_intp ea,
                      npy_intp eb, npy_intp sda, npy_intp sdb, npy_intp sxa, npy_intp sxb,
                      npy_intp sca, npy_intp scb) {
    const npy_intp ix = g->kx == CVT_F32 ? 4 : 2;
    const int simd = sxb == ix && tile_simd();
    for (npy_intp j0 = 0; j0 < eb; j0 += COPY_TILE) {
        const npy_intp j1 = j0 + COPY_TILE < eb ? j0 + COPY_TILE : eb;
        for (npy_intp i0 = 0; i0 < ea; i0 += COPY_TILE) {
            const npy_intp i1 = i0 + COPY_TILE < ea ? i0 + COPY_TILE : ea;
            if (simd && i1 - i0 == COPY_TILE && j1 - j0 == COPY_TILE) {
                float f[COPY_TILE][COPY_TILE]; /* f[j][i]: x's element (i0 + i, j0 + j) */
                const char *s = x + i0 * sxa + j0 * sxb;
                npy_intp ss = sxa;
                float w[COPY_TILE][COPY_TILE]; /* a 16-bit x widened first, row by row */
                if (ix == 2) {
                    for (int i = 0; i < COPY_TILE; ++i)
                        cvt_load(w[i], x + (i0 + i) * sxa + j0 * sxb, 2, COPY_TILE, g->kx);
                    s = (const char *)w;
                    ss = sizeof w[0];
                }
                for (int i = 0; i < COPY_TILE; i += 8)
                    for (int j = 0; j < COPY_TILE; j += 8)
                        t8_f32(s + i * ss + j * 4, ss, (char *)&f[j][i], sizeof f[0]);
                if (cvt_fast(g, sda, c, sca))
                    cvt_finish8(g, d + j0 * sdb + i0 * sda, sdb, (const char *)f, sizeof f[0],
                                c ? c + j0 * scb + i0 * sca : NULL, scb, COPY_TILE, COPY_TILE);
                else
                    for (npy_intp j = 0; j < COPY_TILE; ++j)
                        cvt_finish(g, d + (j0 + j) * sdb + i0 * sda, sda, f[j],
                                   c ? c + (j0 + j) * scb + i0 * sca : NULL, sca, COPY_TILE);
                continue;
            }
            for (npy_intp j = j0; j < j1; ++j)
                cvt_row(g, d + j * sdb + i0 * sda, x + j * sxb + i0 * sxa,
                        c ? c + j * scb + i0 * sca : NULL, i1 - i0, sda, sxa, sca);
        }
    }
}

/* The whole copy: rows along dst's fastest axis a; where the source's fastest axis b is
 * another, through tiles of CVT_ROW x CVT_COLS numbers (a x b) so that each source line read
 * is used whole while it is in L1 (a permuted F32 -> BF16 store of 4.3M numbers: 12.4 ms by
 * NumPy's casting loop on two threads). */
static void cvt_run(const Cvt *g, char *d, const char *x, const char *c) {
    const int nd = g->nd;
    int a = 0, b = -1;
    for (int i = 1; i < nd; ++i)
        if (abs_stride(g->sd[i]) < abs_stride(g->sd[a])) a = i;
    for (int i = 0; i < nd; ++i)
        if (g->sx[i] && (b < 0 || abs_stride(g->sx[i]) < abs_stride(g->sx[b]))) b = i;
    const int tiles = b >= 0 && b != a && abs_stride(g->sx[a]) > 64;
    /* the other axes in the source's order (its largest stride first): the odometer reads the
     * source along its memory, which the hardware prefetches */
    int order[MAXL], no = 0;
    for (int i = 0; i < nd; ++i) {
        if (i == a || (tiles && i == b)) continue;
        int j = no++;
        for (; j > 0 && abs_stride(g->sx[order[j - 1]]) < abs_stride(g->sx[i]); --j)
            order[j] = order[j - 1];
        order[j] = i;
    }
    npy_intp idx[MAXL] = {0}, od = 0, ox = 0, oc = 0;
    const npy_intp ea = g->ext[a], sda = g->sd[a], sxa = g->sx[a], sca = g->sc[a];
    /* rows along a, F32 where they lie: the odometer's innermost axis in one cvt_finish8 call */
    const int rows = !tiles && no > 0 && g->kx == CVT_F32 && sxa == 4 && cvt_fast(g, sda, c, sca);
    no -= rows;
    for (;;) {
        if (rows) {
            const int l = order[no];
            cvt_finish8(g, d + od, g->sd[l], x + ox, g->sx[l], c ? c + oc : NULL, g->sc[l], ea,
                        g->ext[l]);
        } else if (!tiles) {
            cvt_row(g, d + od, x + ox, c ? c + oc : NULL, ea, sda, sxa, sca);
        } else {
            cvt_plane(g, d + od, x + ox, c ? c + oc : NULL, ea, g->ext[b], sda, g->sd[b], sxa,
                      g->sx[b], sca, g->sc[b]);
        }
            int q = no - 1;
        for (; q >= 0; --q) {
            const int l = order[q];
            od += g->sd[l];
            ox += g->sx[l];
            oc += g->sc[l];
            if (++idx[l] < g->ext[l]) break;
            od -= g->ext[l] * g->sd[l];
            ox -= g->ext[l] * g->sx[l];
            oc -= g->ext[l] * g->sc[l];
            idx[l] = 0;
        }
        if (q < 0) return;
    }
}

/* Axes in dst's order (largest stride first), each merged into the next where all three arrays
 * continue along it: rows as long as the layouts allow (the cvt_row call per row is what
 * short rows cost). */
static void cvt_merge(Cvt *g) {
    for (int i = 1; i < g->nd; ++i) /* insertion sort by dst's stride, largest first */
        for (int j = i; j > 0 && abs_stride(g->sd[j - 1]) < abs_stride(g->sd[j]); --j) {
            npy_intp *v[4] = {g->ext, g->sd, g->sx, g->sc};
            for (int k = 0; k < 4; ++k) {
                const npy_intp s = v[k][j];
                v[k][j] = v[k][j - 1];
                v[k][j - 1] = s;
            }
        }
    int n = 0;
    for (int i = 0; i < g->nd; ++i) {
        if (n > 0 && g->sd[n - 1] == g->sd[i] * g->ext[i] && g->sx[n - 1] == g->sx[i] * g->ext[i]
            && g->sc[n - 1] == g->sc[i] * g->ext[i]) {
            g->ext[n - 1] *= g->ext[i]; /* axis i continues axis n - 1: one axis, i's strides */
            g->sd[n - 1] = g->sd[i];
            g->sx[n - 1] = g->sx[i];
            g->sc[n - 1] = g->sc[i];
            continue;
        }
        g->ext[n] = g->ext[i];
        g->sd[n] = g->sd[i];
        g->sx[n] = g->sx[i];
        g->sc[n] = g->sc[i];
        ++n;
    }
    g->nd = n;
}

static PyObject *set_bfloat16(PyObject *self, PyObject *args) {
    if (!PyArg_ParseTuple(args, "i", &g_bf16_type)) return NULL;
    Py_RETURN_NONE;
}

/* convert_copy(dst, x, c, alpha, beta): dst[...] = alpha * x + beta * c in F32 arithmetic,
 * each of dst, x and c (None: absent) F32, F16 or BF16 and not all F32, of dst's shape (x and
 * c may repeat along axes: zero strides), native byte order and aligned; False (nothing
 * written) when that does not hold, when it is a plain copy (tiled_copy's), or F16 is involved
 * and the CPU lacks F16C. The caller has
 * ruled out dst overlapping x or c. */
static PyObject *convert_copy(PyObject *self, PyObject *args) {
    PyArrayObject *dst, *x;
    PyObject *c_o;
    double alpha, beta;
    if (!PyArg_ParseTuple(args, "O!O!Odd", &PyArray_Type, &dst, &PyArray_Type, &x, &c_o, &alpha,
                          &beta))
        return NULL;
    PyArrayObject *c = NULL;
    if (c_o != Py_None) {
        if (!PyArray_Check(c_o)) Py_RETURN_FALSE;
        c = (PyArrayObject *)c_o;
    }
    Cvt g;
    g.kd = cvt_kind(dst);
    g.kx = cvt_kind(x);
    g.kc = c ? cvt_kind(c) : CVT_F32;
    g.alpha = (float)alpha;
    g.beta = (float)beta;
    g.simd = tile_simd() && f16c_available();
    const int nd0 = PyArray_NDIM(dst);
    PyArrayObject *all[3] = {dst, x, c};
    if (g.kd < 0 || g.kx < 0 || g.kc < 0 || (g.kd | g.kx | g.kc) == CVT_F32 ||
        ((g.kd == CVT_F16 || g.kx == CVT_F16 || g.kc == CVT_F16) && !f16c_available()) ||
        (g.kd == g.kx && !c && alpha == 1.0) || !PyArray_ISWRITEABLE(dst))
        Py_RETURN_FALSE;
    for (int k = 0; k < 3; ++k) {
        if (!all[k]) continue;
        if (PyArray_NDIM(all[k]) != nd0 || !PyArray_ISNOTSWAPPED(all[k]) ||
            !PyArray_ISALIGNED(all[k]))
            Py_RETURN_FALSE;
        for (int i = 0; i < nd0; ++i)
            if (PyArray_DIM(all[k], i) != PyArray_DIM(dst, i)) Py_RETURN_FALSE;
    }
    if (PyArray_SIZE(dst) == 0) Py_RETURN_TRUE;
    g.nd = 0;
    for (int i = 0; i < nd0; ++i) {
        if (PyArray_DIM(dst, i) == 1) continue;
        if (g.nd == MAXL) Py_RETURN_FALSE;
        g.ext[g.nd] = PyArray_DIM(dst, i);
        g.sd[g.nd] = PyArray_STRIDE(dst, i);
        g.sx[g.nd] = PyArray_STRIDE(x, i);
        g.sc[g.nd] = c ? PyArray_STRIDE(c, i) : 0;
        ++g.nd;
    }
    cvt_merge(&g);
    if (g.nd == 0) { /* one number */
        g.nd = 1;
        g.ext[0] = 1;
        g.sd[0] = g.sx[0] = g.sc[0] = 0;
    }
    char *pd = PyArray_BYTES(dst);
    const char *px = PyArray_BYTES(x), *pc = c ? PyArray_BYTES(c) : NULL;
    Py_BEGIN_ALLOW_THREADS;
    cvt_run(&g, pd, px, pc);
    Py_END_ALLOW_THREADS;
    Py_RETURN_TRUE;
}

/* ------------------------------------------------------------------ low-precision sums */

/* Numbers of a row summed at a time into a low_sum accumulator (kept in L1). */
#define LOW_SUM_ROW 512

/* low_sum's loop nest: x's axes of extent 2 or more, x's and out's byte strides (out's 0 along
 * the summed axes), the innermost last. */
typedef struct {
    int nd, kx; /* axes (the kept ones, then the summed ones, then the innermost); x's kind */
    npy_intp ext[MAXL], sx[MAXL], so[MAXL];
} LowSum;

/* An odometer step over axes [lo, hi) of `g`: 1 when the last index wrapped. */
static int low_step(const LowSum *g, int lo, int hi, npy_intp *idx, const char **px, char **po) {
    for (int l = hi - 1; l >= lo; --l) {
        *px += g->sx[l];
        if (po) *po += g->so[l];
        if (++idx[l] < g->ext[l]) return 0;
        *px -= g->ext[l] * g->sx[l];
        if (po) *po -= g->ext[l] * g->so[l];
        idx[l] = 0;
    }
    return 1;
}

/* The n numbers of a unit-stride run of kind k (F32 or BF16) summed in F32: eight running sums
 * the compiler vectorises. */
static inline float low_dot(const char *p, npy_intp n, int k) {
    float acc[8] = {0};
    npy_intp i = 0;
    if (k == CVT_BF16) {
        const uint16_t *q = (const uint16_t *)p;
        for (; i + 8 <= n; i += 8)
            for (int j = 0; j < 8; ++j) acc[j] += bf16_to_float(q[i + j]);
        for (; i < n; ++i) acc[i & 7] += bf16_to_float(q[i]);
    } else {
        const float *q = (const float *)p;
        for (; i + 8 <= n; i += 8)
            for (int j = 0; j < 8; ++j) acc[j] += q[i + j];
        for (; i < n; ++i) acc[i & 7] += q[i];
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* The sums of one outer index (the axes before `kept_end` fixed): the innermost axis summed
 * (dots, eight running sums) or kept (rows of out added to, LOW_SUM_ROW at a time). */
static void low_sum_run(const LowSum *g, int kept_end, const char *x, char *out) {
    const int last = g->nd - 1;
    const npy_intp n = g->ext[last], sx = g->sx[last];
    npy_intp idx[MAXL] = {0};
    float buf[CVT_CHUNK];
    if (g->so[last] == 0) { /* the innermost axis is summed: one number of out */
        float acc[8] = {0};
        const char *px = x;
        do {
            for (npy_intp i0 = 0; i0 < n; i0 += CVT_CHUNK) {
                const npy_intp m = n - i0 < CVT_CHUNK ? n - i0 : CVT_CHUNK;
                cvt_load(buf, px + i0 * sx, sx, m, g->kx);
                npy_intp i = 0;
                for (; i + 8 <= m; i += 8)
                    for (int k = 0; k < 8; ++k) acc[k] += buf[i + k];
                for (; i < m; ++i) acc[i & 7] += buf[i];
            }
        } while (!low_step(g, kept_end, last, idx, &px, NULL));
        *(float *)out = ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
                        ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        return;
    }
    float row[LOW_SUM_ROW];
    const npy_intp so = g->so[last];
    for (npy_intp r0 = 0; r0 < n; r0 += LOW_SUM_ROW) { /* the innermost axis is kept */
        const npy_intp rn = n - r0 < LOW_SUM_ROW ? n - r0 : LOW_SUM_ROW;
        memset(row, 0, sizeof(float) * (size_t)rn);
        const char *px = x + r0 * sx;
        do {
            for (npy_intp i0 = 0; i0 < rn; i0 += CVT_CHUNK) {
                const npy_intp m = rn - i0 < CVT_CHUNK ? rn - i0 : CVT_CHUNK;
                cvt_load(buf, px + i0 * sx, sx, m, g->kx);
                for (npy_intp i = 0; i < m; ++i) row[i0 + i] += buf[i];
            }
        } while (!low_step(g, kept_end, last, idx, &px, NULL));
        char *po = out + r0 * so;
        for (npy_intp i = 0; i < rn; ++i) *(float *)(po + i * so) = row[i];
    }
}

/* low_sum(out, x, axes) -> bool: out (F32, x's shape with the summed axes of extent 1) = the
 * sums of x (F16, BF16 or F32) over `axes`, in F32. The compiled loops convert each run of x
 * as they read it: NumPy sums ml_dtypes' BFloat16 through a cast per number (a 24.6 MB BF16
 * operand summed over its innermost axis of 27: 14.3 ms on one thread, 7.3 on two); False
 * (nothing written) where the arrays do not fit, or F16 and the CPU lacks F16C. */
static PyObject *low_sum(PyObject *self, PyObject *args) {
    PyArrayObject *out, *x;
    PyObject *axes;
    if (!PyArg_ParseTuple(args, "O!O!O", &PyArray_Type, &out, &PyArray_Type, &x, &axes))
        return NULL;
    LowSum g;
    g.kx = cvt_kind(x);
    const int nd0 = PyArray_NDIM(x);
    if (g.kx < 0 || (g.kx == CVT_F16 && !f16c_available()) || PyArray_TYPE(out) != NPY_FLOAT ||
        PyArray_NDIM(out) != nd0 || !PyArray_ISWRITEABLE(out) || !PyArray_ISNOTSWAPPED(x) ||
        !PyArray_ISALIGNED(x) || !PyArray_ISALIGNED(out) || nd0 > MAXL)
        Py_RETURN_FALSE;
    int summed[MAXL] = {0};
    PyObject *seq = PySequence_Fast(axes, "axes must be a sequence");
    if (!seq) return NULL;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); ++i) {
        const long a = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (a < 0 || a >= nd0) {
            Py_DECREF(seq);
            if (!PyErr_Occurred()) Py_RETURN_FALSE;
            return NULL;
        }
        summed[a] = 1;
    }
    Py_DECREF(seq);
    for (int i = 0; i < nd0; ++i)
        if (PyArray_DIM(out, i) != (summed[i] ? 1 : PyArray_DIM(x, i))) Py_RETURN_FALSE;
    if (PyArray_SIZE(out) == 0) Py_RETURN_TRUE;
    /* kept axes first (out's largest strides outermost), then the summed ones (x's), the axis
     * x runs along fastest innermost */
    int kept[MAXL], sums[MAXL], nk = 0, ns = 0, inner = -1;
    for (int i = 0; i < nd0; ++i) {
        if (PyArray_DIM(x, i) < 2) continue;
        if (inner < 0 || abs_stride(PyArray_STRIDE(x, i)) < abs_stride(PyArray_STRIDE(x, inner)))
            inner = i;
    }
    /* axes that continue the innermost one's run in x and out (kept) or in x (summed) join
     * it: one longer row or dot */
    npy_intp in_ext = inner < 0 ? 1 : PyArray_DIM(x, inner);
    int joined[MAXL] = {0};
    for (int more = inner >= 0; more;) {
        more = 0;
        for (int i = 0; i < nd0; ++i) {
            if (i == inner || joined[i] || PyArray_DIM(x, i) < 2 || summed[i] != summed[inner])
                continue;
            if (PyArray_STRIDE(x, i) == in_ext * PyArray_STRIDE(x, inner) &&
                (summed[i] || PyArray_STRIDE(out, i) == in_ext * PyArray_STRIDE(out, inner))) {
                in_ext *= PyArray_DIM(x, i);
                joined[i] = more = 1;
            }
        }
    }
    for (int i = 0; i < nd0; ++i) {
        if (PyArray_DIM(x, i) < 2 || i == inner || joined[i]) continue;
        int *list = summed[i] ? sums : kept, *count = summed[i] ? &ns : &nk;
        const npy_intp key = abs_stride(summed[i] ? PyArray_STRIDE(x, i) : PyArray_STRIDE(out, i));
        int j = (*count)++;
        while (j > 0 && abs_stride(summed[i] ? PyArray_STRIDE(x, list[j - 1])
                                              : PyArray_STRIDE(out, list[j - 1])) < key) {
            list[j] = list[j - 1];
            --j;
        }
        list[j] = i;
    }
    g.nd = 0;
    for (int k = 0; k < nk + ns; ++k) {
        const int i = k < nk ? kept[k] : sums[k - nk];
        g.ext[g.nd] = PyArray_DIM(x, i);
        g.sx[g.nd] = PyArray_STRIDE(x, i);
        g.so[g.nd] = summed[i] ? 0 : PyArray_STRIDE(out, i);
        ++g.nd;
    }
    g.ext[g.nd] = in_ext;
    g.sx[g.nd] = inner < 0 ? 0 : PyArray_STRIDE(x, inner);
    g.so[g.nd] = inner < 0 || summed[inner] ? 0 : PyArray_STRIDE(out, inner);
    ++g.nd;
    /* out's stride 0 marks a summed innermost axis: a kept one must not have it (an out that
     * repeats its numbers along that axis) */
    if (inner >= 0 && !summed[inner] && g.so[g.nd - 1] == 0) Py_RETURN_FALSE;
    const char *px = PyArray_BYTES(x);
    char *po = PyArray_BYTES(out);
    /* dots over the innermost axis alone, unit stride (F32, BF16): the last kept axis walked
     * here, a dot per number of out, no odometer step between them */
    const int last = g.nd - 1;
    const int dots = nk >= 1 && ns == 0 && g.so[last] == 0 && g.kx != CVT_F16 &&
                     g.sx[last] == (g.kx == CVT_F32 ? 4 : 2);
    Py_BEGIN_ALLOW_THREADS;
    npy_intp idx[MAXL] = {0};
    if (dots) {
        const npy_intp e = g.ext[nk - 1], sxr = g.sx[nk - 1], sor = g.so[nk - 1], n = g.ext[last];
        do {
            for (npy_intp r = 0; r < e; ++r)
                *(float *)(po + r * sor) = low_dot(px + r * sxr, n, g.kx);
        } while (!low_step(&g, 0, nk - 1, idx, &px, &po));
    } else {
        do {
            low_sum_run(&g, nk, px, po);
        } while (!low_step(&g, 0, nk, idx, &px, &po));
    }
    Py_END_ALLOW_THREADS;
    Py_RETURN_TRUE;
}

/* dst = src over nd axes (no axis of extent < 2; at most MAXL) where both run along the same
 * axis `a` (unit strides) for short runs: NumPy's loop pays a call per run, which is what such
 * a copy costs (kvpujbh's 28 MB of BF16 in runs of 11 numbers: 15.9 ms, 10.6 so on one
 * thread). The other axes go in dst's order (it is written along its memory), those that
 * continue a run on both sides merged into it (nest_merged); each run is a short loop or a
 * memcpy (RUN_COPY_LOOP). */
#define RUN_LOOP(T, y, x, e)                                                                      \
    for (npy_intp i_ = 0; i_ < (e); ++i_) ((T *)(y))[i_] = ((const T *)(x))[i_]
static void run_copy(int nd, const npy_intp *ext, const npy_intp *ds, const npy_intp *ss, int a,
                     npy_intp item, char *dst, const char *src) {
    Nest n, m;
    int order[NPY_MAXDIMS], k = 0;
    for (int i = 0; i < nd; ++i)
        if (i != a) order[k++] = i;
    for (int i = 1; i < k; ++i) /* largest dst stride first (insertion) */
        for (int j = i; j > 0 && abs_stride(ds[order[j - 1]]) < abs_stride(ds[order[j]]); --j) {
            const int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    order[k++] = a;
    n.nl = n.nout = k;
    for (int i = 0; i < k; ++i) {
        n.ext[i] = ext[order[i]];
        n.st[0][i] = ss[order[i]];
        n.st[1][i] = ds[order[i]];
    }
    nest_merged(&n, 2, &m);
    const int last = m.nout - 1;
    const npy_intp e = m.ext[last];
    npy_intp idx[MAXL] = {0}, o[2] = {0, 0};
    int done = 0;
    const size_t bytes = (size_t)(e * item);
    while (!done) { /* (runs of a few numbers as a loop: a memcpy call per run cost more) */
        char *y = dst + o[1];
        const char *x = src + o[0];
        if (e > RUN_COPY_LOOP) memcpy(y, x, bytes);
        else if (item == 2) RUN_LOOP(uint16_t, y, x, e);
        else if (item == 4) RUN_LOOP(uint32_t, y, x, e);
        else if (item == 8) RUN_LOOP(uint64_t, y, x, e);
        else memcpy(y, x, bytes);
        ODOMETER_STEP(&m, idx, 0, last, o, 2, done);
    }
}

/* tiled_copy(dst, src): dst[...] = src (same shape and dtype, aligned, 2-, 4- or 8-byte
 * elements; 16-byte ones copied through tiles measured no faster than NumPy's loop), through
 * tiles when dst's and src's fastest axes differ and NumPy's run along dst is long, run by run
 * when they are the same axis and the runs short (run_copy); False (nothing written)
 * otherwise. The caller has ruled out overlapping arrays. */
static PyObject *tiled_copy(PyObject *self, PyObject *args) {
    PyArrayObject *dst, *src;
    if (!PyArg_ParseTuple(args, "O!O!", &PyArray_Type, &dst, &PyArray_Type, &src)) return NULL;
    const int nd0 = PyArray_NDIM(dst);
    const npy_intp item = PyArray_ITEMSIZE(dst);
    if (nd0 != PyArray_NDIM(src) || !PyArray_EquivTypes(PyArray_DESCR(dst), PyArray_DESCR(src))
        || !PyArray_ISWRITEABLE(dst) || !PyArray_ISALIGNED(dst) || !PyArray_ISALIGNED(src)
        || (item != 2 && item != 4 && item != 8) || PyDataType_REFCHK(PyArray_DESCR(dst))
        || !PyArray_ISNOTSWAPPED(dst) || !PyArray_ISNOTSWAPPED(src))
        Py_RETURN_FALSE;
    npy_intp ext[NPY_MAXDIMS], ds[NPY_MAXDIMS], ss[NPY_MAXDIMS];
    int nd = 0;
    for (int i = 0; i < nd0; ++i) {
        const npy_intp e = PyArray_DIM(dst, i);
        if (e != PyArray_DIM(src, i)) Py_RETURN_FALSE;
        if (e == 0) Py_RETURN_TRUE;
        if (e == 1) continue;
        ext[nd] = e;
        ds[nd] = PyArray_STRIDE(dst, i);
        ss[nd] = PyArray_STRIDE(src, i);
        ++nd;
    }
    if (nd < 2) Py_RETURN_FALSE;
    int a = 0, b = 0;
    for (int i = 1; i < nd; ++i) {
        if (abs_stride(ds[i]) < abs_stride(ds[a])) a = i;
        if (abs_stride(ss[i]) < abs_stride(ss[b])) b = i;
    }
    if (a == b && ds[a] == item && ss[a] == item && nd <= MAXL) { /* runs along one axis */
        npy_intp run = ext[a];
        for (int i = 0; i < nd; ++i) /* (the run continues along an axis contiguous after it) */
            if (ds[i] == item * ext[a] && ss[i] == item * ext[a]) run *= ext[i];
        if (run * item >= RUN_COPY_BYTES) Py_RETURN_FALSE;
        char *d = PyArray_BYTES(dst);
        const char *x = PyArray_BYTES(src);
        Py_BEGIN_ALLOW_THREADS
        run_copy(nd, ext, ds, ss, a, item, d, x);
        Py_END_ALLOW_THREADS
        Py_RETURN_TRUE;
    }
    if (a == b || abs_stride(ds[a]) != item || abs_stride(ss[b]) != item
        || ext[a] < COPY_TILE / 2 || ext[b] < COPY_TILE / 2)
        Py_RETURN_FALSE;
    /* NumPy's loop walks dst's fastest axis, merged with the next ones where both arrays
     * allow: a run of fewer than COPY_MIN_RUN elements touches few enough source lines to find
     * them in L1 on the next pass, and tiles only add loop overhead (the cc suite's 48-element
     * runs: 2-13% slower through tiles; tt_matvec's 4096-element runs: 30% faster) */
    npy_intp run = ext[a];
    for (int cur = a, next = 0; next >= 0; ) {
        next = -1;
        for (int i = 0; i < nd; ++i)
            if (ds[i] == ds[cur] * ext[cur] && ss[i] == ss[cur] * ext[cur]) next = i;
        if (next >= 0) {
            run *= ext[next];
            cur = next;
        }
    }
    if (run < COPY_MIN_RUN && abs_stride(ss[a]) < COPY_FAR_STRIDE) {
        /* source lines NumPy's loop touches between two steps along the source's unit axis b:
         * dst's elements inside that step, each in a line of its own at worst */
        npy_intp total = item, inside = 1;
        for (int i = 0; i < nd; ++i) {
            total *= ext[i];
            if (abs_stride(ds[i]) < abs_stride(ds[b])) inside *= ext[i];
        }
        if (total <= COPY_REUSE_BYTES || inside * 64 <= COPY_REUSE_BYTES) Py_RETURN_FALSE;
    }
    char *d = PyArray_BYTES(dst);
    const char *x = PyArray_BYTES(src);
    Py_BEGIN_ALLOW_THREADS
    npy_intp bytes = item;
    for (int i = 0; i < nd; ++i) bytes *= ext[i];
    tiled_copy_item(item, nd, ext, ds, ss, a, b, d, x, bytes >= STREAM_COPY_MIN);
    Py_END_ALLOW_THREADS
    Py_RETURN_TRUE;
}

/* ------------------------------------------------------------------ blocked packing */

/* The BLAS's thread count (OpenBLAS: process-wide), where its setter and getter were found. A
 * section whose threads each call a one-thread BLAS sets it to 1 while any such section runs:
 * the first to enter saves the count, the last to leave restores it. */
typedef void (*set_threads_t)(int);
typedef int (*get_threads_t)(void);
/* OpenBLAS's gotoblas_pthread(n, fn, args, stride): fn(args + i * stride) for i < n, the first
 * on the calling thread, the others on the BLAS's own pool threads. OpenBLAS's idle threads
 * busy-wait for a while after each call: work handed to them starts at once, where threads of
 * our own would compete with them for the cores. */
typedef int (*pool_run_t)(int, void *, void *, int);
static set_threads_t g_set_threads = NULL;
static get_threads_t g_get_threads = NULL;
static pool_run_t g_pool_run = NULL;
/* Set on a thread while it runs a Python call of pool_map: work it hands out again runs on
 * that thread (the pool's threads are busy with the calls: waiting for one would deadlock). */
static _Thread_local int g_in_pool = 0;
static pthread_mutex_t g_single_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_single_users = 0, g_saved_threads = 1;

/* Enter a one-thread-BLAS section: the BLAS's thread count outside it (at least 1), 0 when the
 * count cannot be set (then do not leave). */
static int blas_single_enter(void) {
    if (!g_set_threads || !g_get_threads) return 0;
    pthread_mutex_lock(&g_single_lock);
    if (g_single_users++ == 0) {
        g_saved_threads = g_get_threads();
        if (g_saved_threads < 1) g_saved_threads = 1;
        if (g_saved_threads != 1) g_set_threads(1);
    }
    const int outside = g_saved_threads;
    pthread_mutex_unlock(&g_single_lock);
    return outside;
}

/* Workers that share out the `first` indices of a first label over the BLAS's pool: its thread
 * count where `big` work has a pool to run on (never from inside one of its tasks), at most one
 * per index; 1 otherwise. */
static int pool_workers(npy_intp first, int big) {
    int workers = 1;
    if (big && g_pool_run && g_get_threads && !g_in_pool && first > 1) workers = g_get_threads();
    if (workers > MAX_WORKERS) workers = MAX_WORKERS;
    if (workers > first) workers = (int)first;
    return workers < 1 ? 1 : workers;
}

/* Loop nests of at least this many iterations are shared out over the BLAS's pool along their
 * first label, one of D's (every element of D is then written by one worker, in the same order
 * of its summed labels as on one thread: the results do not depend on the split). An 786k-element
 * F32 outer product took 0.32 ms on one thread, where torch's two-thread multiply took 0.09. */
#define LOOP_SPLIT_MIN (1 << 16)

typedef struct {
    Program sub; /* the program with its first label cut to this worker's range */
    cval al, be;
    const char *A, *B, *C; /* A is TTGT's temporary T where the job stores */
    char *D;
    int kind; /* SPLIT_... */
} LoopJob;

/* What a LoopJob runs: the loop nest, TTGT's store of T into D, or D = beta C alone. */
enum { SPLIT_LOOP, SPLIT_STORE, SPLIT_SCALE };

static void split_part(const Program *p, int kind, cval al, cval be, const char *A,
                       const char *B, const char *C, char *D) {
    if (kind == SPLIT_SCALE) run_scale(p, be, C, D);
    else if (kind == SPLIT_STORE) run_store(p, al, be, A, C, D);
    else run_loop(p, al, be, A, B, C, D);
}

static void loop_task(void *arg) {
    LoopJob *j = (LoopJob *)arg;
    if (j->sub.ext[0] < 1) return;
    split_part(&j->sub, j->kind, j->al, j->be, j->A, j->B, j->C, j->D);
}

/* A loop nest, TTGT's store of T into D (T given as A) or D = beta C (`kind`: SPLIT_...), run
 * by `workers` along its first label, one of D's (each worker writes its own elements of D). */
static void run_split(const Program *p, int workers, int kind, cval al, cval be, const char *A,
                      const char *B, const char *C, char *D) {
    LoopJob *jobs = workers > 1 ? malloc((size_t)workers * sizeof(LoopJob)) : NULL;
    if (!jobs) {
        split_part(p, kind, al, be, A, B, C, D);
        return;
    }
    const npy_intp first = p->ext[0], sa = kind == SPLIT_STORE ? p->tst[0] : p->st[0][0];
    for (int w = 0; w < workers; ++w) {
        const npy_intp start = first * w / workers, stop = first * (w + 1) / workers;
        memcpy(&jobs[w].sub, p, sizeof(Program));
        jobs[w].sub.ext[0] = stop - start;
        jobs[w].al = al;
        jobs[w].be = be;
        jobs[w].A = A ? A + start * sa : NULL;
        jobs[w].B = kind != SPLIT_LOOP ? NULL : B + start * p->st[1][0];
        jobs[w].C = C ? C + start * p->st[2][0] : NULL;
        jobs[w].D = D + start * p->st[3][0];
        jobs[w].kind = kind;
    }
    g_pool_run(workers, (void *)loop_task, jobs, (int)sizeof(LoopJob));
    free(jobs);
}

/* A whole F64 dot (D a scalar, A and B one contiguous run each) of at least DOT_SPLIT_MIN terms
 * is shared out over the pool in chunks of DOT_CHUNK terms: each chunk's dot is kept apart and
 * the chunks are added in order afterwards, so the sum is the same on any number of workers.
 * blas's Python route (one np.dot, OpenBLAS's threaded dot) took 57 us for the 331,776 terms
 * of a coupled-cluster energy (ijab,ijab->), np.dot alone 31; on one core the loop nest took
 * 72. */
#define DOT_SPLIT_MIN (1 << 15)
#define DOT_CHUNK (1 << 13)

typedef struct {
    const double *a, *b;
    double *part;
    npy_intp n, c0, c1; /* terms in all; this worker's chunks */
} DotJob;

static void dot_task(void *arg) {
    const DotJob *j = (const DotJob *)arg;
    for (npy_intp c = j->c0; c < j->c1; ++c) {
        const npy_intp i0 = c * DOT_CHUNK, len = j->n - i0 < DOT_CHUNK ? j->n - i0 : DOT_CHUNK;
        j->part[c] = dot_f64(j->a + i0, j->b + i0, len);
    }
}

/* D = alpha A.B (+ beta C) for a whole F64 dot (see DOT_SPLIT_MIN): 1 when done. */
static int run_whole_dot(const Program *p, cval al, cval be, const char *A, const char *B,
                         const char *C, char *D) {
    if (p->dtype != DT_F64 || p->nout != 0 || p->nl != 1 || p->st[0][0] != 8 ||
        p->st[1][0] != 8 || p->ext[0] < DOT_SPLIT_MIN)
        return 0;
    const npy_intp n = p->ext[0], chunks = (n + DOT_CHUNK - 1) / DOT_CHUNK;
    double *part = malloc((size_t)chunks * sizeof(double));
    if (!part) return 0;
    DotJob jobs[MAX_WORKERS];
    const int workers = pool_workers(chunks, 1);
    for (int w = 0; w < workers; ++w) {
        jobs[w].a = (const double *)A, jobs[w].b = (const double *)B;
        jobs[w].part = part, jobs[w].n = n;
        jobs[w].c0 = chunks * w / workers, jobs[w].c1 = chunks * (w + 1) / workers;
    }
    if (workers > 1) g_pool_run(workers, (void *)dot_task, jobs, (int)sizeof(DotJob));
    else dot_task(jobs);
    double tot = 0;
    for (npy_intp c = 0; c < chunks; ++c) tot += part[c];
    free(part);
    double r = al.re * tot;
    if (C) r += be.re * *(const double *)C;
    *(double *)D = r;
    return 1;
}

static void run_loop_split(const Program *p, cval al, cval be, const char *A, const char *B,
                           const char *C, char *D) {
    if (run_whole_dot(p, al, be, A, B, C, D)) return;
    npy_intp iters = 1;
    for (int l = 0; l < p->nl; ++l) iters *= p->ext[l];
    run_split(p, pool_workers(p->nout > 0 ? p->ext[0] : 1, iters >= LOOP_SPLIT_MIN), SPLIT_LOOP,
              al, be, A, B, C, D);
}

/* Packs reading at least this many bytes are shared out over the BLAS's pool along the nest's
 * first label, the destination's outermost (each worker packs its own contiguous part of it),
 * or along another kept label (pack_cut). */
#define PACK_SPLIT_MIN (1 << 18)

typedef struct {
    int nd, a, b, stream;
    npy_intp item, ext[MAXL], ds[MAXL], ss[MAXL];
    char *dst;
    const char *src;
} CopyJob;

static void copy_task(void *arg) {
    const CopyJob *j = (const CopyJob *)arg;
    for (int l = 0; l < j->nd; ++l)
        if (j->ext[l] < 1) return;
    tiled_copy_item(j->item, j->nd, j->ext, j->ds, j->ss, j->a, j->b, j->dst, j->src, j->stream);
}

/* The copy a permute's loop nest is (see run_permute): its labels of extent 2 or more, D's
 * fastest (a) and A's (b); 0 where the layout is no such copy. */
static int permute_job(const Program *p, CopyJob *job) {
    if (p->nl != p->nout || p->nout < 2 || p->conj[0] || p->conj[1] || p->conj[3] || p->item < 4)
        return 0;
    job->nd = 0;
    job->item = p->item;
    for (int l = 0; l < p->nl; ++l) {
        if (p->st[1][l] != 0) return 0; /* B is one number */
        if (p->ext[l] == 1) continue;
        job->ext[job->nd] = p->ext[l], job->ds[job->nd] = p->st[3][l];
        job->ss[job->nd] = p->st[0][l];
        ++job->nd;
    }
    if (job->nd < 2) return 0;
    int a = 0, b = 0;
    for (int l = 1; l < job->nd; ++l) {
        if (abs_stride(job->ds[l]) < abs_stride(job->ds[a])) a = l;
        if (abs_stride(job->ss[l]) < abs_stride(job->ss[b])) b = l;
    }
    job->a = a, job->b = b;
    return a != b && job->ds[a] == p->item && abs_stride(job->ss[b]) == p->item
           && job->ext[a] >= COPY_TILE / 2 && job->ext[b] >= COPY_TILE / 2;
}

static int permute_layout(const Program *p) {
    CopyJob job;
    return permute_job(p, &job);
}

/* True where a loop nest only moves A into D: nothing summed, no C, nothing conjugated, B one
 * number that is 1 and alpha 1 (a one-operand product: a permute, SPEC 9), A's and D's fastest
 * labels differing (both at unit stride, of COPY_TILE / 2 or more; the layout checked when the
 * program is made: p->permute). The nest then runs as one tiled copy straight into D
 * (tiled_copy_item), shared out over the pool along its longest other label (else along A's
 * fastest, in whole tiles), its tiles streamed from STREAM_COPY_MIN bytes; the elementwise nest
 * packed A's blocks in D's order, then multiplied them by one into D (256^3 F32 reversed: 32%
 * of a contiguous copy's speed, 2 threads). */
static int run_permute(const Program *p, cval al, const char *A, const char *B, const char *C,
                       char *D) {
    if (!p->permute || C || al.re != 1.0 || al.im != 0.0) return 0;
    int one;
    switch (p->dtype) {
        case DT_F32: one = *(const float *)B == 1.0f; break;
        case DT_F64: one = *(const double *)B == 1.0; break;
        case DT_C64: one = ((const float *)B)[0] == 1.0f && ((const float *)B)[1] == 0.0f; break;
        default: one = ((const double *)B)[0] == 1.0 && ((const double *)B)[1] == 0.0; break;
    }
    CopyJob job;
    if (!one || !permute_job(p, &job)) return 0;
    const int a = job.a, b = job.b;
    npy_intp bytes = p->item;
    for (int l = 0; l < job.nd; ++l) bytes *= job.ext[l];
    job.stream = bytes >= STREAM_COPY_MIN;
    job.dst = D, job.src = A;
    int cut = b; /* the label shared out: the longest other one, else A's fastest */
    for (int l = 0; l < job.nd; ++l)
        if (l != a && l != b && (cut == b || job.ext[l] > job.ext[cut])) cut = l;
    const npy_intp unit = cut == b ? COPY_TILE : 1, units = (job.ext[cut] + unit - 1) / unit;
    const int workers = pool_workers(units, bytes >= PACK_SPLIT_MIN);
    CopyJob *jobs = workers > 1 ? malloc((size_t)workers * sizeof(CopyJob)) : NULL;
    if (!jobs) {
        copy_task(&job);
        return 1;
    }
    for (int w = 0; w < workers; ++w) {
        npy_intp start = units * w / workers * unit, stop = units * (w + 1) / workers * unit;
        if (stop > job.ext[cut]) stop = job.ext[cut];
        jobs[w] = job;
        jobs[w].ext[cut] = stop - start;
        jobs[w].dst = D + start * job.ds[cut];
        jobs[w].src = A + start * job.ss[cut];
    }
    g_pool_run(workers, (void *)copy_task, jobs, (int)sizeof(CopyJob));
    free(jobs);
    return 1;
}

/* A pack that sums is cut along the kept label the source steps through slowest where the
 * first one steps through it by less than PACK_CUT_NEAR bytes, and that label has at least
 * PACK_CUT_ROW bytes of the destination per index of the labels before it (a boundary between
 * two workers' parts shares a cache line of it once per such row) and splits evenly (a multiple
 * of the workers, or PACK_CUT_SHARES times as many indices). Cut along the first label, each
 * worker read pieces of every page of the source: kecoz summing c into [z][o][k e] (z the
 * source's fastest, 19 F64 numbers; 75 MB) 12.3 ms on two threads, 8.4 on one, 6.8 cut along
 * (k e); lgbdrx summing d into [r][g b][l][x] (r's stride 144 bytes) 13.3 -> 8.6 ms. */
#define PACK_CUT_NEAR 4096
#define PACK_CUT_SHARES 4
#define PACK_CUT_ROW 1024

typedef struct {
    Nest n; /* the packing nest with its cut label cut to this worker's range */
    const Program *p;
    const char *src;
    char *dst;
    int conj, cut; /* cut > 0: n's st[1] holds the destination's strides */
    int stream;    /* the whole pack is of STREAM_COPY_MIN bytes or more */
} PackJob;

static void pack_task(void *arg) {
    PackJob *j = (PackJob *)arg;
    if (j->n.ext[j->cut] < 1) return;
    if (j->cut == 0) {
        run_pack(j->p, &j->n, j->src, j->dst, j->conj, j->stream);
        return;
    }
    switch (j->p->dtype) {
        case DT_F32: pack_f32(&j->n, j->src, j->dst, j->conj, 1); break;
        case DT_F64: pack_f64(&j->n, j->src, j->dst, j->conj, 1); break;
        case DT_C64: pack_c64(&j->n, j->src, j->dst, j->conj, 1); break;
        default: pack_c128(&j->n, j->src, j->dst, j->conj, 1); break;
    }
}

/* The label a pack is shared out along (0: its first; see PACK_CUT_NEAR), given the
 * destination's strides `ds` and the workers there would be. */
static int pack_cut(const Nest *n, const npy_intp *ds, int workers) {
    if (n->nl <= n->nout || n->nout < 2 || abs_stride(n->st[0][0]) >= PACK_CUT_NEAR) return 0;
    int cut = 0;
    for (int l = 1; l < n->nout; ++l)
        if ((n->ext[l] % workers == 0 || n->ext[l] >= PACK_CUT_SHARES * workers)
            && abs_stride(n->st[0][l]) > abs_stride(n->st[0][cut])
            && ds[l] * n->ext[l] >= PACK_CUT_ROW)
            cut = l;
    return cut;
}

static void run_pack_split(const Program *p, const Nest *n, const char *src, char *dst,
                           int conj, npy_intp bytes) {
    npy_intp ds[MAXL]; /* the destination's strides: contiguous, in the nest's order */
    pack_strides(n, p->item, ds);
    /* a pack that sums labels reads that many times its bytes: the reading is the work (cix
     * summing i, 92 MB read into 149 KB: one thread, 9.2 ms) */
    npy_intp read = bytes;
    for (int l = n->nout; l < n->nl; ++l) read *= n->ext[l];
    const int big = read >= PACK_SPLIT_MIN;
    const int most = pool_workers(MAX_WORKERS, big);
    const int cut = n->nout > 0 ? pack_cut(n, ds, most) : 0;
    const int workers = pool_workers(n->nout > 0 ? n->ext[cut] : 1, big);
    PackJob *jobs = workers > 1 ? malloc((size_t)workers * sizeof(PackJob)) : NULL;
    if (!jobs) {
        run_pack(p, n, src, dst, conj, bytes >= STREAM_COPY_MIN);
        return;
    }
    const npy_intp first = n->ext[cut];
    for (int w = 0; w < workers; ++w) {
        const npy_intp start = first * w / workers, stop = first * (w + 1) / workers;
        memcpy(&jobs[w].n, n, sizeof(Nest));
        jobs[w].n.ext[cut] = stop - start;
        if (cut > 0) memcpy(jobs[w].n.st[1], ds, sizeof(ds));
        jobs[w].p = p;
        jobs[w].src = src + start * n->st[0][cut];
        jobs[w].dst = dst + start * ds[cut];
        jobs[w].conj = conj;
        jobs[w].cut = cut;
        jobs[w].stream = bytes >= STREAM_COPY_MIN;
    }
    g_pool_run(workers, (void *)pack_task, jobs, (int)sizeof(PackJob));
    free(jobs);
}

/* TTGT's store of T into D, shared out like the packs from PACK_SPLIT_MIN bytes of T. */
static void run_store_split(const Program *p, cval al, cval be, const char *T, const char *C,
                            char *D) {
    run_split(p, pool_workers(p->nout > 0 ? p->ext[0] : 1, p->bytes_t >= PACK_SPLIT_MIN),
              SPLIT_STORE, al, be, T, NULL, C, D);
}

/* D = beta op_C(C) (or +0) before GEMMs that add into D, shared out like the store from
 * PACK_SPLIT_MIN bytes of D: on one thread it read C and wrote D at 9.6 GB/s (tucker_mode1,
 * 262 MB of F64: 54.6 ms of 101.6, the GEMM 46.8). */
static void run_scale_split(const Program *p, cval be, const char *C, char *D) {
    npy_intp count = 1;
    for (int l = 0; l < p->nout; ++l) count *= p->ext[l];
    const cval one = {1.0, 0.0};
    run_split(p, pool_workers(p->nout > 0 ? p->ext[0] : 1, count * p->item >= PACK_SPLIT_MIN),
              SPLIT_SCALE, one, be, NULL, NULL, C, D);
}

typedef struct {
    const StreamNest *n;
    npy_intp start, stop; /* this worker's indices of the nest's first label */
    int dt;
    const char *M, *V;
    char *D;
    const double *al;
    int conj_m;
} StreamJob;

static void stream_task(void *arg) {
    StreamJob *j = (StreamJob *)arg;
    stream_accumulate(j->dt, j->n, j->start, j->stop, j->M, j->V, j->D, j->al, j->conj_m);
}

/* One pass of a stream nest adding alpha op(M) V into `into` (`bytes` of it, in the nest's D
 * strides), on one thread (mode 0), shared out along the first label (1: one of D's), or (2)
 * each worker into its own zeroed copy, then added into `into` (one thread where memory for
 * the copies ran out). */
static void stream_pass(int dt, const StreamNest *n, int mode, const char *M, const char *V,
                        char *into, npy_intp bytes, const double al[2], int conj_m) {
    npy_intp iters = 1;
    for (int l = 0; l < n->nl; ++l) iters *= n->ext[l];
    int workers = mode ? pool_workers(n->ext[0], iters >= LOOP_SPLIT_MIN) : 1;
    const npy_intp step = (bytes + 63) / 64 * 64; /* no cache line shared by two copies */
    char *copies = NULL;
    StreamJob one, *jobs = workers > 1 ? malloc((size_t)workers * sizeof(StreamJob)) : &one;
    if (workers > 1 && mode == 2 && jobs) {
        copies = scratch((workers - 1) * step);
        if (copies) memset(copies, 0, (size_t)((workers - 1) * step));
    }
    if (!jobs || (mode == 2 && workers > 1 && !copies)) {
        if (jobs && jobs != &one) free(jobs);
        jobs = &one;
        workers = 1;
    }
    for (int w = 0; w < workers; ++w) {
        jobs[w].n = n, jobs[w].dt = dt;
        jobs[w].start = n->ext[0] * w / workers;
        jobs[w].stop = n->ext[0] * (w + 1) / workers;
        jobs[w].M = M, jobs[w].V = V;
        jobs[w].D = copies && w ? copies + (w - 1) * step : into;
        jobs[w].al = al, jobs[w].conj_m = conj_m;
    }
    if (workers > 1) {
        g_pool_run(workers, (void *)stream_task, jobs, (int)sizeof(StreamJob));
        free(jobs);
    } else {
        stream_task(jobs);
    }
    if (copies) { /* the copies added into `into` (complex numbers as pairs of reals) */
        const int dbl = dt == DT_F64 || dt == DT_C128;
        const npy_intp reals = bytes / (dbl ? 8 : 4);
        for (int w = 1; w < workers; ++w) {
            const char *y = copies + (w - 1) * step;
            if (dbl) {
                double *x = (double *)into;
                for (npy_intp i = 0; i < reals; ++i) x[i] += ((const double *)y)[i];
            } else {
                float *x = (float *)into;
                for (npy_intp i = 0; i < reals; ++i) x[i] += ((const float *)y)[i];
            }
        }
        free(copies);
    }
}

/* A STREAM step (see Program): V packed, M streamed into D or T; 1 when memory ran out (D
 * untouched). */
static int run_stream(const Program *p, cval al, cval be, const char *A, const char *B,
                      const char *C, char *D) {
    const char *M = p->swap ? B : A, *V = p->swap ? A : B;
    const int cplx = p->dtype == DT_C64 || p->dtype == DT_C128;
    const int conj_m = cplx && p->conj[p->swap ? 1 : 0];
    const int conj_v = cplx && p->conj[p->swap ? 0 : 1];
    const int mode = p->stream_mode;
    char *vp = p->bytes_v ? keep_alloc(p->bytes_v) : NULL;
    char *walked = p->v_permute ? keep_alloc(p->bytes_v) : NULL;
    char *t = mode >= 2 ? keep_alloc(p->bytes_t) : NULL;
    if ((p->bytes_v && !vp) || (p->v_permute && !walked) || (mode >= 2 && !t)) {
        keep_free(vp);
        keep_free(walked);
        keep_free(t);
        return 1;
    }
    const double one[2] = {1.0, 0.0}, alpha[2] = {al.re, al.im};
    double since = step_clock();
    if (p->v_reduce) { /* V's own labels summed: V walked once, added into a zeroed buffer */
        const float onef[2] = {1.0f, 0.0f};
        const int dbl = p->dtype == DT_F64 || p->dtype == DT_C128;
        char *into = walked ? walked : vp;
        memset(into, 0, (size_t)p->bytes_v);
        stream_pass(p->dtype, &p->vsum, p->v_mode, V, dbl ? (const char *)one : (const char *)onef,
                    into, p->bytes_v, one, conj_v ^ conj_m);
        if (walked) run_pack_split(p, &p->spack, walked, vp, 0, p->bytes_v);
        keep_free(walked);
    } else if (vp) {
        run_pack_split(p, &p->spack, V, vp, conj_v ^ conj_m, p->bytes_v);
    }
    if (vp) {
        V = vp;
        since = step_done(STEP_PACK, since);
    }
    if (t) { /* the sums into T, then D = op_D(alpha T + beta op_C(C)) */
        memset(t, 0, (size_t)p->bytes_t);
        stream_pass(p->dtype, &p->stream, mode == 3 ? 1 : 2, M, V, t, p->bytes_t, one, conj_m);
        since = step_done(STEP_STREAM, since);
        run_store(p, al, be, t, C, D);
        step_done(STEP_STORE, since);
    } else {
        run_scale_split(p, be, C, D);
        since = step_done(STEP_STORE, since);
        stream_pass(p->dtype, &p->stream, mode, M, V, D, 0, alpha, conj_m);
        if (p->conj[3]) run_conj(p, D);
        step_done(STEP_STREAM, since);
    }
    keep_free(vp);
    keep_free(t);
    return 0;
}

/* How many GEMMs the tiles have run (tile_count: what tests check). */
static unsigned long long g_tile_count = 0;
/* Tiled GEMMs of at least this many multiply-adds share D's rows out over the BLAS's pool, as
 * OpenBLAS shares its own (a 2^18 one takes about 3 us on one core; F64 32x64x256 took 20.1 us
 * on one, 14.4 on two). */
#define TILE_SPLIT_MIN (1 << 18)
/* A transposed B of at least this many bytes is copied into rows by all the workers. */
#define TILE_COPY_SPLIT_MIN (64 * 1024)

typedef struct {
    int dt, ta, conj_b;
    int64_t m, n, k, lda, ldb, ldd;
    double al[2], be[2];
    const char *A, *B;
    char *D, *rows; /* rows: where this worker copies its columns of a transposed B, or NULL */
    int64_t ldr;     /* their row stride; copy_only: the worker only copies */
    int copy_only;
} TileJob;

static void tile_task(void *arg) {
    TileJob *j = (TileJob *)arg;
    if (j->m < 1 || j->n < 1) return;
    const char *B = j->B;
    int64_t ldb = j->ldb;
    if (j->rows) {
        tile_transpose(j->dt, j->conj_b, B, ldb, j->n, j->k, j->rows, j->ldr);
        if (j->copy_only) return;
        B = j->rows, ldb = j->ldr;
    }
    tile_gemm(j->dt, j->ta, j->m, j->n, j->k, j->al, j->A, j->lda, B, ldb, j->be, j->D, j->ldd);
}

/* A real GEMM on the register tiles (_tilegemm.c), its rows shared out over the BLAS's pool
 * when large: 1 when done, 0 when the BLAS must run it. A transposed B is copied into rows
 * first (into this thread's buffer): by each worker, its own columns, where the workers share
 * D's columns; else once, on this thread. */
static int tile_run(int dtype, int ta, int tb, int64_t m, int64_t n, int64_t k, cval al,
                    const char *L, int64_t lda, const char *R, int64_t ldb, cval be, char *D,
                    int64_t ldd) {
    if (!tile_fits(dtype, tb, m, n, k)) return 0; /* the executor's DT_ are the tiles' TILE_ */
    const int64_t item = tile_item(dtype);
    const int conj_b = tb == CONJ_TRANS;
    char *rows = NULL;
    if (tb != NO_TRANS) {
        rows = tile_buffer((size_t)(k * n * item));
        if (!rows) return 0;
    }
    /* workers share D's rows where there are enough, else its columns (whole vectors), else
     * (a single vector) shorter runs of rows */
    const int64_t lanes = tile_lanes(dtype), vectors = (n + lanes - 1) / lanes;
    const int64_t row_shares = m / tile_rows_min() >= 2 || vectors > 1
                                   ? m / tile_rows_min() : m / (tile_rows_min() / 3);
    const int big = m * n * k >= TILE_SPLIT_MIN, by_rows = row_shares >= 2;
    const int workers = pool_workers(by_rows ? row_shares : vectors, big);
    TileJob jobs[MAX_WORKERS];
    if (rows && (by_rows || workers == 1)) { /* every worker reads all of B: copied first */
        const int copiers = workers > 1 && k * n * item >= TILE_COPY_SPLIT_MIN ? workers : 1;
        for (int w = 0; w < copiers; ++w) {
            const int64_t start = n * w / copiers;
            jobs[w] = (TileJob){.dt = dtype, .conj_b = conj_b, .m = 1, .k = k, .ldb = ldb,
                                .n = n * (w + 1) / copiers - start,
                                .B = R + start * ldb * item, .rows = rows + start * item,
                                .ldr = n, .copy_only = 1};
        }
        if (copiers > 1) g_pool_run(copiers, (void *)tile_task, jobs, (int)sizeof(TileJob));
        else tile_task(jobs);
        R = rows, ldb = n, rows = NULL;
    }
    for (int w = 0; w < workers; ++w) {
        TileJob *j = &jobs[w];
        j->copy_only = 0;
        j->dt = dtype, j->ta = ta, j->conj_b = conj_b, j->m = m, j->n = n, j->k = k;
        j->lda = lda, j->ldb = ldb, j->ldd = ldd;
        j->al[0] = al.re, j->al[1] = al.im, j->be[0] = be.re, j->be[1] = be.im;
        j->A = L, j->B = R, j->D = D, j->rows = NULL;
        if (by_rows) {
            const int64_t start = m * w / workers, stop = m * (w + 1) / workers;
            j->m = stop - start;
            j->A += start * (ta == NO_TRANS ? lda : 1) * item;
            j->D += start * ldd * item;
        } else if (workers > 1) {
            const int64_t start = vectors * w / workers * lanes;
            const int64_t stop = w == workers - 1 ? n : vectors * (w + 1) / workers * lanes;
            j->n = stop - start;
            j->B += start * (rows ? ldb : 1) * item;
            j->D += start * item;
            if (rows) j->rows = rows + start * k * item, j->ldr = j->n;
        }
    }
    if (workers > 1) g_pool_run(workers, (void *)tile_task, jobs, (int)sizeof(TileJob));
    else tile_task(jobs);
    __atomic_fetch_add(&g_tile_count, 1, __ATOMIC_RELAXED);
    return 1;
}

static void blas_single_leave(void) {
    pthread_mutex_lock(&g_single_lock);
    if (--g_single_users == 0 && g_saved_threads != 1) g_set_threads(g_saved_threads);
    pthread_mutex_unlock(&g_single_lock);
}

static int dtype_of(PyArrayObject *a) {
    switch (PyArray_TYPE(a)) {
        case NPY_FLOAT32: return DT_F32;
        case NPY_FLOAT64: return DT_F64;
        case NPY_COMPLEX64: return DT_C64;
        case NPY_COMPLEX128: return DT_C128;
        default: return -1;
    }
}

/* A 2-D operand BLAS reads in place: 1 and its transpose flag and leading dimension (in
 * elements) for a row-major call reading it as rows x cols; 0 when it is not one. */
static int blas_matrix(npy_intp rs, npy_intp cs, npy_intp rows, npy_intp cols, npy_intp item,
                       int *trans, int64_t *ld) {
    if (cols == 1) cs = item; /* the stride of an axis of extent 1 is never used */
    if (rows == 1) rs = (cols > 1 ? cols : 1) * item;
    if (cs == item && rs > 0 && rs % item == 0 && rs / item >= (cols > 1 ? cols : 1)) {
        *trans = NO_TRANS;
        *ld = rs / item;
        return 1;
    }
    if (rs == item && cs > 0 && cs % item == 0 && cs / item >= (rows > 1 ? rows : 1)) {
        *trans = TRANS;
        *ld = cs / item;
        return 1;
    }
    return 0;
}

typedef struct {
    Nest nest;
    int dt, col_major, t_oth, conj;
    int axis, buf_t; /* src's axis cut into blocks; buf_t: each block packed [k][rows] */
    npy_intp first, block, unit, k, n, item, dr;
    int64_t ldd, ldo;
    cval al; /* the GEMMs' alpha */
    const char *x, *o;
    char *out, *buf;
    npy_intp start, stop; /* this worker's indices of src's first axis */
    /* each block's rows (columns) of T stored into D while in cache (`store`: the program,
     * whose store nest's label `block_store` is the blocked one), from the worker's `tbuf` of
     * `tbytes` (leading dimension `tldd`) */
    const Program *store;
    cval sal, sbe;
    const char *C;
    char *D;
    int64_t tldd;
    char *tbuf;
    npy_intp tbytes;
    Program *sub; /* the worker's copy of `store`, its blocked label cut to each block */
    npy_intp gemms, ostep, tstep; /* GEMMs per block (a batch inside it; else 1), their
                                   * other operands' and boxes' byte steps */
} PackedJob;

static void *packed_work(void *arg);

static void packed_task(void *arg) { packed_work(arg); }

static void *packed_work(void *arg) {
    PackedJob *j = (PackedJob *)arg;
    const cval zero = {0.0, 0.0};
    Program *sub = j->sub;
    const npy_intp per = (j->first + j->block - 1) / j->block; /* blocks per lead index */
    const Program *q = j->store;
    if (sub)
        for (int b = 0; b < q->nbb; ++b) sub->ext[q->bblab[b]] = 1;
    for (npy_intp u = j->start; u < j->stop; ++u) { /* block u % per of lead index u / per */
        const npy_intp i0 = u % per * j->block;
        const npy_intp cnt = i0 + j->block <= j->first ? j->block : j->first - i0;
        const npy_intp r = cnt * j->unit;
        const char *x = j->x + i0 * j->nest.st[0][j->axis], *o = j->o;
        const char *c = j->C;
        char *d = j->D;
        if (q && q->nbb) { /* the block's indices of the lead labels: their offsets */
            npy_intp h = u / per;
            for (int b = q->nbb - 1; b >= 0; --b) {
                const npy_intp idx = h % q->bbext[b];
                h /= q->bbext[b];
                x += idx * q->bbsrc[b];
                o += idx * q->bboth[b];
                if (c) c += idx * q->st[2][q->bblab[b]];
                d += idx * q->st[3][q->bblab[b]];
            }
        }
        j->nest.ext[j->axis] = cnt;
        switch (j->dt) {
            case DT_F32: pack_f32(&j->nest, x, j->buf, j->conj, 0); break;
            case DT_F64: pack_f64(&j->nest, x, j->buf, j->conj, 0); break;
            case DT_C64: pack_c64(&j->nest, x, j->buf, j->conj, 0); break;
            default: pack_c128(&j->nest, x, j->buf, j->conj, 0); break;
        }
        const int64_t ldb = j->buf_t ? r : j->k;
        char *out = sub ? j->tbuf : j->out + i0 * j->unit * (j->col_major ? j->item : j->dr);
        const int64_t ldd = sub ? j->tldd : j->ldd;
        for (npy_intp g = 0; g < j->gemms; ++g) { /* (a batch inside the block: each GEMM's
                                                     * packed block, other operand, box) */
            const char *bg = j->buf + g * r * j->k * j->item, *og = o + g * j->ostep;
            char *tg = out + g * j->tstep;
            if (j->col_major)
                gemm_raw(j->dt, j->t_oth, j->buf_t ? NO_TRANS : TRANS, j->n, r, j->k, j->al, og,
                         j->ldo, bg, ldb, zero, tg, ldd);
            else
                gemm_raw(j->dt, j->buf_t ? TRANS : NO_TRANS, j->t_oth, r, j->n, j->k, j->al, bg,
                         ldb, og, j->ldo, zero, tg, ldd);
        }
        if (sub) {
            const int l = q->block_store;
            sub->ext[l] = cnt;
            run_store(sub, j->sal, j->sbe, j->tbuf, c ? c + i0 * sub->st[2][l] : NULL,
                      d + i0 * sub->st[3][l]);
        }
    }
    return NULL;
}

/* Run `job` (all but its buffer and share) in blocks of its first axis (for each index of its
 * program's lead labels, where it stores) shared out over `threads` workers, each with a
 * one-thread BLAS, on the BLAS's own pool where it has one (no more workers than its
 * threads); else one worker and the BLAS's threads. Called without the GIL; 1 when memory for
 * the blocks ran out (nothing written). */
static int packed_run(const PackedJob *job, int threads) {
    const npy_intp first = job->first, block = job->block;
    npy_intp lead = 1;
    if (job->store)
        for (int b = 0; b < job->store->nbb; ++b) lead *= job->store->bbext[b];
    const npy_intp blocks = (first + block - 1) / block * lead;
    const npy_intp gemms = job->gemms > 1 ? job->gemms : 1; /* (0: one, as 1) */
    const npy_intp bytes = block * job->unit * job->k * job->item * gemms;
    int workers = threads < 1 ? 1 : threads > MAX_WORKERS ? MAX_WORKERS : threads;
    if (workers > blocks) workers = (int)blocks;
    PackedJob jobs[MAX_WORKERS];
    int ready = 1;
    for (int w = 0; w < workers; ++w) {
        jobs[w] = *job;
        jobs[w].gemms = gemms;
        jobs[w].start = blocks * w / workers;
        jobs[w].stop = blocks * (w + 1) / workers;
        jobs[w].buf = scratch(bytes);
        jobs[w].tbuf = job->store ? scratch(job->tbytes) : NULL;
        jobs[w].sub = job->store ? malloc(sizeof(Program)) : NULL;
        if (jobs[w].sub) memcpy(jobs[w].sub, job->store, sizeof(Program));
        ready = ready && jobs[w].buf && (!job->store || (jobs[w].tbuf && jobs[w].sub));
    }
    if (!ready) { /* nothing written */
        for (int w = 0; w < workers; ++w) {
            free(jobs[w].buf);
            free(jobs[w].tbuf);
            free(jobs[w].sub);
        }
        return 1;
    }
    const int outside = workers > 1 ? blas_single_enter() : 0;
    if (outside > 1 && g_pool_run && !g_in_pool) {
        const int n = workers < outside ? workers : outside;
        jobs[n - 1].stop = blocks; /* the last one takes the shares of workers not run */
        g_pool_run(n, (void *)packed_task, jobs, (int)sizeof(PackedJob));
    } else if (outside > 1 && !g_in_pool) {
        pthread_t tid[MAX_WORKERS];
        int started[MAX_WORKERS] = {0};
        for (int w = 1; w < workers; ++w)
            started[w] = pthread_create(&tid[w], NULL, packed_work, &jobs[w]) == 0;
        packed_work(&jobs[0]);
        for (int w = 1; w < workers; ++w) {
            if (started[w]) pthread_join(tid[w], NULL);
            else packed_work(&jobs[w]); /* no thread to be had: this one does it */
        }
    } else {
        jobs[0].stop = blocks;
        packed_work(&jobs[0]);
    }
    if (outside) blas_single_leave();
    for (int w = 0; w < workers; ++w) {
        free(jobs[w].buf);
        free(jobs[w].tbuf);
        free(jobs[w].sub);
    }
    return 0;
}

/* TTGT's GEMM with its thick operand packed in blocks (Program.blocked): T (or D, `out`) =
 * alpha op(left) op(right), the other operand packed already (pa/pb, or read in place). */
static int run_ttgt_blocked(const Program *p, cval al, const char *A, const char *B,
                            const char *pa, const char *pb, char *out, cval sal, cval sbe,
                            const char *C, char *D) {
    const int thick_b = p->blocked == 1;
    const int thick_left = thick_b == (p->swap != 0); /* the GEMM's left operand is B on swap */
    PackedJob job;
    memset(&job, 0, sizeof(job));
    job.nest = thick_b ? p->pack_b : p->pack_a;
    job.x = thick_b ? B : A;
    job.o = thick_b ? (pa ? pa : A) : (pb ? pb : B);
    job.conj = p->conj[thick_b];
    job.dt = p->dtype;
    job.al = al;
    job.axis = p->block_axis;
    job.buf_t = thick_left ? p->ta == TRANS : p->tb == NO_TRANS;
    job.first = job.nest.ext[job.axis];
    job.block = p->block;
    job.unit = p->block_unit;
    job.k = p->k;
    job.item = p->item;
    job.ldd = p->ldd;
    job.dr = p->ldd * p->item;
    job.out = out;
    job.gemms = p->block_gemms > 1 ? p->block_gemms : 1;
    job.ostep = p->nb ? p->bst[thick_b ? 0 : 1][0] : 0; /* the other operand: A where B is thick */
    /* each GEMM's box in the worker's buffer; written into `out` itself (D lying as T), the
     * batch's own stride there */
    job.tstep = D ? p->bytes_t / job.gemms : p->nb ? p->bst[2][0] : 0;
    if (thick_left) { /* T[rows of the block] = buf op(right) */
        job.col_major = 0;
        job.n = p->n;
        job.t_oth = p->tb;
        job.ldo = p->ldb;
    } else { /* T[:, columns of the block] = op(left) buf^T */
        job.col_major = 1;
        job.n = p->m;
        job.t_oth = p->ta;
        job.ldo = p->lda;
    }
    if (D) { /* each block into the worker's T, stored into D (D = NULL: into `out`) */
        job.store = p;
        job.sal = sal;
        job.sbe = sbe;
        job.C = C;
        job.D = D;
        job.tldd = thick_left ? p->ldd : p->block * p->block_unit;
        job.tbytes = p->bytes_t;
    }
    npy_intp lead = 1; /* indices of the lead labels: blocks per index range of the first */
    for (int b = 0; D && b < p->nbb; ++b) lead *= p->bbext[b];
    return packed_run(&job, pool_workers(job.first * lead, 1));
}

/* packed_gemm(d, src, other, rows, block, threads, summed_first=False) -> bool: d[m, n] =
 * pack(src)[m, k] @ other[k, n].
 *
 * src's first `rows` axes are d's rows (row-major), its other axes the summed ones (with
 * summed_first, its last `rows` axes are the rows: each block is packed [k][rows], in src's
 * order where src's fastest axis is a row axis, and blocks cut along the first row axis). Instead of
 * packing all of src before one GEMM (a copy as large as the operand, written to memory and
 * read back), `block` indices of its first axis at a time are packed into a small buffer and
 * multiplied while that block is still in cache. With threads > 1 (and a BLAS whose thread
 * count can be set) that many threads each pack and multiply a share of the blocks with a
 * one-thread BLAS: no BLAS thread pool wakes up for every block, and the packing runs on every
 * core too. False (nothing written) when the operands do not fit this: the caller packs the
 * usual way. Every block has its own rows of d, so the workers never write the same memory. */
static PyObject *packed_gemm(PyObject *self, PyObject *args) {
    PyArrayObject *d, *src, *oth;
    int rows, threads, summed_first = 0;
    Py_ssize_t block;
    if (!PyArg_ParseTuple(args, "O!O!O!ini|p", &PyArray_Type, &d, &PyArray_Type, &src,
                          &PyArray_Type, &oth, &rows, &block, &threads, &summed_first))
        return NULL;
    const int dt = dtype_of(d), nd = PyArray_NDIM(src);
    if (dt < 0 || !g_gemm[dt] || dtype_of(src) != dt || dtype_of(oth) != dt
        || PyArray_NDIM(d) != 2 || PyArray_NDIM(oth) != 2 || nd < 2 || nd > MAXL || rows < 1
        || rows >= nd || block < 1 || !PyArray_ISWRITEABLE(d) || !PyArray_ISALIGNED(d)
        || !PyArray_ISALIGNED(src) || !PyArray_ISALIGNED(oth) || !PyArray_ISNOTSWAPPED(d)
        || !PyArray_ISNOTSWAPPED(src) || !PyArray_ISNOTSWAPPED(oth))
        Py_RETURN_FALSE;
    PackedJob job;
    memset(&job, 0, sizeof(job));
    const npy_intp item = PyArray_ITEMSIZE(d);
    npy_intp m = 1, k = 1;
    const int axis = summed_first ? nd - rows : 0; /* the first of d's row axes */
    for (int i = 0; i < nd; ++i) {
        if (i >= axis && i < axis + rows) m *= PyArray_DIM(src, i);
        else k *= PyArray_DIM(src, i);
    }
    const npy_intp n = PyArray_DIM(oth, 1), first = PyArray_DIM(src, axis);
    if (m != PyArray_DIM(d, 0) || n != PyArray_DIM(d, 1) || k != PyArray_DIM(oth, 0) || m < 2
        || n < 2 || k < 1 || block > first)
        Py_RETURN_FALSE;
    /* d row-major: d_blk = buf @ other; column-major: d_blk^T = other^T @ buf^T */
    const npy_intp dr = PyArray_STRIDE(d, 0), dc = PyArray_STRIDE(d, 1);
    const npy_intp orr = PyArray_STRIDE(oth, 0), oc = PyArray_STRIDE(oth, 1);
    if (dc == item && dr > 0 && dr % item == 0 && dr / item >= n) {
        job.col_major = 0;
        job.ldd = dr / item;
        if (!blas_matrix(orr, oc, k, n, item, &job.t_oth, &job.ldo)) Py_RETURN_FALSE;
    } else if (dr == item && dc > 0 && dc % item == 0 && dc / item >= m) {
        job.col_major = 1;
        job.ldd = dc / item;
        if (!blas_matrix(oc, orr, n, k, item, &job.t_oth, &job.ldo)) Py_RETURN_FALSE;
    } else {
        Py_RETURN_FALSE;
    }
    job.nest.nl = job.nest.nout = nd;
    for (int i = 0; i < nd; ++i) {
        job.nest.ext[i] = PyArray_DIM(src, i);
        job.nest.st[0][i] = PyArray_STRIDE(src, i);
        job.nest.st[1][i] = job.nest.st[2][i] = job.nest.st[3][i] = 0;
    }
    job.dt = dt;
    job.conj = 0;
    job.axis = axis;
    job.buf_t = summed_first;
    job.al.re = 1.0, job.al.im = 0.0;
    job.first = first;
    job.block = block;
    job.unit = m / first; /* rows per index of src's first axis */
    job.k = k;
    job.n = n;
    job.item = item;
    job.dr = dr;
    job.x = PyArray_BYTES(src);
    job.o = PyArray_BYTES(oth);
    job.out = PyArray_BYTES(d);
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = packed_run(&job, threads);
    Py_END_ALLOW_THREADS
    if (failed) return PyErr_NoMemory();
    Py_RETURN_TRUE;
}

/* ------------------------------------------------------------------ BF16 GEMMs on tiles */

/* Products of at least this many multiply-adds are shared out over the BLAS's pool. */
#define AMX_SPLIT_MIN (1 << 20)
/* Most bytes of packed operands and sums one worker of amx_gemm allocates. */
#define AMX_BUFFER_MAX ((size_t)256 << 20)

/* Each batch element's D is cut into a grid of gr x gc blocks of mb x nb (multiples of 32);
 * the units of work, batch element by batch element and block by block, are shared out in
 * runs of consecutive units. */
typedef struct {
    AmxGemm g;
    npy_intp u0, u1;           /* this worker's units */
    npy_intp sa, sb, sc, sd;   /* batch strides in bytes */
    int64_t gr, gc, mb, nb;    /* the grid over each batch element's D */
    void *buf;
    int bad;
} AmxJob;

static void amx_task(void *arg) {
    AmxJob *j = (AmxJob *)arg;
    const npy_intp blocks = (npy_intp)(j->gr * j->gc);
    for (npy_intp u = j->u0; u < j->u1 && !j->bad; ++u) {
        const npy_intp b = u / blocks, r = u % blocks;
        const int64_t m0 = r / j->gc * j->mb, n0 = r % j->gc * j->nb;
        const int64_t m1 = m0 + j->mb < j->g.m ? m0 + j->mb : j->g.m;
        const int64_t n1 = n0 + j->nb < j->g.n ? n0 + j->nb : j->g.n;
        AmxGemm g = j->g;
        g.A += b * j->sa;
        g.B += b * j->sb;
        g.D += b * j->sd;
        if (g.C) g.C += b * j->sc;
        j->bad = amx_gemm_part(&g, m0, m1, n0, n1, j->buf);
    }
}

/* Below this many batch elements per worker, each element's D is cut into blocks too. */
#define AMX_BATCH_SHARE 2
/* Another grid replaces the cut along D's longer side only where amx_part_cost predicts it
 * this much faster (the model is rough: on two cores the two cuts of mlp_bf16 ran within 1% of
 * each other). */
#define AMX_GRID_GAIN 1.05
/* ... and only for sums of at least this many numbers (F16 counts four per number: its tile
 * products). Below it each block's fixed costs (its accumulators' stores into D, its panels)
 * outweigh the packing that squarer blocks save, which amx_part_cost does not price: on a
 * 16-core Xeon's tiles, 4x4 blocks of 1024x1024 ran 0.79x the 16x1 cut at a sum of 32, 0.88x
 * at 64 and 0.93x at 128 (2 batch elements, 2x4 against 8x1), then 1.05-1.19x at 256 and
 * 1.18-2.42x from 1024. */
#define AMX_GRID_MIN_K 256

/* The cost of the busiest of `threads` workers sharing h batch elements cut into gr x gc
 * blocks (fewer where blocks of whole multiples of 32 cover D); sets the grid in `out`. */
static double amx_grid_cost(AmxJob *out, npy_intp h, int threads, int64_t gr, int64_t gc) {
    const AmxGemm *g = &out->g;
    const int64_t um = (g->m + 31) / 32, un = (g->n + 31) / 32;
    const int64_t mb = (um + gr - 1) / gr * 32, nb = (un + gc - 1) / gc * 32;
    out->gr = (g->m + mb - 1) / mb, out->gc = (g->n + nb - 1) / nb, out->mb = mb, out->nb = nb;
    const double units = (double)h * (double)(out->gr * out->gc);
    const double rounds = ceil(units / (units < threads ? units : (double)threads));
    return rounds * amx_part_cost(g, mb < g->m ? mb : g->m, nb < g->n ? nb : g->n);
}

/* The grid over each of h batch elements' D for `threads` workers: whole batch elements where
 * each worker gets at least AMX_BATCH_SHARE; else D cut along its longer side into as many
 * blocks as workers per element, unless the sum is at least AMX_GRID_MIN_K long and another
 * cut (rows by columns) costs its busiest worker AMX_GRID_GAIN times less (amx_part_cost: each
 * block packs its own rows of A and columns of B, so square blocks pack the least). Sets gr,
 * gc, mb and nb. */
static void amx_grid(AmxJob *job, npy_intp h, int threads) {
    const AmxGemm *g = &job->g;
    const int64_t um = (g->m + 31) / 32, un = (g->n + 31) / 32;
    const int64_t want = threads < 2 || h >= (npy_intp)threads * AMX_BATCH_SHARE
                             ? 1 : ((int64_t)threads + h - 1) / h; /* blocks per element */
    AmxJob best = *job;
    double least = amx_grid_cost(&best, h, threads, g->n > g->m ? 1 : want,
                                 g->n > g->m ? want : 1);
    const double line = least;
    const int64_t kt = g->half ? 4 * g->k : g->k;
    for (int64_t gr = 1; gr <= um && gr <= want && want > 1 && kt >= AMX_GRID_MIN_K; ++gr) {
        const int64_t gc = (want + gr - 1) / gr;
        if (gc > un) continue;
        AmxJob trial = *job;
        const double cost = amx_grid_cost(&trial, h, threads, gr, gc);
        if (cost * AMX_GRID_GAIN < line && cost < least) least = cost, best = trial;
    }
    job->gr = best.gr, job->gc = best.gc, job->mb = best.mb, job->nb = best.nb;
}

/* The AMX type of an array of BF16 numbers (given as uint16) or F32 ones; AMX_NONE otherwise. */
static int amx_type(PyArrayObject *x) {
    const int t = PyArray_TYPE(x);
    return t == NPY_UINT16 ? AMX_BF16 : t == NPY_FLOAT ? AMX_F32 : t == NPY_HALF ? AMX_F16 : AMX_NONE;
}

/* amx_gemm(a, b, d, c, alpha, beta) -> bool: d[h] = alpha a[h] @ b[h] + beta c[h] for BF16
 * numbers a (h, m, k) and b (h, k, n) given as uint16 arrays, d and c (None: no c) of shape
 * (h, m, n) float32 or BF16 as uint16, any strides; products, sums and the epilogue in F32 on
 * the AMX tiles, shared out over the BLAS's pool (batch elements, else rows or columns of d).
 * Returns the bytes of the workers' buffers; None when the tiles are not there, the arrays do
 * not fit this, the buffers would exceed AMX_BUFFER_MAX or memory, or an operand holds
 * subnormal numbers (the tiles would read them as zero: d
 * may then be partly written; c is read only where it has not been written, unless c is d).
 * The caller rules out d overlapping a or b, or c other than d itself. */
static PyObject *amx_gemm(PyObject *self, PyObject *args) {
    PyArrayObject *a, *b, *d;
    PyObject *co;
    double alpha, beta;
    if (!PyArg_ParseTuple(args, "O!O!O!Odd", &PyArray_Type, &a, &PyArray_Type, &b, &PyArray_Type,
                          &d, &co, &alpha, &beta))
        return NULL;
    PyArrayObject *c = co == Py_None ? NULL : (PyArrayObject *)co;
    if (c && !PyArray_Check(co)) Py_RETURN_NONE;
    const int ta = amx_type(a);
    if ((ta != AMX_BF16 && ta != AMX_F16) || amx_type(b) != ta ||
        !amx_type(d) || (c && !amx_type(c)) || PyArray_NDIM(a) != 3 || PyArray_NDIM(b) != 3 ||
        PyArray_NDIM(d) != 3 || (c && PyArray_NDIM(c) != 3) || !PyArray_ISWRITEABLE(d) ||
        !PyArray_ISALIGNED(d) || !PyArray_ISALIGNED(a) || !PyArray_ISALIGNED(b) ||
        !PyArray_ISNOTSWAPPED(d) || (c && (!PyArray_ISALIGNED(c) || !PyArray_ISNOTSWAPPED(c))))
        Py_RETURN_NONE;
    const npy_intp h = PyArray_DIM(a, 0), m = PyArray_DIM(a, 1), k = PyArray_DIM(a, 2);
    const npy_intp n = PyArray_DIM(b, 2);
    if (PyArray_DIM(b, 0) != h || PyArray_DIM(b, 1) != k || PyArray_DIM(d, 0) != h ||
        PyArray_DIM(d, 1) != m || PyArray_DIM(d, 2) != n)
        Py_RETURN_NONE;
    for (int i = 0; c && i < 3; ++i)
        if (PyArray_DIM(c, i) != PyArray_DIM(d, i)) Py_RETURN_NONE;
    if (!amx_ready() && !amx_vectors_ready() && !((m == 1 || n == 1) && k > 0 && amx_gemv_ready()))
        Py_RETURN_NONE;
    if (h == 0 || m == 0 || n == 0) return PyLong_FromLong(0);
    AmxJob job;
    memset(&job, 0, sizeof job);
    AmxGemm *g = &job.g;
    g->m = m, g->n = n, g->k = k;
    g->A = PyArray_BYTES(a), g->ars = PyArray_STRIDE(a, 1), g->acs = PyArray_STRIDE(a, 2);
    g->B = PyArray_BYTES(b), g->brs = PyArray_STRIDE(b, 1), g->bcs = PyArray_STRIDE(b, 2);
    g->D = PyArray_BYTES(d), g->drs = PyArray_STRIDE(d, 1), g->dcs = PyArray_STRIDE(d, 2);
    g->dtype = amx_type(d);
    if (c) {
        g->C = PyArray_BYTES(c), g->crs = PyArray_STRIDE(c, 1), g->ccs = PyArray_STRIDE(c, 2);
        g->ctype = amx_type(c);
        job.sc = PyArray_STRIDE(c, 0);
    }
    g->alpha = (float)alpha, g->beta = (float)beta;
    g->half = ta == AMX_F16;
    job.sa = PyArray_STRIDE(a, 0), job.sb = PyArray_STRIDE(b, 0), job.sd = PyArray_STRIDE(d, 0);
    if (m == 1 && n > 1) { /* a row of D: D^T = B^T A^T, a GEMV on B^T */
        const AmxGemm t = *g;
        const npy_intp sa = job.sa;
        g->m = n, g->n = 1;
        g->A = t.B, g->ars = t.bcs, g->acs = t.brs;
        g->B = t.A, g->brs = t.acs, g->bcs = t.ars;
        g->drs = t.dcs, g->dcs = t.drs;
        g->crs = t.ccs, g->ccs = t.crs;
        job.sa = job.sb, job.sb = sa;
    }
    /* the workers: batch elements where there are enough, else blocks of each element's D
     * (amx_grid) */
    const double madds = (double)h * (double)m * (double)n * (double)k;
    const int threads = pool_workers(MAX_WORKERS, madds >= AMX_SPLIT_MIN);
    amx_grid(&job, h, threads);
    const npy_intp units = h * (npy_intp)(job.gr * job.gc);
    const int workers = units < threads ? (int)units : threads;
    const size_t bytes = amx_buffer_bytes(g);
    /* B is packed for the whole of k: a sum so long that this outgrows AMX_BUFFER_MAX per
     * worker is left to the F32 route, as is one whose buffers memory cannot hold */
    if (bytes > AMX_BUFFER_MAX) Py_RETURN_NONE;
    AmxJob jobs[MAX_WORKERS];
    int ready = 1;
    for (int w = 0; w < workers; ++w) {
        jobs[w] = job;
        jobs[w].u0 = units * w / workers, jobs[w].u1 = units * (w + 1) / workers;
        jobs[w].buf = scratch((npy_intp)bytes);
        ready = ready && jobs[w].buf;
    }
    if (!ready) {
        for (int w = 0; w < workers; ++w) free(jobs[w].buf);
        Py_RETURN_NONE;
    }
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    if (workers > 1) g_pool_run(workers, (void *)amx_task, jobs, (int)sizeof(AmxJob));
    else amx_task(&jobs[0]);
    for (int w = 0; w < workers; ++w) bad |= jobs[w].bad;
    Py_END_ALLOW_THREADS
    for (int w = 0; w < workers; ++w) free(jobs[w].buf);
    if (bad) Py_RETURN_NONE;
    return PyLong_FromSsize_t((Py_ssize_t)bytes * workers);
}

/* set_amx(level) -> int: allow the AMX tiles (2), only AVX512-BF16 vectors (1) or neither
 * (0); what BF16 GEMMs now run on (2 tiles, 1 vectors, 0 none). */
static PyObject *set_amx(PyObject *self, PyObject *arg) {
    const long level = PyLong_AsLong(arg);
    if (level == -1 && PyErr_Occurred()) return NULL;
    return PyLong_FromLong(amx_cap((int)level));
}

/* amx_ready() -> int: what BF16 GEMMs run on here: 2 the AMX tiles, 1 AVX512-BF16 vectors, 0
 * neither (this CPU, its OS, and the cap). */
static PyObject *amx_ready_py(PyObject *self, PyObject *unused) {
    return PyLong_FromLong(amx_ready() ? 2 : amx_vectors_ready() ? 1 : 0);
}

/* amx_gemv_ready() -> bool: whether amx_gemm runs BF16 GEMVs here (AVX-512, and the caps). */
static PyObject *amx_gemv_ready_py(PyObject *self, PyObject *unused) {
    return PyBool_FromLong(amx_gemv_ready());
}

/* ------------------------------------------------------------------ summed GEMMs on views */


static void summed_task(void *arg) {
    SummedJob *j = (SummedJob *)arg;
    const cval one = {1.0, 0.0};
    const int64_t rows = j->r1 - j->r0;
    if (rows <= 0) return;
    for (npy_intp q = j->q0; q < j->q1; ++q) {
        const char *l = j->L + j->r0 * j->lrow, *r = j->R;
        char *d = j->D + j->r0 * j->drow;
        npy_intp rem = q;
        for (int b = j->nk - 1; b >= 0; --b) { /* q's kept batch element */
            const npy_intp i = rem % j->kext[b];
            rem /= j->kext[b];
            l += i * j->kst[0][b];
            r += i * j->kst[1][b];
            d += i * j->kst[2][b];
        }
        npy_intp idx[MAXL] = {0};
        rem = j->s0; /* the first summed element of this worker's share */
        for (int b = j->nr - 1; b >= 0; --b) {
            idx[b] = rem % j->rext[b];
            rem /= j->rext[b];
            l += idx[b] * j->rst[0][b];
            r += idx[b] * j->rst[1][b];
        }
        if (j->C) scale_rows(j->dt, d, j->C + (d - j->D), j->drow, rows, j->n, j->cbe, j->cconj);
        for (npy_intp s = j->s0; s < j->s1; ++s) {
            const cval be = s == j->s0 ? j->be : one;
            if (!gemv_try(j->dt, j->item, j->ta, j->tb, rows, j->n, j->k, j->al, l, j->lda, r,
                          j->ldb, be, d, j->ldd))
                gemm_raw(j->dt, j->ta, j->tb, rows, j->n, j->k, j->al, l, j->lda, r, j->ldb,
                         be, d, j->ldd);
            for (int b = j->nr - 1; b >= 0; --b) {
                if (++idx[b] < j->rext[b]) {
                    l += j->rst[0][b];
                    r += j->rst[1][b];
                    break;
                }
                idx[b] = 0;
                l -= (j->rext[b] - 1) * j->rst[0][b];
                r -= (j->rext[b] - 1) * j->rst[1][b];
            }
        }
    }
}

/* D[0:m, 0:n] = be op(C[0:m, 0:n]) (op: conjugation where conj), both with rows `row` bytes
 * apart and contiguous columns: a GEMM's rows of D set from C just before the GEMM adds to
 * them (fuse_c), while they are in cache, instead of a pass over all of D first. */
static void scale_rows(int dt, char *D, const char *C, npy_intp row, npy_intp m, npy_intp n,
                       cval be, int conj) {
    for (npy_intp i = 0; i < m; ++i) {
        if (dt == DT_F32) {
            float *d = (float *)(D + i * row);
            const float *c = (const float *)(C + i * row), b = (float)be.re;
            for (npy_intp e = 0; e < n; ++e) d[e] = b * c[e];
        } else if (dt == DT_F64) {
            double *d = (double *)(D + i * row);
            const double *c = (const double *)(C + i * row), b = be.re;
            for (npy_intp e = 0; e < n; ++e) d[e] = b * c[e];
        } else if (dt == DT_C64) {
            float *d = (float *)(D + i * row);
            const float *c = (const float *)(C + i * row), br = (float)be.re, bi = (float)be.im;
            const float s = conj ? -1.0f : 1.0f;
            for (npy_intp e = 0; e < n; ++e) {
                const float cr = c[2 * e], ci = s * c[2 * e + 1];
                d[2 * e] = CMUL_RE(br, bi, cr, ci);
                d[2 * e + 1] = CMUL_IM(br, bi, cr, ci);
            }
        } else {
            double *d = (double *)(D + i * row);
            const double *c = (const double *)(C + i * row), br = be.re, bi = be.im;
            const double s = conj ? -1.0 : 1.0;
            for (npy_intp e = 0; e < n; ++e) {
                const double cr = c[2 * e], ci = s * c[2 * e + 1];
                d[2 * e] = CMUL_RE(br, bi, cr, ci);
                d[2 * e + 1] = CMUL_IM(br, bi, cr, ci);
            }
        }
    }
}

/* D[0:m, 0:n] += P (m x n, contiguous rows), D's rows `drow` bytes apart, its columns
 * contiguous: the partial sums of summed_gemm's other workers. */
static void add_rows(int dt, char *D, npy_intp drow, const char *P, npy_intp m, npy_intp n) {
    const npy_intp reals = n * (dt == DT_C64 || dt == DT_C128 ? 2 : 1);
    for (npy_intp i = 0; i < m; ++i) {
        if (dt == DT_F32 || dt == DT_C64) {
            float *d = (float *)(D + i * drow);
            const float *p = (const float *)P + i * reals;
            for (npy_intp e = 0; e < reals; ++e) d[e] += p[e];
        } else {
            double *d = (double *)(D + i * drow);
            const double *p = (const double *)P + i * reals;
            for (npy_intp e = 0; e < reals; ++e) d[e] += p[e];
        }
    }
}

/* Runs `job` (its s1 the count of summed elements) on up to `threads` workers, touching no
 * Python object: 0, or 1 when memory for partial sums ran out (nothing written). */
static int summed_run(const SummedJob *tmpl, npy_intp m, npy_intp kept, int threads) {
    SummedJob job = *tmpl;
    const npy_intp sums = job.s1, n = job.n, k = job.k;
    const int dt = job.dt;
    const npy_intp item = job.item;
    /* the workers share the kept batch elements where that balances (every worker as many,
     * or at least four each), else D's rows where there are enough; with no kept batch and
     * too few rows, the summed elements, each worker but the first into a partial D of its
     * own, added to D after (klcd,klad->ac at o=12, v=48: 144 GEMMs of 48^3, 0.65 ms on one
     * worker); else the batch anyway */
    int workers = threads < 1 ? 1 : threads > MAX_WORKERS ? MAX_WORKERS : threads;
    const double flops = 2.0 * (double)m * (double)n * (double)k * (double)sums;
    const int by_sum = kept == 1 && m < 2 * SUMMED_MIN_ROWS && sums >= 2 && workers > 1
                       && flops >= SUMMED_SPLIT_MIN_FLOPS * workers;
    const int by_batch = !by_sum && kept >= 2 && (kept % workers == 0 || kept >= 4 * workers
                                                   || m < 2 * SUMMED_MIN_ROWS);
    const npy_intp parts = by_sum ? sums : by_batch ? kept : m / SUMMED_MIN_ROWS;
    if (workers > parts) workers = parts < 1 ? 1 : (int)parts;
    SummedJob jobs[MAX_WORKERS];
    char *partial[MAX_WORKERS] = {0};
    if (by_sum) {
        for (int i = 1; i < workers; ++i) {
            partial[i] = scratch(m * n * item);
            if (!partial[i]) {
                for (int w = 1; w < i; ++w) free(partial[w]);
                return 1;
            }
        }
    }
    const int outside = workers > 1 ? blas_single_enter() : 0;
    if (outside > 1 && g_pool_run && !g_in_pool) {
        const int w = workers < outside ? workers : outside;
        const npy_intp total = by_sum ? sums : by_batch ? kept : m;
        for (int i = 0; i < w; ++i) {
            jobs[i] = job;
            const npy_intp lo_i = total * i / w, hi_i = total * (i + 1) / w;
            if (by_sum) {
                jobs[i].s0 = lo_i, jobs[i].s1 = hi_i;
                if (i > 0) {
                    jobs[i].D = partial[i], jobs[i].drow = n * item, jobs[i].ldd = n;
                    jobs[i].be.re = 0.0, jobs[i].be.im = 0.0;
                    jobs[i].C = NULL;
                }
            } else if (by_batch) {
                jobs[i].q0 = lo_i, jobs[i].q1 = hi_i;
            } else {
                jobs[i].r0 = lo_i, jobs[i].r1 = hi_i;
            }
        }
        g_pool_run(w, (void *)summed_task, jobs, (int)sizeof(SummedJob));
        if (by_sum)
            for (int i = 1; i < w; ++i) add_rows(dt, job.D, job.drow, partial[i], m, n);
    } else {
        summed_task(&job);
    }
    if (outside) blas_single_leave();
    for (int i = 1; i < workers; ++i) free(partial[i]);
    return 0;
}

/* summed_gemm(d, left, right, summed, threads) -> bool: d[..., m, n] = sum over the first
 * `summed` axes of left[s..., b..., m, k] @ right[s..., b..., k, n], for every element of the
 * other (kept) batch axes b, which d has too.
 *
 * A product that sums over labels looped around its GEMMs (a GEMV-like kbcd,kd->bc: 12 GEMVs
 * of 2304 x 48). Instead of every GEMM into a temporary on all of BLAS's threads (each
 * waking the pool), then a sum, each of `threads` workers takes its share of D (kept batch
 * elements, else rows) and runs all the GEMMs of that share with a one-thread BLAS,
 * accumulating in D (beta = 1 after the first): one pass over the operands, one hand-over
 * to the pool. False (nothing written) when the matrices are not ones BLAS reads in place,
 * or the datatypes differ. */
static PyObject *summed_gemm(PyObject *self, PyObject *args) {
    PyArrayObject *d, *lo, *ro;
    int summed, threads;
    if (!PyArg_ParseTuple(args, "O!O!O!ii", &PyArray_Type, &d, &PyArray_Type, &lo,
                          &PyArray_Type, &ro, &summed, &threads))
        return NULL;
    const int dt = dtype_of(d), nd = PyArray_NDIM(lo), nb = nd - 2, nk = nb - summed;
    if (dt < 0 || !g_gemm[dt] || dtype_of(lo) != dt || dtype_of(ro) != dt || summed < 0
        || nk < 0 || PyArray_NDIM(d) != nk + 2 || PyArray_NDIM(ro) != nd || nb > MAXL
        || !PyArray_ISWRITEABLE(d) || !PyArray_ISALIGNED(d) || !PyArray_ISALIGNED(lo)
        || !PyArray_ISALIGNED(ro) || !PyArray_ISNOTSWAPPED(d) || !PyArray_ISNOTSWAPPED(lo)
        || !PyArray_ISNOTSWAPPED(ro))
        Py_RETURN_FALSE;
    npy_intp kept = 1;
    for (int i = 0; i < nb; ++i) {
        if (PyArray_DIM(lo, i) != PyArray_DIM(ro, i) || PyArray_DIM(lo, i) < 1) Py_RETURN_FALSE;
        if (i >= summed) {
            if (PyArray_DIM(d, i - summed) != PyArray_DIM(lo, i)) Py_RETURN_FALSE;
            kept *= PyArray_DIM(lo, i);
        }
    }
    const npy_intp item = PyArray_ITEMSIZE(d);
    npy_intp m = PyArray_DIM(lo, nb), k = PyArray_DIM(lo, nb + 1), n = PyArray_DIM(ro, nb + 1);
    if (PyArray_DIM(ro, nb) != k || PyArray_DIM(d, nk) != m || PyArray_DIM(d, nk + 1) != n
        || m < 1 || n < 1 || k < 1)
        Py_RETURN_FALSE;
    /* the matrices: L (m, k), R (k, n), D (m, n); D column-major: the transposed problem
     * D^T = R^T L^T, row-major */
    npy_intp ls0 = PyArray_STRIDE(lo, nb), ls1 = PyArray_STRIDE(lo, nb + 1);
    npy_intp rs0 = PyArray_STRIDE(ro, nb), rs1 = PyArray_STRIDE(ro, nb + 1);
    npy_intp ds0 = PyArray_STRIDE(d, nk), ds1 = PyArray_STRIDE(d, nk + 1);
    const char *L = PyArray_BYTES(lo), *R = PyArray_BYTES(ro);
    SummedJob job;
    memset(&job, 0, sizeof(job));
    const int swapped = !(ds1 == item || n == 1) && (ds0 == item || m == 1);
    if (swapped) {
        npy_intp t0 = ls0, t1 = ls1, e = m;
        ls0 = rs1, ls1 = rs0, rs0 = t1, rs1 = t0;
        m = n, n = e;
        t0 = ds0, ds0 = ds1, ds1 = t0;
        const char *tp = L;
        L = R, R = tp;
    }
    if (m == 1) ds0 = n * item; /* the stride of an axis of extent 1 is never used */
    if (!(ds1 == item || n == 1) || ds0 <= 0 || ds0 % item || ds0 / item < n)
        Py_RETURN_FALSE;
    if (!blas_matrix(ls0, ls1, m, k, item, &job.ta, &job.lda)
        || !blas_matrix(rs0, rs1, k, n, item, &job.tb, &job.ldb))
        Py_RETURN_FALSE;
    job.dt = dt;
    job.item = (int)item;
    job.nr = summed;
    job.nk = nk;
    job.n = n;
    job.k = k;
    job.ldd = ds0 / item;
    for (int i = 0; i < nb; ++i) {
        const npy_intp sl = PyArray_STRIDE(lo, i), sr = PyArray_STRIDE(ro, i);
        if (i < summed) {
            job.rext[i] = PyArray_DIM(lo, i);
            job.rst[0][i] = swapped ? sr : sl;
            job.rst[1][i] = swapped ? sl : sr;
        } else {
            job.kext[i - summed] = PyArray_DIM(lo, i);
            job.kst[0][i - summed] = swapped ? sr : sl;
            job.kst[1][i - summed] = swapped ? sl : sr;
            job.kst[2][i - summed] = PyArray_STRIDE(d, i - summed);
        }
    }
    job.L = L;
    job.R = R;
    job.D = PyArray_BYTES(d);
    job.lrow = ls0; /* row i of L starts i * ls0 bytes in */
    job.drow = ds0;
    job.q0 = 0;
    job.q1 = kept;
    job.r0 = 0;
    job.r1 = m;
    npy_intp sums = 1;
    for (int i = 0; i < summed; ++i) sums *= job.rext[i];
    job.s0 = 0;
    job.s1 = sums;
    job.al.re = 1.0, job.al.im = 0.0, job.be.re = 0.0, job.be.im = 0.0;
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = summed_run(&job, m, kept, threads);
    Py_END_ALLOW_THREADS
    if (failed) return PyErr_NoMemory();
    Py_RETURN_TRUE;
}

/* The summed GEMMs of a compiled GEMM step (Program.nsum > 0) on bound operands: D =
 * alpha sum(...) + beta D (beta 0: D is not read); 1 when memory ran out (D untouched). */
static int run_summed(const Program *p, cval al, cval be, const char *A, const char *B,
                      char *D, const char *C, cval cbe) {
    SummedJob job = p->sjob;
    job.L = p->swap ? B : A;
    job.R = p->swap ? A : B;
    job.D = D;
    job.al = al;
    job.be = be;
    job.C = C;
    job.cbe = cbe;
    job.cconj = p->conj[2];
    return summed_run(&job, p->m, p->kept, g_get_threads ? g_get_threads() : 1);
}

/* ------------------------------------------------------------------ Python work on the pool */

typedef struct {
    PyObject *fn;
    Py_ssize_t index;
    PyObject **error; /* the first exception raised, as (type, value, traceback) */
    PyObject **error_tb, **error_value;
    pthread_mutex_t *lock;
} CallJob;

static void call_task(void *arg) {
    CallJob *j = (CallJob *)arg;
    PyGILState_STATE g = PyGILState_Ensure();
    const int was = g_in_pool;
    g_in_pool = 1;
    PyObject *r = PyObject_CallFunction(j->fn, "n", j->index);
    g_in_pool = was;
    if (r) {
        Py_DECREF(r);
    } else {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        pthread_mutex_lock(j->lock);
        if (!*j->error) {
            *j->error = t, *j->error_value = v, *j->error_tb = tb;
        } else {
            Py_XDECREF(t);
            Py_XDECREF(v);
            Py_XDECREF(tb);
        }
        pthread_mutex_unlock(j->lock);
    }
    PyGILState_Release(g);
}

/* pool_map(fn, count) -> bool: fn(i) for i < count, i = 0 on this thread and the others on
 * the BLAS's own pool threads, with a one-thread BLAS meanwhile; fn must release the GIL for
 * its heavy part (NumPy's copies and ufuncs, nogil kernels) for the calls to overlap. False
 * (nothing called) when there is no pool to run on: the caller uses threads of its own. The
 * first exception a call raised is raised here, once every call has returned. */
static PyObject *pool_map(PyObject *self, PyObject *args) {
    PyObject *fn;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "On", &fn, &count)) return NULL;
    if (count < 1 || count > MAX_WORKERS || !g_pool_run || g_in_pool) Py_RETURN_FALSE;
    const int outside = blas_single_enter();
    if (outside < count) {
        if (outside) blas_single_leave();
        Py_RETURN_FALSE;
    }
    CallJob jobs[MAX_WORKERS];
    PyObject *err = NULL, *err_value = NULL, *err_tb = NULL;
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    for (Py_ssize_t i = 0; i < count; ++i) {
        jobs[i].fn = fn;
        jobs[i].index = i;
        jobs[i].error = &err;
        jobs[i].error_value = &err_value;
        jobs[i].error_tb = &err_tb;
        jobs[i].lock = &lock;
    }
    Py_BEGIN_ALLOW_THREADS
    g_pool_run((int)count, (void *)call_task, jobs, (int)sizeof(CallJob));
    Py_END_ALLOW_THREADS
    blas_single_leave();
    if (err) {
        PyErr_Restore(err, err_value, err_tb);
        return NULL;
    }
    Py_RETURN_TRUE;
}

static PyObject *set_blas_threads(PyObject *self, PyObject *args) {
    unsigned long long set, get, pool = 0;
    if (!PyArg_ParseTuple(args, "KK|K", &set, &get, &pool)) return NULL;
    g_set_threads = (set_threads_t)(uintptr_t)set;
    g_get_threads = (get_threads_t)(uintptr_t)get;
    g_pool_run = (pool_run_t)(uintptr_t)pool;
    Py_RETURN_NONE;
}

static PyObject *set_tiles(PyObject *self, PyObject *args) {
    int cap;
    if (!PyArg_ParseTuple(args, "i", &cap)) return NULL;
    return PyLong_FromLong(tile_cap(cap));
}

static PyObject *tile_count(PyObject *self, PyObject *args) {
    return PyLong_FromUnsignedLongLong(__atomic_load_n(&g_tile_count, __ATOMIC_RELAXED));
}

/* ------------------------------------------------------------------ module */

static PyObject *set_blas(PyObject *self, PyObject *args) {
    unsigned long long s, d, c, z, vs = 0, vd = 0, vc = 0, vz = 0;
    int ilp64;
    if (!PyArg_ParseTuple(args, "KKKKp|KKKK", &s, &d, &c, &z, &ilp64, &vs, &vd, &vc, &vz))
        return NULL;
    g_gemm[DT_F32] = (void *)(uintptr_t)s;
    g_gemm[DT_F64] = (void *)(uintptr_t)d;
    g_gemm[DT_C64] = (void *)(uintptr_t)c;
    g_gemm[DT_C128] = (void *)(uintptr_t)z;
    int all = vs && vd && vc && vz; /* GEMVs all or none */
    g_gemv[DT_F32] = all ? (void *)(uintptr_t)vs : NULL;
    g_gemv[DT_F64] = all ? (void *)(uintptr_t)vd : NULL;
    g_gemv[DT_C64] = all ? (void *)(uintptr_t)vc : NULL;
    g_gemv[DT_C128] = all ? (void *)(uintptr_t)vz : NULL;
    g_ilp64 = ilp64;
    Py_RETURN_NONE;
}

static PyObject *set_untrusted(PyObject *self, PyObject *types) {
    if (!PyTuple_Check(types)) {
        PyErr_SetString(PyExc_TypeError, "set_untrusted takes a tuple of types");
        return NULL;
    }
    Py_INCREF(types);
    Py_XSETREF(g_untrusted, types);
    Py_RETURN_NONE;
}

static PyObject *has_blas(PyObject *self, PyObject *args) {
    return PyBool_FromLong(g_gemm[0] && g_gemm[1] && g_gemm[2] && g_gemm[3]);
}

/* layout_key(head, operands, first) -> head + (layouts,) | None: the cache key of a call
 * on exact NumPy arrays. `layouts` packs, for each of operands[first:], its number of axes,
 * datatype (number, byte order, item size), alignment, shape and byte strides into one bytes
 * object: exact (no hash stands in for a layout), and a third of the time of building the
 * same from Python tuples. None when an operand is not exactly an ndarray. */
static PyObject *layout_key(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "layout_key(head: tuple, operands: tuple, first: int)");
        return NULL;
    }
    PyObject *head = args[0], *ops = args[1];
    Py_ssize_t first = PyLong_AsSsize_t(args[2]);
    if (first == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(ops);
    if (first < 0 || first > n) {
        PyErr_SetString(PyExc_ValueError, "layout_key: first is out of range");
        return NULL;
    }
    int64_t local[256];
    int64_t *buf = local;
    Py_ssize_t len = 0, cap = 256;
    PyObject *key = NULL;
    for (Py_ssize_t i = first; i < n; ++i) {
        PyObject *x = PyTuple_GET_ITEM(ops, i);
        if (Py_TYPE(x) != &PyArray_Type) {
            key = Py_None;
            Py_INCREF(key);
            goto done;
        }
        PyArrayObject *arr = (PyArrayObject *)x;
        int nd = PyArray_NDIM(arr);
        if (len + 3 + 2 * (Py_ssize_t)nd > cap) {
            Py_ssize_t grown = 2 * (cap + 3 + 2 * (Py_ssize_t)nd);
            int64_t *more = PyMem_Malloc(sizeof(int64_t) * grown);
            if (!more) {
                PyErr_NoMemory();
                goto done;
            }
            memcpy(more, buf, sizeof(int64_t) * len);
            if (buf != local) PyMem_Free(buf);
            buf = more;
            cap = grown;
        }
        PyArray_Descr *descr = PyArray_DESCR(arr);
        buf[len++] = nd;
        buf[len++] = ((int64_t)descr->type_num << 16) |
                     ((int64_t)(unsigned char)descr->byteorder << 8) |
                     (PyArray_ISALIGNED(arr) ? 1 : 0);
        buf[len++] = (int64_t)PyArray_ITEMSIZE(arr);
        const npy_intp *dims = PyArray_DIMS(arr), *strides = PyArray_STRIDES(arr);
        for (int k = 0; k < nd; ++k) buf[len++] = (int64_t)dims[k];
        for (int k = 0; k < nd; ++k) buf[len++] = (int64_t)strides[k];
    }
    PyObject *layouts = PyBytes_FromStringAndSize((const char *)buf, sizeof(int64_t) * len);
    if (!layouts) goto done;
    Py_ssize_t nh = PyTuple_GET_SIZE(head);
    key = PyTuple_New(nh + 1);
    if (!key) {
        Py_DECREF(layouts);
        goto done;
    }
    for (Py_ssize_t i = 0; i < nh; ++i) {
        PyObject *item = PyTuple_GET_ITEM(head, i);
        Py_INCREF(item);
        PyTuple_SET_ITEM(key, i, item);
    }
    PyTuple_SET_ITEM(key, nh, layouts);
done:
    if (buf != local) PyMem_Free(buf);
    return key;
}

static PyObject *set_step_timing(PyObject *self, PyObject *arg) {
    (void)self;
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    g_step_timing = on;
    Py_RETURN_NONE;
}

static PyObject *step_times(PyObject *self, PyObject *args) {
    (void)self;
    int reset = 0;
    if (!PyArg_ParseTuple(args, "|p", &reset)) return NULL;
    PyObject *out = PyTuple_New(STEP_COUNT);
    if (!out) return NULL;
    for (int i = 0; i < STEP_COUNT; ++i) {
        PyObject *x = PyFloat_FromDouble(g_step_seconds[i]);
        if (!x) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, x);
        if (reset) g_step_seconds[i] = 0.0;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"set_step_timing", set_step_timing, METH_O,
     "set_step_timing(on): time each step of the programs run from now on (step_times)."},
    {"step_times", step_times, METH_VARARGS,
     "step_times([reset]) -> tuple: seconds spent packing, in GEMMs, storing, in blocked TTGT, "
     "streaming and in loop nests while step timing was on; reset: start again from 0."},
    {"set_blas", set_blas, METH_VARARGS,
     "set_blas(sgemm, dgemm, cgemm, zgemm, ilp64[, sgemv, dgemv, cgemv, zgemv]): addresses of "
     "the CBLAS GEMM (and GEMV) functions."},
    {"has_blas", has_blas, METH_NOARGS, "Whether GEMM functions were registered."},
    {"set_keep_bytes", set_keep_bytes, METH_VARARGS,
     "set_keep_bytes(n): keep at most n bytes of large scratch between calls (0: none)."},
    {"release_scratch", release_scratch, METH_NOARGS,
     "release_scratch() -> int: free the large scratch blocks kept between calls; the bytes "
     "given back."},
    {"tiled_copy", tiled_copy, METH_VARARGS,
     "tiled_copy(dst, src) -> bool: dst[...] = src through cache tiles when their fastest axes "
     "differ, run by run when short runs lie along the same axis; False (nothing written) "
     "when it does not apply."},
    {"packed_gemm", packed_gemm, METH_VARARGS,
     "packed_gemm(d, src, other, rows, block, threads) -> bool: d = pack(src) @ other, src "
     "packed and multiplied in blocks of `block` indices of its first axis; False when it does "
     "not apply."},
    {"summed_gemm", summed_gemm, METH_VARARGS,
     "summed_gemm(d, left, right, summed, threads) -> bool: d = sum over the first `summed` "
     "axes of left @ right, D shared by the workers; False when it does not apply."},
    {"pool_map", pool_map, METH_VARARGS,
     "pool_map(fn, count) -> bool: fn(i) for i < count on the BLAS's own threads (this one "
     "too); False when there is no such pool."},
    {"set_tiles", set_tiles, METH_VARARGS,
     "set_tiles(cap) -> int: run real GEMMs that fit on the register tiles with vectors of at "
     "most `cap` (0: no tiles, 1: AVX2, 2: AVX-512; 2 by default); the vectors they now run on "
     "(0 where the CPU has neither)."},
    {"tile_count", tile_count, METH_NOARGS,
     "tile_count() -> int: GEMMs run on the register tiles so far (all threads)."},
    {"set_blas_threads", set_blas_threads, METH_VARARGS,
     "set_blas_threads(set, get[, pool]): addresses of the BLAS's thread count setter and "
     "getter, and of OpenBLAS's gotoblas_pthread (0: none)."},
    {"convert_copy", convert_copy, METH_VARARGS,
     "convert_copy(dst, x, c, alpha, beta) -> bool: dst[...] = alpha * x + beta * c in F32, "
     "between F32, F16 and BF16 arrays (c None: absent); False (nothing written) when it does "
     "not apply."},
    {"low_sum", low_sum, METH_VARARGS,
     "low_sum(out, x, axes) -> bool: out (F32, x's shape with the summed axes of extent 1) = "
     "x (F16, BF16 or F32) summed over axes in F32; False (nothing written) when it does not "
     "apply."},
    {"set_bfloat16", set_bfloat16, METH_VARARGS,
     "set_bfloat16(type_num): the NumPy type number of ml_dtypes' bfloat16."},
    {"amx_gemm", amx_gemm, METH_VARARGS,
     "amx_gemm(a, b, d, c, alpha, beta) -> int | None: d[h] = alpha a[h] @ b[h] + beta c[h], "
     "BF16 numbers (as uint16) multiplied and summed in F32 on the AMX tiles; the bytes of the "
     "buffers it used, None (d not computed) when the tiles or the arrays do not fit."},
    {"amx_ready", amx_ready_py, METH_NOARGS,
     "amx_ready() -> int: what BF16 GEMMs run on here (2 tiles, 1 AVX512-BF16, 0 neither)."},
    {"amx_gemv_ready", amx_gemv_ready_py, METH_NOARGS,
     "amx_gemv_ready() -> bool: whether amx_gemm runs BF16 GEMVs here (AVX-512)."},
    {"set_amx", set_amx, METH_O,
     "set_amx(level) -> int: allow the AMX tiles (2), only AVX512-BF16 vectors (1) or neither "
     "(0); what BF16 GEMMs now run on."},
    {"layout_key", (PyCFunction)(void (*)(void))layout_key, METH_FASTCALL,
     "layout_key(head, operands, first) -> tuple | None: head + (the layouts of "
     "operands[first:] packed in bytes,), None unless each is exactly an ndarray."},
    {"set_untrusted", set_untrusted, METH_O,
     "set_untrusted(types): buffer exporters whose buffer does not bound their allocation."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cexec", "pytapp's compiled executor of lowered products.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__cexec(void) {
    import_array();
    if (PyType_Ready(&ProgramType) < 0 || PyType_Ready(&ChainType) < 0) return NULL;
    g_one = PyFloat_FromDouble(1.0);
    g_zero = PyFloat_FromDouble(0.0);
    g_execute = PyUnicode_InternFromString("execute");
    g_destroyed = PyUnicode_InternFromString("destroyed");
    if (!g_one || !g_zero || !g_execute || !g_destroyed) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Program", (PyObject *)&ProgramType) < 0 ||
        PyModule_AddObjectRef(m, "Chain", (PyObject *)&ChainType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
