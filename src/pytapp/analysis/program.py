"""Lower a ContractionSpec into a program for the compiled executor (pure data, no arrays).

A :class:`Lowered` program says what every operand must be (shape and byte strides of its
descriptor, the bytes its footprint spans) and which steps compute D: either one loop nest
over the merged labels (small products of any label class: Hadamard, contracted, isolated,
broadcast, diagonals) or batched GEMMs on strided views that BLAS reads and writes in place,
with beta op_C(C) and op_D applied around them. Products the executor does not cover (mixed or
16-bit datatypes, input rounding, layouts that need copies, large products without an in-place
GEMM) are not lowered: the backend's own plan runs them.

Examples
--------
>>> from pytapp.datatypes import Datatype
>>> from pytapp.analysis.spec import build_spec
>>> F = Datatype.F64
>>> spec = build_spec(a=(F, (4, 5), (5, 1), "ik", 0), b=(F, (5, 3), (3, 1), "kj", 0),
...                   c=(F, (4, 3), (3, 1), "ij", 0), d=(F, (4, 3), (3, 1), "ij", 0), prec=-1)
>>> prog = lower(spec, gemm=False)
>>> prog.kind, prog.nout, prog.extents
(<Step.LOOP: 0>, 2, (4, 3, 5))
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from math import isqrt, prod

from pytapp.analysis.cost import MachineModel, ttgt_seconds, view_gemm_seconds
from pytapp.analysis.spec import ContractionSpec, OperandSpec
from pytapp.analysis.viewgemm import (
    MatrixView,
    ViewGemm,
    reducing_view_gemm,
    summed_view_gemm,
    view_gemms,
)
from pytapp.datatypes import Datatype

__all__ = ["GemmStep", "Lowered", "PackStep", "Step", "StreamStep", "alternative", "lower"]

Label = Hashable
#: Most modes (and merged labels) the executor loops over.
MAX_LABELS = 32
#: Products with at most this many multiply-adds run as one loop nest when no GEMM maps them
#: in place: below this a library call's fixed cost is the time.
LOOP_MAX_MADDS = 1 << 15
#: The same bound for products that sum nothing (Hadamard, outer): the loop nest runs its
#: innermost (merged) label as a plain loop the compiler vectorises (one operand constant along
#: it folded into alpha, complex ones too), split over the BLAS's pool from 65536 elements. It
#: beat the backend's threaded NumPy multiply at every size measured, to 16M elements: a
#: 64k-element C128 outer product 28 us against 223, 2M-element ones 0.44 ms against 0.94 (F64)
#: and 0.47 against 2.8 (C64), a 2.5M-element F32 row scaling 0.44 ms against 2.8, 8-16M
#: elements 1.0-2.4x (there both run at the speed of writing, and first touching, D). Above
#: 16M elements (the bound this was before) it beat the backend's numba kernel too: outer
#: products ``ab,cd->acbd`` at 80^4 1.4x (F32) and 1.8x (F64, 33.0 -> 18.1 ms), ``ab,cd->abcd``
#: at 90^4 2.4x, ``abc,ab->abc`` (27M C64) 3.0x, ``a,b->ba`` 1.8x, ``abcd,dcba->abcd`` at 72^4
#: 1.5x, a Hadamard product and a row scaling of 32M 1.05-1.1x; a transposition ``ab,ba->ab``
#: of 6000^2 (F64) 1.5x once it runs in blocks (PLANE_PAGES).
LOOP_MAX_ELEMENTWISE = 1 << 40
#: The same bound for batched dots (every label of D in A and B, some summed: ``kab,kab->ab``,
#: ``dcab,adbc->dcb``), which no GEMM or GEMV maps: the loop nest sums each element of D, or
#: D's rows one summed element at a time where the sum strides through memory and the rows do
#: not, and is split over the BLAS's pool. It beat the backend's multiply-reduce route (NumPy's
#: einsum loop, threaded) at every size measured: 86k C128 multiply-adds 0.71 -> 0.20 ms,
#: 393k F32 ones 0.20 -> 0.06 ms, 512k F64 ones 0.49 -> 0.25 ms.
LOOP_MAX_DOTS = 1 << 21
#: ... with sums of at most this many terms each, where each sum streams through both operands
#: (a library dot reads it in place, in vector registers). Batched dots whose sums stride
#: through either operand (``badc,bcda->d``) run in the loop nest at any length, in blocks of
#: 256 terms whose sums are added up (as accurate as blas's blocked dots): blas's route copies
#: both operands first (77k F32 multiply-adds: 283 us where numpy.einsum's strided loop took
#: 121). Products with free labels keep their GEMMs (TTGT): ``gcbf,fbgd->cd`` (14 sums of 4608
#: terms in runs of 2) took 21 us as one GEMM, 300-500 us in the loop nest.
LOOP_MAX_DOT_TERMS = 1 << 10
#: ... where the innermost loop sums at least this many terms (A's fastest summed label): over
#: runs of 2 the loop nest spends its time stepping to the next run (``abcd,dcba->`` at
#: 64x48x40x2, F64: 3.0 ms, blas's copy and dot 1.9).
LOOP_DOT_RUN_MIN = 4
#: Real batches of dots whose sums run contiguous in both operands, of at least this many
#: terms each, D's labels in the operands' order (:func:`_streaming_dots`), run as a loop nest
#: at any size, each dot summed in vector registers (the executor's ``dots_*``) and the batch
#: split over the BLAS's pool, instead of one BLAS GEMV of 1x1 per element of D (OpenBLAS's
#: call costs a few hundred nanoseconds) or blas's multiply-reduce pass (numba). Against
#: numpy.einsum, before -> after (2-core EPYC): ``bnd,bnd->bn`` F32 16x512x512 0.49x -> 2.05x
#: (1.96 -> 0.43 ms), 8x128x2048 1.71x -> 2.91x, 64x1024x256 (the full suite's rowwise_dot)
#: 1.06x -> 1.27x; ``nd,nd->n`` F64 64x4096 1.73x -> 3.58x; all 16 real shapes measured
#: faster. With D transposed (``bnd,bnd->nb``) consecutive dots jump a page each: 0.5x.
LOOP_STREAM_DOT_RUN = 64
#: Fewest elements of D's innermost label for which a loop nest sums row by row (_row_sums).
ROW_SUM_MIN = 8
#: Summed elements per block of a row-by-row sum; the block sums are then added up.
ROW_SUM_BLOCK = 256
#: Bytes of operand rows a row-by-row sum streams per second, to price it against GEMMs on
#: the cost model's constants (:func:`_rows_cheaper`): 23 GB/s measured in F32 and F64 on rows
#: of 96 (16 on rows of 24), the complex kernels ROW_SUM_COMPLEX times slower (12.5 GB/s).
ROW_SUM_BYTES = 2e10
ROW_SUM_COMPLEX = 1.6
#: ... and only against GEMMs whose thinner side (m or n) has at most this many elements:
#: with 6 or more, GEMMs of k = 64 ran as fast as the rows or faster (the model prices such
#: small GEMMs high).
ROW_GEMM_THIN = 4
#: GEMV-like products sum rows (up to LOOP_MAX_DOTS multiply-adds) rather than run the
#: plan's GEMVs on views only where each GEMV has at most this many elements of D:
#: ``dacb,cd->ab`` with rows of 16: 0.35 against 0.38 ms (F32), 0.18 against a packed GEMV's
#: 0.90; with 32 and 64: 0.78 against 0.72 (F64), 0.67 against 0.43 (C128).
ROW_GEMV_MAX = 16
#: GEMMs with fewer multiply-adds per call than this run as a loop nest instead.
GEMM_MIN_MADDS = 512
#: TTGT's batched GEMMs that pack nothing run here only up to this many flops in total (its
#: GEMMs follow one another); larger ones run on the backend's plan. Batches of GEMMs on views
#: run here at any size: from 2^22 flops the executor shares their elements out over the
#: BLAS's pool, each GEMM on one thread (on the register tiles where they fit), where the
#: backend's plan split them through Python: 32 GEMMs of 1024x64x64 (F32) 1.45 against
#: 1.67 ms, 100 of 40^3 (F64) 0.19 against 0.42, 16 of 300^3 (F64, on the BLAS) 11.9 against
#: 12.1.
GEMM_BATCH_MAX_FLOPS = 1 << 24
#: Bytes of a cache line (the unit the batch order below, the tiles and the planes count in).
CACHE_LINE = 64
#: GEMMs on views loop over their batch labels in the order whose loops fetch the fewest cache
#: lines (:func:`_lines_fetched`: what a loop's body touches is found in cache by the next
#: iteration while it fits in BATCH_ORDER_BYTES), where that is at most BATCH_ORDER_MARGIN
#: times what the lowering's order fetches; orders of up to BATCH_ORDER_LABELS labels are
#: weighed (120 orders: 2 ms at plan time), of products whose operands together outgrow
#: BATCH_ORDER_BYTES. ``jbh,hqonj->honqb`` (F32, B 51 MB) read each 119 KB slice of B once
#: per ``b``, 48 other slices between: ``b`` innermost, 6480 GEMVs 18.9 -> 14.7 ms. Seeded
#: random products (2-core EPYC, blas, with C; interleaved A/B): on 72 the rule reorders among
#: seeds 6500-9500, never tuned on, 1.33x (0.84-4.5x, five below 0.95x); on 46 of seeds
#: 0-6500, 1.45x (0.94-3.0x). Taking every order the model prices lower (margin 1) lost
#: more often (1.38x, 0.80x the least); the lowering's order is kept within 5%.
BATCH_ORDER_MARGIN = 0.95
BATCH_ORDER_BYTES = 1 << 23
BATCH_ORDER_LABELS = 5
#: Products without an in-place GEMM are packed (TTGT) by the executor up to TTGT_MAX_BYTES of
#: packs and temporary, whatever their flops; larger ones run on the backend's plan (threaded
#: copies, blocked TTGT and stores that keep memory low, reduce kernels), and so do batches of
#: more than GEMM_BATCH_MAX_FLOPS that pack nothing (their GEMMs split across threads). With its
#: packs and store split over the pool, the executor beat that plan on every other product
#: measured from 16M to 900M flops (1.05-1.8x: ``ijab,kjcb->ikac`` at o=16, v=48 13.9 ->
#: 13.2 ms, ``abcd,dbe->ace`` 32x32x16x24 0.95 -> 0.52 ms) and tied at 7 GFlop. Above
#: TTGT_MAX_FLOPS it had declined (unless T was stored block by block), and so it had where a
#: whole T of more than TTGT_STORE_MAX_BYTES was stored into D: on 118 of the 794 products of
#: seeds 0-11999 either bound had sent to the backend's plan, running them cost 1.22x less in
#: geometric mean (0.73-3.1x, 9 below 0.95: thin GEMMs with long sums packed in blocks, and
#: batches the backend splits across threads; ``tpcgr,wxtpz->zgcwrx``, F32, 2.9 GFlop and a
#: 16.8 MB T: 28.8 -> 16.8 ms), the full suite's akic,bjkc->abij (14 GFlop) tied. TTGT_MAX_FLOPS
#: now only says where the backend's plan runs TTGT itself when the executor does not (which
#: GEMVs on views give way to, and which short rows of the loop nest do not take).
TTGT_MAX_FLOPS = 1 << 30
TTGT_MAX_BYTES = 1 << 26
#: GEMMs on views give way to TTGT by the cost model only up to this many flops; above, where
#: GEMMs on views exist, or where a temporary of more than TTGT_MAX_BYTES is stored into D (not
#: written by the GEMMs), the backend's plan decides (its thin and blocked routes pack in
#: blocks: ``abcj,ic->ijab`` at 48x40x16x24 with i = 96 took 4.7 ms there, 21.7 ms with a 35 MB
#: temporary here, before the thin blocks). A thin GEMM packed in blocks (below) whose T would
#: hold TTGT_STORE_MAX_BYTES or more stores each block's rows (columns) of T into D while in
#: cache, from a buffer per worker, instead: no temporary as large as D (``mbsc,mstn->bctn``,
#: F64, a 67 MB D: 14.0 -> 11.5 ms; ``ulkeq,uxe->qlxk``, F32, 17.6 MB: 9.7 -> 7.4 ms); below it
#: the whole T, still in the last-level cache, stored faster (0.83-1.05x). Above it GEMVs on
#: views (a side of 1: tens of thousands of calls, each reading its matrix in short runs) still
#: give way to a TTGT the executor runs where the cost model prices it lower, unless that
#: TTGT's blocks read the thick operand in runs shorter than TILE_SOURCE_RUN: on 44 seeded
#: products this changes (seeds 0-1000, sizes 1 and 1.4; 2-core EPYC, blas's plan with C)
#: 1.64x, from 0.59x (``cmabe,emd->bdacm``) to 4.0x (``qhfo,caxq->ocaxhf``); ``xl,lrwt->txrw``
#: (F32, 49728 GEMVs of 42x56) 8.4 -> 3.3 ms. Above TTGT_MAX_FLOPS, where the backend's plan
#: runs TTGT, GEMVs on views give way to it alike: 18 seeded products 1.61x, ``zl,lsa->zas``
#: (C128, 3550 GEMVs) 242 -> 36 ms, ``bkp,be->epk`` 64 -> 29, one below 0.95x
#: (``spot,trdxo->rspdxt``, 0.57x: 23 GEMMs with k = 24 into a 142 MB temporary). GEMMs on
#: views of two sides above 1 stay: priced so, they changed 0.27-4.0x.
VIEWS_TO_TTGT_MAX_FLOPS = 1 << 24
#: ... and above it, a TTGT (or one GEMM on views) whose D holds at most 1/TTGT_FLIP_D_SHARE of
#: its operands' numbers is tried against a TTGT with its GEMMs the other way round
#: (:func:`_flipped`).
TTGT_FLIP_D_SHARE = 32
#: GEMVs on views that read each matrix in rows of at most this many bytes, the rows apart
#: from one another (``ifj,i->jf``: 404 GEMVs, each 697 rows of 400 bytes 161 KB apart), give
#: way to one GEMV over all of the thick operand's free labels, which reads it in order (TTGT
#: that packs nothing of it; the result stored into D). Not priced: the model sees the same
#: bytes and flops either way. On the 15 seeded products of seeds 0-3000 this admits (2-core
#: EPYC, blas's plan with C), 1.19-3.38x (``mpown,mp->nwo``, C64, 88 GEMVs: 12.9 -> 3.8 ms;
#: ``kxl,k->lx``, F32, rows of 140 bytes: 2.9 -> 1.3); the GEMVs on views that stayed, rows of
#: 632 bytes or more or matrices whose rows follow one another, ran 0.76-1.27x as fast that way.
#: On 28 products of seeds 3000-12000 not used to choose it: 0.90-3.06x, geometric mean 1.6x.
GEMV_SCATTER_RUN = 512
#: A GEMV-like product whose GEMVs on views stream their matrix runs as one GEMV over the
#: matrix where it lies (its vector packed, :func:`_gemv_in_place`) unless that GEMV reads the
#: matrix in runs of all its outputs shorter than this (``ohpb,pho->b``, F32: 41 outputs of
#: 222264 terms, b innermost; BLAS's GEMV 2.1 ms where the 2744 GEMVs on views take 1.2). On 30
#: of the 169 products of seeds 0-11999 whose views streamed (2-core Xeon, blas's plan with C,
#: in-process A/B, 7 interleaved rounds): matrices read along their summed labels 1.09-1.94x
#: (15 of 15), along runs of outputs of 672 bytes or more 1.17-3.74x (``zknsoe,nzk->eos``,
#: F64, 6762 GEMVs of 9 x 144: 5.4 -> 1.45 ms), of 164-496 bytes 0.57-0.85x (four).
GEMV_COLUMN_MIN_BYTES = 512
#: TTGT's GEMMs (not GEMVs) read an operand in place wherever BLAS can, GEMM by GEMM: its
#: batch labels at any stride, its rows at least a row apart (:func:`_blas_reads`), not only
#: where it lies as its packed copy would. On 30 of the 207 products of seeds 0-5999 whose
#: lowering this changes (2-core Xeon, blas's plan with C, in-process A/B, 7 interleaved
#: rounds), 1.23x in geometric mean, 0.71-3.3x: the thick operand of a batch of thin GEMMs
#: read in place of being packed in blocks, ``flk,lks->fsk`` (F32, 874 GEMMs of 49 x 57 x 215)
#: 79 -> 24 ms, ``lbqa,koqab->kqol`` 15.2 -> 7.0; packing nothing, a batch still runs here
#: (``xab,abu->xua``: its GEMMs on views are GEMVs). Losers: ``zsanhg,nhaxg->szxa`` (A read
#: in rows 404 KB apart, 0.71x), two below 0.95. On 30 of the 224 of seeds 6000-11999 (drawn
#: after the rule was set, GEMVs then included): 1.09x, 0.67-2.7x, the two worst batches of
#: GEMVs (``ujdrq,uj->qdjr`` 0.67x, ``bdst,st->bsd`` 0.70x, two more within 0.95-1.07):
#: GEMVs keep their packs. On 30 of the 191 of seeds 12000-17999 under this rule: 1.10x,
#: 0.82-3.26x (``fuge,gufds->desf``, C64, 55.5 -> 17.0 ms; four below 0.95).
IN_PLACE_ANY = True
TTGT_STORE_MAX_BYTES = 1 << 24
#: A batch of thin GEMMs (a side of at most THIN_MAX) whose T would hold THIN_BATCH_MIN_BYTES
#: or more is packed in blocks, each block's part of T stored into D while in cache (see
#: :func:`_thin_side`), where its blocks hold at most THIN_BATCH_BLOCK_MAX bytes of the thick
#: operand or the whole TTGT would exceed TTGT_MAX_BYTES; as the alternative a plan tries
#: (:func:`alternative`), from THIN_BATCH_TRIED_BYTES and blocks of any size. Each had been
#: so only from TTGT_STORE_MAX_BYTES (16 MiB): the whole T, written then read again by the
#: store, cost a pass over memory more. From 4 MiB (2-core Xeon, blas's plan with C, in-process
#: A/B, 7 interleaved rounds): on 40 products drawn from the 413 of seeds 0-5999 this changes
#: from 1 MiB, 1.12x (0.88-2.49x); on 40 drawn from the 163 of seeds 6000-11999 it changes,
#: 1.31x (0.79-2.64x: ``wydsq,dyo->swqod``, F32, 6 GEMMs of 53240 x 5 x 34, 8.8 -> 3.3 ms;
#: ``aetr,dhorea->tahdo`` 95 -> 37 ms, where the batched GEMM of the backend's plan had run).
#: Blocks of more than 4 MiB (the whole batch in each) lost (``crtjz,fzjt->frcz``, F32, 5.3
#: MB blocks: 0.79x; 0.79-1.13x on seven such) unless the whole TTGT exceeded the scratch
#: bound (2.15x and 2.57x). From 1 MiB the T of 1-4 MiB gain as much as they lose
#: (``fcwath,batc->fhbwt`` 2.17x, ``mzver,mxlzeq->rxleqv`` 0.68x): a plan tries those.
THIN_BATCH_MIN_BYTES = 1 << 22
THIN_BATCH_BLOCK_MAX = 1 << 22
THIN_BATCH_TRIED_BYTES = 1 << 20
#: A GEMM whose thin side has at most THIN_MAX rows (or columns), and whose thick operand
#: BLAS cannot read in place, packs that operand in blocks of about PACK_BLOCK_BYTES (and at
#: least THIN_REREAD times the thin operand, which is read again for each block: a quarter of
#: the block at most), each multiplied while in cache by one worker's one-thread BLAS: the
#: packed copy is never written to memory and read back, and its memory is saved. In blas's
#: plan its time matched packing whole up to 128 rows (F32, F64, C128) and lost above
#: (``bi,oij->boj``, 256x128 and 64x128x128, F32: 4.4 against 3.8 ms at 256). The executor
#: does so for single TTGT GEMMs whose thick operand holds at least TTGT_BLOCK_MIN_BYTES, the
#: packed label order kept (the pack reads the operand along its memory either way): on 29
#: seeded random products that qualify from 2 MiB (2-core EPYC, with C), 0.81-3.03x packing
#: whole, the losses (to 0.81x) all below 8 MiB but one (0.94x, a thin side of 3 MB); from
#: 8 MiB 0.94-3.03x, ``eskmof,kifaej->soiaj`` (F64, m = 60, an 8.4 MB B) 4.6 -> 3.1 ms,
#: ``zojx,fowjzh->xfhw`` (F32, 59 MB) 15.4 -> 5.8 ms, ``fial,fyael->yei`` 28.5 -> 9.7 ms.
#: A batch of such GEMMs whose labels D's lines run along (D's runs without them shorter than
#: TILE_LINE) runs every GEMM of the batch inside each block, one after another, the block's
#: rows of all of them stored together (:func:`_thin_batch`): a block of one GEMM wrote one
#: number per line of D, each line fetched again for every GEMM of the batch
#: (``ncqia,iab->qnbca``, F64, 38 GEMMs of 26 x 11400 x 7, ``a`` D's fastest: 162 -> 20 ms).
#: Of 12000 seeded products, 96 qualify (2-core Xeon, blas's plan with C, 7 interleaved
#: rounds): 1.04-8.97x, geometric mean 3.07x, none slower. So does a batch along which the
#: thick operand runs shorter than TILE_SOURCE_RUN bytes (each GEMM's blocks would read parts
#: of the same lines), where each block then writes D in runs of half a line at least: 101
#: more products of those seeds, 0.56-7.3x, geometric mean 1.83x, seven below 0.95x
#: (``xrs,twrxc->crstw`` 0.56x, ``jnu,uhfin->infhj`` 0.78x); ``hdm,wumd->uhmw`` 170 -> 23 ms,
#: ``umx,lrxu->xmrl`` (F32) 211 -> 31 ms, ``ordh,ond->nrdh`` 57 -> 12 ms (GEMVs on views before).
#: Without the half-line rule 15 of 113 lost, to 0.38x.
THIN_MAX = 128
PACK_BLOCK_BYTES = 1 << 18
#: Thin GEMMs whose blocks hold at most this many bytes count only what one worker allocates
#: against TTGT_MAX_BYTES, not the thick operand they never pack whole: the seeded random
#: products this admits (15 of 500, 2-core EPYC; blocks of 0.25-9 MB of operands of 67-233 MB)
#: ran here 1.17-3.8x faster than the backend's plan (geometric mean 2.1x; at 1.4 times the
#: size 16 products, 1.03-3.0x, 1.82x); five blocks of 23 MB did not (0.48x).
BLOCK_LEAN_BYTES = 1 << 24
THIN_REREAD = 4
#: A batch of thin GEMMs whose packs and T together exceed TTGT_MAX_BYTES, which the
#: executor had left to the backend's plan (or to GEMMs on views), is packed in blocks as
#: above whatever its T, where its thin side has at most THIN_SCRATCH_MAX rows (columns) and
#: each block holds at least that many of each GEMM's where the batch runs inside it; as the
#: alternative to GEMMs on views a plan tries (:func:`alternative`), up to THIN_MAX. 447
#: products of seeds 0-11999 take it (2-core Xeon, blas's plan with C, 7 interleaved rounds):
#: on 40 drawn after the bound was chosen 2.02x the backend's plan in geometric mean, 0.68-4.2x
#: (three below 0.95: sides of 6-18 summing 8400-42432 terms); ``bxhco,txbcdyo->yxthd``
#: (F64, a 114 MB B) 34.3 -> 9.2 ms.
#: Thin sides of 25-39 had lost to 0.28x (``shvnb,hvsng->bgv``, C64, 13 GEMMs of 39 x 73 x
#: 9240, blocks of 4 columns of each: 38 -> 135 ms). As the alternative, 14 products of those
#: seeds: the better of the two 1.36x the GEMMs on views (``yxgjk,mgjxw->yxwmk``, F64, 7524
#: GEMMs of 39 x 4 x 265: 39.9 -> 18.3 ms).
THIN_SCRATCH_MAX = 24
#: A GEMM writing D itself, where T would hold SLAB_FROM_BYTES or more, runs as slabs of its
#: rows of at most SLAB_BYTES of D (the executor's FUSE_SLAB_MAX: each slab of D set from C,
#: then added into, while in cache), at least SLAB_MIN_ROWS rows each. From 2 MiB rather than
#: TTGT_STORE_MAX_BYTES (16 MiB): 19 more seeded products (seeds 0-29999), 0.95-1.34x,
#: geometric mean 1.10x (from 4 MiB: 1.06x).
SLAB_BYTES = 1 << 20
SLAB_MIN_ROWS = 8
SLAB_FROM_BYTES = 1 << 21
TTGT_BLOCK_MIN_BYTES = 1 << 23
#: A GEMM of any other shape whose T would hold TILE_FROM_BYTES or more, where D does not
#: lie as T, computes T in boxes of its rows (of its columns where it has more of them), each
#: packed, multiplied and stored into D by one worker while in cache (:func:`_row_blocks`): no
#: temporary as large as D is made, and T is never written to memory and read back. Boxes of
#: about TILE_T_BYTES of T (half this machine's L2), at least TILE_MIN_ROWS rows and
#: min(TILE_GEMM_ROWS, TILE_K_ROWS * k) (each box's GEMM packs the other operand again: a wide
#: box pays for it where k is long). The rows go in D's order; those above a box, its lead
#: labels, must leave D runs of TILE_LINE bytes (a box writing parts of D's lines would leave
#: the rest to a box much later) and, where the boxed operand is too large for the caches
#: (TTGT_BLOCK_MIN_BYTES), runs of TILE_SOURCE_RUN bytes of it (``xmtqspf,kyqxp->kpsymf`` with
#: its batch label ``p`` 136 bytes apart: each box would read parts of the same lines, 0.85x).
#: Above TTGT_MAX_FLOPS, the route the blocked GEMMs of the executor take where they store
#: blocks. Measured on 84 seeded random products this changes (2-core EPYC, blas's plan with C,
#: seeds 0-700, sizes 1 and 1.4): geometric mean 1.63x the backend's plan they ran on before,
#: 0.83-7.5x, three below 0.95x (complex, k of 70-72, or a 254 MB D the store streams at the
#: copy rate); ``puldr,pULDR->uUlLdDrR`` (134 MB D) 22.3 -> 12.1 ms, ``kybf,amki->fyimba``
#: 14.4 -> 10.6, ``bdai,kjcd->abcijk`` 60 -> 46. Boxes of 256 KB to 2 MB of T, 16 to 64 rows
#: at least, measured within 3% of these (geometric means on 49 products).
TILE_FROM_BYTES = 1 << 24
TILE_T_BYTES = 1 << 19
TILE_MIN_ROWS = 32
TILE_GEMM_ROWS = 128
TILE_K_ROWS = 2
TILE_LINE = CACHE_LINE
TILE_SOURCE_RUN = 1024
#: Where a batch's labels cannot be lead labels (D's lines run along them, or they leave too
#: few boxes), the batch's GEMMs run inside each box instead, one after another into the box's
#: buffer, all of them stored together: boxes of at most TILE_BATCH_BYTES of T (every GEMM's
#: rows of the box; 512 KiB left both products below on the backend's plan, 2 MiB tied), D's
#: and the boxed operand's runs counted over the blocked label's `block` indices where they
#: run on along it, the boxed operand's whenever it outgrows L2 (``whyno,fwrh->rfoyw``, its
#: boxes reading A's lines one element each, took 6.0 ms against 2.6 with T whole). Of 1400
#: seeded products (seeds 0-700, sizes 1 and 1.4) two qualify: ``xmtqspf,kyqxp->kpsymf``
#: (F64, 19 GEMMs) 16.4 -> 11.4 ms, ``btdml,qlgrmt->gbdrqt`` (F32, 7) 8.2 -> 5.2 ms.
#: Where the rows a box would take make it larger, it takes fewer (one index of the label cut,
#: at least), down to k / TILE_BATCH_K_ROWS rows of each GEMM (each box's GEMMs pack their
#: other operands again): ``xhfr,crx->hcfx`` (F64, 50 GEMMs of 101 x 825 x 35 into a 33 MB T,
#: D running along x) had run as 75750 GEMVs on views, 33.0 ms, and runs in boxes of 15 rows
#: of each GEMM, 12.6 ms (numpy.einsum 33.4). On the 33 products of seeds 0-11999 this
#: changes (2-core Xeon, blas's plan with C, 7 interleaved rounds), 0.98-4.1x (geometric mean
#: 2.0x); on 17 of seeds 12000-19999, not used to choose the bound, 0.99-2.85x (1.65x). Boxes
#: of fewer rows lost to 0.53x (``ldrm,rclm->cdl``, 148 GEMMs of k = 234, 7 rows a box).
TILE_BATCH_BYTES = 1 << 20
TILE_BATCH_K_ROWS = 4
#: Fewest rows, columns and inner extent of TTGT's GEMMs: GEMV-like (one row or column) and
#: outer products (nothing summed) stay with the backend's kernels, which read in place; a
#: narrow GEMM (5 columns, say) is still faster packed here than by the backend in Python.
TTGT_MIN_DIM = 2
#: Fewest elements of D per GEMM for TTGT to replace the loop nest on products of more than
#: GEMM_MIN_MADDS multiply-adds (measured: a 16 x 8 D summing 32 terms each, 2.2 us packed
#: against 5.3 us looped; a 2 x 2 D summing 128, 1.8 us against 0.9 us).
TTGT_MIN_BLOCK = 16
#: A GEMV-like product streamed through its matrix operand (:func:`_stream`) is shared out over
#: the pool along the matrix's outermost label: where that is one of D's with a stride in D of
#: at least STREAM_SPLIT_LINE bytes (a cache line), each worker adds into its own elements of
#: D; otherwise each adds into its own zeroed copy of D (a temporary T in the matrix's order of
#: D's labels), the copies are added up and stored into D with the epilogue, where D has at
#: most 1/STREAM_PRIVATE_SHARE of the matrix's bytes and STREAM_PRIVATE_MAX_BYTES (workers
#: sharing D's cache lines took ten times as long: ``tbcv,mcvbu->um``, F32, 36 ms against
#: 2.9); failing both, a label of D on which the matrix strides by at least STREAM_SPLIT_STRIDE
#: bytes is moved outermost and shared out (each worker still streams runs that long), else
#: one thread streams (``hmtfc,ht->tcfm``, F32, 12 MB, with runs of 3168 bytes under ``t``:
#: 3.6 ms on one thread, 1.4 shared out along ``t``; at 4096 bytes, one thread).
STREAM_SPLIT_LINE = 64
STREAM_PRIVATE_SHARE = 16
STREAM_PRIVATE_MAX_BYTES = 1 << 24
STREAM_SPLIT_STRIDE = 1024
#: GEMV-like products whose multiply-adds over every label (what a loop nest runs) exceed this
#: many times the elements of A and B (what a stream reads) stream, whatever their size: the
#: labels an operand sums on its own are summed while packing. ``de,fd->e`` with ``f``
#: isolated (F64, 1.3M multiply-adds over 106k elements): 277 us looped, 30 us streamed;
#: ``hdg,hfd->dg`` (C128) 1.91 ms against 0.23; ``kbgjh,kgjbd->hk`` (C64, 1.0M multiply-adds
#: over 574k elements) 1.22 ms against 0.35.
STREAM_OWN_SUMS = 1
#: ... and so do those whose stream runs its innermost loop over at least this many elements
#: (above LOOP_MAX_MADDS; the loop nest summing elements or rows strides through the matrix):
#: ``klcd,dc->lk`` (F64, 101k multiply-adds, runs of 520) 52 -> 15 us, ``cbflk,kfc->bkl``
#: (F32, rows of 13) 253 -> 53 us, ``ladfc,adlf->cd`` (C64, runs of 17) 753 -> 194 us; with
#: runs of 5 the nest was twice as fast (``ahjifl,lifa->jlh``, F64: 40 against 79 us).
STREAM_RUN_MIN = 8
#: A stream's V is spread over D's labels inside its innermost run (:func:`_stream_spread`)
#: where that loop is shorter than STREAM_SPREAD_RUN bytes, holding at most
#: 1/STREAM_SPREAD_SHARE of M's bytes: ``snqa,sa->qa`` (F32, runs of 13 in rows of 1430)
#: 2.9 -> 1.3 ms, ``vtufxdw,vwxt->wufd`` (runs of 10) 3.0 -> 1.0 ms; with loops of 104-376
#: bytes it lost (0.56-0.98x on 14 seeded products: V's copies read again per row).
STREAM_SPREAD_SHARE = 16
STREAM_SPREAD_RUN = 64
#: Most bytes of the buffer into which a stream sums M's block over labels of M's own first
#: (:func:`_own_block`), and fewest: with less, each block's sums and calls cost what they save
#: (``rlpxb,plr->rb``, F64, rows of 8 summed 22 times: 0.84x).
STREAM_OWN_BYTES = 32 << 10
STREAM_OWN_MIN_BYTES = 256
#: ... only where the pass's innermost run is at most this many bytes long: a dot's (its
#: additions across the register and its store cost what its products do), else a row's
#: (a run of D's against one number of V, or of a batch label: one load and store per product
#: either way). Of the 226 streams of seeds 0-11999 with such a block, summing it first made
#: those with such runs 1.46x faster in geometric mean (73 products, 0.94-4.4x; on 62 of seeds
#: 12000-23999, not used to choose the bounds, 1.36x, 0.90-3.3x); longer dots 0.97x (35, 12
#: below 0.95), longer rows 1.05x (86, 23 below), short batch runs 0.75-2.2x (they have their
#: running sums across the label outside already).
STREAM_OWN_DOT_RUN = 256
STREAM_OWN_RUN = 64
#: An elementwise product (nothing summed) whose A or B runs along another label than D does,
#: striding by a cache line (PLANE_LINE bytes) or more along D's fastest, reads that operand
#: one element per line. Each line is read again when the operand's own fastest label steps:
#: in cache where the lines touched in between fit the L2 cache, unless they all map to a few
#: cache sets (a stride of a multiple of PLANE_ALIASING bytes). Where they do not, and from
#: PLANE_MIN_BYTES of operand, the loop nest runs block by block, each block of the operand
#: packed in D's order first (a tiled copy) and multiplied from there (:func:`_planes`).
#: Blocks of about PLANE_BLOCK_BYTES grow along D's fastest labels and the operand's in turn,
#: so that both are read in runs as long as the block allows. With C, on a 2-core EPYC (1 MiB
#: of L2): ``abcd,dcba->abcd`` (48^4) 13.8 -> 7.5 ms (F32), 19.4 -> 11.4 (F64), 27.8 -> 11.6
#: (C64); ``ij,ji->ij`` (2048^2, F32) 10.6 -> 5.0; ``abcd,bdca->abcd`` (40^4, F32) 3.9 -> 2.2.
#: Where the lines stay in cache the blocks lost: ``abcd,cdab->abcd`` (40^4, F64) 2.6 -> 4.8,
#: ``ij,ji->ij`` (1000^2, F64) 0.9 -> 1.7.
PLANE_LINE = CACHE_LINE
#: (and where both labels of the tiled copy span this many elements, as the copy requires)
PLANE_MIN_EXTENT = 8
PLANE_ALIASING = 4096
#: ... or, where D's fastest label strides by pages, the lines of the labels inside ``x`` lie
#: in more pages than this (the L2 TLB's entries on this CPU: 3072): ``ab,ba->ab`` at 6000^2
#: (F64, 6000 pages) 91 -> 48 ms, 4000^2 (F32) 24.6 -> 12.9 ms; at 3000^2 and 1500^2 (F64) the
#: blocks lost (0.91x, 0.77x).
PLANE_PAGES = 3072
PLANE_MIN_BYTES = 1 << 20
PLANE_BLOCK_BYTES = 1 << 18
#: The executor lets other Python threads run during products of at least this many flops.
RELEASE_GIL_FLOPS = 1 << 16

#: CBLAS constants.
NO_TRANS, TRANS, CONJ_TRANS = 111, 112, 113

#: Datatypes the executor computes in, and their code in the executor.
_CODES = {Datatype.F32: 0, Datatype.F64: 1, Datatype.C32: 2, Datatype.C64: 3}


class Step(IntEnum):
    """The executor's two kinds of main step."""

    LOOP = 0
    GEMM = 1
    TTGT = 2
    STREAM = 3


