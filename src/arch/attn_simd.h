/* The inner loops of the attention kernel, per ISA.  Every implementation
 * computes exactly what the scalar one (attn_simd.c) computes: each is
 * ggml's AVX-512 arithmetic written out, with fused multiply-adds where
 * ggml has them and its 16-lane trees, so the choice never changes a bit. */
#ifndef SLUICE_ATTN_SIMD_H
#define SLUICE_ATTN_SIMD_H

#include <stddef.h>
#include <stdint.h>

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
} attn_simd;

const attn_simd *attn_simd_for(sl_isa isa);

/* The scalar helpers the ISA files share for tails and fallbacks. */
float attn_tree16(const float *l);
float attn_dot_f32_tail(const float *x, const float *y, int np, int n, float sum);
/* The flash loop written with the primitives of OPS. */
void attn_flash_generic(const attn_simd *ops, const uint16_t *k, size_t k_stride, const uint16_t *v, size_t v_stride,
                        const uint16_t *q16, int dk, int dv, int n, float scale, float *out, uint16_t *acc,
                        float *work);

#endif
