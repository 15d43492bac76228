/* Attention: the per-(position, head) kernel over the KV cache, and the
 * standard multi-head / grouped-query attention block.
 *
 * The kernel reproduces ggml's CPU arithmetic for the chosen KV mode:
 *  - SL_KV_F32: scores by ggml_vec_dot_f32 (AVX-512 order), softmax as
 *    ggml_soft_max_ext, values summed with 16 lanes (tinyBLAS sgemm order);
 *  - SL_KV_F16_FLASH: ggml's one-row flash attention (q rounded to f16, f16
 *    dot, online softmax with expf, f16 value accumulator);
 *  - SL_KV_F16: softmax attention over an f16 cache (q and probabilities
 *    rounded to f16 as ggml's mul_mat does).
 * Position i reads keys 0..i in increasing order and nothing else, so the
 * result never depends on the batch it came in. */
#ifndef SLUICE_ATTN_H
#define SLUICE_ATTN_H

#include "arch/attn_simd.h"
#include "arch/sess.h"

typedef struct {
    sl_kv_mode mode;
    const attn_simd *op;
    int dk, dv;
    const void *k; /* key of position p at k + p * k_stride elements */
    size_t k_stride;
    const void *v; /* value of position p at v + p * v_stride elements */
    size_t v_stride;
    float scale;
} attn_src;

/* out[dv] = attention of q[dk] over positions 0..n-1.  tmp: attn_tmp_floats. */
void attn_one(const attn_src *a, const float *q, int n, float *out, float *tmp);

/* Per-thread scratch the kernel needs for model M's layers with n_ctx context. */
size_t attn_tmp_floats(const sl_model *m, int32_t n_ctx);

/* Stores one row of n floats into the cache in the session's precision. */
void kv_store(const sl_session *s, void *dst, const float *src, int n);

/* Standard attention block: xn (T x n_embd, normalised) -> out (T x n_embd),
 * including q/k norms, RoPE, the KV cache write and the output projection. */
int attn_block(sl_session *s, int il, const batch *b, const float *xn, float *out, sl_err *err);

/* The attention of a block whose q (T x H x dk), k and v (T x Hkv x dk/dv)
 * are ready (normalised and rotated): stores k and v in layer IL's cache at
 * the batch's positions, then att (T x H x dv) over positions 0..pos. */
void attn_heads(sl_session *s, int il, const batch *b, const float *q, const float *k, const float *v, float *att);

#endif
