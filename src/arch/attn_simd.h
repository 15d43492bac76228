/* The inner loops of the attention kernel, per ISA.  Every implementation
 * computes exactly what the scalar one (attn_simd.c) computes: each is
 * ggml's AVX-512 arithmetic written out, with fused multiply-adds where
 * ggml has them and its 16-lane trees, so the choice never changes a bit. */
#ifndef SLUICE_ATTN_SIMD_H
#define SLUICE_ATTN_SIMD_H

#include <stddef.h>
#include <stdint.h>

#include "arch/rope.h"
#include "kernels/pool.h"

typedef struct {
    /* ggml_vec_dot_f16: 64-blocks in 4 x 16 lanes, folded, tail in double. */
    float (*dot_f16)(const uint16_t *x, const uint16_t *y, int n);
    /* ggml_vec_dot_f32 as compiled: 4 x 16 lanes, then the tail's groups
     * of 8 and 4 as rounded products added in order, the rest fused. */
    float (*dot_f32)(const float *x, const float *y, int n);
    /* acc[i] = f16(fma(v[i], s, acc[i])) (ggml_vec_mad_f16) */
    void (*mad_f16)(uint16_t *acc, const uint16_t *v, float s, int n);
    /* acc[i] = f16(acc[i] * s) (ggml_vec_scale_f16) */
    void (*scale_f16)(uint16_t *acc, float s, int n);
    /* dst[i] = fp32_to_fp16(src[i]): keys, values and queries entering the
     * f16 cache and kernels (one VCVTPS2PH per 8 or 16 on the SIMD paths) */
    void (*to_f16)(uint16_t *dst, const float *src, int n);
    /* lane[i] = fma(v[i], w, lane[i]), v in f32 or f16 (one position of a
     * 16-lane sgemm accumulation) */
    void (*axpy_f32)(float *lane, const float *v, float w, int n);
    void (*axpy_f16)(float *lane, const uint16_t *v, float w, int n);
    /* out[i] = 16-lane tree of lanes[l * n + i], l = 0..15 */
    void (*tree_rows)(float *out, const float *lanes, int n);
    /* One query row of ggml's one-chunk flash attention over f16 keys and
     * values (positions 0..n-1, strides in elements): out[dv].  acc is
     * scratch of dv halves, work of 3n floats. */
    void (*flash)(const uint16_t *k, size_t k_stride, const uint16_t *v, size_t v_stride, const uint16_t *q16,
                  int dk, int dv, int n, float scale, float *out, uint16_t *acc, float *work);
    /* flash for NH query rows over the same keys and values, each with
     * flash's arithmetic: the rows share the loads, and their f16
     * accumulators are independent chains (each rounding waits for the one
     * before it, so one row's chains leave the core idle).  Rows come HG
     * to a query position, positions consecutive: row i (q16 + i dk16)
     * sees n + i / HG keys and writes out + (i / HG) TSTRIDE + (i % HG)
     * OUT_STRIDE (HG = NH: one position).  NH <= ATTN_FLASH_ROWS; acc: dv
     * halves, work: 3 (n + NH) floats per row.  NULL: flash row by row. */
    void (*flash_rows)(const uint16_t *k, size_t k_stride, const uint16_t *v, size_t v_stride, const uint16_t *q16,
                       size_t dk16, int nh, int hg, int dk, int dv, int n, float scale, float *out,
                       size_t out_stride, size_t tstride, uint16_t *acc, float *work);
    /* ggml's tiled flash attention (what llama.cpp runs for a batch of at
     * least ATTN_TILE query rows) for ROWS consecutive queries of one head:
     * row r (q + r q_stride, out + r out_stride) sees cells 0 .. n0 + r - 1.
     * q in f32, cells in tiles of ATTN_TILE, each score one fused
     * multiply-add chain over dk, per tile the maximum, the f32 accumulator
     * rescaled by expf, the tile's exponentials (ggml_vec_soft_max_f32)
     * added to S, values added by fused multiply-adds in cell order.
     * rows <= ATTN_TILE, dv a multiple of 16; work: attn_tiled_floats. */
    void (*tiled)(const uint16_t *k, size_t k_stride, const uint16_t *v, size_t v_stride, const float *q,
                  size_t q_stride, int rows, int n0, int dk, int dv, float scale, float *out, size_t out_stride,
                  float *work);
    /* One token of the linear-attention layers' short convolution
     * (dn_conv_step, delta.h). */
    void (*conv_step)(const float *w, int K, int64_t C, const float *win_in, float *win_out, const float *x,
                      float *out);
    /* rope_apply: the pairs (i, i + n_rot/2) a vector of them at a time
     * (the same fused multiply-adds and products per pair), other pairings
     * as rope_apply. */
    void (*rope)(const rope_params *rp, const float *cache, float *x);
} attn_simd;

/* ggml_fa_tile_config (GGML_FA_TILE_Q = GGML_FA_TILE_KV = 64). */
enum { ATTN_TILE = 64 };
/* Query rows flash_rows takes at once: 4 rows of dv = 64 fill 16 of the
 * 32 vector registers with accumulators. */
enum { ATTN_FLASH_ROWS = 4 };
size_t attn_tiled_floats(int dk, int dv);

const attn_simd *attn_simd_for(sl_isa isa);

/* The scalar helpers the ISA files share for tails and fallbacks. */
float attn_tree16(const float *l);
float attn_dot_f32_tail(const float *x, const float *y, int np, int n, float sum);
/* One position of the one-row flash loop: the score of key K against Q16,
 * a new maximum *M rescaling the f16 accumulator ACC[dv], value V added
 * with weight exp(score - *M), *S updated (swa.c walks a ring with it). */
void attn_flash_step(const attn_simd *ops, const uint16_t *k, const uint16_t *v, const uint16_t *q16, int dk, int dv,
                     float scale, uint16_t *acc, float *S, float *M);
/* The flash loop written with the primitives of OPS. */
void attn_flash_generic(const attn_simd *ops, const uint16_t *k, size_t k_stride, const uint16_t *v, size_t v_stride,
                        const uint16_t *q16, int dk, int dv, int n, float scale, float *out, uint16_t *acc,
                        float *work);
/* The tiled kernel with plain C arithmetic, row by row (the definition the
 * ISA paths equal). */
void attn_tiled_generic(const uint16_t *k, size_t k_stride, const uint16_t *v, size_t v_stride, const float *q,
                        size_t q_stride, int rows, int n0, int dk, int dv, float scale, float *out, size_t out_stride,
                        float *work);
/* One tile's bookkeeping shared by every path: SC holds the tile's scores
 * (ATTN_TILE, -inf past the last cell); rescales ACC[dv] and *S on a new
 * maximum, turns SC into the exponentials and adds their sum to *S. */
void attn_tile_softmax(float *sc, float *acc, int dv, float *S, float *M);

#endif
