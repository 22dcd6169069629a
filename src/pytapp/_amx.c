/* BF16 GEMMs with F32 sums on the AMX tile unit.
 *
 * SPEC computes BF16 products in F32 (DEFAULT and BF16BF16_ACCUM_F32). The tile unit's
 * TDPBF16PS multiplies BF16 pairs exactly and adds them into F32 sums, 16x16 sums per
 * instruction: on the 2-core Xeon this was written on, a 2048x1024 by 1024x1024 product took
 * about a quarter of the time of the F32 GEMM of the same numbers, without the F32 copies of A
 * and B. The tiles read subnormal inputs as zero; packing finds them, and such a product is
 * left to the F32 route (amx_gemm_part returns 1).
 *
 * Layout: A is packed in panels of 16 rows, each cut into tiles of 16 rows x 32 numbers along k
 * (1 KiB, contiguous); B in panels of 16 columns, each cut into tiles of 16 pairs of k x 16
 * columns (the pairs interleaved, as TDPBF16PS reads them). Edges are padded with zeros to
 * whole pairs of panels. Each step of 32 along k loads two tiles of A and two of B and adds
 * their four products into four 16x16 F32 tiles of D (a 32x32 block). B is packed in chunks of
 * KC numbers along k by NC columns (kept in the second-level cache), A in blocks of MC rows by
 * KC; D is loaded back between chunks of k.
 *
 * Compiled only with GCC 11+ or clang 13+ on x86-64 Linux (through target attributes: no
 * -march flag); elsewhere amx_ready() is 0 and the F32 route runs every product. */
#define _GNU_SOURCE /* syscall() under -std=c11 */
#include "_amx.h"
#include "_tilegemm.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__linux__) && \
    ((defined(__clang__) && __clang_major__ >= 13) ||                    \
     (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))

#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { KC = 1024, MC = 128, NC = 512, TILE = 512 /* numbers per tile */ };

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static int g_amx = 0, g_amx_cap = 2;
static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;

static void amx_probe(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    if (!(d & (1u << 22)) || !(d & (1u << 24))) return; /* AMX-BF16, AMX-TILE */
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return; /* OSXSAVE */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0x60000u) != 0x60000u) return; /* the OS saves the tile state */
    /* Linux hands the tile data state out per process, on request */
    g_amx = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

int amx_ready(void) {
    (void)pthread_once(&g_amx_once, amx_probe);
    return g_amx && g_amx_cap >= 2;
}

int amx_gemv_ready(void) {
    return g_amx_cap && tile_isa() == TILE_AVX512 && __builtin_cpu_supports("avx512bw");
}

int amx_vectors_ready(void) {
    return amx_gemv_ready() && __builtin_cpu_supports("avx512bf16");
}

int amx_cap(int level) {
    g_amx_cap = level < 0 ? 0 : level > 2 ? 2 : level;
    return amx_ready() ? 2 : amx_vectors_ready() ? 1 : 0;
}

static int64_t up32(int64_t x) { return (x + 31) / 32 * 32; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The tiles' k: F16 numbers are split into BF16 pairs, four products per multiply-add. */
static int64_t tile_k(const AmxGemm *g) { return g->half ? 4 * g->k : g->k; }

/* Columns of D per packed block of B: the whole of k by NC columns, kept near 2 MiB. */
static int64_t block_columns(const AmxGemm *g) {
    int64_t nc = (int64_t)(2 << 20) / (up32(tile_k(g) > 0 ? tile_k(g) : 1) * 2) / 32 * 32;
    nc = nc < 32 ? 32 : nc > NC ? NC : nc;
    return min64(nc, up32(g->n));
}

/* Packing a number costs about this many multiply-adds: the packers move 16-32 numbers a
 * cycle, the tiles multiply-add 256-512 pairs, AVX512-BF16 vectors 32-64. */
enum { PACK_WEIGHT_TILES = 16, PACK_WEIGHT_VECTORS = 2 };

double amx_part_cost(const AmxGemm *g, int64_t rows, int64_t cols) {
    const int64_t nc = block_columns(g);
    const double packed = (double)rows * (double)((cols + nc - 1) / nc) + (double)cols;
    return (double)rows * (double)cols +
           (amx_ready() ? PACK_WEIGHT_TILES : PACK_WEIGHT_VECTORS) * packed;
}

size_t amx_buffer_bytes(const AmxGemm *g) {
    const int64_t nc = block_columns(g), mc = min64(MC, up32(g->m));
    const int64_t kc = min64(KC, up32(tile_k(g)));
    const int64_t gemm = up32(tile_k(g)) * nc * 2 + mc * kc * 2 + mc * nc * 4;
    return (size_t)((gemm > g->k * 4 ? gemm : g->k * 4) + 3 * 64);
}

/* 1 where the BF16 number x is subnormal (exponent 0, fraction not 0) */
#define SUBNORMAL(x) ((uint16_t)(((x) & 0x7fffu) - 1u) < 0x7fu)

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma")))

/* Lanes of v (32 BF16 numbers) that hold subnormal numbers. */
AVX512 static inline __mmask32 subnormals(__m512i v) {
    const __m512i low = _mm512_sub_epi16(_mm512_and_si512(v, _mm512_set1_epi16(0x7fff)),
                                         _mm512_set1_epi16(1));
    return _mm512_cmplt_epu16_mask(low, _mm512_set1_epi16(0x7f));
}

/* The 16x16 32-bit numbers of r transposed in place. */
AVX512 static inline void transpose16(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; ++i) { /* u[4i + j], 128-bit lane L: rows 4i..4i+3 of column 4L+j */
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int j = 0; j < 4; ++j) {
        const __m512i a01 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44);
        const __m512i a23 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xee);
        const __m512i b01 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
        const __m512i b23 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xee);
        r[j] = _mm512_shuffle_i32x4(a01, b01, 0x88);
        r[4 + j] = _mm512_shuffle_i32x4(a01, b01, 0xdd);
        r[8 + j] = _mm512_shuffle_i32x4(a23, b23, 0x88);
        r[12 + j] = _mm512_shuffle_i32x4(a23, b23, 0xdd);
    }
}

