/* BF16 GEMMs with F32 sums on the AMX tile unit (see _amx.c). */
#ifndef PYTAPP_AMX_H
#define PYTAPP_AMX_H

#include <stddef.h>
#include <stdint.h>

/* Whether this CPU and its OS run AMX-BF16 tiles for this process (asked once: the first call
 * asks Linux for the tiles' register state), under the cap of amx_cap. */
int amx_ready(void);

/* Allow the tiles (2), only AVX512-BF16 vectors for GEMMs (1), or neither and no GEMVs (0)
 * (for comparisons and tests); returns what GEMMs now run on: 2 tiles, 1 vectors, 0 none. */
int amx_cap(int level);

/* Whether GEMMs run on AVX512-BF16 vectors (VDPBF16PS) where the tiles are not there (AMD Zen
 * 4, Cooper Lake): the same packing, a tenth of the tiles' rate or less. */
int amx_vectors_ready(void);

/* Whether amx_gemm_part runs GEMVs (n = 1) here: they need AVX-512 (F and BW) vectors, not the
 * tiles (capped by amx_cap and by the register tiles' cap, tile_cap). */
int amx_gemv_ready(void);

/* The types of D and C (AMX_F16: F16 numbers). */
enum { AMX_NONE = 0, AMX_F32 = 1, AMX_BF16 = 2, AMX_F16 = 3 };

/* One GEMM D[m, n] = alpha A[m, k] B[k, n] + beta C[m, n] of BF16 numbers A and B, the
 * products and sums in F32 (the tiles multiply BF16 pairs exactly and add in F32), the
 * epilogue in F32 too, rounded once into D's type (F32 or BF16, as C's). Every operand is read
 * or written where it lies, any strides (in bytes); C (ctype AMX_NONE: none) may be D itself
 * (same strides). */
typedef struct {
    int64_t m, n, k;
    const char *A;
    int64_t ars, acs;
    const char *B;
    int64_t brs, bcs;
    char *D;
    int64_t drs, dcs;
    int dtype;
    const char *C;
    int64_t crs, ccs;
    int ctype;
    float alpha, beta;
    /* A and B hold F16 numbers: each is split exactly into two BF16 numbers (hi + lo) and the
     * tiles add the four products of every multiply-add, all exact in F32 */
    int half;
} AmxGemm;

/* What one part of rows x cols of D costs, in multiply-adds per step of the sum: its
 * multiply-adds plus the packing of its rows of A (again for each block of columns) and of its
 * columns of B, weighted by what packing a number costs against a multiply-add (on the tiles
 * or on vectors). Workers that share a GEMM out compare ways to cut D with it. */
double amx_part_cost(const AmxGemm *g, int64_t rows, int64_t cols);

/* Bytes of buffer amx_gemm_part needs. */
size_t amx_buffer_bytes(const AmxGemm *g);

/* D[m0:m1, n0:n1] on the calling thread (on the tiles where amx_ready, else on AVX512-BF16
 * vectors, which amx_vectors_ready must allow; a GEMV, n = 1, on AVX-512 vectors, which
 * amx_gemv_ready must allow), with `buf` (amx_buffer_bytes) for the packed operands
 * and the F32 sums. 0: done; 1: an operand holds a subnormal number, which the tiles would read
 * as zero (this part of D may then be partly written: the caller computes D another way, from
 * C untouched only where C is not D). */
int amx_gemm_part(const AmxGemm *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1, void *buf);

#endif
