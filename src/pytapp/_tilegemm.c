/* Register-tiled GEMMs (real and complex) that read their operands where they lie.
 *
 * D[m, n] = alpha op(A) B + beta D, row-major, B's rows and D's rows unit-stride. A tile of R
 * rows of D by NV vectors of its columns lives in registers through the whole sum: each step
 * loads one row of B (NV vectors, the last one masked) and broadcasts R elements of A from
 * wherever A holds them (any two strides, so op(A) costs nothing). Nothing is packed. BLAS
 * libraries pack both operands into blocks first, which pays off when all three extents are
 * large; where one is small (a batch of 1024x64x64 GEMMs, a 64x64 result summed over 1024),
 * the packing is what the time goes to: OpenBLAS ran 1024x64x64 and 64x64x1024 (F32, one
 * thread, Xeon with AVX-512) at 107 and 104 GFlop/s, these tiles at 139 and 129.
 *
 * Built twice through target attributes, for AVX-512F (16 F32 lanes, 32 registers) and for
 * AVX2 with FMA (8 lanes, 16 registers), the widest the CPU has chosen at run time (tile_isa);
 * on other CPUs the BLAS runs everything. Against OpenBLAS's AVX2 kernels (OPENBLAS_CORETYPE=
 * Haswell, one thread, on the Xeon), the AVX2 tiles ran 100 random GEMMs they take at 1.21x
 * its speed (geometric mean; 0.85x the slowest, F32 305x41x329 with A read transposed).
 * Complex tiles (C64, C128; AVX-512 only) ran 240 random GEMMs at 1.43-1.57x OpenBLAS's
 * speed (two threads; 0.89x the slowest), where OpenBLAS has no unpacked kernels. */
#include "_tilegemm.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define TILES_BUILT 1
#else
#define TILES_BUILT 0
#endif

/* The tiles take a GEMM whose B has at most TILE_B_MAX bytes, or at most TILE_LONG_N columns
 * (its sum then cut in blocks of TILE_KC, each block of B kept in the core's cache) and, in F32,
 * at most TILE_LONG_M rows: where m and n are large, the BLAS's packed blocks win. Measured on a
 * Xeon (2 MiB L2 per core) against OpenBLAS: F32 664x283x542 (a 613 KB B) 0.66x, 512^3 0.9x,
 * 636x69x1481 0.83x, 303x100x3476 0.87x; every B up to 256 KB 1.0-1.9x; F32 225x106x2891 1.11x,
 * 110x70x2342 1.27x, 22x69x3589 2.2x; F64 128x128x2048 1.41x, 556x55x4771 1.63x. On a CPU
 * with less L2 cache, TILE_B_MAX shrinks with it (tile_b_max). */
#define TILE_B_MAX (256 * 1024)
#define TILE_LONG_N 128
#define TILE_LONG_M 256
#define TILE_KC 512
/* Nor do they take a sum shorter than TILE_K_MIN with fewer than TILE_SMALL_MAX multiply-adds:
 * there OpenBLAS runs kernels of its own for small matrices, unpacked (see tile_fits). */
#define TILE_K_MIN 128
#define TILE_SMALL_MAX (1 << 20)
/* A read across its rows (op(A) transposed) is fetched TILE_PF rows ahead: the hardware's
 * prefetchers follow no stride of several KiB (F64 893x19x5314, A of 38 MB: 0.76x OpenBLAS's
 * speed without, 0.89x with). */
#define TILE_PF 16
/* ... where those rows hold more than this many bytes: a smaller A stays in the core's cache,
 * where the prefetches only take issue slots (128 F64 GEMMs 128x128x64, A^T of 64 KB each:
 * 2.5% slower with them). */
#define TILE_PF_MIN (1 << 20)
/* A transposed B is copied into rows only for at least this many rows of D times the item
 * (128 rows of F32, 64 of F64: the copy costs about what the tiles spend on a quarter of them),
 * and of at most TILE_COPY_MAX bytes (a buffer per thread, kept until the thread ends). */
#define TILE_COPY_ROWS 512
#define TILE_COPY_MAX (4 * 1024 * 1024)
/* Most rows of D per tile by its vectors per row: at least 8 accumulators keep both FMA units
 * busy through their 4-cycle latency, and accumulators, B's row and A's broadcast fit the
 * vector registers. AVX-512 (32 registers): 1-4 vectors, at most 24 accumulators (n of 13, F32,
 * on tiles of 6 rows: 0.71x OpenBLAS's speed). AVX2 (16 registers): 1-3 vectors, at most 12. */