/* Mask of the first `n` (0..32) 16-bit lanes. */
static inline __mmask32 first16(int64_t n) {
    return n >= 32 ? 0xffffffffu : n <= 0 ? 0u : (__mmask32)((1u << n) - 1u);
}

/* Pairs of rows x, y of 16-bit numbers (`n` of each, at most 16) interleaved: lane c holds
 * x[c] in its low half and y[c] in its high half; a missing row reads as zeros. */
AVX512 static inline __m512i interleave(const char *x, const char *y, int64_t n) {
    const __mmask16 m = (__mmask16)first16(n);
    const __m512i lo = x ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x)) : _mm512_setzero_si512();
    const __m512i hi = y ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, y)) : _mm512_setzero_si512();
    return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}

/* A tile of 16 lines of up to 32 16-bit numbers: line c (c < lines, else zeros) is `len`
 * consecutive numbers at src + c * step; the 16 lines, transposed as 16x16 pairs. */
AVX512 static inline void lines_transposed(const char *src, int64_t step, int64_t lines,
                                           int64_t len, uint16_t *t) {
    __m512i r[16];
    const __mmask32 m = first16(len);
    for (int c = 0; c < 16; ++c)
        r[c] = c < lines ? _mm512_maskz_loadu_epi16(m, src + c * step) : _mm512_setzero_si512();
    transpose16(r);
    for (int c = 0; c < 16; ++c) _mm512_store_si512(t + c * 32, r[c]);
}

/* A tile whose 16 rows are interleaved pairs of lines (lines 2kp, 2kp+1 of `lines`; `len` of
 * 16 numbers each, at src + line * step), transposed when `flip`. */
AVX512 static inline void pairs_tile(const char *src, int64_t step, int64_t lines, int64_t len,
                                     int flip, uint16_t *t) {
    __m512i r[16];
    for (int kp = 0; kp < 16; ++kp) {
        const int64_t l0 = 2 * kp, l1 = l0 + 1;
        r[kp] = interleave(l0 < lines ? src + l0 * step : NULL,
                           l1 < lines ? src + l1 * step : NULL, len);
    }
    if (flip) transpose16(r);
    for (int c = 0; c < 16; ++c) _mm512_store_si512(t + c * 32, r[c]);
}

/* Subnormal numbers in a packed tile. */
AVX512 static inline unsigned tile_subnormals(const uint16_t *t) {
    __mmask32 bad = 0;
    for (int c = 0; c < 16; ++c) bad |= subnormals(_mm512_load_si512(t + c * 32));
    return bad != 0;
}

/* 8 F16 numbers (the first `n`, at p, `step` bytes apart) as F32. */
AVX512 static inline __m256 half8_at(const char *p, int64_t step, int64_t n) {
    if (step == 2) return _mm256_cvtph_ps(_mm_maskz_loadu_epi16((__mmask8)first16(n), p));
    uint16_t t[8] = {0};
    for (int64_t c = 0; c < n && c < 8; ++c) t[c] = *(const uint16_t *)(p + c * step);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)t));
}

/* F32 numbers (from F16) split into BF16 pairs x = hi + lo, exactly (11 significant bits:
 * hi holds the first 8, lo the rest): the 32-bit lanes' low halves hold hi, their high halves
 * lo. NaNs stay NaN in hi. Infinities are flagged in *inf: their hi times the other operand's
 * lo part of 0 would make a NaN that the product does not have. */