@dataclass(frozen=True)
class GemmStep:
    """Row-major CBLAS GEMMs over a batch: ``D = alpha op(L) op(R) (+ beta D)`` per element.

    ``swap``: the left matrix is B's (each call computes ``D^T = B^T A^T``). Batch strides are
    in bytes for A, B and D; m, n, k and leading dimensions in elements. The first ``summed``
    batch labels are summed labels (D's stride 0): the executor's summed-GEMM kernel adds
    their GEMMs into D (:func:`pytapp.analysis.viewgemm.summed_view_gemm`).
    """

    batch_extents: tuple[int, ...]
    batch_a: tuple[int, ...]
    batch_b: tuple[int, ...]
    batch_d: tuple[int, ...]
    swap: bool
    trans_left: int
    trans_right: int
    m: int
    n: int
    k: int
    ld_left: int
    ld_right: int
    ld_d: int
    summed: int = 0

    def as_tuple(self) -> tuple[object, ...]:
        """Return the executor's argument tuple."""
        return (self.batch_extents, self.batch_a, self.batch_b, self.batch_d, int(self.swap),
                self.trans_left, self.trans_right, self.m, self.n, self.k, self.ld_left,
                self.ld_right, self.ld_d, self.summed)


@dataclass(frozen=True)
class PackStep:
    """TTGT's packing: A as ``[H][M][K]``, B as ``[H][K][N]``, the GEMMs' result T as ``[H][M][N]``.

    T is ``[H][N][M]`` where the GEMMs compute ``T^T = B^T A^T`` (D's fastest label is A's);
    either operand may be packed transposed.

    Isolated labels are summed while packing; each nest is (output count, extents, source byte
    strides).

    ``bytes_a``/``bytes_b`` are 0 when the operand already lies that way (used in place);
    ``t_strides`` are T's byte strides per loop label of D (0 for broadcast labels).
    ``d_direct``: D lies as T would (unconjugated), so that without C the GEMMs write D
    itself with alpha and no temporary is made.
    """

    nest_a: tuple[int, tuple[int, ...], tuple[int, ...]]
    nest_b: tuple[int, tuple[int, ...], tuple[int, ...]]
    t_strides: tuple[int, ...]
    bytes_a: int
    bytes_b: int
    bytes_t: int
    d_direct: bool = False
    #: The thick operand of a thin GEMM packed in blocks (:func:`_thin_blocks`): A (0), B (1)
    #: or none (-1). ``block`` indices at a time of its outermost free label (its nest's label
    #: ``block_axis``: 0, or after the summed labels where the pack is transposed), each
    #: ``block_unit`` rows or columns of T, are packed into each worker's buffer of
    #: ``block_bytes`` and multiplied while in cache, instead of the whole operand at once.
    blocked: int = -1
    block: int = 0
    block_unit: int = 0
    block_bytes: int = 0
    block_axis: int = 0
    #: With blocks: the blocked label's place among the store's labels (D's, merged), each
    #: block's rows or columns of T stored into D while in cache from its worker's buffer of
    #: ``bytes_t`` (``t_strides`` that buffer's), where D is not written by the GEMMs
    #: themselves; -1: T whole, stored at the end.
    block_store: int = -1
    #: With blocks stored: the lead labels, one index of each per block (a batch of GEMMs'
    #: labels, then free labels of the thick operand above the blocked one, taken out of its
    #: nest), each (extent, the thick operand's byte stride, its place among the store's
    #: labels, the other operand's byte stride: per GEMM of a batch, 0 for a free label).
    block_lead: tuple[tuple[int, int, int, int], ...] = ()
    #: With blocks stored, where a batch's labels are not lead labels: its GEMMs, one after
    #: another in each block (their blocks of the thick operand packed one after another,
    #: ``block_bytes`` for all of them; T's box ``bytes_t`` for all, ``t_strides`` over the
    #: batch's labels included); 1 otherwise.
    block_gemms: int = 1
    #: Whether an operand is read in place GEMM by GEMM where it does not lie as its pack
    #: would (:func:`_blas_reads`; ``bytes_a`` or ``bytes_b`` 0 then too).
    strided: bool = False

    def scratch_bytes(self, workers: int) -> int:
        """Bytes of scratch one run allocates at most with ``workers`` threads (T included)."""
        if self.blocked < 0:
            return self.bytes_a + self.bytes_b + self.bytes_t
        thin = self.bytes_b if self.blocked == 0 else self.bytes_a
        per_worker = self.block_bytes + (self.bytes_t if self.block_store >= 0 else 0)
        return thin + workers * per_worker + (0 if self.block_store >= 0 else self.bytes_t)

    def as_tuple(self) -> tuple[object, ...]:
        """Return the executor's argument tuple."""
        return (self.nest_a, self.nest_b, self.t_strides, self.bytes_a, self.bytes_b,
                self.bytes_t, int(self.d_direct), self.blocked, self.block, self.block_unit,
                self.block_axis, self.block_store, self.block_lead, self.block_gemms)