#define NVMAX 4
#define MR_MAX 12
static const int64_t MR512[NVMAX + 1] = {0, 12, 8, 7, 6};
static const int64_t MR256[NVMAX + 1] = {0, 12, 6, 4, 0};
#define NVMAX512 4
#define NVMAX256 3
/* Complex tiles keep twice the accumulators per vector of D: half the rows, and at most 3
 * vectors on AVX-512 (tiles of 3 rows by 4 vectors spilled a vector of B: C128 259x72x1163
 * with A transposed ran at 0.88x OpenBLAS's speed, as 4 rows by 3 at 1.04x). */
static const int64_t CMR512[NVMAX + 1] = {0, 12, 6, 4, 0};
#define CNVMAX512 3
/* Fewest rows per worker when a tiled GEMM is shared out. */
#define TILE_ROWS_MIN 48

int64_t tile_rows_min(void) { return TILE_ROWS_MIN; }

int64_t tile_item(int dt) { return dt == TILE_F32 ? 4 : dt == TILE_C128 ? 16 : 8; }

#if TILES_BUILT

/* The widest vectors this CPU runs (TILE_AVX512, TILE_AVX2 with FMA, or TILE_NONE), asked once,
 * capped by tile_cap. */
static int g_cap = TILE_AVX512;

int tile_isa(void) {
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx512f")                                     ? TILE_AVX512
                : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? TILE_AVX2
                                                                                    : TILE_NONE;
    }
    const int cap = __atomic_load_n(&g_cap, __ATOMIC_RELAXED);
    return known < cap ? known : cap;
}

int tile_cap(int cap) {
    __atomic_store_n(&g_cap, cap < TILE_NONE ? TILE_NONE : cap > TILE_AVX512 ? TILE_AVX512 : cap,
                     __ATOMIC_RELAXED);
    return tile_isa();
}

int64_t tile_lanes(int dt) { return (tile_isa() == TILE_AVX512 ? 64 : 32) / tile_item(dt); }

/* A's R numbers (Z reals each) TILE_PF steps of the sum ahead, every cache line they span. */
#define PREFETCH_A(a, Z, T)                                                                   \
    do {                                                                                      \
        const T *ahead_ = (a) + (Z) * TILE_PF * sap;                                          \
        _Pragma("GCC unroll 12") for (int r_ = 0; r_ < R; r_ += 64 / (int)((Z) * sizeof(T)))  \
            _mm_prefetch((const char *)(ahead_ + (Z) * r_ * sai), _MM_HINT_T0);               \
        _mm_prefetch((const char *)(ahead_ + (Z) * (R - 1) * sai), _MM_HINT_T0);              \
    } while (0)

/* The body of one tile (R, NV: compile-time constants; T the element, V its vector of W).
 * FIRST declares what the last vector's LOADL and STOREL need from `rem`, its lanes in use. */
#define TILE_BODY(T, V, W, FIRST, SET1, LOAD, LOADL, FMA, MUL, STORE, STOREL, ZERO)           \
    FIRST;                                                                                    \
    const T alpha = alpha2[0], beta = beta2[0];                                               \
    (void)sa;                                                                                 \
    V c[R][NV];                                                                               \
    _Pragma("GCC unroll 12") for (int r = 0; r < R; r++)                                       \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) {                                \
            c[r][v] = ZERO();                                                                 \
            /* D's tile is read at the end: fetched while the sum runs */                     \
            if (beta != 0) _mm_prefetch((const char *)(D + r * ldd + W * v), _MM_HINT_T0);    \
        }                                                                                     \
    const T *b = B, *a = A;                                                                   \
    for (int64_t p = 0; p < k; p++, b += ldb, a += sap) {                                     \
        /* A read across its rows: no hardware prefetcher follows such a stride */           \
        if (pf) PREFETCH_A(a, 1, T);                                                          \
        V bv[NV];                                                                             \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                  \
            bv[v] = v == NV - 1 ? LOADL(b + W * v) : LOAD(b + W * v);                         \
        _Pragma("GCC unroll 12") for (int r = 0; r < R; r++) {                                 \
            V x = SET1(a[r * sai]);                                                           \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                              \
                c[r][v] = FMA(x, bv[v], c[r][v]);                                             \
        }                                                                                     \
    }                                                                                         \
    V al = SET1(alpha), be = SET1(beta);                                                      \
    _Pragma("GCC unroll 12") for (int r = 0; r < R; r++)                                       \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) {                                \
            T *d = D + r * ldd + W * v;                                                       \
            V x = MUL(al, c[r][v]);                                                           \
            if (beta != 0) /* D is not read when beta is 0 */                                 \
                x = FMA(be, v == NV - 1 ? LOADL(d) : LOAD(d), x);                             \
            if (v == NV - 1) STOREL(d, x);                                                    \
            else STORE(d, x);                                                                 \
        }