AVX512 static inline __m512i split16(__m512 x, __mmask16 *inf) {
    const __m512i u = _mm512_castps_si512(x);
    const __mmask16 special = _mm512_cmpeq_epi32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7f800000)), _mm512_set1_epi32(0x7f800000));
    *inf |= _mm512_mask_cmpeq_epi32_mask(special, _mm512_and_si512(u, _mm512_set1_epi32(0x7fffff)),
                                         _mm512_setzero_si512());
    const __m512i hi = _mm512_and_si512(
        _mm512_mask_or_epi32(u, special, u,
                             _mm512_maskz_mov_epi32(_mm512_cmpneq_epi32_mask(
                                 _mm512_and_si512(u, _mm512_set1_epi32(0x7fffff)),
                                 _mm512_setzero_si512()), _mm512_set1_epi32(0x400000))),
        _mm512_set1_epi32((int)0xffff0000u));
    const __m512i lo = _mm512_maskz_mov_epi32(
        (__mmask16)~special,
        _mm512_castps_si512(_mm512_sub_ps(x, _mm512_castsi512_ps(hi))));
    return _mm512_or_si512(_mm512_srli_epi32(hi, 16),
                           _mm512_and_si512(lo, _mm512_set1_epi32((int)0xffff0000u)));
}

/* A tile row from 8 F16 numbers of a row of A: each as (hi, lo, hi, lo). */
AVX512 static inline __m512i half_row(const char *p, int64_t step, int64_t n, __mmask16 *inf) {
    const __m512i pairs = split16(
        _mm512_zextps256_ps512(half8_at(p, step, n)), inf);
    const __m512i twice = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    return _mm512_permutexvar_epi32(twice, pairs);
}

/* Rows i0..i0+mb of F16 A, tile numbers k0..k0+kb along k (4 per number), packed; 1 on an
 * infinity. */
AVX512 static int pack_a_half(const AmxGemm *g, int64_t i0, int64_t mb, int64_t k0, int64_t kb,
                              uint16_t *ap) {
    const int64_t panels = up32(mb) / 16, steps = up32(kb) / 32;
    __mmask16 inf = 0;
    for (int64_t p = 0; p < panels; ++p)
        for (int64_t s = 0; s < steps; ++s) {
            uint16_t *t = ap + (p * steps + s) * TILE;
            const int64_t cnt = min64(32, kb - s * 32) / 4, ko = (k0 + s * 32) / 4;
            for (int r = 0; r < 16; ++r) {
                const int64_t i = p * 16 + r;
                _mm512_store_si512(t + r * 32,
                                   i < mb ? half_row(g->A + (i0 + i) * g->ars + ko * g->acs,
                                                     g->acs, cnt, &inf)
                                          : _mm512_setzero_si512());
            }
        }
    return inf != 0;
}

/* Columns j0..j0+nb of F16 B, tile numbers k0..k0+kb along k, packed: each number's pairs
 * (hi, hi) and (lo, lo), so that A's (hi, lo) pairs meet B's hi, then its lo; 1 on an
 * infinity. */
AVX512 static int pack_b_half(const AmxGemm *g, int64_t j0, int64_t nb, int64_t k0, int64_t kb,
                              uint16_t *bp) {
    const int64_t panels = up32(nb) / 16, steps = up32(kb) / 32;
    __mmask16 inf = 0;
    for (int64_t q = 0; q < panels; ++q)
        for (int64_t s = 0; s < steps; ++s) {
            uint16_t *t = bp + (q * steps + s) * TILE;
            const int64_t cnt = min64(32, kb - s * 32) / 4, ko = (k0 + s * 32) / 4;
            const int64_t jn = min64(16, nb - q * 16);
            for (int e = 0; e < 8; ++e) {
                __m512i hi = _mm512_setzero_si512(), lo = hi;
                if (e < cnt) {
                    const char *row = g->B + (ko + e) * g->brs + (j0 + q * 16) * g->bcs;
                    __m512 x;
                    if (g->bcs == 2) {
                        x = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)first16(jn), row));
                    } else {
                        uint16_t v[16] = {0};
                        for (int64_t c = 0; c < jn; ++c) v[c] = *(const uint16_t *)(row + c * g->bcs);
                        x = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)v));
                    }
                    const __m512i pairs = split16(x, &inf);
                    const __m512i h = _mm512_and_si512(pairs, _mm512_set1_epi32(0xffff));
                    const __m512i l = _mm512_srli_epi32(pairs, 16);
                    hi = _mm512_or_si512(h, _mm512_slli_epi32(h, 16));
                    lo = _mm512_or_si512(l, _mm512_slli_epi32(l, 16));
                }
                _mm512_store_si512(t + (2 * e) * 32, hi);
                _mm512_store_si512(t + (2 * e + 1) * 32, lo);
            }
        }
    return inf != 0;
}