@dataclass(frozen=True)
class StreamStep:
    """A GEMV-like product streamed through its matrix operand M (B where ``swap``).

    The vector operand V, which has no free labels, is packed by ``pack`` (a packing nest as
    :class:`PackStep`'s; ``bytes_v`` 0: read in place) as M holds their labels; where V has
    labels of its own to sum, ``v_sum`` instead walks V in its memory order adding each element
    into a zeroed buffer (extents, V's and the buffer's byte strides, 0 along the summed
    labels): the pack itself, or (``v_permute``) one in V's order of the kept labels, which
    ``pack`` then permutes into the pack (a scattered sum took twice as long); ``v_mode``
    shares the walk out as ``mode`` does the pass (:func:`_pass_order`).
    Then one pass over M in its memory order adds ``op(M) op(V)`` up. ``mode`` says where:

    - 0 and 1: into D itself, set to ``beta op_C(C)`` first (alpha applied in the pass, op_D
      after it); 1 shares the pass out along its first label, one of D's.
    - 2: into each worker's zeroed temporary T of ``bytes_t`` (D's labels in M's order), the
      pass shared out along its first label whatever it is; the temporaries are added up and
      stored into D with the epilogue (``t_strides``: T's byte strides over the program's
      labels of D).
    - 3: as 2, but the first label is one of D's, along which T's lines lie apart: one zeroed
      T, each worker adding into its own part of it (``qeotr,eq->torq``: ``q`` outermost in M
      and innermost in D; no copies to zero and add up).

    ``extents`` are the pass's labels, outermost first, ``strides`` M's, V's (packed) and D's
    (T's in modes 2 and 3) byte strides per label (0 where one lacks it). ``own`` (0: none):
    the first label of a block in which labels M sums on its own lie outside others; each
    worker sums M's block over them first into a buffer of ``bytes_own`` (:func:`_own_block`).
    """

    swap: bool
    pack: tuple[int, tuple[int, ...], tuple[int, ...]]
    bytes_v: int
    mode: int
    extents: tuple[int, ...]
    strides: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]
    bytes_t: int = 0
    t_strides: tuple[int, ...] = ()
    v_sum: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] = ((), (), ())
    v_permute: bool = False
    v_mode: int = 0
    own: int = 0
    bytes_own: int = 0

    def scratch_bytes(self, workers: int) -> int:
        """Bytes of scratch one run allocates at most with ``workers`` threads."""
        walk_copies = workers - 1 if self.v_sum[0] and self.v_mode == 2 else 0
        return (self.bytes_v * (1 + int(self.v_permute) + walk_copies)
                + self.bytes_t * (workers if self.mode == 2 else int(self.mode == 3))
                + self.bytes_own * workers)

    def as_tuple(self) -> tuple[object, ...]:
        """Return the executor's argument tuple."""
        return (int(self.swap), self.pack, self.bytes_v, self.mode, self.t_strides, self.bytes_t,
                self.extents, *self.strides, *self.v_sum, int(self.v_permute), self.v_mode,
                self.own)


@dataclass(frozen=True)
class Lowered:
    """A product lowered for the compiled executor.

    Operand tuples are in the order A, B, C, D; strides are in bytes. ``extents`` lists the
    loop labels: the first ``nout`` are D's merged labels, the rest are summed. ``row_sums``:
    where not 0, the loop nest sums D's rows one summed element at a time, in blocks of that
    many (:func:`_row_sums`).
    """

    kind: Step
    dtype: int
    datatype: Datatype
    shapes: tuple[tuple[int, ...], ...]
    strides: tuple[tuple[int, ...], ...]
    footprints: tuple[tuple[int, int] | None, ...]
    conj: tuple[int, int, int, int]
    nout: int
    extents: tuple[int, ...]
    label_strides: tuple[tuple[int, ...], ...]
    gemm: GemmStep | None
    pack: PackStep | None
    flops: int
    empty_sum: bool
    description: str
    row_sums: int = 0
    stream: StreamStep | None = None
    #: An elementwise loop nest run block by block (:func:`_planes`): which of A (1) and B (2)
    #: are packed, and each label's indices per block; ``(0, ())`` where it is not.
    planes: tuple[int, tuple[int, ...]] = (0, ())


def _uniform(spec: ContractionSpec) -> Datatype | None:
    """Return the datatype of every operand when the executor computes in it, else ``None``."""
    dt = spec.a.datatype
    if dt not in _CODES or any(op.datatype is not dt for op in spec.operands):
        return None
    rule = spec.rule
    if rule.real is not dt.real or rule.is_complex != dt.is_complex:
        return None
    if rule.input_round is not None and rule.input_round is not dt.real:
        return None
    return dt


def _byte_footprint(op: OperandSpec, item: int) -> tuple[int, int] | None:
    if op.footprint is None:
        return None
    low, high = op.footprint
    return low * item, (high + 1) * item


def _matrix(rows: int, cols: int, s_rows: int, s_cols: int, conj: bool) -> tuple[int, int] | None:
    """(CBLAS transpose flag, leading dimension) of a row-major reading of a strided matrix."""
    if (cols <= 1 or s_cols == 1) and (rows <= 1 or s_rows >= max(cols, 1)):
        if conj:
            return None  # CBLAS conjugates only together with a transposition
        return NO_TRANS, max(s_rows if rows > 1 else cols, cols, 1)
    if (rows <= 1 or s_rows == 1) and (cols <= 1 or s_cols >= max(rows, 1)):
        return (CONJ_TRANS if conj else TRANS), max(s_cols if cols > 1 else rows, rows, 1)
    return None


def _gemm_step(spec: ContractionSpec, g: ViewGemm, item: int) -> GemmStep | None:
    """CBLAS arguments of one view mapping, or ``None`` when CBLAS cannot take it in place."""
    nb = len(g.batch)
    (ra, ka), (kb, cb), (rd, cd) = g.a.strides[nb:], g.b.strides[nb:], g.d.strides[nb:]
    conj_a, conj_b = spec.a.conjugates, spec.b.conjugates
    if not g.swap:  # D row-major: D = A B
        m, n = g.m, g.n
        left = _matrix(m, g.k, ra, ka, conj_a)
        right = _matrix(g.k, n, kb, cb, conj_b)
        d_rows, d_cols = rd, cd
    else:  # D column-major: D^T = B^T A^T
        m, n = g.n, g.m
        left = _matrix(m, g.k, cb, kb, conj_b)
        right = _matrix(g.k, n, ka, ra, conj_a)
        d_rows, d_cols = cd, rd
    # D row-major in CBLAS's reading: unit columns, and rows at least a row apart (a negative
    # or overlapping row stride is no leading dimension)
    if (n > 1 and d_cols != 1) or (m > 1 and d_rows < max(n, 1)):
        return None
    ld_d = max(d_rows if m > 1 else n, n, 1)
    if left is None or right is None:
        return None
    order = _batch_order(spec, g, item)
    return GemmStep(
        batch_extents=tuple(g.a.shape[i] for i in order),
        batch_a=tuple(g.a.strides[i] * item for i in order),
        batch_b=tuple(g.b.strides[i] * item for i in order),
        batch_d=tuple(g.d.strides[i] * item for i in order),
        swap=g.swap, trans_left=left[0], trans_right=right[0], m=m, n=n, k=g.k,
        ld_left=left[1], ld_right=right[1], ld_d=ld_d,
    )


