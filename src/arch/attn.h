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
 * Position i reads keys 0..i in increasing order and nothing else.  The
 * result never depends on the batch it came in, except that the default
 * mode follows llama.cpp in one more way: a pass of >= 64 positions uses
 * ggml's tiled flash kernel (f32 q, 64-cell tiles, f32 accumulator), as
 * llama.cpp does for a ubatch of >= 64 tokens (docs/ARCH.md). */
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

/* The attention of a whole pass: T queries (q + (t H + h) dk) of H heads
 * at positions pos0 .. pos0 + T - 1, over a cache whose KV head g holds
 * keys at k + g k_head + p k_stride (values likewise); query head h reads
 * KV head h / group.  att + (t H + h) dv gets the result. */
typedef struct {
    const void *k, *v;
    size_t k_stride, v_stride, k_head, v_head; /* elements */
    int group;
    const float *q;
    float *att;
    int T, H, dk, dv;
    int32_t pos0;
    float scale;
} attn_pass;

/* Runs P with the session's KV mode: per (position, head) attn_one, or,
 * in the default flash mode when the pass has at least ATTN_TILE
 * positions (and dv % 16 == 0), ggml's tiled kernel as llama.cpp's CPU
 * backend runs it for such a batch. */
void attn_run(sl_session *s, const attn_pass *p);

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