/* Rows i0..i0+mb of A, numbers k0..k0+kb along k, packed (see the top); 1 on a subnormal. */
AVX512 static int pack_a(const AmxGemm *g, int64_t i0, int64_t mb, int64_t k0, int64_t kb,
                         uint16_t *ap) {
    const int64_t panels = up32(mb) / 16, steps = up32(kb) / 32;
    const int64_t ars = g->ars, acs = g->acs;
    unsigned bad = 0;
    for (int64_t p = 0; p < panels; ++p) {
        const int64_t rows = min64(16, mb - p * 16);
        for (int64_t s = 0; s < steps; ++s) {
            uint16_t *t = ap + (p * steps + s) * TILE;
            const int64_t cnt = min64(32, kb - s * 32);
            const char *src = g->A + (i0 + p * 16) * ars + (k0 + s * 32) * acs;
            if (acs == 2) { /* rows of A are rows of the tile */
                const __mmask32 m = first16(cnt);
                for (int r = 0; r < 16; ++r)
                    _mm512_store_si512(t + r * 32, r < rows ? _mm512_maskz_loadu_epi16(m, src + r * ars)
                                                            : _mm512_setzero_si512());
            } else if (ars == 2) { /* columns of A: pairs of them, transposed */
                pairs_tile(src, acs, cnt, rows, 1, t);
            } else {
                for (int r = 0; r < 16; ++r)
                    for (int64_t c = 0; c < 32; ++c)
                        t[r * 32 + c] = r < rows && c < cnt
                                            ? *(const uint16_t *)(src + r * ars + c * acs)
                                            : 0;
            }
            bad |= tile_subnormals(t);
        }
    }
    return bad != 0;
}

/* Columns j0..j0+nb of B, numbers k0..k0+kb along k, packed (see the top); 1 on a subnormal. */
AVX512 static int pack_b(const AmxGemm *g, int64_t j0, int64_t nb, int64_t k0, int64_t kb,
                         uint16_t *bp) {
    const int64_t panels = up32(nb) / 16, steps = up32(kb) / 32;
    const int64_t brs = g->brs, bcs = g->bcs;
    unsigned bad = 0;
    for (int64_t q = 0; q < panels; ++q)
        for (int64_t s = 0; s < steps; ++s) {
            uint16_t *t = bp + (q * steps + s) * TILE;
            const int64_t kn = min64(32, kb - s * 32), jn = min64(16, nb - q * 16);
            const char *src = g->B + (k0 + s * 32) * brs + (j0 + q * 16) * bcs;
            if (brs == 2) { /* columns of B: 16 pairs along k each, transposed */
                lines_transposed(src, bcs, jn, kn, t);
            } else if (bcs == 2) { /* rows of B, interleaved in pairs */
                pairs_tile(src, brs, kn, jn, 0, t);
            } else {
                for (int kp = 0; kp < 16; ++kp)
                    for (int64_t c = 0; c < 16; ++c)
                        for (int e = 0; e < 2; ++e) {
                            const int64_t kk = 2 * kp + e;
                            t[(kp * 16 + c) * 2 + e] =
                                kk < kn && c < jn ? *(const uint16_t *)(src + kk * brs + c * bcs)
                                                  : 0;
                        }
            }
            bad |= tile_subnormals(t);
        }
    return bad != 0;
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} TileConfig;

#define BARRIER() __asm__ volatile("" ::: "memory")

/* The F32 sums acc[mpanels * 16, npanels * 16] (row stride `ld` numbers, whole pairs of
 * panels) of packed A (panels `as` numbers apart) and packed B (panels `bs` apart), `steps` of
 * 32 along k; added onto acc unless `first`. */
