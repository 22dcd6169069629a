/* Register-tiled real GEMMs that read their operands where they lie (see _tilegemm.c). */
#ifndef PYTAPP_TILEGEMM_H
#define PYTAPP_TILEGEMM_H

#include <stddef.h>
#include <stdint.h>

/* The vectors the tiles run on: the widest this CPU has (asked once), at most the cap. */
enum { TILE_NONE = 0, TILE_AVX2 = 1, TILE_AVX512 = 2 };
int tile_isa(void);

/* Cap the vectors the tiles use (TILE_NONE: none; for comparisons and tests); returns tile_isa. */
int tile_cap(int cap);

/* The numbers the tiles take (as the executor numbers them), and the bytes of each. */
enum { TILE_F32 = 0, TILE_F64 = 1, TILE_C64 = 2, TILE_C128 = 3 };
int64_t tile_item(int dt);

/* Numbers of type `dt` per vector of tile_isa's. */
int64_t tile_lanes(int dt);

/* Whether tile_gemm takes this row-major GEMM of numbers of type `dt` (TILE_F32...):
 * D[m, n] = alpha op(A)[m, k] op(B)[k, n] + beta D, `tb` a CBLAS transpose code. */
int tile_fits(int dt, int tb, int64_t m, int64_t n, int64_t k);

/* Rows of D a worker of a shared-out tiled GEMM takes at least. */
int64_t tile_rows_min(void);

/* This thread's buffer of at least `size` bytes (kept and reused until the thread ends); NULL
 * when memory ran out. */
void *tile_buffer(size_t size);

/* B stored [n, k] (row stride ldb) copied as rows [k, n] (row stride ldr) for tile_gemm,
 * conjugated where `conj` (complex types). */
void tile_transpose(int dt, int conj, const void *B, int64_t ldb, int64_t n, int64_t k,
                    void *rows, int64_t ldr);

/* Run what tile_fits took, on the calling thread, B given as rows ([k, n], row stride ldb):
 * `ta` a CBLAS transpose code (112 reads A transposed, 113 conjugated too); `lda`, `ldd` row
 * strides in numbers; alpha and beta as {real, imaginary} parts. */
void tile_gemm(int dt, int ta, int64_t m, int64_t n, int64_t k, const double *alpha,
               const void *A, int64_t lda, const void *B, int64_t ldb, const double *beta,
               void *D, int64_t ldd);

#endif