def _new_lines(view: MatrixView, nb: int, step: int, item: int) -> float:
    """Count the cache lines of a GEMM's matrix in ``view`` new to it after a batch step.

    ``step``: the matrix's batch stride in elements (0: the same matrix, no new line); a step
    shorter than its rows' runs brings a part of each row's lines.

    Examples
    --------
    >>> v = MatrixView((4, 16, 8), (128, 8, 1))  # 4 matrices of 16 rows of 64 bytes (F64)
    >>> _new_lines(v, 1, 0, 8), _new_lines(v, 1, 4, 8), _new_lines(v, 1, 128, 8)
    (0.0, 8.0, 16.0)
    """
    if step == 0:
        return 0.0
    (p, q), (s0, s1) = view.shape[nb:], view.strides[nb:]
    rows, run = (p, q) if abs(s1) == 1 or q == 1 else (q, p) if abs(s0) == 1 or p == 1 \
        else (p * q, 1)
    return float(rows * min(-(-run * item // CACHE_LINE), abs(step) * item / CACHE_LINE))


def _batch_order(spec: ContractionSpec, g: ViewGemm, item: int) -> list[int]:
    """Return the order of ``g``'s batch labels the GEMMs loop over, outermost first.

    The order whose loops fetch the fewest cache lines (:func:`_lines_fetched`) where that is
    at most :data:`BATCH_ORDER_MARGIN` times what the lowering's order fetches; else the
    lowering's. Summed batch labels (``g.reduced``) stay first.
    """
    nb = len(g.batch)
    order = list(range(nb))
    if not 2 <= nb - g.reduced <= BATCH_ORDER_LABELS or sum(
            op.size for op in (spec.a, spec.b, spec.d)) * item <= BATCH_ORDER_BYTES:
        return order  # (operands that fit in cache together: any order finds them there)
    head = order[:g.reduced]
    fetched = {tuple(o): _lines_fetched(g, [*head, *o], item)
               for o in itertools.permutations(order[g.reduced:])}
    best = min(fetched, key=lambda o: (fetched[o], o))
    if fetched[best] >= BATCH_ORDER_MARGIN * fetched[tuple(order[g.reduced:])]:
        return order
    return [*head, *best]


def _lines_fetched(g: ViewGemm, order: Sequence[int], item: int) -> float:
    """Cache lines the batch loops of ``g`` in ``order`` (outermost first) fetch from memory.

    A loop's iterations find in cache what the previous one touched while everything its
    body touches fits in :data:`BATCH_ORDER_BYTES`; beyond, each iteration fetches again all
    its body fetches. Per step of a loop an operand touches no new line where it does not move
    along the label, a part of each row where it moves by less than a row's run. D counts
    twice (its lines are read, then written back).

    Examples
    --------
    >>> a = MatrixView((8, 1024, 64, 16), (0, 1024, 16, 1))  # A: the same along x, 8 MiB
    >>> b = MatrixView((8, 1024, 16, 16), (262144, 256, 16, 1))
    >>> d = MatrixView((8, 1024, 64, 16), (1048576, 1024, 16, 1))
    >>> g = ViewGemm(("x", "y"), ("i",), ("j",), ("k",), 8192, 64, 16, 16, False, a, b, d)
    >>> round(_lines_fetched(g, [0, 1], 8) / _lines_fetched(g, [1, 0], 8), 2)  # A read 8 times
    1.37
    """
    nb = len(g.batch)
    views, weights = (g.a, g.b, g.d), (1, 1, 2)
    distinct = [_new_lines(v, nb, 1 << 62, item) for v in views]  # one call's lines
    fetched = list(distinct)
    for depth, i in enumerate(reversed(order)):
        fits = sum(distinct) * CACHE_LINE <= BATCH_ORDER_BYTES
        extent = g.a.shape[i]
        for x, v in enumerate(views):
            step = v.strides[i]
            new = (_new_lines(v, nb, step, item) if depth == 0 else
                   distinct[x] * min(1.0, abs(step) * item / CACHE_LINE))
            fetched[x] = fetched[x] + (extent - 1) * new if fits else extent * fetched[x]
            distinct[x] += (extent - 1) * new
    return sum(w * f for w, f in zip(weights, fetched, strict=True))


def _choose_gemm(spec: ContractionSpec, item: int) -> tuple[ViewGemm, GemmStep] | None:
    model, cplx = MachineModel(), spec.rule.is_complex
    ranked = sorted((g for g in view_gemms(spec) if not g.reduced),  # no summing pass here
                    key=lambda g: view_gemm_seconds(g.m, g.n, g.k, g.calls, model, cplx))
    for g in ranked:
        if g.m * g.n * g.k < GEMM_MIN_MADDS:
            return None
        if g.m * g.n == 1 and (g.k > LOOP_MAX_MADDS or _streaming_dots(spec)):
            return None  # a long dot: BLAS's GEMM runs it on one core, NumPy's dot on all
        step = _gemm_step(spec, g, item)
        if step is not None:
            return g, step
    return None


def _contiguous(extents: Sequence[int], item: int) -> tuple[int, ...]:
    out, step = [], item
    for e in reversed(extents):
        out.append(step)
        step *= max(e, 1)
    return tuple(reversed(out))


def _nest(op: OperandSpec, kept: Sequence[Label], summed: Sequence[Label], spec: ContractionSpec,
          item: int) -> tuple[tuple[int, tuple[int, ...], tuple[int, ...]], bool]:
    """Return a packing nest over ``kept`` then ``summed`` labels, and whether it copies."""
    strides = dict(zip(op.modes.labels, op.modes.strides, strict=True))
    # the summed labels in the operand's memory order: the innermost sum reads along it
    summed = sorted(summed, key=lambda x: -abs(strides[x]))
    ext = tuple(spec.extent(x) for x in (*kept, *summed))
    # (a kept label the operand lacks is a broadcast: its copies repeat along it)
    src = tuple(strides.get(x, 0) * item for x in (*kept, *summed))
    in_place = not summed and not op.conjugates and src == _contiguous(ext, item)
    return (len(kept), ext, src), not in_place


def _blas_reads(op: OperandSpec, nest: tuple[int, tuple[int, ...], tuple[int, ...]],
                batch: int, outer: int, item: int) -> tuple[int, int] | None:
    """Return (batch byte stride, leading dimension) where BLAS reads a nest's operand in place.

    ``nest`` (:func:`_nest`) runs over the GEMMs' batch labels (its first ``batch``), the
    matrix's outer labels (the next ``outer``), then its inner ones. BLAS reads each matrix
    where it lies when its inner labels run as one with unit stride and its outer ones as one,
    at least a row of them apart; the batch labels as one, any stride (0: the same matrix for
    each GEMM). ``None`` otherwise, or where the nest sums labels or conjugates: it is packed.
    (:func:`_nest` reads in place only an operand that lies as the packed one would.)
    """
    kept, ext, src = nest
    if kept != len(ext) or op.conjugates:
        return None
    fused = []
    for lo, hi in ((0, batch), (batch, batch + outer), (batch + outer, kept)):
        moving = [(e, s) for e, s in zip(ext[lo:hi], src[lo:hi], strict=True) if e > 1]
        if any(s != s2 * e2 for (_, s), (e2, s2) in itertools.pairwise(moving)):
            return None
        fused.append((moving[-1][1] if moving else 0, prod(e for e, _ in moving)))
    (b_st, _), (o_st, o_ext), (i_st, i_ext) = fused
    if b_st < 0 or (i_ext > 1 and i_st != item) or (o_ext > 1 and (
            o_st % item or o_st < max(i_ext, 1) * item)):
        return None
    return b_st, (o_st // item if o_ext > 1 else max(i_ext, 1))


def _gemm_sized(spec: ContractionSpec, gemv: bool = False) -> bool:
    """Whether TTGT's GEMMs are worth their packing and calls.

    Each GEMM needs at least GEMM_MIN_MADDS and every dimension at least TTGT_MIN_DIM:
    Hadamard-heavy products (many tiny GEMMs), outer products (k = 1) and GEMV-like products
    (m or n = 1) stay with the backend's elementwise and reduce kernels, which read the large
    operand where it lies instead of packing it. ``gemv``: a side of 1 is allowed (one GEMV
    over the thick operand's free labels, see :data:`GEMV_SCATTER_RUN`).
    """
    cls = spec.classes
    m, n, k = spec.size(cls.FA), spec.size(cls.FB), spec.size(cls.P)
    sides = (max(m, n), k) if gemv else (m, n, k)
    return m * n * k >= GEMM_MIN_MADDS and min(sides) >= TTGT_MIN_DIM


def _gemm_flops(spec: ContractionSpec) -> int:
    """Flops of TTGT's GEMMs: the product's, its operands' own labels summed while packing.

    Not multiplied out: ``whyno,fwrh->rfoyw`` with ``n`` = 9 is 0.13 GFlop of GEMMs, not 1.2,
    and runs here.
    """
    cls = spec.classes
    return spec.flops // max(spec.size((*cls.IA, *cls.IB)), 1)


def _ttgt_shaped(spec: ContractionSpec) -> bool:
    """Whether TTGT beats the loop nest on a small product: GEMMs with TTGT_MIN_BLOCK outputs.

    The loop nest sums each element of D with a few chains of dependent additions: a narrow D
    with a long sum is its best case, a wide one its worst.
    """
    cls = spec.classes
    return (_gemm_sized(spec)
            and spec.size(cls.FA) * spec.size(cls.FB) >= TTGT_MIN_BLOCK)


def _ttgt(spec: ContractionSpec, out: Sequence[Label], item: int, flip: bool = False,
          tried: bool = False) -> tuple[GemmStep, PackStep]:
    """TTGT: pack A and B for contiguous GEMMs into a scratch T, stored into D afterwards.

    ``flip``: the GEMMs in the other orientation than D's layout asks for (T^T where T, or T
    where T^T; see :func:`alternative`). ``tried``: the alternative a plan tries on its calls
    (a batch beyond the scratch bound blocked whatever its thin side, see THIN_SCRATCH_MAX).
    """
    cls = spec.classes
    ext = spec.extent

    def by(op: OperandSpec, group: Sequence[Label]) -> list[Label]:
        """``group`` in ``op``'s memory order (outermost first): packing may then be a no-op."""
        strides = dict(zip(op.modes.labels, op.modes.strides, strict=True))
        return sorted(group, key=lambda x: -abs(strides.get(x, 0)))

    def inner_in(op: OperandSpec, group: Sequence[Label]) -> bool:
        """Whether ``op``'s fastest-varying label (extent > 1) is one of ``group``."""
        moving = [(abs(s), x) for x, s in zip(op.modes.labels, op.modes.strides, strict=True)
                  if ext(x) > 1]
        return bool(moving) and min(moving, key=lambda t: t[0])[1] in group

    larger = spec.a if spec.a.size >= spec.b.size else spec.b
    h, fa, fb, p = by(larger, cls.H), by(spec.a, cls.FA), by(spec.b, cls.FB), by(larger, cls.P)
    hh, m, n, k = (prod(ext(x) for x in g) for g in (h, fa, fb, p))
    # T's rows are A's free labels, its columns B's; where D's fastest free label is one of
    # A's, the GEMMs compute T^T = B^T A^T instead: T then runs along D and the store streams
    # (or the GEMMs write D itself): abc,bd->dca (F32) 34 -> 16 ms. (Batch labels do not count:
    # T's batch is its outermost either way, and where one is D's fastest the store still reads
    # T along the free label D runs along soonest: whyno,fwrh->rfoyw, F32, 7.1 -> 2.6 ms.)
    d_st = dict(zip(spec.d.modes.labels, spec.d.modes.strides, strict=True))
    moving = [x for x in spec.d.modes.labels if ext(x) > 1 and x not in cls.H]
    swap = (bool(moving) and min(moving, key=lambda x: abs(d_st[x])) in cls.FA) != flip
    # T's columns (the store's innermost runs) go in D's order where D is at least as large as
    # the operand that holds them (its pack may then permute): whyno,fwrh->rfoyw 4.6 -> 2.8 ms,
    # qhuotrwg,qmhow->mguto (F32) 33.6 -> 20.8; on 100 other seeded TTGT products 0.92-1.10x
    # (geometric mean 1.003)
    if swap and spec.d.size >= spec.a.size:
        fa = by(spec.d, cls.FA)
    elif not swap and spec.d.size >= spec.b.size:
        fb = by(spec.d, cls.FB)
    left, lfree, liso, right, rfree, riso = (
        (spec.b, fb, cls.IB, spec.a, fa, cls.IA) if swap else
        (spec.a, fa, cls.IA, spec.b, fb, cls.IB))
    rows, cols = (n, m) if swap else (m, n)
    # Each operand is packed in the orientation that reads it along its memory (the GEMM takes
    # the packed matrix transposed when that is the other one): a pack whose inner loop strides
    # through memory costs several times one that streams it.
    l_t = inner_in(left, lfree) and not inner_in(left, p)
    r_t = inner_in(right, p) and not inner_in(right, rfree)
    nest_l, pack_l = _nest(left, [*h, *p, *lfree] if l_t else [*h, *lfree, *p], liso, spec, item)
    nest_r, pack_r = _nest(right, [*h, *rfree, *p] if r_t else [*h, *p, *rfree], riso, spec,
                           item)
    # an operand BLAS reads where it lies, GEMM by GEMM, is not packed (see IN_PLACE_ANY)
    in_place = IN_PLACE_ANY and min(rows, cols) > 1
    l_reads = _blas_reads(left, nest_l, len(h), len(p) if l_t else len(lfree), item) \
        if pack_l and in_place else None
    r_reads = _blas_reads(right, nest_r, len(h), len(rfree) if r_t else len(p), item) \
        if pack_r and in_place else None
    # a thin GEMM whose thick operand must be packed: packed in blocks of its outermost free
    # label, each multiplied while in cache, in the pack's own label order (labels of extent 1,
    # batch labels included, go last)
    # a batch blocked only because its packs and T together exceed TTGT_MAX_BYTES (see
    # THIN_SCRATCH_MAX): its T alone would not have it blocked
    over = hh * ((rows * k if pack_l else 0) + (cols * k if pack_r else 0)
                 + rows * cols) * item > TTGT_MAX_BYTES
    t_bytes = hh * rows * cols * item
    scratch = hh > 1 and t_bytes < THIN_BATCH_MIN_BYTES and over
    # a batch blocked for its T alone (THIN_BATCH_MIN_BYTES), not beyond the scratch bound:
    # only in blocks of THIN_BATCH_BLOCK_MAX at most, unless tried
    capped = hh > 1 and t_bytes < TTGT_STORE_MAX_BYTES and not over and not tried
    side = _thin_side(hh, rows, cols, k, item, scratch, tried)
    pack_l, pack_r = pack_l and l_reads is None, pack_r and r_reads is None
    blocks: tuple[int, int, int] | None = None
    axis = 0  # the blocked label's place in the nest: after the summed ones where they lead
    # (a batch: each block of each GEMM of it, the batch labels out of the blocked nest; where
    # D's lines run along them, every GEMM of the batch inside each block, see THIN_MAX)
    per_gemm = [] if hh > 1 else h
    # where D's lines run along the batch, or the thick operand's do (runs shorter than
    # TILE_SOURCE_RUN: each GEMM's blocks would read parts of the same lines)
    d_lines = _run_bytes(spec.d, h, spec, item) < TILE_LINE
    inner = hh if side is not None and hh > 1 and (d_lines or (_run_bytes(
        left if side == 0 else right, h, spec, item) < TILE_SOURCE_RUN)) else 1

    def thin(op: OperandSpec, free: Sequence[Label], thick: int, thin: int
             ) -> tuple[list[Label], int, tuple[int, int, int] | None]:
        """Return (the thick operand's free labels, the blocked one first, :func:`_thin_batch`).

        Its outermost label, unless each block would write D in runs shorter than a line
        (D's lines run along it): then the first label whose blocks write D's lines whole and
        read ``op`` in runs of TILE_SOURCE_RUN, where each block's part of T is stored into D
        by itself (elsewhere T is stored whole, and only the reads count). On the 27 seeded
        products of seeds 0-11999 it changes, 0.94-6.9x (geometric mean 1.82x):
        ``bkpq,pe->ekqb`` (F64, blocks of one index of ``b``, D's fastest, each line of D
        fetched 14 times) 64 -> 24 ms, ``epgzt,tps->zgste`` 225 -> 32 ms.
        """
        free = sorted(free, key=lambda x: ext(x) == 1)
        first: tuple[list[Label], int, tuple[int, int, int] | None] | None = None
        stored = hh > 1 or hh * rows * cols * item >= TTGT_STORE_MAX_BYTES
        o_st = dict(zip(op.modes.labels, op.modes.strides, strict=True))

        def runs(o: OperandSpec, st: dict[Label, int], x: Label, n: int) -> int:
            run = _run_bytes(o, [x], spec, item)
            return run * n if abs(st[x]) * item == run else run

        for x in free if stored else free[:1]:
            got = _thin_batch(ext(x), thick, thin, k, item, inner,
                              None if d_lines else abs(d_st[x]) * item)
            order = [x, *(y for y in free if y != x)]
            first = first or (order, *got)
            if got[1] is None:
                continue
            if runs(spec.d, d_st, x, got[1][0]) >= TILE_LINE and (
                    x == free[0] or runs(op, o_st, x, got[1][0]) >= TILE_SOURCE_RUN):
                return (order, *got)
        return first or (free, 1, None)

    def thin_wide(op: OperandSpec, free: Sequence[Label], thick: int, thin_side: int
                  ) -> tuple[list[Label], int, tuple[int, int, int] | None]:
        """Return :func:`thin`'s blocks, unless they hold too few rows of each GEMM.

        Fewer rows (columns) of each GEMM of the batch than its thin side, where only the
        scratch bound has the batch blocked (see THIN_SCRATCH_MAX): the blocks are dropped.
        """
        order, gemms, got = thin(op, free, thick, thin_side)
        if got is not None and ((scratch and gemms > 1 and got[0] * got[1] < thin_side)
                                or (capped and got[2] > THIN_BATCH_BLOCK_MAX)):
            return order, 1, None
        return order, gemms, got

    if side == 0 and pack_l:
        lfree, inner, blocks = thin_wide(left, lfree, rows, cols)
        if blocks is not None:
            within = [*h] if inner > 1 else []
            axis = len(within) + (len(p) if l_t else 0)
            nest_l, pack_l = _nest(left, [*within, *p, *lfree, *per_gemm] if l_t else
                                   [*within, *lfree, *p, *per_gemm], liso, spec, item)
    elif side == 1 and pack_r:
        rfree, inner, blocks = thin_wide(right, rfree, cols, rows)
        if blocks is not None:
            within = [*h] if inner > 1 else []
            axis = len(within) + (0 if r_t else len(p))
            nest_r, pack_r = _nest(right, [*within, *rfree, *p, *per_gemm] if r_t else
                                   [*within, *p, *rfree, *per_gemm], riso, spec, item)
    else:
        inner = 1

    def t_layout(lfree: Sequence[Label], rfree: Sequence[Label]) -> tuple[dict[Label, int], bool]:
        """T's contiguous byte strides, rows and columns in these orders; whether D lies so."""
        order = [*h, *lfree, *rfree]
        contig = dict(zip(order, _contiguous([ext(x) for x in order], item), strict=True))
        return contig, not spec.d.conjugates and all(
            d_st[x] * item == contig.get(x, 0) for x in out if ext(x) > 1)

    # a GEMM of any shape whose T would hold TTGT_STORE_MAX_BYTES or more, not lying as D:
    # T computed in boxes of its rows (or columns, where it has more of them), each stored
    # into D while in cache (see TILE_T_BYTES)
    lead: list[Label] = []
    boxed = False
    if blocks is None and hh * rows * cols * item >= TILE_FROM_BYTES and not t_layout(
            lfree, rfree)[1]:
        side = 0 if rows >= cols else 1
        thick = left if side == 0 else right
        in_d = sorted(by(spec.d, lfree if side == 0 else rfree), key=lambda x: ext(x) == 1)
        lies = t_layout(*((in_d, rfree) if side == 0 else (lfree, in_d)))[1]
        tiles = None if lies else _row_blocks([ext(x) for x in in_d],
                                              cols if side == 0 else rows, k, item)
        if tiles is not None:
            cut = tiles[0]
            above = [x for x in [*(h if hh > 1 else ()), *in_d[:cut]] if ext(x) > 1]
            if (_run_bytes(spec.d, [*above, in_d[cut]], spec, item) < TILE_LINE) or (
                    thick.size * item >= TTGT_BLOCK_MIN_BYTES
                    and _run_bytes(thick, above, spec, item) < TILE_SOURCE_RUN):
                tiles = None
        if tiles is None and hh > 1 and not lies:  # the batch inside each box (see
            # TILE_BATCH_BYTES)
            tiles = _batch_boxes(in_d, hh, cols if side == 0 else rows, k, item, thick, spec)
            inner = hh if tiles is not None else 1
        if tiles is None:
            side = None
        else:
            cut, *box = tiles
            blocks, lead, boxed = (box[0], box[1], box[2] * inner), in_d[:cut], True
            within = [*h] if inner > 1 else []  # (the batch's labels first in each box)
            if side == 0:
                lfree, axis, l_reads = in_d, len(within) + (len(p) if l_t else 0), None
                nest_l, pack_l = _nest(left, [*within, *p, *lfree[cut:], *per_gemm] if l_t else
                                       [*within, *lfree[cut:], *p, *per_gemm], liso, spec, item)
            else:
                rfree, axis, r_reads = in_d, len(within) + (0 if r_t else len(p)), None
                nest_r, pack_r = _nest(right, [*within, *rfree[cut:], *p, *per_gemm] if r_t
                                       else [*within, *p, *rfree[cut:], *per_gemm], riso, spec,
                                       item)
    (nest_a, pack_a), (nest_b, pack_b) = (
        ((nest_r, pack_r), (nest_l, pack_l)) if swap else ((nest_l, pack_l), (nest_r, pack_r)))
    t_contig, d_direct = t_layout(lfree, rfree)
    a_reads, b_reads = (r_reads, l_reads) if swap else (l_reads, r_reads)
    gemm = GemmStep(
        batch_extents=(hh,) if hh > 1 else (),
        batch_a=(m * k * item if a_reads is None else a_reads[0],) if hh > 1 else (),
        batch_b=(k * n * item if b_reads is None else b_reads[0],) if hh > 1 else (),
        batch_d=(m * n * item,) if hh > 1 else (),
        swap=swap, trans_left=TRANS if l_t else NO_TRANS,
        trans_right=TRANS if r_t else NO_TRANS, m=rows, n=cols, k=k,
        ld_left=max(rows if l_t else k, 1) if l_reads is None else l_reads[1],
        ld_right=max(k if r_t else cols, 1) if r_reads is None else r_reads[1],
        ld_d=max(cols, 1))
    t_strides = tuple(t_contig.get(x, 0) for x in out)
    pack = PackStep(nest_a=nest_a, nest_b=nest_b, t_strides=t_strides,
                    bytes_a=hh * m * k * item if pack_a else 0,
                    bytes_b=hh * k * n * item if pack_b else 0, bytes_t=hh * m * n * item,
                    d_direct=d_direct, strided=l_reads is not None or r_reads is not None)
    if blocks is not None:  # the thick side is A unless B is that side of the GEMM
        pack = replace(pack, blocked=int((side == 0) == swap), block=blocks[0],
                       block_unit=blocks[1], block_bytes=blocks[2], block_axis=axis)
        if boxed or pack.bytes_t >= TTGT_STORE_MAX_BYTES or hh > 1:  # each block's rows (columns)
            # of T stored from a buffer of its own (see TTGT_STORE_MAX_BYTES)
            label = (lfree if side == 0 else rfree)[len(lead)]
            width = blocks[0] * blocks[1]  # rows (columns) of T per block
            # the buffer is T cut to a block of one GEMM: its rows, or its columns with rows of
            # `width`
            t_block = {x: 0 if x in h or x in lead else s if side == 0 or x not in lfree
                       else s // max(cols, 1) * width for x, s in t_contig.items()}
            one = (width * cols if side == 0 else rows * width) * item  # one GEMM's box
            if inner > 1:  # the batch's GEMMs one after another in the buffer
                t_block |= dict(zip(h, _contiguous([ext(x) for x in h], one), strict=True))
            thick = left if side == 0 else right
            by_label = dict(zip(thick.modes.labels, thick.modes.strides, strict=True))
            # the other operand per GEMM of a batch: packed as [H]..., or where it lies
            o_op, o_reads = (right, r_reads) if side == 0 else (left, l_reads)
            o_st = dict(zip(o_op.modes.labels, o_op.modes.strides, strict=True))
            other = _contiguous([ext(x) for x in h], k * (cols if side == 0 else rows) * item) \
                if o_reads is None else tuple(o_st.get(x, 0) * item for x in h)
            pack = replace(pack, t_strides=tuple(t_block.get(x, 0) for x in out),
                           bytes_t=one * inner, block_store=list(out).index(label),
                           block_gemms=inner, block_lead=tuple(
                               (ext(x), by_label[x] * item, list(out).index(x), o)
                               for x, o in [*(zip(h, other, strict=True)
                                              if hh > 1 and inner == 1 else ()),
                                            *((x, 0) for x in lead)] if ext(x) > 1))
    return gemm, pack


def _bytes(n: int) -> str:
    """``n`` bytes for a description: in KiB from 1 KiB.

    Examples
    --------
    >>> _bytes(512), _bytes(468160)
    ('512 bytes', '457 KiB')
    """
    return f"{n >> 10} KiB" if n >= 1 << 10 else f"{n} bytes"


def _ttgt_scratch(pack: PackStep) -> int:
    """Bytes of scratch TTGT_MAX_BYTES bounds: the packs and T.

    Where the thick operand is packed in blocks of at most BLOCK_LEAN_BYTES: what one worker
    allocates.
    """
    if pack.blocked >= 0 and pack.block_bytes <= BLOCK_LEAN_BYTES:
        return pack.scratch_bytes(1)
    return pack.bytes_a + pack.bytes_b + pack.bytes_t


def _thin_side(batch: int, rows: int, cols: int, k: int, item: int, scratch: bool = False,
               tried: bool = False) -> int | None:
    """Return the thick side of a thin GEMM worth packing in blocks: 0 rows, 1 columns.

    GEMMs with a thin side of 2 to :data:`THIN_MAX` rows or columns, whose thick operands hold
    at least :data:`TTGT_BLOCK_MIN_BYTES`: one GEMM, or a ``batch`` of them whose T would hold
    :data:`THIN_BATCH_MIN_BYTES` (:data:`THIN_BATCH_TRIED_BYTES` where ``tried``) or more
    (each block of each GEMM stored into D by itself: ``iqmoc,oti->iqctm``, 12 GEMMs of 31 x
    25200 x 16, F64, a 75 MB T: 21.7 -> 10.2 ms), or a batch with a thin side of at most
    :data:`THIN_SCRATCH_MAX` (THIN_MAX where ``tried``) whose packs and T together
    (``scratch``) exceed TTGT_MAX_BYTES.
    """
    thick, thin = max(rows, cols), min(rows, cols)
    if (not 2 <= thin <= THIN_MAX or k < 1 or batch * thick * k * item < TTGT_BLOCK_MIN_BYTES
            or (batch > 1 and batch * rows * cols * item < (
                THIN_BATCH_TRIED_BYTES if tried else THIN_BATCH_MIN_BYTES)
                and not (scratch and (tried or thin <= THIN_SCRATCH_MAX)))):
        return None
    return 0 if rows >= cols else 1


def _thin_blocks(first: int, thick: int, thin: int, k: int, item: int
                 ) -> tuple[int, int, int] | None:
    """Blocks of a thick operand whose first free label has ``first`` indices, or ``None``.

    Returns (indices of the first label per block, rows or columns of T per index, bytes of
    a block): blocks of about :data:`PACK_BLOCK_BYTES`, and at least :data:`THIN_REREAD`
    times the thin operand (read again for each block), at least two of them.

    Examples
    --------
    >>> _thin_blocks(18, 2394, 60, 440, 8)  # 18 x 133 columns, 440 long
    (1, 133, 468160)
    """
    if first < 2:
        return None
    unit = thick // first
    per = unit * k * item  # bytes per index of the first label
    target = max(PACK_BLOCK_BYTES, THIN_REREAD * thin * k * item)
    block = max(1, min(target // max(per, 1), -(-first // 2)))
    return block, unit, block * per


def _thin_batch(first: int, thick: int, thin: int, k: int, item: int, gemms: int,
                d_stride: int | None = None) -> tuple[int, tuple[int, int, int] | None]:
    """Return (GEMMs per block, :func:`_thin_blocks`) for a thin GEMM of a batch of ``gemms``.

    The batch's GEMMs go inside each block (its rows of each, one after another) where its
    blocks then hold at most :data:`BLOCK_LEAN_BYTES` and, given ``d_stride`` (D's bytes
    between the blocked label's indices), write D in runs of half a line at least (a block
    of every GEMM writing a number per line of D would leave the rest of each line to the
    next block, the whole batch's lines later); else each block is one GEMM's. Blocks that
    THIN_REREAD would make larger (the whole batch's thin operands read again for each) hold
    a quarter of BLOCK_LEAN_BYTES: of 19 seeded products so cut, 0.93-4.6x the one GEMM a
    block they had run as (geometric mean 1.84x; ``chz,zth->hct`` 299 -> 65 ms,
    ``udc,scu->usd`` 102 -> 37 ms); an eighth lost to 0.62x, a half to 0.74x.

    Examples
    --------
    >>> _thin_batch(38, 11400, 26, 7, 8, 38)  # each block: 300 rows of each of 38 GEMMs
    (38, (1, 300, 638400))
    >>> _thin_batch(7, 10626, 12, 56, 8, 27)[0]  # one index of 18 MB: one GEMM a block
    1
    >>> _thin_batch(637, 637, 102, 122, 8, 72)  # 4 MB blocks of every GEMM, not 22 MB
    (72, (59, 1, 4146048))
    >>> _thin_batch(58, 15312, 23, 29, 8, 34, d_stride=8)[0]  # D's fastest, 1 index a block
    1
    """
    if gemms > 1:
        blocks = _thin_blocks(first, thick, thin, k * gemms, item)
        if blocks is not None and blocks[2] > BLOCK_LEAN_BYTES:  # (THIN_REREAD times the
            # whole batch's thin operands): a quarter of BLOCK_LEAN_BYTES at most
            per = blocks[2] // blocks[0]
            fit = BLOCK_LEAN_BYTES // 4 // per
            blocks = (fit, blocks[1], fit * per) if fit >= 1 else None
        if blocks is not None and (
                d_stride is None or min(d_stride, TILE_LINE) * blocks[0] >= TILE_LINE // 2):
            return gemms, blocks
    return 1, _thin_blocks(first, thick, thin, k, item)


def _run_bytes(op: OperandSpec, stop: Sequence[Label], spec: ContractionSpec, item: int) -> int:
    """Bytes of ``op``'s memory that run on contiguously before one of the labels ``stop``."""
    run = item
    moving = [(abs(s) * item, x) for x, s in zip(op.modes.labels, op.modes.strides, strict=True)
              if spec.extent(x) > 1]
    for s, x in sorted(moving, key=lambda t: t[0]):  # (labels need not be comparable)
        if s != run or x in stop:
            break
        run *= spec.extent(x)
    return run


def _row_blocks(extents: Sequence[int], cols: int, k: int, item: int
                ) -> tuple[int, int, int, int] | None:
    """Boxes of T's rows (labels of ``extents``, outermost first) for its blocks, or ``None``.

    ``cols`` is T's row length in elements, ``k`` the GEMM's inner extent. Returns (lead
    labels, one index of each per block; indices of the next label per block; rows of T per
    index of it; bytes of a block of the packed operand): blocks of about :data:`TILE_T_BYTES`
    of T and at least as many rows as :data:`TILE_T_BYTES` says, at least two of them.

    Examples
    --------
    >>> _row_blocks([8, 8, 8, 8], 4096, 2, 8)  # 32 rows of 32 KiB: u, l fixed, 4 of d
    (2, 4, 8, 512)
    """
    want = max(TILE_MIN_ROWS, TILE_T_BYTES // max(cols * item, 1),
               min(TILE_GEMM_ROWS, TILE_K_ROWS * k))
    for cut, first in enumerate(extents):
        unit = prod(extents[cut + 1:])
        if unit <= want:
            block = max(1, min(want // unit, first))
            if prod(extents[:cut]) * -(-first // block) < 2:
                return None
            return cut, block, unit, block * unit * k * item
    return None


def _batch_boxes(in_d: Sequence[Label], gemms: int, cols: int, k: int, item: int,
                 thick: OperandSpec, spec: ContractionSpec) -> tuple[int, int, int, int] | None:
    """Boxes of T's rows (``in_d``) with a batch of ``gemms`` GEMMs inside each, or ``None``.

    As :func:`_row_blocks` (``cols`` one GEMM's row length), where every box holds each GEMM's
    rows of it, cut to fewer rows where it would hold more than TILE_BATCH_BYTES (see
    :data:`TILE_BATCH_BYTES`); ``thick`` is the operand the rows come from.
    """
    ext = spec.extent
    tiles = _row_blocks([ext(x) for x in in_d], gemms * cols, k, item)
    if tiles is None:
        return None
    cut, block, unit, _ = tiles
    fit = TILE_BATCH_BYTES // max(gemms * unit * cols * item, 1)
    if 1 <= fit < block and fit * unit * TILE_BATCH_K_ROWS >= k:  # fewer rows, not none
        block = fit
        tiles = (cut, block, unit, block * unit * k * item)
    above = [x for x in in_d[:cut] if ext(x) > 1]
    def run(op: OperandSpec) -> int:
        """Bytes of ``op`` a box reads or writes in one run: `block` indices of the cut."""
        return min(_run_bytes(op, above, spec, item),
                   _run_bytes(op, [*above, in_d[cut]], spec, item) * block)

    if (gemms * block * unit * cols * item > TILE_BATCH_BYTES or run(spec.d) < TILE_LINE
            or (thick.size * item > _l2_bytes() and run(thick) < TILE_SOURCE_RUN)):
        return None
    return tiles


def _pass_order(src: dict[Label, int], dst: dict[Label, int], dst_bytes: int,
                ext: Callable[[Label], int], item: int) -> tuple[list[Label], int]:
    """Order a stream pass over ``src``'s labels and choose how the pool shares it out.

    ``src`` and ``dst`` are the byte strides of the operand walked and of the one added into
    (``dst_bytes`` long). The labels go in ``src``'s memory order, outermost first. Mode 1
    where the first is one of ``dst``'s by at least :data:`STREAM_SPLIT_LINE` bytes (each
    worker adds into its own part); 2 where ``dst`` is small enough for each worker to add into
    its own zeroed copy; else 1 with a label of ``dst``'s moved outermost where ``src`` strides
    along it by at least :data:`STREAM_SPLIT_STRIDE` bytes; else 0 (one thread).

    Examples
    --------
    >>> _pass_order({"i": 4096, "k": 8}, {"i": 8}, 64, {"i": 64, "k": 512}.__getitem__, 8)
    (['i', 'k'], 2)
    """
    order = sorted(src, key=lambda x: -abs(src[x]))
    if order[0] in dst and abs(dst[order[0]]) >= STREAM_SPLIT_LINE:
        return order, 1
    if (dst_bytes <= STREAM_PRIVATE_MAX_BYTES
            and STREAM_PRIVATE_SHARE * dst_bytes <= prod(ext(x) for x in order) * item):
        return order, 2
    outer = next((x for x in order if x in dst and abs(dst[x]) >= STREAM_SPLIT_LINE
                  and abs(src[x]) >= STREAM_SPLIT_STRIDE), None)
    if outer is None:
        return order, 0
    order.remove(outer)
    return [outer, *order], 1


def _stream(spec: ContractionSpec, out: Sequence[Label], item: int, views: bool
            ) -> StreamStep | None:
    """Return the stream of a GEMV-like product that no GEMV runs, or ``None``.

    One operand has free labels (the matrix M), the other none (the vector V), and M holds
    D's labels interleaved with summed ones (``mgzsb,bgmz->gs``: for each ``g``, 638 blocks of
    22 x 27 at scattered places), or (``views``: too many multiply-adds for the loop nest) the
    GEMVs on views that map it are too small for :func:`lower` to run (``qeotr,eq->torq``:
    35190 of 12 x 36): the backend's plan has only its multiply-reduce pass, which runs at a
    fraction of the speed of reading M (it loops in D's order: 36 numbers 73 KB apart per
    element of D, F32, 25-28 ms where the stream takes 2.2 and numpy.einsum 2.3; 129 such
    products of seeds 0-11999 3.5x in geometric mean, 0.70-20x; scaled to 3M multiply-adds
    3.8x), and multiplies out V's isolated labels. The loop nest below that size ran them as
    fast (129 products scaled to 300k multiply-adds: the stream 0.27-3.5x). The stream reads
    M once, in its memory order (see :class:`StreamStep`), V's isolated labels summed while
    packing: ``mgzsb,bgmz->gs`` at 24x22x27x22x29 (F32, 36 MB) 3.6 -> 2.2 ms,
    ``abcde,bd->ace`` at 20x30x20x30x20 (F64) 3.6 -> 2.2 ms, ``gwk,rk->wg`` (r isolated,
    169x218x224x13, F32) 13.7 -> 0.9 ms, two cores. The passes over D (once per element of the
    summed labels outside D's innermost label) move at most twice M's bytes: M holds D's labels
    and theirs. ``out``: D's labels in the program's order (T's strides over them, uncoalesced).
    """
    cls = spec.classes
    ext = spec.extent
    free_a, free_b = spec.size(cls.FA) > 1, spec.size(cls.FB) > 1
    if (free_a == free_b or spec.size((*cls.P, *cls.IA, *cls.IB)) == 1
            or (not views and any(not g.reduced for g in view_gemms(spec)))
            or _views_stream(spec)):
        return None
    mat, vec, viso = (spec.b, spec.a, cls.IA) if free_b else (spec.a, spec.b, cls.IB)
    m_st = {x: s * item for x, s in zip(mat.modes.labels, mat.modes.strides, strict=True)
            if ext(x) > 1}
    d_st = {x: s * item for x, s in zip(spec.d.modes.labels, spec.d.modes.strides, strict=True)}
    d_order = [x for x in sorted(m_st, key=lambda x: -abs(m_st[x])) if x in d_st]
    d_bytes = prod(ext(x) for x in d_order) * item
    order, mode = _pass_order(m_st, d_st, d_bytes, ext, item)
    t_st = dict(zip(d_order, _contiguous([ext(x) for x in d_order], item), strict=True))
    private = mode == 2
    if private:  # the pass adds into T, laid out as M holds D's labels
        d_st = t_st
        if order[0] in t_st and t_st[order[0]] >= STREAM_SPLIT_LINE:
            mode = 3  # M's outermost label one of T's: the workers share one T out along it
    v_labels = set(vec.modes.labels)
    shared = [x for x in order if x in v_labels]
    if not any(ext(x) > 1 for x in viso):
        shared = _stream_spread(order, shared, m_st, d_st, ext, item, mat.size * item)
    pack, copies = _nest(vec, shared, list(viso), spec, item)
    copies = copies or (spec.rule.is_complex and mat.conjugates)
    v_st = dict(zip(shared, _contiguous([ext(x) for x in shared], item), strict=True))
    v_sum: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] = ((), (), ())
    permute, v_mode = False, 0
    if any(ext(x) > 1 for x in viso):  # V walked once, in its memory order
        src = {x: s * item for x, s in zip(vec.modes.labels, vec.modes.strides, strict=True)
               if ext(x) > 1}
        kept = [x for x in sorted(src, key=lambda x: -abs(src[x])) if x in shared]
        permute = kept != [x for x in shared if ext(x) > 1]
        into = dict(zip(kept, _contiguous([ext(x) for x in kept], item), strict=True)) \
            if permute else v_st
        walk, v_mode = _pass_order(src, into, prod(ext(x) for x in shared) * item, ext, item)
        _, w_ext, (w_src, _o, _c, w_dst) = _coalesce(
            0, [ext(x) for x in walk], [[src[x] for x in walk], [0] * len(walk),
                                         [0] * len(walk), [into.get(x, 0) for x in walk]])
        v_sum = (tuple(w_ext), tuple(w_src), tuple(w_dst))
        pack = (len(shared), tuple(ext(x) for x in shared), tuple(into.get(x, 0) for x in shared))
    _, extents, (sm, sv, _c, sd) = _coalesce(
        0, [ext(x) for x in order],
        [[m_st[x] for x in order], [v_st.get(x, 0) for x in order], [0] * len(order),
         [d_st.get(x, 0) for x in order]])
    own, bytes_own = _own_block(extents, sv, sd, item)
    return StreamStep(swap=free_b, pack=pack,
                      bytes_v=prod(ext(x) for x in shared) * item if copies else 0,
                      mode=mode, extents=tuple(extents),
                      strides=(tuple(sm), tuple(sv), tuple(sd)),
                      bytes_t=d_bytes if private else 0,
                      t_strides=tuple(t_st.get(x, 0) for x in out) if private else (),
                      v_sum=v_sum, v_permute=permute, v_mode=v_mode, own=own,
                      bytes_own=bytes_own)


def _own_block(extents: Sequence[int], sv: Sequence[int], sd: Sequence[int], item: int
               ) -> tuple[int, int]:
    """Return the stream's block whose own labels M sums first, and its buffer's bytes.

    Labels of M's own (V's and D's strides 0) outside others of the pass make each product
    of the labels inside them once per index of theirs: ``riedysa,rae->ysi`` (F32) dotted 13
    rows of 6 numbers into each element of D, against one run of V. The block runs from the
    outermost label (not the first: the workers share that out) from which the block's other
    labels hold at most STREAM_OWN_BYTES; for each index of the labels outside it, the
    stream sums M's block over its own labels into a buffer (a walk in M's memory order), then
    streams the buffer as it would have streamed M. ``(0, 0)`` where no label of M's own lies
    outside another label of such a block, or where the pass's innermost run is long enough to
    stream at the rate of reading M (STREAM_OWN_DOT_RUN, STREAM_OWN_RUN).

    Examples
    --------
    >>> _own_block([13, 6, 13, 210, 6], [144, 24, 0, 0, 4], [0, 0, 0, 4, 0], 4)
    (1, 30240)
    >>> _own_block([13, 6, 13, 210, 6], [144, 24, 0, 0, 4], [0, 0, 4, 4, 0], 4)
    (0, 0)
    """
    n = len(extents)
    dot, row = sd[-1] == 0 and sv[-1] != 0, sv[-1] == 0 and sd[-1] != 0
    if not (dot or row) or extents[-1] * item > (STREAM_OWN_DOT_RUN if dot else STREAM_OWN_RUN):
        return 0, 0  # (a batch label's short runs sum over a label outside in registers)
    mine = [sv[x] == 0 and sd[x] == 0 for x in range(n)]
    for first in range(1, n - 1):
        bytes_own = item * prod(extents[x] for x in range(first, n) if not mine[x])
        if bytes_own > STREAM_OWN_BYTES:
            continue
        if bytes_own >= STREAM_OWN_MIN_BYTES and any(
                mine[x] and not all(mine[x + 1:]) for x in range(first, n - 1)):
            return first, bytes_own
        break
    return 0, 0


def _views_stream(spec: ContractionSpec) -> bool:
    """Whether the GEMVs on views of a GEMV-like product read its matrix along memory.

    :func:`reducing_view_gemm`'s GEMVs (BLAS's) stream the operand at the copy rate where
    their matrix (its view in the larger operand) has a unit stride; where it has none, each
    call reads a number per line (``bcpy,bcy->p``, F32: 1488 dots of 9520 terms 1488 apart;
    the backend's plan copied A, 8.4 ms, where the stream takes 1.8).
    """
    g = reducing_view_gemm(spec)
    if g is None:
        return False
    mat = g.a if spec.a.size >= spec.b.size else g.b
    return any(e > 1 and abs(s) == 1 for e, s in zip(mat.shape[-2:], mat.strides[-2:], strict=True))


def _gemv_in_place(spec: ContractionSpec, out: Sequence[Label], item: int
                   ) -> tuple[GemmStep, PackStep] | None:
    """Return one GEMV reading a GEMV-like product's matrix where it lies, or ``None``.

    Where the GEMVs on views read the matrix across its lines (:func:`_views_stream`) and the
    matrix lies as one (its free labels outside its summed ones, or inside): the vector
    packed, one GEMV (BLAS's, at the copy rate) in place of the stream. Of seeds 0-11999, ten
    products have such GEMVs on views: five lie so, 1.05-40x the backend's plan
    (``fusp,pus->f``, F32, 2125 dots of 5700 terms 25 apart: 40.9 -> 1.0 ms; ``gkpy,ykp->g``,
    C128, 123 -> 8.6; the stream ran them 0.63-32x), the five others stream, 3.1-5.6x.
    Where they stream, it runs too unless it would read the matrix in short runs of all its
    outputs (:data:`GEMV_COLUMN_MIN_BYTES`): 48 GEMVs on views of 576 x 12 summed after,
    ``iabj,jb->ia`` (F64, o=12, v=48), 0.17 ms, one GEMV 0.10.
    """
    if reducing_view_gemm(spec) is None:
        return None
    runs = _ttgt_runs(spec, out, item, gemv=True)
    if runs is None or (runs[1].bytes_a if spec.a.size >= spec.b.size else runs[1].bytes_b):
        return None
    if _views_stream(spec) and _short_columns(runs[0], item):
        return None
    return runs


def _short_columns(step: GemmStep, item: int) -> bool:
    """Whether one GEMV reads its matrix in runs of all its outputs, shorter than a bound.

    Such a matrix holds each summed element's outputs side by side: BLAS's GEMV adds
    :data:`GEMV_COLUMN_MIN_BYTES` or less per pass over them (see there).
    """
    if step.m == 1:  # D (1 x n) = L (1 x k) op(R): R's rows hold the outputs unless transposed
        inner, outputs = step.trans_right == NO_TRANS, step.n
    else:  # D (m x 1) = op(L) R: L's columns hold them where it is read transposed
        inner, outputs = step.trans_left != NO_TRANS, step.m
    return inner and outputs * item < GEMV_COLUMN_MIN_BYTES


def _stream_spread(order: Sequence[Label], shared: list[Label], m_st: dict[Label, int],
                   d_st: dict[Label, int], ext: Callable[[Label], int], item: int,
                   m_bytes: int) -> list[Label]:
    """V's packed labels, spread over the labels of D inside which its innermost run repeats.

    Where M's innermost labels lie in D as in M (one contiguous run in both) and mix V's
    labels with labels of D only, the stream's innermost loop is V's short run, once per
    index of the others (``snqa,sa->qa``: runs of 13 in rows of 1430). V packed with copies
    along those labels too (at most :data:`STREAM_SPREAD_SHARE` of M's bytes) makes the whole
    run one loop.

    Examples
    --------
    >>> st = {"s": 4 * 1430 * 86, "n": 4 * 1430, "q": 52, "a": 4}
    >>> _stream_spread(["s", "n", "q", "a"], ["s", "a"], st, {"q": 52, "a": 4},
    ...                {"s": 131, "n": 86, "q": 110, "a": 13}.__getitem__, 4, 4 << 24)
    ['s', 'q', 'a']
    """
    run, inner = item, []
    for x in reversed(order):
        if m_st[x] != run or d_st.get(x) != run:
            break
        inner.append(x)
        run *= ext(x)
    spread = [x for x in inner if x not in shared]
    if not spread or len(spread) == len(inner):
        return shared
    short = item  # the innermost loop as it is: labels all of V's, or all of D's only
    for x in inner:
        if (x in shared) != (inner[0] in shared):
            break
        short *= ext(x)
    if short >= STREAM_SPREAD_RUN:
        return shared
    if prod(ext(x) for x in shared) * prod(ext(x) for x in spread) * item * \
            STREAM_SPREAD_SHARE > m_bytes:
        return shared
    return [x for x in order if x in shared or x in spread]


def _views_below_ttgt(spec: ContractionSpec, step: GemmStep, pack: PackStep) -> bool:
    """Whether the cost model prices some GEMMs on views below TTGT ``step`` and ``pack``."""
    model, cplx = MachineModel(), spec.rule.is_complex
    views = [view_gemm_seconds(g.m, g.n, g.k, g.calls, model, cplx)
             for g in view_gemms(spec) if not g.reduced]
    ttgt = ttgt_seconds(step.m, step.n, step.k, prod(step.batch_extents),
                        pack.bytes_a + pack.bytes_b, pack.bytes_t, model, cplx)
    return bool(views) and min(views) < ttgt


def _ttgt_runs(spec: ContractionSpec, out: Sequence[Label], item: int, gemv: bool = False,
               priced: bool = True, flip: bool = False, tried: bool = False
               ) -> tuple[GemmStep, PackStep] | None:
    """Return TTGT's GEMM and packing where the executor runs them for ``spec``.

    ``None`` where it does not: the backend's plan runs the product. ``gemv``: the GEMV of
    :func:`_one_gemv` (a side of 1; chosen over the GEMVs on views by their layout, not priced).
    ``priced=False``: whatever the cost model says of the GEMMs on views (the alternative a
    plan tries, :func:`alternative`). ``flip``: the GEMMs in the other orientation.
    ``tried``: packed in blocks within the looser limits of an alternative (as unpriced).
    """
    if not _gemm_sized(spec, gemv):
        return None
    step, pack = _ttgt(spec, out, item, flip, tried or not priced)
    flops = _gemm_flops(spec)
    slabs = _slabs(spec, step, pack, item)
    if slabs is not None:
        return (slabs, pack) if _ttgt_scratch(replace(pack, bytes_t=0)) <= TTGT_MAX_BYTES \
            else None
    if _ttgt_scratch(pack) > TTGT_MAX_BYTES or (
            step.batch_extents and flops > GEMM_BATCH_MAX_FLOPS
            and not pack.bytes_a + pack.bytes_b and not pack.strided) or (
            flops > VIEWS_TO_TTGT_MAX_FLOPS and (
                (not gemv and priced and _views_below_ttgt(spec, step, pack))
                or (not pack.d_direct and pack.bytes_t > TTGT_MAX_BYTES))):
        return None
    return step, pack


def _gemv_ttgt_runs(spec: ContractionSpec, out: Sequence[Label], item: int
                    ) -> tuple[GemmStep, PackStep] | None:
    """Return the TTGT GEMVs on views are priced against (:func:`_ttgt_cheaper`), or ``None``.

    :func:`_ttgt_runs`' TTGT, or where its scratch exceeds TTGT_MAX_BYTES, the same packed in
    blocks within the limits of an alternative (thin sides up to THIN_MAX, see
    THIN_SCRATCH_MAX): each GEMV on views reads its whole matrix, which the GEMVs of one batch
    read again for each index of their vector's other free labels, where a block's GEMM reads
    it once for the block (``npldzt,dztjhp->jplnh``, F64: 17280 GEMVs of 20 x 1188, A's 82
    MB read as 432 matrices 40 times each; TTGT packs all of A, beyond the scratch bound:
    130 -> 18 ms, numpy.einsum 65 ms; the only product of seeds 0-11999 this changes).
    """
    return _ttgt_runs(spec, out, item) or _ttgt_runs(spec, out, item, tried=True)


def _slabs(spec: ContractionSpec, step: GemmStep, pack: PackStep, item: int
           ) -> GemmStep | None:
    """Return one large GEMM writing D itself as a batch of slabs of its rows, or ``None``.

    A GEMM whose T lies as D and as C, of at least :data:`SLAB_FROM_BYTES`, runs as GEMMs
    of :data:`SLAB_BYTES` of D's rows each (a divisor of its rows, at least
    :data:`SLAB_MIN_ROWS` and at least k: each slab's GEMM reads all of the right operand),
    shared out over the workers: the executor sets each slab from C just before its GEMM adds
    into it while in cache, where T would take a pass over memory and a scratch as large as D
    (or, without C, each writes D). The right operand is the same for each slab (batch stride
    0). Of seeds 0-39999, 28 products are so from 16 MiB: 0.97-10.7x (geometric mean 1.81x);
    ``fcr,fuy->uyrc`` (F64, T 71 MB: beyond TTGT_MAX_BYTES, it ran as 3168 GEMVs on views)
    57 -> 9.7 ms, ``uob,bxy->uoyx`` 122 -> 11.5 ms; slabs thinner than k (each reading the
    right operand for fewer rows than it holds) lost to 0.66x.

    Examples
    --------
    >>> # 2800 x 3168 (F64), 15 long: slabs of 40 rows; 64 long: none (each slab of 41 rows
    >>> # or fewer would read more of the right operand than it writes of D)
    >>> step = GemmStep((), (), (), (), True, NO_TRANS, TRANS, 2800, 3168, 15, 15, 15, 3168)
    >>> _slab_rows(step, 8), _slab_rows(replace(step, k=64), 8)
    (40, None)
    """
    if (step.batch_extents or pack.blocked >= 0 or not pack.d_direct or step.summed
            or pack.bytes_t < SLAB_FROM_BYTES or spec.c.strides != spec.d.strides
            or spec.c.extents != spec.d.extents):
        return None
    rows = _slab_rows(step, item)
    if rows is None:
        return None
    lstep = (item if step.trans_left == TRANS else step.ld_left * item) * rows
    return replace(step, batch_extents=(step.m // rows,),
                   batch_a=(0,) if step.swap else (lstep,),
                   batch_b=(lstep,) if step.swap else (0,),
                   batch_d=(rows * step.n * item,), m=rows)


def _slab_rows(step: GemmStep, item: int) -> int | None:
    """Rows of T per slab (:func:`_slabs`): its largest divisor of at most SLAB_BYTES."""
    most = SLAB_BYTES // max(step.n * item, 1)
    for rows in range(min(most, step.m // 2), max(SLAB_MIN_ROWS, step.k) - 1, -1):
        if step.m % rows == 0:
            return rows
    return None


def _one_gemv(spec: ContractionSpec, g: ViewGemm, out: Sequence[Label], item: int,
              any_run: bool = False) -> tuple[GemmStep, PackStep] | None:
    """Return one GEMV over the thick operand's free labels where GEMVs on views ``g`` scatter.

    GEMV-like products (one side without free labels) whose GEMVs on views read each matrix
    in rows of at most :data:`GEMV_SCATTER_RUN` bytes (``any_run``: of any length), apart from
    one another, run as TTGT instead where it packs nothing of the thick operand (the vector
    may be packed): one GEMV reads it in order, its result stored into D. ``None`` where that
    does not hold.
    """
    cls = spec.classes
    if (g.calls == 1 or g.reduced or min(g.m, g.n) != 1 or max(g.m, g.n) == 1
            or min(spec.size(cls.FA), spec.size(cls.FB)) != 1):
        return None
    thick = g.a if g.n == 1 else g.b
    (e0, e1), (s0, s1) = thick.shape[-2:], thick.strides[-2:]
    # each row: ``run`` numbers along the unit stride, rows ``gap`` apart (equal: one block)
    run, gap = (e1, abs(s0)) if abs(s1) == 1 else (e0, abs(s1)) if abs(s0) == 1 else (0, 0)
    if run == gap or (run * item > GEMV_SCATTER_RUN and not any_run):
        return None
    runs = _ttgt_runs(spec, out, item, gemv=True)
    if runs is None or (runs[1].bytes_a if thick is g.a else runs[1].bytes_b):
        return None
    return runs


def _ttgt_cheaper(spec: ContractionSpec, g: ViewGemm, out: Sequence[Label], item: int) -> bool:
    """Whether the cost model prices TTGT below the GEMMs on views ``g`` (blas's own rule).

    Many small GEMMs on views lose to one packed GEMM: ``bca,dc->abd`` (64x8x3, 32x8, C128)
    is 64 GEMMs of 3x32x8 on views, where TTGT packs A into one of 192x32x8. Above
    VIEWS_TO_TTGT_MAX_FLOPS only GEMVs on views (a side of 1) are priced so, and only against
    a TTGT the executor runs (see VIEWS_TO_TTGT_MAX_FLOPS).
    """
    if g.calls == 1 or not _gemm_sized(spec):
        return False
    if spec.flops > VIEWS_TO_TTGT_MAX_FLOPS:
        if min(g.m, g.n) > 1:
            return False
        runs = _gemv_ttgt_runs(spec, out, item)
        if runs is None and _gemm_flops(spec) > TTGT_MAX_FLOPS:
            runs = _ttgt(spec, out, item)  # what the backend's plan runs at this size
        if runs is None:
            return False
        # blocks one index of whose lead labels read the thick operand in runs shorter than
        # TILE_SOURCE_RUN bytes pack that much slower (dom,nod->dnm, B 47 MB along d, lost to
        # its views 33.9 ms against 13.4, when such blocks were priced as a copy, and 31
        # products of seeds 0-11999 whose views are thousands of tiny GEMVs gained 1.7-18x,
        # geometric mean 3.3x, when they stopped being refused outright: mhjq,jhct->jtmqc,
        # F64, 158760 GEMVs of 47 x 55, 45 -> 12 ms; leads of 8 bytes still lost, 0.8x)
        run = min((abs(lead[1]) for lead in runs[1].block_lead), default=TILE_SOURCE_RUN)
        slow = max(1.0, TILE_SOURCE_RUN / max(run, 1))
        step, pack = runs
    else:
        step, pack = _ttgt(spec, out, item)
        slow = 1.0
    model, cplx = MachineModel(), spec.rule.is_complex
    ttgt = ttgt_seconds(step.m, step.n, step.k, prod(step.batch_extents),
                        round((pack.bytes_a + pack.bytes_b) * slow), pack.bytes_t, model, cplx)
    return ttgt < view_gemm_seconds(g.m, g.n, g.k, g.calls, model, cplx)


def lower(spec: ContractionSpec, *, gemm: bool = True) -> Lowered | None:
    """Lower ``spec`` for the compiled executor, or ``None`` when it does not cover it.

    The answer is remembered per spec (``auto`` asks before the plan compiles it).

    Parameters
    ----------
    spec
        The validated product.
    gemm
        Whether GEMM steps may be used (a BLAS library was registered with the executor).
    """
    return _lower(spec, gemm)


def alternative(spec: ContractionSpec, *, gemm: bool = True) -> Lowered | None:
    """Return another route where :func:`lower`'s is one the cost model cannot weigh.

    That is TTGT against GEMMs on views, a batch's TTGT storing its whole T against the same
    packed in blocks, each block's T stored while in cache (from :data:`THIN_BATCH_TRIED_BYTES`),
    or else a large TTGT into a small D the other way round (:func:`_flipped`): of the 28
    products of seeds 0-5999 that have both, on 15 measured, the blocked one ran 1.50x the
    whole T in geometric mean (1.00-2.81x), the other orientation 1.00x (0.77-1.36x).
    Above :data:`VIEWS_TO_TTGT_MAX_FLOPS`, GEMMs on views with both sides above 1 stay as they
    are, unpriced: a TTGT the executor runs ran 0.32-7.7x their speed on
    104 seeded products (2-core Xeon; 1.32x in geometric mean, 18 below 0.95x; on a 2-core EPYC
    1.08x, 19 of 48 slower), and no feature of the two (calls, m, n, k, the bytes each reads or
    packs, the thinness of TTGT's GEMM) told the two groups apart. So do GEMVs on views that
    scatter their matrix in rows longer than :data:`GEMV_SCATTER_RUN` bytes, against one GEMV
    reading it in order (``ofqx,of->xq``, C64, 21 GEMVs in rows of 600 bytes: 5.6 ms against
    2.4; at 632 bytes and more one GEMV had run 0.76-1.27x their speed). GEMVs on views
    with neither of those have the stream through their matrix as the alternative, where the
    lowering would stream it without them: on 31 seeded products (30000-30599) whose GEMVs on
    views the executor runs, the stream ran 0.39-8.7x their time, 16 faster by 10% or more
    (``wozjr,zo->jowr``, F32, 10230 GEMVs of 32 x 29: 2.25 ms against 0.98 streamed;
    ``vynsr,ns->rvny``, F64, 19968 of 34 x 17: 9.0 against 78), and no feature of the two
    (calls, m, k, D's size) told them apart; a single GEMV, which reads its matrix in order,
    is not tried (the stream 0.94-1.81x its time on seven). A plan may try both on the calls
    it makes anyway (:class:`pytapp.kernels.routes.RouteTrial`). ``None`` where ``lower``
    chose anything else, or where the executor runs no such TTGT (or stream) of ``spec``.

    Examples
    --------
    >>> import numpy as np
    >>> from pytapp.analysis.spec import build_spec
    >>> from pytapp.datatypes import Datatype
    >>> from pytapp.precision import Prectype
    >>> def item(shape, labels):  # a contiguous F64 operand
    ...     strides = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
    ...     return Datatype.F64, shape, strides, tuple(labels), 0
    >>> d = item((46, 13, 8, 37, 12), "wdnvm")
    >>> spec = build_spec(item((37, 13, 12, 26), "vdmo"), item((26, 46, 8), "own"), d, d,
    ...                   Prectype.DEFAULT)
    >>> lower(spec).kind.name, alternative(spec).kind.name
    ('GEMM', 'TTGT')
    """
    first = _lower(spec, gemm)
    if first is None:
        return None
    if first.kind is Step.TTGT:
        blocked = _lower(spec, gemm, tried=True)  # a batch's T stored block by block
        if blocked is not None and blocked.pack != first.pack:
            return blocked
        return _flipped(spec, first, gemm)
    if first.kind is not Step.GEMM:
        return None
    other = _lower(spec, gemm, True)
    if other is None:
        other = _flipped(spec, first, gemm)
    if (other is None and first.gemm is not None and min(first.gemm.m, first.gemm.n) == 1
            and prod(first.gemm.batch_extents) > 1):  # (one GEMV reads its matrix in order)
        other = _lower(spec, gemm, streamed=True)
    return other


def _flipped(spec: ContractionSpec, first: Lowered, gemm: bool) -> Lowered | None:
    """Return TTGT with ``first``'s GEMMs the other way round, where D's store is small.

    TTGT's orientation follows D's layout (T runs along D, so that its store streams, or the
    GEMMs write D), as one GEMM on views must (it writes D), but where D is small next to the
    operands a store costs little and the BLAS's speed in each orientation decides; that
    differs by several times and no rule tells which: ``wml,xmw->lx`` (F32, a GEMM of 32 x 292
    x 44885, D 37 KB) 12.1 ms as D's layout asks, 8.2 the other way round; on 80 of the 2203
    seeded TTGT products of seeds 0-11999 above VIEWS_TO_TTGT_MAX_FLOPS whose D holds at most
    an eighth of the operands' numbers, the other way ran 0.43-1.60x (F32 0.71-1.55x,
    F64 0.75-1.39x), 23 faster by more than 10%: the best of the two 1.086x in geometric mean.
    Of one GEMM on views (``opr,opl->rl``, F64, 38 x 172 x 18612: 5.21 ms in D, 2.62 the other
    way round into T, packing nothing), on the 90 such products of seeds 0-11999 whose D holds
    at most an eighth, 0.31-2.43x, 36 faster by more than 10%, the best of the two 1.138x. The
    smaller D, the more the other way gains: from a 32nd (TTGT_FLIP_D_SHARE) the best of the
    two is 1.181x on 64 of those GEMMs (91% of what all 90 gain) and 1.099x on 49 of the TTGTs
    (70%); between an 8th and a 32nd, each trial costs what the slower way loses on its first
    two calls, where it is often the slower (``ijef,abef->ijab``, F64, 144 x 2304 x 2304, D a
    17th: 13.1 ms in D, 17.7 the other way). A plan tries both on its calls (auto against blas,
    which does not, in the bench's harness: on 40 flipped TTGTs from an 8th 1.074x,
    0.78-1.54x, on 40 GEMMs on views from a 32nd 1.109x, 0.80-2.10x; the trial's few calls,
    interleaved with other libraries', picked the slower four and five times).
    """
    step = first.gemm
    if (step is None or step.m == 1 or step.n == 1 or step.summed
            or _gemm_flops(spec) <= VIEWS_TO_TTGT_MAX_FLOPS
            or spec.d.size * TTGT_FLIP_D_SHARE > spec.a.size + spec.b.size):
        return None
    other = _lower(spec, gemm, first.kind is Step.GEMM, True)
    return other if other is not None and other.gemm != step else None


def _unpriced_views(spec: ContractionSpec, g: ViewGemm) -> bool:
    """Whether GEMMs on views ``g`` stay without a price against TTGT (:func:`alternative`)."""
    return (g.calls > 1 and not g.reduced and min(g.m, g.n) > 1
            and spec.flops > VIEWS_TO_TTGT_MAX_FLOPS and _gemm_sized(spec))


def _unpriced_gemv(spec: ContractionSpec, g: ViewGemm, out: Sequence[Label],
                   item: int) -> tuple[GemmStep, PackStep] | None:
    """Return one GEMV where GEMVs on views ``g`` scatter in rows of unpriced length.

    Rows longer than :data:`GEMV_SCATTER_RUN` bytes (:func:`alternative`); else ``None``.
    """
    if spec.flops <= VIEWS_TO_TTGT_MAX_FLOPS or _one_gemv(spec, g, out, item) is not None:
        return None
    return _one_gemv(spec, g, out, item, any_run=True)


def _loop_limit(spec: ContractionSpec, summed: bool, rows: bool, strided: bool = True) -> int:
    """Most multiply-adds of a product the loop nest runs when no GEMM maps it in place.

    ``rows``: the nest would sum D's rows (blocked, as accurate as a long sum needs). Sums
    that no GEMM or GEMV reads in place, not even one GEMV per summed element (blas's reduce
    route), run as loop nests up to :data:`LOOP_MAX_DOTS`: batched dots, and GEMV-like
    products whose matrices stride in both directions (``abcd,acd->adb``: 0.45 -> 0.04 ms);
    so do row-by-row sums, which stream both operands whatever the other routes. ``strided``:
    batched dots longer than :data:`LOOP_MAX_DOT_TERMS` count as short where they stride
    through an operand in runs of :data:`LOOP_DOT_RUN_MIN` or more (the caller asks without it
    first where short rows are the alternative).
    """
    if not summed:
        return LOOP_MAX_ELEMENTWISE
    if _streaming_dots(spec):
        return LOOP_MAX_ELEMENTWISE
    cls = spec.classes
    dots = spec.size(cls.FA) == 1 and spec.size(cls.FB) == 1
    short = (rows or spec.size((*cls.P, *cls.IA, *cls.IB)) <= LOOP_MAX_DOT_TERMS
             or (strided and dots and not _sums_stream(spec)
                 and _inner_run(spec) >= LOOP_DOT_RUN_MIN))
    return LOOP_MAX_DOTS if rows or (short and (dots or reducing_view_gemm(spec) is None)) \
        else LOOP_MAX_MADDS


def _inner_run(spec: ContractionSpec) -> int:
    """Terms the loop nest sums in its innermost loop: the extent of A's fastest summed label."""
    a = dict(zip(spec.a.modes.labels, spec.a.modes.strides, strict=True))
    summed = [x for x in spec.classes.P if spec.extent(x) > 1]
    return spec.extent(min(summed, key=lambda x: abs(a[x]))) if summed else 1


def _streaming_dots(spec: ContractionSpec) -> bool:
    """Whether ``spec`` is a real batch of dots whose sums stream (see below).

    D has labels (or is an F64 scalar: one whole dot, shared out over the pool in chunks), neither
    A nor B a free one, the sums run contiguous in both operands (:func:`_sums_stream`), and D's
    labels lie in their order: the loop nest sums each dot in vector registers (see
    :data:`LOOP_STREAM_DOT_RUN`).
    """
    cls = spec.classes
    f64 = all(op.datatype is Datatype.F64 for op in (spec.a, spec.b, spec.d))
    if not ((spec.d.modes.labels or f64) and not spec.rule.is_complex
            and spec.size(cls.FA) == 1 and spec.size(cls.FB) == 1
            and spec.size(cls.P) >= LOOP_STREAM_DOT_RUN and _sums_stream(spec)):
        return False
    # D's labels in the operands' order: the nest walks D in its own order, and consecutive
    # dots then read consecutive runs (``bnd,bnd->nb`` jumped a page per dot: 1.8-2.1x slower)
    kept = [x for x in spec.d.modes.labels if spec.extent(x) > 1]
    orders = []
    for op in (spec.a, spec.b, spec.d):
        strides = dict(zip(op.modes.labels, op.modes.strides, strict=True))
        orders.append(sorted(kept, key=lambda x: -abs(strides[x])))
    return orders[0] == orders[1] == orders[2]


def _sums_stream(spec: ContractionSpec) -> bool:
    """Whether A and B hold the contracted labels as one unit-stride run each, in one order.

    Then a library dot (or dots of rows) reads every sum in place; no label is summed in one
    operand only.
    """
    cls = spec.classes
    if cls.IA or cls.IB:
        return False
    a, b = (dict(zip(op.modes.labels, op.modes.strides, strict=True))
            for op in (spec.a, spec.b))
    run_a = run_b = 1
    for label in sorted((x for x in cls.P if spec.extent(x) > 1), key=lambda x: abs(a[x])):
        if a[label] != run_a or b[label] != run_b:
            return False
        run_a *= spec.extent(label)
        run_b *= spec.extent(label)
    return True


def _row_sums(nout: int, extents: list[int], strides: list[list[int]], item: int,
              short: bool = False) -> bool:
    """Whether a loop nest sums D's rows, one summed element at a time, rather than elements.

    Where D's innermost label runs at unit (or zero) stride through A and B (through D at any
    stride: each row of D is written once, at the end of its sums), at least
    :data:`ROW_SUM_MIN` long, and the innermost summed label strides through both operands,
    the sums walk memory badly and the rows well: ``kab,kab->ab`` sums 6 terms 64k elements
    apart per element, where 6 passes over rows stream (0.20 -> 0.05 ms, F32). The executor
    adds the rows in blocks of :data:`ROW_SUM_BLOCK` summed elements, block sums added up:
    long sums keep their accuracy. ``item``: bytes per element.

    ``short``: rows of 2 or more, and an operand constant along them may sum along its memory
    (the caller's fallback where no GEMM or GEMV maps the product: short rows beat the
    multiply-reduce pass).

    Examples
    --------
    >>> _row_sums(1, [4096, 6], [[8, 32768], [8, 32768], [0, 0], [8, 0]], 8)
    True
    """
    if nout == 0 or nout == len(extents):
        return False
    r = [st[nout - 1] for st in strides]
    if short:  # an operand constant along the rows may sum along its memory
        return (extents[nout - 1] > 1 and r[3] != 0 and r[0] in (0, item)
                and r[1] in (0, item) and (r[0] or r[1]) != 0
                and all(strides[k][-1] != item for k in (0, 1) if r[k]))
    return (extents[nout - 1] >= ROW_SUM_MIN and r[3] != 0 and r[0] in (0, item)
            and r[1] in (0, item) and (r[0] or r[1]) != 0
            and strides[0][-1] != item and strides[1][-1] != item)


def _rows_cheaper(spec: ContractionSpec, chosen: tuple[ViewGemm, GemmStep] | None,
                  out: Sequence[Label], item: int, madds: int) -> bool:
    """Whether a row-by-row loop nest streams both operands faster than the GEMMs it replaces.

    ``chosen``: the GEMMs on views, else TTGT's. Only GEMMs with a side of 2 to
    ROW_GEMM_THIN elements are weighed, priced at the model's peak rate plus their copies
    (small GEMMs cost the executor far less than the model's call and efficiency terms say):
    what the rows save is TTGT's packing of a large operand. ``gabe,bcge->gaec`` (8x50x64x96,
    64x3x8x96, F32) packs A (9.8 MB) for 768 GEMMs of 50x3x64 (6.4 ms) where the rows of 96
    stream it (1.4 ms); ``cgaf,abcg->cgfb`` (F64) packs only B (0.4 MB) for 576 GEMMs of
    32x3x32: TTGT 0.28 ms, rows 0.43 ms.
    """
    model, cplx = MachineModel(), spec.rule.is_complex
    if chosen is not None:
        g = chosen[0]
        thin, copied = min(g.m, g.n), 0
    elif _gemm_sized(spec):
        step, pack = _ttgt(spec, out, item)
        thin, copied = min(step.m, step.n), pack.bytes_a + pack.bytes_b + pack.bytes_t
    else:
        return False
    other = 2 * copied / model.bandwidth + spec.flops / model.gemm_flops
    rows = madds * item * (ROW_SUM_COMPLEX if cplx else 1.0) / ROW_SUM_BYTES
    return 2 <= thin <= ROW_GEMM_THIN and rows < other  # (GEMVs stream at the copy rate)


def _rows_nest(out: Sequence[Label], summed: Sequence[Label], by_label: list[dict[Label, int]],
               spec: ContractionSpec, item: int, short: bool = False,
               ) -> tuple[int, list[int], list[list[int]]] | None:
    """Return a loop nest summing D's rows along a label A or B reads at unit stride, or None.

    D's labels ``out`` come in D's memory order; where its innermost one strides through the
    operands, a D label that an operand reads along memory is taken innermost instead (D's row
    then strides, written once per row): ``dacb,cd->ba`` (64x2x256x16, F32) sums rows of 16
    along ``b`` instead of dots strided by 16 (0.59 -> 0.21 ms, a packed GEMV before).
    """
    for x in sorted(out, key=lambda y: -spec.extent(y)):
        if (spec.extent(x) < (2 if short else ROW_SUM_MIN)
                or not any(s.get(x) == 1 for s in by_label[:2])):
            continue
        labels = [*(y for y in out if y != x), x, *summed]
        strides = [[s.get(y, 0) * item for y in labels] for s in by_label]
        nest = _coalesce(len(out), [spec.extent(y) for y in labels], strides)
        if _row_sums(*nest, item, short):
            return nest
    return None


def _coalesce(nout: int, extents: list[int],
              strides: list[list[int]]) -> tuple[int, list[int], list[list[int]]]:
    """Merge each loop label into the next where every operand steps over both as one.

    Outer label ``x`` and the inner ``y`` after it (both D's, or both summed) merge when each
    operand's stride of ``x`` is its stride of ``y`` times ``y``'s extent (zero in both where
    it lacks them); labels of extent 1 are dropped (one of D's is kept where all are: summed
    ones of extent 1 sum one term, an elementwise product). The innermost
    loop, a plain vectorised one, then runs as long as memory allows: an outer product
    ``c,ebg->cebg`` (32 and 256x12x2, F32) looped over a ``g`` of 2 in 375 us, over the
    merged ``ebg`` in 21 us. Returns the new ``nout``, extents and strides (per operand).

    Examples
    --------
    >>> _coalesce(2, [4, 3, 5], [[0, 0, 4], [12, 4, 0], [0, 0, 0], [12, 4, 0]])
    (1, [12, 5], [[0, 4], [4, 0], [0, 0], [4, 0]])
    """
    groups = [range(nout), range(nout, len(extents))]
    new_ext: list[int] = []
    new_st: list[list[int]] = [[] for _ in strides]
    counts = []
    for group in groups:
        start = len(new_ext)
        for i in group:
            if extents[i] == 1:
                continue
            if len(new_ext) > start and all(
                    st[-1] == s[i] * extents[i] for st, s in zip(new_st, strides, strict=True)):
                new_ext[-1] *= extents[i]
                for st, s in zip(new_st, strides, strict=True):
                    st[-1] = s[i]
                continue
            new_ext.append(extents[i])
            for st, s in zip(new_st, strides, strict=True):
                st.append(s[i])
        if group and len(new_ext) == start and group is groups[0]:  # D's of extent 1: keep one
            new_ext.append(1)
            for st, s in zip(new_st, strides, strict=True):
                st.append(s[group[0]])
        counts.append(len(new_ext) - start)
    return counts[0], new_ext, new_st


def _coalesce_store(nout: int, extents: list[int], strides: list[list[int]],
                    pack: PackStep) -> tuple[int, list[int], list[list[int]], PackStep]:
    """Merge D's labels that T, C and D step over as one, for TTGT's store (its epilogue).

    A and B are read by the packing nests, not over these labels: their strides over D's
    merged labels are set to 0. A store into D in T's own order is then one plain loop
    (``bdfg,egbc->dfec``: 1.5M elements, looped over ``c`` of 3 before).
    """
    rows = [strides[2][:nout], strides[3][:nout], list(pack.t_strides)]
    # (a blocked label stays a label of its own: each block's store cuts it)
    kept = [pack.block_store, *(b[2] for b in pack.block_lead)]
    marks = [[int(i == j) for i in range(nout)] for j in kept]
    merged, ext, (c, d, t, *marked) = _coalesce(nout, extents[:nout], [*rows, *marks])
    summed = extents[nout:]
    new = [[0] * merged + row[nout:] for row in strides[:2]]
    new += [c + strides[2][nout:], d + strides[3][nout:]]
    at = [m.index(1) if j >= 0 else -1 for j, m in zip(kept, marked, strict=True)]
    return merged, ext + summed, new, replace(
        pack, t_strides=tuple(t), block_store=at[0],
        block_lead=tuple((e, s, i, o) for (e, s, _, o), i in zip(pack.block_lead, at[1:],
                                                                strict=True)))


@functools.cache
def _l2_bytes() -> int:
    """Bytes of one core's L2 cache (1 MiB where the system does not say)."""
    try:
        size = os.sysconf("SC_LEVEL2_CACHE_SIZE")
    except (ValueError, OSError):
        size = 0
    return size if size > 0 else 1 << 20


def _planes(extents: Sequence[int], strides: Sequence[Sequence[int]],
            item: int) -> tuple[int, tuple[int, ...]]:
    """Choose the blocks of an elementwise loop nest whose A or B runs along another label.

    ``extents`` are the nest's labels (all D's, its fastest last), ``strides`` the byte
    strides of A, B, C and D. An operand of at least :data:`PLANE_MIN_BYTES` qualifies where
    its unit stride is on a label ``x`` other than D's fastest, along which it strides by
    :data:`PLANE_LINE` bytes or more, and where the nest would not find its lines in cache
    when ``x`` steps: the lines of the labels inside ``x`` outgrow the L2 cache, lie in more
    than :data:`PLANE_PAGES` pages, or D's fastest strides by a multiple of
    :data:`PLANE_ALIASING` (B first; A too where it runs
    along the same ``x``). A block starts as D's fastest label by ``x`` (square tiles where
    the two overflow :data:`PLANE_BLOCK_BYTES`), then grows, doubling at most, along the next
    label of D or of the packed operand, whichever reads the shorter run, while it fits.
    Returns which operands are packed (A 1, B 2) and each label's indices per block, or
    ``(0, ())``.

    Examples
    --------
    >>> s = [[48 ** 3 * 4, 48 ** 2 * 4, 48 * 4, 4], [4, 48 * 4, 48 ** 2 * 4, 48 ** 3 * 4]]
    >>> _planes([48, 48, 48, 48], s + [s[0], s[0]], 4)
    (2, (48, 4, 7, 48))
    """
    last = len(extents) - 1
    if last < 1 or 0 in extents:
        return 0, ()

    def fastest(st: Sequence[int]) -> int | None:
        moving = [x for x in range(last + 1) if extents[x] > 1 and st[x]]
        return min(moving, key=lambda x: abs(st[x])) if moving else None

    mask, x = 0, -1
    for k in (1, 0):
        st = strides[k]
        f = fastest(st)
        size = item * prod(e for e, s in zip(extents, st, strict=True) if s)
        if (f is None or f == last or abs(st[f]) != item or abs(st[last]) < PLANE_LINE
                or size < PLANE_MIN_BYTES or min(extents[f], extents[last]) < PLANE_MIN_EXTENT
                or x not in (-1, f)):
            continue
        lines = prod(extents[f + 1:])  # (one per page where D's fastest strides by pages)
        if (abs(st[last]) % PLANE_ALIASING and PLANE_LINE * lines <= _l2_bytes()
                and (abs(st[last]) < PLANE_ALIASING or lines <= PLANE_PAGES)):
            continue  # the nest finds the lines in cache again
        mask, x = mask | 1 << k, f
    if not mask:
        return 0, ()
    cells = PLANE_BLOCK_BYTES // item
    chunk = [1] * (last + 1)
    chunk[last] = min(extents[last], max(isqrt(cells), cells // extents[x]))
    chunk[x] = max(1, min(extents[x], cells // chunk[last]))
    packed = strides[1 if mask & 2 else 0]
    orders = [list(range(last, -1, -1)),
              sorted((y for y in range(last + 1) if packed[y]), key=lambda y: abs(packed[y]))]

    def run(order: list[int]) -> int:
        """Elements of the block's longest run along ``order`` (fastest label first)."""
        n = 1
        for y in order:
            n *= chunk[y]
            if chunk[y] < extents[y]:
                break
        return n

    while True:
        for order in sorted(orders, key=run):
            y = next((y for y in order if chunk[y] < extents[y]), None)
            if y is None:
                continue
            room = cells // (prod(chunk) // chunk[y])
            grown = min(extents[y], room, 2 * chunk[y])
            if grown > chunk[y]:
                chunk[y] = grown
                break
        else:
            return mask, tuple(chunk)


@functools.lru_cache(maxsize=512)
def _lower(spec: ContractionSpec, gemm: bool, ttgt: bool = False, flip: bool = False,
           tried: bool = False, streamed: bool = False) -> Lowered | None:
    """Lower ``spec`` (see :func:`lower`).

    ``ttgt``: TTGT in place of unpriced GEMMs on views; ``flip``: a TTGT's GEMMs in the other
    orientation; ``tried``: a TTGT packed in blocks within an alternative's limits (see
    THIN_BATCH_TRIED_BYTES); ``streamed``: the stream through the large operand in place of
    GEMVs on views (see :func:`alternative`). ``None`` where these ask for a route and it runs
    none.
    """
    dt = _uniform(spec)
    if dt is None:
        return None
    ops = spec.operands
    cls = spec.classes
    # summed labels of extent 1 sum nothing: an elementwise product, not a GEMM with k = 1
    sums = spec.size((*cls.P, *cls.IA, *cls.IB)) != 1
    gemm = gemm and sums
    chosen: tuple[ViewGemm, GemmStep] | None = None
    summed_gemm = summed_view_gemm(spec) if gemm else None
    # GEMV-like products (one free side) with GEMMs looped over summed labels stay with the
    # plan's reduce route and its own mapping, unless a loop nest streams them by rows
    gemv_like = summed_gemm is not None and min(spec.size(cls.FA), spec.size(cls.FB)) == 1
    if ttgt and (summed_gemm is not None or not gemm):
        return None
    if summed_gemm is not None and not gemv_like:  # GEMMs looped over summed labels, added
        # into D in place: what the blas plan runs (one decision), where C's terms lie where
        # D's do
        step = _gemm_step(spec, summed_gemm, dt.itemsize)
        if step is None or spec.c.strides != spec.d.strides:
            return None
        chosen = (summed_gemm, replace(step, summed=summed_gemm.reduced))
    if any(len(op.labels) > MAX_LABELS for op in ops):
        return None
    out = list(spec.d.modes.labels)
    summed = [*cls.P, *cls.IA, *cls.IB]
    if len(out) + len(summed) > MAX_LABELS:
        return None
    item = dt.itemsize
    by_label = [dict(zip(op.modes.labels, op.modes.strides, strict=True)) for op in ops]
    # Innermost: the smallest stride of D among outputs, of A among summed labels.
    out.sort(key=lambda x: -abs(by_label[3][x]))
    summed.sort(key=lambda x: -abs(by_label[0].get(x, 0)))
    labels: Sequence[Label] = [*out, *summed]
    extents = [spec.extent(x) for x in labels]
    madds = prod(extents)
    label_strides = [[s.get(x, 0) * item for x in labels] for s in by_label]
    nout = len(out)
    # the loop nest's labels that step through memory as one, as one
    nest = _coalesce(nout, extents, label_strides)
    rows = _row_sums(*nest, item)  # (never without a summed label left in the nest)
    if not rows and summed:
        moved = _rows_nest(out, summed, by_label, spec, item)
        if moved is not None:
            nest, rows = moved, True
    if gemv_like and not (rows and madds <= _loop_limit(spec, sums, rows) and summed_gemm
                          and summed_gemm.m * summed_gemm.n <= ROW_GEMV_MAX):
        return None
    # short rows (2-7) where the plan has only its multiply-reduce pass (no GEMM, no GEMVs on
    # views): bacd,bc->ad (12x32x256x3) 1.07 -> 0.25 ms (F64), 128x64x256x3 12.5 -> 6.7 ms
    if (not rows and summed and not gemv_like and madds <= LOOP_MAX_ELEMENTWISE
            and madds > _loop_limit(spec, sums, rows, strided=False)
            and not (gemm and _gemm_flops(spec) <= TTGT_MAX_FLOPS and _gemm_sized(spec))
            and reducing_view_gemm(spec) is None):
        moved = _rows_nest(out, summed, by_label, spec, item, short=True)
        if moved is not None:
            nest, rows = moved, True
    one_gemv: tuple[GemmStep, PackStep] | None = None
    gemvs = False
    if chosen is None and gemm and not gemv_like and not streamed:
        chosen = _choose_gemm(spec, item)
        if ttgt and flip:  # one GEMM on views, the other way round into T (see _flipped)
            if chosen is None or chosen[0].calls != 1:
                return None
            chosen, one_gemv = None, None
        elif ttgt:  # the alternative exists only where these views are not priced
            gemv = None if chosen is None else _unpriced_gemv(spec, chosen[0], out, item)
            if chosen is None or not (gemv is not None or _unpriced_views(spec, chosen[0])):
                return None
            chosen, one_gemv = None, gemv
        else:
            one_gemv = None if chosen is None else _one_gemv(spec, chosen[0], out, item)
        if chosen is not None and (
                one_gemv is not None or _ttgt_cheaper(spec, chosen[0], out, item)
                or (rows and chosen[0].m * chosen[0].n == 1)):  # dots that stride: by rows
            # GEMVs on views priced above a TTGT packed in blocks (see _gemv_ttgt_runs)
            gemvs = one_gemv is None and min(chosen[0].m, chosen[0].n) == 1
            chosen = None
    # rows that stream beat GEMMs with a side of a few elements, whatever the size
    by_rows = (not ttgt and rows and gemm and not gemv_like and madds > LOOP_MAX_MADDS
               and _rows_cheaper(spec, chosen, out, item, madds))
    if by_rows:
        chosen = None
    if (one_gemv is None and chosen is None and not ttgt and not by_rows
            and gemm and madds > LOOP_MAX_MADDS):
        one_gemv = _gemv_in_place(spec, out, item)
    pack: PackStep | None = None
    stream: StreamStep | None = None
    # (what a GEMV-like product without a GEMM falls back to; nothing below LOOP_MAX_MADDS)
    candidate = _stream(spec, out, item, madds > _loop_limit(spec, sums, rows)) if (
        not ttgt and chosen is None and one_gemv is None and not by_rows
        and madds > LOOP_MAX_MADDS) else None
    if candidate is not None and (madds > STREAM_OWN_SUMS * (spec.a.size + spec.b.size)
                                  or candidate.extents[-1] >= STREAM_RUN_MIN):
        # labels an operand sums on its own multiply the loop nest's work (each is a loop
        # over every multiply-add), where the stream sums them while packing; and where its
        # innermost loop runs long, the stream reads the matrix in order where the nest jumps
        stream = candidate
    if stream is not None:
        kind, gemm_step = Step.STREAM, None
    elif chosen is not None:
        g, gemm_step = chosen
        kind = Step.GEMM
        adds = "" if not g.reduced else \
            f", summed over {', '.join(map(str, g.batch[:g.reduced]))} in D"
        description = (f"compiled: {g.calls} gemm{'s' if g.calls > 1 else ''} on strided views "
                       f"[m={g.m}, n={g.n}, k={g.k}{adds}] (no copies)")
    elif by_rows or (one_gemv is None and madds <= _loop_limit(spec, sums, rows) and not (
            gemm and madds > GEMM_MIN_MADDS and _ttgt_shaped(spec))):
        kind, gemm_step = Step.LOOP, None
        description = (f"compiled: loop nest over {len(labels)} labels ({madds} multiply-adds"
                       f"{', summed row by row' if rows else ''})")
    elif one_gemv is not None or (gemm and _gemm_sized(spec)):
        kind = Step.TTGT
        if flip and one_gemv is not None:
            return None
        runs = one_gemv if one_gemv is not None else _gemv_ttgt_runs(
            spec, out, item) if gemvs else _ttgt_runs(
            spec, out, item, priced=not ttgt, flip=flip, tried=tried)
        if runs is None:
            return None
        gemm_step, pack = runs
        packed = [r + (f" in blocks of {_bytes(pack.block_bytes)}"
                       if pack.blocked == "AB".index(r) else "")
                  for r, n in (("A", pack.bytes_a), ("B", pack.bytes_b)) if n]
        gemms = "gemms, the whole batch's," if pack.block_gemms > 1 else "gemm"
        slabbed = bool(gemm_step.batch_extents) and pack.d_direct and 0 in (
            *gemm_step.batch_a, *gemm_step.batch_b)
        into = ("gemms into D in slabs of its rows, each set from C first (with C) while in "
                "cache" if slabbed else
                f"each block's {gemms} into a buffer, stored into D with the epilogue while "
                "in cache" if pack.block_store >= 0 and (pack.block_lead or not pack.d_direct) else
                "gemm into D (without C), else each block's into a buffer, stored into D with "
                "the epilogue while in cache" if pack.block_store >= 0 else
                "gemm into D (without C), else into a temporary stored into D with the "
                "epilogue" if pack.d_direct else
                "gemm into a temporary, stored into D with the epilogue")
        description = (f"compiled: ttgt [h={prod(gemm_step.batch_extents)}, m={gemm_step.m}, "
                       f"n={gemm_step.n}, k={gemm_step.k}]"
                       f"{' (D^T = B^T A^T)' if gemm_step.swap else ''} (packs "
                       f"{', '.join(packed) or 'none'}; {into})")
    elif candidate is not None:
        stream, kind, gemm_step = candidate, Step.STREAM, None
    else:
        return None
    if ((ttgt or flip or tried) and kind is not Step.TTGT) or (
            streamed and kind is not Step.STREAM):
        return None
    if stream is not None:
        description = (f"compiled: stream through {'B' if stream.swap else 'A'} "
                       f"[{len(stream.extents)} labels, {prod(stream.extents)} multiply-adds] "
                       f"(packs "
                       f"{('A' if stream.swap else 'B') if stream.bytes_v else 'none'})")
    planes: tuple[int, tuple[int, ...]] = (0, ())
    if kind is Step.LOOP:
        nout, extents, label_strides = nest
        if nout == len(extents):
            planes = _planes(extents, label_strides, item)
        if planes[0]:
            ops_in_blocks = " and ".join(r for i, r in enumerate("AB") if planes[0] >> i & 1)
            description = (f"{description[:-1]}, {ops_in_blocks} packed in D's order in blocks of "
                           f"{item * prod(planes[1]) >> 10} KiB)")
    elif stream is not None:  # D = beta op_C(C) first and op_D last, or T stored into D
        d_rows = [[0] * nout, [0] * nout, *(row[:nout] for row in label_strides[2:]),
                  list(stream.t_strides or [0] * nout)]
        nout, extents, (*label_strides, t_row) = _coalesce(nout, extents[:nout], d_rows)
        if stream.mode >= 2:
            stream = replace(stream, t_strides=tuple(t_row))
    elif pack is not None:  # TTGT's store reads T and C and writes D over D's labels only
        nout, extents, label_strides, pack = _coalesce_store(nout, extents, label_strides,
                                                             pack)
    return Lowered(
        kind=kind, dtype=_CODES[dt], datatype=dt,
        shapes=tuple(op.extents for op in ops),
        strides=tuple(tuple(s * item for s in op.strides) for op in ops),
        footprints=tuple(_byte_footprint(op, item) for op in ops),
        conj=(int(spec.a.conjugates), int(spec.b.conjugates), int(spec.c.conjugates),
              int(spec.d.conjugates)),
        nout=nout, extents=tuple(extents), label_strides=tuple(map(tuple, label_strides)),
        gemm=gemm_step, pack=pack, flops=spec.flops, empty_sum=spec.empty_sum,
        row_sums=ROW_SUM_BLOCK if kind is Step.LOOP and rows else 0,
        description=description, stream=stream, planes=planes,
    )