__attribute__((target("amx-tile,amx-bf16"))) static void
run_blocks(float *acc, int64_t ld, const uint16_t *ap, int64_t as, int64_t mpanels,
           const uint16_t *bp, int64_t bs, int64_t npanels, int64_t steps, int first) {
    const int64_t st = ld * 4;
    for (int64_t q = 0; q < npanels; q += 2)
        for (int64_t p = 0; p < mpanels; p += 2) {
            float *o = acc + p * 16 * ld + q * 16;
            if (first) {
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
            } else {
                _tile_loadd(0, o, st);
                _tile_loadd(1, o + 16, st);
                _tile_loadd(2, o + 16 * ld, st);
                _tile_loadd(3, o + 16 * ld + 16, st);
            }
            const uint16_t *a0 = ap + p * as, *a1 = a0 + as;
            const uint16_t *b0 = bp + q * bs, *b1 = b0 + bs;
            for (int64_t s = 0; s < steps; ++s) {
                _tile_loadd(4, a0 + s * TILE, 64);
                _tile_loadd(6, b0 + s * TILE, 64);
                _tile_loadd(5, a1 + s * TILE, 64);
                _tile_loadd(7, b1 + s * TILE, 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            _tile_stored(0, o, st);
            _tile_stored(1, o + 16, st);
            _tile_stored(2, o + 16 * ld, st);
            _tile_stored(3, o + 16 * ld + 16, st);
        }
}

/* R rows (8 or 16) of sums by 16 columns, or by 32 where `two` (16 registers either way, or 8),
 * of packed A's rows at `a` (32 numbers apart) and packed B's panels b0 (and b1), `steps` of
 * 32 along k; added onto the sums at o (rows `ld` numbers apart) unless `first`. */
__attribute__((target("avx512f,avx512bf16"), always_inline)) static inline void
vec_block(float *o, int64_t ld, const uint16_t *a, const uint16_t *b0, const uint16_t *b1,
          int64_t steps, int first, const int R, const int two) {
    __m512 c0[16], c1[16];
    for (int r = 0; r < R; ++r) {
        c0[r] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(o + r * ld);
        if (two) c1[r] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(o + r * ld + 16);
    }
    for (int64_t s = 0; s < steps; ++s)
        for (int kp = 0; kp < 16; ++kp) {
            const __m512bh y0 = (__m512bh)_mm512_load_si512(b0 + s * TILE + kp * 32);
            const __m512bh y1 = two ? (__m512bh)_mm512_load_si512(b1 + s * TILE + kp * 32) : y0;
            for (int r = 0; r < R; ++r) {
                int32_t pair;
                memcpy(&pair, a + s * TILE + r * 32 + 2 * kp, 4);
                const __m512bh x = (__m512bh)_mm512_set1_epi32(pair);
                c0[r] = _mm512_dpbf16_ps(c0[r], x, y0);
                if (two) c1[r] = _mm512_dpbf16_ps(c1[r], x, y1);
            }
        }
    for (int r = 0; r < R; ++r) {
        _mm512_storeu_ps(o + r * ld, c0[r]);
        if (two) _mm512_storeu_ps(o + r * ld + 16, c1[r]);
    }
}

/* run_blocks on AVX512-BF16 vectors, for CPUs without the tiles (AMD Zen 4, Cooper Lake):
 * the same packed operands, VDPBF16PS on 8 rows x 32 columns of sums at a time (16 registers),
 * A's pairs broadcast, B's rows of 16 pairs loaded as they lie in its tiles. Only the first
 * `rows` rows and `cols` columns of the sums are computed (the rest is padding the tiles need
 * and the vectors do not): 16 rows x 16 columns at a time where the second panel of a pair
 * is padding, 8-row halves past `rows` left out. A batch of 10 x 240 by 240 x 1386 products
 * (BF16, AMD EPYC) computed 32 rows for 10 and ran at 35 GF/s. */
__attribute__((target("avx512f,avx512bf16"))) static void
run_blocks_vec(float *acc, int64_t ld, const uint16_t *ap, int64_t as, int64_t mpanels,
               const uint16_t *bp, int64_t bs, int64_t npanels, int64_t steps, int first,
               int64_t rows, int64_t cols) {
    for (int64_t q = 0; q < npanels; q += 2) {
        const uint16_t *b0 = bp + q * bs, *b1 = b0 + bs;
        const int two = (q + 1) * 16 < cols;
        for (int64_t p = 0; p < mpanels && p * 16 < rows; ++p) {
            float *o = acc + p * 16 * ld + q * 16;
            const uint16_t *a = ap + p * as;
            if (two) {
                vec_block(o, ld, a, b0, b1, steps, first, 8, 1);
                if (p * 16 + 8 < rows)
                    vec_block(o + 8 * ld, ld, a + 8 * 32, b0, b1, steps, first, 8, 1);
            } else if (p * 16 + 8 < rows) {
                vec_block(o, ld, a, b0, b0, steps, first, 16, 0);
            } else {
                vec_block(o, ld, a, b0, b0, steps, first, 8, 0);
            }
        }
    }
}

/* Eight tiles of 16 rows of 64 bytes. (A constant in memory: the intrinsic tells the compiler
 * that it reads only the first 8 bytes, so stores into a local configuration could be dropped.) */
static const TileConfig g_config = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

__attribute__((target("amx-tile"))) static void tiles_on(void) { _tile_loadconfig(&g_config); }

__attribute__((target("amx-tile"))) static void tiles_off(void) { _tile_release(); }

/* F32 to BF16, rounded to nearest even (subnormals kept; NaN stays a quiet NaN). */
static inline uint16_t to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float from_bf16(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

AVX512 static inline __m512 from_bf16x16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The 32-bit lanes of x rounded to BF16 (to nearest even; NaN stays a quiet NaN), in the
 * high halves of the lanes. */
AVX512 static inline __m512i bf16_high(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, _mm512_set1_epi32(0x400000)));
}

/* 32 F32 numbers (x, then y) rounded to BF16, in order. */
AVX512 static inline __m512i to_bf16x32(__m512 x, __m512 y) {
    const __m512i high = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37,
                                          35, 33, 31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9,
                                          7, 5, 3, 1);
    return _mm512_permutex2var_epi16(bf16_high(x), high, bf16_high(y));
}