/* A tile's arguments: the sum's length, the lanes of the last vector in use (numbers, real or
 * complex), alpha and beta (2 numbers: real and imaginary parts), A (its strides in numbers)
 * and the sign of its imaginary parts (-1: conjugated), B's and D's rows. */
#define S_ARGS                                                                                \
    int64_t k, int rem, int pf, const float *alpha2, const float *A, int64_t sai, int64_t sap,\
        float sa, const float *B, int64_t ldb, const float *beta2, float *D, int64_t ldd
#define D_ARGS                                                                                \
    int64_t k, int rem, int pf, const double *alpha2, const double *A, int64_t sai,          \
        int64_t sap,                                                                          \
        double sa, const double *B, int64_t ldb, const double *beta2, double *D, int64_t ldd

/* AVX-512: the last vector through a mask register (masked loads and stores cost nothing). */
#define FIRST512 const __mmask16 last = (__mmask16)((1u << rem) - 1)
#define S512_LOADL(p) _mm512_maskz_loadu_ps(last, p)
#define S512_STOREL(p, x) _mm512_mask_storeu_ps(p, last, x)
#define D512_LOADL(p) _mm512_maskz_loadu_pd((__mmask8)last, p)
#define D512_STOREL(p, x) _mm512_mask_storeu_pd(p, (__mmask8)last, x)
#define STILE(R_, NV_)                                                                        \
    __attribute__((target("avx512f"))) static void stile_##R_##_##NV_(S_ARGS) {               \
        enum { R = R_, NV = NV_ };                                                            \
        TILE_BODY(float, __m512, 16, FIRST512, _mm512_set1_ps, _mm512_loadu_ps, S512_LOADL,   \
                  _mm512_fmadd_ps, _mm512_mul_ps, _mm512_storeu_ps, S512_STOREL,              \
                  _mm512_setzero_ps)                                                          \
    }
#define DTILE(R_, NV_)                                                                        \
    __attribute__((target("avx512f"))) static void dtile_##R_##_##NV_(D_ARGS) {               \
        enum { R = R_, NV = NV_ };                                                            \
        TILE_BODY(double, __m512d, 8, FIRST512, _mm512_set1_pd, _mm512_loadu_pd, D512_LOADL,  \
                  _mm512_fmadd_pd, _mm512_mul_pd, _mm512_storeu_pd, D512_STOREL,              \
                  _mm512_setzero_pd)                                                          \
    }

/* AVX2: the last vector through a mask of lanes when partial (masked stores are slow on some
 * CPUs: a whole last vector is loaded and stored plainly). */
#define FIRST256S                                                                             \
    const int whole = rem == 8;                                                               \
    const __m256i last =                                                                      \
        _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define FIRST256D                                                                             \
    const int whole = rem == 4;                                                               \
    const __m256i last =                                                                      \
        _mm256_cmpgt_epi64(_mm256_set1_epi64x(rem), _mm256_setr_epi64x(0, 1, 2, 3))
#define S256_LOADL(p) (whole ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, last))
#define S256_STOREL(p, x) (whole ? _mm256_storeu_ps(p, x) : _mm256_maskstore_ps(p, last, x))
#define D256_LOADL(p) (whole ? _mm256_loadu_pd(p) : _mm256_maskload_pd(p, last))
#define D256_STOREL(p, x) (whole ? _mm256_storeu_pd(p, x) : _mm256_maskstore_pd(p, last, x))
#define STILE2(R_, NV_)                                                                       \
    __attribute__((target("avx2,fma"))) static void stile2_##R_##_##NV_(S_ARGS) {             \
        enum { R = R_, NV = NV_ };                                                            \
        TILE_BODY(float, __m256, 8, FIRST256S, _mm256_set1_ps, _mm256_loadu_ps, S256_LOADL,   \
                  _mm256_fmadd_ps, _mm256_mul_ps, _mm256_storeu_ps, S256_STOREL,              \
                  _mm256_setzero_ps)                                                          \
    }
