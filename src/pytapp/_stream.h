/* GEMV-like products streamed through their matrix operand (see _stream.c). */
#ifndef PYTAPP_STREAM_H
#define PYTAPP_STREAM_H

#include <stdint.h>

/* Most labels a stream nest loops over. */
#define STREAM_MAXL 32

/* A loop nest over the matrix operand M in its memory order: extents and byte strides of M, of
 * the vector operand V (packed: laid out as M holds their labels, 0 along M's free labels) and
 * of D (0 along summed labels). The innermost label is the last. */
typedef struct {
    int nl;
    int64_t ext[STREAM_MAXL];
    int64_t sm[STREAM_MAXL], sv[STREAM_MAXL], sd[STREAM_MAXL];
    /* 0, or (at least 1) where the labels from `own` in form a block in which labels of M's
     * own (V's and D's strides 0) lie outside others: for each index of the labels outside the
     * block, M's block is first summed over them into a buffer, which the nest's other labels
     * then stream (see stream_accumulate). */
    int own;
} StreamNest;

/* D += alpha sum op(M) V over the nest, for the indices [start, stop) of its first label, numbers
 * of type `dt` (0 F32, 1 F64, 2 C64, 3 C128, as the executor numbers them); `conj_m`: each
 * product of a run is conjugated (M conjugated, V packed conjugated where op_V is not). alpha
 * as {real, imaginary}. D's elements are visited as often as the summed labels outside them
 * say: the caller has set D to beta op_C(C) first. Where the nest has `own` labels, each call
 * allocates its block's buffer (the nest without them where that fails). */
void stream_accumulate(int dt, const StreamNest *n, int64_t start, int64_t stop, const char *M,
                       const char *V, char *D, const double alpha[2], int conj_m);

#endif