/* 16 numbers of type `type` (the first `n`, at p, `step` bytes apart) as F32. */
AVX512 static inline __m512 load16(int type, const char *p, int64_t step, int64_t n) {
    const __mmask16 m = (__mmask16)first16(n);
    const int64_t item = type == AMX_F32 ? 4 : 2;
    if (step == item) {
        if (type == AMX_F32) return _mm512_maskz_loadu_ps(m, p);
        const __m256i h = _mm256_maskz_loadu_epi16(m, p);
        return type == AMX_F16 ? _mm512_cvtph_ps(h) : from_bf16x16(h);
    }
    float t[16] = {0};
    for (int64_t c = 0; c < n && c < 16; ++c) {
        const char *x = p + c * step;
        t[c] = type == AMX_F32 ? *(const float *)x
               : type == AMX_F16 ? _cvtsh_ss(*(const uint16_t *)x)
                                 : from_bf16(*(const uint16_t *)x);
    }
    return _mm512_loadu_ps(t);
}

/* 16 F32 numbers (the first `n`) rounded into `type` at p, `step` bytes apart. */
AVX512 static inline void store16(int type, char *p, int64_t step, int64_t n, __m512 v) {
    const __mmask16 m = (__mmask16)first16(n);
    __m256i h;
    if (type == AMX_F32) {
        if (step == 4) {
            _mm512_mask_storeu_ps(p, m, v);
            return;
        }
    }
    float t[16];
    _mm512_storeu_ps(t, v);
    if (type == AMX_F16) h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    else h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(bf16_high(v), 16));
    if (type != AMX_F32 && step == 2) {
        _mm256_mask_storeu_epi16(p, m, h);
        return;
    }
    uint16_t u[16];
    _mm256_storeu_si256((__m256i *)u, h);
    for (int64_t c = 0; c < n && c < 16; ++c) {
        if (type == AMX_F32) *(float *)(p + c * step) = t[c];
        else *(uint16_t *)(p + c * step) = u[c];
    }
}

/* store_block where D or C holds F16 numbers: 16 at a time. */
AVX512 static void store_block16(const AmxGemm *g, const float *acc, int64_t ld, int64_t i0,
                                 int64_t mb, int64_t j0, int64_t nb) {
    const __m512 al = _mm512_set1_ps(g->alpha), be = _mm512_set1_ps(g->beta);
    for (int64_t r = 0; r < mb; ++r) {
        const float *x = acc + r * ld;
        char *d = g->D + (i0 + r) * g->drs + j0 * g->dcs;
        const char *c = g->ctype ? g->C + (i0 + r) * g->crs + j0 * g->ccs : NULL;
        for (int64_t j = 0; j < nb; j += 16) {
            __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + j), al);
            if (c) v = _mm512_fmadd_ps(load16(g->ctype, c + j * g->ccs, g->ccs, nb - j), be, v);
            store16(g->dtype, d + j * g->dcs, g->dcs, nb - j, v);
        }
    }
}

/* D[i0:i0+mb, j0:j0+nb] = alpha acc + beta C (in F32, stored in D's type). */
AVX512 static void store_block(const AmxGemm *g, const float *acc, int64_t ld, int64_t i0,
                               int64_t mb, int64_t j0, int64_t nb) {
    const __m512 al = _mm512_set1_ps(g->alpha), be = _mm512_set1_ps(g->beta);
    const int dbf = g->dtype == AMX_BF16, cbf = g->ctype == AMX_BF16;
    const int64_t di = dbf ? 2 : 4, ci = cbf ? 2 : 4;
    if (g->dtype == AMX_F16 || g->ctype == AMX_F16) {
        store_block16(g, acc, ld, i0, mb, j0, nb);
        return;
    }
    for (int64_t r = 0; r < mb; ++r) {
        const float *x = acc + r * ld;
        char *d = g->D + (i0 + r) * g->drs + j0 * g->dcs;
        const char *c = g->ctype ? g->C + (i0 + r) * g->crs + j0 * g->ccs : NULL;
        int64_t j = 0;
        if (g->dcs == di && (!c || g->ccs == ci))
            for (; j < nb; j += 32) { /* 32 numbers: one cache line of BF16 */
                const __mmask32 m = first16(nb - j);
                __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + j), al);
                __m512 w = _mm512_mul_ps(_mm512_loadu_ps(x + j + 16), al);
                if (c && cbf) {
                    const __m512i cv = _mm512_maskz_loadu_epi16(m, c + j * 2);
                    v = _mm512_fmadd_ps(from_bf16x16(_mm512_castsi512_si256(cv)), be, v);
                    w = _mm512_fmadd_ps(from_bf16x16(_mm512_extracti64x4_epi64(cv, 1)), be, w);
                } else if (c) {
                    v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps((__mmask16)m, c + j * 4), be, v);
                    w = _mm512_fmadd_ps(_mm512_maskz_loadu_ps((__mmask16)(m >> 16), c + j * 4 + 64),
                                        be, w);
                }
                if (dbf) {
                    _mm512_mask_storeu_epi16(d + j * 2, m, to_bf16x32(v, w));
                } else {
                    _mm512_mask_storeu_ps(d + j * 4, (__mmask16)m, v);
                    _mm512_mask_storeu_ps(d + j * 4 + 64, (__mmask16)(m >> 16), w);
                }
            }
        for (; j < nb; ++j) {
            float v = g->alpha * x[j];
            if (c) {
                const char *cj = c + j * g->ccs;
                v = fmaf(cbf ? from_bf16(*(const uint16_t *)cj) : *(const float *)cj, g->beta, v);
            }
            if (dbf) *(uint16_t *)(d + j * g->dcs) = to_bf16(v);
            else *(float *)(d + j * g->dcs) = v;
        }
    }
}