#define DTILE2(R_, NV_)                                                                       \
    __attribute__((target("avx2,fma"))) static void dtile2_##R_##_##NV_(D_ARGS) {             \
        enum { R = R_, NV = NV_ };                                                            \
        TILE_BODY(double, __m256d, 4, FIRST256D, _mm256_set1_pd, _mm256_loadu_pd, D256_LOADL, \
                  _mm256_fmadd_pd, _mm256_mul_pd, _mm256_storeu_pd, D256_STOREL,              \
                  _mm256_setzero_pd)                                                          \
    }
#define TILES4(M, NV) M(1, NV) M(2, NV) M(3, NV) M(4, NV)
#define TILES6(M, NV) TILES4(M, NV) M(5, NV) M(6, NV)
#define TILES7(M, NV) TILES6(M, NV) M(7, NV)
#define TILES8(M, NV) TILES7(M, NV) M(8, NV)
#define TILES12(M, NV) TILES8(M, NV) M(9, NV) M(10, NV) M(11, NV) M(12, NV)
TILES12(STILE, 1) TILES8(STILE, 2) TILES7(STILE, 3) TILES6(STILE, 4)
TILES12(DTILE, 1) TILES8(DTILE, 2) TILES7(DTILE, 3) TILES6(DTILE, 4)
TILES12(STILE2, 1) TILES6(STILE2, 2) TILES4(STILE2, 3)
TILES12(DTILE2, 1) TILES6(DTILE2, 2) TILES4(DTILE2, 3)

/* Complex tiles: each element of A broadcast as its real and its imaginary part into two sets
 * of accumulators (times B's row, real and imaginary parts interleaved); at the end each pair
 * combines into the sums of the products (FMADDSUB with the second set's parts swapped; FMSUBADD
 * where `sa` is -1: A conjugated), then alpha's and beta's products the same way. Twice the
 * accumulators of a real tile: half its rows. */
#define CTILE_BODY(T, V, W, FIRST, SET1, LOAD, LOADL, FMA, MUL, ADD, FMADDSUB, FMSUBADD, SWAP,  \
                   STORE, STOREL, ZERO)                                                       \
    const int rem = 2 * crem; /* lanes of the last vector in use, in reals */                 \
    FIRST;                                                                                    \
    const int beta_nz = beta2[0] != 0 || beta2[1] != 0;                                       \
    V cr[R][NV], ci[R][NV];                                                                   \
    _Pragma("GCC unroll 12") for (int r = 0; r < R; r++)                                       \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) {                                \
            cr[r][v] = ci[r][v] = ZERO();                                                     \
            if (beta_nz) _mm_prefetch((const char *)(D + 2 * r * ldd + W * v), _MM_HINT_T0);  \
        }                                                                                     \
    const T *b = B, *a = A;                                                                   \
    for (int64_t p = 0; p < k; p++, b += 2 * ldb, a += 2 * sap) {                             \
        if (pf) PREFETCH_A(a, 2, T);                                                          \
        V bv[NV];                                                                             \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                  \
            bv[v] = v == NV - 1 ? LOADL(b + W * v) : LOAD(b + W * v);                         \
        _Pragma("GCC unroll 12") for (int r = 0; r < R; r++) {                                 \
            V xr = SET1(a[2 * r * sai]), xi = SET1(a[2 * r * sai + 1]);                       \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) {                            \
                cr[r][v] = FMA(xr, bv[v], cr[r][v]);                                          \
                ci[r][v] = FMA(xi, bv[v], ci[r][v]);                                          \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    const V one = SET1((T)1), alr = SET1(alpha2[0]), ali = SET1(alpha2[1]);                   \
    const V ber = SET1(beta2[0]), bei = SET1(beta2[1]);                                       \
    _Pragma("GCC unroll 12") for (int r = 0; r < R; r++)                                       \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) {                                \
            T *d = D + 2 * r * ldd + W * v;                                                   \
            const V s = sa < 0 ? FMSUBADD(one, cr[r][v], SWAP(ci[r][v])) /* conj(A) B */     \
                               : FMADDSUB(one, cr[r][v], SWAP(ci[r][v])); /* A B */           \
            V x = FMADDSUB(s, alr, MUL(SWAP(s), ali));           /* times alpha */           \
            if (beta_nz) { /* D is not read when beta is 0 */                                 \
                const V y = v == NV - 1 ? LOADL(d) : LOAD(d);                                 \
                x = ADD(x, FMADDSUB(y, ber, MUL(SWAP(y), bei)));                              \
            }                                                                                 \
            if (v == NV - 1) STOREL(d, x);                                                    \
            else STORE(d, x);                                                                 \
        }

#define CS_ARGS                                                                               \
    int64_t k, int crem, int pf, const float *alpha2, const float *A, int64_t sai,           \
        int64_t sap,                                                                          \
        float sa, const float *B, int64_t ldb, const float *beta2, float *D, int64_t ldd
#define CD_ARGS                                                                               \
    int64_t k, int crem, int pf, const double *alpha2, const double *A, int64_t sai,         \
        int64_t sap,                                                                          \
        double sa, const double *B, int64_t ldb, const double *beta2, double *D, int64_t ldd
#define S512_SWAP(x) _mm512_permute_ps(x, 0xB1)
#define D512_SWAP(x) _mm512_permute_pd(x, 0x55)
#define S256_SWAP(x) _mm256_permute_ps(x, 0xB1)
#define D256_SWAP(x) _mm256_permute_pd(x, 0x5)
#define CSTILE(R_, NV_)                                                                       \
    __attribute__((target("avx512f"))) static void cstile_##R_##_##NV_(CS_ARGS) {             \
        enum { R = R_, NV = NV_ };                                                            \
        CTILE_BODY(float, __m512, 16, FIRST512, _mm512_set1_ps, _mm512_loadu_ps, S512_LOADL,  \
                   _mm512_fmadd_ps, _mm512_mul_ps, _mm512_add_ps, _mm512_fmaddsub_ps, _mm512_fmsubadd_ps,         \
                   S512_SWAP, _mm512_storeu_ps, S512_STOREL, _mm512_setzero_ps)               \
    }
