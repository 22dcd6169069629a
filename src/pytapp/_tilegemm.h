/* Register-tiled real GEMMs that read their operands where they lie (see _tilegemm.c). */
#ifndef PYTAPP_TILEGEMM_H
#define PYTAPP_TILEGEMM_H

#include <stdint.h>

/* Whether this CPU runs the tiles (AVX-512F, with the operating system's support), asked once. */
int tile_supported(void);

/* Whether tile_gemm takes this row-major GEMM of real `item`-byte elements (4: F32, 8: F64):
 * D[m, n] = alpha op(A)[m, k] op(B)[k, n] + beta D, `tb` a CBLAS transpose code. */
int tile_fits(int item, int tb, int64_t m, int64_t n, int64_t k);

/* Rows of D a worker of a shared-out tiled GEMM takes at least. */
int64_t tile_rows_min(void);

/* B stored [n, k] (row stride ldb) copied into this thread's buffer as [k, n] rows, for
 * tile_gemm; NULL when memory ran out. The buffer stays valid until this thread's next call. */
const void *tile_rows(int item, const void *B, int64_t ldb, int64_t n, int64_t k);

/* Run what tile_fits took, on the calling thread, B given as rows ([k, n], row stride ldb):
 * `ta` a CBLAS transpose code (any but 111 reads A transposed); `lda`, `ldd` row strides in
 * elements. */
void tile_gemm(int item, int ta, int64_t m, int64_t n, int64_t k, double alpha, const void *A,
               int64_t lda, const void *B, int64_t ldb, double beta, void *D, int64_t ldd);

#endif