static char *align64(char *p) { return (char *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

/* D[i, j] = alpha v + beta C[i, j], rounded once into D's type. */
AVX512 static inline void put(const AmxGemm *g, int64_t i, int64_t j, float v) {
    v *= g->alpha;
    if (g->ctype) {
        const char *c = g->C + i * g->crs + j * g->ccs;
        const uint16_t h = *(const uint16_t *)c;
        v = fmaf(g->ctype == AMX_BF16  ? from_bf16(h)
                 : g->ctype == AMX_F16 ? _cvtsh_ss(h)
                                       : *(const float *)c,
                 g->beta, v);
    }
    char *d = g->D + i * g->drs + j * g->dcs;
    if (g->dtype == AMX_BF16) *(uint16_t *)d = to_bf16(v);
    else if (g->dtype == AMX_F16) *(uint16_t *)d = _cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT);
    else *(float *)d = v;
}

/* 16 numbers of A or B (BF16, or F16 where g->half; the first `n`) at p, `step` bytes apart,
 * as F32. */
AVX512 static inline __m512 bf16x16_at(const AmxGemm *g, const char *p, int64_t step, int64_t n) {
    return load16(g->half ? AMX_F16 : AMX_BF16, p, step, n);
}

/* Rows m0..m1 of a GEMV (n = 1): memory-bound, so no tiles and no packing of A. B's column
 * is converted to F32 once (into buf); A's rows are dotted with it four at a time where they
 * run along k, else A's columns are added, scaled, into 256 rows' sums at a time. The F32
 * sums read subnormal numbers as they are. */
AVX512 static void gemv_part(const AmxGemm *g, int64_t m0, int64_t m1, void *buf) {
    const int64_t k = g->k;
    float *x = (float *)align64(buf);
    for (int64_t kk = 0; kk < k; ++kk) {
        const uint16_t h = *(const uint16_t *)(g->B + kk * g->brs);
        x[kk] = g->half ? _cvtsh_ss(h) : from_bf16(h);
    }
    if (g->ars == 2 && g->acs != 2 && m1 - m0 > 1) { /* columns of A along the rows of D */
        for (int64_t i = m0; i < m1; i += 256) {
            const int64_t rows = min64(256, m1 - i);
            __m512 y[16];
            for (int v = 0; v < 16; ++v) y[v] = _mm512_setzero_ps();
            for (int64_t kk = 0; kk < k; ++kk) {
                const __m512 xv = _mm512_set1_ps(x[kk]);
                const char *col = g->A + i * 2 + kk * g->acs;
                for (int v = 0; v < 16 && v * 16 < rows; ++v)
                    y[v] = _mm512_fmadd_ps(bf16x16_at(g, col + v * 32, 2, rows - v * 16), xv, y[v]);
            }
            float out[256];
            for (int v = 0; v < 16; ++v) _mm512_storeu_ps(out + v * 16, y[v]);
            for (int64_t r = 0; r < rows; ++r) put(g, i + r, 0, out[r]);
        }
        return;
    }
    if (g->acs != 2) { /* rows of A strided along k: one number at a time */
        for (int64_t i = m0; i < m1; ++i) {
            __m512 acc = _mm512_setzero_ps();
            for (int64_t kk = 0; kk < k; kk += 16) {
                const int64_t n = min64(16, k - kk);
                acc = _mm512_fmadd_ps(bf16x16_at(g, g->A + i * g->ars + kk * g->acs, g->acs, n),
                                      _mm512_maskz_loadu_ps((__mmask16)first16(n), x + kk), acc);
            }
            put(g, i, 0, _mm512_reduce_add_ps(acc));
        }
        return;
    }
    const int64_t full = k / 16 * 16;
    const __mmask16 tail = (__mmask16)first16(k - full);
    int64_t i = m0;
    for (; i + 4 <= m1; i += 4) { /* dots of four rows of A with x, sharing its loads */
        const char *r0 = g->A + i * g->ars, *r1 = r0 + g->ars, *r2 = r1 + g->ars,
                   *r3 = r2 + g->ars;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int64_t kk = 0;
        for (; kk < full; kk += 16) {
            const __m512 xv = _mm512_loadu_ps(x + kk);
            a0 = _mm512_fmadd_ps(bf16x16_at(g, r0 + kk * 2, 2, 16), xv, a0);
            a1 = _mm512_fmadd_ps(bf16x16_at(g, r1 + kk * 2, 2, 16), xv, a1);
            a2 = _mm512_fmadd_ps(bf16x16_at(g, r2 + kk * 2, 2, 16), xv, a2);
            a3 = _mm512_fmadd_ps(bf16x16_at(g, r3 + kk * 2, 2, 16), xv, a3);
        }
        if (tail) {
            const __m512 xv = _mm512_maskz_loadu_ps(tail, x + kk);
            a0 = _mm512_fmadd_ps(bf16x16_at(g, r0 + kk * 2, 2, k - kk), xv, a0);
            a1 = _mm512_fmadd_ps(bf16x16_at(g, r1 + kk * 2, 2, k - kk), xv, a1);
            a2 = _mm512_fmadd_ps(bf16x16_at(g, r2 + kk * 2, 2, k - kk), xv, a2);
            a3 = _mm512_fmadd_ps(bf16x16_at(g, r3 + kk * 2, 2, k - kk), xv, a3);
        }
        put(g, i, 0, _mm512_reduce_add_ps(a0));
        put(g, i + 1, 0, _mm512_reduce_add_ps(a1));
        put(g, i + 2, 0, _mm512_reduce_add_ps(a2));
        put(g, i + 3, 0, _mm512_reduce_add_ps(a3));
    }
    for (; i < m1; ++i) { /* the last rows, one at a time */
        const char *r0 = g->A + i * g->ars;
        __m512 a0 = _mm512_setzero_ps();
        for (int64_t kk = 0; kk < k; kk += 16) {
            const __mmask16 m = (__mmask16)first16(k - kk);
            a0 = _mm512_fmadd_ps(bf16x16_at(g, r0 + kk * 2, 2, k - kk),
                                 _mm512_maskz_loadu_ps(m, x + kk), a0);
        }
        put(g, i, 0, _mm512_reduce_add_ps(a0));
    }
}

int amx_gemm_part(const AmxGemm *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1, void *buf) {
    if (m1 <= m0 || n1 <= n0) return 0;
    if (g->n == 1 && g->k > 0) {
        gemv_part(g, m0, m1, buf);
        return 0;
    }
    const int64_t kt = tile_k(g), nc = block_columns(g), kall = up32(kt);
    const int64_t kc = min64(KC, kall), mc = min64(MC, up32(g->m));
    uint16_t *bp = (uint16_t *)align64(buf);
    uint16_t *ap = (uint16_t *)align64((char *)(bp + kall * nc));
    float *acc = (float *)align64((char *)(ap + mc * kc));
    int bad = 0;
    const int tiles = amx_ready(); /* else AVX512-BF16 vectors (amx_vectors_ready) */
    if (kt > 0 && tiles) tiles_on();
    for (int64_t j = n0; j < n1 && !bad; j += nc) {
        const int64_t nb = min64(nc, n1 - j), np = up32(nb) / 16, ld = np * 16;
        if (kt > 0 && g->half) bad = pack_b_half(g, j, nb, 0, kt, bp);
        else if (kt > 0) bad = pack_b(g, j, nb, 0, kt, bp);
        BARRIER();
        for (int64_t i = m0; i < m1 && !bad; i += MC) {
            const int64_t mb = min64(MC, m1 - i), mp = up32(mb) / 16;
            if (kt < 1) memset(acc, 0, (size_t)(mp * 16 * ld * 4));
            for (int64_t k0 = 0; k0 < kt && !bad; k0 += KC) {
                const int64_t kb = min64(KC, kt - k0), steps = up32(kb) / 32;
                if (g->half) bad = pack_a_half(g, i, mb, k0, kb, ap);
                else bad = pack_a(g, i, mb, k0, kb, ap);
                BARRIER();
                if (!bad && tiles)
                    run_blocks(acc, ld, ap, steps * TILE, mp, bp + k0 / 32 * TILE,
                               kall / 32 * TILE, np, steps, k0 == 0);
                else if (!bad)
                    run_blocks_vec(acc, ld, ap, steps * TILE, mp, bp + k0 / 32 * TILE,
                                   kall / 32 * TILE, np, steps, k0 == 0, mb, nb);
                BARRIER();
            }
            if (!bad) store_block(g, acc, ld, i, mb, j, nb);
        }
    }
    if (kt > 0 && tiles) tiles_off();
    return bad;
}

#else /* no AMX build: the F32 route runs every product */

int amx_ready(void) { return 0; }

int amx_gemv_ready(void) { return 0; }

int amx_vectors_ready(void) { return 0; }

int amx_cap(int on) {
    (void)on;
    return 0;
}

double amx_part_cost(const AmxGemm *g, int64_t rows, int64_t cols) {
    (void)g;
    return (double)rows * (double)cols;
}

size_t amx_buffer_bytes(const AmxGemm *g) {
    (void)g;
    return 64;
}

int amx_gemm_part(const AmxGemm *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1, void *buf) {
    (void)g, (void)m0, (void)m1, (void)n0, (void)n1, (void)buf;
    return 1;
}

#endif