#define CDTILE(R_, NV_)                                                                       \
    __attribute__((target("avx512f"))) static void cdtile_##R_##_##NV_(CD_ARGS) {             \
        enum { R = R_, NV = NV_ };                                                            \
        CTILE_BODY(double, __m512d, 8, FIRST512, _mm512_set1_pd, _mm512_loadu_pd, D512_LOADL, \
                   _mm512_fmadd_pd, _mm512_mul_pd, _mm512_add_pd, _mm512_fmaddsub_pd, _mm512_fmsubadd_pd,         \
                   D512_SWAP, _mm512_storeu_pd, D512_STOREL, _mm512_setzero_pd)               \
    }
TILES12(CSTILE, 1) TILES6(CSTILE, 2) TILES4(CSTILE, 3)
TILES12(CDTILE, 1) TILES6(CDTILE, 2) TILES4(CDTILE, 3)

typedef void (*stile_t)(S_ARGS);
typedef void (*dtile_t)(D_ARGS);
#define ROW3(P, NV) 0, P##_1_##NV, P##_2_##NV, P##_3_##NV
#define ROW4(P, NV) ROW3(P, NV), P##_4_##NV
#define ROW6(P, NV) ROW4(P, NV), P##_5_##NV, P##_6_##NV
#define ROW7(P, NV) ROW6(P, NV), P##_7_##NV
#define ROW8(P, NV) ROW7(P, NV), P##_8_##NV
#define ROW12(P, NV) ROW8(P, NV), P##_9_##NV, P##_10_##NV, P##_11_##NV, P##_12_##NV
#define TABLE512(P) {{0}, {ROW12(P, 1)}, {ROW8(P, 2)}, {ROW7(P, 3)}, {ROW6(P, 4)}}
#define TABLE256(P) {{0}, {ROW12(P, 1)}, {ROW6(P, 2)}, {ROW4(P, 3)}, {0}}
static const stile_t stiles[NVMAX + 1][MR_MAX + 1] = TABLE512(stile);
static const dtile_t dtiles[NVMAX + 1][MR_MAX + 1] = TABLE512(dtile);
static const stile_t stiles2[NVMAX + 1][MR_MAX + 1] = TABLE256(stile2);
static const dtile_t dtiles2[NVMAX + 1][MR_MAX + 1] = TABLE256(dtile2);
#define CTABLE512(P) {{0}, {ROW12(P, 1)}, {ROW6(P, 2)}, {ROW4(P, 3)}, {0}}
static const stile_t cstiles[NVMAX + 1][MR_MAX + 1] = CTABLE512(cstile);
static const dtile_t cdtiles[NVMAX + 1][MR_MAX + 1] = CTABLE512(cdtile);


/* D swept by tiles of at most MR rows (for its widest panel; 13 rows of 6 as 5, 4, 4) by panels
 * of at most NVMAX vectors of its columns (5 vectors as 3 and 2, the masked one last), in blocks
 * of rows whose part of A fills about A_BLOCK_BYTES and whose part of D about D_BLOCK_BYTES:
 * within a block, each column panel of B is swept down the block's tiles before the next. A's
 * block stays in the core's first-level cache across the panels, each panel of B across the
 * tiles, and D is written a few rows at a time (over short sums D's traffic is what counts); a
 * sum longer than TILE_KC runs in blocks of it, the first with beta, the others added to D.
 * Against panel after panel down all rows, on one thread of a Xeon: F32 512x512x64 86 GFlop/s
 * against 82, F64 319x657x18 (batched) 0.34-0.52 ms against 0.59; F32 65x194x273 33-45 us
 * against 45-55 (OpenBLAS 55-60). */
#define A_BLOCK_BYTES 16384
#define D_BLOCK_BYTES 32768
/* Z: reals per number (1 real, 2 complex); W: numbers per vector. */
#define DRIVER(NAME, T, Z, W, TABLE, NVM, MRT)                                                \
    static void NAME(int64_t m, int64_t n, int64_t kall, const T *alpha, const T *A0,         \
                     int64_t sai, int64_t sap, T sa, const T *B0, int64_t ldb, const T *beta0,\
                     T *D, int64_t ldd) {                                                     \
        const int64_t vectors = (n + W - 1) / W, panels = (vectors + NVM - 1) / NVM;          \
        const int64_t mr_max = MRT[(vectors + panels - 1) / panels];                          \
        const int64_t tiles = (m + mr_max - 1) / mr_max;                                      \
        const int64_t kc = kall < TILE_KC ? kall : TILE_KC;                                   \
        const int64_t bytes = Z * (int64_t)sizeof(T);                                         \
        int64_t block = A_BLOCK_BYTES / (mr_max * kc * bytes);                                \
        const int64_t d_block = D_BLOCK_BYTES / (mr_max * n * bytes);                         \
        if (d_block < block) block = d_block;                                                 \
        if (block < 1) block = 1;                                                             \
        const T one[2] = {(T)1, (T)0};                                                        \
        /* A read across its rows, too large for the core's cache: fetched ahead */          \
        const int pf = sap != 1 && kall * m * bytes > TILE_PF_MIN;                            \
        for (int64_t k0 = 0; k0 < kall; k0 += kc) { /* D sums the blocks of the sum */       \
            const int64_t k = kall - k0 < kc ? kall - k0 : kc;                                \
            const T *beta = k0 ? one : beta0, *A = A0 + Z * k0 * sap, *B = B0 + Z * k0 * ldb; \
            for (int64_t t0 = 0; t0 < tiles; t0 += block) {                                   \
                const int64_t t1 = t0 + block < tiles ? t0 + block : tiles;                   \
                for (int64_t q = 0; q < panels; ++q) {                                        \
                    const int64_t v0 = vectors * q / panels;                                  \
                    const int64_t nv = vectors * (q + 1) / panels - v0;                       \
                    const int64_t j = v0 * W, w = n - j < nv * W ? n - j : nv * W;            \
                    const int rem = (int)(w - (nv - 1) * W); /* lanes of the last vector */  \
                    for (int64_t t = t0; t < t1; ++t) {                                       \
                        const int64_t i = m * t / tiles, mr = m * (t + 1) / tiles - i;        \
                        TABLE[nv][mr](k, rem, pf, alpha, A + Z * i * sai, sai, sap, sa,       \
                                      B + Z * j, ldb, beta, D + Z * (i * ldd + j), ldd);      \
                    }                                                                         \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    }
DRIVER(tiles_f32, float, 1, 16, stiles, NVMAX512, MR512)
DRIVER(tiles_f64, double, 1, 8, dtiles, NVMAX512, MR512)
DRIVER(tiles2_f32, float, 1, 8, stiles2, NVMAX256, MR256)
DRIVER(tiles2_f64, double, 1, 4, dtiles2, NVMAX256, MR256)
DRIVER(tiles_c64, float, 2, 8, cstiles, CNVMAX512, CMR512)
DRIVER(tiles_c128, double, 2, 4, cdtiles, CNVMAX512, CMR512)

/* The largest B (bytes) the tiles take whatever its shape: an eighth of the core's L2 cache
 * (256 KiB of the Xeon's 2 MiB, where it was measured), at most 256 KiB, at least 64. */
static int64_t tile_b_max(void) {
    static int64_t known = 0;
    if (!known) {
        long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
        int64_t b = l2 > 0 ? (int64_t)l2 / 8 : TILE_B_MAX;
        known = b > TILE_B_MAX ? TILE_B_MAX : b < TILE_B_MAX / 4 ? TILE_B_MAX / 4 : b;
    }
    return known;
}

int tile_fits(int dt, int tb, int64_t m, int64_t n, int64_t k) {
    if (dt < TILE_F32 || dt > TILE_C128 || m < 1 || n < 1 || k < 1 || tile_isa() == TILE_NONE)
        return 0;
    /* complex tiles on AVX-512 only: AVX2's 16 registers hold too few accumulators (against
     * OpenBLAS's Haswell kernels: 0.97x over 100 random GEMMs, 0.56x the slowest) */
    if (dt >= TILE_C64 && tile_isa() != TILE_AVX512) return 0;
    const int64_t item = tile_item(dt);
    /* short sums of small real products: OpenBLAS's own unpacked kernels for small matrices are
     * as fast (F32 64x64x32: 0.95x, 696x64x16: 0.90x, F64 200x64x64: 0.91x against 1.0-1.5x
     * from a sum of 128 or 2^20 multiply-adds on); it has none for complex ones (C64 and C128,
     * sums of 4 to 64: 1.1-1.9x) */
    if (dt < TILE_C64 && k < TILE_K_MIN && m * n * k < TILE_SMALL_MAX) return 0;
    const int64_t bytes = k * n * item;
    if (bytes > tile_b_max() && (n > TILE_LONG_N || (item == 4 && m > TILE_LONG_M))) return 0;
    /* copying a transposed B costs about a cycle per element, what the tiles spend on m / 32
     * (F32) or m / 16 (F64) of its multiply-adds: 30x277x20 (F64) ran at 0.84x OpenBLAS's speed,
     * 43x83x114 (F32) at 0.68x */
    if (tb != 111 && (m * item < TILE_COPY_ROWS || bytes > TILE_COPY_MAX)) return 0;
    /* at least 3/4 of the vector lanes do work (n of 5 in F32: 0.53x OpenBLAS's speed), and a
     * single vector is whole (n of 13, F32: 0.83x; OpenBLAS has kernels of its own for such);
     * two or more vectors, the last one masked or not, beat it (AVX-512, one thread: F32 n of
     * 24-32 1.2-1.6x, F64 n of 12-16 1.1-2.1x; AVX2 against its Haswell kernels, F32 n of
     * 12-16 1.4-1.6x, F64 n of 6-8 1.6-2.2x) */
    const int64_t lanes = tile_lanes(dt), used = (n + lanes - 1) / lanes * lanes;
    return 4 * n >= 3 * used && n >= lanes;
}

/* A thread's copy of a transposed B, reused across calls and freed when the thread ends. */
typedef struct {
    void *rows;
    size_t size;
} Rows;
static pthread_key_t g_rows_key;
static pthread_once_t g_rows_once = PTHREAD_ONCE_INIT;

static void rows_free(void *p) {
    free(((Rows *)p)->rows);
    free(p);
}

static void rows_key(void) { (void)pthread_key_create(&g_rows_key, rows_free); }

void *tile_buffer(size_t size) {
    (void)pthread_once(&g_rows_once, rows_key);
    Rows *r = pthread_getspecific(g_rows_key);
    if (!r) {
        r = calloc(1, sizeof(Rows));
        if (!r || pthread_setspecific(g_rows_key, r) != 0) {
            free(r);
            return NULL;
        }
    }
    if (size > r->size) {
        void *grown = realloc(r->rows, size);
        if (!grown) return NULL;
        r->rows = grown;
        r->size = size;
    }
    return r->rows;
}

/* rows[p, j] = B[j, p] (row stride ldr, conjugated with CONJ) in blocks of 16 of B's rows (a
 * few KiB, kept in cache while each row of the copy gets 16 consecutive elements). */
#define COPY_TRANSPOSED(T, CONJ)                                                              \
    for (int64_t j0 = 0; j0 < n; j0 += 16) {                                                  \
        const int64_t j1 = j0 + 16 < n ? j0 + 16 : n;                                         \
        for (int64_t p = 0; p < k; ++p) {                                                     \
            T *out = (T *)rows + p * ldr;                                                     \
            for (int64_t j = j0; j < j1; ++j) out[j] = CONJ(((const T *)B)[j * ldb + p]);    \
        }                                                                                     \
    }
typedef struct {
    float re, im;
} cfloat;
typedef struct {
    double re, im;
} cdouble;
#define AS_IS(x) (x)
static inline cfloat conj_f(cfloat x) { return (cfloat){x.re, -x.im}; }
static inline cdouble conj_d(cdouble x) { return (cdouble){x.re, -x.im}; }

void tile_transpose(int dt, int conj, const void *B, int64_t ldb, int64_t n, int64_t k,
                    void *rows, int64_t ldr) {
    switch (dt) {
        case TILE_F32: COPY_TRANSPOSED(float, AS_IS) break;
        case TILE_F64: COPY_TRANSPOSED(double, AS_IS) break;
        case TILE_C64:
            if (conj) COPY_TRANSPOSED(cfloat, conj_f) else COPY_TRANSPOSED(cfloat, AS_IS)
            break;
        default:
            if (conj) COPY_TRANSPOSED(cdouble, conj_d) else COPY_TRANSPOSED(cdouble, AS_IS)
            break;
    }
}

void tile_gemm(int dt, int ta, int64_t m, int64_t n, int64_t k, const double *alpha,
               const void *A, int64_t lda, const void *B, int64_t ldb, const double *beta,
               void *D, int64_t ldd) {
    const int64_t sai = ta == 111 ? lda : 1, sap = ta == 111 ? 1 : lda;
    const int wide = tile_isa() == TILE_AVX512;
    const float af[2] = {(float)alpha[0], (float)alpha[1]}, bf[2] = {(float)beta[0],
                                                                      (float)beta[1]};
    const float sf = ta == 113 ? -1.0f : 1.0f; /* ConjTrans: A's imaginary parts negated */
    const double sd = ta == 113 ? -1.0 : 1.0;
    switch (dt) {
        case TILE_F32:
            (wide ? tiles_f32 : tiles2_f32)(m, n, k, af, (const float *)A, sai, sap, sf,
                                            (const float *)B, ldb, bf, (float *)D, ldd);
            break;
        case TILE_F64:
            (wide ? tiles_f64 : tiles2_f64)(m, n, k, alpha, (const double *)A, sai, sap, sd,
                                            (const double *)B, ldb, beta, (double *)D, ldd);
            break;
        case TILE_C64:
            tiles_c64(m, n, k, af, (const float *)A, sai, sap, sf, (const float *)B, ldb, bf,
                      (float *)D, ldd);
            break;
        default:
            tiles_c128(m, n, k, alpha, (const double *)A, sai, sap, sd, (const double *)B, ldb,
                       beta, (double *)D, ldd);
            break;
    }
}

#else /* not built for this compiler or CPU family: the BLAS runs everything */

int tile_isa(void) { return TILE_NONE; }

int tile_cap(int cap) {
    (void)cap;
    return TILE_NONE;
}

int64_t tile_lanes(int dt) { return 64 / tile_item(dt); }

int tile_fits(int dt, int tb, int64_t m, int64_t n, int64_t k) {
    (void)dt, (void)tb, (void)m, (void)n, (void)k;
    return 0;
}

void *tile_buffer(size_t size) {
    (void)size;
    return NULL;
}

void tile_transpose(int dt, int conj, const void *B, int64_t ldb, int64_t n, int64_t k,
                    void *rows, int64_t ldr) {
    (void)dt, (void)conj, (void)B, (void)ldb, (void)n, (void)k, (void)rows, (void)ldr;
}

void tile_gemm(int dt, int ta, int64_t m, int64_t n, int64_t k, const double *alpha,
               const void *A, int64_t lda, const void *B, int64_t ldb, const double *beta,
               void *D, int64_t ldd) {
    (void)dt, (void)ta, (void)m, (void)n, (void)k, (void)alpha, (void)A, (void)lda, (void)B;
    (void)ldb, (void)beta, (void)D, (void)ldd;
}

#endif
